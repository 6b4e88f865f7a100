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
//! Built so far: the client, the per-mount options ([`mount_options`]), the metadata
//! cache store ([`cache`]) and the write-back coalescer ([`writeback`]). The page cache
//! with readahead, the namespace and the backends are not built yet, so nothing uses the
//! caches yet.

pub mod cache;
pub mod client;
pub mod mount_options;
pub mod writeback;
