//! # wasm9p-host: the `wasm9p` command and, later, the wasmtime embedding
//!
//! What it is now: the command-line front end. `wasm9p serve` exports a host directory
//! over 9P2000.L ([`cli::serve`]). The WASI preview1/preview2 host over guest-fs, `wasm9p
//! run` and `wasm9p batch` come with the host issue.
//!
//! What it is not: a library other crates depend on for the protocol or the server;
//! those are `wasm9p-proto` and `wasm9p-server`.

pub mod cli;
pub mod mounts;
