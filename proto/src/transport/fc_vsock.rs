//! The Firecracker / Cloud Hypervisor hybrid-vsock handshake.
//!
//! A host-side process reaches a guest's vsock port by connecting to the VMM's Unix
//! socket and writing `CONNECT <port>\n`; the VMM answers `OK <host_port>\n` and from
//! then on the socket carries the guest connection's bytes. Lines are read one byte at
//! a time so that no byte of the following 9P stream is consumed, and are bounded.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How long either side waits for the other's handshake line.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest handshake line accepted (`CONNECT 4294967295\n` is 19 bytes).
const MAX_LINE: usize = 64;

async fn read_line<S: AsyncRead + Unpin>(stream: &mut S) -> io::Result<String> {
    let mut line = Vec::with_capacity(32);
    loop {
        let byte = stream.read_u8().await?;
        if byte == b'\n' {
            break;
        }
        if line.len() == MAX_LINE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "hybrid vsock: handshake line too long",
            ));
        }
        line.push(byte);
    }
    String::from_utf8(line).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "hybrid vsock: handshake is not text",
        )
    })
}

/// Client side: ask the VMM for `port` and wait for `OK <n>`.
pub async fn fc_vsock_client_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    port: u32,
) -> io::Result<()> {
    let exchange = async {
        stream
            .write_all(format!("CONNECT {port}\n").as_bytes())
            .await?;
        stream.flush().await?;
        let line = read_line(stream).await?;
        match line.strip_prefix("OK ").map(|n| n.trim().parse::<u32>()) {
            Some(Ok(_)) => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("hybrid vsock: VMM refused CONNECT {port}: {line:?}"),
            )),
        }
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, exchange)
        .await
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "hybrid vsock: no answer to CONNECT",
            )
        })?
}

/// VMM side (used by tests and by a host-side multiplexer): read `CONNECT <port>`,
/// return the port. The caller answers with `OK <n>\n` once it has a peer.
pub async fn fc_vsock_accept_handshake<S: AsyncRead + Unpin>(stream: &mut S) -> io::Result<u32> {
    let line = tokio::time::timeout(HANDSHAKE_TIMEOUT, read_line(stream))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "hybrid vsock: no CONNECT line"))??;
    line.strip_prefix("CONNECT ")
        .and_then(|p| p.trim().parse().ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("hybrid vsock: bad request {line:?}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn handshake_succeeds_and_leaves_stream_bytes_alone() {
        let (mut client, mut vmm) = tokio::io::duplex(256);
        let vmm_side = tokio::spawn(async move {
            let port = fc_vsock_accept_handshake(&mut vmm).await.unwrap();
            vmm.write_all(b"OK 1073741824\nPAYLOAD").await.unwrap();
            port
        });
        fc_vsock_client_handshake(&mut client, 564).await.unwrap();
        assert_eq!(vmm_side.await.unwrap(), 564);
        let mut rest = [0u8; 7];
        client.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"PAYLOAD");
    }

    #[tokio::test]
    async fn refusal_and_garbage_are_errors() {
        let (mut client, mut vmm) = tokio::io::duplex(256);
        tokio::spawn(async move {
            let _ = fc_vsock_accept_handshake(&mut vmm).await;
            vmm.write_all(b"ERR no listener\n").await.unwrap();
        });
        let err = fc_vsock_client_handshake(&mut client, 5).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);

        let (mut client, mut vmm) = tokio::io::duplex(256);
        tokio::spawn(async move {
            let _ = fc_vsock_accept_handshake(&mut vmm).await;
            vmm.write_all(&[b'x'; 100]).await.unwrap();
        });
        let err = fc_vsock_client_handshake(&mut client, 5).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);

        let (mut vmm_client, mut vmm) = tokio::io::duplex(256);
        vmm_client.write_all(b"HELLO 5\n").await.unwrap();
        assert!(fc_vsock_accept_handshake(&mut vmm).await.is_err());
    }
}
