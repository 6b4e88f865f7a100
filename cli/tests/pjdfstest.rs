//! pjdfstest, the POSIX file system suite (its Rust rewrite, crates.io `pjdfstest`
//! 0.2.2, built by `scripts/fetch-pjdfstest`), run as root through
//! `wasm9p mount --allow-other` of an embedded export (its checks run as other users
//! too), in each security model: mapped-xattr passes every check it runs, in
//! `cache=loose` and in `cache=none`, and so does mapped-file in `cache=loose`;
//! passthrough fails only the device-node checks, and none of them once it allows
//! devices.
//!
//! `cache=none` runs every check too, the PATH_MAX ones included (a path some 30
//! directories deep): a FUSE lookup there walks one name from the fid its parent
//! holds, not the whole path from the root.

use std::path::{Path, PathBuf};
use std::process::Command;

mod fuse_support;
use fuse_support::Mounted;

/// What one run of the suite said of each check.
#[derive(Debug, Default)]
struct Outcome {
    passed: Vec<String>,
    failed: Vec<String>,
    skipped: Vec<String>,
}

fn pjdfstest() -> PathBuf {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/pjdfstest/bin/pjdfstest");
    assert!(
        bin.exists(),
        "{} is missing: run scripts/fetch-pjdfstest",
        bin.display()
    );
    bin
}

/// The suite's configuration: the opt-in features a Linux file system has, and two
/// users of Debian's base system for the checks that switch users.
const CONFIG: &str = r#"
[features]
posix_fallocate = {}
rename_ctime = {}
utime_now = {}
utimensat = {}

[settings]
naptime = 0.02
allow_remount = false

[dummy_auth]
entries = [["nobody", "nogroup"], ["daemon", "daemon"]]
"#;

/// Runs the checks matching `patterns` (all when empty; exact names with `exact`) in
/// a fresh embedded export mounted with `options` (`cache=...,security_model=...`).
fn run(options: &str, patterns: &[String], exact: bool) -> Outcome {
    let export = tempfile::tempdir().unwrap();
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), CONFIG).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(export.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let spec = format!(
        "type=9p,export={},target=/,{options}",
        export.path().display()
    );
    let mut m = Mounted::start(&["--allow-other".into(), "--mount".into(), spec]);
    let work = m.path().join("t");
    std::fs::create_dir(&work).unwrap();
    std::fs::set_permissions(&work, PermissionsExt::from_mode(0o755)).unwrap();
    let out = Command::new("timeout")
        .arg("900")
        .arg(pjdfstest())
        .arg("-c")
        .arg(config.path())
        .arg("-p")
        .arg(&work)
        .args(exact.then_some("-e"))
        .args(patterns)
        .current_dir(&work)
        .output()
        .unwrap();
    let (status, stderr) = m.stop();
    assert!(status.success(), "{options}: the mount: {status} {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_ne!(
        out.status.code(),
        Some(124),
        "{options}: pjdfstest ran past 15 minutes:\n{stdout}"
    );
    let mut outcome = Outcome::default();
    for line in stdout.lines() {
        let mut words = line.split_whitespace();
        let (Some(name), Some(verdict), None) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        if !name.contains("::") {
            continue;
        }
        match verdict {
            "ok" => outcome.passed.push(name.into()),
            "FAILED" => outcome.failed.push(name.into()),
            "skipped" => outcome.skipped.push(name.into()),
            _ => {}
        }
    }
    let summary = stdout.lines().find(|l| l.starts_with("Summary:"));
    eprintln!(
        "pjdfstest {options}: {} passed, {} failed, {} skipped ({})",
        outcome.passed.len(),
        outcome.failed.len(),
        outcome.skipped.len(),
        summary.unwrap_or("no summary")
    );
    assert!(
        summary.is_some() && outcome.passed.len() + outcome.failed.len() > 300,
        "{options}: the suite did not run:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    outcome
}

fn root() -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        eprintln!("pjdfstest needs root (it makes device nodes and runs as other users)");
    }
    root
}

/// The checks the suite skips whatever the file system: features Linux lacks (file
/// flags, birth times, NFSv4 ACLs), read-only remounts, a second file system, and a
/// link count limit FUSE does not report.
fn skipped_as_expected(name: &str) -> bool {
    [
        "chflags",
        "birthtime",
        "nfsv4",
        "erofs",
        "exdev",
        "link_count_max",
    ]
    .iter()
    .any(|k| name.contains(k))
}

/// The whole suite with `options`: every check passes but those skipped on any Linux.
fn every_check_passes(options: &str) -> Outcome {
    let outcome = run(options, &[], false);
    assert!(
        outcome.failed.is_empty(),
        "{options}: {:#?}",
        outcome.failed
    );
    let unexpected: Vec<_> = outcome
        .skipped
        .iter()
        .filter(|n| !skipped_as_expected(n))
        .collect();
    assert!(unexpected.is_empty(), "{options}: skipped {unexpected:#?}");
    outcome
}

#[test]
fn mapped_xattr_passes_every_check_it_runs_in_loose_and_none() {
    if !root() {
        return;
    }
    let loose = every_check_passes("cache=loose,security_model=mapped-xattr");
    let none = every_check_passes("cache=none,security_model=mapped-xattr");
    assert_eq!(none.passed, loose.passed, "the same checks pass in none");
}

#[test]
fn mapped_file_passes_every_check_it_runs() {
    if !root() {
        return;
    }
    every_check_passes("cache=loose,security_model=mapped-file");
}

#[test]
fn passthrough_fails_only_device_node_checks_and_none_once_devices_are_allowed() {
    if !root() {
        return;
    }
    let refused = run("cache=loose", &[], false);
    let not_devices: Vec<_> = refused
        .failed
        .iter()
        .filter(|n| !n.ends_with("::char") && !n.ends_with("::block"))
        .collect();
    assert!(
        not_devices.is_empty(),
        "failed, not for a device node: {not_devices:#?}"
    );
    assert!(!refused.failed.is_empty(), "device nodes were made");

    let allowed = run("cache=loose,allow_devices", &[], false);
    assert!(allowed.failed.is_empty(), "{:#?}", allowed.failed);
    assert_eq!(
        allowed.passed.len(),
        refused.passed.len() + refused.failed.len()
    );
}
