//! mapped-xattr's store: `user.virtfs.mode`, `.uid`, `.gid` and `.rdev` of the file
//! itself, little-endian of the C types' sizes (4, 4, 4, 8 bytes), as QEMU writes them.
//! A file is reached through its open descriptor or by name (through the directory's
//! `/proc/self/fd` entry and the `l*` calls, so a final symlink is never followed and
//! nothing is resolved from `/`).

use std::os::fd::AsRawFd;

use rustix::fs::XattrFlags;
use wasm9p_proto::consts::mode as m;
use wasm9p_proto::Errno;

use super::mapped::{Mapped, Place};

const MODE: &str = "user.virtfs.mode";
const UID: &str = "user.virtfs.uid";
const GID: &str = "user.virtfs.gid";
const RDEV: &str = "user.virtfs.rdev";

fn path(dir: &impl AsRawFd, name: &str) -> String {
    format!("/proc/self/fd/{}/{name}", dir.as_raw_fd())
}

fn get(place: Place<'_>, attr: &str, buf: &mut [u8]) -> rustix::io::Result<usize> {
    match place {
        Place::Fd(fd) => rustix::fs::fgetxattr(fd, attr, buf),
        Place::Name(dir, name) => rustix::fs::lgetxattr(path(&dir, name), attr, buf),
    }
}

fn set(place: Place<'_>, attr: &str, value: &[u8]) -> rustix::io::Result<()> {
    match place {
        Place::Fd(fd) => rustix::fs::fsetxattr(fd, attr, value, XattrFlags::empty()),
        Place::Name(dir, name) => {
            rustix::fs::lsetxattr(path(&dir, name), attr, value, XattrFlags::empty())
        }
    }
}

/// One attribute of `N` bytes; absent, unreadable or of another size: `None` (a value
/// a hostile host put there of the wrong size is ignored, never trusted).
fn read_n<const N: usize>(place: Place<'_>, attr: &str) -> Option<[u8; N]> {
    let mut buf = [0u8; N];
    match get(place, attr, &mut buf) {
        Ok(n) if n == N => Some(buf),
        _ => None,
    }
}

pub(super) fn mode(place: Place<'_>) -> Option<u32> {
    read_n::<4>(place, MODE).map(u32::from_le_bytes)
}

pub(super) fn read(place: Place<'_>) -> Mapped {
    let u32_of = |attr| read_n::<4>(place, attr).map(u32::from_le_bytes);
    let mode = mode(place);
    let device = mode.is_some_and(|mode| matches!(mode & m::S_IFMT, m::S_IFCHR | m::S_IFBLK));
    Mapped {
        mode,
        uid: u32_of(UID),
        gid: u32_of(GID),
        rdev: device
            .then(|| read_n::<8>(place, RDEV).map(u64::from_le_bytes))
            .flatten(),
    }
}

pub(super) fn write(place: Place<'_>, to: Mapped) -> Result<(), Errno> {
    let put = |attr, value: &[u8]| set(place, attr, value).map_err(crate::errors::sys);
    if let Some(mode) = to.mode {
        put(MODE, &mode.to_le_bytes())?;
    }
    if let Some(uid) = to.uid {
        put(UID, &uid.to_le_bytes())?;
    }
    if let Some(gid) = to.gid {
        put(GID, &gid.to_le_bytes())?;
    }
    if let Some(rdev) = to.rdev {
        put(RDEV, &rdev.to_le_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::{At, SecurityModel};

    #[test]
    fn attributes_round_trip_on_a_file_and_by_name_and_bad_sizes_are_ignored() {
        let model = SecurityModel::MappedXattr;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"").unwrap();
        let fd = std::fs::File::open(dir.path()).unwrap();
        let at = At::name(model, &fd, "f");
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
        assert_eq!(At::fd(model, &file).mapped(), set);
        // QEMU's format: little-endian integers of the C types' sizes.
        assert!(std::fs::read(dir.path().join("f")).unwrap().is_empty());
        let mut buf = [0u8; 8];
        let n = rustix::fs::fgetxattr(&file, UID, &mut buf).unwrap();
        assert_eq!(&buf[..n], &1000u32.to_le_bytes());
        rustix::fs::fsetxattr(&file, GID, b"\x01", XattrFlags::empty()).unwrap();
        assert_eq!(
            At::fd(model, &file).mapped().gid,
            None,
            "a value of the wrong size"
        );
    }
}
