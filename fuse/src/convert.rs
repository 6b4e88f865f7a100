//! What FUSE's types and the namespace's say of the same things, each way: errors,
//! file types, device numbers, times, names, and which file a location is.

use std::ffi::OsStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno as FuseErrno, FileType, TimeOrNow};
use wasm9p_guest_fs::backend::{Attr, Kind, Special};
use wasm9p_guest_fs::namespace::Location;
use wasm9p_proto::Errno;

use super::inodes;

pub(super) fn fuse_errno(e: Errno) -> FuseErrno {
    FuseErrno::from_i32(e.0 as i32)
}

pub(super) fn file_type(kind: Kind, attr: &Attr) -> FileType {
    // A special file's kind is in its attributes (a 9p qid calls it a file).
    match (attr.special, kind) {
        (Some(Special::Fifo), _) => FileType::NamedPipe,
        (Some(Special::Socket), _) => FileType::Socket,
        (Some(Special::CharDevice), _) => FileType::CharDevice,
        (Some(Special::BlockDevice), _) => FileType::BlockDevice,
        (None, Kind::Dir) => FileType::Directory,
        (None, Kind::File) => FileType::RegularFile,
        (None, Kind::Symlink) => FileType::Symlink,
        (None, Kind::Other) => FileType::NamedPipe,
    }
}

/// Which file `at` is, for [`Inodes`]: only files that can have hard links (not a
/// directory, nor the namespace's own directories) are known by identity; a directory's
/// id follows its one path.
pub(super) fn identity(at: &Location) -> Option<inodes::Identity> {
    if at.node.kind == Kind::Dir {
        return None;
    }
    at.mount.map(|mount| (mount, at.node.id))
}

/// A `dev_t` as FUSE's 32-bit rdev (Linux's new encoding: the low byte of the minor,
/// the major above it, the minor's other bits above that).
pub(super) fn fuse_rdev(dev: u64) -> u32 {
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

pub(super) fn time((sec, nsec): (u64, u32)) -> SystemTime {
    UNIX_EPOCH + Duration::new(sec, nsec)
}

pub(super) fn set_time(t: Option<TimeOrNow>) -> Option<Option<(u64, u64)>> {
    t.map(|t| match t {
        TimeOrNow::Now => None,
        TimeOrNow::SpecificTime(at) => {
            let d = at.duration_since(UNIX_EPOCH).unwrap_or_default();
            Some((d.as_secs(), u64::from(d.subsec_nanos())))
        }
    })
}

pub(super) fn name_str(name: &OsStr) -> Result<&str, Errno> {
    // 9P names are UTF-8 strings; others cannot be asked for.
    name.to_str().ok_or(Errno::EINVAL)
}
