//! # wasm9p-bench: our server against diod, side by side, one client
//!
//! Role: the harness behind BENCHMARKS.md. It builds one tree in a tempdir, starts
//! `wasm9p serve` (the release binary next to this one) and Debian's `diod` on it, and
//! drives both with the same plain 9P2000.L client over loopback TCP:
//!
//! - metadata: `walk(dir/file) + getattr + clunk` per op, with 1 and with 32 ops in flight;
//! - sequential read of one large file, with 1 and with 4 reads in flight.
//!
//! Ours is measured at msize 512 KiB (its default) and at 64 KiB, the most diod grants.
//!
//! Then the product's client (`wasm9p-guest-fs`) against both servers: getattr round
//! trips per second with 1 and 32 in flight, and sequential `read_at` MB/s.
//!
//! Last, lookups through a guest-fs namespace (stat of a missing and of a present
//! header) on a bind mount and on 9p mounts with `cache=none` and `cache=loose`.
//!
//! It prints Markdown tables. Run it with `bench/run` (which builds what it needs).
//! Not a test: nothing here asserts a speed.

mod client;
mod lookups;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wasm9p_proto::consts::{getattr, open, IOHDRSZ};
use wasm9p_proto::*;
use wasm9p_tests::{free_port, Conn, Diod};

const DIRS: usize = 64;
const FILES: usize = 32;
const BIG_FILE_MB: usize = 256;
const MSIZE: u32 = 512 * 1024;
/// The largest msize Debian's diod 1.0.24 grants.
const DIOD_MSIZE: u32 = 64 * 1024;

fn build_tree(root: &Path) {
    for d in 0..DIRS {
        let dir = root.join(format!("dir{d:02}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..FILES {
            std::fs::write(dir.join(format!("file{f:02}.h")), b"#pragma once\n").unwrap();
        }
    }
    let chunk: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    let mut big = Vec::with_capacity(BIG_FILE_MB << 20);
    for _ in 0..BIG_FILE_MB {
        big.extend_from_slice(&chunk);
    }
    std::fs::write(root.join("big.bin"), big).unwrap();
}

struct Ours(Child);

impl Ours {
    fn start(bin: &Path, dir: &Path, port: u16) -> Ours {
        let child = Command::new(bin)
            .args(["serve", "--export"])
            .arg(dir)
            .args(["--listen", &format!("tcp:127.0.0.1:{port}")])
            .stderr(Stdio::null())
            .spawn()
            .expect("start wasm9p serve");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "wasm9p serve did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ours(child)
    }
}

impl Drop for Ours {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn path_of(i: usize) -> Vec<String> {
    vec![
        format!("dir{:02}", (i / FILES) % DIRS),
        format!("file{:02}.h", i % FILES),
    ]
}

/// walk + getattr + clunk, `depth` operations in flight; returns ops per second.
async fn metadata(conn: &mut Conn, depth: usize, duration: Duration) -> f64 {
    let start = Instant::now();
    let mut done = 0usize;
    while start.elapsed() < duration {
        for stage in 0..3 {
            for k in 0..depth {
                let fid = 100 + k as u32;
                let tag = k as u16;
                match stage {
                    0 => {
                        conn.send(
                            tag,
                            Twalk {
                                fid: 0,
                                newfid: fid,
                                wnames: path_of(done + k),
                            },
                        )
                        .await
                    }
                    1 => {
                        conn.send(
                            tag,
                            Tgetattr {
                                fid,
                                request_mask: getattr::BASIC,
                            },
                        )
                        .await
                    }
                    _ => conn.send(tag, Tclunk { fid }).await,
                }
            }
            for _ in 0..depth {
                let frame = conn.recv().await.expect("reply");
                if let Ok(Message::Rlerror(e)) = frame.body {
                    panic!("metadata op failed: {}", Errno(e.ecode));
                }
            }
        }
        done += depth;
    }
    done as f64 / start.elapsed().as_secs_f64()
}

/// Reads big.bin front to back with `depth` reads in flight; returns MB/s.
async fn sequential_read(conn: &mut Conn, depth: usize) -> f64 {
    conn.walk(0, 50, "big.bin").await.unwrap();
    conn.lopen(50, open::RDONLY).await.unwrap();
    let count = conn.msize - IOHDRSZ;
    let size = (BIG_FILE_MB << 20) as u64;
    let start = Instant::now();
    let mut next_offset = 0u64;
    let mut pending: VecDeque<u16> = VecDeque::new();
    let mut received = 0u64;
    let mut tag = 0u16;
    while received < size {
        while pending.len() < depth && next_offset < size {
            conn.send(
                tag,
                Tread {
                    fid: 50,
                    offset: next_offset,
                    count,
                },
            )
            .await;
            pending.push_back(tag);
            tag = tag.wrapping_add(1);
            next_offset += count as u64;
        }
        let frame = conn.recv().await.expect("read reply");
        match frame.body {
            Ok(Message::Rread(r)) => received += r.data.0.len() as u64,
            other => panic!("read failed: {other:?}"),
        }
        pending.retain(|t| *t != frame.tag);
    }
    let mbps = received as f64 / (1 << 20) as f64 / start.elapsed().as_secs_f64();
    conn.clunk(50).await.unwrap();
    mbps
}

struct Row {
    name: &'static str,
    msize: u32,
    meta1: f64,
    meta32: f64,
    read1: f64,
    read4: f64,
}

async fn measure(
    name: &'static str,
    addr: Addr,
    msize: u32,
    aname: &str,
    duration: Duration,
) -> Row {
    let (mut conn, _) = Conn::attached(&addr, msize, aname).await;
    // Warm up both the server and the host page cache.
    metadata(&mut conn, 1, Duration::from_millis(300)).await;
    sequential_read(&mut conn, 4).await;
    let meta1 = metadata(&mut conn, 1, duration).await;
    let meta32 = metadata(&mut conn, 32, duration).await;
    let read1 = sequential_read(&mut conn, 1).await;
    let read4 = sequential_read(&mut conn, 4).await;
    Row {
        name,
        msize: conn.msize,
        meta1,
        meta32,
        read1,
        read4,
    }
}

fn default_binary() -> PathBuf {
    std::env::current_exe().unwrap().with_file_name("wasm9p")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let bin = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(default_binary);
    let secs: u64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let duration = Duration::from_secs(secs);
    let dir = tempfile::tempdir().unwrap();
    build_tree(dir.path());
    let aname = dir.path().to_str().unwrap().to_owned();
    let diod = Diod::start(dir.path());
    let port = free_port();
    let _ours = Ours::start(&bin, dir.path(), port);

    println!("| server | round | msize granted | walk+getattr+clunk /s (1 in flight) | (32 in flight) | seq read MB/s (1 in flight) | (4 in flight) |");
    println!("|---|---|---|---|---|---|---|");
    // Alternate the servers round by round so drift on a noisy machine hits both.
    for round in 1..=rounds {
        let ours = Addr::Tcp {
            host: "127.0.0.1".into(),
            port,
        };
        let theirs = Addr::Tcp {
            host: "127.0.0.1".into(),
            port: diod.port,
        };
        // diod grants at most 64 KiB, so ours is also measured at that msize.
        let rows = [
            measure("wasm9p serve", ours.clone(), MSIZE, &aname, duration).await,
            measure("wasm9p serve", ours, DIOD_MSIZE, &aname, duration).await,
            measure("diod 1.0.24", theirs, MSIZE, &aname, duration).await,
        ];
        for r in rows {
            println!(
                "| {} | {round} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
                r.name, r.msize, r.meta1, r.meta32, r.read1, r.read4
            );
        }
    }

    println!();
    println!("| client → server | round | msize | getattr/s (1 in flight) | getattr/s (32 in flight) | read_at MB/s (io_depth 4) |");
    println!("|---|---|---|---|---|---|");
    let ours = Addr::Tcp {
        host: "127.0.0.1".into(),
        port,
    };
    let theirs = Addr::Tcp {
        host: "127.0.0.1".into(),
        port: diod.port,
    };
    let big = BIG_FILE_MB << 20;
    for round in 1..=rounds {
        let rows = [
            (
                "wasm9p client → wasm9p serve",
                client::measure(&ours, &aname, MSIZE, big, duration).await,
            ),
            (
                "wasm9p client → wasm9p serve",
                client::measure(&ours, &aname, DIOD_MSIZE, big, duration).await,
            ),
            (
                "wasm9p client → diod 1.0.24",
                client::measure(&theirs, &aname, MSIZE, big, duration).await,
            ),
        ];
        for (name, r) in rows {
            println!(
                "| {name} | {round} | {} | {:.0} | {:.0} | {:.0} |",
                r.msize, r.getattr1, r.getattr32, r.read_mbps
            );
        }
    }

    println!();
    println!(
        "| namespace mount | round | stat of a missing header /s | stat of a present header /s |"
    );
    println!("|---|---|---|---|");
    for round in 1..=rounds {
        for row in lookups::run(dir.path(), &ours, &aname, duration).await {
            println!(
                "| {} | {round} | {:.0} | {:.0} |",
                row.mount, row.missing, row.present
            );
        }
    }
}
