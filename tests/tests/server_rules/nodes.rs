//! A `NodeFs` export (what plugins and a build action's input root are served as)
//! keeps the session rules and the per-connection bounds of a directory export, over
//! a real Unix socket: version first, bad frames answered, fids and requests in
//! flight bounded, Tflush after the reply it flushes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use wasm9p_proto::transport::Listener;
use wasm9p_server::nodes::{Attr, BoxFuture, Dirent, Kind, New, NodeFs};
use wasm9p_server::MAX_INFLIGHT_PER_CONNECTION;

use super::*;

const ROOT: u64 = 1;
const FILE: u64 = 2;

/// A read-only tree of one file, `f`, whose reads wait while the gate is shut: the
/// server's bounds are seen as the reads it lets reach the file system at once.
struct GatedFs {
    open: tokio::sync::watch::Sender<bool>,
    reading: AtomicUsize,
    most_at_once: AtomicUsize,
}

impl GatedFs {
    fn new() -> Arc<GatedFs> {
        Arc::new(GatedFs {
            open: tokio::sync::watch::channel(true).0,
            reading: AtomicUsize::new(0),
            most_at_once: AtomicUsize::new(0),
        })
    }

    fn gate(&self, open: bool) {
        self.open.send_replace(open);
    }
}

impl NodeFs for GatedFs {
    fn root(&self) -> u64 {
        ROOT
    }
    fn writable(&self) -> bool {
        false
    }
    fn lookup<'a>(&'a self, dir: u64, name: &'a str) -> BoxFuture<'a, Result<u64, Errno>> {
        Box::pin(async move {
            match (dir, name) {
                (ROOT, "f") => Ok(FILE),
                (ROOT, _) => Err(Errno::ENOENT),
                _ => Err(Errno::ENOTDIR),
            }
        })
    }
    fn getattr(&self, node: u64) -> BoxFuture<'_, Result<Attr, Errno>> {
        let (kind, mode, size) = match node {
            ROOT => (Kind::Directory, 0o755, 0),
            FILE => (Kind::File, 0o644, 4096),
            _ => return Box::pin(async { Err(Errno::ENOENT) }),
        };
        Box::pin(async move {
            Ok(Attr {
                kind,
                mode,
                size,
                nlink: 1,
                mtime_sec: 0,
                mtime_nsec: 0,
                version: 1,
            })
        })
    }
    fn readlink(&self, _: u64) -> BoxFuture<'_, Result<String, Errno>> {
        Box::pin(async { Err(Errno::EINVAL) })
    }
    fn read(&self, _: u64, offset: u64, count: u32) -> BoxFuture<'_, Result<Bytes, Errno>> {
        Box::pin(async move {
            let now = self.reading.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_at_once.fetch_max(now, Ordering::SeqCst);
            let mut open = self.open.subscribe();
            let _ = open.wait_for(|open| *open).await;
            self.reading.fetch_sub(1, Ordering::SeqCst);
            let end = 4096u64.min(offset + u64::from(count));
            Ok(Bytes::from(vec![7u8; end.saturating_sub(offset) as usize]))
        })
    }
    fn readdir(&self, _: u64) -> BoxFuture<'_, Result<Vec<Dirent>, Errno>> {
        Box::pin(async {
            Ok(vec![Dirent {
                name: "f".into(),
                node: FILE,
                kind: Kind::File,
            }])
        })
    }
    fn write(&self, _: u64, _: u64, _: Bytes) -> BoxFuture<'_, Result<u32, Errno>> {
        Box::pin(async { Err(Errno::EROFS) })
    }
    fn set_size(&self, _: u64, _: u64) -> BoxFuture<'_, Result<(), Errno>> {
        Box::pin(async { Err(Errno::EROFS) })
    }
    fn create<'a>(&'a self, _: u64, _: &'a str, _: New<'a>) -> BoxFuture<'a, Result<u64, Errno>> {
        Box::pin(async { Err(Errno::EROFS) })
    }
    fn unlink<'a>(&'a self, _: u64, _: &'a str) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async { Err(Errno::EROFS) })
    }
    fn rename<'a>(
        &'a self,
        _: u64,
        _: &'a str,
        _: u64,
        _: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async { Err(Errno::EROFS) })
    }
}

/// `fs` served on a Unix socket in `dir`, and a connection to it (no Tversion yet).
async fn serve(fs: Arc<GatedFs>, dir: &tempfile::TempDir) -> Conn {
    let addr: Addr = format!("unix:{}", dir.path().join("nodes.sock").display())
        .parse()
        .unwrap();
    let listener = Listener::bind(&addr).await.unwrap();
    tokio::spawn(wasm9p_server::nodes::serve_on(fs, listener));
    Conn::connect(&addr).await
}

/// A connection to a gated node export with its file `f` open for reading as fid 1.
async fn file_open_on_a_gated_export(dir: &tempfile::TempDir) -> (Arc<GatedFs>, Conn) {
    let fs = GatedFs::new();
    let mut c = serve(fs.clone(), dir).await;
    c.version(MSIZE).await;
    c.attach(0, "").await.unwrap();
    c.walk(0, 1, "f").await.unwrap();
    c.lopen(1, open::RDONLY).await.unwrap();
    (fs, c)
}

fn read(fid: u32) -> Tread {
    Tread {
        fid,
        offset: 0,
        count: 64,
    }
}

#[tokio::test]
async fn a_node_export_keeps_the_session_rules_of_a_directory_export() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = serve(GatedFs::new(), &dir).await;
    // Nothing before a version.
    assert_eq!(c.attach(0, "").await, Err(Errno::EPROTO));
    // An msize no reply fits in.
    c.send(
        consts::NOTAG,
        Tversion {
            msize: consts::MIN_MSIZE - 1,
            version: consts::VERSION_9P2000_L.into(),
        },
    )
    .await;
    assert_eq!(c.recv_error().await.1, Errno::EINVAL);
    assert_eq!(c.version(1 << 30).await.msize, consts::MAX_MSIZE);
    c.attach(0, "").await.unwrap();
    c.walk(0, 1, "f").await.unwrap();
    // A body that does not decode, and a type nobody knows: answered, and the
    // connection goes on.
    c.send_raw(&[17, 0, 0, 0, 110, 5, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0])
        .await;
    assert_eq!(c.recv_error().await, (5, Errno::EINVAL));
    c.send_raw(&[7, 0, 0, 0, 250, 6, 0]).await;
    assert_eq!(c.recv_error().await, (6, Errno::EOPNOTSUPP));
    // A reply sent as a request.
    c.send(7, Rclunk {}).await;
    assert_eq!(c.recv_error().await, (7, Errno::EINVAL));
    c.lopen(1, open::RDONLY).await.unwrap();
    assert_eq!(c.read_all(1).await.unwrap(), vec![7u8; 4096]);
    // A new version resets the fids.
    c.version(MSIZE).await;
    assert_eq!(c.getattr(1).await, Err(Errno::EBADF));
}

#[tokio::test]
async fn a_node_export_refuses_fids_past_the_bound_as_a_directory_export_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = serve(GatedFs::new(), &dir).await;
    c.version(MSIZE).await;
    c.attach(0, "").await.unwrap();
    let max = fill_the_fid_table(&mut c).await;
    assert_eq!(c.walk(0, max, "").await, Err(Errno::EMFILE));
    assert_eq!(c.attach(max, "").await, Err(Errno::EMFILE));
    // Nothing lost: the fids there still serve, and a clunk makes room.
    assert_eq!(c.walk(1, 1, "f").await.map(|q| q.len()), Ok(1));
    c.clunk(2).await.unwrap();
    c.walk(0, max, "f").await.unwrap();
}

#[tokio::test]
async fn a_node_export_runs_no_more_requests_at_once_than_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, mut c) = file_open_on_a_gated_export(&dir).await;
    fs.gate(false);
    let sent = MAX_INFLIGHT_PER_CONNECTION + 44;
    for tag in 0..sent as u16 {
        c.send(tag, read(1)).await;
    }
    // The reads reach the file system up to the bound, and no further while none is
    // answered.
    let deadline = Instant::now() + Duration::from_secs(20);
    while fs.reading.load(Ordering::SeqCst) < MAX_INFLIGHT_PER_CONNECTION {
        assert!(
            Instant::now() < deadline,
            "{} reads",
            fs.reading.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        fs.reading.load(Ordering::SeqCst),
        MAX_INFLIGHT_PER_CONNECTION
    );
    assert!(c.recv_for(Duration::from_millis(50)).await.is_none());
    // Then every one is answered.
    fs.gate(true);
    let mut answered = std::collections::HashSet::new();
    while answered.len() < sent {
        let f = c.recv().await.unwrap();
        assert!(matches!(f.body, Ok(Message::Rread(_))), "{:?}", f.body);
        assert!(answered.insert(f.tag), "tag {} twice", f.tag);
    }
    assert_eq!(
        fs.most_at_once.load(Ordering::SeqCst),
        MAX_INFLIGHT_PER_CONNECTION
    );
}

#[tokio::test]
async fn flush_on_a_node_export_follows_the_reply_it_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, mut c) = file_open_on_a_gated_export(&dir).await;
    // A tag nobody used: answered at once.
    c.send(9, Tflush { oldtag: 1234 }).await;
    let f = c.recv().await.unwrap();
    assert_eq!((f.tag, f.body), (9, Ok(Rflush {}.into())));
    // One naming its own tag (the fuzzer found it waiting for itself for ever).
    c.send(10, Tflush { oldtag: 10 }).await;
    let f = c.recv().await.unwrap();
    assert_eq!((f.tag, f.body), (10, Ok(Rflush {}.into())));
    // A read held in the file system: its Rflush waits for it, and comes after it.
    fs.gate(false);
    c.send(5, read(1)).await;
    c.send(6, Tflush { oldtag: 5 }).await;
    assert!(c.recv_for(Duration::from_millis(200)).await.is_none());
    fs.gate(true);
    let first = c.recv().await.unwrap();
    assert_eq!(first.tag, 5);
    assert!(matches!(first.body, Ok(Message::Rread(_))));
    let second = c.recv().await.unwrap();
    assert_eq!((second.tag, second.body), (6, Ok(Rflush {}.into())));
}
