//! # wasm9p-host: the `wasm9p` command and the wasmtime embedding
//!
//! What it is: [`engine`], the guest engine every command runs guests on and an
//! embedder can take as it is (a program on a mount table, guests built from a plain
//! [`engine::Guest`], each ending in a typed [`engine::Outcome`]: an exit, the memory
//! limit of [`limits`], an interrupt, a trap); the command-line front end ([`cli`]:
//! `wasm9p serve`, `run`, `batch`,
//! `mount`, `compile`, `cache`; the drop-in compiler `wasm9p cc` and its tools with
//! `wasm9p daemon`; the build farm's `wasm9p worker`, whose farm side is
//! `wasm9p-remote`); [`mounts`], which turns `--mount` / `--dir` SPECs into a guest-fs
//! namespace (9p remote, 9p embedded in process, bind) held by a [`mounts::MountTable`]
//! and renders the `--stats` JSON; [`p1`], our own WASI preview1 over that namespace
//! (a context builder, the [`p1::WasiP1View`] trait and [`p1::add_to_linker`] for
//! embedders); [`p2`], WASI preview2 for components (our `wasi:filesystem` over the
//! same namespace, wasmtime-wasi for the rest); [`p3`], WASI 0.3 for async components
//! (our `wasi:filesystem@0.3.0` over the same descriptors, as streams); [`fuse`], the same namespace served to
//! the host kernel through FUSE (`wasm9p mount`); [`plugin`], file systems written as
//! components (`type=plugin` mounts); [`module_cache`], compiled modules and
//! components kept on disk; and [`huge_alloc`], the `wasm9p` binary's allocator,
//! which maps large blocks in huge pages and faults them in ahead of a compile.
//!
//! The embedding, in order: build a [`mounts::MountTable`] inside a tokio runtime; add
//! preview1 to a `wasmtime::Linker<T>` where `T: WasiP1View`; per guest, build a
//! [`p1::WasiP1Ctx`] over the table's namespace and that runtime's handle, run
//! `_start` on a thread outside the runtime, then [`p1::WasiP1Ctx::close_all`] and
//! [`p1::exit_status`]. `examples/embed.rs` is the whole program.
//!
//! **Features.** `cli` (on by default) is the command: [`cli`] and [`fuse`], with
//! clap, FUSE (`fuser`) and the farm (`wasm9p-remote`, tonic). An embedder that wants
//! the library alone depends on `wasm9p-host` with `default-features = false` and
//! gets none of them (CI checks that build, and that those crates stay out of it).
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
mod wasi_fs;
