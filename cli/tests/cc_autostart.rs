//! The daemon `wasm9p cc` starts for itself (no `WASM9P_DAEMON`): two first calls at
//! once start one, later calls reuse it, it stops when idle, a killed one's socket is
//! replaced, `WASM9P_DAEMON=off` compiles in process, and a daemon that cannot be had
//! leaves the compile to the tool's own process after one warning line. Each test has
//! its own `XDG_RUNTIME_DIR`, so its daemons are its own.

mod cc_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use cc_support::*;

/// A project with two units, and a private runtime directory for the daemons.
struct Project {
    dir: tempfile::TempDir,
    run: tempfile::TempDir,
}

impl Project {
    fn new() -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.c"), "int a(void) { return 1; }\n").unwrap();
        std::fs::write(dir.path().join("b.c"), "int b(int x) { return x * 3; }\n").unwrap();
        Project {
            dir,
            run: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `wasm9p cc ARGS` as a build calls it: no `WASM9P_DAEMON`.
    fn cc(&self, args: &[&str], idle: &str) -> Command {
        let mut cmd = command(BIN, self.path(), self.path());
        cmd.env_remove("WASM9P_DAEMON")
            .env("XDG_RUNTIME_DIR", self.run.path())
            .env("WASM9P_DAEMON_IDLE_TIMEOUT", idle)
            .arg("cc")
            .args(args);
        cmd
    }

    fn compile(&self, unit: &str, object: &str, idle: &str) -> Output {
        let out = self
            .cc(&["-O2", "-c", unit, "-o", object], idle)
            .output()
            .unwrap();
        assert_ok(&format!("cc {unit}"), &out);
        out
    }

    fn object(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path().join(name)).unwrap()
    }

    /// The daemon sockets of the test's runtime directory.
    fn sockets(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(self.run.path().join("wasm9p")) else {
            return Vec::new();
        };
        entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "sock"))
            .collect()
    }

    /// The daemon's log (there must be one daemon's).
    fn log(&self) -> String {
        let logs = daemons_in(self.run.path());
        assert_eq!(logs.len(), 1, "{logs:?}");
        std::fs::read_to_string(&logs[0]).unwrap()
    }

    /// The process id of the daemon now serving, from its log.
    fn daemon_pid(&self) -> i32 {
        *daemon_pids(self.run.path())
            .last()
            .unwrap_or_else(|| panic!("no daemon served: {}", self.log()))
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        // The test's daemons go with it.
        stop_daemons(self.run.path());
    }
}

fn started(out: &Output) -> bool {
    text(&out.stderr).contains("started a daemon")
}

#[test]
fn two_first_calls_at_once_start_one_daemon_that_later_calls_reuse() {
    let project = Project::new();
    let calls: Vec<_> = [("a.c", "a.o"), ("b.c", "b.o")]
        .iter()
        .map(|(unit, object)| {
            project
                .cc(&["-O2", "-c", unit, "-o", object], "10m")
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Output> = calls
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for out in &outs {
        assert_ok("a first call", out);
    }
    assert_eq!(
        outs.iter().filter(|o| started(o)).count(),
        1,
        "{:?}",
        outs.iter().map(|o| text(&o.stderr)).collect::<Vec<_>>()
    );
    assert_eq!(project.sockets().len(), 1);
    let first = project.daemon_pid();
    // Later calls go to the same daemon, and make what a compile in process makes.
    let again = project.compile("a.c", "a2.o", "10m");
    assert!(!started(&again), "{}", text(&again.stderr));
    assert_eq!(project.daemon_pid(), first);
    assert_eq!(project.log().matches("daemon: serving").count(), 1);
    let mut here = project.cc(&["-O2", "-c", "a.c", "-o", "a3.o"], "10m");
    assert_ok(
        "in process",
        &here.env("WASM9P_DAEMON", "off").output().unwrap(),
    );
    assert_eq!(project.object("a.o"), project.object("a3.o"));
    assert_eq!(project.object("a2.o"), project.object("a3.o"));
    // The socket's directory is the user's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(project.run.path().join("wasm9p"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
}

#[test]
fn an_idle_daemon_stops_and_a_killed_one_s_socket_is_replaced() {
    let project = Project::new();
    let first = project.compile("a.c", "a.o", "2s");
    assert!(started(&first));
    // The starting call says the idle time the daemon was given.
    assert!(
        text(&first.stderr).contains("it stops after 2 s without a client"),
        "{}",
        text(&first.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !project.sockets().is_empty() {
        assert!(Instant::now() < deadline, "still there: {}", project.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(project.log().contains("no client for 2 s; stopping"));
    // The next call starts another.
    assert!(started(&project.compile("b.c", "b.o", "10m")));
    let pid = project.daemon_pid();
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(project.sockets().len(), 1, "its socket is left behind");
    let after = project.compile("a.c", "a2.o", "10m");
    assert!(started(&after), "{}", text(&after.stderr));
    assert_ne!(project.daemon_pid(), pid);
    assert_eq!(project.object("a.o"), project.object("a2.o"));
}

#[test]
fn off_compiles_in_process_and_no_daemon_to_be_had_falls_back_with_a_warning() {
    let project = Project::new();
    let mut off = project.cc(&["-O2", "-c", "a.c", "-o", "a.o"], "10m");
    let out = off.env("WASM9P_DAEMON", "off").output().unwrap();
    assert_ok("off", &out);
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
    assert!(project.sockets().is_empty());
    assert!(!project.run.path().join("wasm9p").exists());

    // A runtime directory too deep for a Unix socket's path: no daemon, one line, and
    // the compile done here all the same.
    let deep = project.run.path().join("d".repeat(120));
    std::fs::create_dir(&deep).unwrap();
    let mut cmd = project.cc(&["-O2", "-c", "a.c", "-o", "a2.o"], "10m");
    let out = cmd.env("XDG_RUNTIME_DIR", &deep).output().unwrap();
    assert_ok("no daemon", &out);
    let said = text(&out.stderr);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains("no daemon (") && said.contains("compiling in this process"),
        "{said}"
    );
    assert_eq!(project.object("a.o"), project.object("a2.o"));

    // A bad setting is an error, not a guess.
    let mut bad = project.cc(&["-c", "a.c"], "10m");
    let out = bad.env("WASM9P_DAEMON", "tcp:1.2.3.4:5").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("WASM9P_DAEMON"),
        "{}",
        text(&out.stderr)
    );
}
