//! `stock-wasi`: the baseline users run today. Runs WASI preview1 guests on stock
//! wasmtime-wasi 48 (`wasmtime_wasi::p1` as it comes: `add_to_linker_sync`, host
//! directories preopened with `WasiCtxBuilder::preopened_dir`), with the same engine
//! settings and compiled-module cache as `wasm9p batch`, so that a benchmark compares
//! only the filesystem underneath.
//!
//! ```text
//! stock-wasi [--jobs N] [--passes N] [--dir HOST::GUEST]... [--stats=FILE] --module M COMMANDS
//! ```
//!
//! COMMANDS is `wasm9p batch`'s format: one guest per line, shell words, `argv[0]` first.
//! Guests inherit stdio. Prints one summary line per pass on stderr; `--stats=FILE`
//! writes `{"wall_ms", "guests", "passes": [{"wall_ms", "guests"}]}`. Exit 0 when every
//! guest exited 0, 1 otherwise, 2 for a usage or setup error.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use wasm9p_host::engine::parse_commands;
use wasm9p_host::module_cache::{ModuleCache, Program};
use wasmtime::{Engine, InstancePre, Linker, Store};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

/// Parsed command line.
struct Options {
    jobs: usize,
    passes: usize,
    dirs: Vec<(PathBuf, String)>,
    stats: Option<PathBuf>,
    module: PathBuf,
    commands: PathBuf,
}

fn usage(why: &str) -> ExitCode {
    eprintln!("stock-wasi: {why}");
    eprintln!(
        "usage: stock-wasi [--jobs N] [--passes N] [--dir HOST::GUEST]... [--stats=FILE] --module M COMMANDS"
    );
    ExitCode::from(2)
}

fn parse_options(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let (mut jobs, mut passes, mut dirs, mut stats, mut module, mut commands) =
        (1, 1, Vec::new(), None, None, None);
    let count = |v: Option<String>, what: &str| -> Result<usize, String> {
        v.and_then(|v| v.parse().ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("{what} needs a positive number"))
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--jobs" => jobs = count(args.next(), "--jobs")?,
            "--passes" => passes = count(args.next(), "--passes")?,
            "--dir" => {
                let d = args.next().ok_or("--dir needs HOST::GUEST")?;
                let (host, guest) = d.split_once("::").unwrap_or((&d, &d));
                dirs.push((PathBuf::from(host), guest.to_owned()));
            }
            "--module" => module = Some(PathBuf::from(args.next().ok_or("--module needs a file")?)),
            s if s.starts_with("--stats=") => stats = Some(PathBuf::from(&s["--stats=".len()..])),
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            _ if commands.is_none() => commands = Some(PathBuf::from(arg)),
            _ => return Err(format!("unexpected argument {arg}")),
        }
    }
    Ok(Options {
        jobs,
        passes,
        dirs,
        stats,
        module: module.ok_or("--module is required")?,
        commands: commands.ok_or("COMMANDS is required")?,
    })
}

/// One guest to its end: its exit status.
fn run_guest(
    pre: &InstancePre<WasiP1Ctx>,
    dirs: &[(PathBuf, String)],
    argv: &[String],
) -> wasmtime::Result<i32> {
    let mut wasi = WasiCtxBuilder::new();
    wasi.inherit_stdio().args(argv);
    for (host, guest) in dirs {
        wasi.preopened_dir(host, guest, FsPerms::ReadWrite)?;
    }
    let mut store = Store::new(pre.module().engine(), wasi.build_p1());
    let instance = pre.instantiate(&mut store)?;
    let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
    match start.call(&mut store, ()) {
        Ok(()) => Ok(0),
        Err(e) => match e.downcast_ref::<I32Exit>() {
            Some(I32Exit(code)) => Ok(*code),
            None => Err(e),
        },
    }
}

fn main() -> ExitCode {
    let opts = match parse_options(std::env::args().skip(1)) {
        Ok(opts) => opts,
        Err(why) => return usage(&why),
    };
    let started = Instant::now();
    let jobs: Vec<Vec<String>> = match std::fs::read_to_string(&opts.commands)
        .map_err(|e| e.to_string())
        .and_then(|text| parse_commands(&text))
    {
        Ok(jobs) => jobs.into_iter().map(|job| job.argv).collect(),
        Err(e) => return usage(&format!("bad COMMANDS {}: {e}", opts.commands.display())),
    };
    let engine = Engine::default();
    let module = match ModuleCache::user_default().load(&engine, &opts.module, &|_| {}) {
        Ok(Program::Module(m)) => m,
        Ok(Program::Component(_)) => return usage("components are not supported here"),
        Err(e) => return usage(&e.to_string()),
    };
    let mut linker = Linker::<WasiP1Ctx>::new(&engine);
    let pre = wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |t| t)
        .and_then(|()| linker.instantiate_pre(&module));
    let pre = match pre {
        Ok(pre) => pre,
        Err(e) => return usage(&format!("cannot link: {e:#}")),
    };

    let mut failed = 0;
    let mut passes = Vec::new();
    for pass in 1..=opts.passes {
        let pass_started = Instant::now();
        let next = AtomicUsize::new(0);
        let pass_failed = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..opts.jobs.min(jobs.len()) {
                scope.spawn(|| {
                    while let Some(argv) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let code = run_guest(&pre, &opts.dirs, argv).unwrap_or_else(|e| {
                            eprintln!("stock-wasi: {}: {e:#}", argv.join(" "));
                            1
                        });
                        if code != 0 {
                            pass_failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let pass_failed = pass_failed.into_inner();
        failed += pass_failed;
        let ms = pass_started.elapsed().as_millis();
        eprintln!(
            "stock-wasi: pass {pass} of {}: {} guests, {pass_failed} did not exit 0, in {ms} ms",
            opts.passes,
            jobs.len()
        );
        passes.push(format!(r#"{{"wall_ms":{ms},"guests":{}}}"#, jobs.len()));
    }
    if let Some(path) = &opts.stats {
        let json = format!(
            r#"{{"wall_ms":{},"guests":{},"passes":[{}]}}"#,
            started.elapsed().as_millis(),
            jobs.len() * opts.passes,
            passes.join(",")
        );
        if let Err(e) = std::fs::write(path, json + "\n") {
            eprintln!("stock-wasi: cannot write {}: {e}", path.display());
        }
    }
    ExitCode::from(u8::from(failed > 0))
}
