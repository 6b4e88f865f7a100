//! One lease, start to end: its `Action` run as a guest by whatever runs guests (the
//! [`Guests`] a worker is given), its outputs uploaded, an `ActionResult` or a status
//! that says what went wrong.
//!
//! In order: the `Action` (from the lease, or by its digest from the CAS), its
//! `Command` and the `Directory` messages of its input root (those the worker has
//! not read for an earlier action; the files' bytes stay where they are); the tree
//! and the outputs checked; `arguments[0]` found in the input root (from the working
//! directory, symlinks followed inside the root: [`InputTree::resolve`]) and its
//! module fetched and loaded ([`Guests::load`]), while the files that the access
//! profile of the action's kind lists are prefetched (`profiles`, `prefetch`); the
//! parents of the outputs made; once the prefetch is in, the guest runs
//! ([`Guests::run`]) on the input root, served by an [`ActionFs`] whose
//! writable layer takes what it writes, with a private `/tmp`, the `Command`'s
//! working directory and environment. Then its outputs are read back and uploaded
//! with its stdout and stderr, and the files the guest read recorded as its kind's
//! profile.
//!
//! Each bad input fails this action only, with a status a client can act on:
//! INVALID_ARGUMENT for what the action gets wrong (a payload that is no action, a
//! tree with a bad name or an escaping symlink, an output outside the root, an
//! `arguments[0]` missing or not wasm, or a module that does not load),
//! FAILED_PRECONDITION for blobs the CAS lacks or sent corrupt, DEADLINE_EXCEEDED
//! past the action's timeout, RESOURCE_EXHAUSTED for a guest over the memory limit
//! (as the guest runner knows it, by type: [`Ended::MemoryLimit`]) or outputs over
//! theirs, CANCELLED when the scheduler took the lease back, UNAVAILABLE when the
//! outputs could not be uploaded (the scheduler retries it), INTERNAL when the worker
//! itself failed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;
use serde::{Deserialize, Serialize};

use crate::apis::v2;
use crate::bazel_test::{self, ResultsError};
use crate::cas::Cas;
use crate::directories::Directories;
use crate::layer::{ActionFs, FetchWaits};
use crate::lease::{code, Outcome};
use crate::outputs::{self, OutputError};
use crate::prefetch;
use crate::profiles::{ProfileKey, Profiles};
use crate::store::{ContentStore, Counted, FetchError};
use crate::timeline::Timeline;
use crate::tree::InputTree;
use crate::Digest;

/// What runs an action's guest: the worker's engine (`wasm9p-host` implements it).
/// Both are called on the lease's own plain thread, and may block.
pub trait Guests: Send + Sync + 'static {
    /// A loaded program.
    type Program;

    /// Loads the module whose digest is `module` and whose bytes are the file
    /// `path` (a blob of the content store, which never changes). The file may not
    /// have been fetched yet: a worker that keeps the module's compiled code by its
    /// digest loads it without the bytes; one that needs them says
    /// [`NotLoaded::NotFetched`], and is asked again once they are in.
    fn load(&self, module: Digest, path: &Path) -> Result<Self::Program, NotLoaded>;

    /// Runs `program` as `run` says, to its end: how it ended, or one line saying
    /// why the worker could not run it (not started, or its runner lost: the
    /// worker's fault, INTERNAL, which a farm retries).
    fn run(&self, program: &Self::Program, run: GuestRun<'_>) -> Result<Ran, String>;
}

/// Why [`Guests::load`] has no program, in one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotLoaded {
    /// The module is no program the worker runs (the action's fault:
    /// INVALID_ARGUMENT).
    NotAProgram(String),
    /// The worker could not load it (its fault: INTERNAL).
    Worker(String),
    /// Its compiled code is not kept: its bytes are needed, and not fetched yet.
    NotFetched,
}

/// One guest to run: its argv in its namespace.
pub struct GuestRun<'a> {
    /// Its arguments, `argv[0]` as the `Command` gives it.
    pub argv: &'a [String],
    /// Its environment.
    pub env: &'a [(String, String)],
    /// Its working directory, absolute in its namespace.
    pub working_dir: &'a str,
    /// The input root with its writable layer, to be its `/`.
    pub fs: Arc<ActionFs>,
    /// A directory of its own, to be its `/tmp`.
    pub tmp: &'a Path,
    /// Where its stdout goes (stdin is empty).
    pub stdout: Captured,
    /// Where its stderr goes.
    pub stderr: Captured,
    /// Set when it must stop (its timeout, or the lease taken back).
    pub cancel: Arc<AtomicBool>,
    /// The most bytes its memory may take.
    pub memory_limit: usize,
}

/// How a guest ended, as the worker reports it (the engine's outcome, converted once
/// where guests run; on a slot's wire as `{"exited": 0}`, `"stopped"`, ...).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ended {
    /// It exited with this code.
    Exited(i32),
    /// Its runner refused it more memory: the reason, in one line.
    MemoryLimit(String),
    /// It was stopped by its cancel flag.
    Stopped,
    /// It trapped: the reason, in one line.
    Trapped(String),
}

impl Ended {
    /// The exit code the `ActionResult` gives: the guest's own, 1 for anything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            Ended::Exited(code) => *code,
            _ => 1,
        }
    }
}

/// What a guest's namespace counted while it ran: defined here once, counted by its
/// mount, carried in [`Ran`], kept in [`ActionStats`] and summed in
/// [`crate::stats::Totals`] (the `--stats` names are the serde names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestCounts {
    /// The 9P requests its namespace sent to the input root.
    #[serde(rename = "rpc_9p")]
    pub rpcs_9p: u64,
    /// Of those, the Treads.
    #[serde(rename = "read_9p")]
    pub reads_9p: u64,
    /// Reads of input files its mount answered from pages an earlier action left in
    /// the worker's shared cache.
    pub shared_page_hits: u64,
    /// Lookups, listings, attributes and symlink targets its mount took from what an
    /// earlier action learnt (the same shared cache), with no request.
    pub shared_metadata_hits: u64,
}

impl std::ops::AddAssign for GuestCounts {
    fn add_assign(&mut self, other: GuestCounts) {
        self.rpcs_9p += other.rpcs_9p;
        self.reads_9p += other.reads_9p;
        self.shared_page_hits += other.shared_page_hits;
        self.shared_metadata_hits += other.shared_metadata_hits;
    }
}

/// What [`Guests::run`] tells.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ran {
    /// How the guest ended.
    pub ended: Ended,
    /// What its namespace counted (for `--stats`).
    #[serde(flatten)]
    pub counts: GuestCounts,
}

/// What every action of a worker shares.
pub struct Actions<G: Guests> {
    /// The farm's CAS.
    pub cas: Cas,
    /// The `Directory` messages read so far, for the actions after.
    pub directories: Directories,
    /// The worker's content store.
    pub store: Arc<ContentStore>,
    /// What runs the guests.
    pub guests: G,
    /// Where actions' scratch directories go.
    pub scratch: PathBuf,
    /// The most bytes each guest's memory may take.
    pub memory_limit: usize,
    /// The most bytes an action's outputs (and its stdout and stderr) may take.
    pub output_limit: u64,
    /// The worker's name in results.
    pub name: String,
    /// The runtime CAS requests go on (the actions' threads block on it).
    pub runtime: tokio::runtime::Handle,
    /// Access profiles, recorded and prefetched from (`None`: neither).
    pub profiles: Option<Profiles>,
}

/// A lease to run.
pub struct Work {
    /// The lease's id.
    pub id: String,
    /// Its payload: an `Action`, or an `Action`'s digest.
    pub payload: Option<prost_types::Any>,
    /// Set when the scheduler takes the lease back.
    pub cancel: Arc<AtomicBool>,
}

/// What one action took: a `--stats` line (its serde names are the line's keys).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ActionStats {
    /// The lease.
    pub lease: String,
    /// The status code reported (0 for OK).
    pub status: i32,
    /// The guest's exit code, when it ran.
    pub exit_code: Option<i32>,
    /// Blobs fetched from the CAS.
    pub blobs_fetched: u64,
    /// Their bytes.
    pub bytes_fetched: u64,
    /// Blobs the content store already had.
    pub store_hits: u64,
    /// `Directory` messages read from the CAS (the others were known already).
    pub directories_read: u64,
    /// Files of the input root the guest read.
    pub files_read: u64,
    /// Their bytes.
    pub bytes_of_files_read: u64,
    /// The input root's files' bytes, each distinct file once.
    pub input_root_bytes: u64,
    /// What the guest's namespace counted (9P requests, shared cache hits).
    #[serde(flatten)]
    pub guest: GuestCounts,
    /// Paths in the access profile of the action's kind (0: none was recorded).
    pub profile_paths: u64,
    /// Blobs prefetched from the CAS for those paths (the store lacked them).
    pub prefetched_blobs: u64,
    /// Their bytes.
    pub prefetched_bytes: u64,
    /// The program was loaded by its digest alone (its compiled code kept), its bytes
    /// neither fetched nor read.
    pub program_by_digest: bool,
    /// Milliseconds loading the program.
    pub load_ms: u64,
    /// Milliseconds running the guest.
    pub run_ms: u64,
    /// Milliseconds for the whole action.
    pub total_ms: u64,
}

/// A failed step: the status to report.
type Failed = Outcome;

fn invalid(message: impl Into<String>) -> Failed {
    Outcome::error(code::INVALID_ARGUMENT, message)
}

fn internal(message: impl Into<String>) -> Failed {
    Outcome::error(code::INTERNAL, message)
}

/// The status for a blob that could not be had.
pub fn fetch_failed(e: FetchError) -> Outcome {
    match e {
        FetchError::Missing(_) | FetchError::Corrupt { .. } => {
            Outcome::error(code::FAILED_PRECONDITION, e.to_string())
        }
        FetchError::Unreachable { .. } => Outcome::error(code::UNAVAILABLE, e.to_string()),
        FetchError::Disk(_) => internal(e.to_string()),
    }
}

/// A file of the input root the guest read and whose bytes could not be had.
fn fetch_failed_at(path: &str, e: FetchError) -> Failed {
    let mut outcome = fetch_failed(e);
    outcome.status.message = format!("the input {path:?}: {}", outcome.status.message);
    outcome
}

fn output_failed(e: OutputError) -> Failed {
    match e {
        OutputError::Unreadable { .. } => internal(e.to_string()),
        _ => invalid(e.to_string()),
    }
}

const ACTION_TYPE: &str = "type.googleapis.com/build.bazel.remote.execution.v2.Action";
const DIGEST_TYPE: &str = "type.googleapis.com/build.bazel.remote.execution.v2.Digest";
const RESULT_TYPE: &str = "type.googleapis.com/build.bazel.remote.execution.v2.ActionResult";

impl<G: Guests> Actions<G> {
    /// Runs `work` on this (plain) thread: its outcome, and what it took.
    pub fn run(&self, work: &Work) -> (Outcome, ActionStats) {
        let started = Instant::now();
        let mut stats = ActionStats {
            lease: work.id.clone(),
            ..ActionStats::default()
        };
        let mut timeline = Timeline::start();
        // This action's fetches, counted apart from those of the actions beside it.
        let fetch = Arc::new(Counted::new(self.cas.clone()));
        let prefetched = Arc::new(prefetch::Tally::default());
        let outcome = match self.run_action(work, &fetch, &prefetched, &mut stats, &mut timeline) {
            Ok(outcome) | Err(outcome) => outcome,
        };
        (stats.blobs_fetched, stats.bytes_fetched) = fetch.fetched();
        (stats.prefetched_blobs, stats.prefetched_bytes) = prefetched.fetched();
        stats.store_hits = fetch.hits();
        stats.status = outcome.status.code;
        stats.total_ms = started.elapsed().as_millis() as u64;
        (outcome, stats)
    }

    /// The lease's `Action`.
    fn action(&self, work: &Work) -> Result<v2::Action, Failed> {
        match &work.payload {
            Some(any) if any.type_url == ACTION_TYPE => v2::Action::decode(&any.value[..])
                .map_err(|e| invalid(format!("the lease's Action does not decode: {e}"))),
            Some(any) if any.type_url == DIGEST_TYPE => {
                let d = v2::Digest::decode(&any.value[..])
                    .map_err(|e| invalid(format!("the lease's Digest does not decode: {e}")))?;
                let d = Digest::from_proto(&d)
                    .map_err(|e| invalid(format!("the Action's digest: {e}")))?;
                self.runtime
                    .block_on(self.cas.read_message::<v2::Action>(d))
                    .map_err(fetch_failed)
            }
            Some(any) => Err(invalid(format!(
                "a lease of {:?} is not an action",
                any.type_url
            ))),
            None => Err(invalid("the lease carries no action")),
        }
    }

    fn run_action(
        &self,
        work: &Work,
        fetch: &Arc<Counted<Cas>>,
        prefetched: &Arc<prefetch::Tally>,
        stats: &mut ActionStats,
        timeline: &mut Timeline,
    ) -> Result<Outcome, Failed> {
        let rt = &self.runtime;
        let action = self.action(work)?;
        let digest_of = |d: &Option<v2::Digest>, what: &str| {
            Digest::from_proto(d.as_ref().unwrap_or(&v2::Digest::default()))
                .map_err(|e| invalid(format!("the Action's {what}: {e}")))
        };
        let command_digest = digest_of(&action.command_digest, "command digest")?;
        let root_digest = digest_of(&action.input_root_digest, "input root digest")?;
        let command: v2::Command = rt
            .block_on(self.cas.read_message(command_digest))
            .map_err(fetch_failed)?;
        let (directories, read) = rt
            .block_on(self.cas.directories(root_digest, &self.directories))
            .map_err(fetch_failed)?;
        stats.directories_read = read as u64;
        let tree =
            InputTree::build(root_digest, &directories).map_err(|e| invalid(e.to_string()))?;
        let wanted = outputs::wanted_outputs(&command).map_err(output_failed)?;
        let wd = outputs::working_dir(&command).map_err(output_failed)?;
        stats.input_root_bytes = tree.files().map(|d| d.size()).sum();

        // The program: arguments[0], a wasm file of the input root; for a Bazel test
        // action, the test binary after test-setup.sh, run as the script would run it.
        let test =
            bazel_test::is_test(&command).then(|| bazel_test::test_setup(&command, &wd, &tree));
        let (argv, start_dir, env, what) = match &test {
            Some(t) => (
                t.argv.clone(),
                t.working_dir.clone(),
                t.env.clone(),
                "the test binary",
            ),
            None => (
                command.arguments.clone(),
                wd.clone(),
                command
                    .environment_variables
                    .iter()
                    .map(|v| (v.name.clone(), v.value.clone()))
                    .collect(),
                "arguments[0]",
            ),
        };
        let argv0 = argv
            .first()
            .filter(|a| !a.is_empty())
            .ok_or_else(|| invalid("the Command has no arguments"))?;
        let not_a_file = || invalid(format!("{what} {argv0:?} is not a file of the input root"));
        let program_digest = match tree.resolve(&start_dir, argv0).map(|i| &tree.node(i).0) {
            Some(crate::tree::TreeNode::File { digest, .. }) => *digest,
            _ => return Err(not_a_file()),
        };
        let tree = Arc::new(tree);
        // The kind's profile: its key and the paths it had (kept, so that an action
        // that read what it listed does not write it again).
        let profile = self.profiles.as_ref().map(|profiles| {
            let key = ProfileKey::of(program_digest, &command, &wd, &tree);
            let paths = profiles.load(&key);
            stats.profile_paths = paths.len() as u64;
            (profiles, key, paths)
        });
        let mut prefetching = profile
            .as_ref()
            .map(|(_, _, paths)| prefetch::wanted(paths, &tree, &self.store))
            .filter(|digests| !digests.is_empty()) // a warm worker has them all
            .map(|digests| {
                AbortOnDrop(rt.spawn(prefetch::prefetch(
                    self.store.clone(),
                    prefetched.clone(),
                    self.cas.clone(),
                    digests,
                )))
            });
        let not_loaded = |e| match e {
            NotLoaded::NotAProgram(why) => invalid(format!("{what} {argv0:?}: {why}")),
            NotLoaded::Worker(why) => internal(format!("loading {what} {argv0:?}: {why}")),
            NotLoaded::NotFetched => internal(format!(
                "loading {what} {argv0:?}: its bytes were asked for once they were in"
            )),
        };
        let module = self.store.path(&program_digest);
        // A module whose compiled code the guests keep needs no bytes: clang.wasm's
        // 75 MB are not fetched by a worker that has compiled it (`wasm9p compile`).
        let mut loading = Instant::now();
        let compiled = match self.store.has(&program_digest) {
            true => Err(NotLoaded::NotFetched),
            false => self.guests.load(program_digest, &module),
        };
        stats.program_by_digest = compiled.is_ok();
        let program = match compiled {
            Ok(program) => program,
            Err(NotLoaded::NotFetched) => {
                let blob = rt
                    .block_on(self.store.get(program_digest, &**fetch))
                    .map_err(fetch_failed)?;
                let mut magic = [0u8; 4];
                use std::os::unix::fs::FileExt;
                if blob.read_exact_at(&mut magic, 0).is_err() || &magic != b"\0asm" {
                    let only = match test {
                        Some(_) => " (this worker runs tests built for wasm only)",
                        None => "",
                    };
                    return Err(invalid(format!(
                        "{what} {argv0:?} is not a wasm module or component{only}"
                    )));
                }
                loading = Instant::now();
                self.guests
                    .load(program_digest, &module)
                    .map_err(not_loaded)?
            }
            Err(e) => return Err(not_loaded(e)),
        };
        timeline.eager_fetch = loading - timeline.started;
        stats.load_ms = loading.elapsed().as_millis() as u64;

        // The file system: the input root with a layer of its own, a private /tmp.
        let scratch = tempfile::Builder::new()
            .prefix("action-")
            .tempdir_in(&self.scratch)
            .map_err(|e| internal(format!("a scratch directory: {e}")))?;
        let tmp = scratch.path().join("tmp");
        std::fs::create_dir(&tmp).map_err(|e| internal(format!("a scratch directory: {e}")))?;
        let fs = Arc::new(
            ActionFs::new(
                tree,
                self.store.clone(),
                fetch.clone(),
                scratch.path().join("layer"),
                self.output_limit,
            )
            .map_err(|e| internal(format!("the action's layer: {e}")))?,
        );
        let mut dirs: Vec<String> = wanted
            .iter()
            .filter_map(|(_, path, _)| path.rsplit_once('/').map(|(parent, _)| parent.to_owned()))
            .collect();
        dirs.push(wd.clone());
        dirs.extend(test.iter().flat_map(|t| t.dirs.iter().cloned()));
        for dir in dirs {
            rt.block_on(fs.make_dirs(&dir))
                .map_err(|e| invalid(format!("the directory {dir:?} cannot be made: {e}")))?;
        }

        // The guest starts with its profile's files in (fetched in a few batches while
        // the program loaded): a wait for its inputs, counted as such.
        if let Some(task) = prefetching.as_mut() {
            let waiting = Instant::now();
            let _ = rt.block_on(&mut task.0);
            fs.fetch_waits().add(waiting.elapsed());
        }

        // The guest, stopped when the lease is taken back or its time is up.
        let stop = Arc::new(AtomicBool::new(false));
        let timed_out = Arc::new(AtomicBool::new(false));
        let timeout = action
            .timeout
            .as_ref()
            .filter(|t| t.seconds > 0 || t.nanos > 0)
            .map(|t| Duration::new(t.seconds.max(0) as u64, t.nanos.max(0) as u32));
        let watch = watchdog(
            work.cancel.clone(),
            stop.clone(),
            timed_out.clone(),
            timeout,
            fs.fetch_waits(),
        );
        let out = Captured::new(self.output_limit);
        let err = Captured::new(self.output_limit);
        let running = Instant::now();
        let ran = self.guests.run(
            &program,
            GuestRun {
                argv: &argv,
                env: &env,
                working_dir: &format!("/{start_dir}"),
                fs: fs.clone(),
                tmp: &tmp,
                stdout: out.clone(),
                stderr: err.clone(),
                cancel: stop,
                memory_limit: self.memory_limit,
            },
        );
        let ran_for = running.elapsed();
        stats.run_ms = ran_for.as_millis() as u64;
        timeline.execution = loading.elapsed();
        timeline.lazy_fetch = fs.fetch_waits().total();
        drop(watch);
        let ran = ran.map_err(|e| internal(format!("the worker could not run the guest: {e}")))?;
        if let (Some((profiles, key, had)), Ended::Exited(_)) = (&profile, &ran.ended) {
            let read = fs.paths_read();
            if read != *had {
                if let Err(e) = profiles.save(key, &read) {
                    tracing::warn!("the access profile {}: {e}", key.hex());
                }
            }
        }
        let code = ran.ended.exit_code();
        stats.exit_code = Some(code);
        stats.guest = ran.counts;
        let layer = fs.stats();
        stats.files_read = layer.files_read;
        stats.bytes_of_files_read = layer.bytes_of_files_read;

        if work.cancel.load(Ordering::Relaxed) {
            return Err(Outcome::error(
                code::CANCELLED,
                "the scheduler took the lease back",
            ));
        }
        if let Some((path, e)) = fs.unfetched().into_iter().next() {
            return Err(fetch_failed_at(&path, e));
        }
        // Known by the guest runner, never by what the guest printed.
        if let Ended::MemoryLimit(reason) = &ran.ended {
            return Err(Outcome::error(
                code::RESOURCE_EXHAUSTED,
                format!(
                    "the guest went over the worker's --memory-limit of {} bytes: {reason}",
                    self.memory_limit
                ),
            ));
        }
        let (stdout, stderr) = (out.take(), err.take());
        if let Some(t) = &test {
            let exit = match ran.ended {
                Ended::Exited(code) => Some(code),
                _ => None,
            };
            let log = [&stdout[..], &stderr[..]].concat();
            let test_ran = bazel_test::TestRan {
                took: ran_for,
                exit_code: exit,
                log: &log,
            };
            let left = t.leave_results(&fs, test_ran, (&self.store, &**fetch), self.output_limit);
            rt.block_on(left).map_err(|e| match e {
                ResultsError::TooLarge(_) => {
                    Outcome::error(code::RESOURCE_EXHAUSTED, e.to_string())
                }
                ResultsError::Failed(why) => internal(why),
            })?;
        }
        let uploading = Instant::now();
        let mut collected = outputs::collect(&fs, &command).map_err(output_failed)?;
        if collected.bytes > self.output_limit {
            return Err(Outcome::error(
                code::RESOURCE_EXHAUSTED,
                format!(
                    "the outputs are over the worker's {} bytes",
                    self.output_limit
                ),
            ));
        }
        collected.result.exit_code = code;
        collected.result.stdout_digest = collected.add_stream(stdout);
        collected.result.stderr_digest = collected.add_stream(stderr);
        rt.block_on(self.cas.upload(collected.blobs)).map_err(|e| {
            Outcome::error(code::UNAVAILABLE, format!("uploading the outputs: {e}"))
        })?;
        timeline.upload = uploading.elapsed();
        collected.result.execution_metadata = Some(timeline.metadata(&self.name));
        let result = Some(prost_types::Any {
            type_url: RESULT_TYPE.into(),
            value: collected.result.encode_to_vec(),
        });
        let mut outcome = Outcome {
            result,
            status: Default::default(),
        };
        if timed_out.load(Ordering::Relaxed) {
            let secs = timeout.map_or(0.0, |t| t.as_secs_f64());
            outcome.status.code = code::DEADLINE_EXCEEDED;
            outcome.status.message = format!("the action ran past its timeout of {secs} s");
        }
        Ok(outcome)
    }
}

/// Aborts its task when dropped: the prefetch of an action that failed before its
/// guest started.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sets `stop` when `cancel` is set (the scheduler took the lease back) or `timeout`
/// passes (then `timed_out` too); ends when dropped. The time the guest waited for
/// its inputs (`waits`) is not its own: it does not count (as Buildbarn's
/// `maximum_execution_timeout_compensation`).
fn watchdog(
    cancel: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    timed_out: Arc<AtomicBool>,
    timeout: Option<Duration>,
    waits: FetchWaits,
) -> impl Drop {
    struct Guard(Arc<AtomicBool>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let done = Arc::new(AtomicBool::new(false));
    let finished = done.clone();
    let started = Instant::now();
    // Waits before the watch (for the prefetch) are not the guest's to be spared.
    let before = waits.total();
    let _ = std::thread::Builder::new()
        .name("wasm9p-lease-watch".into())
        .spawn(move || {
            while !finished.load(Ordering::Relaxed) {
                if cancel.load(Ordering::Relaxed) {
                    stop.store(true, Ordering::Relaxed);
                    return;
                }
                let waited = waits.total().saturating_sub(before);
                let ran = started.elapsed().saturating_sub(waited);
                if timeout.is_some_and(|t| ran >= t) {
                    timed_out.store(true, Ordering::Relaxed);
                    stop.store(true, Ordering::Relaxed);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
    Guard(done)
}

/// A guest's stream kept in memory, at most `limit` bytes; the rest is dropped
/// without a word (the guest's writes still succeed), and the outputs' bound
/// ([`Actions::output_limit`]) is what a client sees of it.
#[derive(Clone, Debug)]
pub struct Captured {
    bytes: Arc<Mutex<Vec<u8>>>,
    limit: u64,
}

impl Captured {
    /// An empty stream that keeps at most `limit` bytes.
    pub fn new(limit: u64) -> Captured {
        Captured {
            bytes: Arc::default(),
            limit,
        }
    }

    /// Keeps what of `data` fits.
    pub fn push(&self, data: &[u8]) {
        let mut bytes = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        let room = (self.limit as usize).saturating_sub(bytes.len());
        bytes.extend_from_slice(&data[..data.len().min(room)]);
    }

    /// The most bytes it keeps.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// What was kept, taken out.
    pub fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.bytes.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_does_not_count_the_guests_waits_for_its_inputs() {
        // `before`: waited before the watch began; `during`: while it watched.
        let watch = |before: Duration, during: Duration| {
            let (stop, timed_out) = (Arc::default(), Arc::new(AtomicBool::new(false)));
            let waits = FetchWaits::default();
            waits.add(before);
            let guard = watchdog(
                Arc::default(),
                stop,
                timed_out.clone(),
                Some(Duration::from_millis(100)),
                waits.clone(),
            );
            waits.add(during);
            std::thread::sleep(Duration::from_millis(400));
            drop(guard);
            timed_out.load(Ordering::Relaxed)
        };
        assert!(
            watch(Duration::ZERO, Duration::ZERO),
            "400 ms of its own is past 100 ms"
        );
        assert!(
            !watch(Duration::ZERO, Duration::from_secs(10)),
            "400 ms, all waiting for inputs, is not"
        );
        assert!(
            watch(Duration::from_secs(10), Duration::ZERO),
            "waits before it started (the prefetch's) spare the guest nothing"
        );
    }

    #[test]
    fn a_captured_stream_keeps_its_bound_and_ended_gives_the_exit_code() {
        let c = Captured::new(5);
        c.push(b"abc");
        c.clone().push(b"defg");
        assert_eq!(c.take(), b"abcde");
        assert!(c.take().is_empty());
        assert_eq!(Ended::Exited(3).exit_code(), 3);
        assert_eq!(Ended::Trapped("unreachable".into()).exit_code(), 1);
        assert_eq!(Ended::MemoryLimit("over".into()).exit_code(), 1);
        assert_eq!(Ended::Stopped.exit_code(), 1);
    }
}
