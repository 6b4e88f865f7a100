//! Path resolution and the POSIX error rules, on memory mounts (and on a backend that
//! always suspends, to drive the asynchronous path too).

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use wasm9p_proto::Errno;

use super::{Namespace, MAX_SYMLINK_HOPS, PATH_MAX};
use crate::backend::memory::MemoryFs;
use crate::backend::{Attr, Backend, BoxFuture, Entry, Kind, NewNode, Node};

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

/// Polls once: `Some` if the future completed without suspending.
fn poll_once<F: Future>(f: F) -> Option<F::Output> {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

fn text(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// `/` and `/tmp` writable memory mounts, `/ro` read-only, with a few files and links.
fn namespace() -> Namespace {
    let mut ns = Namespace::new();
    ns.mount("/", Arc::new(MemoryFs::new()), false).unwrap();
    ns.mount("/tmp", Arc::new(MemoryFs::new()), false).unwrap();
    let ro = Arc::new(MemoryFs::new());
    block_on(async {
        let root = ro.root();
        let f = ro
            .make(
                &root,
                "readme",
                NewNode::File {
                    mode: 0o644,
                    exclusive: true,
                },
            )
            .await
            .unwrap();
        ro.write_at(&f, 0, text("read only")).await.unwrap();
    });
    ns.mount("/ro", ro, true).unwrap();
    block_on(async {
        ns.mkdir("/usr", 0o755).await.unwrap();
        ns.mkdir("/usr/lib", 0o755).await.unwrap();
        ns.write("/usr/lib/libc.a", 0, text("archive"))
            .await
            .unwrap();
        ns.write("/file", 0, text("in root")).await.unwrap();
        ns.write("/tmp/file", 0, text("in tmp")).await.unwrap();
        ns.symlink("usr/lib", "/lib").await.unwrap(); // relative
        ns.symlink("/tmp", "/scratch").await.unwrap(); // absolute, across mounts
        ns.symlink("../file", "/usr/up").await.unwrap(); // relative with ..
    });
    ns
}

async fn read(ns: &Namespace, path: &str) -> Result<String, Errno> {
    ns.read(path)
        .await
        .map(|b| String::from_utf8(b.to_vec()).unwrap())
}

#[test]
fn longest_prefix_mount_wins() {
    let ns = namespace();
    block_on(async {
        assert_eq!(read(&ns, "/file").await.unwrap(), "in root");
        assert_eq!(read(&ns, "/tmp/file").await.unwrap(), "in tmp");
        assert_eq!(read(&ns, "/ro/readme").await.unwrap(), "read only");
        assert_eq!(ns.resolve("/tmp", true).await.unwrap().mount, Some(1));
    });
}

#[test]
fn symlinks_resolve_inside_the_namespace() {
    let ns = namespace();
    block_on(async {
        assert_eq!(read(&ns, "/lib/libc.a").await.unwrap(), "archive");
        assert_eq!(
            read(&ns, "/scratch/file").await.unwrap(),
            "in tmp",
            "absolute link crosses into /tmp"
        );
        assert_eq!(read(&ns, "/usr/up").await.unwrap(), "in root");
        assert_eq!(ns.readlink("/lib").await.unwrap().as_ref(), "usr/lib");
        // Without follow, a final symlink is itself.
        assert_eq!(
            ns.resolve("/lib", false).await.unwrap().node.kind,
            Kind::Symlink
        );
        assert_eq!(ns.resolve("/lib", true).await.unwrap().node.kind, Kind::Dir);
        // A link to an absolute host path leads into the guest's own namespace.
        ns.symlink("/etc/passwd", "/tmp/passwd").await.unwrap();
        assert_eq!(read(&ns, "/tmp/passwd").await, Err(Errno::ENOENT));
    });
}

#[test]
fn a_path_that_leaves_its_directory_through_a_symlink_does_not_stay_beneath_it() {
    let ns = namespace();
    block_on(async {
        let usr = ns.resolve("/usr", true).await.unwrap();
        let root = ns.resolve("/", true).await.unwrap();
        ns.symlink("..", "/usr/parent").await.unwrap();
        ns.symlink("lib/../lib", "/usr/same").await.unwrap();
        // Inside: plain names, a `..` that comes back, a link whose target stays.
        for (rel, follow) in [
            ("lib/libc.a", true),
            ("lib/../lib", true),
            ("same/libc.a", true),
            ("same", true),
            ("missing/../..", true), // the open reports ENOENT itself
        ] {
            assert_eq!(ns.stays_beneath(&usr, rel, follow).await, Ok(()), "{rel}");
        }
        // A final link not followed is the link itself, wherever it points.
        assert_eq!(ns.stays_beneath(&usr, "parent", false).await, Ok(()));
        assert_eq!(ns.stays_beneath(&usr, "up", false).await, Ok(()));
        // Out: `..` written, `..` in a link's target, an absolute target.
        for (rel, follow) in [
            ("..", false),
            ("lib/../..", false),
            ("parent", true),
            ("parent/file", false),
            ("up", true), // ../file
        ] {
            assert_eq!(
                ns.stays_beneath(&usr, rel, follow).await,
                Err(Errno::EPERM),
                "{rel}"
            );
        }
        assert_eq!(
            ns.stays_beneath(&root, "scratch/file", false).await,
            Err(Errno::EPERM),
            "an absolute target leaves even the root"
        );
        assert_eq!(ns.stays_beneath(&root, "usr/up", true).await, Ok(()));
    });
}

#[test]
fn dotdot_stops_at_the_root_and_goes_back_across_mounts() {
    let ns = namespace();
    block_on(async {
        assert_eq!(read(&ns, "/../../../file").await.unwrap(), "in root");
        assert_eq!(
            read(&ns, "/tmp/../file").await.unwrap(),
            "in root",
            ".. leaves the /tmp mount"
        );
        assert_eq!(read(&ns, "tmp/./file").await.unwrap(), "in tmp");
        // .. after a symlink goes back along the path the link led to.
        assert_eq!(read(&ns, "/lib/../../file").await.unwrap(), "in root");
        assert_eq!(read(&ns, "/scratch/../file").await.unwrap(), "in root");
    });
}

#[test]
fn forty_symlinks_resolve_and_the_forty_first_is_eloop() {
    let ns = namespace();
    block_on(async {
        ns.write("/tmp/end", 0, text("end")).await.unwrap();
        ns.symlink("/tmp/end", "/tmp/l0").await.unwrap();
        for i in 1..MAX_SYMLINK_HOPS {
            ns.symlink(&format!("l{}", i - 1), &format!("/tmp/l{i}"))
                .await
                .unwrap();
        }
        let last = format!("/tmp/l{}", MAX_SYMLINK_HOPS - 1);
        assert_eq!(read(&ns, &last).await.unwrap(), "end");
        ns.symlink(&format!("l{}", MAX_SYMLINK_HOPS - 1), "/tmp/one-too-many")
            .await
            .unwrap();
        assert_eq!(read(&ns, "/tmp/one-too-many").await, Err(Errno::ELOOP));
        ns.symlink("loop-b", "/tmp/loop-a").await.unwrap();
        ns.symlink("loop-a", "/tmp/loop-b").await.unwrap();
        assert_eq!(
            ns.resolve("/tmp/loop-a/x", true).await.unwrap_err(),
            Errno::ELOOP
        );
    });
}

#[test]
fn errors_are_where_posix_puts_them() {
    let ns = namespace();
    block_on(async {
        assert_eq!(
            ns.resolve("/missing/x", true).await.unwrap_err(),
            Errno::ENOENT
        );
        assert_eq!(
            ns.resolve("/file/x", true).await.unwrap_err(),
            Errno::ENOTDIR
        );
        assert_eq!(
            ns.resolve("/file/", true).await.unwrap_err(),
            Errno::ENOTDIR
        );
        assert!(ns.resolve("/usr/", true).await.unwrap().is_dir());
        assert_eq!(ns.mkdir("/usr", 0o755).await.unwrap_err(), Errno::EEXIST);
        assert_eq!(
            ns.mkdir("/missing/d", 0o755).await.unwrap_err(),
            Errno::ENOENT
        );
        assert_eq!(
            ns.create("/file", 0o644, true).await.unwrap_err(),
            Errno::EEXIST
        );
        assert_eq!(ns.unlink("/usr", false).await.unwrap_err(), Errno::EISDIR);
        assert_eq!(ns.unlink("/file", true).await.unwrap_err(), Errno::ENOTDIR);
        assert_eq!(ns.unlink("/usr", true).await.unwrap_err(), Errno::ENOTEMPTY);
        assert_eq!(ns.readlink("/file").await.unwrap_err(), Errno::EINVAL);
        let long = "x".repeat(300);
        assert_eq!(
            ns.resolve(&format!("/{long}"), true).await.unwrap_err(),
            Errno::ENAMETOOLONG
        );
        assert_eq!(ns.resolve("/a\0b", true).await.unwrap_err(), Errno::EINVAL);
        // PATH_MAX bounds a path, unless the caller joins checked names (FUSE).
        let deep = format!("/usr{}", "/..".repeat(PATH_MAX / 3));
        assert_eq!(
            ns.resolve(&deep, true).await.unwrap_err(),
            Errno::ENAMETOOLONG
        );
        let joined = ns.clone().without_path_max();
        assert!(joined.resolve(&deep, true).await.unwrap().is_dir());
    });
}

#[test]
fn rename_across_mounts_is_exdev_and_read_only_mounts_are_erofs() {
    let ns = namespace();
    block_on(async {
        assert_eq!(
            ns.rename("/file", "/tmp/file2").await.unwrap_err(),
            Errno::EXDEV
        );
        ns.rename("/file", "/usr/file2").await.unwrap();
        assert_eq!(read(&ns, "/usr/file2").await.unwrap(), "in root");
        assert_eq!(ns.resolve("/file", true).await.unwrap_err(), Errno::ENOENT);
        for result in [
            ns.mkdir("/ro/d", 0o755).await.map(drop),
            ns.create("/ro/new", 0o644, false).await.map(drop),
            ns.write("/ro/readme", 0, text("x")).await.map(drop),
            ns.symlink("t", "/ro/l").await,
            ns.unlink("/ro/readme", false).await,
            ns.rename("/ro/readme", "/ro/r2").await,
        ] {
            assert_eq!(result, Err(Errno::EROFS));
        }
        assert_eq!(read(&ns, "/ro/readme").await.unwrap(), "read only");
        // Mount points cannot be removed or renamed.
        assert_eq!(ns.unlink("/tmp", true).await.unwrap_err(), Errno::EBUSY);
        assert_eq!(ns.rename("/tmp", "/tmp2").await.unwrap_err(), Errno::EBUSY);
    });
}

#[test]
fn mount_points_need_no_directory_above_them() {
    let mut ns = Namespace::new();
    ns.mount("/deep/mount/point", Arc::new(MemoryFs::new()), false)
        .unwrap();
    assert_eq!(
        ns.mount("/deep/mount/point", Arc::new(MemoryFs::new()), false)
            .unwrap_err(),
        Errno::EEXIST
    );
    assert_eq!(
        ns.mount("relative", Arc::new(MemoryFs::new()), false)
            .unwrap_err(),
        Errno::EINVAL
    );
    block_on(async {
        ns.write("/deep/mount/point/f", 0, text("deep"))
            .await
            .unwrap();
        assert_eq!(read(&ns, "/deep/mount/point/f").await.unwrap(), "deep");
        let virt = ns.resolve("/deep/mount", true).await.unwrap();
        assert!(virt.is_dir() && virt.mount.is_none());
        assert_eq!(
            ns.resolve("/deep/other", true).await.unwrap_err(),
            Errno::ENOENT
        );
        assert_eq!(
            ns.mkdir("/deep/new", 0o755).await.unwrap_err(),
            Errno::EROFS
        );
        assert_eq!(
            read(&ns, "/deep/mount/../mount/point/f").await.unwrap(),
            "deep"
        );
    });
}

#[test]
fn cached_resolution_never_suspends() {
    let ns = namespace();
    // Every component is answered by lookup_cached: the future is ready on first poll.
    let found = poll_once(ns.resolve("/lib/libc.a", true)).expect("resolved without suspending");
    assert_eq!(found.unwrap().node.kind, Kind::File);
    let missing = poll_once(ns.resolve("/usr/include/stdio.h", true)).expect("a miss too");
    assert_eq!(missing.unwrap_err(), Errno::ENOENT);
}

/// A backend with no cache that suspends once per lookup, counting them.
struct Remote {
    inner: MemoryFs,
    lookups: AtomicUsize,
}

impl Backend for Remote {
    fn root(&self) -> Node {
        self.inner.root()
    }
    fn lookup<'a>(&'a self, dir: &'a Node, name: &'a str) -> BoxFuture<'a, Result<Node, Errno>> {
        Box::pin(async move {
            self.lookups.fetch_add(1, Ordering::Relaxed);
            tokio::task::yield_now().await;
            self.inner.lookup(dir, name).await
        })
    }
    fn readlink<'a>(&'a self, link: &'a Node) -> BoxFuture<'a, Result<Arc<str>, Errno>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.inner.readlink(link).await
        })
    }
    fn getattr<'a>(&'a self, node: &'a Node) -> BoxFuture<'a, Result<Attr, Errno>> {
        self.inner.getattr(node)
    }
    fn readdir<'a>(
        &'a self,
        dir: &'a Node,
        cookie: u64,
    ) -> BoxFuture<'a, Result<Vec<Entry>, Errno>> {
        self.inner.readdir(dir, cookie)
    }
    fn make<'a>(
        &'a self,
        dir: &'a Node,
        name: &'a str,
        what: NewNode<'a>,
    ) -> BoxFuture<'a, Result<Node, Errno>> {
        self.inner.make(dir, name, what)
    }
    fn unlink<'a>(
        &'a self,
        dir: &'a Node,
        name: &'a str,
        dir_only: bool,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        self.inner.unlink(dir, name, dir_only)
    }
    fn rename<'a>(
        &'a self,
        a: &'a Node,
        an: &'a str,
        b: &'a Node,
        bn: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        self.inner.rename(a, an, b, bn)
    }
    fn setattr<'a>(
        &'a self,
        n: &'a Node,
        a: &'a crate::backend::SetAttr,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        self.inner.setattr(n, a)
    }
    fn link<'a>(
        &'a self,
        t: &'a Node,
        d: &'a Node,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        self.inner.link(t, d, name)
    }
    fn statfs<'a>(&'a self, n: &'a Node) -> BoxFuture<'a, Result<crate::backend::StatFs, Errno>> {
        self.inner.statfs(n)
    }
    fn open<'a>(
        &'a self,
        f: &'a Node,
        flags: crate::backend::OpenFlags,
    ) -> BoxFuture<'a, Result<Box<dyn crate::backend::OpenFile>, Errno>> {
        self.inner.open(f, flags)
    }
    fn read_at<'a>(
        &'a self,
        f: &'a Node,
        offset: u64,
        len: usize,
    ) -> BoxFuture<'a, Result<Bytes, Errno>> {
        self.inner.read_at(f, offset, len)
    }
    fn write_at<'a>(
        &'a self,
        f: &'a Node,
        offset: u64,
        data: Bytes,
    ) -> BoxFuture<'a, Result<usize, Errno>> {
        self.inner.write_at(f, offset, data)
    }
}

#[test]
fn uncached_backends_are_awaited() {
    let remote = Arc::new(Remote {
        inner: MemoryFs::new(),
        lookups: AtomicUsize::new(0),
    });
    let mut ns = Namespace::new();
    ns.mount("/", remote.clone(), false).unwrap();
    block_on(async {
        ns.mkdir("/a", 0o755).await.unwrap();
        ns.write("/a/f", 0, text("remote")).await.unwrap();
        ns.symlink("a/f", "/link").await.unwrap();
        let before = remote.lookups.load(Ordering::Relaxed);
        assert_eq!(read(&ns, "/link").await.unwrap(), "remote");
        assert_eq!(
            remote.lookups.load(Ordering::Relaxed) - before,
            3,
            "link, a, f"
        );
    });
    assert!(
        poll_once(ns.resolve("/a/f", true)).is_none(),
        "a remote lookup suspends"
    );
}

#[test]
fn memory_files_open_read_write_append_truncate() {
    use crate::backend::OpenFlags;
    let ns = namespace();
    block_on(async {
        let file = ns.resolve("/file", true).await.unwrap();
        let backend = &ns.mounts()[file.mount.unwrap()].backend;
        let rw = OpenFlags {
            read: true,
            write: true,
            ..Default::default()
        };
        let f = backend.open(&file.node, rw).await.unwrap();
        f.write_at(3, text("XY")).await.unwrap();
        assert_eq!(&f.read_at(0, 100).await.unwrap()[..], b"in XYot");
        let append = backend
            .open(
                &file.node,
                OpenFlags {
                    write: true,
                    append: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        append.write_at(0, text("!")).await.unwrap();
        assert_eq!(f.size().await.unwrap(), 8);
        assert_eq!(
            append.read_at(0, 1).await.unwrap_err(),
            Errno::EBADF,
            "write-only"
        );
        let trunc = OpenFlags {
            write: true,
            truncate: true,
            ..Default::default()
        };
        backend.open(&file.node, trunc).await.unwrap();
        assert_eq!(f.size().await.unwrap(), 0);
        let dir = ns.resolve("/usr", true).await.unwrap();
        assert_eq!(backend.open(&dir.node, rw).await.err(), Some(Errno::EISDIR));
    });
}

#[test]
fn attributes_links_listings_and_statfs() {
    use crate::backend::{OpenFlags, SetAttr};
    let ns = namespace();
    block_on(async {
        ns.setattr(
            "/file",
            &SetAttr {
                mode: Some(0o600),
                size: Some(2),
                mtime: Some(Some((7, 8))),
                ..Default::default()
            },
            true,
        )
        .await
        .unwrap();
        let a = ns.getattr("/file", true).await.unwrap();
        assert_eq!((a.mode, a.size, a.mtime), (0o600, 2, (7, 8)));
        ns.link("/file", "/usr/hard", false).await.unwrap();
        assert_eq!(ns.getattr("/file", true).await.unwrap().nlink, 2);
        assert_eq!(read(&ns, "/usr/hard").await.unwrap(), "in");
        assert_eq!(
            ns.link("/file", "/tmp/hard", false).await.unwrap_err(),
            Errno::EXDEV
        );
        assert_eq!(
            ns.link("/usr", "/usr2", false).await.unwrap_err(),
            Errno::EPERM
        );
        assert_eq!(
            ns.setattr(
                "/ro/readme",
                &SetAttr {
                    size: Some(0),
                    ..Default::default()
                },
                true
            )
            .await
            .unwrap_err(),
            Errno::EROFS
        );
        let mut names: Vec<String> = ns
            .readdir("/")
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["file", "lib", "ro", "scratch", "tmp", "usr"],
            "mount points are listed"
        );
        assert_eq!(ns.readdir("/file").await.unwrap_err(), Errno::ENOTDIR);
        assert!(ns.statfs("/tmp").await.unwrap().bsize > 0);
        let w = OpenFlags {
            write: true,
            ..Default::default()
        };
        assert_eq!(ns.open("/ro/readme", w).await.err(), Some(Errno::EROFS));
        assert!(ns
            .open(
                "/ro/readme",
                OpenFlags {
                    read: true,
                    ..Default::default()
                }
            )
            .await
            .is_ok());
        assert_eq!(
            ns.open(
                "/usr",
                OpenFlags {
                    read: true,
                    ..Default::default()
                }
            )
            .await
            .err(),
            Some(Errno::EISDIR)
        );
    });
}

#[test]
fn a_detached_mount_is_unreachable_but_what_was_opened_through_it_works() {
    block_on(async {
        let mut ns = Namespace::new();
        ns.mount("/", Arc::new(MemoryFs::new()), false).unwrap();
        let m = ns
            .mount("/mnt/x", Arc::new(MemoryFs::new()), false)
            .unwrap();
        ns.write("/mnt/x/f", 0, text("kept")).await.unwrap();
        let file = ns
            .open(
                "/mnt/x/f",
                crate::backend::OpenFlags {
                    read: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let dir = ns.resolve("/mnt/x", true).await.unwrap();
        // A copy made before the unmount still sees the mount.
        let before = ns.clone();
        ns.detach(m).unwrap();
        assert_eq!(ns.detach(m), Err(Errno::EINVAL), "twice");
        assert_eq!(
            ns.getattr("/mnt/x/f", true).await.unwrap_err(),
            Errno::ENOENT
        );
        assert_eq!(ns.readdir("/mnt").await.unwrap_err(), Errno::ENOENT);
        assert!(!ns.mount_points().contains(&"/mnt/x".to_string()));
        assert_eq!(&file.read_at(0, 10).await.unwrap()[..], b"kept");
        assert!(
            ns.getattr_at(&dir).await.is_ok(),
            "a location resolved before"
        );
        assert_eq!(&before.read("/mnt/x/f").await.unwrap()[..], b"kept");
        // The place can be mounted again; the other mounts' indices do not move.
        let again = ns
            .mount("/mnt/x", Arc::new(MemoryFs::new()), false)
            .unwrap();
        assert_ne!(again, m);
        assert_eq!(
            ns.getattr("/mnt/x/f", true).await.unwrap_err(),
            Errno::ENOENT
        );
    });
}
