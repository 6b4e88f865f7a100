//! `wasm9p worker-slot`: the process a worker runs its guests in, one at a time, and
//! the lines the two say to each other.
//!
//! The worker starts a slot when it has an action and no idle slot, with pipes for
//! stdin and stdout (its stderr is the worker's), and kills it (SIGKILL) to stop its
//! guest: a timeout, a lease taken back. So the guest's code needs no epoch checks,
//! and a guest that brings down its process takes no other action with it.
//!
//! One JSON request a line on stdin, one JSON reply a line on stdout:
//! - `{"load": {"module": PATH, "sha256": HEX}}`: load the module (a content-store
//!   file, whose bytes have that digest, and which may not have been fetched yet);
//!   `{"loaded": true}`, `{"not_fetched": true}` (its compiled code is not kept, and
//!   its file is not there) or `{"not_a_program": WHY}`.
//! - `{"run": {"module", "sha256", "argv", "env", "working_dir", "socket", "tmp",
//!   "stdout", "stderr", "output_limit", "memory_limit"}}`: run a guest on the input
//!   root the worker serves on `socket`, its streams into the files `stdout` and
//!   `stderr` (at most `output_limit` bytes each); `{"ended": ..., "rpcs_9p",
//!   "reads_9p", "shared_page_hits", "shared_metadata_hits"}` or `{"failed": WHY}` (it
//!   could not start).
//!
//! At the end of its stdin the slot ends: at once when it has a guest running (the
//! worker is gone), else after handing its unfinished optimized compiles on.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use clap::Args;
use serde_json::{json, Value};
use wasm9p_remote::action::{Ended, Ran};

use super::tools::{NoProgram, SlotRun, Tools};
use crate::shared::{fail, parse_bytes};
use wasm9p_host::p1::Sink;

/// `wasm9p worker-slot` (started by `wasm9p worker`, not by hand).
#[derive(Debug, Args)]
pub struct SlotArgs {
    /// Where compiled modules are kept.
    #[arg(long, value_name = "DIR")]
    pub module_cache: PathBuf,
    /// The most bytes of input files' pages and input trees' metadata this slot keeps
    /// for its actions.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub page_cache_size: u64,
}

/// What the worker asks of a slot.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Request {
    Load(ModuleFile),
    Run(RunRequest),
}

/// A module: the content-store file of its bytes (fetched or not), and their SHA-256.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct ModuleFile {
    pub path: PathBuf,
    pub sha256: [u8; 32],
}

/// A guest to run (see the module's doc).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct RunRequest {
    pub module: ModuleFile,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: String,
    pub socket: PathBuf,
    pub tmp: PathBuf,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    pub output_limit: u64,
    pub memory_limit: usize,
}

/// What a slot answers.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Reply {
    Loaded,
    NotFetched,
    NotAProgram(String),
    Ran(Ran),
    Failed(String),
}

impl Request {
    pub(super) fn to_line(&self) -> String {
        let path = |p: &PathBuf| p.to_string_lossy().into_owned();
        let json = match self {
            Request::Load(module) => json!({ "load": {
                "module": path(&module.path),
                "sha256": hex::encode(module.sha256),
            }}),
            Request::Run(r) => json!({ "run": {
                "module": path(&r.module.path),
                "sha256": hex::encode(r.module.sha256),
                "argv": r.argv,
                "env": r.env,
                "working_dir": r.working_dir,
                "socket": path(&r.socket),
                "tmp": path(&r.tmp),
                "stdout": path(&r.stdout),
                "stderr": path(&r.stderr),
                "output_limit": r.output_limit,
                "memory_limit": r.memory_limit,
            }}),
        };
        format!("{json}\n")
    }

    pub(super) fn parse(line: &str) -> Result<Request, String> {
        let json: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        if let Some(load) = json.get("load") {
            return ModuleFile::parse(load).map(Request::Load);
        }
        let r = json.get("run").ok_or("neither load nor run")?;
        let strings = |v: &Value| -> Option<Vec<String>> {
            v.as_array()?
                .iter()
                .map(|s| s.as_str().map(str::to_owned))
                .collect()
        };
        let pairs = |v: &Value| -> Option<Vec<(String, String)>> {
            v.as_array()?
                .iter()
                .map(|kv| Some((kv.get(0)?.as_str()?.into(), kv.get(1)?.as_str()?.into())))
                .collect()
        };
        let path = |name| field(r, name, Value::as_str).map(PathBuf::from);
        Ok(Request::Run(RunRequest {
            module: ModuleFile::parse(r)?,
            argv: field(r, "argv", strings)?,
            env: field(r, "env", pairs)?,
            working_dir: field(r, "working_dir", Value::as_str)?.into(),
            socket: path("socket")?,
            tmp: path("tmp")?,
            stdout: path("stdout")?,
            stderr: path("stderr")?,
            output_limit: field(r, "output_limit", Value::as_u64)?,
            memory_limit: field(r, "memory_limit", Value::as_u64)? as usize,
        }))
    }
}

impl ModuleFile {
    /// The `module` and `sha256` of a request.
    fn parse(json: &Value) -> Result<ModuleFile, String> {
        let mut sha256 = [0u8; 32];
        hex::decode_to_slice(field(json, "sha256", Value::as_str)?, &mut sha256)
            .map_err(|e| format!("sha256: {e}"))?;
        Ok(ModuleFile {
            path: field(json, "module", Value::as_str)?.into(),
            sha256,
        })
    }
}

impl Reply {
    pub(super) fn to_line(&self) -> String {
        let json = match self {
            Reply::Loaded => json!({ "loaded": true }),
            Reply::NotFetched => json!({ "not_fetched": true }),
            Reply::NotAProgram(why) => json!({ "not_a_program": why }),
            Reply::Failed(why) => json!({ "failed": why }),
            Reply::Ran(ran) => json!({
                "ended": match &ran.ended {
                    Ended::Exited(code) => json!({ "exited": code }),
                    Ended::MemoryLimit(why) => json!({ "memory_limit": why }),
                    Ended::Stopped => json!("stopped"),
                    Ended::Trapped(why) => json!({ "trapped": why }),
                },
                "rpcs_9p": ran.rpcs_9p,
                "reads_9p": ran.reads_9p,
                "shared_page_hits": ran.shared_page_hits,
                "shared_metadata_hits": ran.shared_metadata_hits,
            }),
        };
        format!("{json}\n")
    }

    pub(super) fn parse(line: &str) -> Result<Reply, String> {
        let json: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        let text = |name| field(&json, name, Value::as_str).map(str::to_owned);
        if json.get("loaded").is_some() {
            return Ok(Reply::Loaded);
        }
        if json.get("not_fetched").is_some() {
            return Ok(Reply::NotFetched);
        }
        if json.get("not_a_program").is_some() {
            return text("not_a_program").map(Reply::NotAProgram);
        }
        if json.get("failed").is_some() {
            return text("failed").map(Reply::Failed);
        }
        let ended = json.get("ended").ok_or("no ended")?;
        let ended = if ended.as_str() == Some("stopped") {
            Ended::Stopped
        } else if let Some(code) = ended.get("exited") {
            Ended::Exited(code.as_i64().ok_or("a bad exit code")? as i32)
        } else if ended.get("memory_limit").is_some() {
            Ended::MemoryLimit(field(ended, "memory_limit", Value::as_str)?.into())
        } else {
            Ended::Trapped(field(ended, "trapped", Value::as_str)?.into())
        };
        Ok(Reply::Ran(Ran {
            ended,
            rpcs_9p: field(&json, "rpcs_9p", Value::as_u64)?,
            reads_9p: field(&json, "reads_9p", Value::as_u64)?,
            shared_page_hits: field(&json, "shared_page_hits", Value::as_u64)?,
            shared_metadata_hits: field(&json, "shared_metadata_hits", Value::as_u64)?,
        }))
    }
}

/// `json`'s `name`, as `read` reads it.
fn field<'a, T>(
    json: &'a Value,
    name: &str,
    read: impl Fn(&'a Value) -> Option<T>,
) -> Result<T, String> {
    json.get(name)
        .and_then(read)
        .ok_or_else(|| format!("no {name}, or not of its kind"))
}

/// Runs a slot until its stdin ends.
pub fn worker_slot(args: SlotArgs) -> ExitCode {
    let tools = Tools::new(args.module_cache, args.page_cache_size);
    // Set from a request read to its reply written: the worker going away then
    // ends the slot at once, its guest with it.
    let busy = Arc::new(AtomicBool::new(false));
    let (requests, next) = mpsc::channel::<String>();
    let reading = busy.clone();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            reading.store(true, Ordering::SeqCst);
            if requests.send(line).is_err() {
                return;
            }
        }
        if reading.load(Ordering::SeqCst) {
            std::process::exit(1);
        }
        // Dropping `requests` ends the loop below.
    });
    // Replies go to the worker's pipe, and whatever else would be printed on stdout
    // to stderr, where it cannot pass for a reply.
    let pipe = rustix::io::fcntl_dupfd_cloexec(std::io::stdout(), 3)
        .and_then(|pipe| rustix::stdio::dup2_stdout(std::io::stderr()).map(|()| pipe));
    let mut replies = match pipe {
        Ok(pipe) => std::fs::File::from(pipe),
        Err(e) => return fail(1, &format!("worker-slot: its stdout: {e}")),
    };
    for line in next {
        let reply = match Request::parse(&line) {
            Err(e) => return fail(2, &format!("worker-slot: a bad request: {e}")),
            Ok(Request::Load(module)) => match tools.get(&module) {
                Ok(_) => Reply::Loaded,
                Err(NoProgram::NotFetched) => Reply::NotFetched,
                Err(NoProgram::NotLoaded(why)) => Reply::NotAProgram(why),
            },
            Ok(Request::Run(run)) => run_guest(&tools, run),
        };
        let written = replies.write_all(reply.to_line().as_bytes());
        busy.store(false, Ordering::SeqCst);
        if written.is_err() {
            break; // the worker is gone
        }
    }
    tools.finish();
    ExitCode::SUCCESS
}

/// Runs the guest `run` asks for.
fn run_guest(tools: &Tools, run: RunRequest) -> Reply {
    let engine = match tools.get(&run.module) {
        Ok(engine) => engine,
        Err(why) => return Reply::Failed(why.to_string()),
    };
    let stream = |path: &PathBuf| {
        file_sink(path, run.output_limit).map_err(|e| format!("{}: {e}", path.display()))
    };
    let (stdout, stderr) = match (stream(&run.stdout), stream(&run.stderr)) {
        (Ok(out), Ok(err)) => (out, err),
        (Err(e), _) | (_, Err(e)) => return Reply::Failed(e),
    };
    let ran = tools.run(
        &engine,
        SlotRun {
            argv: run.argv,
            env: run.env,
            working_dir: run.working_dir,
            socket: run.socket,
            tmp: run.tmp,
            stdout,
            stderr,
            memory_limit: run.memory_limit,
        },
    );
    match ran {
        Ok(ran) => Reply::Ran(ran),
        Err(why) => Reply::Failed(why),
    }
}

/// A guest stream written into the file `path` (the worker made it), at most `limit`
/// bytes; the rest is dropped without a word (the guest's writes still succeed).
fn file_sink(path: &PathBuf, limit: u64) -> std::io::Result<Sink> {
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    let kept = Mutex::new((file, 0u64));
    Ok(Sink(Arc::new(move |data: &[u8]| {
        let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
        let room = limit.saturating_sub(kept.1) as usize;
        let data = &data[..data.len().min(room)];
        kept.0.write_all(data)?;
        kept.1 += data.len() as u64;
        Ok(())
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_read_back_as_written() {
        let module = ModuleFile {
            path: "/cas/ab/cd".into(),
            sha256: [0xa7; 32],
        };
        let run = Request::Run(RunRequest {
            module: module.clone(),
            argv: vec!["bin/tool.wasm".into(), "a \"quoted\"\nline".into()],
            env: vec![("K".into(), "v=1".into())],
            working_dir: "/src".into(),
            socket: "/run/w/0.sock".into(),
            tmp: "/w/actions/a/tmp".into(),
            stdout: "/run/w/0.out".into(),
            stderr: "/run/w/0.err".into(),
            output_limit: 1 << 30,
            memory_limit: 4 << 30,
        });
        let load = Request::Load(module);
        for request in [run, load] {
            let line = request.to_line();
            assert_eq!(line.matches('\n').count(), 1, "one line: {line}");
            assert_eq!(Request::parse(&line).unwrap(), request);
        }
        let ran = |ended| {
            Reply::Ran(Ran {
                ended,
                rpcs_9p: 358,
                reads_9p: 2,
                shared_page_hits: 74,
                shared_metadata_hits: 203,
            })
        };
        for reply in [
            Reply::Loaded,
            Reply::NotFetched,
            Reply::NotAProgram("its module does not load: bad magic".into()),
            Reply::Failed("the action's mounts: refused".into()),
            ran(Ended::Exited(-3)),
            ran(Ended::Stopped),
            ran(Ended::MemoryLimit("asked 5 GiB".into())),
            ran(Ended::Trapped("wasm trap: unreachable".into())),
        ] {
            assert_eq!(Reply::parse(&reply.to_line()).unwrap(), reply);
        }
        assert!(Request::parse("{\"run\": {\"module\": 3}}").is_err());
        let short = r#"{"load": {"module": "/cas/ab/cd", "sha256": "a7a7"}}"#;
        assert!(Request::parse(short).is_err());
        assert!(Reply::parse("{}").is_err());
    }
}
