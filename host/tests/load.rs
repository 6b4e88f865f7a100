//! Load: 64 guests at once, 1,000 mixed operations each, on one `cache=loose` 9p mount
//! of one server over loopback TCP, through the embedding API (a runtime running many
//! guests on one mount table, as a serverless host would).
//!
//! Each guest (`guests/load_mix.c`) writes, appends, overwrites, truncates, renames,
//! unlinks, reads back, stats (present and missing names) and lists its own files, and
//! writes and reads back its own 4 KiB slot of four shared files, checking everything
//! against its own model as it goes; at the end it prints the size and FNV-1a hash of
//! every file and slot it owns. The test checks those against the server's disk (no
//! lost or torn write), that the server's live fids come back to what they were before
//! the guests ran (no fid leak), and reports the peak RSS of the whole process (server,
//! mount, 64 guests). This file holds one test, so that the peak is its own.
//!
//! `WASM9P_LOAD_OPS` (default 1000) and `WASM9P_LOAD_GUESTS` (default 64) scale it for
//! long runs.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasm9p_host::mounts::MountTable;
use wasm9p_host::p1::{self, Output, WasiP1Ctx};
use wasm9p_tests::{compile_c_guest, TestServer, Tree};
use wasmtime::{Engine, Linker, Module, Store};

const SLOT: usize = 4096;
const SHARED: usize = 4;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v:?}: not a number"))
        })
        .unwrap_or(default)
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status")
}

#[test]
fn sixty_four_guests_on_one_loose_mount_lose_no_write_and_leak_no_fid() {
    let guests = env_or("WASM9P_LOAD_GUESTS", 64);
    let ops = env_or("WASM9P_LOAD_OPS", 1000);
    let wasm = compile_c_guest(&wasm9p_tests::guest_source("load_mix.c"));
    let export = Tree::build(&[Tree::Dir("shared", vec![])]);
    for k in 0..SHARED {
        std::fs::write(
            export.path().join(format!("shared/s{k}")),
            vec![0u8; guests * SLOT],
        )
        .unwrap();
    }
    let server = TestServer::tcp(export.path());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mounts = runtime
        .block_on(
            MountTable::builder()
                .mount(&format!(
                    "type=9p,source={},target=/data,cache=loose",
                    server.addr
                ))
                .unwrap()
                .build(),
        )
        .unwrap();
    let baseline = server.server.live_fids();
    let engine = Engine::default();
    let module = Module::from_file(&engine, &wasm).unwrap();
    let mut linker = Linker::new(&engine);
    p1::add_to_linker(&mut linker).unwrap();

    // The server's live fids, sampled while the guests run.
    let running = Arc::new(AtomicBool::new(true));
    let peak_fids = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (running, peak, server) = (running.clone(), peak_fids.clone(), server.server.clone());
        std::thread::spawn(move || {
            while running.load(Ordering::Relaxed) {
                peak.fetch_max(server.live_fids(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let start = Instant::now();
    let outputs: Vec<(i32, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..guests)
            .map(|id| {
                let (engine, module, linker) = (&engine, &module, &linker);
                let (ns, handle) = (mounts.namespace().clone(), runtime.handle().clone());
                scope.spawn(move || {
                    let out = Arc::new(Mutex::new(Vec::new()));
                    let wasi = WasiP1Ctx::builder(ns, handle)
                        .args([
                            "load_mix".to_string(),
                            "/data".into(),
                            id.to_string(),
                            ops.to_string(),
                            "1".into(),
                        ])
                        .stdout(Output::Capture(out.clone()))
                        .build();
                    let mut store = Store::new(engine, wasi);
                    let instance = linker.instantiate(&mut store, module).unwrap();
                    let main = instance
                        .get_typed_func::<(), ()>(&mut store, "_start")
                        .unwrap();
                    let result = main.call(&mut store, ());
                    store.data_mut().close_all();
                    let status = p1::exit_status(result).unwrap();
                    let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
                    (status, text)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let wall = start.elapsed();
    running.store(false, Ordering::Relaxed);
    sampler.join().unwrap();

    // Every guest's own checks passed, and what it says it wrote is on the server.
    let (mut files, mut slots, mut bytes) = (0, 0, 0u64);
    for (id, (status, text)) in outputs.iter().enumerate() {
        assert_eq!(*status, 0, "guest {id}: {text}");
        for line in text.lines() {
            let words: Vec<&str> = line.split(' ').collect();
            match words[..] {
                ["file", path, size, hash] => {
                    let on_disk = std::fs::read(export.path().join(path)).unwrap();
                    assert_eq!(on_disk.len(), size.parse::<usize>().unwrap(), "{path}");
                    assert_eq!(format!("{:016x}", fnv(&on_disk)), hash, "{path}");
                    files += 1;
                    bytes += on_disk.len() as u64;
                }
                ["slot", path, offset, size, hash] => {
                    let on_disk = std::fs::read(export.path().join(path)).unwrap();
                    let offset: usize = offset.parse().unwrap();
                    let slot = &on_disk[offset..offset + size.parse::<usize>().unwrap()];
                    assert_eq!(
                        format!("{:016x}", fnv(slot)),
                        hash,
                        "{path} slot of guest {id}"
                    );
                    slots += 1;
                }
                _ => panic!("guest {id}: unexpected line {line:?}"),
            }
        }
    }
    assert!(files >= guests * 2, "the guests kept files: {files}");
    assert_eq!(slots, guests * SHARED);

    // The fids the guests' operations used are all clunked (clunks of dropped fids are
    // sent by background tasks: give them a moment).
    let settle = Instant::now();
    while server.server.live_fids() != baseline && settle.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let live = server.server.live_fids();
    let stats = mounts.stats_json(guests as u64, wall.as_millis() as u64);
    let rss = peak_rss_kib();
    eprintln!(
        "{guests} guests x {ops} ops in {:.1} s: {files} files ({bytes} bytes) and {slots} \
         slots verified; server fids: {baseline} before, peak {}, {live} after; RPCs {}; \
         peak RSS {} MiB",
        wall.as_secs_f64(),
        peak_fids.load(Ordering::Relaxed),
        stats["mounts"][0]["rpc"]["total"],
        rss / 1024
    );
    assert_eq!(live, baseline, "fids leaked on the server");
    assert!(
        peak_fids.load(Ordering::Relaxed) > baseline,
        "the sampler saw the guests at work"
    );
    // Bounded: the caches are capped (cache_size, 256 MiB) and 64 small guests need
    // little (about 165 MiB measured for the whole test process, debug build).
    assert!(rss < 1024 * 1024, "peak RSS {rss} KiB");
}
