//! A handler on a listener of its own (what `wasm9p http` runs): HTTP/1.1 and HTTP/2
//! cleartext (prior knowledge) on the same port, told apart by the connection's first
//! bytes (hyper-util's automatic builder), on TCP or a Unix socket, until told to
//! stop; then it accepts nothing more, lets every request in flight finish, and
//! returns.
//!
//! Connections are bounded and watched as the handler's [`super::HttpLimits`] say (see
//! `super::connections`): at most `max_connections` open (past it the listener waits),
//! a request's head within `header_timeout`, and a connection idle past
//! `idle_timeout` closed. A malformed request is hyper's to answer (400), and the
//! connection's to lose; the server goes on. A failed accept (out of file descriptors)
//! is said and retried a little later.
//!
//! [`serve_metrics`] serves [`HttpHandler::metrics_text`] on a listener of its own.

use std::convert::Infallible;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, OwnedSemaphorePermit};

use super::connections::{self, Connections, Verdict, Watch};
use super::own_wakes::OwnWakes;
use super::{text_body, HttpHandler, ResponseBody};

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
    let limits = handler.limits().clone();
    let bound = Connections::new(limits.max_connections);
    let (stopping, stopped) = watch::channel(false);
    let service = Arc::new(Served {
        handler,
        header_timeout: limits.header_timeout,
        idle_timeout: limits.idle_timeout,
        stopped,
    });
    tokio::pin!(stop);
    loop {
        // A place first: past the bound, nothing more is accepted until one closes.
        let place = tokio::select! {
            place = bound.place() => place,
            () = &mut stop => break,
        };
        let accepted = tokio::select! {
            accepted = accept(&listener) => accepted,
            () = &mut stop => break,
        };
        match accepted {
            Ok(Stream::Tcp(stream)) => {
                let _ = stream.set_nodelay(true);
                service.connection(stream, place);
            }
            Ok(Stream::Unix(stream)) => service.connection(stream, place),
            Err(e) => {
                tracing::warn!("accept: {e}; trying again shortly");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    let _ = stopping.send(true);
    bound.all_closed().await;
}

/// One connection, open in the metrics and holding its place under the bound for as
/// long as it is kept.
struct Counted {
    open: prometheus_client::metrics::gauge::Gauge,
    _place: OwnedSemaphorePermit,
}

impl Counted {
    fn new(
        open: &prometheus_client::metrics::gauge::Gauge,
        place: OwnedSemaphorePermit,
    ) -> Counted {
        open.inc();
        Counted {
            open: open.clone(),
            _place: place,
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.open.dec();
    }
}

/// What every connection of one server shares.
struct Served {
    handler: HttpHandler,
    header_timeout: Duration,
    idle_timeout: Duration,
    stopped: watch::Receiver<bool>,
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

impl Served {
    /// Serves one connection's requests on a task of its own, watched for its
    /// timeouts and the stop, holding `place` until it closes.
    fn connection<T>(self: &Arc<Served>, io: T, place: OwnedSemaphorePermit)
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let counted = Counted::new(&self.handler.metrics().connections, place);
        let watch = Watch::new();
        let io = TokioIo::new(connections::Watched::new(io, Arc::clone(&watch)));
        let handler = self.handler.clone();
        let requests = Arc::clone(&watch);
        let service = service_fn(move |request| {
            let busy = requests.request();
            let handler = handler.clone();
            async move {
                let response = handler.handle(request).await;
                Ok::<_, Infallible>(response.map(|body| connections::busy_body(body, busy)))
            }
        });
        let served = Arc::clone(self);
        // The guests run on this task and wake it as they go (`super::own_wakes`).
        tokio::spawn(OwnWakes::new(async move {
            let _counted = counted;
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder.http1().keep_alive(true).timer(TokioTimer::new());
            builder.http2().timer(TokioTimer::new());
            let conn = builder.serve_connection(io, service);
            tokio::pin!(conn);
            let tick = connections::watch_tick(served.header_timeout, served.idle_timeout);
            let mut stopped = served.stopped.clone();
            let mut shutting_down = false;
            loop {
                tokio::select! {
                    ended = conn.as_mut() => {
                        if let Err(e) = ended {
                            tracing::debug!("connection: {e}");
                        }
                        return;
                    }
                    _ = stopped.wait_for(|stop| *stop), if !shutting_down => {
                        conn.as_mut().graceful_shutdown();
                        shutting_down = true;
                    }
                    () = tokio::time::sleep(tick) => {
                        match watch.verdict(served.header_timeout, served.idle_timeout) {
                            // Dropping the connection closes it.
                            Verdict::HeadTooSlow => return,
                            Verdict::Idle if !shutting_down => {
                                conn.as_mut().graceful_shutdown();
                                shutting_down = true;
                            }
                            Verdict::Idle | Verdict::Fine => {}
                        }
                    }
                }
            }
        }));
    }
}

/// Serves `handler`'s metrics ([`HttpHandler::metrics_text`]) at `/metrics` on
/// `listener`, over HTTP/1.1, until `stop` resolves: what `wasm9p http
/// --metrics-listen` runs.
pub async fn serve_metrics(
    listener: Listener,
    handler: HttpHandler,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = accept(&listener) => accepted,
            () = &mut stop => return,
        };
        let handler = handler.clone();
        let service = service_fn(move |request: Request<hyper::body::Incoming>| {
            let handler = handler.clone();
            async move { Ok::<_, Infallible>(metrics_response(&handler, &request)) }
        });
        let serve = |io| async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        };
        match accepted {
            Ok(Stream::Tcp(stream)) => {
                tokio::spawn(serve(TokioIo::new(Box::new(stream) as Box<dyn Io>)));
            }
            Ok(Stream::Unix(stream)) => {
                tokio::spawn(serve(TokioIo::new(Box::new(stream) as Box<dyn Io>)));
            }
            Err(e) => {
                tracing::warn!("metrics: accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

fn metrics_response<B>(handler: &HttpHandler, request: &Request<B>) -> Response<ResponseBody> {
    let (status, body, kind) = match (request.method(), request.uri().path()) {
        (&hyper::Method::GET, "/metrics") => (
            StatusCode::OK,
            handler.metrics_text(),
            super::metrics::CONTENT_TYPE,
        ),
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            "GET /metrics\n".into(),
            "text/plain; charset=utf-8",
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "the metrics are at /metrics\n".into(),
            "text/plain; charset=utf-8",
        ),
    };
    let mut response = Response::new(text_body(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(kind),
    );
    response
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
