//! The `wasm9p` command.

use std::process::ExitCode;

use clap::Parser;
use wasm9p_cli::{self as cli, Cli, Command};

use wasm9p_host::huge_alloc;

/// See [`huge_alloc`]: large blocks in mappings marked for huge pages.
#[global_allocator]
static ALLOC: huge_alloc::HugeLarge = huge_alloc::HugeLarge;

fn main() -> ExitCode {
    // A guest call that fails with an errno (ENOENT for every header a compiler probes)
    // travels through wiggle as an error value; with RUST_BACKTRACE set, each would
    // capture a Rust backtrace (5 % of a clang run). Library backtraces stay off unless
    // RUST_LIB_BACKTRACE asks for them; panics still follow RUST_BACKTRACE. Set before
    // any thread exists.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    keep_large_buffers_in_the_heap();
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
    if let [_, help, tool] = argv.as_slice() {
        if let Some(text) = (help == "help")
            .then(|| tool.to_str().and_then(cli::cc::help))
            .flatten()
        {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
    }
    match Cli::parse().command {
        // The guest runs on this thread; `run` makes its own runtime for the mounts.
        Command::Run(args) => cli::run(args),
        Command::Batch(args) => cli::batch(args),
        Command::Mount(args) => cli::mount(args),
        Command::Compile(args) => cli::compile(args),
        Command::Daemon(args) => cli::cc::daemon(args),
        Command::Worker(args) => cli::worker(args),
        Command::WorkerSlot(args) => cli::worker_slot(args),
        Command::Cache(args) => cli::cache(args),
        Command::Http(args) => cli::http(args),
        Command::Serve(args) => match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime.block_on(cli::serve(args)),
            Err(e) => cli::fail(1, &format!("cannot start the runtime: {e}")),
        },
    }
}

/// 9p reads and writes allocate and free large buffers all the time (frames of up to
/// msize, readahead assemblies of up to 2 MiB, the embedded server's read buffers).
/// glibc serves every allocation above 128 KiB with a fresh mmap, which then
/// page-faults in zeroed memory: a third of a sequential 9p read's time in `perf`.
/// Keeping allocations up to 4 MiB in the heap, and up to 64 MiB of freed heap before
/// it goes back to the system, lets them be reused (1.0 -> 1.5 GB/s for a 512 MiB
/// readahead read). Left alone when `GLIBC_TUNABLES` sets malloc parameters.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn keep_large_buffers_in_the_heap() {
    let tuned = std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc."));
    if tuned {
        return;
    }
    // SAFETY: mallopt only sets allocator parameters; no other thread exists yet.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
    }
}
