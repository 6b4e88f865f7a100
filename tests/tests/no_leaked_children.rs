//! A test that fails never leaves a process behind: the child it started is a
//! [`Reaped`], killed as the panic unwinds, so the test runner's output pipe closes and
//! `scripts/test` (whose `tee` reads that pipe) returns.
//!
//! The failing test is real: this binary runs itself with `--ignored` on a test that
//! starts a child holding its stdout, then panics.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wasm9p_tests::Reaped;

/// The variable that names the child's marker (a unique `sleep` duration).
const MARKER: &str = "WASM9P_REAPED_MARKER";

#[test]
#[ignore = "fails on purpose; run by a_failing_test_leaves_no_process_behind"]
fn fails_while_a_child_holds_its_output() {
    let marker = std::env::var(MARKER).expect("run by a_failing_test_leaves_no_process_behind");
    // The child inherits this process's stdout: the pipe the parent test reads.
    let _child = Reaped::spawn(Command::new("sleep").arg(&marker));
    panic!("failing on purpose with a child running");
}

/// Processes whose command line holds `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(needle) {
                found.push(format!(
                    "{}: {cmdline}",
                    entry.file_name().to_string_lossy()
                ));
            }
        }
    }
    found
}

#[test]
fn a_failing_test_leaves_no_process_behind() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    // A duration no other process has on its command line: an hour and a fraction.
    let marker = format!("3600.{}{nanos:09}", std::process::id());
    let mut run = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "fails_while_a_child_holds_its_output",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(MARKER, &marker)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Read the output to its end, as `tee` does: this returns only once every holder
    // of the pipe (the test binary and the child it started) has closed it.
    let mut stdout = run.stdout.take().unwrap();
    let (done, read) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        let _ = done.send(out);
    });
    let out = read.recv_timeout(Duration::from_secs(120));
    let status = run.wait().unwrap();
    let left = processes_with(&marker);
    // Whatever happened, leave nothing behind ourselves.
    for line in &left {
        if let Some(pid) = line.split(':').next().and_then(|p| p.parse::<i32>().ok()) {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
    }
    assert!(!status.success(), "the inner test failed on purpose");
    let out = out.expect("the test's output pipe closed: no child held it open");
    assert!(
        out.contains("fails_while_a_child_holds_its_output ... FAILED"),
        "{out}"
    );
    assert!(left.is_empty(), "left behind: {left:?}");
    // And the child really ran: its marker was on a command line while the test did.
    let started = Instant::now();
    let _child = Reaped::spawn(Command::new("sleep").arg(&marker));
    while processes_with(&marker).is_empty() && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        processes_with(&marker).len(),
        1,
        "the marker finds a running sleep"
    );
}
