//! The same pseudo-random sequence of filesystem operations through three namespaces:
//! a `bind` mount of a tempdir (the oracle: the host kernel decides), a `memory` mount,
//! and a 9p mount of our server (cache=loose, so the caches are in play). Every result,
//! error or content, must agree.

use std::sync::Arc;

use bytes::Bytes;
use wasm9p_guest_fs::backend::bind::BindFs;
use wasm9p_guest_fs::backend::memory::MemoryFs;
use wasm9p_guest_fs::backend::ninep::NinepFs;
use wasm9p_guest_fs::client::{ClientConfig, Session};
use wasm9p_guest_fs::mount_options::NinepOptions;
use wasm9p_guest_fs::namespace::Namespace;
use wasm9p_tests::TestServer;

const NAMES: [&str; 6] = ["a", "b", "c", "d/e", "d/f", "a/g"];

#[derive(Debug, Clone)]
enum Op {
    Mkdir(&'static str),
    Create(&'static str),
    Write(&'static str, u64, u8),
    Read(&'static str),
    Unlink(&'static str),
    Rmdir(&'static str),
    Rename(&'static str, &'static str),
    Symlink(&'static str, &'static str),
    Readlink(&'static str),
    Link(&'static str, &'static str),
    Stat(&'static str),
    List(&'static str),
}

struct Rng(u64);

impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
    fn name(&mut self) -> &'static str {
        ["a", "b", "c", "d", "d/e", "d/f", "a/g", "x/y"][self.next(8)]
    }
}

fn ops(seed: u64, count: usize) -> Vec<Op> {
    let mut r = Rng(seed);
    (0..count)
        .map(|_| match r.next(12) {
            0 => Op::Mkdir(r.name()),
            1 => Op::Create(r.name()),
            2 => Op::Write(r.name(), r.next(3) as u64 * 5, b'a' + r.next(26) as u8),
            3 => Op::Read(r.name()),
            4 => Op::Unlink(r.name()),
            5 => Op::Rmdir(r.name()),
            6 => Op::Rename(r.name(), r.name()),
            7 => Op::Symlink(["a", "../a", "/d", "nowhere", "d/e"][r.next(5)], r.name()),
            8 => Op::Readlink(r.name()),
            9 => Op::Link(r.name(), r.name()),
            10 => Op::Stat(r.name()),
            _ => Op::List(["/", "/d", "/a"][r.next(3)]),
        })
        .collect()
}

async fn apply(ns: &Namespace, op: &Op) -> String {
    let p = |name: &str| format!("/{name}");
    let r = match op {
        Op::Mkdir(n) => ns.mkdir(&p(n), 0o755).await.map(|_| String::new()),
        Op::Create(n) => ns.create(&p(n), 0o644, true).await.map(|_| String::new()),
        Op::Write(n, off, byte) => ns
            .write(&p(n), *off, Bytes::from(vec![*byte; 7]))
            .await
            .map(|n| n.to_string()),
        Op::Read(n) => ns
            .read(&p(n))
            .await
            .map(|b| String::from_utf8_lossy(&b).into_owned()),
        Op::Unlink(n) => ns.unlink(&p(n), false).await.map(|_| String::new()),
        Op::Rmdir(n) => ns.unlink(&p(n), true).await.map(|_| String::new()),
        Op::Rename(a, b) => ns.rename(&p(a), &p(b)).await.map(|_| String::new()),
        Op::Symlink(t, n) => ns.symlink(t, &p(n)).await.map(|_| String::new()),
        Op::Readlink(n) => ns.readlink(&p(n)).await.map(|t| t.to_string()),
        Op::Link(a, b) => ns.link(&p(a), &p(b), false).await.map(|_| String::new()),
        // A directory's size is the host file system's business (ext4 says 4096).
        Op::Stat(n) => match ns.resolve(&p(n), false).await {
            Ok(at) if at.is_dir() => ns
                .getattr(&p(n), false)
                .await
                .map(|a| format!("dir nlink {}", a.nlink)),
            Ok(_) => ns
                .getattr(&p(n), false)
                .await
                .map(|a| format!("size {} nlink {}", a.size, a.nlink)),
            Err(e) => Err(e),
        },
        Op::List(d) => ns.readdir(d).await.map(|entries| {
            let mut names: Vec<String> = entries.into_iter().map(|e| e.name).collect();
            names.sort();
            names.join(",")
        }),
    };
    match r {
        Ok(v) => format!("ok {v}"),
        Err(e) => format!("err {e:?}"),
    }
}

/// Every file under `root`: relative path, then its contents, link target or "dir".
fn snapshot(root: &std::path::Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let what = if meta.file_type().is_symlink() {
                format!("-> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                stack.push(path);
                "dir".to_string()
            } else {
                String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned()
            };
            out.push((rel, what));
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_ninep_in_every_mode_agree_with_the_host_on_random_operations() {
    let _ = NAMES;
    for seed in 1..=12u64 {
        let host = tempfile::tempdir().unwrap();
        let mut oracle = Namespace::new();
        oracle
            .mount("/", Arc::new(BindFs::open(host.path()).unwrap()), false)
            .unwrap();
        let mut memory = Namespace::new();
        memory.mount("/", Arc::new(MemoryFs::new()), false).unwrap();
        let mut nines = Vec::new();
        for mode in ["none", "readahead", "mmap", "loose"] {
            let exported = tempfile::tempdir().unwrap();
            let server = TestServer::tcp(exported.path());
            let opts = NinepOptions::parse([("cache", Some(mode))]).unwrap();
            let session = Session::connect(&server.addr, ClientConfig::default())
                .await
                .unwrap();
            let mut ns = Namespace::new();
            ns.mount(
                "/",
                Arc::new(NinepFs::attach(&session, "", &opts).await.unwrap()),
                false,
            )
            .unwrap();
            nines.push((mode, ns, exported, server));
        }
        for (i, op) in ops(seed * 7919, 300).iter().enumerate() {
            let expected = apply(&oracle, op).await;
            assert_eq!(
                apply(&memory, op).await,
                expected,
                "memory, seed {seed}, op {i}: {op:?}"
            );
            for (mode, ns, _, _) in &nines {
                assert_eq!(
                    apply(ns, op).await,
                    expected,
                    "9p cache={mode}, seed {seed}, op {i}: {op:?}"
                );
            }
        }
        // The trees left behind are the same too.
        let expected = snapshot(host.path());
        for (mode, _, exported, _) in &nines {
            assert_eq!(
                snapshot(exported.path()),
                expected,
                "final tree, cache={mode}, seed {seed}"
            );
        }
    }
}
