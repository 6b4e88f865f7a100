//! From Linux errnos (what 9P and the namespace speak) to WASI errnos, and the error
//! conversions the generated bindings need.

use wasm9p_proto::Errno as Linux;

use super::types::{Errno, Error};

/// The WASI errno for a Linux errno; anything without a counterpart is EIO.
pub(crate) fn wasi_errno(e: Linux) -> Errno {
    match e {
        Linux::EPERM => Errno::Perm,
        Linux::ENOENT => Errno::Noent,
        Linux::ESRCH => Errno::Srch,
        Linux::EINTR => Errno::Intr,
        Linux::EIO => Errno::Io,
        Linux::ENXIO => Errno::Nxio,
        Linux::E2BIG => Errno::TooBig,
        Linux::ENOEXEC => Errno::Noexec,
        Linux::EBADF => Errno::Badf,
        Linux::ECHILD => Errno::Child,
        Linux::EAGAIN => Errno::Again,
        Linux::ENOMEM => Errno::Nomem,
        Linux::EACCES => Errno::Acces,
        Linux::EFAULT => Errno::Fault,
        Linux::EBUSY => Errno::Busy,
        Linux::EEXIST => Errno::Exist,
        Linux::EXDEV => Errno::Xdev,
        Linux::ENODEV => Errno::Nodev,
        Linux::ENOTDIR => Errno::Notdir,
        Linux::EISDIR => Errno::Isdir,
        Linux::EINVAL => Errno::Inval,
        Linux::ENFILE => Errno::Nfile,
        Linux::EMFILE => Errno::Mfile,
        Linux::ENOTTY => Errno::Notty,
        Linux::ETXTBSY => Errno::Txtbsy,
        Linux::EFBIG => Errno::Fbig,
        Linux::ENOSPC => Errno::Nospc,
        Linux::ESPIPE => Errno::Spipe,
        Linux::EROFS => Errno::Rofs,
        Linux::EMLINK => Errno::Mlink,
        Linux::EPIPE => Errno::Pipe,
        Linux::EDOM => Errno::Dom,
        Linux::ERANGE => Errno::Range,
        Linux::EDEADLK => Errno::Deadlk,
        Linux::ENAMETOOLONG => Errno::Nametoolong,
        Linux::ENOLCK => Errno::Nolck,
        Linux::ENOSYS => Errno::Nosys,
        Linux::ENOTEMPTY => Errno::Notempty,
        Linux::ELOOP => Errno::Loop,
        Linux::ENOMSG => Errno::Nomsg,
        Linux::EOVERFLOW => Errno::Overflow,
        Linux::EILSEQ => Errno::Ilseq,
        Linux::EOPNOTSUPP => Errno::Notsup,
        Linux::ETIMEDOUT => Errno::Timedout,
        Linux::ECONNREFUSED => Errno::Connrefused,
        Linux::ECONNRESET => Errno::Connreset,
        Linux::ENOTCONN => Errno::Notconn,
        Linux::EDQUOT => Errno::Dquot,
        Linux::ESTALE => Errno::Stale,
        Linux::ECANCELED => Errno::Canceled,
        Linux::EPROTO => Errno::Proto,
        _ => Errno::Io,
    }
}

impl From<Linux> for Error {
    fn from(e: Linux) -> Error {
        Error::from(wasi_errno(e))
    }
}

impl From<wiggle::GuestError> for Error {
    fn from(e: wiggle::GuestError) -> Error {
        use wiggle::GuestError as G;
        match e {
            G::InvalidFlagValue { .. } | G::InvalidEnumValue { .. } => Error::from(Errno::Inval),
            G::PtrOverflow | G::PtrOutOfBounds { .. } | G::PtrNotAligned { .. } => {
                Error::from(Errno::Fault)
            }
            G::InvalidUtf8 { .. } => Error::from(Errno::Ilseq),
            G::TryFromIntError { .. } => Error::from(Errno::Overflow),
            _ => Error::from(Errno::Inval),
        }
    }
}

impl From<std::num::TryFromIntError> for Error {
    fn from(_: std::num::TryFromIntError) -> Error {
        Error::from(Errno::Overflow)
    }
}

impl wiggle::GuestErrorType for Errno {
    fn success() -> Self {
        Errno::Success
    }
}
