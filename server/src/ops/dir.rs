//! Treaddir, Tmkdir, Tmknod.

use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode};
use wasm9p_proto::consts::{dt, mode as m, MAX_ENTRY_NAME, READDIRHDRSZ};
use wasm9p_proto::{
    Data, DirEntry, DirEntryPacker, Errno, Message, Qid, Rmkdir, Rmknod, Rreaddir, Tmkdir, Tmknod,
    Treaddir,
};

use super::names::{check_name_in, writable};
use super::seen::qid_in;
use crate::connection::Connection;
use crate::errors::sys;
use crate::fid::{Fid, Open};
use crate::security::{self, Mapped};
use crate::stat;

pub(super) fn readdir(s: &Connection, t: Treaddir) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    let listing = {
        let mut open = fid.open_state();
        let Open::Dir { fd, listing } = &mut *open else {
            return Err(if fid.qid.is_dir() {
                Errno::EBADF
            } else {
                Errno::ENOTDIR
            });
        };
        // Offset 0 starts a fresh listing (rewinddir); later offsets index the same
        // snapshot, so a listing read in many calls has no loss and no duplicates.
        match listing {
            Some(entries) if t.offset != 0 => entries.clone(),
            _ => {
                let entries = Arc::new(list(&fid, fd)?);
                *listing = Some(entries.clone());
                entries
            }
        }
    };
    let limit = t.count.min(s.msize() - READDIRHDRSZ) as usize;
    // Filled up to the first entry that does not fit: a client of ours that sees room
    // left for one more takes the listing as ended (`LISTINGS_FILL_XATTR`).
    let mut packer = DirEntryPacker::new(limit);
    let start = usize::try_from(t.offset).unwrap_or(usize::MAX);
    for entry in listing.iter().skip(start) {
        if !packer.push(entry) {
            if packer.is_empty() {
                return Err(Errno::EINVAL); // count too small for even one entry
            }
            break;
        }
    }
    Ok(Rreaddir {
        data: Data(packer.finish()),
    }
    .into())
}

/// Every entry of an open directory, `.` and `..` first; entry `i` carries cookie
/// `i + 1`. Names that are not UTF-8 cannot travel in 9P strings and are skipped.
fn list(fid: &Fid, fd: &std::os::fd::OwnedFd) -> Result<Vec<DirEntry>, Errno> {
    let node = fid.node();
    let root_dev = fid.export.root_dev;
    let mapped = fid.export.mapped();
    let hidden = fid.export.metadata_files();
    let this = stat::qid(&rustix::fs::fstat(fd).map_err(sys)?, root_dev);
    // `..` of the export root is the root itself: nothing above it is visible.
    let parent = if node.is_root() {
        this
    } else {
        stat::qid(&rustix::fs::fstat(&*node.parent).map_err(sys)?, root_dev)
    };
    let mut entries = vec![
        DirEntry {
            qid: this,
            offset: 1,
            ty: dt::DIR,
            name: ".".into(),
        },
        DirEntry {
            qid: parent,
            offset: 2,
            ty: dt::DIR,
            name: "..".into(),
        },
    ];
    let mut dir = rustix::fs::Dir::read_from(fd).map_err(sys)?;
    while let Some(entry) = dir.read() {
        let entry = entry.map_err(sys)?;
        let Ok(name) = entry.file_name().to_str() else {
            tracing::debug!(
                "readdir: skipping a name that is not UTF-8: {:?}",
                entry.file_name()
            );
            continue;
        };
        if name == "." || name == ".." {
            continue;
        }
        if hidden && security::is_metadata_name(name) {
            continue;
        }
        if name.len() > MAX_ENTRY_NAME {
            // Longer than Linux allows; listing it would break the promise that
            // lets clients skip a listing's last, empty Treaddir (`LISTINGS_FILL_XATTR`).
            tracing::debug!("readdir: skipping a name of {} bytes", name.len());
            continue;
        }
        let mut ft = entry.file_type();
        if mapped && ft == FileType::RegularFile {
            // What the file stands for (a special file, a symlink), as getattr says.
            if let Some(mode) = fid.export.meta(fd, name).mode() {
                ft = FileType::from_raw_mode(security::shown_type(mode));
            }
        }
        entries.push(DirEntry {
            qid: Qid {
                ty: stat::dirent_qid_type(ft),
                version: 0,
                path: entry.ino(),
            },
            offset: entries.len() as u64 + 1,
            ty: stat::dirent_type(ft),
            name: name.to_owned(),
        });
    }
    Ok(entries)
}

pub(super) fn mkdir(s: &Connection, t: Tmkdir) -> Result<Message, Errno> {
    let fid = s.fids.get(t.dfid)?;
    writable(&fid)?;
    check_name_in(&fid.export, &t.name)?;
    let dir = fid.dir()?;
    let export = &fid.export;
    if export.mapped() {
        let host = Mode::from_raw_mode(security::HOST_DIR_MODE);
        rustix::fs::mkdirat(&*dir, t.name.as_str(), host).map_err(sys)?;
        let owner = Mapped {
            mode: Some(m::S_IFDIR | (t.mode & 0o7777)),
            uid: Some(fid.uid),
            gid: Some(t.gid),
            rdev: None,
        };
        if let Err(e) = export.meta(&*dir, &t.name).write(owner) {
            let _ = rustix::fs::unlinkat(&*dir, t.name.as_str(), AtFlags::REMOVEDIR);
            return Err(e);
        }
    } else {
        rustix::fs::mkdirat(&*dir, t.name.as_str(), Mode::from_raw_mode(t.mode & 0o7777))
            .map_err(sys)?;
        super::modes::exact_at(&*dir, &t.name, t.mode);
    }
    let qid = qid_in(export, &dir, &t.name)?;
    Ok(Rmkdir { qid }.into())
}

pub(super) fn mknod(s: &Connection, t: Tmknod) -> Result<Message, Errno> {
    let fid = s.fids.get(t.dfid)?;
    writable(&fid)?;
    check_name_in(&fid.export, &t.name)?;
    let file_type = match t.mode & m::S_IFMT {
        m::S_IFIFO => FileType::Fifo,
        m::S_IFSOCK => FileType::Socket,
        m::S_IFREG | 0 => FileType::RegularFile,
        m::S_IFCHR => FileType::CharacterDevice,
        m::S_IFBLK => FileType::BlockDevice,
        _ => return Err(Errno::EINVAL),
    };
    let dir = fid.dir()?;
    let export = &fid.export;
    let device = matches!(file_type, FileType::CharacterDevice | FileType::BlockDevice);
    let dev = rustix::fs::makedev(t.major, t.minor);
    if export.mapped() {
        // A regular file saying what it stands for (see `security`).
        let kind = file_type.as_raw_mode() & m::S_IFMT;
        let set = Mapped {
            mode: Some(kind | (t.mode & 0o7777)),
            uid: Some(fid.uid),
            gid: Some(t.gid),
            rdev: device.then_some(dev),
        };
        security::make_file(export.security_model, &*dir, &t.name, set, b"")?;
    } else {
        // A device node would hand the client whatever device it names: only where
        // the export allows them (and the server may make them).
        if device && !export.allow_devices {
            return Err(Errno::EPERM);
        }
        rustix::fs::mknodat(
            &*dir,
            t.name.as_str(),
            file_type,
            Mode::from_raw_mode(t.mode & 0o7777),
            dev,
        )
        .map_err(sys)?;
        super::modes::exact_at(&*dir, &t.name, t.mode);
    }
    let qid = qid_in(export, &dir, &t.name)?;
    Ok(Rmknod { qid }.into())
}
