//! The worker's guests run in slot processes ([`crate::slot`]), one action at a time
//! each, as many as actions run at once: [`Slots`] is how `wasm9p-remote` runs them
//! ([`Guests`]).
//!
//! - **Why processes.** A guest must be stoppable mid-computation (a timeout, a lease
//!   taken back). In a thread that takes epoch checks in the guest's code, 12-15 % of
//!   a compile (BENCHMARKS §10); a process is killed (SIGKILL) and costs nothing while
//!   it runs. A guest that brings its process down fails its own action only.
//! - **What a slot keeps.** Its programs, loaded once from the module cache, and the
//!   pages of input files its actions read (`crate::programs`): a slot lives from the
//!   first action that needs it to the worker's end, or until it is killed; the next
//!   action that needs one starts another. The worker's `--page-cache-size` is shared
//!   out among `--jobs` slots.
//! - **An action's input root** is served by the worker (its `ActionFs`, the content
//!   store, the lazy fetches and their waits) on a Unix socket in the worker's private
//!   directory (mode 0700), to the slot's process alone (checked by its pid); the slot
//!   mounts it `cache=loose`. Its stdout and stderr are files there, read back after.
//! - Slots are in a process group of their own, so a terminal's Ctrl-C reaches the
//!   worker, which drains, and not its running guests. A slot whose worker is gone
//!   ends at once (its stdin ends).

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use wasm9p_remote::action::{Captured, Ended, GuestCounts, GuestRun, Guests, NotLoaded, Ran};
use wasm9p_remote::Digest;

use crate::protocol::{self, ModuleFile, Reply, Request, RunRequest};

/// How often a slot's reply is looked for while its guest may be stopped.
const CANCEL_POLL: Duration = Duration::from_millis(10);
/// How long an idle slot has to end at the worker's end (handing its compiles on).
const END_GRACE: Duration = Duration::from_secs(30);

/// How a slot process is started: a program and its arguments, which make it run
/// [`crate::slot::serve_slot`] (`wasm9p worker-slot --module-cache DIR ...`).
#[derive(Clone, Debug)]
pub struct SlotCommand {
    /// The program.
    pub exe: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
}

/// The worker's slot processes.
pub struct Slots {
    command: SlotCommand,
    /// Sockets and stream files, the worker's alone.
    dir: tempfile::TempDir,
    idle: Mutex<Vec<Slot>>,
    /// Guests run so far (their files are named after it).
    runs: AtomicUsize,
    /// Where input roots are served.
    runtime: tokio::runtime::Handle,
}

impl Slots {
    /// Slots started by `command`, the input roots served on `runtime`.
    pub fn new(command: SlotCommand, runtime: tokio::runtime::Handle) -> Result<Slots, String> {
        let dir = tempfile::Builder::new()
            .prefix("wasm9p-worker-")
            .tempdir()
            .map_err(|e| format!("a directory for the slots' sockets: {e}"))?;
        Ok(Slots {
            command,
            dir,
            idle: Mutex::default(),
            runs: AtomicUsize::new(0),
            runtime,
        })
    }

    /// `request` sent to an idle slot, or to a new one: the slot, to be answered. An
    /// idle slot found dead (killed, crashed) is replaced: nothing was lost with it.
    fn sent(&self, request: &Request) -> Result<Slot, String> {
        let line = protocol::line_of(request);
        loop {
            let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let Some(mut slot) = idle else { break };
            if slot.send(&line).is_ok() {
                return Ok(slot);
            }
        }
        let mut slot = self.start()?;
        slot.send(&line)
            .map_err(|e| format!("the slot process {} cannot be asked: {e}", slot.child.id()))?;
        Ok(slot)
    }

    /// A new slot process.
    fn start(&self) -> Result<Slot, String> {
        let mut child = Command::new(&self.command.exe)
            .args(&self.command.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start a slot process: {e}"))?;
        let (Some(to), Some(from)) = (child.stdin.take(), child.stdout.take()) else {
            unreachable!("both piped");
        };
        Ok(Slot {
            child,
            to: Some(to),
            from: BufReader::new(from),
        })
    }

    /// `slot` is idle again (the most recently used is taken first: its caches are
    /// the warmest).
    fn put(&self, slot: Slot) {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(slot);
    }

    /// Ends every idle slot (the worker is stopping): each hands its unfinished
    /// optimized compiles on and exits; one that takes too long is killed.
    pub fn finish(&self) {
        let mut ending = std::mem::take(&mut *self.idle.lock().unwrap_or_else(|e| e.into_inner()));
        for slot in &mut ending {
            slot.to.take(); // its stdin ends
        }
        let deadline = Instant::now() + END_GRACE;
        while !ending.is_empty() && Instant::now() < deadline {
            ending.retain_mut(|slot| matches!(slot.child.try_wait(), Ok(None)));
            std::thread::sleep(Duration::from_millis(20));
        }
        // Those left are killed as they are dropped.
    }

    /// The socket and stream files of the `n`th guest run.
    fn paths(&self, n: usize) -> (PathBuf, PathBuf, PathBuf) {
        let at = |what: &str| self.dir.path().join(format!("{n}.{what}"));
        (at("sock"), at("out"), at("err"))
    }
}

impl Guests for Slots {
    /// The module's content-store file and digest: every slot loads it by them.
    type Program = ModuleFile;

    fn load(&self, module: Digest, path: &Path) -> Result<ModuleFile, NotLoaded> {
        let module = ModuleFile {
            path: path.to_owned(),
            sha256: module.sha256(),
        };
        let mut slot = self
            .sent(&Request::Load(module.clone()))
            .map_err(NotLoaded::Worker)?;
        let answer = slot.answer(None).map_err(NotLoaded::Worker)?;
        let loaded = match answer {
            Some(Reply::Loaded) => Ok(module),
            Some(Reply::NotFetched) => Err(NotLoaded::NotFetched),
            Some(Reply::NotAProgram(why)) => Err(NotLoaded::NotAProgram(why)),
            other => return Err(NotLoaded::Worker(format!("a slot answered {other:?}"))),
        };
        self.put(slot);
        loaded
    }

    fn run(&self, module: &ModuleFile, run: GuestRun<'_>) -> Result<Ran, String> {
        let (socket, stdout, stderr) = self.paths(self.runs.fetch_add(1, Ordering::Relaxed));
        let _gone_after = Removed([&socket, &stdout, &stderr]);
        for stream in [&stdout, &stderr] {
            std::fs::File::create(stream).map_err(|e| format!("{}: {e}", stream.display()))?;
        }
        let _ = std::fs::remove_file(&socket);
        // Bound before the slot is asked: it connects as soon as it reads the request.
        let listener = {
            let _in = self.runtime.enter();
            tokio::net::UnixListener::bind(&socket)
                .map_err(|e| format!("{}: {e}", socket.display()))?
        };
        let mut slot = self.sent(&Request::Run(RunRequest {
            module: module.clone(),
            argv: run.argv.to_vec(),
            env: run.env.to_vec(),
            working_dir: run.working_dir.to_owned(),
            socket: socket.clone(),
            tmp: run.tmp.to_owned(),
            stdout: stdout.clone(),
            stderr: stderr.clone(),
            output_limit: run.stdout.limit(),
            memory_limit: run.memory_limit,
        }))?;
        let pid = slot.child.id() as i32;
        let fs = run.fs.clone();
        let serving = self.runtime.spawn(async move {
            // The slot's process alone is served.
            while let Ok((stream, _)) = listener.accept().await {
                if stream.peer_cred().ok().and_then(|c| c.pid()) == Some(pid) {
                    drop(listener);
                    return wasm9p_server::nodes::serve(fs, Box::new(stream)).await;
                }
            }
        });
        let answer = slot.answer(Some(&run.cancel));
        serving.abort();
        // What the guest wrote, also when it was stopped.
        let kept = |file: &Path, into: &Captured| -> Result<(), String> {
            let mut bytes = Vec::new();
            std::fs::File::open(file)
                .and_then(|f| f.take(into.limit()).read_to_end(&mut bytes))
                .map_err(|e| format!("{}: {e}", file.display()))?;
            into.push(&bytes);
            Ok(())
        };
        kept(&stdout, &run.stdout)?;
        kept(&stderr, &run.stderr)?;
        match answer? {
            // Stopped: the slot was killed with its guest.
            None => Ok(Ran {
                ended: Ended::Stopped,
                counts: GuestCounts::default(),
            }),
            Some(Reply::Ran(ran)) => {
                self.put(slot);
                Ok(ran)
            }
            Some(Reply::Failed(why)) => {
                self.put(slot);
                Err(why)
            }
            Some(other) => Err(format!("a slot answered {other:?}")),
        }
    }
}

/// Files removed when it is dropped: a guest run's socket and streams.
struct Removed<'a>([&'a PathBuf; 3]);

impl Drop for Removed<'_> {
    fn drop(&mut self) {
        for path in self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A slot process and its pipes. Dropped, it is killed.
struct Slot {
    child: Child,
    /// None once the slot was told to end.
    to: Option<ChildStdin>,
    from: BufReader<ChildStdout>,
}

impl Slot {
    /// Sends the request `line`.
    fn send(&mut self, line: &str) -> std::io::Result<()> {
        let to = self.to.as_mut().ok_or(std::io::ErrorKind::BrokenPipe)?;
        to.write_all(line.as_bytes())?;
        to.flush()
    }

    /// Waits for the reply to the request sent; `None` when `cancel` was set first
    /// (the slot is then killed: drop it). An error is one line: the slot is broken.
    fn answer(&mut self, cancel: Option<&AtomicBool>) -> Result<Option<Reply>, String> {
        let pid = self.child.id();
        let broken = move |e: String| format!("the slot process {pid}: {e}");
        if let Some(cancel) = cancel {
            while !self.answered(CANCEL_POLL) {
                if cancel.load(Ordering::Relaxed) {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Ok(None);
                }
            }
        }
        let mut line = String::new();
        match self.from.read_line(&mut line) {
            Ok(n) if n > 0 => protocol::parse::<Reply>(&line)
                .map(Some)
                .map_err(|e| broken(format!("answered {line:?}: {e}"))),
            Ok(_) => {
                let status = self.child.wait().map(|s| s.to_string());
                Err(broken(format!(
                    "ended with its guest running: {}",
                    status.unwrap_or_else(|e| e.to_string())
                )))
            }
            Err(e) => Err(broken(e.to_string())),
        }
    }

    /// Whether the reply (or the end of the slot's stdout) can be read, within
    /// `wait`.
    fn answered(&self, wait: Duration) -> bool {
        if !self.from.buffer().is_empty() {
            return true;
        }
        let timeout = Timespec {
            tv_sec: wait.as_secs() as _,
            tv_nsec: wait.subsec_nanos() as _,
        };
        let mut fds = [PollFd::new(self.from.get_ref(), PollFlags::IN)];
        // EINTR and the like: as if not yet, the next poll tells.
        poll(&mut fds, Some(&timeout)).is_ok_and(|n| n > 0)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
