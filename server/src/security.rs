//! Security models: how the owners, modes and special files clients make are kept on
//! the host (QEMU's names and, for `mapped-xattr`, its on-disk format).
//!
//! - **passthrough** (the default): what a client makes is made for real, with the
//!   server's own credentials; chmod and chown are the host's (chown needs the
//!   privilege it needs on the host). Device nodes are refused (EPERM) unless the export
//!   allows them (`--allow-devices`); then they are made for real (the server needs
//!   `CAP_MKNOD`), and never opened by the server.
//! - **mapped-xattr**: nothing a client makes is more than a regular file or a
//!   directory on the host, owned by the server, mode 0600 (files) or 0700
//!   (directories). What the client asked for is kept in extended attributes of the
//!   file: `user.virtfs.mode` (file type and permission bits), `user.virtfs.uid`,
//!   `user.virtfs.gid` and `user.virtfs.rdev` (little-endian, 4, 4, 4 and 8 bytes, as
//!   QEMU writes them, so one export can move between the two servers). A device node,
//!   FIFO or socket is a regular file whose mode attribute says what it is; a symlink
//!   is a regular file holding its target. chmod and chown change the attributes only,
//!   so an unprivileged server serves a guest that is root, and the host directory
//!   never holds a device node or a file of another owner. What is not mapped (a file
//!   put in the export on the host) shows as it is on the host. Clients can neither
//!   read nor change the `user.virtfs.*` attributes themselves (ENODATA, EACCES), nor
//!   see them listed.
//!
//! In both models the server never opens a special file's bytes: Tlopen of a device
//! node (or, mapped, of anything that is neither a regular file nor a directory) is
//! EACCES; clients (Linux's v9fs, FUSE) handle such files themselves and never open
//! them through the server. QEMU's third model, `mapped-file` (the attributes kept in
//! hidden files, for host file systems without user xattrs), is not implemented: it is
//! refused with that said.
//!
//! `struct stat` field types differ between architectures, hence casts that are no-ops
//! on x86_64.
#![allow(clippy::unnecessary_cast)]

use std::fmt;
use std::os::fd::{AsFd, AsRawFd};
use std::str::FromStr;

use rustix::fs::{Stat, XattrFlags};
use wasm9p_proto::consts::mode as m;
use wasm9p_proto::Errno;

/// How an export keeps what clients make (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SecurityModel {
    /// Made for real with the server's credentials.
    #[default]
    Passthrough,
    /// Regular files and directories on the host, the rest in `user.virtfs.*`.
    MappedXattr,
}

impl FromStr for SecurityModel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "passthrough" => Ok(SecurityModel::Passthrough),
            "mapped-xattr" | "mapped" => Ok(SecurityModel::MappedXattr),
            "mapped-file" => Err(
                "security model mapped-file is not implemented (its metadata files); \
                 use mapped-xattr on a host file system with user xattrs"
                    .into(),
            ),
            other => Err(format!(
                "unknown security model {other:?}: expected passthrough or mapped-xattr"
            )),
        }
    }
}

impl fmt::Display for SecurityModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SecurityModel::Passthrough => "passthrough",
            SecurityModel::MappedXattr => "mapped-xattr",
        })
    }
}

/// The attribute names (QEMU's).
const MODE: &str = "user.virtfs.mode";
const UID: &str = "user.virtfs.uid";
const GID: &str = "user.virtfs.gid";
const RDEV: &str = "user.virtfs.rdev";

/// The prefix clients may not touch in a mapped export.
const RESERVED_PREFIX: &str = "user.virtfs.";

/// Host permission bits of what a client makes in a mapped export: the server can
/// always read and write it, nobody else on the host can.
pub(crate) const HOST_FILE_MODE: u32 = 0o600;
pub(crate) const HOST_DIR_MODE: u32 = 0o700;

/// Whether a client's xattr name is the model's own.
pub(crate) fn reserved(name: &str) -> bool {
    name.starts_with(RESERVED_PREFIX)
}

/// What a mapped file's attributes say; `None`: not set (the host's value shows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mapped {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub rdev: Option<u64>,
}

/// Where mapped attributes are read and written: an open descriptor of the file, or
/// a name in a directory (through the directory's `/proc/self/fd` entry and the `l*`
/// calls, so a final symlink is never followed and nothing is resolved from `/`).
pub(crate) enum At<'a, D: AsFd> {
    Fd(D),
    Name(D, &'a str),
}

impl<D: AsFd> At<'_, D> {
    fn path(dir: &D, name: &str) -> String {
        format!("/proc/self/fd/{}/{name}", dir.as_fd().as_raw_fd())
    }

    fn get(&self, attr: &str, buf: &mut [u8]) -> rustix::io::Result<usize> {
        match self {
            At::Fd(fd) => rustix::fs::fgetxattr(fd, attr, buf),
            At::Name(dir, name) => rustix::fs::lgetxattr(Self::path(dir, name), attr, buf),
        }
    }

    fn set(&self, attr: &str, value: &[u8]) -> rustix::io::Result<()> {
        match self {
            At::Fd(fd) => rustix::fs::fsetxattr(fd, attr, value, XattrFlags::empty()),
            At::Name(dir, name) => {
                rustix::fs::lsetxattr(Self::path(dir, name), attr, value, XattrFlags::empty())
            }
        }
    }

    /// One attribute of `N` bytes; absent, unreadable or of another size: `None` (a
    /// value a hostile host put there of the wrong size is ignored, never trusted).
    fn read<const N: usize>(&self, attr: &str) -> Option<[u8; N]> {
        let mut buf = [0u8; N];
        match self.get(attr, &mut buf) {
            Ok(n) if n == N => Some(buf),
            _ => None,
        }
    }

    /// The mapped mode alone (all a qid needs).
    pub fn mode(&self) -> Option<u32> {
        self.read::<4>(MODE).map(u32::from_le_bytes)
    }

    /// What the file's attributes say.
    pub fn mapped(&self) -> Mapped {
        let u32_of = |attr| self.read::<4>(attr).map(u32::from_le_bytes);
        let mode = self.mode();
        let device = mode.is_some_and(|mode| matches!(mode & m::S_IFMT, m::S_IFCHR | m::S_IFBLK));
        Mapped {
            mode,
            uid: u32_of(UID),
            gid: u32_of(GID),
            rdev: device
                .then(|| self.read::<8>(RDEV).map(u64::from_le_bytes))
                .flatten(),
        }
    }

    /// Writes what `set` says (the rest is left as it is).
    pub fn write(&self, set: Mapped) -> Result<(), Errno> {
        let put = |attr, value: &[u8]| self.set(attr, value).map_err(crate::ops::sys);
        if let Some(mode) = set.mode {
            put(MODE, &mode.to_le_bytes())?;
        }
        if let Some(uid) = set.uid {
            put(UID, &uid.to_le_bytes())?;
        }
        if let Some(gid) = set.gid {
            put(GID, &gid.to_le_bytes())?;
        }
        if let Some(rdev) = set.rdev {
            put(RDEV, &rdev.to_le_bytes())?;
        }
        Ok(())
    }
}

/// `st` (the host's) as a client of a mapped export sees it. Only a regular file may
/// become another type (a special file or symlink stored as one), a directory keeps
/// its type; a host symlink or special file is shown as the host has it.
pub(crate) fn apply(st: &mut Stat, mapped: Mapped) {
    let host_type = st.st_mode as u32 & m::S_IFMT;
    if let Some(mode) = mapped.mode {
        let kind = match host_type {
            m::S_IFREG => shown_type(mode),
            m::S_IFDIR => host_type,
            _ => return,
        };
        st.st_mode = (kind | (mode & 0o7777)) as _;
    }
    if !matches!(host_type, m::S_IFREG | m::S_IFDIR) {
        return;
    }
    if let Some(uid) = mapped.uid {
        st.st_uid = uid;
    }
    if let Some(gid) = mapped.gid {
        st.st_gid = gid;
    }
    let mapped_type = st.st_mode as u32 & m::S_IFMT;
    if matches!(mapped_type, m::S_IFCHR | m::S_IFBLK) {
        st.st_rdev = mapped.rdev.unwrap_or(0) as _;
    }
}

/// Makes `name` in `dir` a new regular file (mode [`HOST_FILE_MODE`]) holding
/// `content`, with attributes `set`: how a mapped export keeps a special file or a
/// symlink. Nothing is left behind when a step fails.
pub(crate) fn make_file(
    dir: &impl AsFd,
    name: &str,
    set: Mapped,
    content: &[u8],
) -> Result<(), Errno> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(HOST_FILE_MODE))
        .map_err(crate::ops::sys)?;
    let filled = (|| {
        let mut written = 0;
        while written < content.len() {
            written += rustix::io::write(&fd, &content[written..]).map_err(crate::ops::sys)?;
        }
        At::Fd(&fd).write(set)
    })();
    if filled.is_err() {
        let _ = rustix::fs::unlinkat(dir, name, AtFlags::empty());
    }
    filled
}

/// The file type (`S_IFMT` bits) a host regular file whose mapped mode is `mode` shows
/// as: a special file or symlink it stands for, else a regular file.
pub(crate) fn shown_type(mode: u32) -> u32 {
    match mode & m::S_IFMT {
        t @ (m::S_IFLNK | m::S_IFCHR | m::S_IFBLK | m::S_IFIFO | m::S_IFSOCK) => t,
        _ => m::S_IFREG,
    }
}

/// Whether a host file of this mode may carry mapped attributes.
pub(crate) fn mappable(st_mode: u32) -> bool {
    matches!(st_mode & m::S_IFMT, m::S_IFREG | m::S_IFDIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_stat(mode: u32) -> Stat {
        let mut st = rustix::fs::stat("/").unwrap();
        st.st_mode = mode as _;
        st.st_rdev = 0;
        st.st_uid = 65534;
        st.st_gid = 65534;
        st
    }

    #[test]
    fn models_parse_by_qemus_names_and_mapped_file_is_refused_with_why() {
        assert_eq!("passthrough".parse(), Ok(SecurityModel::Passthrough));
        assert_eq!("mapped-xattr".parse(), Ok(SecurityModel::MappedXattr));
        assert_eq!("mapped".parse(), Ok(SecurityModel::MappedXattr));
        let why = "mapped-file".parse::<SecurityModel>().unwrap_err();
        assert!(why.contains("not implemented"), "{why}");
        assert!("none".parse::<SecurityModel>().is_err());
        assert_eq!(SecurityModel::MappedXattr.to_string(), "mapped-xattr");
    }

    #[test]
    fn a_regular_file_may_show_as_any_type_a_directory_only_as_one() {
        let device = Mapped {
            mode: Some(m::S_IFCHR | 0o640),
            uid: Some(0),
            gid: Some(5),
            rdev: Some(0x0103),
        };
        let mut st = host_stat(m::S_IFREG | 0o600);
        apply(&mut st, device);
        assert_eq!(st.st_mode as u32, m::S_IFCHR | 0o640);
        assert_eq!((st.st_uid, st.st_gid, st.st_rdev as u64), (0, 5, 0x0103));

        let mut dir = host_stat(m::S_IFDIR | 0o700);
        apply(&mut dir, device);
        assert_eq!(
            dir.st_mode as u32,
            m::S_IFDIR | 0o640,
            "a directory stays one"
        );
        assert_eq!(dir.st_rdev, 0);

        // A host symlink or device node is shown as the host has it.
        for host in [m::S_IFLNK | 0o777, m::S_IFBLK | 0o600] {
            let mut st = host_stat(host);
            apply(&mut st, device);
            assert_eq!((st.st_mode as u32, st.st_uid), (host, 65534));
        }
        // Nothing mapped: nothing changes.
        let mut plain = host_stat(m::S_IFREG | 0o644);
        apply(&mut plain, Mapped::default());
        assert_eq!(
            (plain.st_mode as u32, plain.st_uid),
            (m::S_IFREG | 0o644, 65534)
        );
    }

    #[test]
    fn attributes_round_trip_on_a_file_and_by_name_and_bad_sizes_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"").unwrap();
        let fd = std::fs::File::open(dir.path()).unwrap();
        let at = At::Name(&fd, "f");
        let set = Mapped {
            mode: Some(m::S_IFBLK | 0o660),
            uid: Some(1000),
            gid: Some(100),
            rdev: Some(rustix::fs::makedev(8, 1)),
        };
        if let Err(e) = at.write(set) {
            eprintln!("this file system keeps no user xattrs ({e:?}): nothing to test");
            return;
        }
        assert_eq!(at.mapped(), set);
        let file = std::fs::File::open(dir.path().join("f")).unwrap();
        assert_eq!(At::Fd(&file).mapped(), set);
        // QEMU's format: little-endian integers of the C types' sizes.
        let raw = std::fs::read(dir.path().join("f")).unwrap();
        assert!(raw.is_empty());
        let mut buf = [0u8; 8];
        let n = rustix::fs::fgetxattr(&file, UID, &mut buf).unwrap();
        assert_eq!(&buf[..n], &1000u32.to_le_bytes());
        rustix::fs::fsetxattr(&file, GID, b"\x01", XattrFlags::empty()).unwrap();
        assert_eq!(
            At::Fd(&file).mapped().gid,
            None,
            "a value of the wrong size"
        );
    }
}
