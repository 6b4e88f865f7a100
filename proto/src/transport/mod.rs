//! Async transports (feature `tokio`): connect to or listen on an [`Addr`], or make an
//! in-process pipe. Every connection is a [`Stream`]: bytes in, bytes out; framing is
//! the caller's (see [`crate::frame`]).

mod fc_vsock;
mod listener;
mod peer;

use std::io;
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::addr::Addr;

pub use fc_vsock::{fc_vsock_accept_handshake, fc_vsock_client_handshake, HANDSHAKE_TIMEOUT};
pub use listener::{Accepted, Listener};
pub use peer::{Peer, PeerId};

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

/// Connects to `addr`, failing after `timeout` rather than hanging. The error does not
/// repeat the address: callers name it (the client's `ConnectError` does).
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
        Ok(result) => result,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no connection within {timeout:?}"),
        )),
    }
}

/// Writes every segment, in order, with vectored writes: frame heads and the payloads
/// [`crate::encode_frame_head`] left out go to the socket without being copied
/// together. Empties `segments`.
pub async fn write_segments<W: AsyncWrite + Unpin + ?Sized>(
    writer: &mut W,
    segments: &mut Vec<Bytes>,
) -> io::Result<()> {
    let mut start = 0;
    while start < segments.len() {
        let slices: Vec<io::IoSlice<'_>> = segments[start..]
            .iter()
            .take(64)
            .map(|s| io::IoSlice::new(s))
            .collect();
        let mut written = writer.write_vectored(&slices).await?;
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        while written > 0 {
            let first = &mut segments[start];
            let n = written.min(first.len());
            first.advance(n);
            written -= n;
            if first.is_empty() {
                start += 1;
            }
        }
        while start < segments.len() && segments[start].is_empty() {
            start += 1;
        }
    }
    segments.clear();
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn segments_arrive_whole_and_in_order_through_a_small_pipe() {
        // A 1 KiB pipe forces many partial vectored writes.
        let (mut a, mut b) = tokio::io::duplex(1024);
        let mut segments: Vec<Bytes> = (0..50u8)
            .map(|i| Bytes::from(vec![i; 1 + i as usize * 37]))
            .collect();
        let expected: Vec<u8> = segments.iter().flat_map(|s| s.to_vec()).collect();
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; expected.len()];
            b.read_exact(&mut got).await.unwrap();
            assert_eq!(got, expected);
        });
        write_segments(&mut a, &mut segments).await.unwrap();
        assert!(segments.is_empty());
        reader.await.unwrap();
    }
}
