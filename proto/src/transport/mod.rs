//! Async transports (feature `tokio`): connect to or listen on an [`Addr`], or make an
//! in-process pipe. Every connection is a [`Stream`]: bytes in, bytes out; framing is
//! the caller's (see [`crate::frame`]).

mod fc_vsock;
mod listener;

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::addr::Addr;

pub use fc_vsock::{fc_vsock_accept_handshake, fc_vsock_client_handshake, HANDSHAKE_TIMEOUT};
pub use listener::Listener;

/// A connected byte stream of any transport.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// A boxed stream of any transport.
pub type BoxStream = Box<dyn Stream>;

/// Buffer size of each direction of an in-process [`duplex`] pipe.
pub const DUPLEX_BUFFER: usize = 1024 * 1024;

/// An in-process connected pair, for the embedded server: no socket, no syscalls.
pub fn duplex() -> (BoxStream, BoxStream) {
    let (a, b) = tokio::io::duplex(DUPLEX_BUFFER);
    (Box::new(a), Box::new(b))
}

/// Connects to `addr`, failing after `timeout` rather than hanging.
pub async fn connect(addr: &Addr, timeout: Duration) -> io::Result<BoxStream> {
    let attempt = async {
        let stream: BoxStream = match addr {
            Addr::Tcp { host, port } => {
                let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                stream.set_nodelay(true)?;
                Box::new(stream)
            }
            Addr::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
            Addr::Vsock { cid, port } => Box::new(
                tokio_vsock::VsockStream::connect(tokio_vsock::VsockAddr::new(*cid, *port)).await?,
            ),
            Addr::FcVsock { uds, port } => {
                let mut stream = tokio::net::UnixStream::connect(uds).await?;
                fc_vsock_client_handshake(&mut stream, *port).await?;
                Box::new(stream)
            }
        };
        Ok(stream)
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(result) => {
            result.map_err(|e: io::Error| io::Error::new(e.kind(), format!("{addr}: {e}")))
        }
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{addr}: connect timed out"),
        )),
    }
}
