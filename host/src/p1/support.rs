//! What the preview1 calls share: conversions, iovec gathering and scattering, file
//! reads and writes through the descriptor table, guest output.

use bytes::Bytes;
use wasm9p_guest_fs::backend::{Attr, Kind, SetAttr};
use wasm9p_guest_fs::namespace::Location;
use wiggle::{GuestMemory, GuestPtr};

use super::fds::{Desc, DirDesc, FileDesc};
use super::types::{self, Errno, Error};
use super::{Output, WasiP1Ctx, MAX_IO};

pub(super) fn filetype(kind: Kind) -> types::Filetype {
    match kind {
        Kind::Dir => types::Filetype::Directory,
        Kind::File => types::Filetype::RegularFile,
        Kind::Symlink => types::Filetype::SymbolicLink,
        Kind::Other => types::Filetype::Unknown,
    }
}

pub(super) fn nanos((sec, nsec): (u64, u32)) -> u64 {
    sec.saturating_mul(1_000_000_000)
        .saturating_add(nsec.into())
}

pub(super) fn split_nanos(ns: u64) -> (u64, u64) {
    (ns / 1_000_000_000, ns % 1_000_000_000)
}

/// Captured output is bounded; past it bytes are dropped (the guest still sees them
/// written, as with a full pipe that is drained).
const MAX_CAPTURE: usize = 16 << 20;

impl WasiP1Ctx {
    pub(super) fn dir(&self, fd: types::Fd) -> Result<&DirDesc, Error> {
        match self.fds.get(fd.into())? {
            Desc::Dir(d) => Ok(d),
            _ => Err(Errno::Notdir.into()),
        }
    }

    pub(super) fn file_mut(&mut self, fd: types::Fd) -> Result<&mut FileDesc, Error> {
        match self.fds.get_mut(fd.into())? {
            Desc::File(f) => Ok(f),
            Desc::Dir(_) => Err(Errno::Isdir.into()),
            _ => Err(Errno::Spipe.into()),
        }
    }

    /// The guest path `path` names relative to directory `dirfd`.
    pub(super) fn path(
        &self,
        memory: &GuestMemory<'_>,
        dirfd: types::Fd,
        path: GuestPtr<str>,
    ) -> Result<String, Error> {
        self.check_cancelled()?;
        let dir = self.dir(dirfd)?;
        let rel = memory.as_cow_str(path)?;
        // Relative to a directory capability, and never above it (unless it is the
        // working directory).
        if dir.working_dir {
            return crate::wasi_fs::from_working_dir(&dir.loc, &rel).map_err(Error::from);
        }
        crate::wasi_fs::beneath(&dir.loc, &rel).map_err(Error::from)
    }

    pub(super) fn filestat(&self, loc: &Location) -> Result<types::Filestat, Error> {
        let attr = self.block(self.ns.getattr_at(loc))?;
        Ok(Self::filestat_of(loc, &attr))
    }

    /// The filestat of `attr`, what `loc` has.
    pub(super) fn filestat_of(loc: &Location, attr: &Attr) -> types::Filestat {
        types::Filestat {
            dev: loc.mount.map_or(u64::MAX, |m| m as u64),
            ino: attr.ino,
            filetype: filetype(loc.node.kind),
            nlink: attr.nlink,
            size: attr.size,
            atim: nanos(attr.atime),
            mtim: nanos(attr.mtime),
            ctim: nanos(attr.ctime),
        }
    }

    pub(super) fn times(
        atim: types::Timestamp,
        mtim: types::Timestamp,
        flags: types::Fstflags,
    ) -> Result<SetAttr, Error> {
        use types::Fstflags as F;
        if flags.contains(F::ATIM) && flags.contains(F::ATIM_NOW)
            || flags.contains(F::MTIM) && flags.contains(F::MTIM_NOW)
        {
            return Err(Errno::Inval.into());
        }
        let pick = |set: F, now: F, t: u64| {
            if flags.contains(set) {
                Some(Some(split_nanos(t)))
            } else if flags.contains(now) {
                Some(None)
            } else {
                None
            }
        };
        Ok(SetAttr {
            atime: pick(F::ATIM, F::ATIM_NOW, atim),
            mtime: pick(F::MTIM, F::MTIM_NOW, mtim),
            ..SetAttr::default()
        })
    }

    /// Writes guest output to stdout (`err == false`) or stderr, as configured.
    pub(super) fn write_output(&self, err: bool, data: &[u8]) -> Result<(), Error> {
        use std::io::Write;
        self.check_cancelled()?;
        match if err { &self.stderr } else { &self.stdout } {
            Output::Stream(sink) => (sink.0)(data),
            Output::Inherit if err => std::io::stderr().lock().write_all(data),
            Output::Inherit => {
                let mut out = std::io::stdout().lock();
                out.write_all(data).and_then(|()| out.flush())
            }
            Output::Capture(buf) => {
                let mut buf = buf.lock().unwrap_or_else(|e| e.into_inner());
                let room = MAX_CAPTURE.saturating_sub(buf.len());
                buf.extend_from_slice(&data[..data.len().min(room)]);
                Ok(())
            }
        }
        .map_err(|_| Error::from(Errno::Io))
    }

    /// Gathers the bytes of `ciovs`, at most [`MAX_IO`].
    pub(super) fn gather(
        memory: &GuestMemory<'_>,
        ciovs: types::CiovecArray,
    ) -> Result<Vec<u8>, Error> {
        let mut data = Vec::new();
        for ciov in ciovs.iter() {
            let ciov: types::Ciovec = memory.read(ciov?)?;
            let room = MAX_IO - data.len();
            let len = (ciov.buf_len as usize).min(room);
            data.extend_from_slice(&memory.as_cow(ciov.buf.as_array(len as u32))?);
            if data.len() == MAX_IO {
                break;
            }
        }
        Ok(data)
    }

    /// Scatters `data` into `iovs`; returns the count placed.
    pub(super) fn scatter(
        memory: &mut GuestMemory<'_>,
        iovs: types::IovecArray,
        data: &[u8],
    ) -> Result<u32, Error> {
        let mut at = 0;
        for iov in iovs.iter() {
            if at == data.len() {
                break;
            }
            let iov: types::Iovec = memory.read(iov?)?;
            let n = (iov.buf_len as usize).min(data.len() - at);
            memory.copy_from_slice(&data[at..at + n], iov.buf.as_array(n as u32))?;
            at += n;
        }
        Ok(at as u32)
    }

    pub(super) fn iovs_len(
        memory: &GuestMemory<'_>,
        iovs: types::IovecArray,
    ) -> Result<usize, Error> {
        let mut total = 0usize;
        for iov in iovs.iter() {
            let iov: types::Iovec = memory.read(iov?)?;
            total = total.saturating_add(iov.buf_len as usize);
        }
        Ok(total.min(MAX_IO))
    }

    pub(super) fn read_file(
        &mut self,
        fd: types::Fd,
        offset: Option<u64>,
        len: usize,
    ) -> Result<Bytes, Error> {
        self.check_cancelled()?;
        let rt = self.rt.clone();
        let f = self.file_mut(fd)?;
        if !f.read {
            return Err(Errno::Badf.into());
        }
        let at = offset.unwrap_or(f.pos);
        let data = super::block_on_handle(&rt, f.file.read_at(at, len))?;
        if offset.is_none() {
            f.pos = at + data.len() as u64;
        }
        Ok(data)
    }

    pub(super) fn write_file(
        &mut self,
        fd: types::Fd,
        offset: Option<u64>,
        data: Vec<u8>,
    ) -> Result<u32, Error> {
        self.check_cancelled()?;
        let rt = self.rt.clone();
        let f = self.file_mut(fd)?;
        if !f.write {
            return Err(Errno::Badf.into());
        }
        let append = f.flags.contains(types::Fdflags::APPEND) && offset.is_none();
        let at = match (offset, append) {
            (Some(at), _) => at,
            (None, true) => super::block_on_handle(&rt, f.file.size())?,
            (None, false) => f.pos,
        };
        let n = super::block_on_handle(&rt, f.file.write_at(at, Bytes::from(data)))?;
        if offset.is_none() {
            f.pos = at + n as u64;
        }
        Ok(n as u32)
    }

    pub(super) fn fd_event(
        &self,
        userdata: u64,
        fd: types::Fd,
        type_: types::Eventtype,
    ) -> types::Event {
        let error = match self.fds.get(fd.into()) {
            Ok(_) => Errno::Success,
            Err(e) => e,
        };
        let fd_readwrite = types::EventFdReadwrite {
            nbytes: 0,
            flags: types::Eventrwflags::empty(),
        };
        types::Event {
            userdata,
            error,
            type_,
            fd_readwrite,
        }
    }

    /// `fd_sync` / `fd_datasync`: a file's writes made durable, or a directory's
    /// entries (the common `fsync(dirfd)` after a rename, as on Linux).
    pub(super) fn sync(&mut self, fd: types::Fd, datasync: bool) -> Result<(), Error> {
        let rt = self.rt.clone();
        match self.fds.get_mut(fd.into())? {
            Desc::File(f) => {
                super::block_on_handle(&rt, f.file.fsync(datasync)).map_err(Error::from)
            }
            Desc::Dir(d) => {
                let loc = d.loc.clone();
                super::block_on_handle(&rt, self.ns.sync_dir_at(&loc)).map_err(Error::from)
            }
            Desc::Stdin | Desc::Stdout | Desc::Stderr => Err(Errno::Inval.into()),
        }
    }

    /// What stdio descriptor `fd` is, as wasmtime says: a character device when the
    /// host's own stream is a terminal, unknown otherwise (a pipe, a file, captured).
    pub(super) fn stdio_filetype(&self, fd: types::Fd) -> types::Filetype {
        use std::io::IsTerminal;
        let inherited = match u32::from(fd) {
            0 => matches!(self.stdin, super::Input::Inherit) && std::io::stdin().is_terminal(),
            1 => matches!(self.stdout, Output::Inherit) && std::io::stdout().is_terminal(),
            _ => matches!(self.stderr, Output::Inherit) && std::io::stderr().is_terminal(),
        };
        if inherited {
            types::Filetype::CharacterDevice
        } else {
            types::Filetype::Unknown
        }
    }

    /// The socket calls on `fd`: EBADF if it is no descriptor, ENOTSOCK otherwise (a
    /// guest gets no sockets through preview1 here).
    pub(super) fn not_a_socket(&self, fd: types::Fd) -> Error {
        match self.fds.get(fd.into()) {
            Ok(_) => Errno::Notsock.into(),
            Err(e) => e.into(),
        }
    }

    pub(super) fn close(&self, desc: Desc) -> Result<(), Error> {
        if let Desc::File(f) = desc {
            // Write-back errors surface here, never silently.
            self.block(f.file.flush())?;
        }
        Ok(())
    }
}

pub(super) fn sizes<'a>(
    strings: impl Iterator<Item = &'a str>,
) -> Result<(types::Size, types::Size), Error> {
    let (mut count, mut bytes) = (0u32, 0u32);
    for s in strings {
        count += 1;
        bytes = bytes
            .checked_add(u32::try_from(s.len() + 1)?)
            .ok_or(Error::from(Errno::Overflow))?;
    }
    Ok((count, bytes))
}

pub(super) fn write_strings<'a>(
    memory: &mut GuestMemory<'_>,
    strings: impl Iterator<Item = &'a str>,
    ptrs: GuestPtr<GuestPtr<u8>>,
    mut buf: GuestPtr<u8>,
) -> Result<(), Error> {
    let mut ptrs = ptrs;
    for s in strings {
        memory.write(ptrs, buf)?;
        let bytes = [s.as_bytes(), &[0]].concat();
        memory.copy_from_slice(&bytes, buf.as_array(bytes.len() as u32))?;
        buf = buf.add(bytes.len() as u32)?;
        ptrs = ptrs.add(1)?;
    }
    Ok(())
}

/// The rights a preopened directory reports (base, inheriting): wasmtime's fixed set,
/// which "many userlands" expect.
pub(super) fn preopen_rights() -> (types::Rights, types::Rights) {
    use types::Rights as R;
    let base = R::PATH_CREATE_DIRECTORY
        | R::PATH_CREATE_FILE
        | R::PATH_LINK_SOURCE
        | R::PATH_LINK_TARGET
        | R::PATH_OPEN
        | R::FD_READDIR
        | R::PATH_READLINK
        | R::PATH_RENAME_SOURCE
        | R::PATH_RENAME_TARGET
        | R::PATH_SYMLINK
        | R::PATH_REMOVE_DIRECTORY
        | R::PATH_UNLINK_FILE
        | R::PATH_FILESTAT_GET
        | R::PATH_FILESTAT_SET_TIMES
        | R::FD_FILESTAT_GET
        | R::FD_FILESTAT_SET_TIMES;
    let inheriting = base
        | R::FD_DATASYNC
        | R::FD_READ
        | R::FD_SEEK
        | R::FD_FDSTAT_SET_FLAGS
        | R::FD_SYNC
        | R::FD_TELL
        | R::FD_WRITE
        | R::FD_ADVISE
        | R::FD_ALLOCATE
        | R::FD_FILESTAT_GET
        | R::FD_FILESTAT_SET_SIZE
        | R::FD_FILESTAT_SET_TIMES
        | R::POLL_FD_READWRITE;
    (base, inheriting)
}
