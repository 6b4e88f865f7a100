//! Linux errno values, the error codes 9P2000.L carries in Rlerror.
//!
//! [`Errno`] is a newtype over the raw value rather than a closed enum: a peer may send
//! any number in Rlerror, and a newtype represents every one of them faithfully (an
//! enum would need a catch-all variant that loses the value). The named constants are
//! Linux's, whatever OS this code runs on.

use std::fmt;
use std::io;

/// A Linux errno value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Errno(pub u32);

macro_rules! errnos {
    ($($name:ident = $value:literal, $text:literal;)*) => {
        impl Errno {
            $(
                #[doc = $text]
                pub const $name: Errno = Errno($value);
            )*

            /// The symbolic name, as in `ENOENT`, if this is a known value.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( $value => Some(stringify!($name)), )*
                    _ => None,
                }
            }

            /// A short description, as `strerror` gives.
            pub fn description(self) -> &'static str {
                match self.0 {
                    $( $value => $text, )*
                    _ => "unknown error",
                }
            }
        }
    };
}

errnos! {
    EPERM = 1, "Operation not permitted";
    ENOENT = 2, "No such file or directory";
    ESRCH = 3, "No such process";
    EINTR = 4, "Interrupted system call";
    EIO = 5, "Input/output error";
    ENXIO = 6, "No such device or address";
    E2BIG = 7, "Argument list too long";
    ENOEXEC = 8, "Exec format error";
    EBADF = 9, "Bad file descriptor";
    ECHILD = 10, "No child processes";
    EAGAIN = 11, "Resource temporarily unavailable";
    ENOMEM = 12, "Cannot allocate memory";
    EACCES = 13, "Permission denied";
    EFAULT = 14, "Bad address";
    ENOTBLK = 15, "Block device required";
    EBUSY = 16, "Device or resource busy";
    EEXIST = 17, "File exists";
    EXDEV = 18, "Invalid cross-device link";
    ENODEV = 19, "No such device";
    ENOTDIR = 20, "Not a directory";
    EISDIR = 21, "Is a directory";
    EINVAL = 22, "Invalid argument";
    ENFILE = 23, "Too many open files in system";
    EMFILE = 24, "Too many open files";
    ENOTTY = 25, "Inappropriate ioctl for device";
    ETXTBSY = 26, "Text file busy";
    EFBIG = 27, "File too large";
    ENOSPC = 28, "No space left on device";
    ESPIPE = 29, "Illegal seek";
    EROFS = 30, "Read-only file system";
    EMLINK = 31, "Too many links";
    EPIPE = 32, "Broken pipe";
    EDOM = 33, "Numerical argument out of domain";
    ERANGE = 34, "Numerical result out of range";
    EDEADLK = 35, "Resource deadlock avoided";
    ENAMETOOLONG = 36, "File name too long";
    ENOLCK = 37, "No locks available";
    ENOSYS = 38, "Function not implemented";
    ENOTEMPTY = 39, "Directory not empty";
    ELOOP = 40, "Too many levels of symbolic links";
    ENOMSG = 42, "No message of desired type";
    ENODATA = 61, "No data available";
    ETIME = 62, "Timer expired";
    EPROTO = 71, "Protocol error";
    EBADMSG = 74, "Bad message";
    EOVERFLOW = 75, "Value too large for defined data type";
    EILSEQ = 84, "Invalid or incomplete multibyte or wide character";
    ENOTSOCK = 88, "Socket operation on non-socket";
    EMSGSIZE = 90, "Message too long";
    EOPNOTSUPP = 95, "Operation not supported";
    EAFNOSUPPORT = 97, "Address family not supported by protocol";
    EADDRINUSE = 98, "Address already in use";
    EADDRNOTAVAIL = 99, "Cannot assign requested address";
    ENETDOWN = 100, "Network is down";
    ENETUNREACH = 101, "Network is unreachable";
    ECONNABORTED = 103, "Software caused connection abort";
    ECONNRESET = 104, "Connection reset by peer";
    ENOBUFS = 105, "No buffer space available";
    EISCONN = 106, "Transport endpoint is already connected";
    ENOTCONN = 107, "Transport endpoint is not connected";
    ETIMEDOUT = 110, "Connection timed out";
    ECONNREFUSED = 111, "Connection refused";
    EHOSTUNREACH = 113, "No route to host";
    EALREADY = 114, "Operation already in progress";
    EINPROGRESS = 115, "Operation now in progress";
    ESTALE = 116, "Stale file handle";
    EDQUOT = 122, "Disk quota exceeded";
    ECANCELED = 125, "Operation canceled";
}

impl Errno {
    /// `ENOTSUP` is the same value as `EOPNOTSUPP` on Linux.
    pub const ENOTSUP: Errno = Errno::EOPNOTSUPP;
    /// `EWOULDBLOCK` is the same value as `EAGAIN` on Linux.
    pub const EWOULDBLOCK: Errno = Errno::EAGAIN;

    /// The errno for an `io::ErrorKind`, used when an error carries no OS code.
    pub fn from_kind(kind: io::ErrorKind) -> Errno {
        use io::ErrorKind as K;
        match kind {
            K::NotFound => Errno::ENOENT,
            K::PermissionDenied => Errno::EACCES,
            K::ConnectionRefused => Errno::ECONNREFUSED,
            K::ConnectionReset => Errno::ECONNRESET,
            K::HostUnreachable => Errno::EHOSTUNREACH,
            K::NetworkUnreachable => Errno::ENETUNREACH,
            K::ConnectionAborted => Errno::ECONNABORTED,
            K::NotConnected => Errno::ENOTCONN,
            K::AddrInUse => Errno::EADDRINUSE,
            K::AddrNotAvailable => Errno::EADDRNOTAVAIL,
            K::NetworkDown => Errno::ENETDOWN,
            K::BrokenPipe => Errno::EPIPE,
            K::AlreadyExists => Errno::EEXIST,
            K::WouldBlock => Errno::EAGAIN,
            K::NotADirectory => Errno::ENOTDIR,
            K::IsADirectory => Errno::EISDIR,
            K::DirectoryNotEmpty => Errno::ENOTEMPTY,
            K::ReadOnlyFilesystem => Errno::EROFS,
            K::StaleNetworkFileHandle => Errno::ESTALE,
            K::InvalidInput => Errno::EINVAL,
            K::InvalidData => Errno::EINVAL,
            K::TimedOut => Errno::ETIMEDOUT,
            K::WriteZero => Errno::EIO,
            K::StorageFull => Errno::ENOSPC,
            K::NotSeekable => Errno::ESPIPE,
            K::QuotaExceeded => Errno::EDQUOT,
            K::FileTooLarge => Errno::EFBIG,
            K::ResourceBusy => Errno::EBUSY,
            K::ExecutableFileBusy => Errno::ETXTBSY,
            K::Deadlock => Errno::EDEADLK,
            K::CrossesDevices => Errno::EXDEV,
            K::TooManyLinks => Errno::EMLINK,
            K::InvalidFilename => Errno::ENAMETOOLONG,
            K::ArgumentListTooLong => Errno::E2BIG,
            K::Interrupted => Errno::EINTR,
            K::Unsupported => Errno::EOPNOTSUPP,
            K::UnexpectedEof => Errno::EIO,
            K::OutOfMemory => Errno::ENOMEM,
            _ => Errno::EIO,
        }
    }

    /// An `io::Error` for this errno (with the OS code on Linux, where values agree).
    pub fn to_io_error(self) -> io::Error {
        if cfg!(target_os = "linux") {
            io::Error::from_raw_os_error(self.0 as i32)
        } else {
            io::Error::new(self.io_kind(), self)
        }
    }

    fn io_kind(self) -> io::ErrorKind {
        use io::ErrorKind as K;
        match self {
            Errno::ENOENT => K::NotFound,
            Errno::EACCES | Errno::EPERM => K::PermissionDenied,
            Errno::EEXIST => K::AlreadyExists,
            Errno::EINVAL => K::InvalidInput,
            Errno::ENOTDIR => K::NotADirectory,
            Errno::EISDIR => K::IsADirectory,
            Errno::ENOTEMPTY => K::DirectoryNotEmpty,
            Errno::EROFS => K::ReadOnlyFilesystem,
            Errno::ETIMEDOUT => K::TimedOut,
            Errno::EOPNOTSUPP | Errno::ENOSYS => K::Unsupported,
            _ => K::Other,
        }
    }
}

impl From<&io::Error> for Errno {
    /// The OS code when there is one (on Linux it *is* the Linux errno), otherwise the
    /// closest errno for the error's kind.
    fn from(err: &io::Error) -> Errno {
        if cfg!(target_os = "linux") {
            if let Some(code) = err.raw_os_error() {
                if code > 0 {
                    return Errno(code as u32);
                }
            }
        }
        Errno::from_kind(err.kind())
    }
}

impl From<io::Error> for Errno {
    fn from(err: io::Error) -> Errno {
        Errno::from(&err)
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "Errno({})", self.0),
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{} ({name})", self.description()),
            None => write!(f, "errno {}", self.0),
        }
    }
}

impl std::error::Error for Errno {}

#[cfg(test)]
mod tests {
    use super::*;
    use io::ErrorKind as K;

    #[test]
    fn io_error_kinds_map_to_linux_errnos() {
        let table = [
            (K::NotFound, Errno::ENOENT, 2),
            (K::PermissionDenied, Errno::EACCES, 13),
            (K::AlreadyExists, Errno::EEXIST, 17),
            (K::NotADirectory, Errno::ENOTDIR, 20),
            (K::IsADirectory, Errno::EISDIR, 21),
            (K::InvalidInput, Errno::EINVAL, 22),
            (K::DirectoryNotEmpty, Errno::ENOTEMPTY, 39),
            (K::ReadOnlyFilesystem, Errno::EROFS, 30),
            (K::CrossesDevices, Errno::EXDEV, 18),
            (K::StorageFull, Errno::ENOSPC, 28),
            (K::InvalidFilename, Errno::ENAMETOOLONG, 36),
            (K::TimedOut, Errno::ETIMEDOUT, 110),
            (K::Unsupported, Errno::EOPNOTSUPP, 95),
            (K::ConnectionReset, Errno::ECONNRESET, 104),
            (K::BrokenPipe, Errno::EPIPE, 32),
            (K::WouldBlock, Errno::EAGAIN, 11),
            (K::Other, Errno::EIO, 5),
            (K::UnexpectedEof, Errno::EIO, 5),
        ];
        for (kind, errno, value) in table {
            let err = io::Error::new(kind, "test");
            assert_eq!(Errno::from(&err), errno, "{kind:?}");
            assert_eq!(errno.0, value, "{kind:?} must carry the Linux value");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn raw_os_code_wins_over_kind() {
        // ELOOP has no dedicated ErrorKind mapping of ours; the raw code must survive.
        let err = io::Error::from_raw_os_error(40);
        assert_eq!(Errno::from(&err), Errno::ELOOP);
        let err = io::Error::from_raw_os_error(61);
        assert_eq!(Errno::from(&err), Errno::ENODATA);
    }

    #[test]
    fn real_filesystem_errors_map() {
        let dir = tempfile::tempdir().unwrap();
        let missing = std::fs::metadata(dir.path().join("missing")).unwrap_err();
        assert_eq!(Errno::from(&missing), Errno::ENOENT);
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let exists = std::fs::create_dir(dir.path().join("f")).unwrap_err();
        assert_eq!(Errno::from(&exists), Errno::EEXIST);
        let notdir = std::fs::metadata(dir.path().join("f/x")).unwrap_err();
        assert_eq!(Errno::from(&notdir), Errno::ENOTDIR);
    }

    #[test]
    fn unknown_values_are_kept_and_displayed() {
        let odd = Errno(4242);
        assert_eq!(odd.name(), None);
        assert_eq!(format!("{odd:?}"), "Errno(4242)");
        assert_eq!(
            Errno::ENOENT.to_string(),
            "No such file or directory (ENOENT)"
        );
        assert_eq!(
            Errno::from(&Errno::ENOTEMPTY.to_io_error()),
            Errno::ENOTEMPTY
        );
    }
}
