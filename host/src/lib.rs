//! # wasm9p-host: the `wasm9p` command and, later, the wasmtime embedding
//!
//! What it is now: the command-line front end, where `wasm9p serve` exports a host
//! directory over 9P2000.L ([`cli::serve`]); and [`mounts`], which turns `--mount` /
//! `--dir` SPECs into a guest-fs namespace (9p remote, 9p embedded in process, bind) and
//! renders the `--stats` JSON. The WASI preview1/preview2 host over that namespace,
//! `wasm9p run` and `wasm9p batch` are not built yet.
//!
//! What it is not: a library other crates depend on for the protocol or the server;
//! those are `wasm9p-proto` and `wasm9p-server`.

pub mod cli;
pub mod mounts;
pub mod p1;
