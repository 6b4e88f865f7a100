//! The client and its caches under injected faults: a [`FaultProxy`] between a 9p mount
//! and our server delays, drops, reorders, resets and truncates frames on a seeded
//! schedule while a workload writes, reads back and looks up files.
//!
//! What must hold under every fault: each operation ends (no call waits much past the
//! session timeout), a failure is an errno a guest can act on (EIO, ETIMEDOUT), a write
//! reported done is on the server byte for byte, and a read reported done returns the
//! file's bytes, never anything else.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use wasm9p_guest_fs::backend::ninep::NinepFs;
use wasm9p_guest_fs::client::{ClientConfig, Session};
use wasm9p_guest_fs::mount_options::NinepOptions;
use wasm9p_guest_fs::namespace::Namespace;
use wasm9p_proto::Errno;
use wasm9p_tests::fault_proxy::{Direction, Fault, FaultProxy, Schedule};
use wasm9p_tests::{TestServer, Tree};

/// The session timeout where replies are lost or late; every operation must end within
/// the timeout in force plus this slack.
const TIMEOUT: Duration = Duration::from_millis(400);
const SLACK: Duration = Duration::from_secs(3);
/// The session timeout where every reply does come: long, so that a loaded machine
/// cannot turn a slow reply into a failure the test would blame on the fault.
const PATIENT: Duration = Duration::from_secs(10);

/// What a workload saw.
#[derive(Debug, Default)]
struct Outcome {
    ok: u64,
    errors: BTreeMap<String, u64>,
    /// Files whose write and flush were reported done, with their contents.
    written: BTreeMap<String, Vec<u8>>,
    slowest: Duration,
}

async fn mount(
    addr: &wasm9p_proto::Addr,
    cache: &str,
    timeout: Duration,
) -> Result<Namespace, String> {
    let opts = NinepOptions::parse([("cache", Some(cache))]).unwrap();
    let config = ClientConfig {
        timeout,
        msize: 65536,
        ..Default::default()
    };
    let session = Session::connect(addr, config)
        .await
        .map_err(|e| e.to_string())?;
    let fs = NinepFs::attach(&session, "", &opts)
        .await
        .map_err(|e| e.to_string())?;
    let mut ns = Namespace::new();
    ns.mount("/", Arc::new(fs), false).unwrap();
    Ok(ns)
}

fn content(i: u32) -> Vec<u8> {
    // Sizes across one and several frames (msize 64 KiB).
    let len = 100 + (i as usize * 7919) % 150_000;
    (0..len)
        .map(|j| (j as u32 ^ i.wrapping_mul(31)) as u8)
        .collect()
}

/// Writes, reads back and looks up files; every call timed and bounded.
async fn workload(ns: &Namespace, files: u32, timeout: Duration) -> Outcome {
    let mut out = Outcome::default();
    macro_rules! timed {
        ($what:expr, $fut:expr) => {{
            let start = Instant::now();
            let r = tokio::time::timeout(timeout + SLACK, $fut)
                .await
                .unwrap_or_else(|_| panic!("{} hung past {:?}", $what, timeout + SLACK));
            out.slowest = out.slowest.max(start.elapsed());
            r
        }};
    }
    for i in 0..files {
        let path = format!("/f{i}");
        let data = content(i);
        // Create, write, flush: done only if every step is.
        let wrote = timed!(format!("write {path}"), async {
            let loc = ns.create(&path, 0o644, false).await?;
            let flags = wasm9p_guest_fs::backend::OpenFlags {
                write: true,
                truncate: true,
                ..Default::default()
            };
            let file = ns.open_at(&loc, flags).await?;
            let n = file.write_at(0, Bytes::from(data.clone())).await?;
            file.flush().await?;
            if n != data.len() {
                return Err(Errno::EIO);
            }
            Ok(())
        });
        record(&mut out, &format!("write {path}"), &wrote);
        if wrote.is_ok() {
            out.written.insert(path.clone(), data.clone());
        }
        let read = timed!(format!("read {path}"), ns.read(&path));
        match &read {
            Ok(bytes) if wrote.is_ok() => assert!(
                bytes[..] == data[..],
                "{path}: a read reported done returned {} bytes that are not the file's {}",
                bytes.len(),
                data.len()
            ),
            _ => {}
        }
        match read {
            // The create itself may have failed: then there is nothing to read.
            Err(Errno::ENOENT) if wrote.is_err() => out.ok += 1,
            r => record(&mut out, &format!("read {path}"), &r.map(|_| ())),
        }
        let missing = timed!("lookup", ns.getattr(&format!("/missing{i}"), true));
        match missing {
            Err(Errno::ENOENT) => out.ok += 1,
            Ok(_) => panic!("/missing{i} exists"),
            Err(e) => record(&mut out, &format!("lookup /missing{i}"), &Err::<(), _>(e)),
        }
    }
    out
}

fn record(out: &mut Outcome, what: &str, r: &Result<(), Errno>) {
    match r {
        Ok(()) => out.ok += 1,
        Err(e) => {
            assert!(
                [Errno::EIO, Errno::ETIMEDOUT].contains(e),
                "{what}: an error a guest cannot act on: {e:?}"
            );
            *out.errors.entry(format!("{e:?}")).or_default() += 1;
        }
    }
}

/// Runs the workload through a proxy with `fault`, on a session with `timeout`; checks
/// the export afterwards.
async fn under(
    fault: Fault,
    direction: Direction,
    every: u64,
    cache: &str,
    seed: u64,
    timeout: Duration,
) -> (Outcome, u64) {
    let dir = Tree::build(&[]);
    let server = TestServer::tcp(dir.path());
    let proxy = FaultProxy::start(
        &server.addr,
        Schedule {
            seed,
            fault,
            direction,
            every,
            spare: 3,
        },
    )
    .await;
    let ns = mount(&proxy.addr, cache, timeout)
        .await
        .expect("the spare frames pass");
    let out = workload(&ns, 24, timeout).await;
    drop(ns);
    // Every write reported done is on the server, exactly.
    for (path, data) in &out.written {
        let on_disk = std::fs::read(dir.path().join(&path[1..])).unwrap();
        assert!(
            on_disk == *data,
            "{fault:?} {cache}: {path} reported written, server has {} bytes, wrote {}",
            on_disk.len(),
            data.len()
        );
    }
    let bytes: usize = out.written.values().map(Vec::len).sum();
    eprintln!(
        "{fault:?} {direction:?} 1/{every} {cache}: {} ok, errors {:?}, {} files ({bytes} bytes) verified, \
         slowest {:?}, {} faults",
        out.ok,
        out.errors,
        out.written.len(),
        out.slowest,
        proxy.injected()
    );
    (out, proxy.injected())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reordered_and_delayed_replies_change_nothing() {
    // 9P replies may come in any order; delays under the timeout are only slower.
    for cache in ["none", "loose"] {
        let (out, injected) = under(Fault::Reorder, Direction::Replies, 3, cache, 1, PATIENT).await;
        assert!(injected > 10, "the schedule ran");
        assert!(out.errors.is_empty(), "{cache}: {:?}", out.errors);
        let (out, injected) = under(
            Fault::Delay(Duration::from_millis(40)),
            Direction::Replies,
            4,
            cache,
            2,
            PATIENT,
        )
        .await;
        assert!(injected > 10);
        assert!(out.errors.is_empty(), "{cache}: {:?}", out.errors);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_and_late_replies_time_out_without_hanging_or_corrupting() {
    for cache in ["none", "loose"] {
        // A lost reply: that call fails with ETIMEDOUT after the timeout, the others go on.
        let (out, injected) = under(Fault::Drop, Direction::Replies, 12, cache, 3, TIMEOUT).await;
        assert!(injected > 0);
        assert!(out.errors.contains_key("ETIMEDOUT"), "{cache}: {out:?}");
        assert!(out.ok > 20, "the session survives lost replies: {out:?}");
        // A reply later than the timeout: the same, and the late reply is ignored.
        // (The proxy holds the whole link meanwhile, as a stalled network would.)
        let (out, _) = under(
            Fault::Delay(TIMEOUT * 2),
            Direction::Replies,
            40,
            cache,
            4,
            TIMEOUT,
        )
        .await;
        assert!(out.errors.contains_key("ETIMEDOUT"), "{cache}: {out:?}");
        assert!(out.ok > 20, "{out:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_or_torn_frame_fails_everything_after_it_fast() {
    for fault in [Fault::Reset, Fault::Truncate] {
        for cache in ["none", "loose"] {
            let (out, injected) = under(fault, Direction::Replies, 40, cache, 5, TIMEOUT).await;
            assert_eq!(injected, 1, "one cut ends the connection");
            assert!(out.errors.contains_key("EIO"), "{fault:?} {cache}: {out:?}");
            // After the cut nothing waits for a timeout: the connection is known dead.
            assert!(out.slowest < TIMEOUT * 2, "{fault:?} {cache}: {out:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_on_requests_fail_only_what_they_hit() {
    for cache in ["none", "loose"] {
        // A delayed request is only slower.
        let (out, injected) = under(
            Fault::Delay(Duration::from_millis(40)),
            Direction::Requests,
            4,
            cache,
            6,
            PATIENT,
        )
        .await;
        assert!(injected > 10);
        assert!(out.errors.is_empty(), "{cache}: {:?}", out.errors);
        // A lost request is never answered: that call times out, the session goes on.
        let (out, injected) = under(Fault::Drop, Direction::Requests, 12, cache, 7, TIMEOUT).await;
        assert!(injected > 0);
        assert!(out.errors.contains_key("ETIMEDOUT"), "{cache}: {out:?}");
        assert!(out.ok > 20, "{cache}: {out:?}");
        // A request cut on its way: the connection is gone, everything after is EIO.
        for fault in [Fault::Reset, Fault::Truncate] {
            let (out, injected) = under(fault, Direction::Requests, 40, cache, 8, TIMEOUT).await;
            assert_eq!(injected, 1, "one cut ends the connection");
            assert!(out.errors.contains_key("EIO"), "{fault:?} {cache}: {out:?}");
            assert!(out.slowest < TIMEOUT * 2, "{fault:?} {cache}: {out:?}");
        }
    }
}
