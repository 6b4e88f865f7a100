//! `wasm9p daemon` and `wasm9p cc --daemon`: builds at once on one warm daemon, a
//! client killed mid-compile, another user, another root, and SIGTERM.

mod cc_support;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cc_support::*;

/// A running daemon and what it has said on stderr.
struct Daemon {
    child: Child,
    socket: PathBuf,
    said: Arc<Mutex<Vec<String>>>,
}

impl Daemon {
    fn start(root: &Path) -> Daemon {
        Daemon::start_with(root, &[])
    }

    fn start_with(root: &Path, options: &[&str]) -> Daemon {
        let socket = root.join("daemon.sock");
        let mut child = command(BIN, root, root)
            .arg("daemon")
            .arg("--listen")
            .arg(format!("unix:{}", socket.display()))
            .args(options)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let said = Arc::new(Mutex::new(Vec::new()));
        let lines = std::io::BufReader::new(child.stderr.take().unwrap());
        let keep = Arc::clone(&said);
        std::thread::spawn(move || {
            for line in lines.lines().map_while(Result::ok) {
                keep.lock().unwrap().push(line);
            }
        });
        let daemon = Daemon {
            child,
            socket,
            said,
        };
        daemon.wait_for("daemon: serving", Duration::from_secs(120));
        daemon
    }

    fn address(&self) -> String {
        format!("unix:{}", self.socket.display())
    }

    /// Waits until the daemon has said a line containing `what`.
    fn wait_for(&self, what: &str, most: Duration) {
        let start = Instant::now();
        while start.elapsed() < most {
            if self.said.lock().unwrap().iter().any(|l| l.contains(what)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "the daemon never said {what:?}: {:?}",
            self.said.lock().unwrap()
        );
    }

    /// `wasm9p cc ARGS` through the daemon, in `dir`. The client is given no
    /// toolchain: it can only succeed through the daemon's.
    fn cc(&self, dir: &Path, root: &Path, args: &[&str]) -> Command {
        let mut cmd = command(BIN, dir, root);
        cmd.env("WASM9P_DAEMON", self.address())
            .env("WASM9P_TOOLCHAIN", "/nonexistent")
            .arg("cc")
            .args(args);
        cmd
    }

    fn terminate(&self) {
        rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::TERM,
        )
        .unwrap();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits for `child` at most `most`: its exit status.
fn wait(child: &mut Child, most: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(start.elapsed() < most, "still running after {most:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A C file that takes clang.wasm a few seconds at -O2 (`functions` of them).
fn slow_source(path: &Path, functions: usize) {
    let text: String = (0..functions)
        .map(|i| {
            format!(
                "int f{i}(int *a, int n) {{ int s = 0; for (int i = 0; i < n; i++) {{ \
                 s += a[i] * {i} + (s >> 3); if (s > {i}) s -= a[(i + {i}) % n]; }} return s; }}\n"
            )
        })
        .collect();
    std::fs::write(path, text).unwrap();
}

#[test]
fn two_builds_at_once_run_on_one_daemon_as_they_would_alone() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    example_project(&a);
    example_project(&b);
    let daemon = Daemon::start(root.path());
    let spawn = |dir: &Path| {
        command("make", dir, root.path())
            .env("WASM9P_DAEMON", daemon.address())
            .env("WASM9P_TOOLCHAIN", "/nonexistent")
            .arg("-j2")
            .arg(format!("CC={BIN} cc"))
            .arg(format!("AR={BIN} ar"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (build_a, build_b) = (spawn(&a), spawn(&b));
    assert_ok("make in a", &build_a.wait_with_output().unwrap());
    assert_ok("make in b", &build_b.wait_with_output().unwrap());
    let native = shapes_natively();
    for dir in [&a, &b] {
        let out = run_program(&dir.join("out/shapes.wasm"), dir, &[]);
        assert_eq!(text(&out.stdout), native, "{}", dir.display());
    }
    for object in [
        "main.o",
        "parse.o",
        "shapes.o",
        "libshapes.a",
        "shapes.wasm",
    ] {
        let read = |dir: &Path| std::fs::read(dir.join("out").join(object)).unwrap();
        assert!(read(&a) == read(&b), "{object} differs between the builds");
    }

    // The same build without the daemon makes the same objects.
    let c = root.path().join("c");
    example_project(&c);
    assert_ok("make without the daemon", &make(&c, root.path(), &[], &[]));
    for object in ["main.o", "parse.o", "shapes.o"] {
        let read = |dir: &Path| std::fs::read(dir.join("out").join(object)).unwrap();
        assert!(read(&a) == read(&c), "{object}: the daemon's differs");
    }
}

#[test]
fn the_daemon_sees_a_header_edited_behind_its_back_at_the_next_compile() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    std::fs::write(dir.join("value.h"), "#define VALUE 1\n").unwrap();
    std::fs::write(
        dir.join("p.c"),
        "#include <stdio.h>\n#include \"value.h\"\nint main(void) { printf(\"%d\\n\", VALUE); return 0; }\n",
    )
    .unwrap();
    let daemon = Daemon::start(dir);
    let build_and_run = || {
        let out = daemon
            .cc(dir, dir, &["p.c", "-o", "p.wasm"])
            .output()
            .unwrap();
        assert_ok("cc through the daemon", &out);
        text(&run_program(&dir.join("p.wasm"), dir, &[]).stdout)
    };
    assert_eq!(build_and_run(), "1\n");
    // Same size, so only a check of the server can tell.
    std::fs::write(dir.join("value.h"), "#define VALUE 2\n").unwrap();
    assert_eq!(build_and_run(), "2\n");
    std::fs::write(dir.join("extra.h"), "#define EXTRA 3\n").unwrap();
    std::fs::write(
        dir.join("p.c"),
        "#include <stdio.h>\n#include \"extra.h\"\nint main(void) { printf(\"%d\\n\", EXTRA); return 0; }\n",
    )
    .unwrap();
    assert_eq!(build_and_run(), "3\n");
}

#[test]
fn stdin_stdout_stderr_and_exit_codes_pass_through_the_daemon() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let daemon = Daemon::start(dir);
    let out = with_stdin(
        &mut daemon.cc(
            dir,
            dir,
            &["-x", "c", "-", "-E", "-P", "-DTWICE(x)=(2*(x))"],
        ),
        b"int y = TWICE(21);\n",
    );
    assert_ok("cc -x c - -E through the daemon", &out);
    assert_eq!(text(&out.stdout).trim(), "int y = (2*(21));");

    std::fs::write(dir.join("bad.c"), "int f(void) { return nope; }\n").unwrap();
    let out = daemon.cc(dir, dir, &["-c", "bad.c"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("use of undeclared identifier 'nope'"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_client_killed_mid_compile_stops_its_guest_and_the_daemon_serves_on() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    slow_source(&dir.join("slow.c"), 600);
    let daemon = Daemon::start(dir);
    let mut client = daemon
        .cc(dir, dir, &["-O2", "-c", "slow.c", "-o", "slow.o"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        client.try_wait().unwrap().is_none(),
        "the compile ended too soon to be cut"
    );
    client.kill().unwrap();
    client.wait().unwrap();
    daemon.wait_for("went away", Duration::from_secs(120));
    assert!(
        !dir.join("slow.o").exists(),
        "the cancelled compile still wrote its object"
    );

    std::fs::write(dir.join("ok.c"), "int ok(void) { return 1; }\n").unwrap();
    let out = daemon
        .cc(dir, dir, &["-c", "ok.c", "-o", "ok.o"])
        .output()
        .unwrap();
    assert_ok("a compile after the cancelled one", &out);
    assert!(dir.join("ok.o").is_file());
}

#[test]
fn with_prompt_cancel_a_guest_computing_without_calls_stops_when_its_client_goes() {
    // The engines of --prompt-cancel compile differently: fill the cache for them
    // first, so the daemon starts on optimized code like the others.
    let out = Command::new(BIN)
        .env("WASM9P_CACHE_DIR", module_cache())
        .args(["compile", "--interruptible", "--tier", "optimized"])
        .arg(toolchain().join("llvm.core.wasm"))
        .output()
        .unwrap();
    assert_ok("wasm9p compile --interruptible", &out);
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    // Constant evaluation that runs for many minutes without a single WASI call.
    std::fs::write(
        dir.join("spin.cc"),
        "constexpr unsigned long long spin() { unsigned long long n = 0;\n\
         for (unsigned long long i = 0; i < ~0ull; i++) n += i; return n; }\n\
         static_assert(spin() != 1, \"never decided\");\n",
    )
    .unwrap();
    let daemon = Daemon::start_with(dir, &["--prompt-cancel"]);
    let mut cmd = command(BIN, dir, dir);
    cmd.env("WASM9P_DAEMON", daemon.address()).args([
        "c++",
        "-std=c++20",
        "-fconstexpr-steps=4294967295",
        "-c",
        "spin.cc",
    ]);
    let mut client = cmd.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    assert!(client.try_wait().unwrap().is_none(), "spin.cc was decided");
    client.kill().unwrap();
    client.wait().unwrap();
    // Minutes of evaluation left, yet the guest is stopped at once.
    daemon.wait_for("went away", Duration::from_secs(60));
}

#[test]
fn the_daemon_refuses_another_root_and_another_user() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    std::fs::write(dir.join("a.c"), "int a(void) { return 1; }\n").unwrap();
    let daemon = Daemon::start(dir);
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("a.c"), "int a(void) { return 1; }\n").unwrap();
    let out = daemon
        .cc(other.path(), other.path(), &["-c", "a.c"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("this daemon serves the project root"),
        "{}",
        text(&out.stderr)
    );

    if !rustix::process::geteuid().is_root() {
        eprintln!("another user: not checked (acting as another user needs root)");
        return;
    }
    // The client runs as nobody: it needs a binary and a root it may reach.
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let client = dir.join("wasm9p");
    if std::fs::hard_link(BIN, &client).is_err() {
        std::fs::copy(BIN, &client).unwrap();
    }
    std::fs::set_permissions(&client, std::fs::Permissions::from_mode(0o755)).unwrap();
    let as_nobody = || {
        let mut cmd = Command::new(&client);
        cmd.current_dir(dir)
            .env_clear()
            .env("WASM9P_DAEMON", daemon.address())
            .env("WASM9P_ROOT", dir)
            .args(["cc", "-c", "a.c", "-o", "/dev/null"])
            .uid(65534)
            .gid(65534);
        cmd.output().unwrap()
    };
    // The socket is the daemon's user's alone...
    let out = as_nobody();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("Permission denied"),
        "{}",
        text(&out.stderr)
    );
    // ...and were it opened to everyone, the daemon still checks who connects.
    std::fs::set_permissions(&daemon.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = as_nobody();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("refused: uid 65534 is not the user this daemon runs as"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn sigterm_lets_the_running_compile_finish_then_stops_the_daemon() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    slow_source(&dir.join("slow.c"), 250);
    let mut daemon = Daemon::start(dir);
    let mut client = daemon
        .cc(dir, dir, &["-O2", "-c", "slow.c", "-o", "slow.o"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    daemon.terminate();
    assert!(wait(&mut client, Duration::from_secs(120)).success());
    assert!(dir.join("slow.o").is_file());
    assert!(wait(&mut daemon.child, Duration::from_secs(60)).success());
    daemon.wait_for("daemon: stopped", Duration::from_secs(5));
    assert!(!daemon.socket.exists(), "the socket was left behind");
    let out = daemon.cc(dir, dir, &["-c", "slow.c"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cannot reach the daemon"),
        "{}",
        text(&out.stderr)
    );
}
