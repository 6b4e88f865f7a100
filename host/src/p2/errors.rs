//! From Linux errnos (what 9P and the namespace speak) to `wasi:filesystem` error codes.

use wasm9p_proto::Errno;

use super::{ErrorCode, FsError};

/// The error code for a Linux errno; anything without a counterpart is `io`.
pub(crate) fn error_code(e: Errno) -> ErrorCode {
    use ErrorCode as C;
    match e {
        Errno::EPERM => C::NotPermitted,
        Errno::ENOENT => C::NoEntry,
        Errno::EINTR => C::Interrupted,
        Errno::ENXIO => C::NoSuchDevice,
        Errno::EBADF => C::BadDescriptor,
        Errno::EAGAIN => C::WouldBlock,
        Errno::ENOMEM => C::InsufficientMemory,
        Errno::EACCES => C::Access,
        Errno::EBUSY => C::Busy,
        Errno::EEXIST => C::Exist,
        Errno::EXDEV => C::CrossDevice,
        Errno::ENODEV => C::NoDevice,
        Errno::ENOTDIR => C::NotDirectory,
        Errno::EISDIR => C::IsDirectory,
        Errno::EINVAL => C::Invalid,
        Errno::ENOTTY => C::NoTty,
        Errno::ETXTBSY => C::TextFileBusy,
        Errno::EFBIG => C::FileTooLarge,
        Errno::ENOSPC => C::InsufficientSpace,
        Errno::ESPIPE => C::InvalidSeek,
        Errno::EROFS => C::ReadOnly,
        Errno::EMLINK => C::TooManyLinks,
        Errno::EPIPE => C::Pipe,
        Errno::EDEADLK => C::Deadlock,
        Errno::ENAMETOOLONG => C::NameTooLong,
        Errno::ENOLCK => C::NoLock,
        Errno::ENOTEMPTY => C::NotEmpty,
        Errno::ELOOP => C::Loop,
        Errno::EOVERFLOW => C::Overflow,
        Errno::EILSEQ => C::IllegalByteSequence,
        Errno::EOPNOTSUPP | Errno::ENOSYS => C::Unsupported,
        Errno::EDQUOT => C::Quota,
        Errno::EALREADY => C::Already,
        Errno::EINPROGRESS => C::InProgress,
        Errno::EMSGSIZE => C::MessageSize,
        _ => C::Io,
    }
}

/// `?` for namespace results in filesystem functions.
pub(crate) trait OrFsError<T> {
    /// The error as a `wasi:filesystem` error code.
    fn fs(self) -> Result<T, FsError>;
}

impl<T> OrFsError<T> for Result<T, Errno> {
    fn fs(self) -> Result<T, FsError> {
        self.map_err(|e| error_code(e).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_errnos_have_their_own_codes() {
        assert!(matches!(error_code(Errno::ENOENT), ErrorCode::NoEntry));
        assert!(matches!(error_code(Errno::ENOTEMPTY), ErrorCode::NotEmpty));
        assert!(matches!(error_code(Errno::EXDEV), ErrorCode::CrossDevice));
        assert!(matches!(error_code(Errno::ELOOP), ErrorCode::Loop));
        assert!(matches!(error_code(Errno::EPROTO), ErrorCode::Io));
    }
}
