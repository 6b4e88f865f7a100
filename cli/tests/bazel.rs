//! Bazel (Debian's `bazel-bootstrap`, 4.2.3) with clang.wasm's toolchain of
//! `examples/bazel`: the demo workspace built here (`--config=wasm9p`) and on a real
//! BuildGrid with two `wasm9p worker`s (`--config=wasm9p-remote`, see `farm`) makes
//! the same bytes, every compile, archive and link remote; after `bazel clean` the
//! farm's action cache serves it; a worker killed mid-build does not fail the build;
//! zstd's library and a program on it build remotely as they build here, and without
//! the bytes (`--remote_download_minimal` fetches nothing, `--remote_download_toplevel`
//! the program alone); a compile error reaches the user as clang's message; `bazel
//! test` runs wasm tests here and on the farm (pass, fail, logs, test.xml, shards,
//! TIMEOUT), the demo's test among them.
//!
//! One Bazel output root per test binary, under the target directory (so that the
//! workspace and Bazel's output base share a directory `wasm9p cc` can take as its
//! root); its servers stop themselves soon after the last command. Tests take turns:
//! `bazel clean` of one would pull another's outputs away.

mod farm;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use farm::{Farm, Worker, BIN};

static TURN: Mutex<()> = Mutex::new(());

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bazel")
}

/// Bazel in `workspace`, with the variables @wasm9p's repository reads.
fn bazel(workspace: &Path, args: &[&str]) -> Output {
    let toolchain = wasm9p_tests::clang_wasm();
    Command::new("bazel")
        .arg(format!(
            "--output_user_root={}",
            Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join("bazel-root")
                .display()
        ))
        .arg("--max_idle_secs=20")
        .args(args)
        .current_dir(workspace)
        .env("WASM9P", BIN)
        .env("WASM9P_TOOLCHAIN", toolchain.module.parent().unwrap())
        .env("WASM9P_CACHE_DIR", farm::module_cache())
        .env("WASM9P_DAEMON", "off")
        .output()
        .expect("bazel (Debian's bazel-bootstrap; scripts/test installs it)")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A build that must succeed: its output.
fn build(workspace: &Path, args: &[&str]) -> String {
    let mut all = vec!["build", "--symlink_prefix=/"];
    all.extend_from_slice(args);
    let out = bazel(workspace, &all);
    assert!(
        out.status.success(),
        "bazel {}: {}",
        all.join(" "),
        text(&out)
    );
    text(&out)
}

fn clean(workspace: &Path) {
    let out = bazel(workspace, &["clean"]);
    assert!(out.status.success(), "bazel clean: {}", text(&out));
}

/// Bazel's process summary ("15 processes: 8 internal, 7 remote."): count by kind.
fn processes(log: &str) -> BTreeMap<String, u32> {
    let line = log
        .lines()
        .find(|l| l.contains(" processes: ") || l.contains(" process: "))
        .unwrap_or_else(|| panic!("no process summary in: {log}"));
    let kinds = line
        .split_once(" processes: ")
        .or_else(|| line.split_once(" process: "))
        .unwrap()
        .1
        .trim_end_matches('.');
    kinds
        .split(", ")
        .map(|part| {
            let (n, kind) = part.split_once(' ').unwrap();
            (kind.to_owned(), n.parse().unwrap())
        })
        .collect()
}

fn bazel_bin(workspace: &Path, config: &str) -> PathBuf {
    let out = bazel(workspace, &["info", config, "bazel-bin"]);
    assert!(out.status.success(), "bazel info: {}", text(&out));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// The build's outputs under `bin` (objects, dependency files, archives, programs)
/// by path, with their bytes.
fn outputs(bin: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(dir: &Path, bin: &Path, found: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.ends_with(".runfiles") {
                    walk(&path, bin, found);
                }
            } else if !name.ends_with(".params") && !name.ends_with("_manifest") {
                let bytes = std::fs::read(&path).unwrap();
                found.insert(path.strip_prefix(bin).unwrap().to_owned(), bytes);
            }
        }
    }
    let mut found = BTreeMap::new();
    walk(bin, bin, &mut found);
    found
}

fn assert_same(here: &BTreeMap<PathBuf, Vec<u8>>, there: &BTreeMap<PathBuf, Vec<u8>>) {
    assert_eq!(
        here.keys().collect::<Vec<_>>(),
        there.keys().collect::<Vec<_>>(),
        "the same outputs"
    );
    for (path, bytes) in here {
        assert!(
            there[path] == *bytes,
            "{} differs between the local and the remote build",
            path.display()
        );
    }
}

/// `wasm9p run --root DIR PROGRAM ARGS` in `dir` (relative paths are the host's): its
/// stdout.
fn run(program: &Path, dir: &Path, args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("run")
        .arg("--root")
        .arg(dir)
        .arg(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        program.display(),
        text(&out)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Two workers of the farm, each running one action at a time.
fn workers(farm: &Farm) -> [Worker; 2] {
    [
        Worker::start(farm, "bazel", &["--jobs", "1"]),
        Worker::start(farm, "bazel", &["--jobs", "1"]),
    ]
}

/// `--config=wasm9p-remote` on the farm (its actions ask for no pool, so any of the
/// binary's workers takes them).
fn remote_args(farm: &Farm) -> Vec<String> {
    vec![
        "--config=wasm9p-remote".to_owned(),
        format!("--remote_executor={}", farm.address),
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn the_demo_builds_on_the_farm_byte_for_byte_as_here_from_the_cache_after_a_clean_and_past_a_killed_worker(
) {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let farm = Farm::get();
    let demo = examples().join("demo");

    clean(&demo);
    let log = build(&demo, &["--config=wasm9p", "//..."]);
    let here = processes(&log);
    let ran = here.get("local").copied().unwrap_or(0);
    assert!(ran >= 7, "4 compiles, an archive and 2 links: {here:?}");
    let bin = bazel_bin(&demo, "--config=wasm9p");
    let local = outputs(&bin);
    assert!(
        local.keys().any(|p| p.ends_with("libshapes.a")),
        "{local:?}"
    );

    let [w1, w2] = workers(farm);
    let remote = remote_args(farm);
    clean(&demo);
    // Every action run on the farm (not answered from its cache: another test may
    // have built some of them there already).
    let args = [strs(&remote), vec!["--noremote_accept_cached", "//..."]].concat();
    let log = build(&demo, &args);
    let there = processes(&log);
    assert_eq!(there.get("remote"), Some(&ran), "every one remote: {log}");
    assert!(
        there.keys().all(|k| k == "remote" || k == "internal"),
        "nothing ran but on the farm: {there:?}"
    );
    assert_eq!(
        w1.actions().len() + w2.actions().len(),
        ran as usize,
        "the workers ran them"
    );
    assert_same(&local, &outputs(&bin));

    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    assert_eq!(
        run(
            &bin.join("external/shapes/shapes_main"),
            work.path(),
            &["circle 2, square 3"]
        ),
        "circle     2: 12.568\nsquare     3: 9.000\ntotal 21.568\n"
    );
    assert_eq!(
        run(&bin.join("words"), work.path(), &["b a b", "c"]),
        "a 1\nb 2\nc 1\n"
    );

    // After a clean, the farm's action cache has every action.
    clean(&demo);
    let log = build(&demo, &[strs(&remote), vec!["//..."]].concat());
    assert_eq!(
        processes(&log).get("remote cache hit"),
        Some(&ran),
        "served from the action cache: {log}"
    );
    assert_same(&local, &outputs(&bin));

    // Run again on the farm (the cache not looked at), one worker killed while it
    // runs an action: its lease goes to the other, and the build succeeds.
    clean(&demo);
    let args = [strs(&remote), vec!["--noremote_accept_cached", "//..."]].concat();
    let demo_dir = demo.clone();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let building = std::thread::spawn(move || build(&demo_dir, &strs(&args)));
    let deadline = Instant::now() + Duration::from_secs(120);
    let running = loop {
        if let Some(i) = [&w1, &w2].iter().position(|w| w.is_running()) {
            break i;
        }
        assert!(Instant::now() < deadline, "no action taken");
        std::thread::sleep(Duration::from_millis(20));
    };
    let [killed, kept] = if running == 0 { [w1, w2] } else { [w2, w1] };
    let before = kept.actions().len();
    drop(killed.kill());
    let log = building.join().unwrap();
    assert_eq!(processes(&log).get("remote"), Some(&ran), "{log}");
    assert!(
        kept.actions().len() > before,
        "the other worker ran the rest"
    );
    assert_same(&local, &outputs(&bin));
}

#[test]
fn a_compile_error_on_the_farm_is_clang_s_message_and_a_failed_action() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let farm = Farm::get();
    let _workers = workers(farm);
    let ws = workspace("broken");
    std::fs::write(
        ws.path().join("BUILD.bazel"),
        "cc_library(name = \"bad\", srcs = [\"bad.c\"])\n",
    )
    .unwrap();
    std::fs::write(
        ws.path().join("bad.c"),
        "int f(void) {\n    return undeclared_name;\n}\n",
    )
    .unwrap();
    let remote = remote_args(farm);
    let out = bazel(
        ws.path(),
        &[
            vec!["build", "--symlink_prefix=/"],
            strs(&remote),
            vec!["//:bad"],
        ]
        .concat(),
    );
    let log = text(&out);
    assert!(!out.status.success(), "{log}");
    assert!(
        log.contains("bad.c:2:12: error: use of undeclared identifier 'undeclared_name'"),
        "clang's own message: {log}"
    );
    assert!(log.contains("Compiling bad.c failed: (Exit 1)"), "{log}");
    assert!(!log.contains("wasm9p"), "no worker error: {log}");
}

/// A workspace of its own under the target directory, using @wasm9p.
fn workspace(name: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(name)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let examples = examples().canonicalize().unwrap();
    std::fs::write(
        dir.path().join("WORKSPACE"),
        format!(
            "local_repository(name = \"wasm9p\", path = \"{e}\")\n\
             local_repository(name = \"rules_cc\", path = \"{e}/offline/rules_cc\")\n\
             local_repository(name = \"rules_java\", path = \"{e}/offline/rules_java\")\n\
             local_repository(name = \"remote_coverage_tools\", path = \"{e}/offline/remote_coverage_tools\")\n\
             load(\"@wasm9p//:defs.bzl\", \"clang_wasm\")\n\
             clang_wasm(name = \"clang_wasm\")\n",
            e = examples.display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join(".bazelrc"),
        format!("import {}/wasm9p.bazelrc\n", examples.display()),
    )
    .unwrap();
    dir
}

#[test]
fn zstd_and_a_program_on_it_build_on_the_farm_as_here_and_the_program_round_trips_a_file() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let farm = Farm::get();
    let ws = workspace("zstd");
    wasm9p_tests::copy_tree(&wasm9p_tests::zstd_sources(), &ws.path().join("zstd"));
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/projects/zpipe/zpipe.c"),
        ws.path().join("zpipe.c"),
    )
    .unwrap();
    for file in ["BUILD.bazel", "roundtrip_test.c"] {
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/projects/bazel-zstd")
                .join(file),
            ws.path().join(file),
        )
        .unwrap();
    }

    let log = build(ws.path(), &["--config=wasm9p", "//..."]);
    let ran = processes(&log).get("local").copied().unwrap_or(0);
    assert!(ran > 30, "zstd's units, the archive, zpipe: {log}");
    let bin = bazel_bin(ws.path(), "--config=wasm9p");
    let local = outputs(&bin);
    roundtrip_test_passes(ws.path(), &["--config=wasm9p"]);

    let _workers = workers(farm);
    clean(ws.path());
    let remote = remote_args(farm);
    let log = build(ws.path(), &[strs(&remote), vec!["//..."]].concat());
    assert_eq!(processes(&log).get("remote"), Some(&ran), "{log}");
    assert_same(&local, &outputs(&bin));

    let input: Vec<u8> = (0..200_000u32)
        .flat_map(|i| format!("line {} of {}\n", i % 977, i / 1000).into_bytes())
        .collect();
    std::fs::write(ws.path().join("in.txt"), &input).unwrap();
    run(
        &bin.join("zpipe"),
        ws.path(),
        &["in.txt", "in.zst", "out.txt"],
    );
    assert!(std::fs::read(ws.path().join("out.txt")).unwrap() == input);
    let packed = std::fs::metadata(ws.path().join("in.zst")).unwrap().len();
    assert!(packed < input.len() as u64 / 4, "{packed} bytes compressed");

    // Build without the Bytes: the outputs stay in the farm's CAS...
    let objects = |found: &BTreeMap<PathBuf, Vec<u8>>| {
        found
            .keys()
            .filter(|p| p.extension().is_some_and(|e| e == "o"))
            .count()
    };
    assert!(objects(&local) > 30, "{:?}", local.keys());
    clean(ws.path());
    let minimal = [strs(&remote), vec!["--remote_download_minimal", "//..."]].concat();
    build(ws.path(), &minimal);
    let kept = if bin.exists() {
        outputs(&bin)
    } else {
        BTreeMap::new()
    };
    assert_eq!(objects(&kept), 0, "nothing fetched: {:?}", kept.keys());
    assert!(
        !kept.keys().any(|p| p.ends_with("zpipe")),
        "{:?}",
        kept.keys()
    );
    // ... and with the top level fetched, the program, as here, without its objects.
    clean(ws.path());
    let toplevel = [strs(&remote), vec!["--remote_download_toplevel", "//..."]].concat();
    build(ws.path(), &toplevel);
    let fetched = outputs(&bin);
    assert_eq!(objects(&fetched), 0, "{:?}", fetched.keys());
    let program = Path::new("zpipe");
    assert!(
        fetched.get(program) == local.get(program),
        "zpipe fetched as built here: {:?}",
        fetched.keys()
    );

    // zstd's round trip as a test on the farm (here: above).
    roundtrip_test_passes(ws.path(), &strs(&remote));
}

/// zstd's round trip (`projects/bazel-zstd/roundtrip_test.c`) passes with `config`.
fn roundtrip_test_passes(workspace: &Path, config: &[&str]) {
    let args = [config, &["//:roundtrip_test"]].concat();
    let (code, log, status) = bazel_test(workspace, &args);
    assert_eq!(code, 0, "{log}");
    assert_eq!(status["//:roundtrip_test"], "PASSED", "{log}");
}

/// `bazel test ARGS`: its exit code, its output, and each test's status as its summary
/// says (`//:passes` PASSED, FAILED, TIMEOUT, ...).
fn bazel_test(workspace: &Path, args: &[&str]) -> (i32, String, BTreeMap<String, String>) {
    let mut all = vec!["test", "--symlink_prefix=/"];
    all.extend_from_slice(args);
    let out = bazel(workspace, &all);
    let log = text(&out);
    let statuses = log
        .lines()
        .filter(|l| l.starts_with("//"))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let target = words.next()?;
            let status = words.find(|w| w.chars().all(|c| c.is_ascii_uppercase()))?;
            Some((target.to_owned(), status.to_owned()))
        })
        .collect();
    (out.status.code().unwrap_or(-1), log, statuses)
}

/// The files of the zip at `path`, as `NAME: TEXT` lines (Python's zipfile reads it,
/// checking every CRC).
fn unzipped(path: &Path) -> String {
    let script = "import sys, zipfile\n\
         z = zipfile.ZipFile(sys.argv[1])\n\
         assert z.testzip() is None\n\
         for n in sorted(z.namelist()):\n\
         \x20   sys.stdout.write(n + ': ' + z.read(n).decode())\n";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn bazel_test_runs_wasm_tests_here_and_on_the_farm_with_their_logs_xml_shards_and_timeouts() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let farm = Farm::get();
    let ws = workspace("tests");
    let project = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/projects/bazel-tests");
    for file in ["BUILD.bazel", "tests.c", "data.txt"] {
        std::fs::copy(project.join(file), ws.path().join(file)).unwrap();
    }
    let _workers = workers(farm);
    let remote = remote_args(farm);
    let testlogs = {
        let out = bazel(ws.path(), &["info", "--config=wasm9p", "bazel-testlogs"]);
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    };
    let demo = examples().join("demo");
    for (where_, config) in [("here", vec!["--config=wasm9p"]), ("remote", strs(&remote))] {
        // Nothing of the run before may pass for this one's.
        let _ = std::fs::remove_dir_all(testlogs.join("passes"));
        let args = [config.clone(), vec!["//:passes", "//:fails", "//:sharded"]].concat();
        let (code, log, status) = bazel_test(ws.path(), &args);
        assert_eq!(code, 3, "{where_}: some tests failed: {log}");
        assert_eq!(status["//:passes"], "PASSED", "{where_}: {log}");
        assert_eq!(status["//:fails"], "FAILED", "{where_}: {log}");
        assert_eq!(status["//:sharded"], "PASSED", "{where_}: {log}");
        if where_ == "remote" {
            assert!(log.contains("remote"), "{log}");
            assert!(!log.contains(" local"), "nothing ran here: {log}");
        }
        // The logs Bazel shows, and the test.xml it reads.
        let passes = read(&testlogs.join("passes/test.log"));
        for check in [
            "data.txt from the runfiles",
            "a file written in TEST_TMPDIR",
        ] {
            assert!(
                passes.contains(&format!("ok: {check}")),
                "{where_}: {passes}"
            );
        }
        assert!(passes.contains("0 checks failed"), "{where_}: {passes}");
        let fails = read(&testlogs.join("fails/test.log"));
        assert!(fails.contains("expected 4, got 5"), "{where_}: {fails}");
        let xml = read(&testlogs.join("fails/test.xml"));
        assert!(
            xml.contains("exited with error code 1") && xml.contains("expected 4, got 5"),
            "{where_}: {xml}"
        );
        let xml = read(&testlogs.join("passes/test.xml"));
        assert!(xml.contains(r#"errors="0""#), "{where_}: {xml}");
        if where_ == "remote" {
            // Its undeclared outputs, in the zip Bazel keeps (here, test-setup.sh makes
            // it with the host's zip, when there is one).
            let zip = testlogs.join("passes/test.outputs/outputs.zip");
            assert_eq!(
                unzipped(&zip),
                "blob.bin: \0\x01\x02\x03report.txt: the passes test's report\n\
                 sub/more.txt: more\n"
            );
        }
        // Their manifest and the test's annotations: here test-setup.sh makes them
        // (with `file` for the types), remote the worker; the same bytes.
        let manifest = read(&testlogs.join("passes/test.outputs_manifest/MANIFEST"));
        assert_eq!(
            manifest,
            "blob.bin\t4\tapplication/octet-stream\nreport.txt\t25\ttext/plain\n\
             sub/more.txt\t5\ttext/plain\n",
            "{where_}"
        );
        let annotations = read(&testlogs.join("passes/test.outputs_manifest/ANNOTATIONS"));
        assert_eq!(annotations, "the first part\nthe second part\n", "{where_}");
        // Two shards, each told which it is.
        for (i, dir) in ["shard_1_of_2", "shard_2_of_2"].iter().enumerate() {
            let shard = read(&testlogs.join("sharded").join(dir).join("test.log"));
            assert!(
                shard.contains(&format!("shard {i} of 2")),
                "{where_}: {shard}"
            );
        }
        // Past its timeout: TIMEOUT, in about the timeout.
        let started = Instant::now();
        let args = [config.clone(), vec!["--test_timeout=3", "//:sleeps"]].concat();
        let (code, log, status) = bazel_test(ws.path(), &args);
        assert_eq!(code, 3, "{where_}: {log}");
        assert_eq!(status["//:sleeps"], "TIMEOUT", "{where_}: {log}");
        assert!(
            started.elapsed() < Duration::from_secs(50),
            "{where_}: stopped at its timeout, not when it woke: {:?}",
            started.elapsed()
        );
        // And the next test runs.
        let args = [config.clone(), vec!["--nocache_test_results", "//:passes"]].concat();
        let (code, log, status) = bazel_test(ws.path(), &args);
        assert_eq!((code, status["//:passes"].as_str()), (0, "PASSED"), "{log}");

        // The demo's test.
        let args = [config, vec!["//:shapes_test"]].concat();
        let (code, log, status) = bazel_test(&demo, &args);
        assert_eq!(code, 0, "{where_}: {log}");
        assert_eq!(status["//:shapes_test"], "PASSED", "{where_}: {log}");
    }
}
