//! The farm walkthrough in docs/farm.md ("Walkthrough: one worker, one action") runs as
//! written, in one go: PostgreSQL, BuildGrid, a worker and one clang.wasm compile sent
//! by `bgd execute`, whose object comes back, then the walkthrough's own teardown.
//!
//! It is laid out and run by `wasm9p_tests::Walk`, as the other walkthroughs: the
//! package install and `cargo build --release` left out, the binary under test standing
//! in for the release build at `target/release/wasm9p` (a release build would cost CI
//! minutes and test the same source). Beyond them, the worker's default cache
//! directory is under a `XDG_CACHE_HOME` of the test's own, its module cache the one
//! the other tests fill, and it may run 10 minutes. The block's fixed places
//! (`/tmp/farm`, ports 50051 and 5433) are the walkthrough's: the test takes them for
//! its run and leaves nothing behind. As the page says, it needs root (PostgreSQL runs
//! as its own user).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use wasm9p_tests::{printed, walkthrough, StandIns, Walk};

const PG: &str = "/usr/lib/postgresql/15/bin";
const BUILD_LINE: &str = "cargo build --release -p wasm9p-cli";

/// Stops what a walkthrough left beyond its process group: PostgreSQL (which `pg_ctl`
/// detaches), and removes `/tmp/farm`.
fn stop() {
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
    let block = walkthrough("farm.md", "Walkthrough: one worker");
    assert_eq!(
        block.lines().filter(|l| l.trim() == BUILD_LINE).count(),
        1,
        "the walkthrough builds with `{BUILD_LINE}`:\n{block}"
    );
    let modules = Path::new(env!("CARGO_TARGET_TMPDIR")).join("module-cache");
    std::fs::create_dir_all(&modules).unwrap();
    let walk = Walk::new(
        &block,
        &StandIns {
            wasm9p: Some(Path::new(env!("CARGO_BIN_EXE_wasm9p"))),
            ..StandIns::new(&modules)
        },
    );
    let here = walk.here();
    let cache = here.join("xdg-cache");
    std::fs::create_dir_all(cache.join("wasm9p/worker")).unwrap();
    std::os::unix::fs::symlink(&modules, cache.join("wasm9p/worker/modules")).unwrap();

    stop(); // a run before this one that died midway
    let mut walked = walk.run(&[("XDG_CACHE_HOME", &cache)], Duration::from_secs(600));
    // What its teardown left, looked at before this test's own cleanup.
    let left = ["/tmp/farm/pg/postmaster.pid", "/tmp/farm"].map(|p| Path::new(p).exists());
    walked.stop();
    stop();
    let said = walked.said.clone();
    let out = walked.succeeded();

    // It printed what the page says a run that worked prints (`file` of the object
    // the farm compiled, a wasm object, and `nm` of it, defining `answer`; among
    // PostgreSQL's messages), and its teardown stopped
    // PostgreSQL and removed what it made.
    let expected = printed("farm.md", "A run that worked prints");
    assert!(out.contains(&expected), "{said}");
    assert_eq!(left, [false, false], "PostgreSQL, /tmp/farm left: {said}");
    assert!(!here.join("got").exists(), "{said}");
}
