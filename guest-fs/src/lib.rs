//! # wasm9p-guest-fs: the filesystem every guest sees
//!
//! Role: the 9P2000.L client session ([`client`]), the Linux-v9fs-style caches
//! (negative dentries with a TTL, symlink targets, attributes, listings, pages) and
//! the mount table with path resolution inside the guest namespace ([`namespace`]),
//! over the [`backend::Backend`] trait and its backends: `ninep` (a 9P mount through
//! the client and the caches), `bind` (a host directory through cap-std, the
//! baseline) and `memory` (an in-memory double for the unit tests; no mount type
//! makes one).
//!
//! What it is not: a WASI implementation (that is `wasm9p-host`) or a server (that is
//! `wasm9p-server`).
//!
//! The layers, lowest first, each using only those below it:
//! - [`path`] (guest paths) and [`node`] (the values every layer passes: [`node::Kind`],
//!   [`node::Attr`], [`node::Entry`], [`node::Node`]);
//! - [`mount_options`]: a mount's options ([`mount_options::OPTION_KEYS`]), parsed and
//!   checked into a [`mount_options::NinepOptions`] (the cache makes its one
//!   [`cache::Policy`] of them: `Policy::of`);
//! - [`client`]: sessions, fids, flights (pipelined requests), reconnecting;
//! - [`cache`]: the mount cache, every kind of entry under one `cache_size` byte bound,
//!   with the late-answer rule (an answer asked for before a change through the mount
//!   is never stored over it, `cache::changes`), and inside it [`fscache`], the store
//!   on disk for `cache=fscache` (what later processes start warm with, confirmed with
//!   the server before use);
//! - [`writeback`]: the buffer an open file's small writes gather in (used by the 9p
//!   backend's open files);
//! - [`backend`]: the trait and the backends; the 9p one is a module of its own
//!   (`backend::ninep`), one file per concern;
//! - [`namespace`]: mounts and POSIX path resolution.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use wasm9p_guest_fs::backend::ninep::NinepFs;
//! use wasm9p_guest_fs::client::{ClientConfig, Session};
//! use wasm9p_guest_fs::mount_options::NinepOptions;
//! use wasm9p_guest_fs::namespace::Namespace;
//!
//! let options = NinepOptions::parse([("cache", Some("loose"))])?;
//! let session = Session::connect(&"tcp:127.0.0.1:5640".parse()?, ClientConfig::default()).await?;
//! let mut ns = Namespace::new();
//! ns.mount("/usr", Arc::new(NinepFs::attach(&session, "", &options).await?), true)?;
//! // The second probe of a missing header is answered by the negative dentry.
//! assert!(ns.resolve("/usr/include/missing.h", true).await.is_err());
//! assert!(ns.resolve("/usr/include/missing.h", true).await.is_err());
//! # Ok(()) }
//! ```

pub mod backend;
pub mod cache;
pub mod client;
pub mod mount_options;
pub mod namespace;
pub mod node;
pub mod path;
pub mod writeback;

pub use cache::fscache;
