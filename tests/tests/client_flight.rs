//! Flights (`Fid::walk_open`, `Fid::walk_getattr`, `Fid::walk_readlink`): a walk and
//! the open, attributes and first read (or entries) of the fid it binds, or its
//! attributes or link target alone, sent at once to a server that says it handles
//! requests in order.
//!
//! The proof that they are one round trip: a link between client and server that
//! holds every reply back. With no reply delivered, our server still receives the
//! Twalk, Tlopen, Tgetattr and Tread; a client waiting for each reply would send the
//! Twalk alone. The same link, swapping the first two requests, shows a refused open
//! sent again (nothing is taken on trust). Against diod, which makes no promise, the
//! requests go one after another and the results are the same.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use wasm9p_guest_fs::client::{
    first_entries, ClientConfig, Entries, Fid, First, FlightError, Session,
};
use wasm9p_proto::consts::open;
use wasm9p_proto::transport::{duplex, BoxStream};
use wasm9p_proto::{Addr, Errno};
use wasm9p_server::{ExportConfig, Server, ServerConfig};
use wasm9p_tests::{Diod, Tree};

const TWALK: u8 = 110;
const TLOPEN: u8 = 12;
const TGETATTR: u8 = 24;
const TREAD: u8 = 116;
const TREADDIR: u8 = 40;
const TREADLINK: u8 = 22;
const TFLUSH: u8 = 108;
const TCLUNK: u8 = 120;

/// What the link does with frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hold {
    /// Everything passes.
    Nothing,
    /// Replies wait; requests pass.
    Replies,
    /// Replies wait, and the next request is held until the one after it has passed.
    RepliesAndSwapNext,
}

/// A link between a client and a server that counts requests and holds frames as told.
struct Gate {
    hold: watch::Sender<Hold>,
    requests: Arc<Mutex<Vec<u8>>>,
}

async fn read_frame(from: &mut (impl tokio::io::AsyncRead + Unpin)) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    from.read_exact(&mut size).await.ok()?;
    let mut frame = size.to_vec();
    frame.resize(u32::from_le_bytes(size) as usize, 0);
    from.read_exact(&mut frame[4..]).await.ok()?;
    Some(frame)
}

impl Gate {
    /// The client's end of a link to `server`.
    fn start(server: Server) -> (Gate, BoxStream) {
        let (client_end, gate_client) = duplex();
        let (gate_server, server_end) = duplex();
        tokio::spawn(async move { server.serve_connection(server_end, "gate".into()).await });
        let (hold, _) = watch::channel(Hold::Nothing);
        let requests = Arc::new(Mutex::new(Vec::new()));
        let gate = Gate {
            hold,
            requests: requests.clone(),
        };
        let mut holds = gate.hold.subscribe();
        let mut replies_hold = gate.hold.subscribe();
        let (to_server, mut to_server_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
        let (to_client, mut to_client_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
        // A reader per end; a writer per direction, which holds as told.
        let (mut client_read, mut client_write) = tokio::io::split(gate_client);
        let (mut server_read, mut server_write) = tokio::io::split(gate_server);
        tokio::spawn(async move {
            while let Some(frame) = read_frame(&mut client_read).await {
                if to_server.send(frame).is_err() {
                    break;
                }
            }
        });
        tokio::spawn(async move {
            while let Some(frame) = read_frame(&mut server_read).await {
                if to_client.send(frame).is_err() {
                    break;
                }
            }
        });
        tokio::spawn(async move {
            let mut swapped: Option<Vec<u8>> = None;
            while let Some(frame) = to_server_rx.recv().await {
                requests.lock().unwrap().push(frame[4]);
                if *holds.borrow_and_update() == Hold::RepliesAndSwapNext && swapped.is_none() {
                    swapped = Some(frame);
                    continue;
                }
                if server_write.write_all(&frame).await.is_err() {
                    break;
                }
                if let Some(first) = swapped.take() {
                    if server_write.write_all(&first).await.is_err() {
                        break;
                    }
                }
            }
        });
        tokio::spawn(async move {
            while let Some(frame) = to_client_rx.recv().await {
                let _ = replies_hold.wait_for(|h| *h == Hold::Nothing).await;
                if client_write.write_all(&frame).await.is_err() {
                    break;
                }
            }
        });
        (gate, client_end)
    }

    fn set(&self, hold: Hold) {
        self.hold.send_replace(hold);
    }

    fn requests(&self) -> Vec<u8> {
        self.requests.lock().unwrap().clone()
    }

    /// Waits until `n` requests have crossed since `from` (at most 20 s: a client
    /// that waits for replies the gate holds never sends them).
    async fn wait_for_requests(&self, from: usize, n: usize) -> Vec<u8> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let seen = self.requests();
            if seen.len() >= from + n {
                return seen[from..].to_vec();
            }
            assert!(
                Instant::now() < deadline,
                "with the replies held, only {:?} reached the server",
                &seen[from..]
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn fixture() -> tempfile::TempDir {
    Tree::build(&[
        Tree::Dir(
            "sub",
            vec![
                Tree::file("inner.txt", "inner"),
                Tree::Symlink("link", "inner.txt"),
            ],
        ),
        Tree::File(
            "big.bin",
            (0..300_000u32).map(|i| (i % 251) as u8).collect(),
        ),
    ])
}

fn config() -> ClientConfig {
    ClientConfig {
        timeout: Duration::from_secs(20),
        ..ClientConfig::default()
    }
}

async fn settle(session: &Session, baseline: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while session.live_fids() != baseline {
        assert!(Instant::now() < deadline, "fids leaked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Our server on `dir` behind a gate (letting everything pass), a session through it,
/// its root, and the session's answer on order already asked.
async fn gated(dir: &std::path::Path) -> (Gate, Session, Arc<Fid>) {
    let server = Server::new(ServerConfig {
        exports: vec![ExportConfig::new(dir)],
        ..Default::default()
    })
    .unwrap();
    let (gate, client_end) = Gate::start(server);
    let session = Session::over(client_end, config()).await.unwrap();
    let root = Arc::new(session.attach("").await.unwrap());
    assert!(session.handles_requests_in_order(&root).await);
    settle(&session, 1).await; // the probe's fid is clunked
    (gate, session, root)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_with_its_attributes_and_first_read_is_one_round_trip_on_our_server() {
    let dir = fixture();
    let (gate, session, root) = gated(dir.path()).await;

    gate.set(Hold::Replies);
    let before = gate.requests().len();
    let opening = tokio::spawn({
        let root = root.clone();
        async move {
            root.walk_open(&["sub", "inner.txt"], open::RDONLY, true, First::Read(4096))
                .await
        }
    });
    let sent = gate.wait_for_requests(before, 4).await;
    assert_eq!(
        sent,
        [TWALK, TLOPEN, TGETATTR, TREAD],
        "one flight, in order"
    );
    gate.set(Hold::Nothing);
    let opened = opening.await.unwrap().unwrap();
    assert_eq!(opened.walk.qids.len(), 2);
    assert_eq!(opened.attr.as_ref().map(|a| a.size), Some(5));
    assert_eq!(opened.data.as_deref(), Some(&b"inner"[..]));
    // The fid is open: it reads.
    assert_eq!(&opened.walk.fid.read_at(1, 10).await.unwrap()[..], b"nner");
    assert_eq!(session.flights(), (1, 0));
    drop(opened);

    // A missing name: the walk's error, with the index to cache as missing, and every
    // request of the flight answered before the fid number is free again.
    let missing = root
        .walk_open(&["sub", "nope.txt"], open::RDONLY, true, First::Read(4096))
        .await
        .unwrap_err();
    match missing {
        FlightError::Walk(w) => assert_eq!((w.index, w.errno), (1, Errno::ENOENT)),
        other => panic!("expected a walk error, got {other:?}"),
    }
    // A directory opened read-only works; the read beside it fails and is left out.
    let opened = root
        .walk_open(&["sub"], open::RDONLY, true, First::Read(4096))
        .await
        .unwrap();
    assert!(opened.data.is_none());
    drop(opened);
    settle(&session, 1).await; // its Tclunk is answered before the gate counts

    // A directory's listing: its first entries in the flight of its walk and open.
    gate.set(Hold::Replies);
    let before = gate.requests().len();
    let listing = tokio::spawn({
        let root = root.clone();
        async move {
            let flags = open::RDONLY | open::DIRECTORY;
            root.walk_open(&["sub"], flags, false, First::Entries(8192))
                .await
        }
    });
    let sent = gate.wait_for_requests(before, 3).await;
    assert_eq!(sent, [TWALK, TLOPEN, TREADDIR], "one flight, in order");
    gate.set(Hold::Nothing);
    let opened = listing.await.unwrap().unwrap();
    let first = opened.entries.clone().unwrap();
    assert!(first.end, "our server fills its listings: these are all");
    let mut names: Vec<String> = first.entries.iter().map(|e| e.name.clone()).collect();
    names.sort();
    assert_eq!(names, [".", "..", "inner.txt", "link"]);
    let before = gate.requests().len();
    let all = opened
        .walk
        .fid
        .readdir_all_after(Some(first))
        .await
        .unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(
        gate.requests().len(),
        before,
        "no Treaddir past entries that ended the listing"
    );
    let rest = opened
        .walk
        .fid
        .readdir_all_after(Some(Entries::default()))
        .await
        .unwrap();
    assert!(rest.is_empty(), "an empty first batch is the end");
    drop(opened);
    settle(&session, 1).await;

    // A stat of a file: its attributes in the flight of its walk.
    gate.set(Hold::Replies);
    let before = gate.requests().len();
    let stat = tokio::spawn({
        let root = root.clone();
        async move { root.walk_getattr(&["sub", "inner.txt"]).await }
    });
    let sent = gate.wait_for_requests(before, 2).await;
    assert_eq!(sent, [TWALK, TGETATTR], "one flight, in order");
    gate.set(Hold::Nothing);
    let (walk, attr) = stat.await.unwrap().unwrap();
    assert_eq!((attr.size, attr.qid), (5, walk.fid.qid));
    drop(walk);
    let missing = root.walk_getattr(&["nope"]).await.unwrap_err();
    assert_eq!(missing.errno(), Errno::ENOENT);
    assert_eq!(session.flights(), (6, 0));
    settle(&session, 1).await;

    // A link's target: its Treadlink in the flight of its walk.
    gate.set(Hold::Replies);
    let before = gate.requests().len();
    let reading = tokio::spawn({
        let root = root.clone();
        async move { root.walk_readlink(&["sub", "link"]).await }
    });
    let sent = gate.wait_for_requests(before, 2).await;
    assert_eq!(sent, [TWALK, TREADLINK], "one flight, in order");
    gate.set(Hold::Nothing);
    let (walk, target) = reading.await.unwrap().unwrap();
    assert_eq!(target, "inner.txt");
    assert_eq!(walk.qids.len(), 2);
    drop(walk);
    // Not a link: the server's refusal, asked again once the walk is answered.
    let refused = root.walk_readlink(&["sub", "inner.txt"]).await.unwrap_err();
    assert_eq!(refused.errno(), Errno::EINVAL);
    assert_eq!(session.flights(), (8, 1));
    settle(&session, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_the_server_took_before_its_walk_is_sent_again_after_it() {
    let dir = fixture();
    let (gate, session, root) = gated(dir.path()).await;

    // The Twalk reaches the server after the Tlopen: the open (and the read behind
    // it) find no fid, and the client opens again once the walk is answered.
    gate.set(Hold::RepliesAndSwapNext);
    let before = gate.requests().len();
    let opening = tokio::spawn({
        let root = root.clone();
        async move {
            root.walk_open(&["big.bin"], open::RDONLY, true, First::Read(4096))
                .await
        }
    });
    gate.wait_for_requests(before, 4).await;
    gate.set(Hold::Nothing);
    let opened = opening.await.unwrap().unwrap();
    assert_eq!(session.flights(), (1, 1), "one flight, its open sent again");
    assert!(
        opened.data.is_none(),
        "the read before the open is not believed"
    );
    assert_eq!(opened.attr.as_ref().map(|a| a.size), Some(300_000));
    let bytes = opened.walk.fid.read_at(299_990, 100).await.unwrap();
    let want: Vec<u8> = (299_990..300_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(&bytes[..], &want[..]);
    drop(opened);
    settle(&session, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diod_makes_no_promise_and_gets_the_requests_one_after_another() {
    let dir = fixture();
    let diod = Diod::start(dir.path());
    let addr = Addr::Tcp {
        host: "127.0.0.1".into(),
        port: diod.port,
    };
    let session = Session::connect(&addr, config()).await.unwrap();
    let root = session.attach(dir.path().to_str().unwrap()).await.unwrap();
    let opened = root
        .walk_open(&["sub", "inner.txt"], open::RDONLY, true, First::Read(4096))
        .await
        .unwrap();
    assert!(!session.handles_requests_in_order(&root).await);
    assert_eq!(session.flights(), (0, 0));
    assert!(opened.data.is_none(), "no read without a flight");
    assert_eq!(opened.attr.as_ref().map(|a| a.size), Some(5));
    assert_eq!(&opened.walk.fid.read_at(0, 10).await.unwrap()[..], b"inner");
    let counts: std::collections::HashMap<_, _> = session.counts().snapshot().into_iter().collect();
    assert_eq!(
        counts.get("xattrwalk"),
        Some(&2),
        "each promise asked once: {counts:?}"
    );
    drop(opened);
    let missing = root
        .walk_open(&["sub", "nope.txt"], open::RDONLY, true, First::Read(4096))
        .await
        .unwrap_err();
    assert_eq!(missing.errno(), Errno::ENOENT);
    let (walk, attr) = root.walk_getattr(&["sub", "inner.txt"]).await.unwrap();
    assert_eq!((attr.size, attr.qid.path), (5, walk.fid.qid.path));
    drop(walk);
    let (walk, target) = root.walk_readlink(&["sub", "link"]).await.unwrap();
    assert_eq!(target, "inner.txt");
    drop(walk);
    assert_eq!(session.flights(), (0, 0));
    settle(&session, 1).await;
}

/// A directory of `n` files with names of 40 bytes or more, for listings that take
/// many Treaddirs.
fn big_directory(n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("many")).unwrap();
    for i in 0..n {
        let name = format!("a-name-long-enough-to-fill-listings-{i:05}");
        std::fs::write(dir.path().join("many").join(name), b"").unwrap();
    }
    dir
}

/// The names of `entries` but `.` and `..`, sorted, and whether each came once.
fn names_once(entries: &[wasm9p_proto::DirEntry]) -> (Vec<String>, bool) {
    let mut names: Vec<String> = entries
        .iter()
        .map(|e| e.name.clone())
        .filter(|n| n != "." && n != "..")
        .collect();
    names.sort();
    let before = names.len();
    let mut unique = names.clone();
    unique.dedup();
    (names, unique.len() == before)
}

/// A listing over many Treaddirs: on our server, which fills its listings, the last
/// batch ends it (no Treaddir comes back empty); on diod, which promises nothing, the
/// client reads until one does. Either way every name comes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_ends_at_its_last_batch_on_our_server_and_at_an_empty_one_on_diod() {
    const FILES: usize = 1000;
    let dir = big_directory(FILES);
    let want: Vec<String> = (0..FILES)
        .map(|i| format!("a-name-long-enough-to-fill-listings-{i:05}"))
        .collect();
    let small = ClientConfig {
        msize: 8192,
        ..config()
    };
    let flags = open::RDONLY | open::DIRECTORY;

    let server = Server::new(ServerConfig {
        exports: vec![ExportConfig::new(dir.path())],
        ..Default::default()
    })
    .unwrap();
    let (gate, client_end) = Gate::start(server);
    let session = Session::over(client_end, small.clone()).await.unwrap();
    let root = session.attach("").await.unwrap();
    let opened = root
        .walk_open(&["many"], flags, false, first_entries(&session))
        .await
        .unwrap();
    assert!(
        session.fills_listings(),
        "our server promises filled listings"
    );
    let before = gate.requests().len();
    let all = opened
        .walk
        .fid
        .readdir_all_after(opened.entries)
        .await
        .unwrap();
    let treaddirs = gate.requests()[before..]
        .iter()
        .filter(|&&t| t == TREADDIR)
        .count();
    let (names, once) = names_once(&all);
    assert!(once, "a name listed twice");
    assert_eq!(names, want);
    // ".", ".." and the files' entries (24 bytes and the name) packed into batches of
    // at most 8,168 bytes (the msize less Rreaddir's header), each filled until the
    // next entry does not fit: that many batches, the flight's first, and none past
    // the last.
    let sizes = [25, 26]
        .into_iter()
        .chain(want.iter().map(|n| 24 + n.len()));
    let (mut batches, mut used) = (1, 0);
    for size in sizes {
        if used + size > 8192 - 24 {
            (batches, used) = (batches + 1, 0);
        }
        used += size;
    }
    assert!(batches > 5, "{batches} batches");
    assert_eq!(treaddirs + 1, batches, "Treaddirs after the flight's");
    let again = opened.walk.fid.entries(0, u32::MAX).await.unwrap();
    assert!(!again.end, "a full batch does not end the listing");

    let diod = Diod::start(dir.path());
    let addr = Addr::Tcp {
        host: "127.0.0.1".into(),
        port: diod.port,
    };
    let session = Session::connect(&addr, small).await.unwrap();
    let root = session.attach(dir.path().to_str().unwrap()).await.unwrap();
    let opened = root
        .walk_open(&["many"], flags, false, first_entries(&session))
        .await
        .unwrap();
    assert!(!session.fills_listings(), "diod promises nothing");
    let batches = std::sync::atomic::AtomicUsize::new(0);
    let mut all = Vec::new();
    let mut offset = 0;
    loop {
        let batch = opened.walk.fid.entries(offset, u32::MAX).await.unwrap();
        batches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        offset = batch.next_cookie(offset).unwrap();
        if batch.end {
            assert!(
                batch.entries.is_empty(),
                "only an empty batch ends diod's listing"
            );
            break;
        }
        all.extend(batch.entries);
    }
    let (names, once) = names_once(&all);
    assert!(once, "a name listed twice");
    assert_eq!(names, want);
    assert_eq!(
        opened.walk.fid.readdir_all().await.unwrap().len(),
        FILES + 2,
        "readdir_all reads diod's listing to its end"
    );
}

/// A read flushed on a fid may still be running on the server until its Rflush; a
/// server that frees the fid at a Tclunk meanwhile may use it freed (diod crashed so
/// under concurrent readers). The clunk waits for the Rflush; a clunk of another fid
/// does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fid_is_clunked_only_once_the_flush_of_a_read_on_it_is_answered() {
    let dir = fixture();
    let (gate, session, root) = gated(dir.path()).await;
    let file = root.walk(&["big.bin"]).await.unwrap().fid;
    file.lopen(open::RDONLY).await.unwrap();
    let other = root.walk(&["sub"]).await.unwrap().fid;
    gate.set(Hold::Replies);
    let before = gate.requests().len();
    // The reader goes away before its reply: the client flushes the read.
    let read = tokio::time::timeout(Duration::from_millis(100), file.read_at(0, 4096)).await;
    assert!(read.is_err(), "the reply came through the held gate");
    assert_eq!(gate.wait_for_requests(before, 2).await, [TREAD, TFLUSH]);
    // Another fid's clunk has nothing to wait for (one that waited would go only at
    // the session's timeout, 20 s).
    drop(other);
    let deadline = Instant::now() + Duration::from_secs(5);
    while gate.requests().len() < before + 3 {
        assert!(
            Instant::now() < deadline,
            "a clunk of another fid waited for the flush"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(gate.requests()[before..], [TREAD, TFLUSH, TCLUNK]);
    drop(file);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        gate.requests()[before..],
        [TREAD, TFLUSH, TCLUNK],
        "the clunk was sent before the Rflush"
    );
    gate.set(Hold::Nothing);
    assert_eq!(
        gate.wait_for_requests(before, 4).await,
        [TREAD, TFLUSH, TCLUNK, TCLUNK]
    );
    settle(&session, 1).await;
}
