//! Namespace operation sequences: the same [`Op`]s applied to a 9p mount (our server,
//! in process, on one tempdir) and to a bind mount (the oracle: the host file system
//! directly, on another tempdir holding the same tree). After each operation both must
//! agree (the same errno, the same bytes read, the same listing, size and file type),
//! and at the end both trees on disk must be the same. The first input byte picks the
//! 9p cache mode (none, readahead, mmap, loose): the mount is the export's only user,
//! so every mode must be exact.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use bytes::Bytes;
use wasm9p_guest_fs::backend::bind::BindFs;
use wasm9p_guest_fs::backend::ninep::NinepFs;
use wasm9p_guest_fs::backend::{OpenFlags, SetAttr};
use wasm9p_guest_fs::client::{ClientConfig, Session};
use wasm9p_guest_fs::mount_options::NinepOptions;
use wasm9p_guest_fs::namespace::Namespace;
use wasm9p_proto::Errno;
use wasm9p_server::{ExportConfig, Server, ServerConfig};

/// Paths operations name: a few, so that they meet (the same file created, renamed,
/// read); some through `..`, a symlink, or out of the mount's root.
const PATHS: [&str; 14] = [
    "/a",
    "/b",
    "/d",
    "/d/a",
    "/d/c",
    "/d/e",
    "/d/e/a",
    "/s",
    "/s/a",
    "/d/../b",
    "/../a",
    "/d/e/../../c",
    "/l",
    "/d/l",
];

/// Targets symlinks get.
const TARGETS: [&str; 5] = ["d", "a", "../a", "/d/e", "missing"];

/// A path from [`PATHS`].
#[derive(Clone, Copy, Debug)]
pub struct Name(pub u8);

impl<'a> Arbitrary<'a> for Name {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Name(u.int_in_range(0..=PATHS.len() as u8 - 1)?))
    }
}

impl Name {
    fn path(self) -> &'static str {
        PATHS[usize::from(self.0) % PATHS.len()]
    }
}

/// One namespace operation.
#[derive(Arbitrary, Clone, Debug)]
pub enum Op {
    /// Writes `len` bytes of `byte` at `offset`, creating the file if missing.
    Write {
        /// The file.
        file: Name,
        /// Where.
        offset: u16,
        /// How many.
        len: u16,
        /// What.
        byte: u8,
    },
    /// Opens for writing (truncating or appending), writes, flushes.
    WriteOpen {
        /// The file.
        file: Name,
        /// Truncate on open.
        truncate: bool,
        /// Append mode.
        append: bool,
        /// How many bytes.
        len: u16,
        /// What.
        byte: u8,
    },
    /// Creates (exclusively or not).
    Create {
        /// The file.
        file: Name,
        /// O_EXCL.
        exclusive: bool,
    },
    /// Reads the whole file.
    Read {
        /// The file.
        file: Name,
    },
    /// Reads a range through an open file.
    ReadAt {
        /// The file.
        file: Name,
        /// Where.
        offset: u16,
        /// How many.
        len: u16,
    },
    /// Truncates or extends.
    Truncate {
        /// The file.
        file: Name,
        /// New size.
        size: u16,
    },
    /// Makes a directory.
    Mkdir {
        /// The directory.
        dir: Name,
    },
    /// Unlinks a file or removes a directory.
    Unlink {
        /// The name.
        path: Name,
        /// rmdir.
        dir_only: bool,
    },
    /// Renames.
    Rename {
        /// From.
        from: Name,
        /// To.
        to: Name,
    },
    /// Makes a symlink.
    Symlink {
        /// Index into the targets.
        target: u8,
        /// The link.
        path: Name,
    },
    /// Reads a symlink.
    Readlink {
        /// The link.
        path: Name,
    },
    /// Stats (following symlinks or not).
    Stat {
        /// The name.
        path: Name,
        /// Follow a final symlink.
        follow: bool,
    },
    /// Lists a directory.
    Readdir {
        /// The directory.
        dir: Name,
    },
    /// Makes a hard link.
    Link {
        /// Existing.
        from: Name,
        /// New.
        to: Name,
    },
}

/// What an operation gave, compared across the two mounts.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Done,
    Bytes(Vec<u8>),
    Names(Vec<String>),
    Target(String),
    /// File type bits and size (directories' sizes differ between file systems).
    Stat(u32, Option<u64>),
    Failed(Errno),
}

fn outcome<T>(r: Result<T, Errno>, ok: impl FnOnce(T) -> Outcome) -> Outcome {
    match r {
        Ok(v) => ok(v),
        Err(e) => Outcome::Failed(e),
    }
}

/// The outcome of an operation that returns nothing worth comparing.
fn done<T>(r: Result<T, Errno>) -> Outcome {
    outcome(r, |_| Outcome::Done)
}

async fn apply(ns: &Namespace, op: &Op) -> Outcome {
    match *op {
        Op::Write {
            file,
            offset,
            len,
            byte,
        } => {
            let data = Bytes::from(vec![byte; usize::from(len % 3000)]);
            done(ns.write(file.path(), u64::from(offset % 5000), data).await)
        }
        Op::WriteOpen {
            file,
            truncate,
            append,
            len,
            byte,
        } => {
            let flags = OpenFlags {
                read: false,
                write: true,
                truncate,
                append,
            };
            let r = async {
                let f = ns.open(file.path(), flags).await?;
                let n = f
                    .write_at(0, Bytes::from(vec![byte; usize::from(len % 3000)]))
                    .await?;
                f.flush().await?;
                Ok(n)
            }
            .await;
            outcome(r, |n| Outcome::Bytes(n.to_le_bytes().to_vec()))
        }
        Op::Create { file, exclusive } => done(ns.create(file.path(), 0o644, exclusive).await),
        Op::Read { file } => outcome(ns.read(file.path()).await, |b| Outcome::Bytes(b.to_vec())),
        Op::ReadAt { file, offset, len } => {
            let r = async {
                let f = ns
                    .open(
                        file.path(),
                        OpenFlags {
                            read: true,
                            ..Default::default()
                        },
                    )
                    .await?;
                f.read_at(u64::from(offset % 6000), usize::from(len)).await
            }
            .await;
            outcome(r, |b| Outcome::Bytes(b.to_vec()))
        }
        Op::Truncate { file, size } => {
            let attr = SetAttr {
                size: Some(u64::from(size % 6000)),
                ..Default::default()
            };
            done(ns.setattr(file.path(), &attr, true).await)
        }
        Op::Mkdir { dir } => done(ns.mkdir(dir.path(), 0o755).await),
        Op::Unlink { path, dir_only } => done(ns.unlink(path.path(), dir_only).await),
        Op::Rename { from, to } => done(ns.rename(from.path(), to.path()).await),
        Op::Symlink { target, path } => {
            let target = TARGETS[usize::from(target) % TARGETS.len()];
            done(ns.symlink(target, path.path()).await)
        }
        Op::Readlink { path } => outcome(ns.readlink(path.path()).await, |t| {
            Outcome::Target(t.to_string())
        }),
        Op::Stat { path, follow } => outcome(ns.getattr(path.path(), follow).await, |a| {
            let kind = a.mode & 0o170000;
            Outcome::Stat(kind, (kind != 0o040000).then_some(a.size))
        }),
        Op::Readdir { dir } => outcome(ns.readdir(dir.path()).await, |entries| {
            let mut names: Vec<String> = entries
                .into_iter()
                .map(|e| e.name)
                .filter(|n| n != "." && n != "..")
                .collect();
            names.sort();
            Outcome::Names(names)
        }),
        Op::Link { from, to } => done(ns.link(from.path(), to.path(), false).await),
    }
}

/// Decodes `data` (a cache-mode byte, then operations) and checks the 9p mount against
/// the bind mount. Returns the operations applied.
pub fn sequence(data: &[u8]) -> usize {
    let Some((&mode, rest)) = data.split_first() else {
        return 0;
    };
    let mut u = Unstructured::new(rest);
    let mut ops = Vec::new();
    while ops.len() < 64 {
        match Op::arbitrary(&mut u) {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
    let cache = ["none", "readahead", "mmap", "loose"][usize::from(mode % 4)];
    run(cache, &ops);
    ops.len()
}

/// Applies `ops` to both mounts; panics on the first disagreement.
pub fn run(cache: &str, ops: &[Op]) {
    let root = tempfile::tempdir().unwrap();
    let (nine, bind) = (root.path().join("9p"), root.path().join("bind"));
    for dir in [&nine, &bind] {
        std::fs::create_dir_all(dir.join("d")).unwrap();
        std::fs::write(dir.join("a"), b"first file").unwrap();
        std::fs::write(dir.join("d/c"), vec![b'c'; 5000]).unwrap();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = Server::new(ServerConfig {
            exports: vec![ExportConfig::new(&nine)],
            msize: 8192,
            ..Default::default()
        })
        .unwrap();
        let (client_end, server_end) = wasm9p_proto::transport::duplex();
        tokio::spawn(async move { server.serve_connection(server_end, "fuzz".into()).await });
        let session = Session::over(
            client_end,
            ClientConfig {
                msize: 8192,
                ..ClientConfig::default()
            },
        )
        .await
        .unwrap();
        let opts = NinepOptions::parse([("cache", Some(cache))]).unwrap();
        let mut ninep = Namespace::new();
        ninep
            .mount(
                "/",
                Arc::new(NinepFs::attach(&session, "", &opts).await.unwrap()),
                false,
            )
            .unwrap();
        let mut oracle = Namespace::new();
        oracle
            .mount("/", Arc::new(BindFs::open(&bind).unwrap()), false)
            .unwrap();
        for (i, op) in ops.iter().enumerate() {
            let expected = apply(&oracle, op).await;
            let got = apply(&ninep, op).await;
            assert_eq!(
                got,
                expected,
                "{cache}: op {i} {op:?} (after {:?})",
                &ops[..i]
            );
        }
    });
    drop(rt);
    assert_eq!(
        tree(&nine),
        tree(&bind),
        "{cache}: the trees differ after {ops:?}"
    );
}

/// Everything under `dir`: path → what it is (contents, link target, or a directory).
fn tree(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(dir).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let what = if meta.file_type().is_symlink() {
                format!("-> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                stack.push(path);
                "dir".to_string()
            } else {
                let bytes = std::fs::read(&path).unwrap();
                format!("{} bytes, hash {:x}", bytes.len(), fnv(&bytes))
            };
            out.insert(rel, what);
        }
    }
    out
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
