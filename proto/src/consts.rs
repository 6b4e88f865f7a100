//! Named protocol constants and limits. Values are the Linux ones (`include/net/9p/9p.h`).

/// The protocol version string this crate speaks.
pub const VERSION_9P2000_L: &str = "9P2000.L";
/// The reply to Tversion when the server does not speak the client's version.
pub const VERSION_UNKNOWN: &str = "unknown";
/// "No fid": the afid of an unauthenticated attach.
pub const NOFID: u32 = u32::MAX;
/// The tag Tversion travels with.
pub const NOTAG: u16 = u16::MAX;
/// Most names one Twalk may carry (MAXWELEM); longer paths take several walks.
pub const MAXWELEM: usize = 16;
/// Size of `size[4] type[1] tag[2]`, the header of every message.
pub const HEADER_SIZE: usize = 7;
/// Bytes a Tread/Twrite/Rread frame spends besides its payload (Linux P9_IOHDRSZ).
/// A read or write carries at most `msize - IOHDRSZ` bytes.
pub const IOHDRSZ: u32 = 24;
/// Readdir replies lose a little more to the Rreaddir header (Linux P9_READDIRHDRSZ).
pub const READDIRHDRSZ: u32 = 24;
/// The smallest msize either side accepts: below it a path walk may not fit.
pub const MIN_MSIZE: u32 = 4096;
/// The msize asked for and served when nobody says otherwise (512 KiB).
pub const DEFAULT_MSIZE: u32 = 512 * 1024;
/// The largest msize our server grants (1 MiB): it bounds every per-frame allocation.
pub const MAX_MSIZE: u32 = 1024 * 1024;
/// `unlinkat` flag: remove a directory (Linux AT_REMOVEDIR).
pub const AT_REMOVEDIR: u32 = 0x200;
/// The extended attribute a wasm9p server answers (an empty value, on any fid) to say
/// that every request on a connection sees what the metadata requests before it did
/// (Twalk, Tlopen, Tgetattr... each done before the next frame is read): a client may
/// then send requests on a fid behind the Twalk that binds it, before its reply. No
/// file can carry the name (Linux xattr names have a namespace: `user.`, `trusted.`...),
/// so no export can fake it; other servers answer it with an error.
pub const ORDERED_XATTR: &str = "wasm9p.ordered";
/// The extended attribute a wasm9p server answers (an empty value, on any fid) to say
/// that every Rreaddir holds the entries that follow its cookie up to the first that
/// does not fit in its count, and that no entry's name is longer than
/// [`MAX_ENTRY_NAME`]. A reply with room left for one more entry of the longest name
/// ([`MAX_DIRENT_SIZE`]) therefore ended the listing, and the client need not send the
/// Treaddir that would come back empty. Asked beside [`ORDERED_XATTR`], on the same
/// (bound) fid, so that a server that makes neither promise sees nothing undefined.
pub const LISTINGS_FILL_XATTR: &str = "wasm9p.listings-fill";
/// Linux's longest name of one path component, in bytes: what a server accepts and a
/// client asks for.
pub const NAME_MAX: usize = 255;
/// The longest name (in bytes) a server that promises [`LISTINGS_FILL_XATTR`] lists:
/// [`NAME_MAX`].
pub const MAX_ENTRY_NAME: usize = NAME_MAX;
/// The largest directory entry such a server sends: `qid[13] offset[8] type[1]` and a
/// name of [`MAX_ENTRY_NAME`] bytes with its 2-byte length.
pub const MAX_DIRENT_SIZE: usize = 13 + 8 + 1 + 2 + MAX_ENTRY_NAME;

/// Qid type bits.
pub mod qid {
    /// A directory.
    pub const DIR: u8 = 0x80;
    /// An append-only file.
    pub const APPEND: u8 = 0x40;
    /// An exclusive-use file.
    pub const EXCL: u8 = 0x20;
    /// A mount point.
    pub const MOUNT: u8 = 0x10;
    /// An authentication file.
    pub const AUTH: u8 = 0x08;
    /// A temporary file.
    pub const TMP: u8 = 0x04;
    /// A symbolic link.
    pub const SYMLINK: u8 = 0x02;
    /// A hard link (unused by Linux).
    pub const LINK: u8 = 0x01;
    /// A plain file.
    pub const FILE: u8 = 0x00;
}

/// Tgetattr `request_mask` and Rgetattr `valid` bits.
pub mod getattr {
    /// st_mode.
    pub const MODE: u64 = 0x0000_0001;
    /// st_nlink.
    pub const NLINK: u64 = 0x0000_0002;
    /// st_uid.
    pub const UID: u64 = 0x0000_0004;
    /// st_gid.
    pub const GID: u64 = 0x0000_0008;
    /// st_rdev.
    pub const RDEV: u64 = 0x0000_0010;
    /// st_atime.
    pub const ATIME: u64 = 0x0000_0020;
    /// st_mtime.
    pub const MTIME: u64 = 0x0000_0040;
    /// st_ctime.
    pub const CTIME: u64 = 0x0000_0080;
    /// st_ino (the qid path).
    pub const INO: u64 = 0x0000_0100;
    /// st_size.
    pub const SIZE: u64 = 0x0000_0200;
    /// st_blocks.
    pub const BLOCKS: u64 = 0x0000_0400;
    /// Birth time.
    pub const BTIME: u64 = 0x0000_0800;
    /// Inode generation.
    pub const GEN: u64 = 0x0000_1000;
    /// Data version.
    pub const DATA_VERSION: u64 = 0x0000_2000;
    /// Everything `stat(2)` returns.
    pub const BASIC: u64 = 0x0000_07ff;
    /// Every field.
    pub const ALL: u64 = 0x0000_3fff;
}

/// Tsetattr `valid` bits.
pub mod setattr {
    /// Set the mode.
    pub const MODE: u32 = 0x0000_0001;
    /// Set the owner.
    pub const UID: u32 = 0x0000_0002;
    /// Set the group.
    pub const GID: u32 = 0x0000_0004;
    /// Truncate or extend to `size`.
    pub const SIZE: u32 = 0x0000_0008;
    /// Change atime (to now unless ATIME_SET).
    pub const ATIME: u32 = 0x0000_0010;
    /// Change mtime (to now unless MTIME_SET).
    pub const MTIME: u32 = 0x0000_0020;
    /// Change ctime.
    pub const CTIME: u32 = 0x0000_0040;
    /// atime comes from the message rather than the clock.
    pub const ATIME_SET: u32 = 0x0000_0080;
    /// mtime comes from the message rather than the clock.
    pub const MTIME_SET: u32 = 0x0000_0100;
}

/// Tlopen / Tlcreate flags (Linux open(2) values, as 9P2000.L carries them).
pub mod open {
    /// Read only.
    pub const RDONLY: u32 = 0o0;
    /// Write only.
    pub const WRONLY: u32 = 0o1;
    /// Read and write.
    pub const RDWR: u32 = 0o2;
    /// Mask of the access mode.
    pub const ACCMODE: u32 = 0o3;
    /// Create if missing.
    pub const CREAT: u32 = 0o100;
    /// Fail if it exists.
    pub const EXCL: u32 = 0o200;
    /// Do not become the controlling terminal.
    pub const NOCTTY: u32 = 0o400;
    /// Truncate to zero length.
    pub const TRUNC: u32 = 0o1000;
    /// Writes go to the end.
    pub const APPEND: u32 = 0o2000;
    /// Non-blocking.
    pub const NONBLOCK: u32 = 0o4000;
    /// Synchronous data writes.
    pub const DSYNC: u32 = 0o10000;
    /// Signal-driven I/O.
    pub const FASYNC: u32 = 0o20000;
    /// Bypass the page cache.
    pub const DIRECT: u32 = 0o40000;
    /// Large file.
    pub const LARGEFILE: u32 = 0o100000;
    /// Must be a directory.
    pub const DIRECTORY: u32 = 0o200000;
    /// Do not follow a final symlink.
    pub const NOFOLLOW: u32 = 0o400000;
    /// Do not update atime.
    pub const NOATIME: u32 = 0o1000000;
    /// Close on exec.
    pub const CLOEXEC: u32 = 0o2000000;
    /// Synchronous writes.
    pub const SYNC: u32 = 0o4000000;
}

/// Tlock / Tgetlock values.
pub mod lock {
    /// Shared (read) lock.
    pub const RDLCK: u8 = 0;
    /// Exclusive (write) lock.
    pub const WRLCK: u8 = 1;
    /// Unlock.
    pub const UNLCK: u8 = 2;
    /// Tlock flag: block until granted.
    pub const FLAG_BLOCK: u32 = 1;
    /// Tlock flag: reclaim after server restart.
    pub const FLAG_RECLAIM: u32 = 2;
    /// Rlock status: granted.
    pub const SUCCESS: u8 = 0;
    /// Rlock status: someone else holds a conflicting lock.
    pub const BLOCKED: u8 = 1;
    /// Rlock status: failed.
    pub const ERROR: u8 = 2;
    /// Rlock status: server in its grace period.
    pub const GRACE: u8 = 3;
}

/// The file system type a 9p mount reports in statfs (Linux `V9FS_MAGIC`), for an
/// export that has no host file system of its own to report.
pub const V9FS_MAGIC: u32 = 0x0102_1997;

/// Directory entry types in Rreaddir (Linux DT_* values).
pub mod dt {
    /// Unknown.
    pub const UNKNOWN: u8 = 0;
    /// FIFO.
    pub const FIFO: u8 = 1;
    /// Character device.
    pub const CHR: u8 = 2;
    /// Directory.
    pub const DIR: u8 = 4;
    /// Block device.
    pub const BLK: u8 = 6;
    /// Regular file.
    pub const REG: u8 = 8;
    /// Symbolic link.
    pub const LNK: u8 = 10;
    /// Socket.
    pub const SOCK: u8 = 12;
}

/// File type bits of a Linux `st_mode`, as carried in Rgetattr and Tmknod.
pub mod mode {
    /// Mask of the type bits.
    pub const S_IFMT: u32 = 0o170000;
    /// Socket.
    pub const S_IFSOCK: u32 = 0o140000;
    /// Symbolic link.
    pub const S_IFLNK: u32 = 0o120000;
    /// Regular file.
    pub const S_IFREG: u32 = 0o100000;
    /// Block device.
    pub const S_IFBLK: u32 = 0o060000;
    /// Directory.
    pub const S_IFDIR: u32 = 0o040000;
    /// Character device.
    pub const S_IFCHR: u32 = 0o020000;
    /// FIFO.
    pub const S_IFIFO: u32 = 0o010000;
}
