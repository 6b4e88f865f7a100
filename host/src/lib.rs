//! # wasm9p-host: the wasmtime embedding
//!
//! The library the `wasm9p` command (`wasm9p-cli`), the containerd shim
//! (`wasm9p-shim`) and any runtime that embeds wasm9p run guests with:
//!
//! - [`engine`]: the guest engine (a program on a mount table, guests built from a
//!   plain [`engine::Guest`], each ending in a typed [`engine::Outcome`]: an exit, the
//!   memory limit of [`limits`], an [`interrupt`], a trap);
//! - [`mounts`]: `--mount` / `--dir` SPECs into a guest-fs namespace (9p remote, 9p
//!   embedded in process, bind, plugins) held by a [`mounts::MountTable`], and the
//!   `--stats` JSON;
//! - [`p1`], [`p2`], [`p3`]: WASI preview1 (our own, a context builder, the
//!   [`p1::WasiP1View`] trait and [`p1::add_to_linker`]), preview2 for components (our
//!   `wasi:filesystem` over the same namespace, wasmtime-wasi for the rest) and 0.3
//!   for async components (`wasi:filesystem@0.3.0` over the same descriptors, as
//!   streams);
//! - [`http`]: wasi:http components, an instance per request, on one shared namespace
//!   (what `wasm9p http` and the shim's HTTP tasks serve with);
//! - [`toolchain`]: clang.wasm's tools as guests, the compiler driver run job by job
//!   (`wasm9p cc`, its daemon and the farm's worker);
//! - [`plugin`]: file systems written as components (`type=plugin` mounts);
//! - [`module_cache`]: compiled modules and components kept on disk, on two tiers;
//! - [`huge_alloc`]: the `wasm9p` binary's allocator, which maps large blocks in huge
//!   pages and faults them in ahead of a compile.
//!
//! The embedding, in order: build a [`mounts::MountTable`] inside a tokio runtime; add
//! preview1 to a `wasmtime::Linker<T>` where `T: WasiP1View`; per guest, build a
//! [`p1::WasiP1Ctx`] over the table's namespace and that runtime's handle, run
//! `_start` on a thread outside the runtime, then [`p1::WasiP1Ctx::close_all`] and
//! [`p1::exit_status`]. `examples/embed.rs` is the whole program; [`engine`] does all
//! of it for you.
//!
//! No clap, FUSE (`wasm9p-fuse`) or build farm (`wasm9p-remote`, tonic) here: those
//! are the command's, and CI checks that they stay out of this crate's tree.
//!
//! What it is not: a library other crates depend on for the protocol or the server;
//! those are `wasm9p-proto` and `wasm9p-server`.

pub mod engine;
pub mod http;
pub mod huge_alloc;
pub mod interrupt;
pub mod limits;
pub mod module_cache;
pub mod mounts;
pub mod p1;
pub mod p2;
pub mod p3;
pub mod plugin;
pub mod toolchain;
mod wasi_fs;
