//! How a session is configured and reaches its server, why it could not be set up,
//! and what it counts: the values callers hand a session or read back from it.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use wasm9p_proto::consts::DEFAULT_MSIZE;
use wasm9p_proto::transport::{connect, BoxStream};
use wasm9p_proto::{Addr, BoxFuture, Message};

/// How a session behaves.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The msize to ask for (the server may grant less, never less than 4096).
    pub msize: u32,
    /// User name sent in Tattach.
    pub uname: String,
    /// Numeric uid sent in Tattach (`n_uname`).
    pub n_uname: u32,
    /// How long one request may wait for its reply before it fails with ETIMEDOUT
    /// (and is flushed). Also bounds connecting and the version handshake.
    pub timeout: Duration,
    /// Most requests outstanding at once on the session.
    pub max_inflight: usize,
    /// Most Tread/Twrite in flight for one large read or write.
    pub io_depth: usize,
    /// When the connection drops, connect again and restore every fid (sessions made
    /// by [`Session::connect`](super::Session::connect) only), trying for at most `timeout`: see the module
    /// `reconnect` in the source for what is retried and what fails.
    pub reconnect: bool,
    /// How [`Session::connect`](super::Session::connect) and a reconnect reach the server's address (default:
    /// the address's own transport).
    pub dialer: Dialer,
}

/// Connects to a server's address on a caller's behalf: see [`Dialer`].
pub trait Dial: Send + Sync {
    /// A connected stream to `addr` (the session bounds the wait by its timeout).
    fn dial<'a>(&'a self, addr: &'a Addr) -> BoxFuture<'a, io::Result<BoxStream>>;
}

/// How a session reaches its server: [`wasm9p_proto::transport::connect`], or a
/// caller's [`Dial`] where this process cannot reach the address itself (a container
/// whose mount namespace hides the server's socket asks a process outside it to
/// connect, and gets the socket handed over). A reconnect dials the same way.
#[derive(Clone, Default)]
pub struct Dialer(Option<Arc<dyn Dial>>);

impl Dialer {
    /// Dials through `dial`.
    pub fn new(dial: Arc<dyn Dial>) -> Dialer {
        Dialer(Some(dial))
    }

    /// A stream to `addr`, or an error once `timeout` has passed.
    pub(crate) async fn connect(&self, addr: &Addr, timeout: Duration) -> io::Result<BoxStream> {
        let Some(dial) = &self.0 else {
            return connect(addr, timeout).await;
        };
        match tokio::time::timeout(timeout, dial.dial(addr)).await {
            Ok(dialed) => dialed,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no connection within {timeout:?}"),
            )),
        }
    }
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Some(_) => "Dialer(caller's)",
            None => "Dialer(transport)",
        })
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            msize: DEFAULT_MSIZE,
            uname: std::env::var("USER").unwrap_or_else(|_| "root".into()),
            n_uname: rustix::process::getuid().as_raw(),
            timeout: Duration::from_secs(30),
            max_inflight: 64,
            io_depth: 4,
            reconnect: false,
            dialer: Dialer::default(),
        }
    }
}

/// Why a session could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The transport did not connect.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Where.
        addr: String,
        /// Why.
        source: io::Error,
    },
    /// The server does not speak 9P2000.L.
    #[error("server speaks {0:?}, not 9P2000.L")]
    UnknownVersion(String),
    /// The server granted an msize below the protocol minimum.
    #[error("server granted msize {0}, below the minimum of 4096")]
    MsizeTooSmall(u32),
    /// The server granted more than was asked: a broken or hostile server.
    #[error("server granted msize {granted}, more than the {asked} asked for")]
    MsizeTooLarge {
        /// What the server answered.
        granted: u32,
        /// What we asked.
        asked: u32,
    },
    /// The version exchange failed (closed, timed out, or garbage).
    #[error("version handshake failed: {0}")]
    Handshake(String),
}

impl ConnectError {
    /// Whether trying again later may help (the server may come up or be reachable);
    /// a server that speaks the wrong protocol will not change by retrying.
    pub fn should_retry(&self) -> bool {
        matches!(
            self,
            ConnectError::Connect { .. } | ConnectError::Handshake(_)
        )
    }
}

/// Requests sent, by message type.
#[derive(Debug)]
pub struct RpcCounts([AtomicU64; 128]);

impl RpcCounts {
    pub(super) fn new() -> RpcCounts {
        RpcCounts(std::array::from_fn(|_| AtomicU64::new(0)))
    }

    pub(super) fn bump(&self, ty: u8) {
        self.0[usize::from(ty / 2) % 128].fetch_add(1, Ordering::Relaxed);
    }

    /// `(name, count)` for every request type sent at least once, e.g. `("walk", 12)`.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        (0..128u8)
            .filter_map(|i| {
                let n = self.0[usize::from(i)].load(Ordering::Relaxed);
                let name = Message::type_name(i * 2)?;
                (n > 0).then(|| (&name[1..], n))
            })
            .collect()
    }

    /// All requests sent.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

/// What reconnecting did so far ([`Session::reconnects`](super::Session::reconnects)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReconnectStats {
    /// Connections restored after a loss.
    pub reconnects: u64,
    /// Requests sent again on a restored connection.
    pub retried: u64,
    /// Requests failed with EIO because the connection dropped under them and sending
    /// them again would not be safe (writes, creates, renames...).
    pub failed: u64,
    /// Fids that could not be restored (ESTALE from then on).
    pub stale_fids: u64,
}
