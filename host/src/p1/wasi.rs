//! The preview1 calls.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use wiggle::{GuestMemory, GuestPtr};

use super::fds::{Desc, DirDesc, FileDesc};
use super::support::{filetype, sizes, write_strings};
use super::types::{self, Errno, Error};
use super::{WasiP1Ctx, MAX_IO};

impl super::wasi_snapshot_preview1::WasiSnapshotPreview1 for WasiP1Ctx {
    fn args_get(
        &mut self,
        memory: &mut GuestMemory<'_>,
        argv: GuestPtr<GuestPtr<u8>>,
        argv_buf: GuestPtr<u8>,
    ) -> Result<(), Error> {
        write_strings(memory, self.args.iter().map(String::as_str), argv, argv_buf)
    }

    fn args_sizes_get(
        &mut self,
        _memory: &mut GuestMemory<'_>,
    ) -> Result<(types::Size, types::Size), Error> {
        sizes(self.args.iter().map(String::as_str))
    }

    fn environ_get(
        &mut self,
        memory: &mut GuestMemory<'_>,
        environ: GuestPtr<GuestPtr<u8>>,
        environ_buf: GuestPtr<u8>,
    ) -> Result<(), Error> {
        let pairs: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        write_strings(
            memory,
            pairs.iter().map(String::as_str),
            environ,
            environ_buf,
        )
    }

    fn environ_sizes_get(
        &mut self,
        _memory: &mut GuestMemory<'_>,
    ) -> Result<(types::Size, types::Size), Error> {
        let pairs: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        sizes(pairs.iter().map(String::as_str))
    }

    fn clock_res_get(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        id: types::Clockid,
    ) -> Result<types::Timestamp, Error> {
        match id {
            types::Clockid::Realtime | types::Clockid::Monotonic => Ok(1),
            types::Clockid::ProcessCputimeId | types::Clockid::ThreadCputimeId => Ok(1_000),
        }
    }

    fn clock_time_get(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        id: types::Clockid,
        _precision: types::Timestamp,
    ) -> Result<types::Timestamp, Error> {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        match id {
            types::Clockid::Realtime => Ok(ns(SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default())),
            types::Clockid::Monotonic => Ok(ns(self.started.elapsed())),
            types::Clockid::ProcessCputimeId => {
                let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
                Ok(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64)
            }
            types::Clockid::ThreadCputimeId => {
                let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
                Ok(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64)
            }
        }
    }

    fn fd_advise(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        _offset: types::Filesize,
        _len: types::Filesize,
        _advice: types::Advice,
    ) -> Result<(), Error> {
        self.file_mut(fd).map(drop)
    }

    fn fd_allocate(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        offset: types::Filesize,
        len: types::Filesize,
    ) -> Result<(), Error> {
        // As posix_fallocate: the file is at least offset + len long afterwards, and
        // never shorter than it was (9P has no preallocation, so growing is a truncate).
        let rt = self.rt.clone();
        let f = self.file_mut(fd)?;
        if !f.write {
            return Err(Errno::Badf.into());
        }
        let end = offset.checked_add(len).ok_or(Error::from(Errno::Fbig))?;
        if end > i64::MAX as u64 {
            return Err(Errno::Fbig.into());
        }
        if super::block_on_handle(&rt, f.file.size())? < end {
            super::block_on_handle(&rt, f.file.set_len(end))?;
        }
        Ok(())
    }

    fn fd_close(&mut self, _memory: &mut GuestMemory<'_>, fd: types::Fd) -> Result<(), Error> {
        let desc = self.fds.remove(fd.into())?;
        self.close(desc)
    }

    fn fd_datasync(&mut self, _memory: &mut GuestMemory<'_>, fd: types::Fd) -> Result<(), Error> {
        self.sync(fd, true)
    }

    fn fd_fdstat_get(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        fd: types::Fd,
    ) -> Result<types::Fdstat, Error> {
        use types::Rights as R;
        // Rights as wasmtime reports them: a fixed set for preopens, otherwise
        // everything the open mode allows.
        let stat = |filetype, flags, rights: R, inheriting: R| types::Fdstat {
            fs_filetype: filetype,
            fs_flags: flags,
            fs_rights_base: rights,
            fs_rights_inheriting: inheriting,
        };
        let stdio = |rights| {
            stat(
                self.stdio_filetype(fd),
                types::Fdflags::empty(),
                rights,
                rights,
            )
        };
        Ok(match self.fds.get(fd.into())? {
            Desc::Stdin => stdio(R::FD_READ),
            Desc::Stdout | Desc::Stderr => stdio(R::FD_WRITE),
            Desc::Dir(d) if d.preopen.is_some() => {
                let (base, inheriting) = super::support::preopen_rights();
                stat(
                    types::Filetype::Directory,
                    types::Fdflags::empty(),
                    base,
                    inheriting,
                )
            }
            Desc::Dir(_) => {
                let rights = R::all()
                    - R::FD_SEEK
                    - R::FD_FILESTAT_SET_SIZE
                    - R::PATH_FILESTAT_SET_SIZE
                    - R::FD_WRITE;
                stat(
                    types::Filetype::Directory,
                    types::Fdflags::empty(),
                    rights,
                    rights,
                )
            }
            Desc::File(f) => {
                let mut rights = R::all();
                if !f.read {
                    rights -= R::FD_READ | R::FD_READDIR;
                }
                if !f.write {
                    rights -= R::FD_WRITE;
                }
                stat(types::Filetype::RegularFile, f.flags, rights, rights)
            }
        })
    }

    fn fd_fdstat_set_flags(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        flags: types::Fdflags,
    ) -> Result<(), Error> {
        use types::Fdflags as F;
        let rt = self.rt.clone();
        let ns = self.ns.clone();
        let f = self.file_mut(fd)?;
        // Append and nonblock can change on an open file; the sync flags cannot (as in
        // wasmtime). The server appends (so that appenders through other opens do not
        // overwrite each other), so turning append on or off opens the file again with
        // the new mode, sending what the old open buffered first.
        if flags.intersects(F::DSYNC | F::RSYNC | F::SYNC) {
            return Err(Errno::Inval.into());
        }
        let append = flags.contains(F::APPEND);
        if append != f.flags.contains(F::APPEND) {
            let mode = wasm9p_guest_fs::backend::OpenFlags {
                read: f.read,
                write: f.write,
                truncate: false,
                append,
            };
            let reopened = super::block_on_handle(&rt, ns.open_at(&f.loc, mode))?;
            super::block_on_handle(&rt, f.file.flush())?;
            f.file = reopened;
        }
        f.flags = flags;
        Ok(())
    }

    fn fd_fdstat_set_rights(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        _base: types::Rights,
        _inheriting: types::Rights,
    ) -> Result<(), Error> {
        // As in wasmtime: rights are not kept per descriptor, so they cannot be
        // narrowed either; the open mode is what is enforced.
        self.fds.get(fd.into())?;
        Err(Errno::Notsup.into())
    }

    fn fd_filestat_get(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        fd: types::Fd,
    ) -> Result<types::Filestat, Error> {
        match self.fds.get(fd.into())? {
            Desc::Dir(d) => self.filestat(&d.loc.clone()),
            Desc::File(f) => {
                // Through the open file: after an unlink too, buffered writes counted.
                let loc = f.loc.clone();
                let attr = self.block(f.file.getattr())?;
                Ok(Self::filestat_of(&loc, &attr))
            }
            _ => Ok(types::Filestat {
                dev: 0,
                ino: 0,
                filetype: self.stdio_filetype(fd),
                nlink: 1,
                size: 0,
                atim: 0,
                mtim: 0,
                ctim: 0,
            }),
        }
    }

    fn fd_filestat_set_size(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        size: types::Filesize,
    ) -> Result<(), Error> {
        let rt = self.rt.clone();
        let f = self.file_mut(fd)?;
        if !f.write {
            // Not opened for writing (as wasmtime's own preview1 answers, and close
            // to Linux's EINVAL for ftruncate on a read-only fd).
            return Err(Errno::Badf.into());
        }
        // Through the open file: it works after the file is unlinked or renamed.
        super::block_on_handle(&rt, f.file.set_len(size)).map_err(Error::from)
    }

    fn fd_filestat_set_times(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        atim: types::Timestamp,
        mtim: types::Timestamp,
        flags: types::Fstflags,
    ) -> Result<(), Error> {
        let loc = match self.fds.get(fd.into())? {
            Desc::Dir(d) => d.loc.clone(),
            Desc::File(f) => f.loc.clone(),
            _ => return Err(Errno::Badf.into()),
        };
        let attr = Self::times(atim, mtim, flags)?;
        self.block(self.ns.setattr_at(&loc, &attr))
            .map_err(Error::from)
    }

    fn fd_read(
        &mut self,
        memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        iovs: types::IovecArray,
    ) -> Result<types::Size, Error> {
        let len = Self::iovs_len(memory, iovs)?;
        self.check_cancelled()?;
        let data = match (self.fds.get(fd.into())?, &self.stdin) {
            (Desc::Stdin, super::Input::Empty) => Bytes::new(),
            (Desc::Stdin, super::Input::Given(given)) => {
                let mut given = given.lock().unwrap_or_else(|e| e.into_inner());
                let n = len.min(given.len());
                given.split_to(n)
            }
            (Desc::Stdin, super::Input::Inherit) => {
                use std::io::Read;
                let mut buf = vec![0u8; len.min(64 * 1024)];
                let n = std::io::stdin()
                    .lock()
                    .read(&mut buf)
                    .map_err(|_| Error::from(Errno::Io))?;
                buf.truncate(n);
                Bytes::from(buf)
            }
            _ => self.read_file(fd, None, len)?,
        };
        Self::scatter(memory, iovs, &data)
    }

    fn fd_pread(
        &mut self,
        memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        iovs: types::IovecArray,
        offset: types::Filesize,
    ) -> Result<types::Size, Error> {
        let len = Self::iovs_len(memory, iovs)?;
        let data = self.read_file(fd, Some(offset), len)?;
        Self::scatter(memory, iovs, &data)
    }

    fn fd_write(
        &mut self,
        memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        ciovs: types::CiovecArray,
    ) -> Result<types::Size, Error> {
        let data = Self::gather(memory, ciovs)?;
        match self.fds.get(fd.into())? {
            Desc::Stdout | Desc::Stderr => {
                let err = matches!(self.fds.get(fd.into())?, Desc::Stderr);
                self.write_output(err, &data)?;
                Ok(data.len() as u32)
            }
            Desc::Stdin => Err(Errno::Badf.into()),
            _ => self.write_file(fd, None, data),
        }
    }

    fn fd_pwrite(
        &mut self,
        memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        ciovs: types::CiovecArray,
        offset: types::Filesize,
    ) -> Result<types::Size, Error> {
        let data = Self::gather(memory, ciovs)?;
        self.write_file(fd, Some(offset), data)
    }

    fn fd_prestat_get(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        fd: types::Fd,
    ) -> Result<types::Prestat, Error> {
        match self.fds.get(fd.into())? {
            Desc::Dir(DirDesc {
                preopen: Some(name),
                ..
            }) => Ok(types::Prestat::Dir(types::PrestatDir {
                pr_name_len: u32::try_from(name.len())?,
            })),
            _ => Err(Errno::Badf.into()),
        }
    }

    fn fd_prestat_dir_name(
        &mut self,
        memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        path: GuestPtr<u8>,
        path_max_len: types::Size,
    ) -> Result<(), Error> {
        match self.fds.get(fd.into())? {
            Desc::Dir(DirDesc {
                preopen: Some(name),
                ..
            }) => {
                if name.len() > path_max_len as usize {
                    return Err(Errno::Nametoolong.into());
                }
                memory.copy_from_slice(name.as_bytes(), path.as_array(name.len() as u32))?;
                Ok(())
            }
            _ => Err(Errno::Notsup.into()),
        }
    }

    fn fd_renumber(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        from: types::Fd,
        to: types::Fd,
    ) -> Result<(), Error> {
        if let Some(old) = self.fds.renumber(from.into(), to.into())? {
            self.close(old)?;
        }
        Ok(())
    }

    fn fd_seek(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        offset: types::Filedelta,
        whence: types::Whence,
    ) -> Result<types::Filesize, Error> {
        let rt = self.rt.clone();
        let f = self.file_mut(fd)?;
        let base = match whence {
            types::Whence::Set => 0,
            types::Whence::Cur => f.pos as i64,
            types::Whence::End => super::block_on_handle(&rt, f.file.size())? as i64,
        };
        let pos = base
            .checked_add(offset)
            .filter(|p| *p >= 0)
            .ok_or(Error::from(Errno::Inval))?;
        f.pos = pos as u64;
        Ok(f.pos)
    }

    fn fd_sync(&mut self, _memory: &mut GuestMemory<'_>, fd: types::Fd) -> Result<(), Error> {
        self.sync(fd, false)
    }

    fn fd_tell(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        fd: types::Fd,
    ) -> Result<types::Filesize, Error> {
        Ok(self.file_mut(fd)?.pos)
    }

    fn fd_readdir(
        &mut self,
        memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        buf: GuestPtr<u8>,
        buf_len: types::Size,
        cookie: types::Dircookie,
    ) -> Result<types::Size, Error> {
        let loc = self.dir(fd)?.loc.clone();
        // Cookie 0 starts a fresh listing; later cookies index the same one.
        let needs_listing = cookie == 0 || self.dir(fd)?.listing.is_none();
        if needs_listing {
            let path = format!("/{}", loc.path.to_vec().join("/"));
            let entries = self.block(self.ns.readdir(&path))?;
            let parent_ino = loc.node.id;
            let mut listing = vec![
                (".".to_string(), types::Filetype::Directory, loc.node.id),
                ("..".to_string(), types::Filetype::Directory, parent_ino),
            ];
            listing.extend(
                entries
                    .into_iter()
                    .map(|e| (e.name, filetype(e.kind), e.id)),
            );
            if let Desc::Dir(d) = self.fds.get_mut(fd.into())? {
                d.listing = Some(listing);
            }
        }
        let Desc::Dir(d) = self.fds.get(fd.into())? else {
            return Err(Errno::Badf.into());
        };
        let listing = d.listing.as_deref().unwrap_or_default();
        let mut out = Vec::new();
        let limit = buf_len as usize;
        for (i, (name, ty, ino)) in listing
            .iter()
            .enumerate()
            .skip(usize::try_from(cookie).unwrap_or(usize::MAX))
        {
            if out.len() >= limit {
                break;
            }
            out.extend_from_slice(&(i as u64 + 1).to_le_bytes());
            out.extend_from_slice(&ino.to_le_bytes());
            out.extend_from_slice(&(name.len() as u32).to_le_bytes());
            out.push(*ty as u8);
            out.extend_from_slice(&[0, 0, 0]);
            out.extend_from_slice(name.as_bytes());
        }
        // A full buffer tells the guest there may be more; the last entry may be cut.
        let n = out.len().min(limit);
        memory.copy_from_slice(&out[..n], buf.as_array(n as u32))?;
        Ok(n as u32)
    }

    fn path_create_directory(
        &mut self,
        memory: &mut GuestMemory<'_>,
        dirfd: types::Fd,
        path: GuestPtr<str>,
    ) -> Result<(), Error> {
        let path = self.path(memory, dirfd, path)?;
        self.block(self.ns.mkdir(&path, 0o755))
            .map(drop)
            .map_err(Error::from)
    }

    fn path_filestat_get(
        &mut self,
        memory: &mut GuestMemory<'_>,
        dirfd: types::Fd,
        flags: types::Lookupflags,
        path: GuestPtr<str>,
    ) -> Result<types::Filestat, Error> {
        let path = self.path(memory, dirfd, path)?;
        let loc = self.block(
            self.ns
                .resolve(&path, flags.contains(types::Lookupflags::SYMLINK_FOLLOW)),
        )?;
        self.filestat(&loc)
    }

    fn path_filestat_set_times(
        &mut self,
        memory: &mut GuestMemory<'_>,
        dirfd: types::Fd,
        flags: types::Lookupflags,
        path: GuestPtr<str>,
        atim: types::Timestamp,
        mtim: types::Timestamp,
        fst_flags: types::Fstflags,
    ) -> Result<(), Error> {
        let path = self.path(memory, dirfd, path)?;
        let attr = Self::times(atim, mtim, fst_flags)?;
        let follow = flags.contains(types::Lookupflags::SYMLINK_FOLLOW);
        self.block(self.ns.setattr(&path, &attr, follow))
            .map_err(Error::from)
    }

    fn path_link(
        &mut self,
        memory: &mut GuestMemory<'_>,
        src_fd: types::Fd,
        src_flags: types::Lookupflags,
        src_path: GuestPtr<str>,
        target_fd: types::Fd,
        target_path: GuestPtr<str>,
    ) -> Result<(), Error> {
        let from = self.path(memory, src_fd, src_path)?;
        let to = self.path(memory, target_fd, target_path)?;
        let follow = src_flags.contains(types::Lookupflags::SYMLINK_FOLLOW);
        self.block(self.ns.link(&from, &to, follow))
            .map_err(Error::from)
    }

    fn path_open(
        &mut self,
        memory: &mut GuestMemory<'_>,
        dirfd: types::Fd,
        dirflags: types::Lookupflags,
        path: GuestPtr<str>,
        oflags: types::Oflags,
        rights: types::Rights,
        _inheriting: types::Rights,
        fdflags: types::Fdflags,
    ) -> Result<types::Fd, Error> {
        use crate::wasi_fs::{OpenRequest, Opened};
        use types::{Fdflags as F, Oflags as O, Rights as R};
        let path = self.path(memory, dirfd, path)?;
        if fdflags.intersects(F::DSYNC | F::RSYNC | F::SYNC) {
            // As wasmtime: synchronous writes are not offered.
            return Err(Errno::Notsup.into());
        }
        let request = OpenRequest {
            follow: dirflags.contains(types::Lookupflags::SYMLINK_FOLLOW),
            create: oflags.contains(O::CREAT),
            exclusive: oflags.contains(O::EXCL),
            truncate: oflags.contains(O::TRUNC),
            directory: oflags.contains(O::DIRECTORY),
            read: rights.contains(R::FD_READ),
            write: rights.contains(R::FD_WRITE),
            append: fdflags.contains(F::APPEND),
        };
        let desc = match self.block(crate::wasi_fs::open(&self.ns, &path, request))? {
            Opened::Dir(loc) => Desc::Dir(DirDesc {
                loc,
                preopen: None,
                working_dir: false,
                listing: None,
            }),
            Opened::File {
                loc,
                file,
                read,
                write,
            } => Desc::File(FileDesc {
                loc,
                file,
                pos: 0,
                flags: fdflags,
                read,
                write,
            }),
        };
        Ok(types::Fd::from(self.fds.push(desc)?))
    }

    fn path_readlink(
        &mut self,
        memory: &mut GuestMemory<'_>,
        dirfd: types::Fd,
        path: GuestPtr<str>,
        buf: GuestPtr<u8>,
        buf_len: types::Size,
    ) -> Result<types::Size, Error> {
        let path = self.path(memory, dirfd, path)?;
        let target = self.block(self.ns.readlink(&path))?;
        let n = target.len().min(buf_len as usize);
        memory.copy_from_slice(&target.as_bytes()[..n], buf.as_array(n as u32))?;
        Ok(n as u32)
    }

    fn path_remove_directory(
        &mut self,
        memory: &mut GuestMemory<'_>,
        dirfd: types::Fd,
        path: GuestPtr<str>,
    ) -> Result<(), Error> {
        let path = self.path(memory, dirfd, path)?;
        self.block(self.ns.unlink(&path, true)).map_err(Error::from)
    }

    fn path_rename(
        &mut self,
        memory: &mut GuestMemory<'_>,
        src_fd: types::Fd,
        src_path: GuestPtr<str>,
        dest_fd: types::Fd,
        dest_path: GuestPtr<str>,
    ) -> Result<(), Error> {
        let from = self.path(memory, src_fd, src_path)?;
        let to = self.path(memory, dest_fd, dest_path)?;
        self.block(self.ns.rename(&from, &to)).map_err(Error::from)
    }

    fn path_symlink(
        &mut self,
        memory: &mut GuestMemory<'_>,
        src_path: GuestPtr<str>,
        dirfd: types::Fd,
        dest_path: GuestPtr<str>,
    ) -> Result<(), Error> {
        let target = memory.as_cow_str(src_path)?.into_owned();
        let path = self.path(memory, dirfd, dest_path)?;
        if target.starts_with('/') {
            // A link out of the directory capability, which wasmtime refuses too.
            return Err(Errno::Perm.into());
        }
        self.block(self.ns.symlink(&target, &path))
            .map_err(Error::from)
    }

    fn path_unlink_file(
        &mut self,
        memory: &mut GuestMemory<'_>,
        dirfd: types::Fd,
        path: GuestPtr<str>,
    ) -> Result<(), Error> {
        let path = self.path(memory, dirfd, path)?;
        self.block(self.ns.unlink(&path, false))
            .map_err(Error::from)
    }

    fn poll_oneoff(
        &mut self,
        memory: &mut GuestMemory<'_>,
        subs: GuestPtr<types::Subscription>,
        events: GuestPtr<types::Event>,
        nsubscriptions: types::Size,
    ) -> Result<types::Size, Error> {
        let (subs, events) = (
            subs.as_array(nsubscriptions),
            events.as_array(nsubscriptions),
        );
        self.poll(memory, subs, events)
    }

    fn proc_exit(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        status: types::Exitcode,
    ) -> wasmtime::Error {
        wasmtime::Error::new(super::GuestExit(status as i32))
    }

    fn proc_raise(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        _sig: types::Signal,
    ) -> Result<(), Error> {
        Err(Errno::Notsup.into())
    }

    fn sched_yield(&mut self, _memory: &mut GuestMemory<'_>) -> Result<(), Error> {
        std::thread::yield_now();
        Ok(())
    }

    fn random_get(
        &mut self,
        memory: &mut GuestMemory<'_>,
        buf: GuestPtr<u8>,
        buf_len: types::Size,
    ) -> Result<(), Error> {
        // The whole buffer, in pieces of at most MAX_IO so the host never allocates what
        // the guest asks for at once.
        let mut bytes = vec![0u8; (buf_len as usize).min(MAX_IO)];
        let mut done = 0u32;
        while done < buf_len {
            let n = (buf_len - done).min(bytes.len() as u32);
            let chunk = &mut bytes[..n as usize];
            let mut filled = 0;
            while filled < chunk.len() {
                filled += rustix::rand::getrandom(
                    &mut chunk[filled..],
                    rustix::rand::GetRandomFlags::empty(),
                )
                .map_err(|_| Error::from(Errno::Io))?;
            }
            memory.copy_from_slice(chunk, buf.add(done)?.as_array(n))?;
            done += n;
        }
        Ok(())
    }

    fn sock_accept(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        _flags: types::Fdflags,
    ) -> Result<types::Fd, Error> {
        Err(self.not_a_socket(fd))
    }

    fn sock_recv(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        _ri_data: types::IovecArray,
        _ri_flags: types::Riflags,
    ) -> Result<(types::Size, types::Roflags), Error> {
        Err(self.not_a_socket(fd))
    }

    fn sock_send(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        _si_data: types::CiovecArray,
        _si_flags: types::Siflags,
    ) -> Result<types::Size, Error> {
        Err(self.not_a_socket(fd))
    }

    fn sock_shutdown(
        &mut self,
        _memory: &mut GuestMemory<'_>,
        fd: types::Fd,
        _how: types::Sdflags,
    ) -> Result<(), Error> {
        Err(self.not_a_socket(fd))
    }
}
