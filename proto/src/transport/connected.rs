//! A connected socket of any transport, as a runtime's stream or as a descriptor: one
//! accepted on one runtime and served on another, or one connected by a process on
//! behalf of another and handed over to it (a containerd shim's host side connects
//! for a container whose mount namespace hides the server's socket).

use std::io;
use std::os::fd::OwnedFd;

use tokio::net::{TcpStream, UnixStream};

use super::BoxStream;

/// A connected socket not tied to an async runtime: from
/// [`super::Listener::accept_detached`], [`super::connect_fd`], or a descriptor another
/// process handed over ([`Connected::from_fd`]). [`Connected::into_stream`] registers
/// it with the runtime it is called on.
#[derive(Debug)]
pub struct Connected {
    fd: OwnedFd,
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Tcp,
    Unix,
    Vsock,
}

/// A connected socket registered with the runtime that made it.
pub(super) enum Registered {
    Tcp(TcpStream),
    Unix(UnixStream),
    Vsock(tokio_vsock::VsockStream),
}

impl Registered {
    /// As a stream of the runtime it is registered with.
    pub(super) fn into_box(self) -> BoxStream {
        match self {
            Registered::Tcp(s) => Box::new(s),
            Registered::Unix(s) => Box::new(s),
            Registered::Vsock(s) => Box::new(s),
        }
    }

    /// Untied from its runtime.
    pub(super) fn detach(self) -> io::Result<Connected> {
        Ok(match self {
            Registered::Tcp(s) => Connected {
                fd: s.into_std()?.into(),
                kind: Kind::Tcp,
            },
            Registered::Unix(s) => Connected {
                fd: s.into_std()?.into(),
                kind: Kind::Unix,
            },
            Registered::Vsock(s) => Connected {
                fd: s.into(),
                kind: Kind::Vsock,
            },
        })
    }
}

impl Connected {
    /// A connected stream socket handed over by another process: its transport is
    /// told by its address (Unix, TCP or vsock); anything else is refused.
    pub fn from_fd(fd: OwnedFd) -> io::Result<Connected> {
        let unix = std::os::unix::net::UnixStream::from(fd);
        if unix.local_addr().is_ok() {
            return Ok(Connected {
                fd: unix.into(),
                kind: Kind::Unix,
            });
        }
        let tcp = std::net::TcpStream::from(OwnedFd::from(unix));
        if tcp.local_addr().is_ok() {
            return Ok(Connected {
                fd: tcp.into(),
                kind: Kind::Tcp,
            });
        }
        let vsock = vsock::VsockStream::from(OwnedFd::from(tcp));
        match vsock.local_addr() {
            Ok(_) => Ok(Connected {
                fd: vsock.into(),
                kind: Kind::Vsock,
            }),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the descriptor handed over is not a Unix, TCP or vsock stream socket",
            )),
        }
    }

    /// The socket itself, to hand over to another process.
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }

    /// The connection as a stream of the tokio runtime this is called on, whose I/O
    /// driver then wakes whoever waits on it. Panics outside a runtime with I/O enabled
    /// (as tokio's `from_std` does); fails if the runtime cannot watch one more socket.
    pub fn into_stream(self) -> io::Result<BoxStream> {
        Ok(match self.kind {
            Kind::Tcp => {
                let stream = std::net::TcpStream::from(self.fd);
                stream.set_nonblocking(true)?;
                stream.set_nodelay(true)?;
                Box::new(TcpStream::from_std(stream)?)
            }
            Kind::Unix => {
                let stream = std::os::unix::net::UnixStream::from(self.fd);
                stream.set_nonblocking(true)?;
                Box::new(UnixStream::from_std(stream)?)
            }
            Kind::Vsock => Box::new(tokio_vsock::VsockStream::new(vsock::VsockStream::from(
                self.fd,
            ))?),
        })
    }
}
