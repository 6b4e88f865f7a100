//! mapped-file's store: the metadata of `dir/name` in the file
//! `dir/.virtfs_metadata/name`, of the export's root in `.virtfs_metadata_root`, as
//! QEMU keeps them: lines `virtfs.mode=N`, `virtfs.uid=N`, `virtfs.gid=N`,
//! `virtfs.rdev=N` (decimal), for host file systems without user xattrs.
//!
//! The metadata follows its file: a rename moves it, a hard link links it (two names
//! of one file share one owner, as they share one inode), a removal removes it, and a
//! directory's own metadata directory goes before the directory does. Every step is
//! a `*at()` call below the directory's handle with one name, never following a
//! symlink; a metadata file that is not a regular file (put there on the host) is
//! ignored, and a line that does not parse is skipped.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags};
use wasm9p_proto::Errno;

use super::mapped::Mapped;

/// The directory of metadata files in each directory.
const META_DIR: &str = ".virtfs_metadata";
/// The export root's metadata file.
const META_ROOT: &str = ".virtfs_metadata_root";
/// Longest metadata file read (four lines of numbers need far less).
const MAX_META: usize = 1024;

/// Whether `name` is the model's own, hidden from clients.
pub(crate) fn is_metadata_name(name: &str) -> bool {
    name == META_DIR || name == META_ROOT
}

/// Where the metadata of `name` in `dir` is: the directory holding it (opened; made
/// first when `create`) and its name there.
fn locate<'n>(dir: BorrowedFd<'_>, name: &'n str, create: bool) -> Option<(OwnedFd, &'n str)> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if name == "." {
        let this = rustix::fs::openat(dir, ".", flags, Mode::empty()).ok()?;
        return Some((this, META_ROOT));
    }
    match rustix::fs::openat(dir, META_DIR, flags, Mode::empty()) {
        Ok(meta) => Some((meta, name)),
        Err(rustix::io::Errno::NOENT) if create => {
            match rustix::fs::mkdirat(dir, META_DIR, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(_) => return None,
            }
            let meta = rustix::fs::openat(dir, META_DIR, flags, Mode::empty()).ok()?;
            Some((meta, name))
        }
        Err(_) => None,
    }
}

/// The text of a metadata file, if there is one and it is a regular file.
fn text(meta_dir: &OwnedFd, file: &str) -> Option<String> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(meta_dir, file, flags, Mode::empty()).ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return None;
    }
    let mut buf = vec![0u8; MAX_META];
    let mut len = 0;
    while len < buf.len() {
        match rustix::io::read(&fd, &mut buf[len..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => len += n,
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).ok()
}

fn parse(text: &str) -> Mapped {
    let mut mapped = Mapped::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "virtfs.mode" => mapped.mode = value.parse().ok(),
            "virtfs.uid" => mapped.uid = value.parse().ok(),
            "virtfs.gid" => mapped.gid = value.parse().ok(),
            "virtfs.rdev" => mapped.rdev = value.parse().ok(),
            _ => {}
        }
    }
    mapped
}

fn format(mapped: Mapped) -> String {
    let mut out = String::new();
    let mut line = |key: &str, value: Option<u64>| {
        if let Some(value) = value {
            out.push_str(&format!("virtfs.{key}={value}\n"));
        }
    };
    line("mode", mapped.mode.map(u64::from));
    line("uid", mapped.uid.map(u64::from));
    line("gid", mapped.gid.map(u64::from));
    line("rdev", mapped.rdev);
    out
}

pub(super) fn read(dir: BorrowedFd<'_>, name: &str) -> Mapped {
    locate(dir, name, false)
        .and_then(|(meta, file)| text(&meta, file))
        .map(|t| parse(&t))
        .unwrap_or_default()
}

pub(super) fn write(dir: BorrowedFd<'_>, name: &str, to: Mapped) -> Result<(), Errno> {
    let (meta, file) = locate(dir, name, true).ok_or(Errno::EIO)?;
    let was = text(&meta, file).map(|t| parse(&t)).unwrap_or_default();
    let now = Mapped {
        mode: to.mode.or(was.mode),
        uid: to.uid.or(was.uid),
        gid: to.gid.or(was.gid),
        rdev: to.rdev.or(was.rdev),
    };
    // Non-blocking: a FIFO put there on the host must not hold the server up.
    let flags = OFlags::WRONLY
        | OFlags::CREATE
        | OFlags::TRUNC
        | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&meta, file, flags, Mode::from_raw_mode(0o600))
        .map_err(crate::errors::sys)?;
    let text = format(now);
    let mut written = 0;
    while written < text.len() {
        written +=
            rustix::io::write(&fd, &text.as_bytes()[written..]).map_err(crate::errors::sys)?;
    }
    Ok(())
}

/// Whether the directory `name` in `dir` (`"."`: `dir` itself) holds a metadata
/// directory, which its link count must not show.
pub(crate) fn holds_metadata(dir: BorrowedFd<'_>, name: &str) -> bool {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let Ok(this) = rustix::fs::openat(dir, name, flags, Mode::empty()) else {
        return false;
    };
    rustix::fs::statat(&this, META_DIR, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
        st.st_mode & wasm9p_proto::consts::mode::S_IFMT == wasm9p_proto::consts::mode::S_IFDIR
    })
}

/// A client's chown or chmod changed `name`'s metadata file, not `name`: its change
/// time moves as the client expects (a chown to -1, -1 changes nothing else).
pub(crate) fn touch_ctime(dir: &impl AsFd, name: &str) {
    let _ = rustix::fs::chownat(dir, name, None, None, AtFlags::SYMLINK_NOFOLLOW);
}

/// `from` in `from_dir` was renamed to `to` in `to_dir`: its metadata goes with it (or,
/// if it had none, the metadata of what `to` named before goes).
pub(crate) fn renamed(from_dir: &impl AsFd, from: &str, to_dir: &impl AsFd, to: &str) {
    let source = locate(from_dir.as_fd(), from, false);
    let has_meta = source.as_ref().is_some_and(|(meta, file)| {
        rustix::fs::statat(meta, *file, AtFlags::SYMLINK_NOFOLLOW).is_ok()
    });
    if !has_meta {
        removed(to_dir, to);
        return;
    }
    let (Some((from_meta, from_file)), Some((to_meta, to_file))) =
        (source, locate(to_dir.as_fd(), to, true))
    else {
        return;
    };
    if let Err(e) = rustix::fs::renameat(&from_meta, from_file, &to_meta, to_file) {
        tracing::debug!("mapped-file: moving the metadata of {from:?} to {to:?}: {e}");
    }
}

/// `to` in `to_dir` is a new hard link of `from` in `from_dir`: it shares its metadata.
pub(crate) fn linked(from_dir: &impl AsFd, from: &str, to_dir: &impl AsFd, to: &str) {
    let Some((from_meta, from_file)) = locate(from_dir.as_fd(), from, false) else {
        return;
    };
    if rustix::fs::statat(&from_meta, from_file, AtFlags::SYMLINK_NOFOLLOW).is_err() {
        return;
    }
    removed(to_dir, to);
    if let Some((to_meta, to_file)) = locate(to_dir.as_fd(), to, true) {
        if let Err(e) =
            rustix::fs::linkat(&from_meta, from_file, &to_meta, to_file, AtFlags::empty())
        {
            tracing::debug!("mapped-file: linking the metadata of {from:?} as {to:?}: {e}");
        }
    }
}

/// `name` in `dir`, a directory, is about to be removed: its own metadata directory
/// goes first (it is empty when every name in the directory is gone; if it is not,
/// nothing is removed and the directory's removal fails as not empty).
pub(crate) fn removing_dir(dir: &impl AsFd, name: &str) {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if let Ok(this) = rustix::fs::openat(dir, name, flags, Mode::empty()) {
        let _ = rustix::fs::unlinkat(&this, META_DIR, AtFlags::REMOVEDIR);
    }
}

/// `name` in `dir` was removed: its metadata goes too.
pub(crate) fn removed(dir: &impl AsFd, name: &str) {
    if let Some((meta, file)) = locate(dir.as_fd(), name, false) {
        let _ = rustix::fs::unlinkat(&meta, file, AtFlags::empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_qemus_text_follows_renames_and_links_and_goes_with_its_file() {
        let root = tempfile::tempdir().unwrap();
        let dir = std::fs::File::open(root.path()).unwrap();
        std::fs::write(root.path().join("f"), "").unwrap();
        let set = Mapped {
            mode: Some(0o020640),
            uid: Some(1000),
            gid: Some(100),
            rdev: Some(259),
        };
        write(dir.as_fd(), "f", set).unwrap();
        assert_eq!(read(dir.as_fd(), "f"), set);
        assert_eq!(
            std::fs::read_to_string(root.path().join(".virtfs_metadata/f")).unwrap(),
            "virtfs.mode=8608\nvirtfs.uid=1000\nvirtfs.gid=100\nvirtfs.rdev=259\n"
        );
        // A later write changes what it says and keeps the rest.
        write(
            dir.as_fd(),
            "f",
            Mapped {
                uid: Some(0),
                ..Mapped::default()
            },
        )
        .unwrap();
        assert_eq!(read(dir.as_fd(), "f").uid, Some(0));
        assert_eq!(read(dir.as_fd(), "f").gid, Some(100));
        // The root's own.
        write(
            dir.as_fd(),
            ".",
            Mapped {
                mode: Some(0o040755),
                ..Mapped::default()
            },
        )
        .unwrap();
        assert!(root.path().join(".virtfs_metadata_root").is_file());
        assert_eq!(read(dir.as_fd(), ".").mode, Some(0o040755));

        std::fs::create_dir(root.path().join("d")).unwrap();
        let d = std::fs::File::open(root.path().join("d")).unwrap();
        std::fs::rename(root.path().join("f"), root.path().join("d/g")).unwrap();
        renamed(&dir, "f", &d, "g");
        assert_eq!(read(d.as_fd(), "g").uid, Some(0));
        assert_eq!(read(dir.as_fd(), "f"), Mapped::default());
        std::fs::hard_link(root.path().join("d/g"), root.path().join("h")).unwrap();
        linked(&d, "g", &dir, "h");
        write(
            dir.as_fd(),
            "h",
            Mapped {
                uid: Some(7),
                ..Mapped::default()
            },
        )
        .unwrap();
        assert_eq!(read(d.as_fd(), "g").uid, Some(7), "one file, one owner");
        // Renamed over by a file without metadata: the old metadata goes.
        std::fs::write(root.path().join("plain"), "").unwrap();
        renamed(&dir, "plain", &dir, "h");
        assert_eq!(read(dir.as_fd(), "h"), Mapped::default());
        std::fs::remove_file(root.path().join("d/g")).unwrap();
        removed(&d, "g");
        assert_eq!(read(d.as_fd(), "g"), Mapped::default());
        removing_dir(&dir, "d");
        std::fs::remove_dir(root.path().join("d")).unwrap();
        // A hostile metadata file: not a regular file, or nonsense, is nothing.
        std::fs::create_dir(root.path().join(".virtfs_metadata/x")).unwrap();
        assert_eq!(read(dir.as_fd(), "x"), Mapped::default());
        std::fs::write(
            root.path().join(".virtfs_metadata/y"),
            "virtfs.uid=-1\nrubbish\n",
        )
        .unwrap();
        assert_eq!(read(dir.as_fd(), "y"), Mapped::default());
    }
}
