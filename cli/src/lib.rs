//! Command-line interface. Exit codes: 0 success, 1 runtime failure, 2 bad usage or
//! unusable configuration (bad address, missing export), always with one clear line on
//! stderr and no backtrace.
// The doc comments of the commands' arguments are their `--help` text, where brackets
// are option syntax (`EXPORT=PEER[,PEER]...`, `argv[0]`), not links.
#![allow(rustdoc::broken_intra_doc_links)]

use clap::{Parser, Subcommand};

mod cache;
pub mod cc;
mod compile;
mod engines;
mod guests;
mod http;
mod mount;
mod run;
mod serve;
mod shared;
mod worker;

pub use cache::{cache, CacheAction, CacheArgs, StoreChoice};
pub use compile::{compile, CompileArgs};
pub use guests::{batch, BatchArgs, CodeArgs, GuestArgs, NamespaceArgs};
pub use http::{http, HttpArgs};
pub use mount::{mount, MountArgs};
pub use run::{run, RunArgs};
pub use serve::{serve, ServeArgs};
pub use shared::{fail, say, EXIT_USAGE};
pub use wasm9p_host::engine::{parse_commands, Job};
pub use worker::{worker, worker_slot, SlotArgs, WorkerArgs};

/// wasm9p: WASI guests on a 9P2000.L filesystem.
#[derive(Debug, Parser)]
#[command(
    name = "wasm9p",
    version,
    about,
    after_help = "clang.wasm's tools as host commands (docs/cc.md):\n  \
                  wasm9p cc|c++|ar|ranlib|ld|nm|objdump|... [--root DIR] [--root-source ADDR] \
                  [--toolchain DIR] ARGS...\n  or a link to wasm9p named after the tool."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Export a host directory over 9P2000.L.
    Serve(ServeArgs),
    /// Run a WASI guest (a preview1 module, a 0.2 or 0.3 component) on a namespace of 9p, bind and embedded mounts.
    Run(RunArgs),
    /// Run one guest per COMMANDS line, up to --jobs at once, on shared mounts.
    Batch(BatchArgs),
    /// Serve the mounts' namespace at a host directory through FUSE.
    Mount(MountArgs),
    /// Fill the module cache ahead of time: compile modules at every tier asked for.
    Compile(CompileArgs),
    /// Keep clang.wasm and the mounts warm for `wasm9p cc --daemon` (a whole build
    /// shares one set of caches).
    Daemon(cc::DaemonArgs),
    /// Run Remote Execution actions as wasm guests: a worker (bot) for a BuildGrid
    /// farm, each input root served lazily over 9P from the farm's CAS.
    Worker(WorkerArgs),
    /// A process of `wasm9p worker`'s that runs its guests (started by the worker).
    #[command(hide = true)]
    WorkerSlot(SlotArgs),
    /// See or remove the `cache=fscache` stores kept on this machine.
    Cache(CacheArgs),
    /// Serve a wasi:http component over HTTP, each request in a fresh instance on the
    /// mounts' namespace (shared and cached across requests).
    Http(HttpArgs),
}
