//! Listening on any transport.

use std::io;
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, UnixListener};

use super::connected::{Connected, Registered};
use super::{BoxStream, Peer, PeerId};
use crate::addr::Addr;

/// A bound listener on one [`Addr`].
///
/// For `fc-vsock:UDS:PORT` the listener is the Unix socket `UDS_PORT`, where
/// Firecracker and Cloud Hypervisor deliver guest connections to host port `PORT`.
/// Unix socket files this listener created are removed when it is dropped.
#[derive(Debug)]
pub struct Listener {
    inner: Inner,
    addr: Addr,
}

#[derive(Debug)]
enum Inner {
    Tcp(TcpListener),
    Unix(UnixListener, SocketFile),
    Vsock(tokio_vsock::VsockListener),
}

/// Removes a Unix socket file when dropped.
#[derive(Debug)]
struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn bind_unix(path: &Path) -> io::Result<(UnixListener, SocketFile)> {
    match UnixListener::bind(path) {
        Ok(listener) => Ok((listener, SocketFile(path.to_owned()))),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            // A socket file left by a process that died: reuse it only if nobody answers.
            use std::os::unix::fs::FileTypeExt;
            let is_socket = std::fs::symlink_metadata(path)?.file_type().is_socket();
            if is_socket && std::os::unix::net::UnixStream::connect(path).is_err() {
                std::fs::remove_file(path)?;
                let listener = UnixListener::bind(path)?;
                Ok((listener, SocketFile(path.to_owned())))
            } else {
                Err(io::Error::new(
                    e.kind(),
                    format!("{}: address in use", path.display()),
                ))
            }
        }
        Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    }
}

impl Listener {
    /// Binds `addr`. A TCP port of 0 picks a free port; [`Listener::local_addr`] tells it.
    pub async fn bind(addr: &Addr) -> io::Result<Listener> {
        let inner = match addr {
            Addr::Tcp { host, port } => {
                Inner::Tcp(TcpListener::bind((host.as_str(), *port)).await?)
            }
            Addr::Unix(path) => {
                let (l, f) = bind_unix(path)?;
                Inner::Unix(l, f)
            }
            Addr::FcVsock { uds, port } => {
                let (l, f) = bind_unix(&Addr::fc_vsock_listen_path(uds, *port))?;
                Inner::Unix(l, f)
            }
            Addr::Vsock { cid, port } => Inner::Vsock(tokio_vsock::VsockListener::bind(
                tokio_vsock::VsockAddr::new(*cid, *port),
            )?),
        };
        let addr = match &inner {
            Inner::Tcp(l) => {
                let local = l.local_addr()?;
                Addr::Tcp {
                    host: local.ip().to_string(),
                    port: local.port(),
                }
            }
            _ => addr.clone(),
        };
        Ok(Listener { inner, addr })
    }

    /// The address actually bound (with the real port for `tcp:HOST:0`).
    pub fn local_addr(&self) -> &Addr {
        &self.addr
    }

    /// Waits for the next connection; returns it and a printable peer name.
    pub async fn accept(&self) -> io::Result<(BoxStream, String)> {
        let (stream, peer) = self.accept_peer().await?;
        Ok((stream, peer.name))
    }

    /// Waits for the next connection; returns it and who is at the other end.
    pub async fn accept_peer(&self) -> io::Result<(BoxStream, Peer)> {
        let (stream, peer) = self.accept_registered().await?;
        Ok((stream.into_box(), peer))
    }

    /// Waits for the next connection, like [`Listener::accept_peer`], and returns it
    /// untied from this runtime, to be served on another ([`Connected::into_stream`]).
    pub async fn accept_detached(&self) -> io::Result<(Connected, Peer)> {
        let (stream, peer) = self.accept_registered().await?;
        Ok((stream.detach()?, peer))
    }

    async fn accept_registered(&self) -> io::Result<(Registered, Peer)> {
        let listener = Some(self.addr.clone());
        match &self.inner {
            Inner::Tcp(l) => {
                let (stream, peer) = l.accept().await?;
                stream.set_nodelay(true)?;
                let id = PeerId::Ip(peer.ip().to_canonical());
                let name = peer.to_string();
                Ok((Registered::Tcp(stream), Peer { name, listener, id }))
            }
            Inner::Unix(l, file) => {
                let (stream, _) = l.accept().await?;
                let (id, name) = match stream.peer_cred() {
                    Ok(cred) => (
                        PeerId::Unix {
                            uid: cred.uid(),
                            gid: cred.gid(),
                        },
                        format!("unix:{} uid {}", file.0.display(), cred.uid()),
                    ),
                    Err(_) => (PeerId::Unknown, format!("unix:{}", file.0.display())),
                };
                Ok((Registered::Unix(stream), Peer { name, listener, id }))
            }
            Inner::Vsock(l) => {
                let (stream, peer) = l.accept().await?;
                let name = format!("vsock:{}:{}", peer.cid(), peer.port());
                let id = PeerId::Vsock { cid: peer.cid() };
                Ok((Registered::Vsock(stream), Peer { name, listener, id }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::connect;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn echo_once(listener: Listener) {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await.unwrap();
        s.write_all(&buf).await.unwrap();
    }

    async fn ping(addr: &Addr) {
        let mut s = connect(addr, Duration::from_secs(5)).await.unwrap();
        s.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
    }

    #[tokio::test]
    async fn tcp_loopback_with_port_zero() {
        let listener = Listener::bind(&"tcp:127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = listener.local_addr().clone();
        assert!(matches!(addr, Addr::Tcp { port, .. } if port != 0));
        let server = tokio::spawn(echo_once(listener));
        ping(&addr).await;
        server.await.unwrap();
    }

    #[tokio::test]
    async fn unix_socket_is_removed_on_drop_and_stale_file_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let addr = Addr::Unix(path.clone());
        // A stale socket file with no listener behind it.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let listener = Listener::bind(&addr).await.unwrap();
        // A second bind while the first listens must fail, not steal the socket.
        assert_eq!(
            Listener::bind(&addr).await.unwrap_err().kind(),
            io::ErrorKind::AddrInUse
        );
        // That bind probed the live socket with a connection; take it off the queue.
        drop(listener.accept().await.unwrap());
        let server = tokio::spawn(echo_once(listener));
        ping(&addr).await;
        server.await.unwrap();
        assert!(!path.exists(), "socket file removed with its listener");
    }

    /// Serves one echo on a thread and runtime of its own, as a server's tenant
    /// threads do: the connection is accepted here and registered there.
    fn echo_elsewhere(accepted: Connected) -> std::thread::JoinHandle<std::thread::ThreadId> {
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let mut s = accepted.into_stream().unwrap();
                let mut buf = [0u8; 4];
                s.read_exact(&mut buf).await.unwrap();
                s.write_all(&buf).await.unwrap();
                std::thread::current().id()
            })
        })
    }

    #[tokio::test]
    async fn a_detached_connection_is_served_by_the_runtime_it_is_handed_to() {
        let dir = tempfile::tempdir().unwrap();
        for addr in [
            "tcp:127.0.0.1:0".parse().unwrap(),
            Addr::Unix(dir.path().join("d.sock")),
        ] {
            let listener = Listener::bind(&addr).await.unwrap();
            let addr = listener.local_addr().clone();
            let client = tokio::spawn(async move { ping(&addr).await });
            let (accepted, peer) = listener.accept_detached().await.unwrap();
            assert!(peer.id != crate::transport::PeerId::Unknown, "{peer:?}");
            assert_eq!(peer.listener.as_ref(), Some(listener.local_addr()));
            let served_on = tokio::task::spawn_blocking(|| echo_elsewhere(accepted).join())
                .await
                .unwrap()
                .unwrap();
            assert_ne!(served_on, std::thread::current().id());
            client.await.unwrap();
        }
    }

    #[test]
    fn vsock_addresses_use_the_kernel_constants() {
        // No AF_VSOCK socket is ever connected in tests (the CIDs here lead to the
        // machine's hypervisor); the address side is checked against the ABI instead.
        assert_eq!(crate::addr::VMADDR_CID_ANY, tokio_vsock::VMADDR_CID_ANY);
        assert_eq!(crate::addr::VMADDR_CID_HOST, tokio_vsock::VMADDR_CID_HOST);
        let Addr::Vsock { cid, port } = "vsock:any:564".parse().unwrap() else {
            panic!()
        };
        let sockaddr = tokio_vsock::VsockAddr::new(cid, port);
        assert_eq!(
            (sockaddr.cid(), sockaddr.port()),
            (tokio_vsock::VMADDR_CID_ANY, 564)
        );
    }

    #[tokio::test]
    async fn connect_to_nothing_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let addr = Addr::Unix(dir.path().join("absent.sock"));
        let Err(err) = connect(&addr, Duration::from_secs(5)).await else {
            panic!("connected to nothing")
        };
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
    }
}
