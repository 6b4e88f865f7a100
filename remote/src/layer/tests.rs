//! The action layer's behaviour: the tree read lazily, the writable layer, its bound
//! and its counters.

use super::*;
use crate::apis::v2;
use bytes::Bytes;
use prost::Message;
use wasm9p_server::nodes::{Kind, New, NodeFs};

/// A CAS in memory: blobs, and how many fetches it served.
#[derive(Default)]
struct Blobs {
    blobs: Mutex<HashMap<Digest, Vec<u8>>>,
    fetched: AtomicU64,
}

impl Blobs {
    fn put(&self, bytes: &[u8]) -> Digest {
        let d = Digest::of(bytes);
        self.blobs.lock().unwrap().insert(d, bytes.to_vec());
        d
    }
}

impl Fetch for Blobs {
    fn fetch(&self, digest: Digest) -> crate::BoxFuture<'_, Result<Vec<u8>, FetchError>> {
        Box::pin(async move {
            self.fetched.fetch_add(1, Ordering::Relaxed);
            self.blobs
                .lock()
                .unwrap()
                .get(&digest)
                .cloned()
                .ok_or(FetchError::Missing(digest))
        })
    }
}

const STDIO: &[u8] = b"int printf(const char *, ...);\n";

/// `usr/include/stdio.h`, `src/a.c`, `bin/tool` (executable), `usr/lib -> include`.
fn tree(blobs: &Blobs) -> Arc<InputTree> {
    let file = |name: &str, bytes: &[u8], exec| v2::FileNode {
        name: name.into(),
        digest: Some(blobs.put(bytes).to_proto()),
        is_executable: exec,
        node_properties: None,
    };
    let mut dirs = HashMap::new();
    let mut put = |dir: v2::Directory| {
        let d = Digest::of(&dir.encode_to_vec());
        dirs.insert(d, dir);
        v2::DirectoryNode {
            name: String::new(),
            digest: Some(d.to_proto()),
        }
    };
    let named = |mut node: v2::DirectoryNode, name: &str| {
        node.name = name.into();
        node
    };
    let include = put(v2::Directory {
        files: vec![file("stdio.h", STDIO, false)],
        ..Default::default()
    });
    let usr = put(v2::Directory {
        directories: vec![named(include, "include")],
        symlinks: vec![v2::SymlinkNode {
            name: "lib".into(),
            target: "include".into(),
            node_properties: None,
        }],
        ..Default::default()
    });
    let src = put(v2::Directory {
        files: vec![file("a.c", b"#include <stdio.h>\n", false)],
        ..Default::default()
    });
    let bin = put(v2::Directory {
        files: vec![file("tool", b"\0asm\x01\0\0\0", true)],
        ..Default::default()
    });
    let root = put(v2::Directory {
        directories: vec![named(bin, "bin"), named(src, "src"), named(usr, "usr")],
        ..Default::default()
    });
    let root = Digest::from_proto(root.digest.as_ref().unwrap()).unwrap();
    Arc::new(InputTree::build(root, &dirs).unwrap())
}

struct Fixture {
    fs: ActionFs,
    blobs: Arc<Blobs>,
    _dir: tempfile::TempDir,
}

fn fixture(limit: u64) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let blobs = Arc::new(Blobs::default());
    let tree = tree(&blobs);
    let store = Arc::new(ContentStore::open(&dir.path().join("store"), 1 << 20).unwrap());
    let fs = ActionFs::new(
        tree,
        store,
        blobs.clone(),
        dir.path().join("scratch"),
        limit,
    )
    .unwrap();
    Fixture {
        fs,
        blobs,
        _dir: dir,
    }
}

async fn at(fs: &ActionFs, path: &str) -> Result<u64, Errno> {
    let mut node = fs.root();
    for name in path.split('/').filter(|n| !n.is_empty()) {
        node = fs.lookup(node, name).await?;
    }
    Ok(node)
}

async fn names(fs: &ActionFs, path: &str) -> Vec<String> {
    let dir = at(fs, path).await.unwrap();
    fs.readdir(dir)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect()
}

#[tokio::test]
async fn the_tree_is_listed_and_described_without_a_fetch_and_read_with_one() {
    let f = fixture(1 << 20);
    assert_eq!(names(&f.fs, "").await, ["bin", "src", "usr"]);
    assert_eq!(names(&f.fs, "usr").await, ["include", "lib"]);
    let stdio = at(&f.fs, "usr/include/stdio.h").await.unwrap();
    let a = f.fs.getattr(stdio).await.unwrap();
    assert_eq!(
        (a.kind, a.size, a.mode),
        (Kind::File, STDIO.len() as u64, 0o444)
    );
    let tool = at(&f.fs, "bin/tool").await.unwrap();
    assert_eq!(f.fs.getattr(tool).await.unwrap().mode, 0o555);
    let lib = at(&f.fs, "usr/lib").await.unwrap();
    assert_eq!(f.fs.readlink(lib).await.unwrap(), "include");
    assert_eq!(at(&f.fs, "usr/missing.h").await, Err(Errno::ENOENT));
    assert_eq!(
        f.blobs.fetched.load(Ordering::Relaxed),
        0,
        "nothing fetched yet"
    );
    // Reads: one fetch for the file, however many reads.
    assert_eq!(&f.fs.read(stdio, 0, 4).await.unwrap()[..], b"int ");
    assert_eq!(&f.fs.read(stdio, 4, 1000).await.unwrap()[..], &STDIO[4..]);
    assert!(f.fs.read(stdio, 1000, 10).await.unwrap().is_empty());
    assert_eq!(f.blobs.fetched.load(Ordering::Relaxed), 1);
    let stats = f.fs.stats();
    assert_eq!(
        (stats.files_read, stats.bytes_of_files_read),
        (1, STDIO.len() as u64)
    );
    // The same tree in another action has the same node numbers and versions.
    let g = fixture(1 << 20);
    let again = at(&g.fs, "usr/include/stdio.h").await.unwrap();
    assert_eq!(again, stdio);
    assert_eq!(g.fs.getattr(again).await.unwrap(), a);
    assert_ne!(at(&g.fs, "src/a.c").await.unwrap(), stdio);
}

#[tokio::test]
async fn what_the_action_makes_goes_to_the_layer_and_leaves_the_tree_as_it_was() {
    let f = fixture(1 << 20);
    let src = at(&f.fs, "src").await.unwrap();
    let version = f.fs.getattr(src).await.unwrap().version;
    // A compiler's object: written to a temporary name, then renamed.
    let tmp = f.fs.create(src, "a.o.tmp", New::File(0o644)).await.unwrap();
    // Its version moves at once, to one never taken for the tree's.
    let first = f.fs.getattr(src).await.unwrap().version;
    assert!(super::fixed_content(src, version));
    assert!(!super::fixed_content(src, first), "{first:#x}");
    assert_eq!(
        f.fs.write(tmp, 0, Bytes::from_static(b"\0asm"))
            .await
            .unwrap(),
        4
    );
    f.fs.rename(src, "a.o.tmp", src, "a.o").await.unwrap();
    assert_eq!(names(&f.fs, "src").await, ["a.c", "a.o"]);
    let obj = at(&f.fs, "src/a.o").await.unwrap();
    assert_eq!(&f.fs.read(obj, 0, 100).await.unwrap()[..], b"\0asm");
    let moved = f.fs.getattr(src).await.unwrap().version;
    assert_ne!(moved, version, "its version moved");
    assert!(!super::fixed_content(src, moved), "{moved:#x}");
    assert_eq!(
        f.fs.create(src, "a.o", New::File(0o644)).await,
        Err(Errno::EEXIST)
    );
    // Removing an input hides it; writing one copies it up.
    f.fs.unlink(src, "a.c").await.unwrap();
    assert_eq!(names(&f.fs, "src").await, ["a.o"]);
    let stdio = at(&f.fs, "usr/include/stdio.h").await.unwrap();
    f.fs.write(stdio, 0, Bytes::from_static(b"INT"))
        .await
        .unwrap();
    assert_eq!(&f.fs.read(stdio, 0, 6).await.unwrap()[..], b"INT pr");
    assert!(matches!(
        f.fs.inspect(stdio).unwrap(),
        Inspected::MadeFile { .. }
    ));
    // Directories: made, not removed while full, moved, made with their parents.
    let out =
        f.fs.create(f.fs.root(), "out", New::Directory(0o755))
            .await
            .unwrap();
    f.fs.create(out, "x", New::Symlink("../src/a.o"))
        .await
        .unwrap();
    assert_eq!(f.fs.unlink(f.fs.root(), "out").await, Err(Errno::ENOTEMPTY));
    assert_eq!(
        f.fs.rename(f.fs.root(), "out", out, "inside").await,
        Err(Errno::EINVAL)
    );
    f.fs.make_dirs("deep/er/still").await.unwrap();
    assert!(at(&f.fs, "deep/er/still").await.is_ok());
    assert_eq!(f.fs.make_dirs("src/a.o/x").await, Err(Errno::ENOTDIR));
    assert_eq!(
        f.fs.resolve("out/x").map(|n| f.fs.inspect(n).is_ok()),
        Ok(true)
    );
    // Another action on the same tree sees none of it.
    let g = fixture(1 << 20);
    assert_eq!(names(&g.fs, "src").await, ["a.c"]);
}

#[tokio::test]
async fn the_layer_holds_no_more_than_its_bound() {
    let f = fixture(10);
    let root = f.fs.root();
    let file = f.fs.create(root, "big", New::File(0o644)).await.unwrap();
    assert_eq!(
        f.fs.write(file, 0, Bytes::from_static(b"0123456789")).await,
        Ok(10)
    );
    assert_eq!(
        f.fs.write(file, 10, Bytes::from_static(b"x")).await,
        Err(Errno::ENOSPC)
    );
    assert_eq!(f.fs.set_size(file, 11).await, Err(Errno::ENOSPC));
    f.fs.set_size(file, 2).await.unwrap();
    assert_eq!(f.fs.stats().bytes_written, 2);
    // Copying an input up counts too.
    let stdio = at(&f.fs, "usr/include/stdio.h").await.unwrap();
    assert_eq!(
        f.fs.write(stdio, 0, Bytes::from_static(b"x")).await,
        Err(Errno::ENOSPC)
    );
}

#[test]
fn node_numbers_are_a_stable_hash_of_the_path_and_the_node() {
    let file = |executable| TreeNode::File {
        digest: Digest::of(b"int x;\n"),
        executable,
    };
    // The same in every process and Rust release: the first eight bytes, little
    // endian, of SHA-256(path length, path, 1, executable, digest hex, digest size),
    // as worked out by hand, not by this code.
    assert_eq!(
        super::tree_id(&file(false), "src/a.c"),
        0x0c81_832b_ab58_4487
    );
    // Another path, mode or content is another number; none looks like a layer's own.
    let others = [
        super::tree_id(&file(false), "src/b.c"),
        super::tree_id(&file(true), "src/a.c"),
        super::tree_id(
            &TreeNode::Symlink {
                target: "a.c".into(),
            },
            "src/a.c",
        ),
    ];
    for id in others {
        assert_ne!(id, 0x0c81_832b_ab58_4487);
        assert_eq!(id & super::MADE, 0);
    }
}
