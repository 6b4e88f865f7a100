//! The farm walkthrough in docs/farm.md ("Walkthrough: one worker, one action") runs as
//! written, in one go: PostgreSQL, BuildGrid, a worker and one clang.wasm compile sent
//! by `bgd execute`, whose object comes back, then the walkthrough's own teardown.
//!
//! The block runs with bash (`-e`: a failing line fails it) in a directory laid out
//! as the repository is where the block looks (`scripts/` and `examples/`, links to
//! the real ones), with two lines left out: the package install (the machine has the
//! packages) and `cargo build --release`, the binary under test standing in for the
//! release build at `target/release/wasm9p` (a release build would cost CI minutes
//! and test the same source). The worker's default cache
//! directory is under a `XDG_CACHE_HOME` of the test's own, its module cache the one
//! the other tests fill. The block's fixed places (`/tmp/farm`, ports 50051 and
//! 5433) are the walkthrough's: the test takes them for its run and leaves nothing behind.
//! As the page says, it needs root (PostgreSQL runs as its own user).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use wasm9p_tests::{printed, run_script, walkthrough};

const PG: &str = "/usr/lib/postgresql/15/bin";
const BUILD_LINE: &str = "cargo build --release -p wasm9p-cli";

/// Stops what the walkthrough started: its process group, and PostgreSQL (which
/// `pg_ctl` detaches).
fn stop(group: Option<u32>) {
    if let Some(pgid) = group {
        let pgid = rustix::process::Pid::from_raw(pgid as i32).unwrap();
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::TERM);
        std::thread::sleep(Duration::from_secs(1));
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
    }
    if Path::new("/tmp/farm/pg/postmaster.pid").exists() {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--", &format!("{PG}/pg_ctl")])
            .args(["-D", "/tmp/farm/pg", "stop", "-m", "immediate"])
            .stdout(Stdio::null())
            .status();
    }
    let _ = std::fs::remove_dir_all("/tmp/farm");
}

#[test]
fn the_farm_walkthrough_runs_as_written_in_one_go() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: the walkthrough is for root (PostgreSQL runs as its own user)");
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let block = walkthrough("farm.md", "Walkthrough: one worker");
    assert_eq!(
        block.lines().filter(|l| l.trim() == BUILD_LINE).count(),
        1,
        "the walkthrough builds with `{BUILD_LINE}`:\n{block}"
    );
    let script: String = block
        .lines()
        .filter(|l| l.trim() != BUILD_LINE && !l.starts_with("sudo apt-get "))
        .map(|l| format!("{l}\n"))
        .collect();

    // The repository as the block sees it; the binary under test as the release one.
    let dir = tempfile::tempdir().unwrap();
    let here = dir.path();
    for linked in ["scripts", "examples"] {
        std::os::unix::fs::symlink(repo.join(linked).canonicalize().unwrap(), here.join(linked))
            .unwrap();
    }
    std::fs::create_dir_all(here.join("target/release")).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_wasm9p"),
        here.join("target/release/wasm9p"),
    )
    .unwrap();
    let cache = here.join("xdg-cache");
    std::fs::create_dir_all(cache.join("wasm9p/worker")).unwrap();
    let modules = Path::new(env!("CARGO_TARGET_TMPDIR")).join("module-cache");
    std::fs::create_dir_all(&modules).unwrap();
    std::os::unix::fs::symlink(&modules, cache.join("wasm9p/worker/modules")).unwrap();

    stop(None); // a run before this one that died midway
    let ran = run_script(
        here,
        &script,
        &[("XDG_CACHE_HOME", &cache)],
        Duration::from_secs(600),
    );
    let (status, said, group) = (ran.status, ran.said, ran.group);
    let log = |name: &str| std::fs::read_to_string(here.join(name)).unwrap_or_default();
    // What its teardown left, looked at before this test's own cleanup.
    let left = ["/tmp/farm/pg/postmaster.pid", "/tmp/farm"].map(|p| Path::new(p).exists());
    stop(Some(group));
    let status = status.unwrap_or_else(|| panic!("the walkthrough ran 10 minutes: {said}"));
    assert!(
        status.success(),
        "the walkthrough failed ({status}): {said}"
    );

    // It printed what the page says a run that worked prints (`file` of the object
    // the farm compiled, a wasm object, and `nm` of it, defining `answer`; among
    // PostgreSQL's messages), and its teardown stopped
    // PostgreSQL and removed what it made.
    let expected = printed("farm.md", "A run that worked prints");
    assert!(log("out.log").contains(&expected), "{said}");
    assert_eq!(left, [false, false], "PostgreSQL, /tmp/farm left: {said}");
    assert!(!here.join("got").exists(), "{said}");
}
