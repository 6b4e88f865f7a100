//! The `wasm9p` command.

use std::process::ExitCode;

use clap::Parser;
use wasm9p_host::cli::{self, Cli, Command};

fn main() -> ExitCode {
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
