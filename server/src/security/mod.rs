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
//! - **mapped-file**: the same, with what the client asked for kept in files instead,
//!   for host file systems without user xattrs: the metadata of `dir/name` in
//!   `dir/.virtfs_metadata/name`, of the export's root in `.virtfs_metadata_root`, as
//!   lines `virtfs.mode=N` (and `uid`, `gid`, `rdev`; decimal), as QEMU keeps them
//!   (`files`). These names are hidden from clients (not listed, not found, not
//!   made), and the metadata moves, is linked and goes with its file.
//!
//! In every model the server never opens a special file's bytes: Tlopen of a device
//! node (or, mapped, of anything that is neither a regular file nor a directory) is
//! EACCES; clients (Linux's v9fs, FUSE) handle such files themselves and never open
//! them through the server.
//!
//! `struct stat` field types differ between architectures, hence casts that are no-ops
//! on x86_64.
#![allow(clippy::unnecessary_cast)]

use std::fmt;
use std::os::fd::AsFd;
use std::str::FromStr;

use rustix::fs::Stat;
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
    /// Regular files and directories on the host, the rest in metadata files.
    MappedFile,
}

impl FromStr for SecurityModel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "passthrough" => Ok(SecurityModel::Passthrough),
            "mapped-xattr" | "mapped" => Ok(SecurityModel::MappedXattr),
            "mapped-file" => Ok(SecurityModel::MappedFile),
            other => Err(format!(
                "unknown security model {other:?}: expected passthrough, mapped-xattr or mapped-file"
            )),
        }
    }
}

impl fmt::Display for SecurityModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SecurityModel::Passthrough => "passthrough",
            SecurityModel::MappedXattr => "mapped-xattr",
            SecurityModel::MappedFile => "mapped-file",
        })
    }
}

pub(crate) mod files;
mod mapped;
mod xattrs;

pub(crate) use mapped::{Mapped, Place};

pub(crate) use files::is_metadata_name;

/// The prefix of the attributes clients may not touch in a mapped-xattr export.
const RESERVED_PREFIX: &str = "user.virtfs.";

/// Host permission bits of what a client makes in a mapped export: the server can
/// always read and write it, nobody else on the host can.
pub(crate) const HOST_FILE_MODE: u32 = 0o600;
pub(crate) const HOST_DIR_MODE: u32 = 0o700;

/// Whether a client's xattr name is the mapped-xattr model's own.
pub(crate) fn reserved(name: &str) -> bool {
    name.starts_with(RESERVED_PREFIX)
}

/// Where a file's mapped metadata is read and written: an open descriptor of the file,
/// or a name in a directory, in the export's model.
pub(crate) struct At<'a> {
    model: SecurityModel,
    place: Place<'a>,
}

impl<'a> At<'a> {
    /// The file open as `fd`. (In mapped-file, metadata is found by name only: an open
    /// file's reads nothing and cannot be written.)
    pub fn fd(model: SecurityModel, fd: &'a impl AsFd) -> At<'a> {
        At {
            model,
            place: Place::Fd(fd.as_fd()),
        }
    }

    /// `name` in the directory open as `dir`.
    pub fn name(model: SecurityModel, dir: &'a impl AsFd, name: &'a str) -> At<'a> {
        At {
            model,
            place: Place::Name(dir.as_fd(), name),
        }
    }

    /// The mapped mode alone (all a qid needs).
    pub fn mode(&self) -> Option<u32> {
        match self.model {
            SecurityModel::MappedXattr => xattrs::mode(self.place),
            _ => self.mapped().mode,
        }
    }

    /// What the file's metadata says.
    pub fn mapped(&self) -> Mapped {
        match (self.model, self.place) {
            (SecurityModel::MappedXattr, place) => xattrs::read(place),
            (SecurityModel::MappedFile, Place::Name(dir, name)) => files::read(dir, name),
            _ => Mapped::default(),
        }
    }

    /// Writes what `set` says (the rest is left as it is).
    pub fn write(&self, set: Mapped) -> Result<(), Errno> {
        match (self.model, self.place) {
            (SecurityModel::MappedXattr, place) => xattrs::write(place, set),
            (SecurityModel::MappedFile, Place::Name(dir, name)) => files::write(dir, name, set),
            _ => Err(Errno::EOPNOTSUPP),
        }
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
/// symlink, its metadata where `model` keeps it. Nothing is left behind when a step
/// fails.
pub(crate) fn make_file(
    model: SecurityModel,
    dir: &impl AsFd,
    name: &str,
    set: Mapped,
    content: &[u8],
) -> Result<(), Errno> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(HOST_FILE_MODE))
        .map_err(crate::errors::sys)?;
    let filled = (|| {
        let mut written = 0;
        while written < content.len() {
            written += rustix::io::write(&fd, &content[written..]).map_err(crate::errors::sys)?;
        }
        match model {
            SecurityModel::MappedFile => At::name(model, dir, name).write(set),
            _ => At::fd(model, &fd).write(set),
        }
    })();
    if filled.is_err() {
        let _ = rustix::fs::unlinkat(dir, name, AtFlags::empty());
        if model == SecurityModel::MappedFile {
            files::removed(dir, name);
        }
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
    fn models_parse_by_qemus_names() {
        for model in [
            SecurityModel::Passthrough,
            SecurityModel::MappedXattr,
            SecurityModel::MappedFile,
        ] {
            assert_eq!(model.to_string().parse(), Ok(model));
        }
        assert_eq!("mapped".parse(), Ok(SecurityModel::MappedXattr));
        let why = "none".parse::<SecurityModel>().unwrap_err();
        assert!(
            why.contains("expected passthrough, mapped-xattr or mapped-file"),
            "{why}"
        );
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
}
