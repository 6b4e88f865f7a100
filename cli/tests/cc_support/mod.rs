//! What the `wasm9p cc` tests share: the binary, clang.wasm as the toolchain, one
//! module cache for every test binary of this crate, and project trees to build.

#![allow(dead_code)] // each test binary uses its own part of this

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use wasm9p_tests::clang_wasm;

pub const BIN: &str = env!("CARGO_BIN_EXE_wasm9p");

/// The toolchain directory (`llvm.core.wasm`, `sysroot/usr`).
pub fn toolchain() -> PathBuf {
    clang_wasm().module.parent().unwrap().to_owned()
}

/// `wasm9p` (or a link to it) with the test's module cache and toolchain, in `cwd`,
/// with `root` as the project root.
pub fn command(program: impl AsRef<std::ffi::OsStr>, cwd: &Path, root: &Path) -> Command {
    warm_module_cache();
    let mut cmd = Command::new(program);
    cmd.current_dir(cwd)
        .env("WASM9P_CACHE_DIR", module_cache())
        .env("WASM9P_TOOLCHAIN", toolchain())
        .env("WASM9P_ROOT", root)
        .env("WASM9P_DAEMON", "off")
        .env_remove("WASM9P_ROOT_SOURCE");
    cmd
}

/// Where every clang test of this crate keeps compiled clang.wasm.
pub fn module_cache() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("module-cache")
}

/// Compiles clang.wasm's optimized code into the module cache once per test binary
/// (a no-op when another test binary did it already).
pub fn warm_module_cache() {
    static WARM: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    WARM.get_or_init(|| {
        let out = Command::new(BIN)
            .env("WASM9P_CACHE_DIR", module_cache())
            .args(["compile", "--tier", "optimized"])
            .arg(&clang_wasm().module)
            .output()
            .unwrap();
        assert_ok("wasm9p compile", &out);
    });
}

pub fn assert_ok(what: &str, out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: stdout {} stderr {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub use wasm9p_tests::copy_tree;

/// The repository's `examples/project` (a Makefile and three C units) copied to `to`.
pub fn example_project(to: &Path) {
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/project"),
        to,
    );
}

/// `make -j2 CC="wasm9p cc" AR="wasm9p ar"` in `dir`, with `root` as the project root
/// and the extra environment `env`.
pub fn make(dir: &Path, root: &Path, env: &[(&str, &str)], targets: &[&str]) -> Output {
    let mut cmd = command("make", dir, root);
    cmd.arg("-j2")
        .arg(format!("CC={BIN} cc"))
        .arg(format!("AR={BIN} ar"))
        .args(targets);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// What the shapes program prints for its default input, built natively with the
/// host's clang (the reference its wasm build must match).
pub fn shapes_natively() -> String {
    let dir = tempfile::tempdir().unwrap();
    example_project(dir.path());
    let exe = dir.path().join("shapes");
    let out = Command::new("clang-14")
        .current_dir(dir.path())
        .args([
            "-O2",
            "-Iinclude",
            "src/main.c",
            "src/parse.c",
            "src/shapes.c",
            "-o",
        ])
        .arg(&exe)
        .output()
        .unwrap();
    assert_ok("clang-14 (native)", &out);
    let out = Command::new(&exe).output().unwrap();
    assert_ok("the native shapes", &out);
    text(&out.stdout)
}

/// Runs a wasm program made by a build, with `dir` at the same path in the guest.
pub fn run_program(wasm: &Path, dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .env("WASM9P_CACHE_DIR", module_cache())
        .arg("run")
        .arg("--dir")
        .arg(dir)
        .arg(wasm)
        .args(args)
        .output()
        .unwrap()
}

/// Runs `cmd` with `input` on its stdin and its output captured.
pub fn with_stdin(cmd: &mut Command, input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// The logs of the daemons `wasm9p cc` started with `run_dir` as its
/// `XDG_RUNTIME_DIR` (one per daemon socket name).
pub fn daemons_in(run_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(run_dir.join("wasm9p")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect()
}

/// The process ids the daemons of `run_dir` logged, oldest first.
pub fn daemon_pids(run_dir: &Path) -> Vec<i32> {
    daemons_in(run_dir)
        .iter()
        .flat_map(|log| {
            std::fs::read_to_string(log)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.rsplit_once("(pid ")?.1.strip_suffix(')')?.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// Stops the daemons of `run_dir` (SIGTERM: they finish what runs, then exit).
pub fn stop_daemons(run_dir: &Path) {
    for pid in daemon_pids(run_dir) {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
}
