//! # wasm9p-server: a 9P2000.L server for host directories and node file systems
//!
//! What it is: a server that exports one or more host directories over any transport
//! of [`wasm9p_proto::transport`] (tcp, unix, vsock, fc-vsock, or an in-process duplex
//! for the embedded default). Each connection is a tokio task. Metadata requests (walk,
//! getattr, create, ...) are a syscall or two and run on the connection's reader task,
//! their replies batched into one write; data transfers, fsync and readdir run as tasks
//! of their own so a slow one does not hold up the rest. Requests in flight and fids are
//! bounded per connection.
//!
//! Many clients: access rules ([`access`]) bind exports to peers and make peers tenants,
//! whose connections share bounds (`tenants`) and run on an I/O thread of the tenant's
//! own (`io_thread`), and whose data requests run on data threads, tenants in turn
//! (`scheduler`); byte-rate caps hold an export's reads and writes to a rate (`rates`,
//! [`RateCap`]).
//!
//! One shell serves every connection (`shell`): frames read, Tversion first, bad
//! frames answered, requests in flight bounded ([`MAX_INFLIGHT_PER_CONNECTION`]),
//! Tflush, replies batched. Behind it, two kinds of export say what a request does: a
//! host directory (`directory`, with `ops/` and the rest above), and a
//! [`nodes::NodeFs`] ([`nodes`]), a file system of numbered nodes (a plugin
//! component's, a build action's input root) served by [`nodes::serve`], with the same
//! fid bound ([`MAX_FIDS_PER_CONNECTION`]) and protocol constants; a node export's
//! connections have no access rules, tenants or rates (a node export is the
//! embedder's, reached through a socket it chose).
//!
//! What it is not: an authenticating server (Tauth is refused with ENOENT, which both
//! the Linux client and diod's tools take as "no auth needed"), nor a server that
//! changes identity per user: files are created with the server's own credentials (in
//! the mapped-xattr [`security`] model, the owner the client asks for is kept in the
//! file's attributes instead).
//!
//! ## Confinement
//! The export root is opened once as a cap-std [`cap_std::fs::Dir`]. Every fid holds
//! a handle on the directory that contains it plus one name; every host operation is
//! an `*at()` call relative to such a handle with a single, validated name (no `/`, no
//! NUL, not `..`), with `O_NOFOLLOW` / `AT_SYMLINK_NOFOLLOW` wherever Linux offers it.
//! Directory handles are only ever obtained through cap-std (`open_dir_nofollow`, or
//! cap-std's confined resolution from the root for `..`), so a client can never reach
//! outside the export: `..` at the root stays at the root, walk never follows a symlink
//! (walking *through* one fails with ENOTDIR), lopen of a symlink fails with ELOOP, and
//! names containing `/` are EINVAL. Device nodes cannot be created (EPERM) unless the
//! export allows them, and are never opened; the [`security`] model says how owners,
//! modes and special files are kept (for real, or mapped into extended attributes so
//! that an unprivileged server serves a guest that is root).
//!
//! ```no_run
//! # async fn example() -> std::io::Result<()> {
//! use wasm9p_proto::transport::Listener;
//! use wasm9p_server::{ExportConfig, Server, ServerConfig};
//!
//! let server = Server::new(ServerConfig {
//!     exports: vec![ExportConfig::new("/srv/sysroot")],
//!     ..ServerConfig::default()
//! })?;
//! let listener = Listener::bind(&"tcp:127.0.0.1:5640".parse().unwrap()).await?;
//! server.serve(listener, std::future::pending()).await;
//! # Ok(()) }
//! ```

pub mod access;
mod connection;
mod directory;
mod errors;
mod export;
mod fid;
mod io_thread;
pub mod nodes;
mod ops;
mod rates;
mod scheduler;
pub mod security;
mod shared;
mod shell;
mod stat;
mod tenants;

use std::future::Future;
use std::io;
use std::sync::Arc;

use wasm9p_proto::consts::{DEFAULT_MSIZE, MAX_MSIZE, MIN_MSIZE};
use wasm9p_proto::transport::{BoxStream, Connected, Listener, Peer};

pub use access::{AccessRule, PeerMatch};
pub use export::{Export, ExportConfig, ExportConfigError};
pub use rates::RateCap;
pub use security::SecurityModel;
use shared::Shared;
pub use shared::{MAX_FIDS_PER_CONNECTION, MAX_INFLIGHT_PER_CONNECTION};
pub use tenants::PeerLimits;

/// What to serve and how.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The exported directories; a client picks one by `aname`.
    pub exports: Vec<ExportConfig>,
    /// Largest msize granted (clamped to [`MIN_MSIZE`]..=[`MAX_MSIZE`]).
    pub msize: u32,
    /// Who may attach what (see [`access`]); none: every peer, every export.
    pub access: Vec<AccessRule>,
    /// Bounds per peer identity, in force with access rules (see `tenants`).
    pub peer_limits: PeerLimits,
    /// Byte-rate caps per export (see `rates`); none: no cap.
    pub rates: Vec<RateCap>,
    /// With access rules, most tenants served on I/O threads of their own at once
    /// (see `io_thread`); the others' connections share the async workers.
    pub max_tenant_threads: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            exports: Vec::new(),
            msize: DEFAULT_MSIZE,
            access: Vec::new(),
            peer_limits: PeerLimits::default(),
            rates: Vec::new(),
            max_tenant_threads: DEFAULT_MAX_TENANT_THREADS,
        }
    }
}

/// The default of [`ServerConfig::max_tenant_threads`].
pub const DEFAULT_MAX_TENANT_THREADS: usize = 1024;

/// A 9P2000.L server; cheap to clone, shareable across listeners.
#[derive(Clone, Debug)]
pub struct Server {
    shared: Arc<Shared>,
}

impl Server {
    /// Opens every export (failing if one is missing or not a directory).
    pub fn new(config: ServerConfig) -> io::Result<Server> {
        if config.exports.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no directory to export",
            ));
        }
        let exports = config
            .exports
            .iter()
            .map(|c| Export::open(c).map(Arc::new))
            .collect::<io::Result<Vec<_>>>()?;
        let access = resolve_rules(&exports, &config.access)?;
        let mut buckets = match config.rates.is_empty() {
            true => Vec::new(),
            false => vec![None; exports.len()],
        };
        for cap in &config.rates {
            let i = export_named(&exports, &cap.export, "--rate")?;
            buckets[i] = Some(Arc::new(rates::Bucket::new(cap.bytes_per_second)));
        }
        raise_fd_limit();
        let msize = config.msize.clamp(MIN_MSIZE, MAX_MSIZE);
        Ok(Server {
            shared: Arc::new(Shared {
                exports,
                msize,
                access: std::sync::RwLock::new(Arc::new(access)),
                rules_generation: Default::default(),
                tenants: tenants::Tenants::new(config.peer_limits, config.max_tenant_threads),
                refused: Default::default(),
                rates: buckets,
            }),
        })
    }

    /// The msize this server grants at most.
    pub fn msize(&self) -> u32 {
        self.shared.msize
    }

    /// The exports, in the order configured.
    pub fn exports(&self) -> &[Arc<Export>] {
        &self.shared.exports
    }

    /// Fids alive now over every connection and export: what clients hold, plus
    /// those of requests still being answered. A client that clunks what it walks
    /// brings this back to its baseline; a closed connection releases all of its own.
    pub fn live_fids(&self) -> usize {
        self.shared
            .exports
            .iter()
            .map(|e| e.live_fids.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    /// Serves one connection until the peer closes it or it breaks; `peer` names it in
    /// logs, and it is known by nothing else (an in-process pipe: with access rules it
    /// may attach nothing).
    pub async fn serve_connection(&self, stream: BoxStream, peer: String) {
        self.serve_peer(stream, Peer::local(peer)).await
    }

    /// Serves one connection from `peer` until it closes or breaks, on the runtime
    /// this is awaited on (the stream is already tied to it): unlike the connections
    /// [`Server::serve`] accepts, a tenant's connection served this way does not run
    /// on the tenant's I/O thread.
    pub async fn serve_peer(&self, stream: BoxStream, peer: Peer) {
        match self.shared.join(&peer) {
            Ok(member) => directory::run(self.shared.clone(), stream, peer, member).await,
            Err(refused) => tracing::warn!("{}: {refused}; closing the connection", peer.name),
        }
    }

    /// Starts serving a connection `serve` accepted: a tenant's on its I/O thread
    /// (`io_thread`), any other as a task on the async workers.
    fn start_session(&self, accepted: Connected, peer: Peer) {
        let member = match self.shared.join(&peer) {
            Ok(member) => member,
            Err(refused) => {
                return tracing::warn!("{}: {refused}; closing the connection", peer.name);
            }
        };
        let tenant = member.as_ref().map(|m| m.0.clone());
        let shared = self.shared.clone();
        let name = peer.name.clone();
        let session = async move {
            match accepted.into_stream() {
                Ok(stream) => directory::run(shared, stream, peer, member).await,
                Err(e) => tracing::warn!("{}: {e}; closing the connection", peer.name),
            }
        };
        match tenant.as_deref().map(tenants::Tenant::io_thread) {
            Some(Ok(Some(thread))) => thread.spawn(session),
            // Dropping the session closes the connection.
            Some(Err(e)) => {
                tracing::warn!("{name}: no I/O thread for its tenant ({e}); closing the connection")
            }
            // No tenant, or no thread free for it.
            None | Some(Ok(None)) => drop(tokio::spawn(session)),
        }
    }

    /// Whether access rules were given (else every peer may attach every export).
    pub fn has_access_rules(&self) -> bool {
        let access = self.shared.access.read().unwrap_or_else(|e| e.into_inner());
        access.is_some()
    }

    /// Replaces the access rules (none: every peer may attach every export), keeping
    /// every connection. A connection's fids on an export it may no longer use are
    /// released before its next request, and each such fid then answers EACCES (once:
    /// the number is free again after that). Rules that name no export change nothing
    /// and are an error.
    pub fn set_rules(&self, rules: &[AccessRule]) -> io::Result<()> {
        let access = resolve_rules(&self.shared.exports, rules)?;
        *self
            .shared
            .access
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(access);
        // Logged refusals may now be allowed, or refused anew: say them again.
        self.shared
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.shared
            .rules_generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }

    /// Accepts connections on `listener` until `shutdown` completes; each connection is
    /// served on its own task: a tenant's on the tenant's I/O thread (where access rules
    /// make peers tenants, see `io_thread`), any other on the async workers of the
    /// runtime this is awaited on. Accept errors are logged and do not stop the server.
    pub async fn serve(&self, listener: Listener, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept_detached() => match accepted {
                    Ok((accepted, peer)) => self.start_session(accepted, peer),
                    Err(e) => {
                        tracing::warn!("accept on {}: {e}", listener.local_addr());
                        // Out of fds or similar: back off instead of spinning.
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                },
            }
        }
    }
}

/// The rules by export, in the order of `exports` (`None` without rules). A rule naming
/// no export is an error, so that a typo cannot leave an export unreachable unnoticed.
/// The index of the export `name` names (by name or path), for the option `option`.
fn export_named(exports: &[Arc<Export>], name: &str, option: &str) -> io::Result<usize> {
    exports.iter().position(|e| e.matches(name)).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{option} {name}=...: no such export"),
        )
    })
}

fn resolve_rules(
    exports: &[Arc<Export>],
    rules: &[AccessRule],
) -> io::Result<Option<Vec<Vec<PeerMatch>>>> {
    if rules.is_empty() {
        return Ok(None);
    }
    let mut access = vec![Vec::new(); exports.len()];
    for rule in rules {
        let i = export_named(exports, &rule.export, "--allow")?;
        access[i].extend(rule.peers.iter().cloned());
    }
    Ok(Some(access))
}

/// Fids pin directory handles; let the process use as many descriptors as it may.
fn raise_fd_limit() {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    if let Some(max) = limit.maximum {
        if limit.current.is_some_and(|cur| cur < max) {
            let raised = rustix::process::Rlimit {
                current: Some(max),
                maximum: Some(max),
            };
            let _ = rustix::process::setrlimit(rustix::process::Resource::Nofile, raised);
        }
    }
}
