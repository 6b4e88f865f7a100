//! Tlock and Tgetlock: POSIX byte-range locks as open-file-description locks.
//!
//! Every client's open file is one open file description here, and all of them live in
//! this one server process. Classic POSIX locks belong to a process, so two clients
//! would never conflict; OFD locks (`F_OFD_SETLK`) belong to the open file description,
//! which gives each client's open its own lock owner, as on a local file system.
//! Locks are never waited for on a server thread: a conflict answers BLOCKED and the
//! client retries (the Linux client loops on it for blocking locks).

use std::os::fd::{AsRawFd, RawFd};

use wasm9p_proto::consts::lock as l;
use wasm9p_proto::{Errno, Message, Rgetlock, Rlock, Tgetlock, Tlock};

use crate::connection::Connection;
use crate::fid::Open;

fn lock_type(ty: u8) -> Result<libc::c_short, Errno> {
    match ty {
        l::RDLCK => Ok(libc::F_RDLCK as libc::c_short),
        l::WRLCK => Ok(libc::F_WRLCK as libc::c_short),
        l::UNLCK => Ok(libc::F_UNLCK as libc::c_short),
        _ => Err(Errno::EINVAL),
    }
}

fn flock(ty: libc::c_short, start: u64, length: u64) -> Result<libc::flock, Errno> {
    let start = i64::try_from(start).map_err(|_| Errno::EINVAL)?;
    let len = i64::try_from(length).map_err(|_| Errno::EINVAL)?;
    Ok(libc::flock {
        l_type: ty,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: start,
        l_len: len,
        l_pid: 0, // must be 0 for OFD locks
    })
}

#[allow(unsafe_code)]
fn fcntl_lock(fd: RawFd, cmd: libc::c_int, lock: &mut libc::flock) -> Result<(), Errno> {
    // SAFETY: `fd` is a descriptor owned by an open fid that outlives this call, and
    // `lock` is a valid, initialised `struct flock` the kernel may read and write.
    let rc = unsafe { libc::fcntl(fd, cmd, lock as *mut libc::flock) };
    if rc == -1 {
        Err(Errno::from(&std::io::Error::last_os_error()))
    } else {
        Ok(())
    }
}

fn open_file(s: &Connection, fid: u32) -> Result<std::sync::Arc<std::fs::File>, Errno> {
    match &*s.fids.get(fid)?.open_state() {
        Open::File(file) => Ok(file.clone()),
        _ => Err(Errno::EBADF),
    }
}

pub(super) fn lock(s: &Connection, t: Tlock) -> Result<Message, Errno> {
    let file = open_file(s, t.fid)?;
    let mut lock = flock(lock_type(t.ty)?, t.start, t.length)?;
    let status = match fcntl_lock(file.as_raw_fd(), libc::F_OFD_SETLK, &mut lock) {
        Ok(()) => l::SUCCESS,
        Err(Errno::EAGAIN) | Err(Errno::EACCES) => l::BLOCKED,
        Err(_) => l::ERROR,
    };
    Ok(Rlock { status }.into())
}

pub(super) fn getlock(s: &Connection, t: Tgetlock) -> Result<Message, Errno> {
    let file = open_file(s, t.fid)?;
    let mut lock = flock(lock_type(t.ty)?, t.start, t.length)?;
    fcntl_lock(file.as_raw_fd(), libc::F_OFD_GETLK, &mut lock)?;
    let reply = if lock.l_type == libc::F_UNLCK as libc::c_short {
        Rgetlock {
            ty: l::UNLCK,
            start: t.start,
            length: t.length,
            proc_id: t.proc_id,
            client_id: t.client_id,
        }
    } else {
        let ty = if lock.l_type == libc::F_RDLCK as libc::c_short {
            l::RDLCK
        } else {
            l::WRLCK
        };
        Rgetlock {
            ty,
            start: lock.l_start as u64,
            length: lock.l_len as u64,
            proc_id: 0,
            client_id: String::new(),
        }
    };
    Ok(reply.into())
}
