//! What WASI preview1, 0.2 and 0.3 share about the filesystem: how a path relative to
//! a directory descriptor becomes a guest path, and the one `path_open` / `open-at`
//! algorithm. (0.3 adds one rule on top, in `p2::descriptor`: its descriptors may not
//! be left through a symlink either, as cap-std confines wasmtime-wasi's.)
//!
//! All three follow what stock wasmtime does on a host directory, so that the community's
//! conformance suite (wasi-testsuite) sees the same answers on every mount:
//!
//! - A path is relative to its directory descriptor and may not leave it: an absolute
//!   path, or a `..` that climbs above the descriptor's directory, is `EPERM`
//!   (preview1's `PERM`, preview2's `not-permitted`, as wasmtime answers). The check is
//!   on the path as written; symlinks met on the way are resolved in the guest's
//!   namespace, as everywhere in wasm9p (see `guest-fs`'s namespace docs): a guest
//!   holds every mount of its namespace as a preopen, so a symlink gives it nothing it
//!   could not open anyway. Making a symlink with an absolute target is refused by
//!   every preview (`EPERM`), as wasmtime refuses it. An empty path is `ENOENT`.
//! - An open's mode is read and/or write, as the OS sees it: write if asked for, or if
//!   the open creates or truncates; read if asked for, or if write is not (wasmtime
//!   opens such a file read-only, so that a descriptor opened with no rights at all is
//!   still a valid one).
//! - Directories cannot be opened for writing (`EISDIR`), `O_DIRECTORY` with create,
//!   exclusive or truncate is `EINVAL`, a symlink opened without following is `ELOOP`
//!   (`ENOTDIR` with `O_DIRECTORY`), and `O_CREAT` without following on a symlink is
//!   `ELOOP` (`EEXIST` with `O_EXCL`), as Linux's `openat` answers.

use wasm9p_guest_fs::backend::{Kind, OpenFile, OpenFlags};
use wasm9p_guest_fs::namespace::{Location, Namespace};
use wasm9p_proto::Errno;

/// The guest path `rel` names relative to the directory `dir`: `EPERM` for an absolute
/// path or one whose `..` climb above `dir`, `EINVAL` for a NUL byte in it, `ENOENT` for
/// an empty one.
pub(crate) fn beneath(dir: &Location, rel: &str) -> Result<String, Errno> {
    relative_to(dir, rel, false)
}

/// The guest path `rel` names from the working directory `dir`: as [`beneath`], except
/// that `..` may climb above `dir` (up to the namespace root), as it may from a
/// process's working directory.
pub(crate) fn from_working_dir(dir: &Location, rel: &str) -> Result<String, Errno> {
    relative_to(dir, rel, true)
}

fn relative_to(dir: &Location, rel: &str, may_climb: bool) -> Result<String, Errno> {
    if rel.starts_with('/') {
        return Err(Errno::EPERM);
    }
    if rel.contains('\0') {
        return Err(Errno::EINVAL);
    }
    if rel.is_empty() {
        // As Linux's `openat(dirfd, "")` and wasmtime: no name is no file.
        return Err(Errno::ENOENT);
    }
    let mut depth = 0usize;
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." if depth == 0 && !may_climb => return Err(Errno::EPERM),
            ".." if depth == 0 => {}
            ".." => depth -= 1,
            _ => depth += 1,
        }
    }
    Ok(dir.join(rel))
}

/// What a guest asks of an open, whichever preview it speaks.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OpenRequest {
    /// Follow a final symlink.
    pub follow: bool,
    /// `O_CREAT`.
    pub create: bool,
    /// `O_EXCL`.
    pub exclusive: bool,
    /// `O_TRUNC`.
    pub truncate: bool,
    /// `O_DIRECTORY`.
    pub directory: bool,
    /// Reading was asked for.
    pub read: bool,
    /// Writing was asked for.
    pub write: bool,
    /// Every write goes to the end (`O_APPEND`), done by the server so that appenders
    /// through other opens do not overwrite each other.
    pub append: bool,
}

/// What an open made.
pub(crate) enum Opened {
    /// A directory (always open for reading only).
    Dir(Location),
    /// A regular file, open as `read` and `write` say.
    File {
        /// Where it is.
        loc: Location,
        /// The open file.
        file: Box<dyn OpenFile>,
        /// Open for reading.
        read: bool,
        /// Open for writing.
        write: bool,
    },
}

/// Opens `path` (a guest path, from [`beneath`]) in `ns` as `req` asks.
pub(crate) async fn open(ns: &Namespace, path: &str, req: OpenRequest) -> Result<Opened, Errno> {
    if req.directory && (req.create || req.exclusive || req.truncate) {
        return Err(Errno::EINVAL);
    }
    let write = req.write || req.create || req.truncate;
    let read = req.read || !req.write;
    let loc = if req.create {
        if path.ends_with('/') {
            // `open("name/", O_CREAT)` on Linux: a directory is wanted, none is made.
            return match ns.resolve(path, true).await {
                Ok(found) if found.is_dir() => Err(Errno::EISDIR),
                Ok(_) => Err(Errno::ENOTDIR),
                Err(Errno::ENOENT) => Err(Errno::EISDIR),
                Err(e) => Err(e),
            };
        }
        if !req.follow {
            match ns.resolve(path, false).await {
                Ok(found) if found.node.kind == Kind::Symlink => {
                    return Err(if req.exclusive {
                        Errno::EEXIST
                    } else {
                        Errno::ELOOP
                    });
                }
                _ => {}
            }
        }
        ns.create(path, 0o644, req.exclusive).await?
    } else {
        ns.resolve(path, req.follow).await?
    };
    match loc.node.kind {
        Kind::Dir if write => Err(Errno::EISDIR),
        Kind::Dir => Ok(Opened::Dir(loc)),
        _ if req.directory => Err(Errno::ENOTDIR),
        Kind::Symlink => Err(Errno::ELOOP),
        Kind::Other => Err(Errno::EOPNOTSUPP),
        Kind::File => {
            let flags = OpenFlags {
                read,
                write,
                truncate: req.truncate,
                append: req.append,
            };
            let file = ns.open_at(&loc, flags).await?;
            Ok(Opened::File {
                loc,
                file,
                read,
                write,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use wasm9p_guest_fs::backend::memory::MemoryFs;

    fn ns() -> Namespace {
        let mut ns = Namespace::new();
        ns.mount("/", Arc::new(MemoryFs::new()), false).unwrap();
        ns
    }

    async fn dir(ns: &Namespace, path: &str) -> Location {
        ns.resolve(path, true).await.unwrap()
    }

    #[tokio::test]
    async fn a_path_may_not_climb_above_its_directory() {
        let ns = ns();
        ns.mkdir("/a", 0o755).await.unwrap();
        ns.mkdir("/a/b", 0o755).await.unwrap();
        let a = dir(&ns, "/a").await;
        assert_eq!(beneath(&a, "b/../b/./c").unwrap(), "/a/b/../b/./c");
        assert_eq!(beneath(&a, "b/../../a/b"), Err(Errno::EPERM));
        assert_eq!(beneath(&a, ".."), Err(Errno::EPERM));
        assert_eq!(beneath(&a, "/a"), Err(Errno::EPERM));
        assert_eq!(beneath(&a, "b\0"), Err(Errno::EINVAL));
        assert_eq!(beneath(&a, ""), Err(Errno::ENOENT));
        let root = dir(&ns, "/").await;
        assert_eq!(beneath(&root, "../a"), Err(Errno::EPERM));
        assert_eq!(from_working_dir(&a, "../../x").unwrap(), "/a/../../x");
        assert_eq!(from_working_dir(&a, "/x"), Err(Errno::EPERM));
    }

    #[tokio::test]
    async fn opens_answer_as_linux_openat_does() {
        let ns = ns();
        ns.mkdir("/d", 0o755).await.unwrap();
        ns.symlink("f", "/link").await.unwrap();
        let create = OpenRequest {
            create: true,
            ..OpenRequest::default()
        };
        // No rights at all: a read-only open that still creates.
        match open(&ns, "/f", create).await.unwrap() {
            Opened::File { read, write, .. } => assert!(read && write),
            Opened::Dir(_) => panic!("a file was created"),
        }
        let err = |r: Result<Opened, Errno>| r.err();
        let nofollow_create = OpenRequest {
            follow: false,
            ..create
        };
        assert_eq!(
            err(open(&ns, "/link", nofollow_create).await),
            Some(Errno::ELOOP)
        );
        let excl = OpenRequest {
            exclusive: true,
            ..nofollow_create
        };
        assert_eq!(err(open(&ns, "/link", excl).await), Some(Errno::EEXIST));
        assert_eq!(err(open(&ns, "/new/", create).await), Some(Errno::EISDIR));
        let write = OpenRequest {
            write: true,
            ..OpenRequest::default()
        };
        assert_eq!(err(open(&ns, "/d", write).await), Some(Errno::EISDIR));
        let directory = OpenRequest {
            directory: true,
            ..OpenRequest::default()
        };
        assert_eq!(err(open(&ns, "/f", directory).await), Some(Errno::ENOTDIR));
        assert_eq!(
            err(open(&ns, "/link", directory).await),
            Some(Errno::ENOTDIR)
        );
        assert_eq!(
            err(open(&ns, "/link", OpenRequest::default()).await),
            Some(Errno::ELOOP)
        );
        let bad = OpenRequest {
            directory: true,
            truncate: true,
            ..OpenRequest::default()
        };
        assert_eq!(err(open(&ns, "/d", bad).await), Some(Errno::EINVAL));
        assert!(matches!(
            open(&ns, "/d", OpenRequest::default()).await,
            Ok(Opened::Dir(_))
        ));
    }
}
