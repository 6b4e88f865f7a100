//! C guests built with Debian's clang for wasm32-wasi, run on our own WASI preview1
//! over guest-fs: the same program on a bind mount (the host's own answers), and on
//! embedded 9p mounts in several cache modes, must print the same thing.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use wasm9p_host::mounts::{build, MountSpec};
use wasm9p_host::p1::{run_module, Output, WasiP1Ctx};
use wasm9p_tests::{compile_c_guest, Tree};

/// Compiles `tests/guests/NAME.c` to wasm32-wasi.
fn guest(name: &str) -> PathBuf {
    compile_c_guest(&wasm9p_tests::guest_source(&format!("{name}.c")))
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    negative_hits: u64,
}

fn run(wasm: &Path, spec: &str, args: &[&str]) -> Run {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let specs = [MountSpec::parse(spec).unwrap()];
    let (ns, mounted) = rt.block_on(build(&specs, &Default::default())).unwrap();
    let (out, err) = (
        Arc::new(Mutex::new(Vec::new())),
        Arc::new(Mutex::new(Vec::new())),
    );
    let args = args.iter().map(|s| s.to_string()).collect();
    let env = vec![("WASM9P_TEST".to_string(), "yes".to_string())];
    let ctx = WasiP1Ctx::new(Arc::new(ns), rt.handle().clone(), args, env)
        .with_output(Output::Capture(out.clone()), Output::Capture(err.clone()));
    let engine = wasmtime::Engine::default();
    let module = wasmtime::Module::from_file(&engine, wasm).unwrap();
    // The guest runs on this thread, outside the runtime; the runtime serves the mounts.
    let code = run_module(&engine, &module, ctx).unwrap();
    let negative_hits = mounted[0].stats().map_or(0, |s| s.cache.negative_hits);
    let text = |b: &Arc<Mutex<Vec<u8>>>| String::from_utf8_lossy(&b.lock().unwrap()).into_owned();
    Run {
        code,
        stdout: text(&out),
        stderr: text(&err),
        negative_hits,
    }
}

#[test]
fn a_c_guest_sees_the_same_filesystem_on_bind_and_on_9p_in_every_mode() {
    let wasm = guest("fileops");
    let mut outputs = Vec::new();
    for kind in ["bind", "9p-none", "9p-mmap", "9p-loose"] {
        let dir = Tree::build(&[
            Tree::file("hello.txt", "hello\n"),
            Tree::Dir("include", vec![]),
        ]);
        let spec = match kind {
            "bind" => format!("type=bind,source={},target=/data", dir.path().display()),
            mode => format!(
                "type=9p,export={},target=/data,cache={}",
                dir.path().display(),
                &mode[3..]
            ),
        };
        let r = run(&wasm, &spec, &["fileops", "/data"]);
        assert_eq!(r.code, 0, "{kind}: {}\n{}", r.stdout, r.stderr);
        // What the guest did is on the host.
        assert!(
            !dir.path().join("out").exists(),
            "{kind}: the guest removed its directory"
        );
        if kind == "9p-loose" {
            assert_eq!(
                r.negative_hits, 2,
                "{kind}: three stats of a missing header, one walk"
            );
        }
        outputs.push((kind, r.stdout));
    }
    let (_, expected) = &outputs[0];
    for line in [
        "args 2 fileops env yes",
        "read 6 bytes: hello",
        "stat missing: -1 No such file or directory",
        "fclose: 0",
        "stat obj: 0 size 11000",
        "lseek end: 11000",
        "pread: wxyza",
        "readlink: obj.o",
        "stat via link: 0 size 11000",
        "access old: -1",
        "ls /data/out: . .. link renamed.o",
        "ls /data: . .. hello.txt include out",
        "rmdir: 0",
        "rmdir again: -1 No such file or directory",
        "escape: -1",
    ] {
        assert!(
            expected.lines().any(|l| l == line),
            "bind run lacks {line:?}:\n{expected}"
        );
    }
    for (kind, stdout) in &outputs[1..] {
        assert_eq!(stdout, expected, "{kind} differs from bind");
    }
}

#[test]
fn the_guest_exit_status_and_stderr_come_back() {
    let wasm = guest("fileops");
    let dir = Tree::build(&[Tree::file("hello.txt", "hello\n")]);
    let spec = format!(
        "type=9p,export={},target=/data,cache=loose",
        dir.path().display()
    );
    assert_eq!(run(&wasm, &spec, &["fileops", "/data", "7"]).code, 7);
    let r = run(&wasm, &spec, &["fileops"]);
    assert_eq!((r.code, r.stderr.as_str()), (2, "usage: fileops DIR\n"));
    // Outside every preopen wasi-libc itself refuses, as under any WASI host.
    let r = run(&wasm, &spec, &["fileops", "/nowhere"]);
    assert_eq!(r.code, 3);
    assert_eq!(
        r.stdout.lines().last(),
        Some("fopen /nowhere/hello.txt: Capabilities insufficient")
    );
    // Inside one, a missing directory is ENOENT from the namespace.
    let r = run(&wasm, &spec, &["fileops", "/data/nowhere"]);
    assert_eq!(r.code, 3);
    assert_eq!(
        r.stdout.lines().last(),
        Some("fopen /data/nowhere/hello.txt: No such file or directory")
    );
}
