//! The module cache: hits, misses, keys, corruption, eviction, tiers.

use super::*;

const ADD_WAT: &str = r#"(module (func (export "add") (param i32 i32) (result i32)
    local.get 0 local.get 1 i32.add))"#;

fn wasm(dir: &Path, name: &str, wat: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, wat::parse_str(wat).unwrap()).unwrap();
    path
}

/// A temporary directory holding an empty cache (`cache/`) and the guest `g.wasm`
/// (`ADD_WAT`): the directory, the cache's path, the cache, the guest's path.
fn cache_and_add_guest() -> (tempfile::TempDir, PathBuf, ModuleCache, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let guest = wasm(tmp.path(), "g.wasm", ADD_WAT);
    (tmp, dir.clone(), ModuleCache::at(dir), guest)
}

fn quiet() -> impl Fn(Progress) + Sync {
    |_| {}
}

fn artifacts(dir: &Path) -> Vec<PathBuf> {
    let mut found = files(dir);
    found.retain(|p| p.extension().is_some_and(|x| x == "cwasm"));
    found
}

/// Every file in the cache `dir` but the memos' directory, sorted (none when there is
/// no cache yet).
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    found.retain(|p| !p.ends_with(source::MEMO_DIR));
    found.sort();
    found
}

#[test]
fn second_load_maps_the_stored_artifact_and_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let guest = wasm(tmp.path(), "add.wasm", ADD_WAT);
    let cache = ModuleCache::at(tmp.path().join("cache"));
    let engine = Engine::default();
    let events = std::sync::Mutex::new(Vec::new());
    let record = |p: Progress| events.lock().unwrap().push(p);
    cache.load(&engine, &guest, &record).unwrap();
    let first = events.lock().unwrap().len();
    assert!(first >= 2, "a miss reports compiling and compiled");
    let stored = artifacts(&tmp.path().join("cache"));
    assert_eq!(stored.len(), 1, "{stored:?}");
    let Program::Module(module) = cache.load(&engine, &guest, &record).unwrap() else {
        panic!("a core module loads as a module");
    };
    assert_eq!(
        events.lock().unwrap().len(),
        first,
        "a hit compiles nothing"
    );
    let mut store = wasmtime::Store::new(&engine, ());
    let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
    let add = instance
        .get_typed_func::<(i32, i32), i32>(&mut store, "add")
        .unwrap();
    assert_eq!(add.call(&mut store, (2, 40)).unwrap(), 42);
}

#[test]
fn changed_bytes_or_engine_settings_compile_again() {
    let (tmp, dir, cache, guest) = cache_and_add_guest();
    let engine = Engine::default();
    cache.load(&engine, &guest, &quiet()).unwrap();
    wasm(tmp.path(), "g.wasm", "(module (func (export \"f\")))");
    cache.load(&engine, &guest, &quiet()).unwrap();
    assert_eq!(artifacts(&dir).len(), 2);
    let mut config = wasmtime::Config::new();
    config.cranelift_opt_level(wasmtime::OptLevel::None);
    let other = Engine::new(&config).unwrap();
    cache.load(&other, &guest, &quiet()).unwrap();
    assert_eq!(artifacts(&dir).len(), 3);
}

#[test]
fn a_corrupt_artifact_is_compiled_again_and_replaced() {
    let (_tmp, dir, cache, guest) = cache_and_add_guest();
    let engine = Engine::default();
    cache.load(&engine, &guest, &quiet()).unwrap();
    let artifact = artifacts(&dir).remove(0);
    std::fs::write(&artifact, b"not an artifact").unwrap();
    cache.load(&engine, &guest, &quiet()).unwrap();
    assert!(std::fs::metadata(&artifact).unwrap().len() > 100);
}

#[test]
fn eviction_keeps_the_total_under_the_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let engine = Engine::default();
    let cache = ModuleCache::at(&dir).with_limit(1);
    for i in 0..3 {
        let guest = wasm(
            tmp.path(),
            "g.wasm",
            &format!("(module (func (export \"f{i}\")))"),
        );
        cache.load(&engine, &guest, &quiet()).unwrap();
        assert_eq!(artifacts(&dir).len(), 1, "only the newest is kept");
    }
}

#[test]
fn a_store_removes_temporary_files_left_behind_long_ago_and_no_others() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    create_private_dir(&dir).unwrap();
    let (old, file) = tempfile_in(&dir).unwrap();
    file.set_modified(std::time::SystemTime::now() - STALE_TEMPORARY - Duration::from_secs(60))
        .unwrap();
    let (recent, _) = tempfile_in(&dir).unwrap();
    let guest = wasm(tmp.path(), "add.wasm", ADD_WAT);
    ModuleCache::at(&dir)
        .load(&Engine::default(), &guest, &quiet())
        .unwrap();
    assert!(!old.exists(), "a file left behind an hour ago is removed");
    assert!(recent.exists(), "one that may still be written is kept");
    assert_eq!(artifacts(&dir).len(), 1);
}

#[test]
fn bad_input_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = ModuleCache::at(tmp.path().join("cache"));
    let engine = Engine::default();
    let missing = cache.load(&engine, &tmp.path().join("nope.wasm"), &quiet());
    assert!(matches!(missing, Err(LoadError::Read { .. })));
    let junk = tmp.path().join("junk.wasm");
    std::fs::write(&junk, b"\0asm\x01\0\0\0\x7f").unwrap();
    let err = cache.load(&engine, &junk, &quiet()).err().unwrap();
    assert!(matches!(err, LoadError::Invalid { .. }), "{err}");
    let precompiled = tmp.path().join("p.cwasm");
    let wasm_bytes = wat::parse_str(ADD_WAT).unwrap();
    std::fs::write(&precompiled, engine.precompile_module(&wasm_bytes).unwrap()).unwrap();
    let err = cache.load(&engine, &precompiled, &quiet()).err().unwrap();
    assert!(err.to_string().contains("precompiled"), "{err}");
}

#[test]
fn a_core_module_is_refused_where_a_component_is_wanted_before_any_compile() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = ModuleCache::at(tmp.path().join("cache"));
    let engines = engines();
    let module = wasm(tmp.path(), "add.wasm", ADD_WAT);
    for choice in [
        TierChoice::Auto,
        TierChoice::Baseline,
        TierChoice::Optimized,
    ] {
        let err = cache
            .load_component_tiered(&engines, &module, choice, &UpgradeIn::Thread)
            .err()
            .unwrap();
        assert!(err.to_string().contains("is not a component"), "{err}");
    }
    assert!(
        artifacts(&tmp.path().join("cache")).is_empty(),
        "nothing compiled"
    );
    let component = tmp.path().join("empty.wasm");
    std::fs::write(&component, wat::parse_str("(component)").unwrap()).unwrap();
    let loaded = cache
        .load_component_tiered(
            &engines,
            &component,
            TierChoice::Optimized,
            &UpgradeIn::Thread,
        )
        .unwrap();
    assert!(matches!(loaded.program, Program::Component(_)));
    if let Some(storing) = loaded.storing {
        storing.join().unwrap();
    }
    assert_eq!(artifacts(&tmp.path().join("cache")).len(), 1);
}

#[test]
fn a_big_component_starts_on_the_baseline_tier_and_leaves_its_optimized_code_for_the_next_load() {
    // A plugin's path: it cannot switch tiers while its instances hold its state, so the
    // optimized code is for the next load, which finds it and compiles nothing.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let cache = ModuleCache::at(&dir).tier_from(0);
    let engines = engines();
    let component = tmp.path().join("c.wasm");
    std::fs::write(
        &component,
        wat::parse_str(r#"(component (core module (func (export "f"))))"#).unwrap(),
    )
    .unwrap();
    let first = cache
        .load_component_tiered(&engines, &component, TierChoice::Auto, &UpgradeIn::Thread)
        .unwrap();
    assert_eq!(first.tier, Tier::Baseline);
    assert!(first.compiled_in.is_some() && !first.handed_off);
    if let Some(storing) = first.storing {
        storing.join().unwrap();
    }
    let upgrade = first
        .upgrade
        .expect("the optimized compile runs in a thread");
    assert!(matches!(upgrade.wait(), Ok(Program::Component(_))));
    assert_eq!(artifacts(&dir).len(), 2, "both tiers are kept");
    let second = cache
        .load_component_tiered(&engines, &component, TierChoice::Auto, &UpgradeIn::Thread)
        .unwrap();
    assert_eq!(second.tier, Tier::Optimized);
    assert!(second.compiled_in.is_none() && second.upgrade.is_none());
    // Handed to a process instead: none starts without a cache to keep its result.
    let uncached = ModuleCache::disabled().tier_from(0);
    let handed = uncached
        .load_component_tiered(
            &engines,
            &component,
            TierChoice::Auto,
            &UpgradeIn::Process {
                exe: "/nonexistent/wasm9p".into(),
                extra: vec!["--plugin".into()],
            },
        )
        .unwrap();
    assert_eq!(handed.tier, Tier::Baseline);
    assert!(handed.upgrade.is_none() && !handed.handed_off);
}

#[test]
fn a_detached_compile_starts_once_per_module_however_often_it_is_loaded() {
    // A stand-in for `wasm9p` that records each start; a guest mounting one big plugin
    // again and again must not start a process each time, but changed bytes are
    // another module.
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("started");
    let exe = tmp.path().join("fake-wasm9p");
    std::fs::write(
        &exe,
        format!("#!/bin/sh\necho \"$@\" >> {}\n", log.display()),
    )
    .unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cache = ModuleCache::at(tmp.path().join("cache")).tier_from(0);
    let engines = engines();
    let upgrade_in = UpgradeIn::Process {
        exe: exe.clone(),
        extra: vec!["--plugin".into()],
    };
    let component = tmp.path().join("c.wasm");
    let write = |body: &str| {
        std::fs::write(
            &component,
            wat::parse_str(format!("(component (core module {body}))")).unwrap(),
        )
        .unwrap()
    };
    let starts = |want: usize| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let lines = std::fs::read_to_string(&log).unwrap_or_default();
            let n = lines.lines().count();
            if n >= want || std::time::Instant::now() > deadline {
                // Give a start that should not happen the time to show.
                std::thread::sleep(std::time::Duration::from_millis(300));
                return std::fs::read_to_string(&log).unwrap_or_default();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    write(r#"(func (export "f"))"#);
    for _ in 0..5 {
        let loaded = cache
            .load_component_tiered(&engines, &component, TierChoice::Auto, &upgrade_in)
            .unwrap();
        assert_eq!(loaded.tier, Tier::Baseline);
        assert!(loaded.handed_off && loaded.upgrade.is_none());
        if let Some(storing) = loaded.storing {
            storing.join().unwrap();
        }
    }
    let lines = starts(1);
    assert_eq!(lines.lines().count(), 1, "{lines}");
    assert!(
        lines.starts_with("compile --tier optimized --background --plugin --module-cache"),
        "{lines}"
    );
    write(r#"(func (export "g"))"#);
    let loaded = cache
        .load_component_tiered(&engines, &component, TierChoice::Auto, &upgrade_in)
        .unwrap();
    assert!(loaded.handed_off);
    assert_eq!(
        starts(2).lines().count(),
        2,
        "changed bytes: another compile"
    );
}

fn engines() -> Engines {
    Engines::new(&wasmtime::Config::new()).unwrap()
}

fn add(engine: &Engine, program: Program) -> i32 {
    let Program::Module(module) = program else {
        panic!("a core module loads as a module");
    };
    let mut store = wasmtime::Store::new(engine, ());
    let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
    let add = instance
        .get_typed_func::<(i32, i32), i32>(&mut store, "add")
        .unwrap();
    add.call(&mut store, (2, 40)).unwrap()
}

#[test]
fn auto_starts_a_big_module_on_the_baseline_tier_and_stores_the_optimized_one_after() {
    let tmp = tempfile::tempdir().unwrap();
    let guest = wasm(tmp.path(), "add.wasm", ADD_WAT);
    let dir = tmp.path().join("cache");
    // Every module counts as big here.
    let cache = ModuleCache::at(&dir).tier_from(0);
    let engines = engines();
    let first = cache
        .load_tiered(&engines, &guest, TierChoice::Auto, &quiet())
        .unwrap();
    assert_eq!(first.tier, Tier::Baseline);
    assert!(first.compiled_in.is_some(), "compiled here");
    assert_eq!(add(engines.get(Tier::Baseline), first.program.clone()), 42);
    let upgrade = first.upgrade.expect("the optimized tier is on its way");
    // The baseline artifact is synced and renamed into place after the guest started
    // (mapped from its temporary file): wait for it too.
    first.storing.expect("stored later").join().unwrap();
    assert_eq!(
        add(engines.get(Tier::Baseline), first.program),
        42,
        "still runs once its file is renamed"
    );
    let optimized = upgrade.wait().unwrap();
    assert!(upgrade.took().is_some() && upgrade.ready().is_some());
    assert_eq!(
        add(engines.get(Tier::Optimized), optimized),
        42,
        "same answer"
    );
    assert_eq!(
        artifacts(&dir).len(),
        2,
        "both tiers kept: {:?}",
        artifacts(&dir)
    );
    let files = files(&dir);
    assert!(
        files
            .iter()
            .all(|p| p.extension().is_some_and(|x| x == "cwasm")),
        "no lock or temporary file left behind: {files:?}"
    );
    // The next load finds the optimized artifact and compiles nothing.
    let compiled = std::sync::atomic::AtomicBool::new(false);
    let record = |_: Progress| compiled.store(true, std::sync::atomic::Ordering::Relaxed);
    let next = cache
        .load_tiered(&engines, &guest, TierChoice::Auto, &record)
        .unwrap();
    assert_eq!(next.tier, Tier::Optimized);
    assert!(next.upgrade.is_none() && next.compiled_in.is_none());
    assert!(!compiled.into_inner());
}

#[test]
fn small_modules_and_explicit_tiers_compile_one_tier_only() {
    let tmp = tempfile::tempdir().unwrap();
    let guest = wasm(tmp.path(), "add.wasm", ADD_WAT);
    let engines = engines();
    for (choice, tier) in [
        (TierChoice::Auto, Tier::Optimized), // under the default 4 MiB
        (TierChoice::Optimized, Tier::Optimized),
        (TierChoice::Baseline, Tier::Baseline),
    ] {
        let dir = tmp.path().join(format!("{choice:?}"));
        let cache = ModuleCache::at(&dir).tier_from(if choice == TierChoice::Auto {
            ModuleCache::DEFAULT_TIER_FROM
        } else {
            0
        });
        let mut loaded = cache
            .load_tiered(&engines, &guest, choice, &quiet())
            .unwrap();
        loaded.storing.take().unwrap().join().unwrap();
        assert_eq!(loaded.tier, tier, "{choice:?}");
        assert!(
            loaded.upgrade.is_none(),
            "{choice:?}: nothing in the background"
        );
        assert_eq!(artifacts(&dir).len(), 1, "{choice:?}");
        assert_eq!(add(engines.get(tier), loaded.program), 42);
    }
}

#[test]
fn a_corrupt_artifact_of_either_tier_is_compiled_again_never_loaded() {
    let tmp = tempfile::tempdir().unwrap();
    let guest = wasm(tmp.path(), "add.wasm", ADD_WAT);
    let dir = tmp.path().join("cache");
    let cache = ModuleCache::at(&dir);
    let engines = engines();
    for tier in [Tier::Baseline, Tier::Optimized] {
        assert!(cache
            .compile_stored(engines.get(tier), &guest, false, &quiet())
            .unwrap()
            .is_some());
    }
    for artifact in artifacts(&dir) {
        // Half-written, then junk.
        let full = std::fs::read(&artifact).unwrap();
        std::fs::write(&artifact, &full[..full.len() / 2]).unwrap();
    }
    for (choice, tier) in [
        (TierChoice::Baseline, Tier::Baseline),
        (TierChoice::Optimized, Tier::Optimized),
    ] {
        let mut loaded = cache
            .load_tiered(&engines, &guest, choice, &quiet())
            .unwrap();
        loaded.storing.take().unwrap().join().unwrap();
        assert!(loaded.compiled_in.is_some(), "{tier:?}: compiled again");
        assert_eq!(add(engines.get(tier), loaded.program), 42);
    }
    for tier in [Tier::Baseline, Tier::Optimized] {
        assert!(
            cache
                .compile_stored(engines.get(tier), &guest, false, &quiet())
                .unwrap()
                .is_none(),
            "{tier:?}: whole again"
        );
    }
}

#[test]
fn concurrent_compiles_of_one_artifact_compile_it_once() {
    let tmp = tempfile::tempdir().unwrap();
    let guest = wasm(tmp.path(), "add.wasm", ADD_WAT);
    let cache = ModuleCache::at(tmp.path().join("cache"));
    let engine = engines().get(Tier::Optimized).clone();
    let compiles = std::sync::atomic::AtomicUsize::new(0);
    let count = |p: Progress| {
        if matches!(p, Progress::Compiling { .. }) {
            compiles.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    };
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                cache
                    .compile_stored(&engine, &guest, false, &count)
                    .unwrap();
            });
        }
    });
    assert_eq!(compiles.into_inner(), 1);
}

#[test]
fn two_tiers_stay_within_the_size_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let engines = engines();
    let cache = ModuleCache::at(&dir).with_limit(1);
    for i in 0..3 {
        let guest = wasm(
            tmp.path(),
            "g.wasm",
            &format!("(module (func (export \"f{i}\")))"),
        );
        for tier in [Tier::Baseline, Tier::Optimized] {
            cache
                .compile_stored(engines.get(tier), &guest, false, &quiet())
                .unwrap();
            assert_eq!(artifacts(&dir).len(), 1, "only the newest is kept");
        }
    }
}

const SUB_WAT: &str = r#"(module (func (export "add") (param i32 i32) (result i32)
    local.get 0 local.get 1 i32.sub))"#;

/// Waits until files written now are old enough to be remembered.
fn settle() {
    std::thread::sleep(source::SETTLED + Duration::from_millis(100));
}

#[test]
fn a_settled_guest_is_known_by_its_identity_and_a_hit_reads_none_of_it() {
    let (_tmp, dir, cache, guest) = cache_and_add_guest();
    let engine = Engine::default();
    cache.load(&engine, &guest, &quiet()).unwrap();
    assert!(
        Source::open(Some(&dir), true, &guest).unwrap().was_read(),
        "a file changed a moment ago is read and hashed every time"
    );
    settle();
    let compiles = std::sync::atomic::AtomicUsize::new(0);
    let count = |p: Progress| {
        if matches!(p, Progress::Compiling { .. }) {
            compiles.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    };
    // This load reads the settled file and remembers it; the next ones need not.
    cache.load(&engine, &guest, &count).unwrap();
    let known = Source::open(Some(&dir), true, &guest).unwrap();
    assert!(
        !known.was_read(),
        "an unchanged file is known by its identity"
    );
    let bytes = std::fs::read(&guest).unwrap();
    let digest: Digest = <sha2::Sha256 as sha2::Digest>::digest(&bytes).into();
    assert_eq!(known.digest(), Some(&digest));
    assert_eq!(known.len(), bytes.len() as u64);
    assert!(!known.component());
    assert_eq!(
        add(&engine, cache.load(&engine, &guest, &count).unwrap()),
        42
    );
    assert_eq!(compiles.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert!(
        Source::open(None, false, &guest).unwrap().was_read(),
        "without a cache nothing is remembered"
    );

    // A torn or foreign memo is never believed: the file is read again.
    let memos: Vec<PathBuf> = std::fs::read_dir(dir.join(source::MEMO_DIR))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(memos.len(), 1, "{memos:?}");
    let text = std::fs::read_to_string(&memos[0]).unwrap();
    std::fs::write(&memos[0], &text[..text.len() / 2]).unwrap();
    assert!(Source::open(Some(&dir), true, &guest).unwrap().was_read());
    assert_eq!(
        add(&engine, cache.load(&engine, &guest, &count).unwrap()),
        42
    );
}

#[test]
fn a_guest_rewritten_in_place_with_its_old_size_and_mtime_is_compiled_again() {
    let (_tmp, dir, cache, guest) = cache_and_add_guest();
    let engine = Engine::default();
    let mtime = std::fs::metadata(&guest).unwrap().modified().unwrap();
    settle();
    assert_eq!(
        add(&engine, cache.load(&engine, &guest, &quiet()).unwrap()),
        42
    );
    assert!(!Source::open(Some(&dir), true, &guest).unwrap().was_read());

    // Same size, same inode, the modification time set back: only the change time
    // tells, and it does.
    let sub = wat::parse_str(SUB_WAT).unwrap();
    assert_eq!(sub.len(), std::fs::read(&guest).unwrap().len());
    let mut file = std::fs::File::options().write(true).open(&guest).unwrap();
    std::io::Write::write_all(&mut file, &sub).unwrap();
    file.set_modified(mtime).unwrap();
    drop(file);
    assert_eq!(
        std::fs::metadata(&guest).unwrap().modified().unwrap(),
        mtime
    );
    assert_eq!(
        add(&engine, cache.load(&engine, &guest, &quiet()).unwrap()),
        2 - 40
    );
    let engines = engines();
    let loaded = cache
        .load_tiered(&engines, &guest, TierChoice::Optimized, &quiet())
        .unwrap();
    assert_eq!(add(engines.get(loaded.tier), loaded.program), 2 - 40);
}

#[test]
fn a_guest_known_by_its_digest_loads_without_its_file_once_its_optimized_code_is_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = ModuleCache::at(tmp.path().join("cache")).tier_from(0);
    let engines = engines();
    let guest = wasm(tmp.path(), "add.wasm", ADD_WAT);
    let digest: Digest = Sha256::digest(std::fs::read(&guest).unwrap()).into();
    let absent = tmp.path().join("not-fetched.wasm");
    // Nothing compiled yet: the file is needed, and it is not there.
    let err = cache
        .load_tiered_by_digest(&engines, (&absent, &digest), TierChoice::Auto, &quiet())
        .err()
        .unwrap();
    assert!(matches!(err, LoadError::Read { .. }), "{err}");
    // With its file, loaded as ever (here: a big module on the baseline tier, whose
    // optimized code comes after).
    let first = cache
        .load_tiered_by_digest(&engines, (&guest, &digest), TierChoice::Auto, &quiet())
        .unwrap();
    assert_eq!(first.tier, Tier::Baseline);
    first.upgrade.unwrap().wait().unwrap();
    // Then by its digest alone, on the optimized tier, compiling nothing.
    let known = cache
        .load_tiered_by_digest(&engines, (&absent, &digest), TierChoice::Auto, &quiet())
        .unwrap();
    assert_eq!(known.tier, Tier::Optimized);
    assert!(known.compiled_in.is_none() && known.upgrade.is_none());
    assert_eq!(add(engines.get(Tier::Optimized), known.program), 42);
    // Another digest is another program: not this one's code.
    let other = [0x5a; 32];
    assert!(cache
        .load_tiered_by_digest(&engines, (&absent, &other), TierChoice::Auto, &quiet())
        .is_err());
    // A component's code is mapped as a component.
    let component = tmp.path().join("c.wasm");
    let bytes = wat::parse_str(r#"(component (core module (func (export "f"))))"#).unwrap();
    std::fs::write(&component, &bytes).unwrap();
    let digest: Digest = Sha256::digest(&bytes).into();
    let loaded = cache
        .load_tiered_by_digest(
            &engines,
            (&component, &digest),
            TierChoice::Optimized,
            &quiet(),
        )
        .unwrap();
    if let Some(storing) = loaded.storing {
        storing.join().unwrap();
    }
    let known = cache
        .load_tiered_by_digest(
            &engines,
            (&absent, &digest),
            TierChoice::Optimized,
            &quiet(),
        )
        .unwrap();
    assert!(matches!(known.program, Program::Component(_)));
}

#[test]
fn code_compiled_ahead_loads_on_an_engine_of_the_same_settings_only() {
    let engines = engines();
    let wasm = wat::parse_str(ADD_WAT).unwrap();
    let optimized = engines.get(Tier::Optimized);
    let code = compile_ahead(optimized, &wasm).unwrap();
    let name = Path::new("layer sha256:1234");
    let program = load_compiled_ahead(optimized, name, &code).unwrap();
    assert_eq!(add(optimized, program), 42);

    // The baseline engine differs in its compiler: its settings refuse the code.
    let err = load_compiled_ahead(engines.get(Tier::Baseline), name, &code)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.starts_with("cannot load layer sha256:1234: ") && !err.contains('\n'),
        "{err}"
    );
    // Wasm is not compiled code, and compiled code is not compiled again.
    let err = load_compiled_ahead(optimized, name, &wasm).err().unwrap();
    assert!(
        err.to_string().contains("not code compiled ahead of time"),
        "{err}"
    );
    assert!(compile_ahead(optimized, &code)
        .unwrap_err()
        .contains("compiled code already"));
}

#[test]
fn a_kept_cache_maps_what_its_keeper_compiles_stores_nothing_and_compiles_only_what_it_cannot() {
    let (tmp, keeper_dir, keeper_cache, guest) = cache_and_add_guest();
    let engines = Arc::new(engines());
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let willing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let keeper = Keeper {
        fetch: {
            let dir = keeper_dir.clone();
            Arc::new(move |key: &str| std::fs::File::open(dir.join(format!("{key}.cwasm"))).ok())
        },
        compile: {
            let (asked, willing, engines) = (
                Arc::clone(&asked),
                Arc::clone(&willing),
                Arc::clone(&engines),
            );
            Arc::new(move |path: &Path, tier: Tier| {
                asked.lock().unwrap().push((path.to_owned(), tier));
                willing.load(std::sync::atomic::Ordering::Relaxed)
                    && keeper_cache
                        .compile_stored(engines.get(tier), path, false, &|_| {})
                        .is_ok()
            })
        },
    };
    let kept = ModuleCache::kept_by(keeper);
    let compiles = std::sync::atomic::AtomicUsize::new(0);
    let count = |p: Progress| {
        if matches!(p, Progress::Compiling { .. }) {
            compiles.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    };
    let only_the_guest = || {
        assert_eq!(
            std::fs::read_dir(tmp.path()).unwrap().count(),
            2,
            "the guest and the keeper's directory: nothing stored beside them"
        );
    };
    // A keeper that cannot: compiled here, in memory; nothing written anywhere.
    let loaded = kept
        .load_tiered(&engines, &guest, TierChoice::Auto, &count)
        .unwrap();
    assert_eq!(add(engines.get(Tier::Optimized), loaded.program), 42);
    assert_eq!(*asked.lock().unwrap(), [(guest.clone(), Tier::Optimized)]);
    assert!(artifacts(&keeper_dir).is_empty());
    std::fs::create_dir_all(&keeper_dir).unwrap();
    only_the_guest();
    // A keeper that can: it compiles and keeps the code, which is mapped from it.
    willing.store(true, std::sync::atomic::Ordering::Relaxed);
    let loaded = kept
        .load_tiered(&engines, &guest, TierChoice::Auto, &count)
        .unwrap();
    assert_eq!(add(engines.get(Tier::Optimized), loaded.program), 42);
    assert_eq!(asked.lock().unwrap().len(), 2);
    let stored = artifacts(&keeper_dir);
    assert_eq!(stored.len(), 1);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&stored[0]).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o777,
        0o644,
        "readable through a descriptor by any user"
    );
    only_the_guest();
    // Kept: the next load maps it, asking nothing and compiling nothing.
    let before = compiles.load(std::sync::atomic::Ordering::Relaxed);
    let loaded = kept
        .load_tiered(&engines, &guest, TierChoice::Auto, &count)
        .unwrap();
    assert_eq!((loaded.tier, loaded.compiled_in), (Tier::Optimized, None));
    assert_eq!(add(engines.get(Tier::Optimized), loaded.program), 42);
    assert_eq!(compiles.load(std::sync::atomic::Ordering::Relaxed), before);
    assert_eq!(asked.lock().unwrap().len(), 2);
}
