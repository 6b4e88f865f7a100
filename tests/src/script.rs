//! A doc's shell walkthrough run as written: `bash -e -c SCRIPT` in a directory, in a
//! process group of its own, its output in files there, within a time limit.

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How a script run ended.
pub struct ScriptRun {
    /// Its exit status; `None` when it ran past the limit.
    pub status: Option<ExitStatus>,
    /// Its stdout and stderr, labelled, for an assertion's message.
    pub said: String,
    /// Its process group, still there for the caller to stop (what it started in the
    /// background lives on in it).
    pub group: u32,
}

/// Runs `script` with `bash -e` in `dir` with `env` set, for at most `limit`; its
/// output goes to `dir`'s `out.log` and `err.log`.
pub fn run_script(dir: &Path, script: &str, env: &[(&str, &Path)], limit: Duration) -> ScriptRun {
    let mut bash = Command::new("bash");
    bash.args(["-e", "-c", script])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("out.log")).unwrap())
        .stderr(std::fs::File::create(dir.join("err.log")).unwrap());
    for (key, value) in env {
        bash.env(key, value);
    }
    let mut bash = std::os::unix::process::CommandExt::process_group(&mut bash, 0)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = bash.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    ScriptRun {
        status,
        said: format!("stdout:\n{}\nstderr:\n{}", log("out.log"), log("err.log")),
        group: bash.id(),
    }
}
