//! The options of the commands that run guests on a namespace built from mount SPECs
//! ([`NamespaceArgs`], [`GuestArgs`], mapped onto the guest engine,
//! `wasm9p_host::engine`), and `wasm9p batch`.
//!
//! Every SPEC is parsed first (a mistake is one line and exit 2); the engine then
//! builds the mounts (an unreachable server is exit 2 too) and loads the module through
//! the compiled-module cache (progress on stderr when it has to be compiled). `batch`
//! runs one guest per COMMANDS line, up to `--jobs` at once, all on the same mounts and
//! caches.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::Args;

use super::engines::{engine_for, parse_tier, setup_failed, tier_from_env};
use super::shared::{fail, parse_env, say, EXIT_USAGE};
use wasm9p_guest_fs::mount_options::OptionKey;
use wasm9p_host::engine::{parse_commands, Guest, GuestEngine, Job, Outcome, Stdio};
use wasm9p_host::module_cache::{ModuleCache, TierChoice};
use wasm9p_host::mounts::{MountSpec, MountTable, MountTableBuilder};
use wasm9p_host::p2::MountGrant;

/// `--mount`'s help, its 9p options from the one table the parser uses.
fn mount_help() -> String {
    format!(
        "A mount: `type=9p,source=ADDR,target=/g` (`aname=NAME` picks one of the server's \
         exports) or `type=9p,export=HOSTDIR,target=/g`, optionally with {} (an export also \
         `security_model=passthrough|mapped-xattr|mapped-file`, `allow_devices`); or \
         `type=bind,source=HOSTDIR,target=/g`, optionally `ro`; or \
         `type=plugin,component=FILE.wasm,target=/g` (with the 9p options, and \
         `instances=N`, `fuel=N`, `call_timeout=SECONDS` to bound the plugin). Repeatable. \
         With no --mount and no --dir, the current directory is served at / by the \
         embedded 9p server with cache=loose.",
        OptionKey::list()
    )
}

/// The mounts a namespace is made of, as `run`, `batch` and `mount` take them.
#[derive(Debug, Args)]
pub struct NamespaceArgs {
    /// A mount (see `mount_help` for what `--help` says).
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
    #[command(flatten)]
    #[allow(missing_docs)]
    pub code: CodeArgs,
    /// Let a component guest mount file systems at run time (`wasm9p:fs/mounts`) at
    /// PREFIX or below, from SOURCES: comma-separated 9p server addresses,
    /// `export:DIR`, `plugin:FILE`, `bind:DIR` (without SOURCES: 9p servers by address
    /// only). Repeatable.
    #[arg(long = "allow-mount", value_name = "PREFIX[:SOURCES]", value_parser = parse_grant)]
    pub allow_mount: Vec<MountGrant>,
    /// Run guests on engines that stop a cancelled guest at once (set by `wasm9p
    /// daemon --prompt-cancel`; not an option of `run` or `batch`).
    #[arg(skip)]
    pub interruptible: bool,
}

/// Where compiled code is kept and which tier runs it, as every command that runs
/// guests takes them.
#[derive(Debug, Args)]
pub struct CodeArgs {
    /// Where compiled modules are kept (default: $WASM9P_CACHE_DIR, else
    /// $XDG_CACHE_HOME/wasm9p/modules, else ~/.cache/wasm9p/modules).
    #[arg(long, value_name = "DIR", conflicts_with = "no_module_cache")]
    pub module_cache: Option<PathBuf>,
    /// Compile the module every time instead.
    #[arg(long)]
    pub no_module_cache: bool,
    /// The compiler tier guests run on: auto (the optimized code when it is cached;
    /// else, for a module of 4 MiB or more ($WASM9P_TIER_FROM bytes), Winch's code at
    /// once while Cranelift's is compiled in the background, new guests switching to
    /// it when it is ready), baseline (Winch only) or optimized (wait for Cranelift).
    #[arg(long, value_name = "TIER", default_value = "auto", value_parser = parse_tier)]
    pub tier: TierChoice,
}

impl CodeArgs {
    /// The module cache these ask for (default: the user's), with
    /// `$WASM9P_TIER_FROM` applied.
    pub(crate) fn cache(&self) -> Result<ModuleCache, ExitCode> {
        tier_from_env(match (&self.module_cache, self.no_module_cache) {
            (_, true) => ModuleCache::disabled(),
            (Some(dir), false) => ModuleCache::at(dir),
            (None, false) => ModuleCache::user_default(),
        })
    }
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

impl GuestArgs {
    /// The engine these arguments ask for, running the program at `path`, or the
    /// exit code of a setup failure (already reported).
    pub(crate) fn engine(&self, path: &Path) -> Result<GuestEngine, ExitCode> {
        let cache = self.code.cache()?;
        engine_for(path, cache)
            .mounts(self.namespace.table()?)
            .tier(self.code.tier)
            .interruptible(self.interruptible)
            .allow_mounts(self.allow_mount.clone())
            .build()
            .map_err(setup_failed)
    }
}

/// A guest's exit code as the commands give it, and the one line that says why it
/// did not exit, if it did not (`WASM9P_TRAP_DETAIL=1` prints a trap whole, with the
/// guest's wasm backtrace).
pub(super) fn exit_code(outcome: &Outcome) -> (u8, Option<String>) {
    if let Outcome::Trapped(e) = outcome {
        if std::env::var_os("WASM9P_TRAP_DETAIL").is_some() {
            say(&format!("{e:?}"));
        }
    }
    (outcome.exit_code(), outcome.reason())
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
    let host = match args.guest.engine(&args.module) {
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
    host.finish();
    ExitCode::from(u8::from(failed > 0))
}

/// Runs every job once, up to `workers` at once: how many did not exit 0, and the
/// tier each job's guest ran on (by job).
fn run_pass(
    host: &GuestEngine,
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
struct Ended {
    code: u8,
    trap: Option<String>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    took: Duration,
    /// The tier the guest ran on.
    tier: wasm9p_host::module_cache::Tier,
}

/// Runs one batch guest with its output captured (printed whole when it ends, so the
/// output of guests running at once never interleaves) and an empty stdin.
fn run_captured(host: &GuestEngine, job: &Job, env: &[(String, String)]) -> Ended {
    let started = Instant::now();
    let finished = host.run(Guest::new(job.argv.clone()).env(env).stdio(Stdio::Capture));
    let (code, trap) = exit_code(&finished.outcome);
    Ended {
        code,
        trap,
        stdout: finished.stdout,
        stderr: finished.stderr,
        took: started.elapsed(),
        tier: finished.tier,
    }
}

impl Ended {
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
}
