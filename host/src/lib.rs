//! # wasm9p-host: the `wasm9p` command and the wasmtime embedding
//!
//! What it is now: the command-line front end ([`cli`]: `wasm9p serve` and `wasm9p
//! run`); [`mounts`], which turns `--mount` / `--dir` SPECs into a guest-fs namespace
//! (9p remote, 9p embedded in process, bind) and renders the `--stats` JSON; and [`p1`],
//! our own WASI preview1 over that namespace. Not built yet: preview2, `wasm9p batch`,
//! the compiled-module cache and a builder-style embedding API.
//!
//! What it is not: a library other crates depend on for the protocol or the server;
//! those are `wasm9p-proto` and `wasm9p-server`.

pub mod cli;
pub mod module_cache;
pub mod mounts;
pub mod p1;
