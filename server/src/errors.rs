//! Host errors as 9P errnos (both are Linux values): what every layer that makes a
//! syscall for a client answers with. Below the request handlers and the security
//! models, so neither imports the other for it.

use wasm9p_proto::Errno;

/// A rustix errno as a 9P errno.
pub(crate) fn sys(e: rustix::io::Errno) -> Errno {
    Errno(e.raw_os_error() as u32)
}

/// A std I/O error as a 9P errno.
pub(crate) fn ioerr(e: std::io::Error) -> Errno {
    Errno::from(&e)
}
