//! # wasm9p-guest-fs: the filesystem every guest sees
//!
//! Role (filled by the client and guest-fs issues): the 9P2000.L client session, the
//! Linux-v9fs-style caches (negative dentries with a TTL, symlink targets, attributes,
//! pages), and the mount table with path resolution inside the guest namespace, over
//! three backends: `ninep` (the client), `bind` (a host directory through cap-std) and
//! `memory` (a tmpfs).
//!
//! What it is not: a WASI implementation (that is `wasm9p-host`) or a server (that is
//! `wasm9p-server`).
//!
//! Nothing is built here yet: this crate currently only fixes its place in the
//! dependency graph (proto ← guest-fs ← host).
