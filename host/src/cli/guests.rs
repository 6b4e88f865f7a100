//! `wasm9p run` and `wasm9p batch`: guests on a namespace built from mount SPECs.
//!
//! Both go the same way: parse every SPEC (a mistake is one line and exit 2), start a
//! runtime for the mounts and build them (an unreachable server is exit 2 too), load
//! the module through the compiled-module cache (progress on stderr when it has to be
//! compiled), link it once, then run guests on plain threads outside the runtime, as
//! the preview1 host requires. `batch` runs one guest per COMMANDS line, up to `--jobs`
//! at once, all on the same mounts and caches.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;

use super::engines::parse_tier;
use super::tiered::{plugin_compile, tier_from_env, OnTier, Runner, TieredProgram};
use super::{fail, first_line, parse_env, say, EXIT_USAGE};
use crate::module_cache::{ModuleCache, TierChoice};
use crate::mounts::{MountSpec, MountTable, MountTableBuilder};
use crate::p1::{Input, Output, WasiP1Ctx};
use crate::p2::{MountGrant, RuntimeMountRecord, WasiP2Ctx, WasiP2Fs};
use crate::plugin::PluginCompile;
use wasm9p_guest_fs::mount_options::OptionKey;

/// Where one guest's stdio goes.
#[derive(Clone)]
pub(super) enum Stdio {
    /// The host's own.
    Inherit,
    /// Captured (stdout and stderr kept, stdin empty).
    Capture,
    /// Somewhere else (a `wasm9p daemon`'s client), and the guest stopped when the
    /// flag is set.
    Given {
        stdin: Input,
        stdout: Output,
        stderr: Output,
        cancel: Arc<std::sync::atomic::AtomicBool>,
    },
}

/// Where one guest runs, when not on the host's own namespace in wasi-libc's `/`.
#[derive(Clone, Default)]
pub(super) struct Place<'a> {
    /// Its namespace (`None`: the host's mounts).
    pub(super) namespace: Option<Arc<wasm9p_guest_fs::namespace::Namespace>>,
    /// Its working directory, a guest path (preview1 guests only).
    pub(super) working_dir: Option<&'a str>,
    /// The most bytes each of its memories may take (preview1 guests only).
    pub(super) memory_limit: Option<usize>,
}

/// Most bytes of one guest's stdout or stderr kept when captured.
const MAX_CAPTURE: usize = 16 << 20;

/// `--mount`'s help, its 9p options from the one table the parser uses.
fn mount_help() -> String {
    format!(
        "A mount: `type=9p,source=ADDR,target=/g` or `type=9p,export=HOSTDIR,target=/g`, \
         optionally with {} (an export also \
         `security_model=passthrough|mapped-xattr|mapped-file`, `allow_devices`); or \
         `type=bind,source=HOSTDIR,target=/g`, optionally `ro`; or \
         `type=plugin,component=FILE.wasm,target=/g` (with the 9p options). Repeatable. \
         With no --mount and no --dir, the current directory is served at / by the \
         embedded 9p server with cache=loose.",
        OptionKey::list()
    )
}

/// The mounts a namespace is made of, as `run`, `batch` and `mount` take them.
#[derive(Debug, Args)]
pub struct NamespaceArgs {
    /// A mount (see [`mount_help`] for what `--help` says).
    #[arg(long = "mount", value_name = "SPEC", help = mount_help())]
    pub mounts: Vec<String>,
    /// A host directory bound at a guest path (HOSTDIR::/GUEST, or HOSTDIR at itself).
    #[arg(long = "dir", value_name = "HOST::GUEST")]
    pub dirs: Vec<String>,
    /// No file system at all: an empty namespace, no preopened directory (without
    /// this, no --mount and no --dir means the current directory at /).
    #[arg(long, conflicts_with_all = ["mounts", "dirs"])]
    pub no_mounts: bool,
    /// Print mount statistics as JSON at the end: to FILE, or stderr.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-", require_equals = true)]
    pub stats: Option<String>,
}

impl NamespaceArgs {
    /// The table these ask for; with no --mount and no --dir, the current directory
    /// served at `/` by the embedded server with `cache=loose`. A bad SPEC is reported
    /// (exit code 2).
    pub(crate) fn table(&self) -> Result<MountTableBuilder, ExitCode> {
        let mut table = MountTable::builder();
        let parsed = self
            .mounts
            .iter()
            .map(|s| MountSpec::parse(s))
            .chain(self.dirs.iter().map(|d| MountSpec::parse_dir(d)));
        for spec in parsed {
            table = table.spec(spec.map_err(|e| fail(EXIT_USAGE, &e.to_string()))?);
        }
        if table.is_empty() && !self.no_mounts {
            table = table
                .mount("type=9p,export=.,target=/,cache=loose")
                .expect("the default SPEC parses");
        }
        Ok(table)
    }

    /// Writes `json` where `--stats` asks, if it does.
    pub(crate) fn report_stats(&self, json: serde_json::Value) {
        let Some(target) = self.stats.as_deref() else {
            return;
        };
        let json = json.to_string();
        let written = if target == "-" {
            writeln!(std::io::stderr().lock(), "{json}")
        } else {
            std::fs::write(target, json + "\n")
        };
        if let Err(e) = written {
            say(&format!("cannot write stats to {target}: {e}"));
        }
    }
}

/// Options every way of running guests shares.
#[derive(Debug, Args)]
pub struct GuestArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub namespace: NamespaceArgs,
    /// An environment variable for the guest (repeatable).
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Where compiled modules are kept (default: $WASM9P_CACHE_DIR, else
    /// $XDG_CACHE_HOME/wasm9p/modules, else ~/.cache/wasm9p/modules).
    #[arg(long, value_name = "DIR", conflicts_with = "no_module_cache")]
    pub module_cache: Option<PathBuf>,
    /// Compile the module every time instead.
    #[arg(long)]
    pub no_module_cache: bool,
    /// Let a component guest mount file systems at run time (`wasm9p:fs/mounts`) at
    /// PREFIX or below, from SOURCES: comma-separated 9p server addresses,
    /// `export:DIR`, `plugin:FILE`, `bind:DIR` (without SOURCES: 9p servers by address
    /// only). Repeatable.
    #[arg(long = "allow-mount", value_name = "PREFIX[:SOURCES]", value_parser = parse_grant)]
    pub allow_mount: Vec<MountGrant>,
    /// The compiler tier guests run on: auto (the optimized code when it is cached;
    /// else, for a module of 4 MiB or more ($WASM9P_TIER_FROM bytes), Winch's code at
    /// once while Cranelift's is compiled in the background, new guests switching to
    /// it when it is ready), baseline (Winch only) or optimized (wait for Cranelift).
    #[arg(long, value_name = "TIER", default_value = "auto", value_parser = parse_tier)]
    pub tier: TierChoice,
    /// Run guests on engines that stop a cancelled guest at once (set by `wasm9p
    /// daemon --prompt-cancel`; not an option of `run` or `batch`).
    #[arg(skip)]
    pub interruptible: bool,
}

fn parse_grant(s: &str) -> Result<MountGrant, String> {
    s.parse()
}

/// `wasm9p batch`.
#[derive(Debug, Args)]
pub struct BatchArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub guest: GuestArgs,
    /// The module or component every guest runs.
    #[arg(long, value_name = "MODULE")]
    pub module: PathBuf,
    /// How many guests run at once (default: the number of CPUs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub jobs: Option<u16>,
    /// Run the whole list this many times on the same mounts (the later passes find the
    /// caches warm); each pass gets its own summary line and `--stats` entry.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub passes: u16,
    /// A file with one guest per line: its argv words, argv[0] first, shell-quoted
    /// (`-` reads standard input). Blank lines and lines starting with `#` are skipped.
    pub commands: PathBuf,
}

/// Everything the guests of one invocation share.
///
/// Fields drop in order: the mounts (and their 9p sessions) go before the runtime that
/// runs the embedded servers, so that no session sees its server vanish first and
/// reports a lost connection at exit.
pub(super) struct Host {
    mounts: MountTable,
    program: TieredProgram,
    grants: Vec<MountGrant>,
    /// How plugins guests mount at run time are compiled and kept.
    plugins: PluginCompile,
    /// The mounts guests made at run time, as they went (for `--stats`).
    runtime_mounts: RuntimeMountRecord,
    started: Instant,
    runtime: tokio::runtime::Runtime,
}

impl Host {
    /// Mounts and module, or the exit code of a setup failure (already reported).
    pub(super) fn prepare(args: &GuestArgs, path: &Path) -> Result<Host, ExitCode> {
        let started = Instant::now();
        let cache = tier_from_env(match (&args.module_cache, args.no_module_cache) {
            (_, true) => ModuleCache::disabled(),
            (Some(dir), false) => ModuleCache::at(dir),
            (None, false) => ModuleCache::user_default(),
        })?;
        let plugins = plugin_compile(cache.clone(), args.tier);
        let table = args
            .namespace
            .table()?
            .module_cache(cache.clone())
            .plugin_tier(plugins.tier, plugins.upgrade_in.clone());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| fail(1, &format!("cannot start the runtime: {e}")))?;
        let mounts = runtime
            .block_on(table.build())
            .map_err(|e| fail(EXIT_USAGE, &e.to_string()))?;
        for mounted in mounts.mounted() {
            if let Some(plugin) = &mounted.plugin {
                if plugin.handed_off() {
                    say(&format!(
                        "plugin at {}: on the baseline tier for this run; its optimized code \
                         is being compiled in the background for later runs",
                        mounted.spec.target
                    ));
                }
            }
        }
        // Components run as futures on the mounts' runtime, core modules on plain
        // threads; both on the engine of the tier they were compiled by.
        let program = TieredProgram::load(
            &cache,
            path,
            args.tier,
            args.interruptible,
            !args.allow_mount.is_empty(),
        )?;
        Ok(Host {
            runtime,
            mounts,
            program,
            grants: args.allow_mount.clone(),
            plugins,
            runtime_mounts: Default::default(),
            started,
        })
    }

    /// Runs one guest to its end, in the working directory `working_dir` (a guest
    /// path; preview1 guests only; `None`: wasi-libc's `/`): its exit status (or trap),
    /// and what it printed when captured.
    pub(super) fn run_guest_in(
        &self,
        argv: Vec<String>,
        env: &[(String, String)],
        stdio: Stdio,
        working_dir: Option<&str>,
    ) -> (wasmtime::Result<i32>, Vec<u8>, Vec<u8>) {
        let place = Place {
            working_dir,
            ..Place::default()
        };
        self.run_guest_at(argv, env, stdio, &place)
    }

    /// As [`Host::run_guest_in`], where `place` says.
    pub(super) fn run_guest_at(
        &self,
        argv: Vec<String>,
        env: &[(String, String)],
        stdio: Stdio,
        place: &Place,
    ) -> (wasmtime::Result<i32>, Vec<u8>, Vec<u8>) {
        let program = self.program.next();
        self.run_program(&program, argv, env, stdio, place)
    }

    /// The runtime the mounts (and guests' blocking calls) run on.
    pub(super) fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.runtime
    }

    /// Runs one guest of `program` (the tier it starts on, from
    /// [`TieredProgram::next`]), as [`Host::run_guest_at`] does.
    fn run_program(
        &self,
        program: &OnTier,
        argv: Vec<String>,
        env: &[(String, String)],
        stdio: Stdio,
        place: &Place,
    ) -> (wasmtime::Result<i32>, Vec<u8>, Vec<u8>) {
        let ns = place
            .namespace
            .clone()
            .unwrap_or_else(|| self.mounts.namespace().clone());
        match &program.runner {
            Runner::P1(program) => {
                let mut ctx = WasiP1Ctx::builder(ns, self.runtime.handle().clone()).args(argv);
                if let Some(dir) = place.working_dir {
                    ctx = ctx.working_dir(dir);
                }
                if let Some(bytes) = place.memory_limit {
                    ctx = ctx.memory_limit(bytes);
                }
                for (k, v) in env {
                    ctx = ctx.env(k, v);
                }
                match stdio {
                    Stdio::Inherit => return (program.run(ctx.build()), Vec::new(), Vec::new()),
                    Stdio::Given {
                        stdin,
                        stdout,
                        stderr,
                        cancel,
                    } => {
                        let ctx = ctx
                            .stdin(stdin)
                            .stdout(stdout)
                            .stderr(stderr)
                            .cancel(cancel)
                            .build();
                        return (program.run(ctx), Vec::new(), Vec::new());
                    }
                    Stdio::Capture => {}
                }
                let (out, err) = (Arc::default(), Arc::default());
                let ctx = ctx
                    .stdin(Input::Empty)
                    .stdout(Output::Capture(Arc::clone(&out)))
                    .stderr(Output::Capture(Arc::clone(&err)))
                    .build();
                let result = program.run(ctx);
                let take = |b: &Mutex<Vec<u8>>| {
                    std::mem::take(&mut *b.lock().unwrap_or_else(|e| e.into_inner()))
                };
                (result, take(&out), take(&err))
            }
            Runner::Component(program) => {
                use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
                let mut wasi = wasmtime_wasi::WasiCtx::builder();
                wasi.args(&argv).envs(env);
                let (out, err) = (
                    MemoryOutputPipe::new(MAX_CAPTURE),
                    MemoryOutputPipe::new(MAX_CAPTURE),
                );
                // Given stdio is captured, and handed over when the component ends
                // (a daemon's clients run clang.wasm, a core module, which streams).
                match stdio {
                    Stdio::Inherit => wasi.inherit_stdio(),
                    Stdio::Capture | Stdio::Given { .. } => {
                        wasi.stdout(out.clone()).stderr(err.clone())
                    }
                };
                let result = self.runtime.block_on(async {
                    let mut fs = WasiP2Fs::new(ns).await;
                    fs.allow_mounts(self.grants.clone(), self.plugins.clone())
                        .await;
                    if !self.grants.is_empty() {
                        fs.record_runtime_mounts(self.runtime_mounts.clone(), argv.join(" "));
                    }
                    let ctx = WasiP2Ctx {
                        wasi: wasi.build(),
                        table: Default::default(),
                        fs,
                    };
                    program.run(ctx).await
                });
                let (out, err) = (out.contents().to_vec(), err.contents().to_vec());
                if let Stdio::Given {
                    stdout: Output::Stream(to_out),
                    stderr: Output::Stream(to_err),
                    ..
                } = &stdio
                {
                    let _ = (to_out.0)(&out);
                    let _ = (to_err.0)(&err);
                }
                (result, out, err)
            }
        }
    }

    /// Whether guests are preview1 modules (not components).
    pub(super) fn runs_modules(&self) -> bool {
        self.program.runs_modules()
    }

    /// Waits for what the program still has to store (see [`TieredProgram::finish`]).
    pub(super) fn finish(&self) {
        self.program.finish();
    }

    /// The `--stats` JSON as of now; with `--allow-mount`, `runtime_mounts` lists the
    /// mounts guests made, as they went.
    pub(super) fn stats_now(&self, guests: u64) -> serde_json::Value {
        let wall_ms = self.started.elapsed().as_millis() as u64;
        let mut stats = self.mounts.stats_json(guests, wall_ms);
        stats["tier"] = self.program.stats_json();
        if !self.grants.is_empty() {
            let made = self
                .runtime_mounts
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            stats["runtime_mounts"] = made.clone().into();
        }
        stats
    }
}

/// Runs one guest: its exit code, or 1 after a one-line report of its trap.
pub(super) fn exit_code(result: wasmtime::Result<i32>) -> (u8, Option<String>) {
    match result {
        Ok(code) => (code.clamp(0, 255) as u8, None),
        // The outermost message is often only "error while executing at wasm
        // backtrace:"; the cause (the trap's kind, a host error) is what tells.
        Err(e) => {
            // WASM9P_TRAP_DETAIL=1: the whole error with the guest's wasm backtrace.
            if std::env::var_os("WASM9P_TRAP_DETAIL").is_some() {
                say(&format!("{e:?}"));
            }
            (1, Some(first_line(&e.root_cause().to_string()).to_string()))
        }
    }
}

/// One COMMANDS line.
#[derive(Debug)]
pub struct Job {
    /// Its line number (from 1).
    pub line: usize,
    /// Its argv words, argv[0] first.
    pub argv: Vec<String>,
}

/// Parses COMMANDS: one guest per line, shell-quoted words, argv[0] first; blank
/// lines and `#` comments skipped. The error names the line.
pub fn parse_commands(text: &str) -> Result<Vec<Job>, String> {
    let mut jobs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let argv = shlex::split(trimmed)
            .ok_or_else(|| format!("line {}: unbalanced quotes or a trailing backslash", i + 1))?;
        jobs.push(Job { line: i + 1, argv });
    }
    Ok(jobs)
}

/// `wasm9p batch`: 0 when every guest exited 0, 1 when any did not, 2 for a setup error.
pub fn batch(args: BatchArgs) -> ExitCode {
    let text = if args.commands == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(&args.commands)
    };
    let jobs = match text
        .map_err(|e| e.to_string())
        .and_then(|t| parse_commands(&t))
    {
        Ok(jobs) => jobs,
        Err(e) => {
            return fail(
                EXIT_USAGE,
                &format!("bad COMMANDS {}: {e}", args.commands.display()),
            )
        }
    };
    let host = match Host::prepare(&args.guest, &args.module) {
        Ok(host) => host,
        Err(code) => return code,
    };
    let workers = args
        .jobs
        .map(usize::from)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .min(jobs.len().max(1));
    let total = jobs.len();
    let passes = usize::from(args.passes);
    let mut failed = 0;
    let mut pass_stats = Vec::new();
    // One snapshot at each pass boundary: a pass's counters are the difference of its
    // two, and the totals are the last one, so the passes add up to the totals exactly
    // (a late clunk lands in no pass rather than in the totals only).
    let mut snapshot = host.stats_now(0);
    for pass in 1..=passes {
        let started = Instant::now();
        let (pass_failed, tiers) = run_pass(&host, &jobs, workers, &args.guest.env);
        failed += pass_failed;
        let of_pass = if passes > 1 {
            format!("pass {pass} of {passes}: ")
        } else {
            String::new()
        };
        say(&format!(
            "batch: {of_pass}{total} guests, {} exited 0, {pass_failed} did not, in {:.1} s",
            total - pass_failed,
            started.elapsed().as_secs_f64()
        ));
        let after = host.stats_now((total * pass) as u64);
        let mut added = counters_added(&after, &snapshot);
        // Mounts made at run time are listed once, in the pass that made them.
        if let (Some(now), Some(before)) = (
            after["runtime_mounts"].as_array(),
            snapshot["runtime_mounts"].as_array(),
        ) {
            added["runtime_mounts"] = now[before.len().min(now.len())..].to_vec().into();
        }
        // A pass says which tier its guests ran on, each by its line; the compiles
        // belong to the run.
        if let Some(guests) = added["tier"].get("guests").cloned() {
            added["tier"] = serde_json::json!({ "guests": guests, "by_line": tiers });
        }
        pass_stats.push(added);
        snapshot = after;
    }
    snapshot["passes"] = serde_json::Value::Array(pass_stats);
    args.guest.namespace.report_stats(snapshot);
    host.program.finish();
    ExitCode::from(u8::from(failed > 0))
}

/// Runs every job once, up to `workers` at once: how many did not exit 0, and the
/// tier each job's guest ran on (by job).
fn run_pass(
    host: &Host,
    jobs: &[Job],
    workers: usize,
    env: &[(String, String)],
) -> (usize, Vec<&'static str>) {
    let tiers: Vec<Mutex<&'static str>> = jobs.iter().map(|_| Mutex::new("")).collect();
    let next = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let console = Mutex::new(());
    let total = jobs.len();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                let outcome = run_captured(host, job, env);
                *tiers[i].lock().unwrap_or_else(|e| e.into_inner()) = outcome.tier.name();
                if outcome.code != 0 {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                let _guard = console.lock().unwrap_or_else(|e| e.into_inner());
                let done = finished.fetch_add(1, Ordering::Relaxed) + 1;
                outcome.print(job, done, total);
            });
        }
    });
    let tiers = tiers
        .into_iter()
        .map(|t| t.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect();
    (failed.into_inner(), tiers)
}

/// Numbers in `--stats` that are a level, not a count: a pass reports them as they are.
const LEVELS: &[&str] = &["persistent_bytes"];

/// What `now` counts beyond `before`, number by number (two `--stats` snapshots of the
/// same mounts): a pass's own RPCs, cache hits and wall time; levels ([`LEVELS`]) as
/// they are now.
fn counters_added(now: &serde_json::Value, before: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match (now, before) {
        (Value::Number(a), Value::Number(b)) => match (a.as_u64(), b.as_u64()) {
            (Some(a), Some(b)) => Value::from(a.saturating_sub(b)),
            _ => now.clone(),
        },
        (Value::Object(a), Value::Object(b)) => Value::Object(
            a.iter()
                .map(|(k, v)| {
                    let added = match b.get(k) {
                        Some(old) if !LEVELS.contains(&k.as_str()) => counters_added(v, old),
                        _ => v.clone(),
                    };
                    (k.clone(), added)
                })
                .collect(),
        ),
        (Value::Array(a), Value::Array(b)) => Value::Array(
            a.iter()
                .enumerate()
                .map(|(i, v)| {
                    b.get(i)
                        .map_or_else(|| v.clone(), |old| counters_added(v, old))
                })
                .collect(),
        ),
        _ => now.clone(),
    }
}

/// How one batch guest ended, with what it printed.
struct Outcome {
    code: u8,
    trap: Option<String>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    took: Duration,
    /// The tier the guest ran on.
    tier: crate::module_cache::Tier,
}

/// Runs one batch guest with its output captured (printed whole when it ends, so the
/// output of guests running at once never interleaves) and an empty stdin.
fn run_captured(host: &Host, job: &Job, env: &[(String, String)]) -> Outcome {
    let started = Instant::now();
    let program = host.program.next();
    let (result, stdout, stderr) = host.run_program(
        &program,
        job.argv.clone(),
        env,
        Stdio::Capture,
        &Place::default(),
    );
    let (code, trap) = exit_code(result);
    Outcome {
        code,
        trap,
        stdout,
        stderr,
        took: started.elapsed(),
        tier: program.tier,
    }
}

impl Outcome {
    /// The guest's output, then one summary line on stderr:
    /// `batch [done/total] line N: exit C in T s: argv...`.
    fn print(&self, job: &Job, done: usize, total: usize) {
        let _ = std::io::stdout().lock().write_all(&self.stdout);
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().lock().write_all(&self.stderr);
        let mut command = shlex::try_join(job.argv.iter().map(String::as_str))
            .unwrap_or_else(|_| job.argv.join(" "));
        if command.len() > 100 {
            let cut = command.floor_char_boundary(97);
            command.truncate(cut);
            command.push_str("...");
        }
        let how = match &self.trap {
            Some(trap) => format!("trapped ({trap})"),
            None => format!("exit {}", self.code),
        };
        say(&format!(
            "batch [{done}/{total}] line {}: {how} in {:.2} s: {command}",
            job.line,
            self.took.as_secs_f64()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_shell_words_one_guest_per_line() {
        let jobs = parse_commands("# a comment\n\nclang -c 'a b.c' -o \"a b.o\"\n  cc1 x\\ y  \n")
            .unwrap();
        let got: Vec<(usize, Vec<&str>)> = jobs
            .iter()
            .map(|j| (j.line, j.argv.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            got,
            vec![
                (3, vec!["clang", "-c", "a b.c", "-o", "a b.o"]),
                (4, vec!["cc1", "x y"]),
            ]
        );
    }

    #[test]
    fn a_pass_counts_what_it_added_and_keeps_names() {
        let before = serde_json::json!({"wall_ms": 100, "guests": 0,
            "mounts": [{"target": "/usr", "rpc": {"walk": 10, "total": 12},
                        "cache": {"persistent_bytes": 4096, "validations": 2}}]});
        let now = serde_json::json!({"wall_ms": 350, "guests": 4,
            "mounts": [{"target": "/usr", "rpc": {"walk": 15, "read": 3, "total": 20},
                        "cache": {"persistent_bytes": 5000, "validations": 2}}]});
        // The bytes on disk are a level: the pass reports the store as it left it.
        assert_eq!(
            counters_added(&now, &before),
            serde_json::json!({"wall_ms": 250, "guests": 4,
                "mounts": [{"target": "/usr", "rpc": {"walk": 5, "read": 3, "total": 8},
                            "cache": {"persistent_bytes": 5000, "validations": 0}}]})
        );
    }

    #[test]
    fn unbalanced_quotes_name_the_line() {
        let err = parse_commands("ok\nbad 'quote\n").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
    }
}
