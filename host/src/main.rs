//! The `wasm9p` command.

use std::process::ExitCode;

use clap::Parser;
use wasm9p_host::cli::{self, Cli, Command};

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
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        // The guest runs on this thread; `run` makes its own runtime for the mounts.
        Command::Run(args) => cli::run(args),
        Command::Batch(args) => cli::batch(args),
        Command::Serve(args) => match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime.block_on(cli::serve(args)),
            Err(e) => cli::fail(1, &format!("cannot start the runtime: {e}")),
        },
    }
}
