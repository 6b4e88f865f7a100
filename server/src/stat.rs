//! From `stat(2)` to 9P: qids, Rgetattr, dirent types.
//!
//! `struct stat` field types differ between architectures, hence the casts that are
//! no-ops on x86_64.
#![allow(clippy::unnecessary_cast)]

use rustix::fs::{FileType, Stat};
use wasm9p_proto::consts::{dt, getattr, mode, qid};
use wasm9p_proto::{Qid, Rgetattr};

/// Qid type bits for a file mode.
pub(crate) fn qid_type(st_mode: u32) -> u8 {
    match st_mode & mode::S_IFMT {
        mode::S_IFDIR => qid::DIR,
        mode::S_IFLNK => qid::SYMLINK,
        _ => qid::FILE,
    }
}

/// The qid path: the inode number, with the device folded in for files on another
/// file system mounted inside the export, so two files never share a qid path.
pub(crate) fn qid_path(st: &Stat, root_dev: u64) -> u64 {
    let (ino, dev) = (st.st_ino as u64, st.st_dev as u64);
    if dev == root_dev {
        ino
    } else {
        ino ^ dev.rotate_left(40)
    }
}

/// The qid version: changes whenever the file's data (mtime, size) or metadata
/// (ctime, which a rename or chmod moves) change. Caches revalidate against it.
pub(crate) fn qid_version(st: &Stat) -> u32 {
    let mut h = st.st_mtime as u64;
    for v in [
        st.st_mtime_nsec as u64,
        st.st_ctime as u64,
        st.st_ctime_nsec as u64,
        st.st_size as u64,
    ] {
        h = (h ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    }
    (h ^ (h >> 32)) as u32
}

/// The qid of a file.
pub(crate) fn qid(st: &Stat, root_dev: u64) -> Qid {
    Qid {
        ty: qid_type(st.st_mode as u32),
        version: qid_version(st),
        path: qid_path(st, root_dev),
    }
}

/// The Rgetattr for a file (every basic field is always filled in).
pub(crate) fn rgetattr(st: &Stat, root_dev: u64) -> Rgetattr {
    Rgetattr {
        valid: getattr::BASIC,
        qid: qid(st, root_dev),
        mode: st.st_mode as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        nlink: st.st_nlink as u64,
        rdev: st.st_rdev as u64,
        size: st.st_size as u64,
        blksize: st.st_blksize as u64,
        blocks: st.st_blocks as u64,
        atime_sec: st.st_atime as u64,
        atime_nsec: st.st_atime_nsec as u64,
        mtime_sec: st.st_mtime as u64,
        mtime_nsec: st.st_mtime_nsec as u64,
        ctime_sec: st.st_ctime as u64,
        ctime_nsec: st.st_ctime_nsec as u64,
        ..Rgetattr::default()
    }
}

/// The `DT_*` value of a directory entry type.
pub(crate) fn dirent_type(ft: FileType) -> u8 {
    match ft {
        FileType::RegularFile => dt::REG,
        FileType::Directory => dt::DIR,
        FileType::Symlink => dt::LNK,
        FileType::Fifo => dt::FIFO,
        FileType::Socket => dt::SOCK,
        FileType::CharacterDevice => dt::CHR,
        FileType::BlockDevice => dt::BLK,
        _ => dt::UNKNOWN,
    }
}

/// Qid type bits of a directory entry type.
pub(crate) fn dirent_qid_type(ft: FileType) -> u8 {
    match ft {
        FileType::Directory => qid::DIR,
        FileType::Symlink => qid::SYMLINK,
        _ => qid::FILE,
    }
}
