//! One invocation of a tool: its guests, in order, on a prepared host, with the stdio
//! of whoever asked (this process's own, or a daemon client's).

use std::io::Write;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::{depfile, jobs, Tool};
use crate::engine::{Finished, Guest, GuestEngine, Outcome, Stdio};
use crate::p1::{Input, Output, Sink};

/// Whose stdio the guests get.
pub enum Io {
    /// This process's.
    Local,
    /// A daemon client's: its stdin's bytes, its stdout and stderr as streams, and the
    /// flag that is set when it goes away.
    Client {
        /// What the guests read on stdin (a first guest may use it up).
        stdin: Input,
        /// Where their stdout goes.
        stdout: Sink,
        /// Where their stderr, and the invocation's own lines, go.
        stderr: Sink,
        /// Set when the client goes away: the running guest is stopped.
        cancel: Arc<AtomicBool>,
    },
}

/// One invocation's guests: where they run and what they see.
pub struct Invocation<'a> {
    /// The engine (with its mounts, unless `namespace` is given) the guests run on.
    pub host: &'a GuestEngine,
    /// The namespace they see (`None`: the host's mounts).
    pub namespace: Option<Arc<wasm9p_guest_fs::namespace::Namespace>>,
    /// The guests' environment.
    pub env: Vec<(String, String)>,
    /// The working directory: a guest path, which under `wasm9p cc` is the host's
    /// own (inside the root).
    pub cwd: &'a Path,
    /// The toolchain's `usr` on the host (the guest's `/usr`) that dependency files
    /// are pointed at (`None`: they stay as the guest wrote them).
    pub usr: Option<&'a Path>,
    /// The host directory behind the guest's `/tmp`.
    pub tmp: &'a Path,
    /// Whose stdio the guests get.
    pub io: Io,
    /// The most bytes each guest's memory may take.
    pub memory_limit: Option<usize>,
}

impl Invocation<'_> {
    /// Runs `tool` on `args`: how it ended, whose [`Outcome::exit_code`] is the one
    /// the native tool would give (the outcome of the job that failed, if one did).
    pub fn run(&self, tool: Tool, args: &[String]) -> Outcome {
        match tool {
            Tool::Driver(driver) => self.driver(driver, args),
            Tool::Direct(direct) => self.job(guest_argv(direct, args), direct),
        }
    }

    fn stdio(&self) -> Stdio {
        match &self.io {
            Io::Local => Stdio::Inherit,
            Io::Client {
                stdin,
                stdout,
                stderr,
                ..
            } => Stdio::Given {
                stdin: stdin.clone(),
                stdout: Output::Stream(stdout.clone()),
                stderr: Output::Stream(stderr.clone()),
            },
        }
    }

    /// Prints on the invocation's stdout (`err == false`) or stderr.
    fn print(&self, err: bool, bytes: &[u8]) {
        match &self.io {
            Io::Local if err => {
                let _ = std::io::stderr().lock().write_all(bytes);
            }
            Io::Local => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(bytes).and_then(|()| out.flush());
            }
            Io::Client { stdout, stderr, .. } => {
                let _ = (if err { stderr } else { stdout }.0)(bytes);
            }
        }
    }

    fn say(&self, line: &str) {
        self.print(true, format!("{line}\n").as_bytes());
    }

    /// Runs one guest in the session's working directory.
    fn run_guest(&self, argv: Vec<String>, stdio: Stdio) -> Finished {
        let cwd = self.cwd.display().to_string();
        let mut guest = Guest::new(argv)
            .env(&self.env)
            .stdio(stdio)
            .working_dir(Some(&cwd))
            .memory_limit(self.memory_limit);
        if let Some(namespace) = &self.namespace {
            guest = guest.namespace(Arc::clone(namespace));
        }
        if let Io::Client { cancel, .. } = &self.io {
            guest = guest.cancel(Arc::clone(cancel));
        }
        self.host.run(guest)
    }

    /// Runs one guest: how it ended (reported in one line if it did not exit).
    fn job(&self, argv: Vec<String>, tool: &str) -> Outcome {
        let finished = self.run_guest(argv, self.stdio());
        if let Some(trap) = finished.outcome.reason() {
            // `WASM9P_TRAP_DETAIL=1`, as for `wasm9p run`: the trap whole, with the
            // guest's wasm backtrace.
            if let (Outcome::Trapped(e), Some(_)) =
                (&finished.outcome, std::env::var_os("WASM9P_TRAP_DETAIL"))
            {
                self.say(&format!("{e:?}"));
            }
            self.say(&format!("wasm9p: {tool} trapped: {trap}"));
        }
        finished.outcome
    }

    /// The driver on `args`, job by job: as [`Invocation::run`].
    fn driver(&self, driver: &str, args: &[String]) -> Outcome {
        // Asked to print the jobs: that is the driver's alone.
        if args.iter().any(|a| a == "-###") {
            return self.job(guest_argv(driver, args), driver);
        }
        let mut planning = vec!["-###".to_owned()];
        planning.extend(args.iter().cloned());
        let planned = self.run_guest(guest_argv(driver, &planning), Stdio::Capture);
        let (stdout, stderr) = (planned.stdout, planned.stderr);
        let plan = jobs::plan(&String::from_utf8_lossy(&stderr));
        if !planned.outcome.succeeded() || plan.jobs.is_empty() {
            // A query (--version, -print-*) or a mistake in the arguments: the driver
            // answers it run plainly.
            return self.job(guest_argv(driver, args), driver);
        }
        self.print(false, &stdout);
        if args.iter().any(|a| a == "-v") {
            self.print(true, &stderr);
        } else {
            for line in &plan.messages {
                self.say(line);
            }
        }
        let ended = self.jobs(driver, &plan.jobs);
        self.remove_temporaries(&plan.jobs);
        ended
    }

    /// Runs the jobs in order, up to the first that fails (whose outcome it is).
    fn jobs(&self, driver: &str, jobs: &[jobs::Job]) -> Outcome {
        for job in jobs {
            let ended = self.job(job.guest_argv(), driver);
            let code = ended.exit_code();
            if code != 0 {
                if !job.in_process() {
                    self.say(&format!(
                        "{driver}: error: {} command failed with exit code {code} (use -v to \
                         see invocation)",
                        job.what()
                    ));
                }
                return ended;
            }
            if let Some(deps) = job.dependency_file() {
                if let Err(e) = self.deps_to_host(deps) {
                    self.say(&format!(
                        "{driver}: error: cannot rewrite the dependency file {deps}: {e}"
                    ));
                    return Outcome::Exited(1);
                }
            }
        }
        Outcome::Exited(0)
    }

    /// Points the dependency file a job wrote at the host's toolchain headers.
    fn deps_to_host(&self, deps: &str) -> std::io::Result<()> {
        let Some(usr) = self.usr else {
            return Ok(());
        };
        let path = match deps.strip_prefix("/tmp/") {
            Some(name) => self.tmp.join(name),
            None => self.cwd.join(deps),
        };
        let text = std::fs::read_to_string(&path)?;
        let host = depfile::to_host(&text, usr);
        if host != text {
            std::fs::write(&path, host)?;
        }
        Ok(())
    }

    /// Removes the driver's temporary files (the objects of a compile-and-link), as
    /// the native driver does once its jobs are done.
    fn remove_temporaries(&self, jobs: &[jobs::Job]) {
        for job in jobs {
            for word in &job.words {
                let Some(name) = word.strip_prefix("/tmp/") else {
                    continue;
                };
                if !name.is_empty() && !name.contains('/') {
                    let _ = std::fs::remove_file(self.tmp.join(name));
                }
            }
        }
    }
}

/// The guest's argv for clang.wasm's `tool`.
fn guest_argv(tool: &str, args: &[String]) -> Vec<String> {
    ["llvm", tool]
        .into_iter()
        .map(String::from)
        .chain(args.iter().cloned())
        .collect()
}
