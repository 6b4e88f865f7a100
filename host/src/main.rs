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
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return cli::fail(1, &format!("cannot start the runtime: {e}")),
    };
    runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => cli::serve(args).await,
        }
    })
}
