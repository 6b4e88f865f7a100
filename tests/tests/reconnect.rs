//! `reconnect=on`: a 9p mount whose connection drops connects again and restores its
//! fids, against our real server on loopback TCP.
//!
//! What must hold: open files keep working across a server restart (re-walked by path,
//! reopened), a file renamed through the mount is found at its new name, an unlinked
//! one is stale (ESTALE) rather than another file, reads in flight are sent again, a
//! write the server did not acknowledge fails (EIO) and is never reported done when it
//! is not on the server, a call that waited out a cut finds its fids restored, and a
//! server that does not come back ends in EIO, not a hang.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use wasm9p_guest_fs::backend::ninep::NinepFs;
use wasm9p_guest_fs::backend::OpenFlags;
use wasm9p_guest_fs::client::{ClientConfig, Session};
use wasm9p_guest_fs::mount_options::NinepOptions;
use wasm9p_guest_fs::namespace::Namespace;
use wasm9p_proto::consts::open;
use wasm9p_proto::{Addr, Errno, Message};
use wasm9p_server::{ExportConfig, ServerConfig};
use wasm9p_tests::fault_proxy::{Direction, Fault, FaultProxy, Schedule};
use wasm9p_tests::reply_gate::ReplyGate;
use wasm9p_tests::{TestServer, Tree};

async fn mount(addr: &Addr, cache: &str, timeout: Duration) -> (Namespace, Arc<NinepFs>) {
    let opts = NinepOptions::parse([("cache", Some(cache)), ("reconnect", Some("on"))]).unwrap();
    let config = ClientConfig {
        timeout,
        msize: 65536,
        reconnect: opts.reconnect,
        ..Default::default()
    };
    let session = Session::connect(addr, config).await.unwrap();
    let fs = Arc::new(NinepFs::attach(&session, "", &opts).await.unwrap());
    let mut ns = Namespace::new();
    ns.mount("/", fs.clone(), false).unwrap();
    (ns, fs)
}

fn serve_on(dir: &std::path::Path, listen: &str) -> TestServer {
    TestServer::start(
        ServerConfig {
            exports: vec![ExportConfig::new(dir)],
            ..Default::default()
        },
        listen,
    )
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

const READ: OpenFlags = OpenFlags {
    read: true,
    write: false,
    truncate: false,
    append: false,
};
const WRITE: OpenFlags = OpenFlags {
    read: true,
    write: true,
    truncate: false,
    append: false,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_files_survive_a_server_restart_renamed_ones_too_unlinked_ones_go_stale() {
    let big = pattern(300_000, 1);
    let doomed_bytes = pattern(300_000, 2);
    let dir = Tree::build(&[
        Tree::File("big", big.clone()),
        Tree::Dir("sub", vec![Tree::file("inner", "inner text")]),
        Tree::file("moved", "before"),
        Tree::File("doomed", doomed_bytes.clone()),
    ]);
    for cache in ["none", "loose"] {
        let server = serve_on(dir.path(), "tcp:127.0.0.1:0");
        let listen = server.addr.to_string();
        let (ns, fs) = mount(&server.addr, cache, Duration::from_secs(10)).await;
        let reader = ns.open("/big", READ).await.unwrap();
        assert_eq!(&reader.read_at(0, 1000).await.unwrap()[..], &big[..1000]);
        let inner = ns.open("/sub/inner", READ).await.unwrap();
        let writer = ns.open("/moved", WRITE).await.unwrap();
        ns.rename("/moved", "/sub/renamed").await.unwrap();
        let doomed = ns.open("/doomed", READ).await.unwrap();
        ns.unlink("/doomed", false).await.unwrap();

        drop(server);
        // The same port, a new server process state: no fid of the old one exists.
        let server = serve_on(dir.path(), &listen);

        // Reads on the open file go on where they were, and to its end.
        let rest = reader.read_at(1000, big.len()).await.unwrap();
        assert_eq!(rest.len(), big.len() - 1000, "{cache}");
        assert!(rest[..] == big[1000..], "{cache}: bytes after the restart");
        assert_eq!(&inner.read_at(0, 100).await.unwrap()[..], b"inner text");
        // The renamed file was reopened under its new name, for writing.
        writer
            .write_at(0, Bytes::from_static(b"AFTER!"))
            .await
            .unwrap();
        writer.flush().await.unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("sub/renamed")).unwrap(),
            b"AFTER!",
            "{cache}"
        );
        // The unlinked file cannot be had again: stale, not some other file. (Past the
        // bytes a loose open brought with it, which are that file's own.)
        assert_eq!(
            doomed.read_at(200_000, 100).await.unwrap_err(),
            Errno::ESTALE,
            "{cache}"
        );
        // New lookups and files work as ever.
        ns.write("/new", 0, Bytes::from_static(b"new file"))
            .await
            .unwrap();
        assert_eq!(&ns.read("/new").await.unwrap()[..], b"new file");
        assert_eq!(
            ns.getattr("/missing", true).await.unwrap_err(),
            Errno::ENOENT
        );
        let stats = fs.stats().reconnect;
        assert_eq!(stats.reconnects, 1, "{cache}: {stats:?}");
        assert!(stats.stale_fids >= 1, "{cache}: {stats:?}");
        drop((reader, inner, writer, doomed));
        drop(ns);
        drop(server);
        std::fs::rename(dir.path().join("sub/renamed"), dir.path().join("moved")).unwrap();
        std::fs::write(dir.path().join("doomed"), &doomed_bytes).unwrap();
        std::fs::remove_file(dir.path().join("new")).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_replaced_behind_the_mount_is_stale_not_silently_swapped() {
    let dir = Tree::build(&[Tree::file("f", "original")]);
    let server = serve_on(dir.path(), "tcp:127.0.0.1:0");
    let listen = server.addr.to_string();
    let (ns, fs) = mount(&server.addr, "none", Duration::from_secs(10)).await;
    let file = ns.open("/f", READ).await.unwrap();
    drop(server);
    // Another file now has the name. (The old one is kept, so that its inode number
    // cannot be reused: a qid has no generation number to tell them apart.)
    std::fs::rename(dir.path().join("f"), dir.path().join("f.old")).unwrap();
    std::fs::write(dir.path().join("f"), "impostor").unwrap();
    let _server = serve_on(dir.path(), &listen);
    assert_eq!(file.read_at(0, 100).await.unwrap_err(), Errno::ESTALE);
    // Opened afresh, the name gives the new file.
    assert_eq!(&ns.read("/f").await.unwrap()[..], b"impostor");
    assert_eq!(fs.stats().reconnect.reconnects, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_come_back_ends_in_eio_within_the_timeout() {
    let dir = Tree::build(&[Tree::file("f", "text")]);
    let server = serve_on(dir.path(), "tcp:127.0.0.1:0");
    let timeout = Duration::from_millis(800);
    let (ns, fs) = mount(&server.addr, "none", timeout).await;
    let file = ns.open("/f", READ).await.unwrap();
    drop(server);
    let start = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(20), file.read_at(0, 10))
        .await
        .expect("a read hung");
    assert!(matches!(err, Err(Errno::EIO | Errno::ETIMEDOUT)), "{err:?}");
    // Once the supervisor gives up, everything fails at once.
    tokio::time::sleep(timeout).await;
    let started = Instant::now();
    assert_eq!(ns.getattr("/f", true).await.unwrap_err(), Errno::EIO);
    assert!(started.elapsed() < Duration::from_millis(200));
    assert!(fs.session().is_dead());
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(fs.stats().reconnect.reconnects, 0);
}

/// Files of different sizes, across one and several 64 KiB frames.
fn content(i: u32) -> Vec<u8> {
    pattern(100 + (i as usize * 7919) % 150_000, i as u8)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_cut_again_and_again_lose_no_acknowledged_write() {
    // The proxy resets the connection at a random request (about one in 25, the
    // request itself never reaching the server), on every connection the mount makes.
    for cache in ["none", "loose"] {
        let dir = Tree::build(&[]);
        let server = TestServer::tcp(dir.path());
        let proxy = FaultProxy::start(
            &server.addr,
            Schedule {
                seed: 7,
                fault: Fault::Reset,
                direction: Direction::Requests,
                every: 25,
                spare: 3,
            },
        )
        .await;
        let (ns, fs) = mount(&proxy.addr, cache, Duration::from_secs(10)).await;
        let mut written = Vec::new();
        let mut write_errors = 0;
        for i in 0..40u32 {
            let path = format!("/f{i}");
            let data = content(i);
            let wrote = tokio::time::timeout(Duration::from_secs(30), async {
                let file = ns
                    .open_at(
                        &ns.create(&path, 0o644, false).await?,
                        OpenFlags {
                            truncate: true,
                            ..WRITE
                        },
                    )
                    .await?;
                let n = file.write_at(0, Bytes::from(data.clone())).await?;
                file.flush().await?;
                Ok::<_, Errno>(n)
            })
            .await
            .expect("a write hung");
            match wrote {
                Ok(n) if n == data.len() => written.push((path.clone(), data.clone())),
                Ok(n) => panic!("{path}: short write {n} reported done"),
                Err(e) => {
                    assert!(
                        [Errno::EIO, Errno::ESTALE].contains(&e),
                        "{cache} {path}: {e:?}"
                    );
                    write_errors += 1;
                }
            }
        }
        // Reads are retried: every file reported written reads back whole, through
        // the mount (despite the cuts) and on the server's disk.
        for (path, data) in &written {
            let back = tokio::time::timeout(Duration::from_secs(30), ns.read(path))
                .await
                .expect("a read hung")
                .unwrap_or_else(|e| panic!("{cache} {path}: read failed: {e:?}"));
            assert!(back[..] == data[..], "{cache} {path}: read back differs");
            let on_disk = std::fs::read(dir.path().join(&path[1..])).unwrap();
            assert!(
                on_disk == *data,
                "{cache} {path}: reported written, not on disk"
            );
        }
        let stats = fs.stats().reconnect;
        eprintln!(
            "{cache}: {} cuts, {stats:?}, {} of 40 files written and verified, {write_errors} \
             writes reported failed",
            proxy.injected(),
            written.len()
        );
        assert!(
            stats.reconnects >= 3,
            "{cache}: the schedule cut often: {stats:?}"
        );
        assert!(stats.retried > 0, "{cache}: {stats:?}");
        assert!(written.len() >= 20, "{cache}: most writes get through");
    }
}

/// A relay to `upstream` whose first connection never passes a Tclunk on (so none is
/// answered) until [`ClunkEater::cut`] closes it; later connections relay everything.
struct ClunkEater {
    addr: Addr,
    cut: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ClunkEater {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ClunkEater {
    async fn start(upstream: &Addr) -> ClunkEater {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio::net::{TcpListener, TcpStream};
        let upstream = upstream.to_string();
        let upstream = upstream.strip_prefix("tcp:").unwrap().to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(tokio::sync::Notify::new());
        let cut_first = cut.clone();
        let task = tokio::spawn(async move {
            let mut first = true;
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&upstream).await.unwrap();
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_server, mut to_server) = server.into_split();
                let replies = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
                });
                let eat = std::mem::take(&mut first);
                let cut = cut_first.clone();
                tokio::spawn(async move {
                    let requests = async {
                        let mut head = [0u8; 5];
                        loop {
                            from_client.read_exact(&mut head).await?;
                            let size = u32::from_le_bytes(head[..4].try_into().unwrap());
                            let mut rest = vec![0u8; size as usize - 5];
                            from_client.read_exact(&mut rest).await?;
                            if eat && head[4] == 120 {
                                continue; // Tclunk
                            }
                            to_server.write_all(&head).await?;
                            to_server.write_all(&rest).await?;
                        }
                        #[allow(unreachable_code)]
                        Ok::<(), std::io::Error>(())
                    };
                    if eat {
                        tokio::select! {
                            _ = requests => {}
                            _ = cut.notified() => {}
                        }
                    } else {
                        let _ = requests.await;
                    }
                    // Both directions close: the client sees the connection go.
                    replies.abort();
                });
            }
        });
        ClunkEater {
            addr: Addr::Tcp {
                host: "127.0.0.1".into(),
                port,
            },
            cut,
            task,
        }
    }

    fn cut(&self) {
        self.cut.notify_one();
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fid_whose_clunk_went_unanswered_is_retired_until_a_reconnect_gives_it_back() {
    let dir = Tree::build(&[Tree::file("a", "alpha")]);
    let server = serve_on(dir.path(), "tcp:127.0.0.1:0");
    let eater = ClunkEater::start(&server.addr).await;
    let (ns, fs) = mount(&eater.addr, "none", Duration::from_secs(1)).await;
    let session = fs.session().clone();
    // Reading the file walks a fid to it; its clunk is never answered.
    assert_eq!(&ns.read("/a").await.unwrap()[..], b"alpha");
    eventually("a clunk timed out", || session.lost_fids() >= 1).await;
    let lost = session.lost_fids();
    eater.cut();
    // The next call waits for the new connection, where the lost numbers are free.
    assert_eq!(&ns.read("/a").await.unwrap()[..], b"alpha");
    assert_eq!(fs.stats().reconnect.reconnects, 1);
    assert_eq!(session.lost_fids(), 0, "{lost} lost before the reconnect");
    // And they are used again without clashing with anything bound on the server.
    for _ in 0..20 {
        assert_eq!(&ns.read("/a").await.unwrap()[..], b"alpha");
        assert_eq!(ns.getattr("/a", true).await.unwrap().size, 5);
    }
    assert_eq!(session.lost_fids(), 0);
}

/// A call that waited for a free slot while the connection went must wait for the
/// reconnect to restore its fid, not fail ESTALE because the fid was not restored
/// *yet* (found by `connections_cut_again_and_again_lose_no_acknowledged_write`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_waited_for_its_slot_through_a_cut_waits_for_its_fid_to_be_restored() {
    let dir = Tree::build(&[Tree::file("f", "four")]);
    let server = TestServer::tcp(dir.path());
    let gate = ReplyGate::start(&server.addr).await;
    let config = ClientConfig {
        timeout: Duration::from_secs(10),
        msize: 65536,
        reconnect: true,
        max_inflight: 1,
        ..Default::default()
    };
    let session = Session::connect(&gate.addr, config).await.unwrap();
    let root = session.attach("").await.unwrap();
    let file = Arc::new(root.walk(&["f"]).await.unwrap().fid);
    file.lopen(open::RDWR).await.unwrap();
    // A first cut: from the first reconnect on, every request's fids are checked.
    gate.cut();
    assert_eq!(file.getattr().await.unwrap().size, 4);
    assert_eq!(session.reconnects().reconnects, 1);

    // A write holds the one slot, unanswered; a getattr waits for the slot.
    let mut held = gate.hold_next(|m| matches!(m, Message::Twrite(_)));
    let writing = tokio::spawn({
        let file = file.clone();
        async move { file.write(0, Bytes::from_static(b"FOUR")).await }
    });
    held.reply_held().await;
    let statting = tokio::spawn({
        let file = file.clone();
        async move { file.getattr().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !statting.is_finished(),
        "the getattr did not wait for the slot"
    );
    // The cut frees the slot (the write fails) while the new connection is slow.
    gate.delay_connections(Duration::from_millis(300));
    gate.cut();
    assert_eq!(writing.await.unwrap(), Err(Errno::EIO));
    let attr = tokio::time::timeout(Duration::from_secs(20), statting)
        .await
        .expect("the getattr hung")
        .unwrap();
    assert_eq!(attr.map(|a| a.size), Ok(4));
    let stats = session.reconnects();
    assert_eq!((stats.reconnects, stats.stale_fids), (2, 0), "{stats:?}");
}

/// Dials a fixed TCP port whatever the address says, counting the dials: a caller that
/// connects on the session's behalf (a containerd shim's container asks its host side).
struct Relay {
    to: Addr,
    dials: std::sync::atomic::AtomicUsize,
}

impl wasm9p_guest_fs::client::Dial for Relay {
    fn dial<'a>(
        &'a self,
        _addr: &'a Addr,
    ) -> wasm9p_proto::BoxFuture<'a, std::io::Result<wasm9p_proto::transport::BoxStream>> {
        self.dials
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Box::pin(wasm9p_proto::transport::connect(
            &self.to,
            Duration::from_secs(5),
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_dialed_by_its_caller_reconnects_through_the_same_dialer() {
    let dir = Tree::build(&[Tree::file("f", "kept across the restart")]);
    let server = serve_on(dir.path(), "tcp:127.0.0.1:0");
    let listen = server.addr.to_string();
    let relay = Arc::new(Relay {
        to: server.addr.clone(),
        dials: Default::default(),
    });
    let opts = NinepOptions::parse([("cache", Some("none")), ("reconnect", Some("on"))]).unwrap();
    let config = ClientConfig {
        timeout: Duration::from_secs(10),
        reconnect: true,
        dialer: wasm9p_guest_fs::client::Dialer::new(relay.clone()),
        ..Default::default()
    };
    // An address nobody listens at: the relay is the only way there.
    let nowhere: Addr = format!("unix:{}", dir.path().join("nowhere.sock").display())
        .parse()
        .unwrap();
    let session = Session::connect(&nowhere, config).await.unwrap();
    let fs = Arc::new(NinepFs::attach(&session, "", &opts).await.unwrap());
    let mut ns = Namespace::new();
    ns.mount("/", fs.clone(), false).unwrap();
    let file = ns.open("/f", READ).await.unwrap();
    assert_eq!(&file.read_at(0, 4).await.unwrap()[..], b"kept");
    assert_eq!(relay.dials.load(std::sync::atomic::Ordering::Relaxed), 1);

    drop(server);
    let server = serve_on(dir.path(), &listen);
    assert_eq!(
        &file.read_at(5, 6).await.unwrap()[..],
        b"across",
        "read after the restart"
    );
    assert_eq!(fs.stats().reconnect.reconnects, 1);
    assert!(
        relay.dials.load(std::sync::atomic::Ordering::Relaxed) >= 2,
        "the reconnect dialed through the relay"
    );
    drop((file, ns));
    drop(server);
}
