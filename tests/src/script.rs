//! A doc's shell walkthrough run as written: the `sh` blocks of a `Walkthrough:`
//! section of a page of the book ([`walkthrough`]) and what the page says a run prints
//! ([`printed`]), run by `bash -e -c SCRIPT` in a directory, in a process group of its
//! own, its output in files there, within a time limit ([`run_script`]).
//!
//! A walkthrough's test runs it with stand-ins ([`StandIns`]: the binaries under test
//! for release builds, and whatever the test must do its own way) in a directory laid
//! out as the repository ([`Walk`]), or in one go ([`run_walkthrough`]).

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
/// lock); besides, lines the test drops or begins otherwise.
pub struct StandIns<'a> {
    /// The `wasm9p` under test, as `target/release/wasm9p`.
    pub wasm9p: Option<&'a Path>,
    /// `cargo run --release -p wasm9p-host --example NAME --` becomes the binary given
    /// for NAME (the test build of the example).
    pub examples: &'a [(&'a str, &'a Path)],
    /// Lines that begin with one of these are left out (what the test has done its
    /// own way, such as installing a binary where a service finds it).
    pub dropped: &'a [&'a str],
    /// A line that begins with a pair's first string begins with its second instead,
    /// the rest of the line kept (the first pair that matches; for example `sudo ctr `
    /// made `ctr` against the test's own containerd).
    pub rewritten: &'a [(&'a str, &'a str)],
    /// Wherever a pair's first string is in a line, its second instead (after
    /// `rewritten`; for a command inside `$(...)`, such as `sudo crictl`).
    pub replaced: &'a [(&'a str, &'a str)],
    /// `WASM9P_CACHE_DIR`: the compiled-module cache the walkthroughs share.
    pub module_cache: &'a Path,
}

impl<'a> StandIns<'a> {
    /// No stand-in but the module cache: a test sets what it needs over this
    /// (`StandIns { wasm9p: Some(..), ..StandIns::new(cache) }`).
    pub fn new(module_cache: &'a Path) -> StandIns<'a> {
        StandIns {
            wasm9p: None,
            examples: &[],
            dropped: &[],
            rewritten: &[],
            replaced: &[],
            module_cache,
        }
    }
}

fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// `script` with the stand-ins in place, each component a `scripts/build-*` line
/// names built into `here` as the script would. A command continued over lines is
/// taken whole.
fn prepared(script: &str, here: &Path, stand_ins: &StandIns) -> String {
    let built = |build: fn(&Path, &Path) -> Result<(), String>, src: &str, out: &str| {
        let out = here.join(out);
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        build(&repo().join(src), &out).unwrap_or_else(|e| panic!("{src}: {e}"))
    };
    // A command continued over lines (`\` at their ends) is one: left out, rewritten
    // or run whole.
    let mut commands: Vec<String> = Vec::new();
    let mut continued = false;
    for line in script.lines() {
        match commands.last_mut() {
            Some(command) if continued => {
                command.push('\n');
                command.push_str(line);
            }
            _ => commands.push(line.to_owned()),
        }
        continued = line.ends_with('\\');
    }
    let mut kept = String::new();
    for line in &commands {
        let words: Vec<&str> = line.split_whitespace().filter(|w| *w != "\\").collect();
        match words.as_slice() {
            ["sudo", "apt-get", ..] | ["cargo", "build", "--release", ..] => {}
            _ if stand_ins.dropped.iter().any(|d| line.starts_with(d)) => {}
            ["scripts/build-plugin", src, out] => built(crate::build_c_plugin, src, out),
            ["scripts/build-http", src, out] => built(crate::build_c_http, src, out),
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
                let mut line = match stand_ins
                    .rewritten
                    .iter()
                    .find(|(from, _)| line.starts_with(from))
                {
                    Some((from, to)) => format!("{to}{}", &line[from.len()..]),
                    None => line.clone(),
                };
                for (from, to) in stand_ins.replaced {
                    line = line.replace(from, to);
                }
                kept.push_str(&line);
                kept.push('\n');
            }
        }
    }
    kept
}

/// The test build of example `name` of the package under test:
/// `target/<profile>/examples/<name>`, beside the `deps/` the calling test runs from
/// (`cargo test -p PACKAGE` builds a package's examples before its tests; a `--test`
/// filter alone does not, and a cargo inside the test would wait for the build
/// directory's lock).
pub fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).unwrap();
    let built = profile.join("examples").join(name);
    assert!(
        built.exists(),
        "{} is not built: `cargo test -p PACKAGE` builds the examples before the tests, \
         a `--test` filter alone does not (`cargo build -p PACKAGE --examples` first)",
        built.display()
    );
    built
}

/// A walkthrough ready to run: its script with the stand-ins in place, in a fresh
/// directory laid out as the repository (`scripts/` and `examples/` linked to the real
/// ones, the `wasm9p` under test at `target/release/wasm9p`), removed when dropped.
pub struct Walk {
    dir: tempfile::TempDir,
    script: String,
    module_cache: std::path::PathBuf,
}

/// How a walkthrough's run ended. What it left running in its process group is
/// stopped by [`Walked::stop`], [`Walked::succeeded`] or its drop, whichever comes
/// first (so that a test may look at what the script left before).
pub struct Walked {
    /// Its exit status; `None` when it ran past the limit.
    pub status: Option<ExitStatus>,
    /// The script as it ran and both its streams, for an assertion's message.
    pub said: String,
    /// Its stdout.
    pub out: String,
    group: Option<u32>,
}

impl Walk {
    /// `script` laid out with `stand_ins`.
    pub fn new(script: &str, stand_ins: &StandIns) -> Walk {
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
        Walk {
            dir,
            script,
            module_cache: stand_ins.module_cache.to_owned(),
        }
    }

    /// The directory it runs in.
    pub fn here(&self) -> &Path {
        self.dir.path()
    }

    /// Runs it with `WASM9P_CACHE_DIR` and `env` set, for at most `limit`.
    pub fn run(&self, env: &[(&str, &Path)], limit: Duration) -> Walked {
        let mut all = vec![("WASM9P_CACHE_DIR", self.module_cache.as_path())];
        all.extend_from_slice(env);
        let ran = run_script(self.here(), &self.script, &all, limit);
        Walked {
            status: ran.status,
            said: format!("{}\n{}", self.script, ran.said),
            out: std::fs::read_to_string(self.here().join("out.log")).unwrap_or_default(),
            group: Some(ran.group),
        }
    }
}

impl Walked {
    /// Stops what the script left running in its process group: TERM, a second for
    /// it to end, KILL.
    pub fn stop(&mut self) {
        use rustix::process::{kill_process_group, Pid, Signal};
        if let Some(group) = self.group.take().and_then(|g| Pid::from_raw(g as i32)) {
            if kill_process_group(group, Signal::TERM).is_ok() {
                std::thread::sleep(Duration::from_secs(1));
                let _ = kill_process_group(group, Signal::KILL);
            }
        }
    }

    /// Its stdout, once what it left running is stopped, or a panic with the script
    /// and both streams when it did not end well within the limit.
    pub fn succeeded(mut self) -> String {
        self.stop();
        let status = self
            .status
            .unwrap_or_else(|| panic!("the walkthrough ran past its time limit:\n{}", self.said));
        assert!(
            status.success(),
            "the walkthrough failed ({status}):\n{}",
            self.said
        );
        std::mem::take(&mut self.out)
    }
}

impl Drop for Walked {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs a walkthrough's `script` laid out with `stand_ins` ([`Walk`]) within 5
/// minutes; its stdout, or a panic with the script and both streams.
pub fn run_walkthrough(script: &str, stand_ins: &StandIns) -> String {
    Walk::new(script, stand_ins)
        .run(&[], Duration::from_secs(300))
        .succeeded()
}
