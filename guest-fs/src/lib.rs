//! # wasm9p-guest-fs: the filesystem every guest sees
//!
//! Role: the 9P2000.L client session ([`client`]), and (with the guest-fs issue) the
//! Linux-v9fs-style caches (negative dentries with a TTL, symlink targets, attributes,
//! pages) and the mount table with path resolution inside the guest namespace, over
//! three backends: `ninep` (the client), `bind` (a host directory through cap-std) and
//! `memory` (a tmpfs).
//!
//! What it is not: a WASI implementation (that is `wasm9p-host`) or a server (that is
//! `wasm9p-server`).
//!
//! Built so far: the client ([`client`]); the per-mount options ([`mount_options`]);
//! the byte-bounded metadata cache store ([`cache`]); the write-back coalescer
//! ([`writeback`]); the backend trait with the `memory` backend ([`backend`]); and the
//! namespace with POSIX path resolution ([`namespace`]). Not built yet: the `ninep`
//! backend that puts the caches in front of the client, the `bind` backend, the page
//! cache with readahead, single-flight misses, and the `cache_asserts` oracle.

pub mod backend;
pub mod cache;
pub mod client;
pub mod mount_options;
pub mod namespace;
pub mod writeback;
