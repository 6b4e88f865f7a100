//! The book's walkthroughs run as written: each `Walkthrough:` section of a page in
//! `docs/`, its `sh` blocks joined into one script, run with bash (`-e`: a failing line
//! fails it) in a directory laid out as the repository is where the blocks look
//! (`scripts/` and `examples/` linked to the real ones, the binary under test as
//! `target/release/wasm9p`). What the test does not run, it says: the package
//! installs and the release build (the machine has them; the binary under test stands
//! in), and each `scripts/build-plugin` / `scripts/build-http` line, whose component
//! is built here by the same library call the script makes (a cargo inside `cargo
//! test` would wait for the build directory's lock). What a run prints is checked
//! against what the page says it prints. The farm's walkthrough has a test of its own
//! (`walkthrough_farm.rs`: it needs root and PostgreSQL).

use std::path::{Path, PathBuf};
use std::time::Duration;

use wasm9p_tests::run_script;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// The `sh` blocks of `page`'s section whose heading contains `heading`, up to the
/// next heading of its level or above, joined.
fn walkthrough(page: &str, heading: &str) -> String {
    let text = std::fs::read_to_string(repo().join("docs").join(page)).unwrap();
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

/// The block after `intro` on `page` (what a run that worked prints).
fn printed(page: &str, intro: &str) -> String {
    let text = std::fs::read_to_string(repo().join("docs").join(page)).unwrap();
    let from = text
        .find(intro)
        .expect("the expected output's introduction");
    let start = from + text[from..].find("```\n").expect("its block") + "```\n".len();
    let end = start + text[start..].find("```").expect("its end");
    text[start..end].to_owned()
}

/// `script` with the lines the test stands in for left out, each component a
/// `scripts/build-*` line names built into `here` as the script would.
fn prepared(script: &str, here: &Path) -> String {
    let mut kept = String::new();
    for line in script.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["sudo", "apt-get", ..] | ["cargo", "build", "--release", "-p", "wasm9p-cli", ..] => {}
            ["scripts/build-plugin", src, out] => {
                wasm9p_tests::build_c_plugin(&repo().join(src), &here.join(out)).unwrap()
            }
            ["scripts/build-http", src, out] => {
                wasm9p_tests::build_c_http(&repo().join(src), &here.join(out)).unwrap()
            }
            _ => {
                kept.push_str(line);
                kept.push('\n');
            }
        }
    }
    kept
}

/// Runs `script` in a fresh directory laid out as the repository; its stdout, or
/// the failure with both streams. Whatever it left running is stopped.
fn run(script: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let here = dir.path();
    for linked in ["scripts", "examples"] {
        std::os::unix::fs::symlink(repo().join(linked), here.join(linked)).unwrap();
    }
    std::fs::create_dir_all(here.join("target/release")).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_wasm9p"),
        here.join("target/release/wasm9p"),
    )
    .unwrap();
    let script = prepared(script, here);
    let modules = Path::new(env!("CARGO_TARGET_TMPDIR")).join("module-cache");
    let ran = run_script(
        here,
        &script,
        &[("WASM9P_CACHE_DIR", &modules)],
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

#[test]
fn the_plugin_walkthrough_prints_what_the_page_says() {
    let out = run(&walkthrough("plugins.md", "Walkthrough: memfs"));
    assert_eq!(out, printed("plugins.md", "A run that worked prints"));
}

#[test]
fn the_http_walkthrough_serves_one_host_then_a_fleet_that_sees_a_change() {
    let script = walkthrough("http.md", "Walkthrough: one host");
    // Every server it starts, it stops (its last line), and it waits for each.
    assert!(script.contains("kill $(jobs -p); wait"), "{script}");
    let out = run(&script);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "Hello from wasm9p",
            "HTTP/1.1 200 OK",
            "<h1>hi</h1>",
            "<h1>changed</h1>"
        ],
        "{out}"
    );
}
