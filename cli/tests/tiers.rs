//! Compiler tiers through the real binary: `wasm9p compile` fills the cache so that a
//! run compiles nothing; a run that ends before its optimized compile hands it to a
//! detached `wasm9p compile --background`, whose artifact the next run uses; a batch
//! moves new guests to the optimized tier mid-run, and they print what the baseline
//! ones printed (a C guest, `guests/tier_switch.c`).
//!
//! The guest is generated: a preview1 module of 3,000 functions (1.6 MB) chained 60
//! times into one checksum it prints, big enough that Cranelift takes a while and
//! small enough for a test. `WASM9P_TIER_FROM=0` makes it count as big.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_wasm9p");

/// The binary with its module cache in `cache`, every module counting as big.
fn wasm9p(cache: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env("WASM9P_TIER_FROM", "0")
        .env("WASM9P_CACHE_DIR", cache);
    cmd
}

/// The generated guest (see the module docs), written to `dir`.
fn checksum_guest(dir: &Path) -> PathBuf {
    const FUNCTIONS: u32 = 3000;
    // Enough work per guest (tens of ms) that a batch outlasts the optimized compile.
    const ROUNDS: u32 = 60;
    let mut wat = wasm9p_tests::arithmetic_module_wat(FUNCTIONS);
    wat.push_str(
        r#"  (func $print (param $v i32)
    (local $p i32)
    i32.const 120 local.set $p
    local.get $p i32.const 10 i32.store8
    loop $digits
      local.get $p i32.const 1 i32.sub local.set $p
      local.get $p
      local.get $v i32.const 10 i32.rem_u i32.const 48 i32.add
      i32.store8
      local.get $v i32.const 10 i32.div_u local.tee $v
      br_if $digits
    end
    i32.const 0 local.get $p i32.store
    i32.const 4 i32.const 121 local.get $p i32.sub i32.store
    i32.const 1 i32.const 0 i32.const 1 i32.const 8 call $fd_write drop)
  (func (export "_start")
    (local $round i32) (local $acc i32)
    i32.const 1 local.set $acc
    loop $rounds
      local.get $acc
"#,
    );
    for f in 0..FUNCTIONS {
        wat.push_str(&format!("      call $f{f}\n"));
    }
    wat.push_str(&format!(
        "      local.set $acc\n      local.get $round i32.const 1 i32.add local.tee $round\n      \
         i32.const {ROUNDS} i32.lt_u br_if $rounds\n    end\n    local.get $acc call $print))\n"
    ));
    let path = dir.join("checksum.wasm");
    std::fs::write(&path, wat::parse_str(&wat).unwrap()).unwrap();
    path
}

fn stats(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn artifacts(cache: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(cache)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
                .collect()
        })
        .unwrap_or_default()
}

fn ok(what: &str, out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn run(cache: &Path, guest: &Path, stats_file: &Path) -> Output {
    wasm9p(cache)
        .args(["run", "--no-mounts"])
        .arg(format!("--stats={}", stats_file.display()))
        .arg(guest)
        .output()
        .unwrap()
}

#[test]
fn wasm9p_compile_fills_both_tiers_and_a_run_then_compiles_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let guest = checksum_guest(tmp.path());
    let out = wasm9p(&cache).arg("compile").arg(&guest).output().unwrap();
    ok("compile", &out);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        said.contains("(baseline): compiled") && said.contains("(optimized): compiled"),
        "{said}"
    );
    assert_eq!(artifacts(&cache).len(), 2);
    // Again: both cached.
    let again = wasm9p(&cache).arg("compile").arg(&guest).output().unwrap();
    ok("compile again", &again);
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .matches("cached")
            .count()
            == 2
    );
    let stats_file = tmp.path().join("stats.json");
    let out = run(&cache, &guest, &stats_file);
    let printed = ok("run", &out);
    assert!(printed.trim().parse::<u32>().is_ok(), "{printed:?}");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("compil"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tier = &stats(&stats_file)["tier"];
    assert_eq!(tier["started_on"], "optimized", "{tier}");
    assert!(tier["optimized_compile_ms"].is_null(), "{tier}");
    // Bad input: a clear error, exit 2.
    let missing = wasm9p(&cache)
        .args(["compile", "/nonexistent.wasm"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read"));
    let bad_tier = wasm9p(&cache)
        .args(["run", "--tier", "fastest"])
        .arg(&guest)
        .output()
        .unwrap();
    assert_eq!(bad_tier.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_tier.stderr).contains("unknown tier"));
}

#[test]
fn a_run_that_ends_first_leaves_the_optimized_compile_to_a_background_process() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let guest = checksum_guest(tmp.path());
    let stats_file = tmp.path().join("stats.json");
    let first = run(&cache, &guest, &stats_file);
    let printed = ok("first run", &first);
    let tier = stats(&stats_file)["tier"].clone();
    assert_eq!(tier["started_on"], "baseline", "{tier}");
    assert!(tier["baseline_compile_ms"].as_u64().is_some(), "{tier}");
    assert_eq!(tier["guests"]["baseline"], 1);
    assert!(
        String::from_utf8_lossy(&first.stderr).contains("being compiled in the background"),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    // The detached compile stores the optimized artifact after this process is gone.
    let deadline = Instant::now() + Duration::from_secs(300);
    while artifacts(&cache).len() < 2 {
        assert!(Instant::now() < deadline, "no optimized artifact appeared");
        std::thread::sleep(Duration::from_millis(100));
    }
    let second = run(&cache, &guest, &stats_file);
    assert_eq!(
        ok("second run", &second),
        printed,
        "same output on both tiers"
    );
    let tier = &stats(&stats_file)["tier"];
    assert_eq!(tier["started_on"], "optimized", "{tier}");
    assert_eq!(tier["guests"]["optimized"], 1);
    // --tier baseline never compiles with Cranelift, --tier optimized waits for it.
    let fresh = tmp.path().join("fresh");
    let out = wasm9p(&fresh)
        .args(["run", "--no-mounts", "--tier", "baseline"])
        .arg(&guest)
        .output()
        .unwrap();
    assert_eq!(ok("baseline only", &out), printed);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(artifacts(&fresh).len(), 1, "no optimized compile started");
}

#[test]
fn a_batch_moves_new_guests_to_the_optimized_tier_when_it_is_ready() {
    // A C guest: its first line waits (through a bind mount of the module cache) until
    // the optimized artifact is stored, so that the switch is seen however slowly the
    // low-priority compile gets the processor; the lines after it must run optimized.
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    let guest = wasm9p_tests::compile_c_guest(&wasm9p_tests::guest_source("tier_switch.c"));
    let sum = |cache: &Path, tier: &str| {
        let out = wasm9p(cache)
            .args(["run", "--no-mounts", "--tier", tier])
            .arg(&guest)
            .args(["sum", "200000"])
            .output()
            .unwrap();
        ok(tier, &out)
    };
    let expected = sum(&tmp.path().join("other"), "optimized");
    assert_eq!(sum(&tmp.path().join("other-b"), "baseline"), expected);
    const AFTER: usize = 20;
    let lines = ["tier_switch sum 200000", "tier_switch wait /cache"]
        .into_iter()
        .chain(std::iter::repeat_n("tier_switch sum 200000", AFTER))
        .collect::<Vec<_>>()
        .join("\n");
    let commands = tmp.path().join("commands");
    std::fs::write(&commands, lines + "\n").unwrap();
    let stats_file = tmp.path().join("stats.json");
    let out = wasm9p(&cache)
        .args(["batch", "--jobs", "1", "--mount"])
        .arg(format!(
            "type=bind,source={},target=/cache,ro",
            cache.display()
        ))
        .arg(format!("--stats={}", stats_file.display()))
        .arg("--module")
        .arg(&guest)
        .arg(&commands)
        .output()
        .unwrap();
    let printed = ok("batch", &out);
    let sums: Vec<&str> = printed.lines().collect();
    assert_eq!(sums.len(), AFTER + 1);
    assert!(
        sums.iter().all(|l| *l == expected.trim_end()),
        "every guest prints the same on either tier: {sums:?}"
    );
    let tier = &stats(&stats_file)["tier"];
    assert_eq!(tier["started_on"], "baseline", "{tier}");
    let (baseline, optimized) = (
        tier["guests"]["baseline"].as_u64().unwrap(),
        tier["guests"]["optimized"].as_u64().unwrap(),
    );
    assert_eq!(baseline + optimized, AFTER as u64 + 2, "{tier}");
    // The first guest starts before the optimized compile can be done; every guest
    // after the wait starts on the optimized code.
    assert!(baseline >= 1 && optimized >= AFTER as u64, "{tier}");
    assert!(tier["optimized_compile_ms"].as_u64().is_some(), "{tier}");
    // The pass lists the same guests, without the run's compile times.
    let pass = &stats(&stats_file)["passes"][0]["tier"];
    assert_eq!(pass["guests"], tier["guests"], "{pass}");
    assert!(pass.get("baseline_compile_ms").is_none(), "{pass}");
    // And each guest's tier, by its line: the first on the baseline code, every one
    // after the wait (line 2) on the optimized code.
    let by_line: Vec<&str> = pass["by_line"]
        .as_array()
        .expect("a tier per line")
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(by_line.len(), AFTER + 2, "{pass}");
    assert_eq!(by_line[0], "baseline", "{pass}");
    assert!(by_line[2..].iter().all(|t| *t == "optimized"), "{pass}");
    assert_eq!(
        by_line.iter().filter(|t| **t == "baseline").count() as u64,
        baseline,
        "{pass}"
    );
}

#[test]
fn a_trap_names_its_functions_on_either_tier_and_their_offsets_on_the_optimized_one() {
    // The baseline tier leaves out the map from machine code to wasm offsets (it was
    // half a second of clang.wasm's first run); a trap there still names its
    // functions, and the optimized tier still has the offsets.
    let tmp = tempfile::tempdir().unwrap();
    let guest = tmp.path().join("trap.wasm");
    let wat = r#"(module $trapper
        (memory (export "memory") 1)
        (func $boom unreachable)
        (func $middle call $boom)
        (func (export "_start") call $middle))"#;
    std::fs::write(&guest, wat::parse_str(wat).unwrap()).unwrap();
    for (tier, offsets) in [("baseline", false), ("optimized", true)] {
        let out = wasm9p(&tmp.path().join(tier))
            .env("WASM9P_TRAP_DETAIL", "1")
            .args(["run", "--no-mounts", "--tier", tier])
            .arg(&guest)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "a trap exits 1");
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(said.contains("unreachable"), "{tier}: {said}");
        let frames: Vec<&str> = said.lines().filter(|l| l.contains("trapper!")).collect();
        assert_eq!(frames.len(), 3, "{tier}: {said}");
        assert!(frames[0].contains("trapper!boom"), "{tier}: {said}");
        assert!(frames[1].contains("trapper!middle"), "{tier}: {said}");
        assert_eq!(
            frames.iter().all(|f| f.contains(" - trapper!")),
            offsets,
            "{tier}: offsets only on the optimized tier: {said}"
        );
    }
}

/// A `wasm9p` run of `guest` started with its stderr read as it comes.
struct Running {
    child: std::process::Child,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl Running {
    fn start(cache: &Path, tier: &str, guest: &Path, stats_file: &Path) -> Running {
        use std::io::BufRead;
        let mut child = wasm9p(cache)
            .args(["run", "--no-mounts", "--tier", tier])
            .arg(format!("--stats={}", stats_file.display()))
            .arg(guest)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (pipe, said) = (child.stderr.take().unwrap(), stderr.clone());
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                said.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        Running {
            child,
            stderr,
            reader,
        }
    }

    fn said(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until it says it is waiting for another process's compile.
    fn waits(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.said().contains("waiting for its code") {
            assert!(Instant::now() < deadline, "never waited: {}", self.said());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn finish(self) -> (String, String) {
        let out = self.child.wait_with_output().unwrap();
        self.reader.join().unwrap();
        let said = self.stderr.lock().unwrap().clone();
        assert_eq!(out.status.code(), Some(0), "{said}");
        (String::from_utf8(out.stdout).unwrap(), said)
    }
}

/// The lock a compiler of `guest`'s baseline code takes in `cache` (its artifact's
/// name, learnt from a scratch cache: artifacts are named by the engine and the
/// module's bytes alone), taken by the test as a compiler would.
fn hold_baseline_lock(guest: &Path, cache: &Path) -> std::fs::File {
    let scratch = tempfile::tempdir().unwrap();
    let out = wasm9p(scratch.path())
        .args(["run", "--no-mounts", "--tier", "baseline"])
        .arg(guest)
        .output()
        .unwrap();
    ok("a scratch run", &out);
    let made = artifacts(scratch.path());
    assert_eq!(made.len(), 1, "{made:?}");
    std::fs::create_dir_all(cache).unwrap();
    let lock = std::fs::File::create(
        cache
            .join(made[0].file_name().unwrap())
            .with_extension("lock"),
    )
    .unwrap();
    lock.lock().unwrap();
    lock
}

#[test]
fn two_first_runs_at_once_share_one_baseline_compile() {
    let tmp = tempfile::tempdir().unwrap();
    let guest = checksum_guest(tmp.path());
    let expected = ok(
        "the reference run",
        &run(
            &tmp.path().join("reference"),
            &guest,
            &tmp.path().join("r.json"),
        ),
    );
    // Held while both start: each sees a compile under way and waits for it; then
    // the lock goes (the artifact not there) and one of them takes the compile over.
    let cache = tmp.path().join("cache");
    let lock = hold_baseline_lock(&guest, &cache);
    let stats_files = [tmp.path().join("a.json"), tmp.path().join("b.json")];
    let runs: Vec<Running> = stats_files
        .iter()
        .map(|s| Running::start(&cache, "baseline", &guest, s))
        .collect();
    runs.iter().for_each(Running::waits);
    drop(lock);
    for run in runs {
        let (printed, said) = run.finish();
        assert_eq!(printed, expected, "{said}");
    }
    let (tiers, compiled) = baseline_compiles(&stats_files);
    assert_eq!(compiled, 1, "one compile: {tiers:?}");
    assert!(
        tiers
            .iter()
            .all(|t| t["waited_for_compile_ms"].as_u64().is_some()),
        "{tiers:?}"
    );
    assert_eq!(artifacts(&cache).len(), 1);

    // From an empty cache, two runs on the default tier at once: one compile of the
    // baseline code between them, whichever way they met.
    let cache = tmp.path().join("empty");
    let runs: Vec<Running> = stats_files
        .iter()
        .map(|s| Running::start(&cache, "auto", &guest, s))
        .collect();
    for run in runs {
        let (printed, said) = run.finish();
        assert_eq!(printed, expected, "{said}");
    }
    let (tiers, compiled) = baseline_compiles(&stats_files);
    assert_eq!(compiled, 1, "one baseline compile: {tiers:?}");
}

#[test]
fn a_run_waiting_for_a_compiler_that_died_compiles_the_code_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let guest = checksum_guest(tmp.path());
    let cache = tmp.path().join("cache");
    let lock = hold_baseline_lock(&guest, &cache);
    let stats_file = tmp.path().join("s.json");
    let waiting = Running::start(&cache, "baseline", &guest, &stats_file);
    waiting.waits();
    drop(lock); // the compiler is gone, its artifact never written
    let (printed, said) = waiting.finish();
    assert!(printed.trim().parse::<u32>().is_ok(), "{printed:?} {said}");
    let tier = &stats(&stats_file)["tier"];
    assert!(tier["baseline_compile_ms"].as_u64().is_some(), "{tier}");
    assert!(tier["waited_for_compile_ms"].as_u64().is_some(), "{tier}");
    assert_eq!(artifacts(&cache).len(), 1);
}

/// The `tier` records of these `--stats` files, and how many of them compiled the
/// baseline code.
fn baseline_compiles(stats_files: &[PathBuf]) -> (Vec<serde_json::Value>, usize) {
    let tiers: Vec<serde_json::Value> = stats_files
        .iter()
        .map(|s| stats(s)["tier"].clone())
        .collect();
    let compiled = tiers
        .iter()
        .filter(|t| t["baseline_compile_ms"].as_u64().is_some())
        .count();
    (tiers, compiled)
}
