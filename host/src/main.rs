//! The `wasm9p` command.

use std::process::ExitCode;

use clap::Parser;
use wasm9p_host::cli::{self, Cli, Command};

/// mimalloc rather than glibc's malloc, for two costs the `wasm9p` binary meets:
///
/// - Compiling a big guest allocates gigabytes (clang.wasm: 2.2 GB peak, a 320 MB text
///   section grown in place). glibc maps that memory 4 KiB at a time, and on a VM
///   every first touch of a page is a fault the hypervisor may have to back: half of
///   Winch's serial tail was page faults. mimalloc takes its memory in arenas marked
///   for transparent huge pages (2 MiB a fault) and keeps freed memory a moment for
///   reuse. The first `clang --version` on the baseline tier went from 10.7 s to 7.8 s
///   (medians of 3 alternating runs, BENCHMARKS.md §6), with no change to the code.
/// - 9p reads allocate and free buffers of up to msize and readahead assemblies of up to
///   2 MiB all the time; glibc served each with a fresh zeroed mapping unless told by
///   `mallopt` to keep them in its heap (what this binary did before). mimalloc reuses
///   them as it is.
///
/// A library embedding wasm9p keeps whatever allocator its binary chose.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // A guest call that fails with an errno (ENOENT for every header a compiler probes)
    // travels through wiggle as an error value; with RUST_BACKTRACE set, each would
    // capture a Rust backtrace (5 % of a clang run). Library backtraces stay off unless
    // RUST_LIB_BACKTRACE asks for them; panics still follow RUST_BACKTRACE. Set before
    // any thread exists.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WASM9P_LOG")
                // fuser warns of a second unmount attempt after ours succeeded.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,fuser=error")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some((name, tool, args, called_as_tool)) = cli::cc::called(&argv) {
        return cli::cc::main(&name, tool, args, called_as_tool);
    }
    match Cli::parse().command {
        // The guest runs on this thread; `run` makes its own runtime for the mounts.
        Command::Run(args) => cli::run(args),
        Command::Batch(args) => cli::batch(args),
        Command::Mount(args) => cli::mount(args),
        Command::Compile(args) => cli::compile(args),
        Command::Daemon(args) => cli::cc::daemon(args),
        Command::Cache(args) => cli::cache(args),
        Command::Serve(args) => match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime.block_on(cli::serve(args)),
            Err(e) => cli::fail(1, &format!("cannot start the runtime: {e}")),
        },
    }
}
