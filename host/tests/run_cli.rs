//! `wasm9p run` as a user runs it: the binary, a C guest built with clang for
//! wasm32-wasi, the embedded 9p default, exit codes, stats, and one-line errors.

use std::path::{Path, PathBuf};
use std::process::Command;

use wasm9p_tests::{compile_c_guest, Tree};

const BIN: &str = env!("CARGO_BIN_EXE_wasm9p");

fn guest() -> PathBuf {
    compile_c_guest(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guests/fileops.c"))
}

#[test]
fn runs_a_guest_on_an_embedded_9p_mount_with_stats() {
    let wasm = guest();
    let dir = Tree::build(&[Tree::file("hello.txt", "hello\n")]);
    let stats = dir.path().join("stats.json");
    let out = Command::new(BIN)
        .args([
            "run",
            "--mount",
            &format!(
                "type=9p,export={},target=/data,cache=loose",
                dir.path().display()
            ),
        ])
        .args([
            "--env",
            "WASM9P_TEST=yes",
            &format!("--stats={}", stats.display()),
        ])
        .arg(&wasm)
        .args(["/data", "5"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(5),
        "the guest's exit code: {stdout}"
    );
    assert!(
        stdout.contains("args 3 fileops-")
            && stdout.contains(" env yes")
            && stdout.contains("read 6 bytes: hello"),
        "{stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let mount = &json["mounts"][0];
    assert_eq!(
        (mount["target"].as_str(), mount["type"].as_str()),
        (Some("/data"), Some("9p"))
    );
    assert_eq!(mount["cache"]["negative_hits"].as_u64(), Some(2));
    assert_eq!(
        mount["rpc"]["write"].as_u64(),
        Some(1),
        "11,000 one-byte writes, one Twrite"
    );
    assert_eq!(json["guests"].as_u64(), Some(1));
}

#[test]
fn with_no_mounts_the_current_directory_is_served_at_the_root() {
    let wasm = guest();
    let dir = Tree::build(&[Tree::file("hello.txt", "from cwd\n")]);
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .arg("run")
        .arg(&wasm)
        .arg("/")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("read 9 bytes: from cwd"), "{stdout}");
}

#[test]
fn setup_errors_are_one_line_and_exit_2() {
    let wasm = guest();
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "--mount".into(),
                "type=9p,target=/g".into(),
                wasm.display().to_string(),
            ],
            "needs source=ADDR or export=HOSTDIR",
        ),
        (
            vec![
                "--mount".into(),
                format!(
                    "type=9p,source=unix:{}/none,target=/g",
                    dir.path().display()
                ),
                wasm.display().to_string(),
            ],
            "cannot mount /g",
        ),
        (
            vec![
                "--dir".into(),
                "/no/such::/g".into(),
                wasm.display().to_string(),
            ],
            "cannot mount /g",
        ),
        (
            vec![dir.path().join("missing.wasm").display().to_string()],
            "cannot load",
        ),
        (
            vec![
                "--env".into(),
                "NOEQUALS".into(),
                wasm.display().to_string(),
            ],
            "is not K=V",
        ),
    ];
    for (args, needle) in cases {
        let out = Command::new(BIN)
            .current_dir(dir.path())
            .arg("run")
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle) && !stderr.contains("panicked"),
            "{args:?}: {stderr}"
        );
    }
}
