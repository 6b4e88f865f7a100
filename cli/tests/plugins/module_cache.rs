//! A plugin's compiled code in the module cache: kept, reused, on the baseline tier
//! first for a big one, filled by `wasm9p compile --plugin`.

use super::*;

#[test]
fn a_plugins_compiled_code_is_kept_in_the_module_cache_and_reused() {
    let memfs = c_plugin(&repo("examples/plugins/memfs.c"));
    let probe = guest("plugin_probe");
    let cache = tempfile::tempdir().unwrap();
    let artifacts = || {
        let mut found: Vec<(PathBuf, std::time::SystemTime)> = std::fs::read_dir(cache.path())
            .map(|d| {
                d.map(|e| e.unwrap().path())
                    .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
                    .map(|p| {
                        let modified = p.metadata().unwrap().modified().unwrap();
                        (p, modified)
                    })
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        found
    };
    let run = |extra: &[&str]| {
        let mut args: Vec<String> = vec!["run".into()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend([
            "--mount".into(),
            format!("type=plugin,component={},target=/p", memfs.display()),
            probe.display().to_string(),
            "read:/p/README".into(),
        ]);
        let out = wasm9p(&args);
        assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
        assert!(text(&out).0.contains("memfs"), "{:?}", text(&out));
    };
    let dir = cache.path().display().to_string();
    run(&["--module-cache", &dir]);
    let first = artifacts();
    assert_eq!(
        first.len(),
        2,
        "the guest's and the plugin's code: {first:?}"
    );
    std::thread::sleep(Duration::from_millis(20));
    run(&["--module-cache", &dir]);
    let second = artifacts();
    assert_eq!(
        second.iter().map(|a| &a.0).collect::<Vec<_>>(),
        first.iter().map(|a| &a.0).collect::<Vec<_>>(),
        "nothing compiled anew"
    );
    assert!(
        second.iter().zip(&first).all(|(s, f)| s.1 > f.1),
        "both artifacts were used again (a hit refreshes the mtime)"
    );
    // --no-module-cache keeps nothing, for plugins either.
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .env("WASM9P_CACHE_DIR", empty.path())
        .args([
            "run",
            "--no-module-cache",
            "--mount",
            &format!("type=plugin,component={},target=/p", memfs.display()),
            &probe.display().to_string(),
            "read:/p/README",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
}

#[test]
fn a_big_plugin_starts_on_the_baseline_tier_and_the_next_process_runs_it_optimized() {
    // WASM9P_TIER_FROM=0: memfs counts as big, as a plugin of 4 MiB or more would. It
    // stays on the baseline tier for its whole mount (its files live in its instance),
    // a detached `wasm9p compile --plugin` compiles its optimized code for later, and
    // the next process maps that code and compiles nothing.
    let memfs = c_plugin(&repo("examples/plugins/memfs.c"));
    let probe = guest("plugin_probe");
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let stats_file = tmp.path().join("stats.json");
    let run = |tier: &str| {
        let out = Command::new(BIN)
            .env("WASM9P_TIER_FROM", "0")
            .env("WASM9P_CACHE_DIR", &cache)
            .args(["run", "--tier", tier, "--mount"])
            .arg(format!(
                "type=plugin,component={},target=/p",
                memfs.display()
            ))
            .arg(format!("--stats={}", stats_file.display()))
            .arg(&probe)
            .args(["write:/p/new:hello", "read:/p/new", "read:/p/README"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
        let stats: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stats_file).unwrap()).unwrap();
        let plugin = stats["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["type"] == "plugin")
            .unwrap()["tier"]
            .clone();
        (text(&out), plugin)
    };
    let ((printed, said), tier) = run("auto");
    assert!(
        printed.contains("hello") && printed.contains("memfs"),
        "{printed}"
    );
    assert_eq!(tier["started_on"], "baseline", "{tier}");
    assert!(
        tier["compile_ms"].as_u64().is_some(),
        "compiled here: {tier}"
    );
    assert_eq!(tier["optimized"], "handed_off", "{tier}");
    assert!(said.contains("being compiled in the background"), "{said}");
    // Four artifacts in the end: the guest's and the plugin's, each on both tiers.
    let count = || {
        std::fs::read_dir(&cache)
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    while count() < 4 {
        assert!(
            Instant::now() < deadline,
            "no optimized plugin artifact appeared"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The detached compiles may still hold their locks for a moment after the rename.
    while std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .any(|e| e.path().extension().is_some_and(|x| x == "lock"))
    {
        assert!(Instant::now() < deadline, "a compile lock stayed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let ((again, said), tier) = run("auto");
    assert_eq!(again, printed, "the same answers on either tier");
    assert_eq!(tier["started_on"], "optimized", "{tier}");
    assert!(tier["compile_ms"].is_null(), "nothing compiled: {tier}");
    assert!(tier["optimized"].is_null(), "{tier}");
    assert!(!said.contains("compil"), "{said}");
    assert_eq!(count(), 4);
    // --tier baseline runs the baseline code it has, and starts no optimized compile.
    let (_, tier) = run("baseline");
    assert_eq!(tier["started_on"], "baseline", "{tier}");
    assert!(
        tier["compile_ms"].is_null() && tier["optimized"].is_null(),
        "{tier}"
    );
}

#[test]
fn wasm9p_compile_plugin_fills_the_cache_plugin_mounts_use() {
    // Compiled as a guest (no --plugin), a plugin's code does not fit a plugin mount's
    // engines (they meter fuel), so the mount compiles; with --plugin it compiles
    // nothing.
    let memfs = c_plugin(&repo("examples/plugins/memfs.c"));
    let probe = guest("plugin_probe");
    let tmp = tempfile::tempdir().unwrap();
    let stats_file = tmp.path().join("stats.json");
    let plugin_compiled_ms = |cache: &Path| {
        let out = Command::new(BIN)
            .env("WASM9P_CACHE_DIR", cache)
            .args(["run", "--mount"])
            .arg(format!(
                "type=plugin,component={},target=/p",
                memfs.display()
            ))
            .arg(format!("--stats={}", stats_file.display()))
            .arg(&probe)
            .arg("read:/p/README")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
        let stats: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stats_file).unwrap()).unwrap();
        stats["mounts"][0]["tier"]["compile_ms"].clone()
    };
    for (flags, compiles) in [(&[][..], true), (&["--plugin"][..], false)] {
        let cache = tmp.path().join(format!("cache{}", flags.len()));
        let out = Command::new(BIN)
            .args(["compile", "--tier", "optimized", "--module-cache"])
            .arg(&cache)
            .args(flags)
            .arg(&memfs)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
        assert_eq!(
            plugin_compiled_ms(&cache).is_u64(),
            compiles,
            "compile {flags:?}, then the mount"
        );
    }
    let both = Command::new(BIN)
        .args(["compile", "--plugin", "--interruptible"])
        .arg(&memfs)
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2), "{:?}", text(&both));
}
