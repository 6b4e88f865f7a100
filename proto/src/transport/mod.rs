//! Async transports (feature `tokio`): connect to or listen on an [`Addr`], or make an
//! in-process pipe. Every connection is a [`Stream`]: bytes in, bytes out; framing is
//! the caller's (see [`crate::frame`]).

mod connected;
mod fc_vsock;
mod listener;
mod peer;

use std::io;
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::addr::Addr;

pub use connected::Connected;
use connected::Registered;
pub use fc_vsock::{fc_vsock_accept_handshake, fc_vsock_client_handshake, HANDSHAKE_TIMEOUT};
pub use listener::Listener;
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
    Ok(connect_registered(addr, timeout).await?.into_box())
}

/// Connects to `addr` as [`connect`] does, untied from this runtime: for a process
/// that connects on behalf of another which cannot reach the address, and hands the
/// socket over ([`Connected::into_fd`], then [`Connected::from_fd`] over there). A
/// hybrid vsock's handshake is done here: the socket carries 9P from its first byte.
pub async fn connect_fd(addr: &Addr, timeout: Duration) -> io::Result<Connected> {
    connect_registered(addr, timeout).await?.detach()
}

async fn connect_registered(addr: &Addr, timeout: Duration) -> io::Result<Registered> {
    let attempt = async {
        Ok(match addr {
            Addr::Tcp { host, port } => {
                let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                stream.set_nodelay(true)?;
                Registered::Tcp(stream)
            }
            Addr::Unix(path) => Registered::Unix(tokio::net::UnixStream::connect(path).await?),
            Addr::Vsock { cid, port } => Registered::Vsock(
                tokio_vsock::VsockStream::connect(tokio_vsock::VsockAddr::new(*cid, *port)).await?,
            ),
            Addr::FcVsock { uds, port } => {
                let mut stream = tokio::net::UnixStream::connect(uds).await?;
                fc_vsock_client_handshake(&mut stream, *port).await?;
                Registered::Unix(stream)
            }
        })
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

    /// Echoes one line on every connection `listener` accepts.
    async fn echo_once(listener: Listener) {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 5];
        stream.read_exact(&mut buf).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut stream, &buf)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_socket_connected_for_another_works_as_a_stream_once_handed_over() {
        let dir = tempfile::tempdir().unwrap();
        let unix: Addr = format!("unix:{}", dir.path().join("s").display())
            .parse()
            .unwrap();
        let tcp: Addr = "tcp:127.0.0.1:0".parse().unwrap();
        for addr in [unix, tcp] {
            let listener = Listener::bind(&addr).await.unwrap();
            let bound = listener.local_addr().clone();
            let server = tokio::spawn(echo_once(listener));
            let fd = connect_fd(&bound, Duration::from_secs(5))
                .await
                .unwrap()
                .into_fd();
            let mut stream = Connected::from_fd(fd).unwrap().into_stream().unwrap();
            tokio::io::AsyncWriteExt::write_all(&mut stream, b"hello")
                .await
                .unwrap();
            let mut back = [0u8; 5];
            stream.read_exact(&mut back).await.unwrap();
            assert_eq!(&back, b"hello", "{bound}");
            server.await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_descriptor_that_is_no_stream_socket_is_refused_with_a_reason() {
        let file = tempfile::tempfile().unwrap();
        let err = Connected::from_fd(file.into()).err().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(
            err.to_string().contains("not a Unix, TCP or vsock"),
            "{err}"
        );
    }
}
