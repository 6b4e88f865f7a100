//! # wasm9p-guest-fs: the filesystem every guest sees
//!
//! Role: the 9P2000.L client session ([`client`]), the Linux-v9fs-style caches
//! (negative dentries with a TTL, symlink targets, attributes, pages) and the mount
//! table with path resolution inside the guest namespace, over three backends: `ninep`
//! (the client), `bind` (a host directory through cap-std) and `memory` (a tmpfs).
//!
//! What it is not: a WASI implementation (that is `wasm9p-host`) or a server (that is
//! `wasm9p-server`).
//!
//! Built: the client ([`client`]); per-mount options ([`mount_options`]); the mount
//! cache ([`cache`]: dentries, negative dentries with `negtimeout`, symlink targets,
//! attributes, directory listings and file pages, all under one `cache_size` byte
//! bound, and the late-answer rule: an answer asked for before a change through the
//! mount is never stored over it, `cache::changes`); the store on disk for `cache=fscache` ([`fscache`]: what later processes
//! start warm with, confirmed with the server before use); the write-back coalescer
//! ([`writeback`]); the [`backend::Backend`] trait with
//! the `ninep`, `bind` and `memory` backends; and the [`namespace::Namespace`] with
//! POSIX path resolution.
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
