//! One lease, start to end: its `Action` as a guest, its outputs uploaded, an
//! `ActionResult` or a status that says what went wrong.
//!
//! In order: the `Action` (from the lease, or by its digest from the CAS), its
//! `Command` and the `Directory` messages of its input root (those the worker has
//! not read for an earlier action; the files' bytes stay where they are); the tree
//! and the outputs checked; `arguments[0]` found in the input root (from the working
//! directory; symlinks followed inside the root) and loaded as a program (see
//! `tools`); the parents of the outputs made; then the guest runs on a namespace of
//! its own: the input root at `/` over 9P (its writable layer
//! taking what it writes), a private `/tmp`, the `Command`'s working directory and
//! environment. A multi-call LLVM module (clang.wasm) runs as the tool its file is
//! named after, the driver's jobs one by one as `wasm9p cc` runs them; any other
//! module or component runs as it is. Then its outputs are read back and uploaded
//! with its stdout and stderr.
//!
//! Each bad input fails this action only, with a status a client can act on:
//! INVALID_ARGUMENT for what the action gets wrong (a payload that is no action, a
//! tree with a bad name or an escaping symlink, an output outside the root, an
//! `arguments[0]` missing or not wasm), FAILED_PRECONDITION for blobs the CAS lacks
//! or sent corrupt, DEADLINE_EXCEEDED past the action's timeout, RESOURCE_EXHAUSTED for
//! a guest over `--memory-limit`, CANCELLED when the scheduler took the lease back,
//! UNAVAILABLE when the outputs could not be uploaded (the scheduler retries it).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;
use wasm9p_guest_fs::backend::bind::BindFs;
use wasm9p_guest_fs::mount_options::NinepOptions;
use wasm9p_guest_fs::namespace::Namespace;
use wasm9p_remote::apis::v2;
use wasm9p_remote::cas::Cas;
use wasm9p_remote::directories::Directories;
use wasm9p_remote::layer::ActionFs;
use wasm9p_remote::lease::{code, Outcome};
use wasm9p_remote::outputs::{self, OutputError};
use wasm9p_remote::store::{ContentStore, Counted, FetchError};
use wasm9p_remote::tree::{InputTree, TreeNode};
use wasm9p_remote::Digest;

use super::tools::Tools;
use crate::cli::cc::invocation::{Invocation, Io};
use crate::cli::cc::Tool;
use crate::cli::guests::exit_code;
use crate::engine::{Guest, Outcome as Ended, Stdio};
use crate::p1::{Input, Output, Sink};

/// What every action of a worker shares.
pub(super) struct Shared {
    pub(super) cas: Cas,
    /// The `Directory` messages read so far, for the actions after.
    pub(super) directories: Directories,
    pub(super) store: Arc<ContentStore>,
    pub(super) tools: Tools,
    /// Where actions' scratch directories go.
    pub(super) scratch: PathBuf,
    /// The most bytes each guest's memory may take.
    pub(super) memory_limit: usize,
    /// The most bytes an action's outputs (and its stdout and stderr) may take.
    pub(super) output_limit: u64,
    /// The worker's name in results.
    pub(super) name: String,
    /// The runtime CAS requests go on.
    pub(super) runtime: tokio::runtime::Handle,
}

/// A lease to run.
pub(super) struct Work {
    pub(super) id: String,
    pub(super) payload: Option<prost_types::Any>,
    /// Set when the scheduler takes the lease back.
    pub(super) cancel: Arc<AtomicBool>,
}

/// What one action took, for `--stats`.
#[derive(Clone, Debug, Default)]
pub(super) struct ActionStats {
    pub(super) lease: String,
    pub(super) status: i32,
    pub(super) exit_code: Option<i32>,
    pub(super) blobs_fetched: u64,
    pub(super) bytes_fetched: u64,
    pub(super) store_hits: u64,
    /// `Directory` messages read from the CAS (the others were known already).
    pub(super) directories_read: u64,
    pub(super) files_read: u64,
    pub(super) bytes_of_files_read: u64,
    pub(super) input_root_bytes: u64,
    pub(super) rpcs_9p: u64,
    pub(super) load_ms: u64,
    pub(super) run_ms: u64,
    pub(super) total_ms: u64,
}

impl ActionStats {
    pub(super) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "lease": self.lease,
            "status": self.status,
            "exit_code": self.exit_code,
            "blobs_fetched": self.blobs_fetched,
            "bytes_fetched": self.bytes_fetched,
            "store_hits": self.store_hits,
            "directories_read": self.directories_read,
            "files_read": self.files_read,
            "bytes_of_files_read": self.bytes_of_files_read,
            "input_root_bytes": self.input_root_bytes,
            "rpc_9p": self.rpcs_9p,
            "load_ms": self.load_ms,
            "run_ms": self.run_ms,
            "total_ms": self.total_ms,
        })
    }
}

/// A failed step: the status to report.
type Failed = Outcome;

fn invalid(message: impl Into<String>) -> Failed {
    Outcome::error(code::INVALID_ARGUMENT, message)
}

fn fetch_failed(e: FetchError) -> Failed {
    match e {
        FetchError::Missing(_) | FetchError::Corrupt { .. } => {
            Outcome::error(code::FAILED_PRECONDITION, e.to_string())
        }
        FetchError::Unreachable { .. } => Outcome::error(code::UNAVAILABLE, e.to_string()),
        FetchError::Disk(_) => Outcome::error(code::INTERNAL, e.to_string()),
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
        OutputError::Unreadable { .. } => Outcome::error(code::INTERNAL, e.to_string()),
        _ => invalid(e.to_string()),
    }
}

const ACTION_TYPE: &str = "type.googleapis.com/build.bazel.remote.execution.v2.Action";
const DIGEST_TYPE: &str = "type.googleapis.com/build.bazel.remote.execution.v2.Digest";
const RESULT_TYPE: &str = "type.googleapis.com/build.bazel.remote.execution.v2.ActionResult";

/// Runs `work` on this (plain) thread: its outcome, and what it took.
pub(super) fn run(shared: &Shared, work: &Work) -> (Outcome, ActionStats) {
    let started = Instant::now();
    let mut stats = ActionStats {
        lease: work.id.clone(),
        ..ActionStats::default()
    };
    // This action's fetches, counted apart from those of the actions running beside it.
    let fetch = Arc::new(Counted::new(shared.cas.clone()));
    let outcome = match run_action(shared, work, &fetch, &mut stats) {
        Ok(outcome) | Err(outcome) => outcome,
    };
    (stats.blobs_fetched, stats.bytes_fetched) = fetch.fetched();
    stats.store_hits = fetch.hits();
    stats.status = outcome.status.code;
    stats.total_ms = started.elapsed().as_millis() as u64;
    (outcome, stats)
}

fn run_action(
    shared: &Shared,
    work: &Work,
    fetch: &Arc<Counted<Cas>>,
    stats: &mut ActionStats,
) -> Result<Outcome, Failed> {
    let rt = &shared.runtime;
    let action = match &work.payload {
        Some(any) if any.type_url == ACTION_TYPE => v2::Action::decode(&any.value[..])
            .map_err(|e| invalid(format!("the lease's Action does not decode: {e}")))?,
        Some(any) if any.type_url == DIGEST_TYPE => {
            let d = v2::Digest::decode(&any.value[..])
                .map_err(|e| invalid(format!("the lease's Digest does not decode: {e}")))?;
            let d =
                Digest::from_proto(&d).map_err(|e| invalid(format!("the Action's digest: {e}")))?;
            rt.block_on(shared.cas.read_message::<v2::Action>(d))
                .map_err(fetch_failed)?
        }
        Some(any) => {
            return Err(invalid(format!(
                "a lease of {:?} is not an action",
                any.type_url
            )))
        }
        None => return Err(invalid("the lease carries no action")),
    };
    let digest_of = |d: &Option<v2::Digest>, what: &str| {
        Digest::from_proto(d.as_ref().unwrap_or(&v2::Digest::default()))
            .map_err(|e| invalid(format!("the Action's {what}: {e}")))
    };
    let command_digest = digest_of(&action.command_digest, "command digest")?;
    let root_digest = digest_of(&action.input_root_digest, "input root digest")?;
    let command: v2::Command = rt
        .block_on(shared.cas.read_message(command_digest))
        .map_err(fetch_failed)?;
    let (directories, read) = rt
        .block_on(shared.cas.directories(root_digest, &shared.directories))
        .map_err(fetch_failed)?;
    stats.directories_read = read as u64;
    let tree = InputTree::build(root_digest, &directories).map_err(|e| invalid(e.to_string()))?;
    let wanted = outputs::wanted_outputs(&command).map_err(output_failed)?;
    let wd = outputs::working_dir(&command).map_err(output_failed)?;
    stats.input_root_bytes = tree.files().map(|d| d.size()).sum();

    // The program: arguments[0], a wasm file of the input root.
    let argv0 = command
        .arguments
        .first()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| invalid("the Command has no arguments"))?;
    let tool_digest = program_in(&tree, &wd, argv0)?;
    let blob = rt
        .block_on(shared.store.get(tool_digest, &**fetch))
        .map_err(fetch_failed)?;
    let mut magic = [0u8; 4];
    use std::os::unix::fs::FileExt;
    if blob.read_exact_at(&mut magic, 0).is_err() || &magic != b"\0asm" {
        return Err(invalid(format!(
            "arguments[0] {argv0:?} is not a wasm module or component"
        )));
    }
    let loading = Instant::now();
    let host = rt
        .block_on(
            shared
                .tools
                .get(tool_digest, &shared.store.path(&tool_digest)),
        )
        .map_err(|e| invalid(format!("arguments[0] {argv0:?}: {e}")))?;
    stats.load_ms = loading.elapsed().as_millis() as u64;

    // The file system: the input root over 9P with a layer of its own, a private /tmp.
    let scratch = tempfile::Builder::new()
        .prefix("action-")
        .tempdir_in(&shared.scratch)
        .map_err(|e| Outcome::error(code::INTERNAL, format!("a scratch directory: {e}")))?;
    let tmp = scratch.path().join("tmp");
    std::fs::create_dir(&tmp)
        .map_err(|e| Outcome::error(code::INTERNAL, format!("a scratch directory: {e}")))?;
    let fs = Arc::new(
        ActionFs::new(
            Arc::new(tree),
            shared.store.clone(),
            fetch.clone(),
            scratch.path().join("layer"),
            shared.output_limit,
        )
        .map_err(|e| Outcome::error(code::INTERNAL, format!("the action's layer: {e}")))?,
    );
    let mut dirs: Vec<String> = wanted
        .iter()
        .filter_map(|(_, path, _)| path.rsplit_once('/').map(|(parent, _)| parent.to_owned()))
        .collect();
    dirs.push(wd.clone());
    for dir in dirs {
        host.runtime()
            .block_on(fs.make_dirs(&dir))
            .map_err(|e| invalid(format!("the directory {dir:?} cannot be made: {e}")))?;
    }
    let (namespace, mount) = host
        .runtime()
        .block_on(namespace(fs.clone(), &tmp))
        .map_err(|e| Outcome::error(code::INTERNAL, format!("the action's mounts: {e}")))?;

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
    );
    let out = Captured::new(shared.output_limit);
    let err = Captured::new(shared.output_limit);
    let env: Vec<(String, String)> = command
        .environment_variables
        .iter()
        .map(|v| (v.name.clone(), v.value.clone()))
        .collect();
    let cwd = format!("/{wd}");
    let running = Instant::now();
    let tool_name = argv0.rsplit('/').next().unwrap_or(argv0);
    let ended = match Tool::named(tool_name) {
        // clang.wasm as the tool it is named after, as `wasm9p cc` runs it.
        Some(tool) => Invocation {
            host: &host,
            namespace: Some(namespace.clone()),
            env,
            cwd: Path::new(&cwd),
            usr: None,
            tmp: &tmp,
            io: Io::Client {
                stdin: Input::Empty,
                stdout: out.sink(),
                stderr: err.sink(),
                cancel: stop.clone(),
            },
            memory_limit: Some(shared.memory_limit),
        }
        .run(tool, &command.arguments[1..]),
        None => {
            let guest = Guest::new(command.arguments.clone())
                .env(&env)
                .namespace(namespace.clone())
                .working_dir(Some(&cwd))
                .memory_limit(Some(shared.memory_limit))
                .cancel(stop.clone())
                .stdio(Stdio::Given {
                    stdin: Input::Empty,
                    stdout: Output::Stream(out.sink()),
                    stderr: Output::Stream(err.sink()),
                });
            let finished = host.run(guest);
            if let (_, Some(trap)) = exit_code(&finished.outcome) {
                err.push(format!("wasm9p: the guest trapped: {trap}\n").as_bytes());
            }
            finished.outcome
        }
    };
    let code = i32::from(ended.exit_code());
    stats.run_ms = running.elapsed().as_millis() as u64;
    stats.exit_code = Some(code);
    drop(watch);
    let layer = fs.stats();
    stats.files_read = layer.files_read;
    stats.bytes_of_files_read = layer.bytes_of_files_read;
    stats.rpcs_9p = mount.stats().rpc_total;
    drop(namespace);
    drop(mount);

    if work.cancel.load(Ordering::Relaxed) {
        return Err(Outcome::error(
            code::CANCELLED,
            "the scheduler took the lease back",
        ));
    }
    if let Some((path, e)) = fs.unfetched().into_iter().next() {
        return Err(fetch_failed_at(&path, e));
    }
    // Known by the engine's limiter, never by what the guest printed.
    if let Ended::MemoryLimit(reached) = ended {
        return Err(Outcome::error(
            code::RESOURCE_EXHAUSTED,
            format!(
                "the guest went over the worker's --memory-limit of {} bytes: {reached}",
                reached.limit
            ),
        ));
    }
    let mut collected = outputs::collect(&fs, &command).map_err(output_failed)?;
    if collected.bytes > shared.output_limit {
        return Err(Outcome::error(
            code::RESOURCE_EXHAUSTED,
            format!(
                "the outputs are over the worker's {} bytes",
                shared.output_limit
            ),
        ));
    }
    collected.result.exit_code = code;
    collected.result.stdout_digest = collected.add_stream(out.take());
    collected.result.stderr_digest = collected.add_stream(err.take());
    collected.result.execution_metadata = Some(v2::ExecutedActionMetadata {
        worker: shared.name.clone(),
        ..Default::default()
    });
    rt.block_on(shared.cas.upload(collected.blobs))
        .map_err(|e| Outcome::error(code::UNAVAILABLE, format!("uploading the outputs: {e}")))?;
    let result = prost_types::Any {
        type_url: RESULT_TYPE.into(),
        value: collected.result.encode_to_vec(),
    };
    if timed_out.load(Ordering::Relaxed) {
        let secs = timeout.map_or(0.0, |t| t.as_secs_f64());
        return Ok(Outcome {
            result: Some(result),
            status: wasm9p_remote::apis::workers::rpc::Status {
                code: code::DEADLINE_EXCEEDED,
                message: format!("the action ran past its timeout of {secs} s"),
                details: Vec::new(),
            },
        });
    }
    Ok(Outcome {
        result: Some(result),
        status: Default::default(),
    })
}

/// The digest of the program `argv0` names: a file of the input root, found from the
/// working directory `wd`, symlinks followed (inside the root, at most 40).
fn program_in(tree: &InputTree, wd: &str, argv0: &str) -> Result<Digest, Failed> {
    let not_there = || {
        invalid(format!(
            "arguments[0] {argv0:?} is not a file of the input root"
        ))
    };
    let mut path = match argv0.strip_prefix('/') {
        Some(absolute) => absolute.to_owned(),
        None => outputs::output_path(wd, argv0).map_err(|_| not_there())?,
    };
    for _ in 0..40 {
        let index = tree.find(&path).ok_or_else(not_there)?;
        match &tree.node(index).0 {
            TreeNode::File { digest, .. } => return Ok(*digest),
            TreeNode::Symlink { target } => {
                let dir = path.rsplit_once('/').map_or("", |(d, _)| d).to_owned();
                path = match target.strip_prefix('/') {
                    Some(absolute) => absolute.to_owned(),
                    None => outputs::output_path(&dir, target).map_err(|_| not_there())?,
                };
            }
            TreeNode::Dir { .. } => return Err(not_there()),
        }
    }
    Err(not_there())
}

/// The input root at `/` (over 9P, from `fs`) and `tmp` at `/tmp`: the namespace, and
/// the 9p mount (for its counters).
async fn namespace(
    fs: Arc<ActionFs>,
    tmp: &Path,
) -> Result<
    (
        Arc<Namespace>,
        Arc<wasm9p_guest_fs::backend::ninep::NinepFs>,
    ),
    String,
> {
    let (client_end, server_end) = wasm9p_proto::transport::duplex();
    tokio::spawn(wasm9p_server::nodes::serve(fs, server_end));
    let options = NinepOptions::parse([("cache", Some("loose"))]).map_err(|e| e.to_string())?;
    let mount = crate::mounts::attach_in_process(client_end, &options).await?;
    let mut ns = Namespace::new();
    ns.mount("/", mount.clone(), false)
        .map_err(|e| format!("/: {e}"))?;
    let tmp = BindFs::open(tmp).map_err(|e| format!("/tmp: {e}"))?;
    ns.mount("/tmp", Arc::new(tmp), false)
        .map_err(|e| format!("/tmp: {e}"))?;
    Ok((Arc::new(ns), mount))
}

/// Sets `stop` when `cancel` is set (the scheduler took the lease back) or `timeout`
/// passes (then `timed_out` too); ends when dropped.
fn watchdog(
    cancel: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    timed_out: Arc<AtomicBool>,
    timeout: Option<Duration>,
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
    let _ = std::thread::Builder::new()
        .name("wasm9p-lease-watch".into())
        .spawn(move || {
            while !finished.load(Ordering::Relaxed) {
                if cancel.load(Ordering::Relaxed) {
                    stop.store(true, Ordering::Relaxed);
                    return;
                }
                if timeout.is_some_and(|t| started.elapsed() >= t) {
                    timed_out.store(true, Ordering::Relaxed);
                    stop.store(true, Ordering::Relaxed);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
    Guard(done)
}

/// A guest stream kept in memory, at most `limit` bytes (the rest dropped, silently:
/// the guest's writes still succeed).
#[derive(Clone)]
struct Captured {
    bytes: Arc<Mutex<Vec<u8>>>,
    limit: u64,
}

impl Captured {
    fn new(limit: u64) -> Captured {
        Captured {
            bytes: Arc::default(),
            limit,
        }
    }

    fn push(&self, data: &[u8]) {
        let mut bytes = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        let room = (self.limit as usize).saturating_sub(bytes.len());
        bytes.extend_from_slice(&data[..data.len().min(room)]);
    }

    fn sink(&self) -> Sink {
        let me = self.clone();
        Sink(Arc::new(move |data: &[u8]| {
            me.push(data);
            Ok(())
        }))
    }

    fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.bytes.lock().unwrap_or_else(|e| e.into_inner()))
    }
}
