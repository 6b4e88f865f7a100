//! The benchmark's baseline runner and guests do what the tables say they measure:
//! `stock-wasi` runs a C guest on stock wasmtime-wasi with a preopened directory and
//! reports its exit status, and the micro-op guest checks every answer it times.

use std::path::Path;
use std::process::Command;

use wasm9p_tests::{compile_c_guest, Tree};

const STOCK: &str = env!("CARGO_BIN_EXE_stock-wasi");

fn microops() -> std::path::PathBuf {
    compile_c_guest(&Path::new(env!("CARGO_MANIFEST_DIR")).join("guests/microops.c"))
}

fn stock(dir: &Path, module: &Path, commands: &str) -> (Option<i32>, String, String) {
    let file = dir.join("commands");
    std::fs::write(&file, commands).unwrap();
    let out = Command::new(STOCK)
        .arg("--dir")
        .arg(format!("{}::/data", dir.display()))
        .arg(format!("--stats={}", dir.join("stats.json").display()))
        .arg("--module")
        .arg(module)
        .arg(&file)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn stock_runner_runs_the_micro_op_guest_on_a_preopened_dir() {
    let module = microops();
    let dir = Tree::build(&[
        Tree::file("present.h", "#pragma once\n"),
        Tree::Symlink("link.h", "present.h"),
    ]);
    let (code, stdout, stderr) = stock(dir.path(), &module, "microops /data 200\n");
    assert_eq!(code, Some(0), "{stderr}");
    let ops: Vec<(&str, f64)> = stdout
        .lines()
        .map(|l| {
            let (op, rate) = l.split_once(' ').unwrap();
            (op, rate.parse().unwrap())
        })
        .collect();
    assert_eq!(
        ops.iter().map(|(op, _)| *op).collect::<Vec<_>>(),
        ["stat-missing", "readlink", "open-close"]
    );
    assert!(ops.iter().all(|(_, rate)| *rate > 0.0), "{stdout}");
    assert!(
        stderr.contains("pass 1 of 1: 1 guests, 0 did not exit 0"),
        "{stderr}"
    );
    let stats = std::fs::read_to_string(dir.path().join("stats.json")).unwrap();
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["passes"].as_array().map(Vec::len), Some(1));
}

#[test]
fn a_wrong_answer_fails_the_guest_and_the_runner() {
    let module = microops();
    // The link points elsewhere: the guest must notice instead of timing it.
    let dir = Tree::build(&[
        Tree::file("present.h", "#pragma once\n"),
        Tree::Symlink("link.h", "elsewhere.h"),
    ]);
    let (code, _, stderr) = stock(dir.path(), &module, "microops /data 200\n");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("readlink: wrong result"), "{stderr}");
    let (code, _, stderr) = stock(dir.path(), Path::new("/nonexistent.wasm"), "x\n");
    assert_eq!(code, Some(2), "{stderr}");
}
