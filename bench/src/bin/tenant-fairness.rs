//! Two tenants on one `wasm9p serve` (issue 22): does one tenant streaming large reads
//! slow another's metadata requests?
//!
//! The server exports two directories, each bound to its own Unix listener by a
//! `listen:` rule (the hybrid-vsock shape: one socket per VM), so the two clients are
//! two tenants. Tenant B does walk+getattr+clunk, one at a time, and records each
//! round trip; tenant A reads a 1 GiB file over and over with 32 reads of msize in
//! flight (the product's client, `io_depth` 32). Each round measures B alone, then B
//! while A streams (the order alternating by round); the table gives B's median and p99
//! latency in both, and the goal line the ratio (at most 2x). B's client runs on a
//! thread and runtime of its own, as another VM's would: it shares no threads with A's
//! client (only the machine's two CPUs).
//!
//! Usage: `tenant-fairness [WASM9P]` (default: the `wasm9p` next to this binary);
//! BENCH_SECONDS (3) per phase, BENCH_ROUNDS (3); BENCH_SERVE_ARGS: more arguments for
//! `wasm9p serve` (say `--rate tenant-a=300M`), split at spaces; BENCH_SERVERS (1): 2
//! serves each tenant from a server process of its own; BENCH_B_NICE (0): the
//! nice value of B's client thread (a diagnostic: with B's client given the CPU first,
//! what is left of B's latency is the server's doing); BENCH_B_CONNECTIONS (1): B's
//! connections, each doing the same on a thread of its own (the round trips column
//! counts them all: what one tenant's thread in the server gets through).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasm9p_guest_fs::client::{ClientConfig, Session};
use wasm9p_proto::consts::open;
use wasm9p_proto::Addr;
use wasm9p_tests::Conn;

const BIG: u64 = 1 << 30;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// `wasm9p serve` of each export in `exports` (a directory and the listener its
/// tenant comes in by, bound to it by a `listen:` rule).
fn start(bin: &Path, exports: &[(&Path, &str)]) -> Server {
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    let mut command = Command::new(bin);
    command.arg("serve");
    for (dir, listen) in exports {
        command.arg("--export").arg(dir).args(["--listen", listen]);
        command.args(["--allow", &format!("{}=listen:{listen}", name(dir))]);
    }
    let mut child = command
        .args(
            std::env::var("BENCH_SERVE_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wasm9p serve");
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
    assert!(line.contains("serving"), "{line}");
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    Server(child)
}

/// B's walk+getattr+clunk round trips for `duration`, in microseconds.
async fn metadata(addr: &Addr, aname: &str, duration: Duration) -> Vec<u64> {
    let (mut conn, _) = Conn::attached(addr, 65536, aname).await;
    let mut out = Vec::new();
    let start = Instant::now();
    while start.elapsed() < duration {
        let t = Instant::now();
        conn.walk(0, 1, "dir/file.h").await.unwrap();
        conn.getattr(1).await.unwrap();
        conn.clunk(1).await.unwrap();
        out.push(t.elapsed().as_micros() as u64);
    }
    out
}

/// [`metadata`] on a thread and runtime of its own, over each of BENCH_B_CONNECTIONS
/// connections at once (one by default); every round trip of all of them.
async fn metadata_apart(addr: &Addr, aname: &str, duration: Duration) -> Vec<u64> {
    let nice = std::env::var("BENCH_B_NICE").map_or(0, |v| v.parse::<i32>().unwrap());
    let threads: Vec<_> = (0..env("BENCH_B_CONNECTIONS", 1))
        .map(|_| {
            let (addr, aname) = (addr.clone(), aname.to_string());
            std::thread::spawn(move || {
                if nice != 0 {
                    set_thread_nice(nice);
                }
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(metadata(&addr, &aname, duration))
            })
        })
        .collect();
    tokio::task::spawn_blocking(move || {
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    })
    .await
    .unwrap()
}

/// A's stream: reads of 32 × msize in flight until `stop`; returns bytes read.
async fn stream(addr: Addr, aname: String, stop: Arc<AtomicBool>, bytes: Arc<AtomicU64>) {
    let config = ClientConfig {
        io_depth: 32,
        max_inflight: 64,
        ..ClientConfig::default()
    };
    let session = Session::connect(&addr, config).await.unwrap();
    let root = session.attach(&aname).await.unwrap();
    let file = root.walk(&["big.bin"]).await.unwrap().fid;
    file.lopen(open::RDONLY).await.unwrap();
    let step = 32 * session.msize() as usize;
    let mut at = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let got = file.read_at(at, step).await.unwrap();
        bytes.fetch_add(got.len() as u64, Ordering::Relaxed);
        at = if got.is_empty() || at + step as u64 >= BIG {
            0
        } else {
            at + got.len() as u64
        };
    }
}

/// Sets the calling thread's nice value (Linux keeps one per thread).
#[allow(unsafe_code)]
fn set_thread_nice(nice: i32) {
    // SAFETY: plain integers; no memory is touched.
    let done = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as u32, nice) };
    assert_eq!(done, 0, "setpriority: {}", std::io::Error::last_os_error());
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

#[tokio::main]
async fn main() {
    let bin = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::current_exe().unwrap().with_file_name("wasm9p"));
    let secs = Duration::from_secs(env("BENCH_SECONDS", 3));
    let rounds = env("BENCH_ROUNDS", 3);
    let work = tempfile::tempdir().unwrap();
    let (a, b) = (work.path().join("tenant-a"), work.path().join("tenant-b"));
    std::fs::create_dir_all(b.join("dir")).unwrap();
    std::fs::write(b.join("dir/file.h"), "int x;\n").unwrap();
    std::fs::create_dir(&a).unwrap();
    // Real bytes, so that reads copy data (and the page cache holds them after a pass).
    let chunk = vec![0x5au8; 8 << 20];
    let mut f = std::fs::File::create(a.join("big.bin")).unwrap();
    for _ in 0..(BIG / chunk.len() as u64) {
        std::io::Write::write_all(&mut f, &chunk).unwrap();
    }
    drop(f);
    let (la, lb) = (
        format!("unix:{}", work.path().join("a.sock").display()),
        format!("unix:{}", work.path().join("b.sock").display()),
    );
    // BENCH_SERVERS=2: each tenant on a server process of its own (a diagnostic: what
    // B still waits for then is not inside the server).
    let _servers = match env("BENCH_SERVERS", 1) {
        2 => vec![start(&bin, &[(&a, &la)]), start(&bin, &[(&b, &lb)])],
        _ => vec![start(&bin, &[(&a, &la), (&b, &lb)])],
    };
    let (addr_a, addr_b): (Addr, Addr) = (la.parse().unwrap(), lb.parse().unwrap());
    let b_name = "tenant-b".to_string();
    // Warm: the file into the page cache, the server's paths.
    let warm = Arc::new(AtomicBool::new(false));
    let warm_bytes = Arc::new(AtomicU64::new(0));
    let w = tokio::spawn(stream(
        addr_a.clone(),
        "tenant-a".into(),
        warm.clone(),
        warm_bytes.clone(),
    ));
    while warm_bytes.load(Ordering::Relaxed) < BIG {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    warm.store(true, Ordering::Relaxed);
    w.await.unwrap();
    metadata_apart(&addr_b, &b_name, Duration::from_millis(300)).await;

    println!("| round | phase | B's round trips | median (us) | p99 (us) | A's read MB/s |");
    println!("|---|---|---|---|---|---|");
    let mut alone_all = Vec::new();
    let mut busy_all = Vec::new();
    for round in 1..=rounds {
        let order = if round % 2 == 1 {
            [false, true]
        } else {
            [true, false]
        };
        for with_stream in order {
            let stop = Arc::new(AtomicBool::new(false));
            let bytes = Arc::new(AtomicU64::new(0));
            let streamer = with_stream.then(|| {
                tokio::spawn(stream(
                    addr_a.clone(),
                    "tenant-a".into(),
                    stop.clone(),
                    bytes.clone(),
                ))
            });
            if with_stream {
                tokio::time::sleep(Duration::from_millis(200)).await;
                bytes.store(0, Ordering::Relaxed);
            }
            let started = Instant::now();
            let mut lat = metadata_apart(&addr_b, &b_name, secs).await;
            let elapsed = started.elapsed();
            stop.store(true, Ordering::Relaxed);
            if let Some(s) = streamer {
                s.await.unwrap();
            }
            lat.sort_unstable();
            let mbps = bytes.load(Ordering::Relaxed) as f64 / 1e6 / elapsed.as_secs_f64();
            println!(
                "| {round} | {} | {} | {} | {} | {} |",
                if with_stream { "A streaming" } else { "alone" },
                lat.len(),
                percentile(&lat, 0.5),
                percentile(&lat, 0.99),
                if with_stream {
                    format!("{mbps:.0}")
                } else {
                    "-".into()
                }
            );
            match with_stream {
                true => busy_all.extend(lat),
                false => alone_all.extend(lat),
            }
        }
    }
    alone_all.sort_unstable();
    busy_all.sort_unstable();
    let (m0, m1) = (percentile(&alone_all, 0.5), percentile(&busy_all, 0.5));
    let (p0, p1) = (percentile(&alone_all, 0.99), percentile(&busy_all, 0.99));
    let ratio = |with: u64, without: u64| with as f64 / without.max(1) as f64;
    let met = |r: f64| if r <= 2.0 { "met" } else { "NOT met" };
    println!();
    println!(
        "- B's median {m0} us alone, {m1} us while A streams: {:.2}x (goal <= 2: {})",
        ratio(m1, m0),
        met(ratio(m1, m0))
    );
    println!(
        "- B's p99 {p0} us alone, {p1} us while A streams: {:.2}x (goal <= 2: {})",
        ratio(p1, p0),
        met(ratio(p1, p0))
    );
}
