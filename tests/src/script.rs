//! A doc's shell walkthrough run as written: the `sh` blocks of a `Walkthrough:`
//! section of a page of the book ([`walkthrough`]) and what the page says a run prints
//! ([`printed`]), run by `bash -e -c SCRIPT` in a directory, in a process group of its
//! own, its output in files there, within a time limit ([`run_script`]).

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

/// The book's page `page` (a file of `docs/`).
fn book_page(page: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs")
        .join(page);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `sh` blocks of the section of `page` whose heading contains `heading`, up to
/// the next heading of its level or above, joined (other blocks are left out).
pub fn walkthrough(page: &str, heading: &str) -> String {
    let text = book_page(page);
    let mut lines = text.lines();
    let level = lines
        .by_ref()
        .find(|l| l.starts_with('#') && l.contains(heading))
        .unwrap_or_else(|| panic!("{page}: no heading {heading:?}"))
        .chars()
        .take_while(|c| *c == '#')
        .count();
    let (mut script, mut in_sh, mut in_other) = (String::new(), false, false);
    for line in lines {
        if !in_sh && !in_other && line.starts_with('#') {
            let depth = line.chars().take_while(|c| *c == '#').count();
            if depth <= level && line.chars().nth(depth) == Some(' ') {
                break;
            }
        }
        match line {
            "```sh" if !in_other => in_sh = true,
            l if l.starts_with("```") && in_sh => in_sh = false,
            l if l.starts_with("```") => in_other = !in_other,
            l if in_sh => {
                script.push_str(l);
                script.push('\n');
            }
            _ => {}
        }
    }
    assert!(!script.is_empty(), "{page}: no sh block under {heading:?}");
    script
}

/// The block after the first `intro` on `page`: what a run that worked prints.
pub fn printed(page: &str, intro: &str) -> String {
    let text = book_page(page);
    let from = text
        .find(intro)
        .unwrap_or_else(|| panic!("{page}: no {intro:?}"));
    let start = from + text[from..].find("```\n").expect("its block") + "```\n".len();
    let end = start + text[start..].find("```").expect("its end");
    text[start..end].to_owned()
}

/// What a walkthrough's test puts in place of the lines it does not run as written:
/// package installs and release builds (the machine has the packages, and the binaries
/// under test stand in for the release ones), and `scripts/build-plugin` /
/// `scripts/build-http` lines, whose components are built by the same library calls
/// the scripts make (a cargo inside `cargo test` would wait for the build directory's
/// lock).
pub struct StandIns<'a> {
    /// The `wasm9p` under test, as `target/release/wasm9p`.
    pub wasm9p: Option<&'a Path>,
    /// `cargo run --release -p wasm9p-host --example NAME --` becomes the binary given
    /// for NAME (the test build of the example).
    pub examples: &'a [(&'a str, &'a Path)],
    /// `WASM9P_CACHE_DIR`: the compiled-module cache the walkthroughs share.
    pub module_cache: &'a Path,
}

fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// `script` with the stand-ins in place, each component a `scripts/build-*` line
/// names built into `here` as the script would.
fn prepared(script: &str, here: &Path, stand_ins: &StandIns) -> String {
    let mut kept = String::new();
    for line in script.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["sudo", "apt-get", ..] | ["cargo", "build", "--release", "-p", "wasm9p-cli", ..] => {}
            ["scripts/build-plugin", src, out] => {
                crate::build_c_plugin(&repo().join(src), &here.join(out)).unwrap()
            }
            ["scripts/build-http", src, out] => {
                crate::build_c_http(&repo().join(src), &here.join(out)).unwrap()
            }
            ["cargo", "run", "--release", "-p", "wasm9p-host", "--example", name, "--", ..] => {
                let (_, exe) = stand_ins
                    .examples
                    .iter()
                    .find(|(n, _)| n == name)
                    .unwrap_or_else(|| panic!("no stand-in for the example {name}"));
                let rest = &line[line.find(" -- ").expect("its arguments") + 4..];
                kept.push_str(&format!("{} {rest}\n", exe.display()));
            }
            _ => {
                kept.push_str(line);
                kept.push('\n');
            }
        }
    }
    kept
}

/// Runs a walkthrough's `script` in a fresh directory laid out as the repository
/// (`scripts/` and `examples/` linked to the real ones), with `stand_ins`; its stdout,
/// or a panic with the script and both streams. Whatever it left running is killed.
pub fn run_walkthrough(script: &str, stand_ins: &StandIns) -> String {
    let dir = tempfile::tempdir().unwrap();
    let here = dir.path();
    for linked in ["scripts", "examples"] {
        std::os::unix::fs::symlink(repo().join(linked), here.join(linked)).unwrap();
    }
    if let Some(wasm9p) = stand_ins.wasm9p {
        std::fs::create_dir_all(here.join("target/release")).unwrap();
        std::os::unix::fs::symlink(wasm9p, here.join("target/release/wasm9p")).unwrap();
    }
    let script = prepared(script, here, stand_ins);
    let ran = run_script(
        here,
        &script,
        &[("WASM9P_CACHE_DIR", stand_ins.module_cache)],
        Duration::from_secs(300),
    );
    let group = rustix::process::Pid::from_raw(ran.group as i32).unwrap();
    let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    let (status, said) = (ran.status, ran.said);
    let status = status.unwrap_or_else(|| panic!("the walkthrough ran 5 minutes: {said}"));
    assert!(
        status.success(),
        "the walkthrough failed ({status}):\n{script}\n{said}"
    );
    std::fs::read_to_string(here.join("out.log")).unwrap_or_default()
}
