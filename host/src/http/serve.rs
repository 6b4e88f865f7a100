//! A handler on a listener of its own (what `wasm9p http` runs): HTTP/1.1 over hyper,
//! on TCP or a Unix socket, until told to stop; then it accepts nothing more, lets
//! every request in flight finish, and returns.
//!
//! A malformed request is hyper's to answer (400), and the connection's to lose; the
//! server goes on. A failed accept (out of file descriptors) is said and retried a
//! little later.

use std::convert::Infallible;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite};

use super::HttpHandler;

/// Where to listen: `tcp:HOST:PORT` or `unix:PATH`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address, `HOST:PORT` (`[::1]:8080` for IPv6; port 0: any free port).
    Tcp(String),
    /// A Unix socket's path.
    Unix(PathBuf),
}

impl FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Listen, String> {
        if let Some(addr) = s.strip_prefix("tcp:") {
            let port = addr
                .rsplit_once(':')
                .map(|(host, port)| (host, port.parse::<u16>()));
            return match port {
                Some((host, Ok(_))) if !host.is_empty() => Ok(Listen::Tcp(addr.to_owned())),
                _ => Err(format!("{s:?}: expected tcp:HOST:PORT")),
            };
        }
        match s.strip_prefix("unix:") {
            Some(path) if !path.is_empty() => Ok(Listen::Unix(path.into())),
            _ => Err(format!("{s:?}: expected tcp:HOST:PORT or unix:PATH")),
        }
    }
}

/// A bound listener.
pub enum Listener {
    /// TCP.
    Tcp(tokio::net::TcpListener),
    /// A Unix socket.
    Unix(tokio::net::UnixListener),
}

impl Listen {
    /// Binds it (a Unix socket's stale file, left by a server that died, is replaced).
    pub async fn bind(&self) -> std::io::Result<Listener> {
        match self {
            Listen::Tcp(addr) => Ok(Listener::Tcp(
                tokio::net::TcpListener::bind(addr.as_str()).await?,
            )),
            Listen::Unix(path) => {
                if std::os::unix::net::UnixStream::connect(path).is_err() {
                    let _ = std::fs::remove_file(path);
                }
                Ok(Listener::Unix(tokio::net::UnixListener::bind(path)?))
            }
        }
    }
}

impl Listener {
    /// Where it listens, as `tcp:ADDR` or `unix:PATH` (a port 0 made a real one).
    pub fn local_addr(&self) -> String {
        match self {
            Listener::Tcp(l) => match l.local_addr() {
                Ok(addr) => format!("tcp:{addr}"),
                Err(_) => "tcp:?".into(),
            },
            Listener::Unix(l) => match l
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(PathBuf::from))
            {
                Some(path) => format!("unix:{}", path.display()),
                None => "unix:?".into(),
            },
        }
    }
}

/// Serves `handler` on `listener` until `stop` resolves, then lets the requests in
/// flight finish (connections idle between requests are closed at once).
pub async fn serve(
    listener: Listener,
    handler: HttpHandler,
    stop: impl std::future::Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = accept(&listener) => accepted,
            () = &mut stop => break,
        };
        match accepted {
            Ok(Stream::Tcp(stream)) => {
                let _ = stream.set_nodelay(true);
                connection(stream, &handler, &graceful);
            }
            Ok(Stream::Unix(stream)) => connection(stream, &handler, &graceful),
            Err(e) => {
                tracing::warn!("accept: {e}; trying again shortly");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    graceful.shutdown().await;
}

enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

async fn accept(listener: &Listener) -> std::io::Result<Stream> {
    match listener {
        Listener::Tcp(l) => l.accept().await.map(|(s, _)| Stream::Tcp(s)),
        Listener::Unix(l) => l.accept().await.map(|(s, _)| Stream::Unix(s)),
    }
}

/// Serves one connection's requests on a task of its own, watched for the stop.
fn connection<T>(io: T, handler: &HttpHandler, graceful: &GracefulShutdown)
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let handler = handler.clone();
    let service = service_fn(move |request| {
        let handler = handler.clone();
        async move { Ok::<_, Infallible>(handler.handle(request).await) }
    });
    let conn = http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), service);
    let conn = graceful.watch(conn);
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("connection: {e}");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_parse_and_bad_ones_say_what_was_expected() {
        assert_eq!(
            "tcp:127.0.0.1:8080".parse(),
            Ok(Listen::Tcp("127.0.0.1:8080".into()))
        );
        assert_eq!("tcp:[::1]:0".parse(), Ok(Listen::Tcp("[::1]:0".into())));
        assert_eq!(
            "unix:/run/h.sock".parse(),
            Ok(Listen::Unix("/run/h.sock".into()))
        );
        for bad in [
            "127.0.0.1:8080",
            "tcp:",
            "tcp:host",
            "tcp::80",
            "tcp:h:port",
            "unix:",
            "vsock:1:2",
        ] {
            assert!(bad.parse::<Listen>().is_err(), "{bad}");
        }
    }
}
