//! Plugin mounts (`type=plugin`): file systems written as components, built here from C
//! (`examples/plugins/memfs.c`, `host/tests/plugins/faulty.c`) with wit-bindgen,
//! clang-14 and wit-component, mounted by the real `wasm9p` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use wasm9p_tests::{c_plugin, compile_c_guest};

const BIN: &str = env!("CARGO_BIN_EXE_wasm9p");

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn guest(name: &str) -> PathBuf {
    compile_c_guest(&repo(&format!("host/tests/guests/{name}.c")))
}

fn wasm9p(args: &[String]) -> Output {
    Command::new(BIN)
        .env(
            "WASM9P_CACHE_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("module-cache"),
        )
        .args(args)
        .output()
        .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The plugin at `path`, loaded with `limits` and served over 9P in process, and a
/// connection to it that negotiated msize 8192 (the caller attaches).
async fn plugin_over_9p(
    path: &Path,
    limits: wasm9p_host::plugin::PluginLimits,
) -> (
    std::sync::Arc<wasm9p_host::plugin::PluginFs>,
    wasm9p_tests::Conn,
) {
    let plugin = std::sync::Arc::new(
        wasm9p_host::plugin::PluginFs::load(path, limits, &Default::default()).unwrap(),
    );
    let (client, server) = wasm9p_proto::transport::duplex();
    let nodes = std::sync::Arc::new(wasm9p_host::plugin::PluginNodes(plugin.clone()));
    tokio::spawn(wasm9p_server::nodes::serve(nodes, server));
    let mut c = wasm9p_tests::Conn::over(client);
    assert_eq!(c.version(8192).await.msize, 8192);
    (plugin, c)
}

const README: &str = "memfs: files in this mount live in the plugin's memory.\n";

#[test]
fn memfs_serves_the_scenario_guests_as_a_directory_would() {
    // The same guests print the same on memfs (in two cache modes) as on a bind mount
    // of a directory holding what memfs starts with.
    let memfs = c_plugin(&repo("examples/plugins/memfs.c"));
    for name in ["rw_seek", "symlinks", "stat_missing", "readdir300"] {
        let wasm = guest(name);
        let dirs = tempfile::tempdir().unwrap();
        for d in ["data", "other", "other2"] {
            std::fs::create_dir(dirs.path().join(d)).unwrap();
        }
        std::fs::write(dirs.path().join("data/README"), README).unwrap();
        let bind = |d: &str, target: &str| {
            format!(
                "type=bind,source={},target={target}",
                dirs.path().join(d).display()
            )
        };
        let run = |data: String, other: String| {
            wasm9p(&[
                "run".into(),
                "--mount".into(),
                data,
                "--mount".into(),
                other,
                wasm.display().to_string(),
                "/data".into(),
                "/other".into(),
            ])
        };
        let reference = run(bind("data", "/data"), bind("other", "/other"));
        assert_eq!(
            reference.status.code(),
            Some(0),
            "{name} on bind: {:?}",
            text(&reference)
        );
        for cache in ["none", "loose"] {
            let spec = format!(
                "type=plugin,component={},target=/data,cache={cache}",
                memfs.display()
            );
            let out = run(spec, bind("other2", "/other"));
            assert_eq!(
                text(&out),
                text(&reference),
                "{name} on memfs (cache={cache}) prints differently"
            );
            assert_eq!(out.status.code(), Some(0));
        }
    }
}

#[test]
fn what_memfs_cannot_do_is_a_clear_error() {
    let memfs = c_plugin(&repo("examples/plugins/memfs.c"));
    let wasm = guest("rename_unlink");
    let out = wasm9p(&[
        "run".into(),
        "--mount".into(),
        format!("type=plugin,component={},target=/data", memfs.display()),
        "--mount".into(),
        format!("type=plugin,component={},target=/other", memfs.display()),
        wasm.display().to_string(),
        "/data".into(),
        "/other".into(),
    ]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // Hard links are not in the plugin interface; a rename between two mounts (two
    // instances of the plugin) is EXDEV as between any two mounts.
    assert!(stdout.contains("link: -1 Not supported"), "{stdout}");
    assert!(
        stdout.contains("rename across mounts: -1 Cross-device link"),
        "{stdout}"
    );
}

#[test]
fn a_plugin_that_traps_spins_or_sleeps_fails_its_mount_with_eio_and_nothing_else() {
    let faulty = c_plugin(&repo("host/tests/plugins/faulty.c"));
    let probe = guest("plugin_probe");
    let dir = tempfile::tempdir().unwrap();
    for (bad, why) in [
        ("trap", "wasm trap"),
        ("spin", "fuel"),
        ("sleep", "longer than 2 s"),
    ] {
        let start = Instant::now();
        let out = wasm9p(&[
            "run".into(),
            "--mount".into(),
            // A small budget and time limit, so that the bad calls are stopped quickly.
            format!(
                "type=plugin,component={},target=/p,fuel=200000000,call_timeout=2",
                faulty.display()
            ),
            "--mount".into(),
            format!("type=bind,source={},target=/d", dir.path().display()),
            probe.display().to_string(),
            "read:/p/ok".into(),
            format!("read:/p/{bad}"),
            "read:/p/ok".into(),
            format!("write:/d/{bad}.txt:still here"),
        ]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{bad}: {stdout} {stderr}");
        assert_eq!(
            stdout,
            format!(
                "read /p/ok: fine\nread /p/{bad}: I/O error\nread /p/ok: I/O error\n\
                 write /d/{bad}.txt: read back\n"
            ),
            "{bad}: {stderr}"
        );
        assert_eq!(
            stderr.matches("answers EIO from now on").count(),
            1,
            "{bad}: one line says why: {stderr}"
        );
        assert!(stderr.to_lowercase().contains(why), "{bad}: {stderr}");
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{bad}: {:?}",
            start.elapsed()
        );
    }
}

#[test]
fn two_guests_use_one_plugin_at_once() {
    // Each guest writes its file, then waits for the other's: they can only both finish
    // if they run at the same time on the same plugin instance.
    let memfs = c_plugin(&repo("examples/plugins/memfs.c"));
    let probe = guest("plugin_probe");
    let dir = tempfile::tempdir().unwrap();
    let commands = dir.path().join("commands");
    std::fs::write(
        &commands,
        "probe write:/m/a:from-a wait:/m/b:from-b\nprobe write:/m/b:from-b wait:/m/a:from-a\n",
    )
    .unwrap();
    let out = wasm9p(&[
        "batch".into(),
        "--jobs".into(),
        "2".into(),
        "--mount".into(),
        format!(
            "type=plugin,component={},target=/m,cache=none",
            memfs.display()
        ),
        "--module".into(),
        probe.display().to_string(),
        commands.display().to_string(),
    ]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout} {stderr}");
    for line in [
        "write /m/a: read back",
        "write /m/b: read back",
        "wait /m/a: seen",
        "wait /m/b: seen",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
}

#[test]
fn bad_plugins_and_options_are_one_line_and_exit_2() {
    let probe = guest("plugin_probe");
    let not_a_plugin = guest("stat_missing");
    let memfs = c_plugin(&repo("examples/plugins/memfs.c"));
    for (spec, says) in [
        (
            format!("type=plugin,component={},target=/p", not_a_plugin.display()),
            "is not a component",
        ),
        (
            "type=plugin,component=/nonexistent.wasm,target=/p".to_string(),
            "cannot read /nonexistent.wasm",
        ),
        (
            format!(
                "type=plugin,component={},target=/p,instances=0",
                memfs.display()
            ),
            "instances= takes 1 to 64",
        ),
        (
            format!(
                "type=plugin,component={},target=/p,reconnect=on",
                memfs.display()
            ),
            "not to plugins",
        ),
        (
            "type=bind,source=/tmp,target=/p,fuel=1000000".to_string(),
            "fuel= applies to plugin mounts",
        ),
        (
            format!(
                "type=plugin,component={},target=/p,call_timeout=0",
                memfs.display()
            ),
            "call_timeout= takes 1 to 3600",
        ),
    ] {
        let out = wasm9p(&[
            "run".into(),
            "--mount".into(),
            spec.clone(),
            probe.display().to_string(),
            "read:/p/x".into(),
        ]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{spec}: {stderr}");
        assert!(stderr.contains(says), "{spec}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{spec}: {stderr}");
    }
    // A command component is a component, but not an fs-plugin.
    let component = wasm9p_tests::componentize(&not_a_plugin);
    let out = wasm9p(&[
        "run".into(),
        "--mount".into(),
        format!("type=plugin,component={},target=/p", component.display()),
        probe.display().to_string(),
        "read:/p/x".into(),
    ]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("does not fit the fs-plugin world"),
        "{stderr}"
    );
}

#[test]
fn a_component_may_not_mount_with_a_store_on_the_hosts_disk() {
    let memfs = c_plugin(&repo("examples/plugins/memfs.c"));
    let guest = wasm9p_tests::c_sandbox_guest(&repo("host/tests/guests/sandbox_mounts.c"));
    let export = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("hello.txt"), "hello from 9p\n").unwrap();
    let store = tempfile::tempdir().unwrap();
    let hostile = store.path().join("made-by-the-guest");
    let spec = |target: &str, extra: &str| {
        format!(
            "type=9p,export={},target={target},cache=loose{extra}",
            export.path().display()
        )
    };
    let out = wasm9p(&[
        "run".into(),
        "--allow-mount".into(),
        format!("/mnt:export:{}", export.path().display()),
        guest.display().to_string(),
        spec("/mnt/data", ""),
        format!(
            "type=plugin,component={},target=/mnt/scratch",
            memfs.display()
        ),
        spec(
            "/mnt/other",
            &format!(",cache=fscache,fscache_dir={}", hostile.display()),
        ),
    ]);
    let (stdout, stderr) = text(&out);
    assert!(
        stdout.contains("mount denied: denied: cache=fscache keeps a store on the host's disk"),
        "{stdout} {stderr}"
    );
    assert!(stdout.contains("mount data: ok"), "{stdout}");
    assert!(!hostile.exists());
}

#[test]
fn a_component_mounts_an_export_and_a_plugin_at_run_time_within_its_grants() {
    let memfs = c_plugin(&repo("examples/plugins/memfs.c"));
    let guest = wasm9p_tests::c_sandbox_guest(&repo("host/tests/guests/sandbox_mounts.c"));
    let export = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("hello.txt"), "hello from 9p\n").unwrap();
    let home = tempfile::tempdir().unwrap();
    let ninep = format!(
        "type=9p,export={},target=/mnt/data,cache=loose",
        export.path().display()
    );
    let plugin = format!(
        "type=plugin,component={},target=/mnt/scratch",
        memfs.display()
    );
    let denied = "type=bind,source=/etc,target=/mnt/etc".to_string();
    let stats_file = tempfile::NamedTempFile::new().unwrap();
    let stats = || -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(stats_file.path()).unwrap()).unwrap()
    };
    let run = |grants: &[String]| {
        let mut args = vec![
            "run".to_string(),
            format!("--stats={}", stats_file.path().display()),
            "--dir".into(),
            format!("{}::/home", home.path().display()),
        ];
        for g in grants {
            args.push("--allow-mount".into());
            args.push(g.clone());
        }
        args.extend([
            guest.display().to_string(),
            ninep.clone(),
            plugin.clone(),
            denied.clone(),
        ]);
        wasm9p(&args)
    };
    let out = run(&[format!(
        "/mnt:export:{},plugin:{}",
        export.path().display(),
        memfs.display()
    )]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout} {stderr}");
    let expected = [
        "mount data: ok",
        "read /mnt/data/hello.txt: hello from 9p",
        "preopens: / /home",
        "wasi:filesystem stat /mnt/data/hello.txt: 14 bytes",
        "mount scratch: ok",
        &format!("read /mnt/scratch/README: {}", README.trim_end()),
        "write scratch: ok",
        "read /mnt/scratch/note: noted",
        "list: /mnt/data 9p (data)",
        "list: /mnt/scratch plugin (scratch)",
        "stats data: requests counted, walks counted",
        "mount denied: denied: no --allow-mount grant covers target /mnt/etc from this source",
        "mount twice: bad-spec: cannot mount at /mnt/data: File exists (EEXIST)",
        "unmount data: ok",
        "read held fd after unmount: hello from 9p",
        "stat after unmount: No such file or directory",
        "unmount again: no-such-mount",
        "stats unknown: no-such-mount",
        "read /mnt/scratch/note: noted",
    ];
    let lines: Vec<&str> = stdout.lines().collect();
    for line in expected {
        assert!(lines.contains(&line), "missing {line:?} in:\n{stdout}");
    }
    assert!(stdout.contains("mount nonsense: bad-spec: "), "{stdout}");
    // Nothing was written outside what was mounted.
    assert!(std::fs::read_dir(home.path()).unwrap().next().is_none());
    // --stats lists what the guest mounted, with its final counters: the export when
    // it was unmounted, memfs when the guest ended.
    let made = stats()["runtime_mounts"].as_array().unwrap().clone();
    assert_eq!(made.len(), 2, "{made:?}");
    for (entry, (target, ty, spec)) in made.iter().zip([
        ("/mnt/data", "9p", &ninep),
        ("/mnt/scratch", "plugin", &plugin),
    ]) {
        assert_eq!(entry["target"], target, "{entry}");
        assert_eq!(entry["type"], ty, "{entry}");
        assert_eq!(entry["spec"], spec.as_str(), "{entry}");
        assert!(
            entry["guest"].as_str().unwrap().contains("sandbox_mounts"),
            "{entry}"
        );
        assert!(entry["rpc"]["total"].as_u64().unwrap() > 0, "{entry}");
    }
    assert!(made[1]["rpc"]["write"].as_u64().unwrap() > 0, "{}", made[1]);

    // The same guest with a grant elsewhere, and with none: every mount is denied, and
    // the guest goes on (a typed error, never a trap).
    // (With no grant at all, `/` is not even preopened: the guest cannot name /mnt.)
    for (grants, read) in [
        (vec!["/elsewhere".to_string()], "No such file or directory"),
        (vec![], "Capabilities insufficient"),
    ] {
        let out = run(&grants);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{grants:?}: {stdout} {stderr}");
        assert!(
            stdout.starts_with("mount data: denied: "),
            "{grants:?}: {stdout}"
        );
        assert!(
            stdout.contains("mount scratch: denied: "),
            "{grants:?}: {stdout}"
        );
        assert!(
            stdout.contains(&format!("read /mnt/data/hello.txt: {read}")),
            "{grants:?}: {stdout}"
        );
        let listed = stats().get("runtime_mounts").cloned();
        if grants.is_empty() {
            assert_eq!(listed, None, "nothing to list without --allow-mount");
        } else {
            assert_eq!(
                listed,
                Some(serde_json::json!([])),
                "every mount was denied"
            );
        }
    }
}

#[test]
fn allow_mount_is_checked_and_refused_for_modules() {
    let probe = guest("plugin_probe");
    for (grant, says) in [
        ("mnt", "PREFIX must be an absolute guest path"),
        (
            "/mnt:ftp:host",
            "is not export:DIR, plugin:FILE, bind:DIR or an address",
        ),
    ] {
        let out = wasm9p(&[
            "run".into(),
            "--allow-mount".into(),
            grant.into(),
            probe.display().to_string(),
        ]);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{grant}: {stderr}");
        assert!(stderr.contains(says), "{grant}: {stderr}");
    }
    let out = wasm9p(&[
        "run".into(),
        "--allow-mount".into(),
        "/mnt".into(),
        probe.display().to_string(),
    ]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is for components"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_9p_in_front_of_a_plugin_keeps_the_protocol_rules() {
    use wasm9p_proto::consts::open;
    use wasm9p_proto::*;
    let memfs = c_plugin(&repo("examples/plugins/memfs.c"));
    let (_, mut c) = plugin_over_9p(&memfs, Default::default()).await;
    let root = c.attach(0, "").await.unwrap();
    assert_eq!(root.ty, consts::qid::DIR);
    // A plugin's files belong to the user running the host (checked as another user by
    // `a_plugins_files_belong_to_the_user_running_the_host`).
    let attr = c.getattr(0).await.unwrap();
    assert_eq!(attr.uid, rustix::process::geteuid().as_raw());
    assert_eq!(attr.gid, rustix::process::getegid().as_raw());
    assert_eq!(c.attach(0, "").await, Err(Errno::EEXIST), "fid in use");
    // `..` from a file goes back to the root; a missing name fails the walk.
    let qids = c.walk(0, 1, "README/..").await.unwrap();
    assert_eq!(qids[1].path, root.path);
    assert_eq!(c.walk(0, 2, "missing").await, Err(Errno::ENOENT));
    assert_eq!(
        c.walk(0, 1, "README").await,
        Err(Errno::EEXIST),
        "newfid in use"
    );
    // Create, rename by fid, remove by fid.
    c.walk(0, 3, "").await.unwrap();
    let created = c
        .rpc(Tlcreate {
            fid: 3,
            name: "f".into(),
            flags: open::RDWR,
            mode: 0o644,
            gid: 0,
        })
        .await
        .unwrap();
    assert!(matches!(created, Message::Rlcreate(_)));
    c.rpc(Trename {
        fid: 3,
        dfid: 0,
        name: "g".into(),
    })
    .await
    .unwrap();
    assert!(c.walk(0, 4, "g").await.is_ok());
    assert_eq!(c.walk(0, 5, "f").await, Err(Errno::ENOENT));
    c.rpc(Tremove { fid: 4 }).await.unwrap();
    assert_eq!(c.walk(0, 5, "g").await, Err(Errno::ENOENT));
    // What a plugin cannot do, and fids that do not exist.
    for (msg, errno) in [
        (
            Message::from(Tsetattr {
                fid: 0,
                valid: consts::setattr::MODE,
                mode: 0o700,
                ..Default::default()
            }),
            Errno::EOPNOTSUPP,
        ),
        (
            Txattrwalk {
                fid: 0,
                newfid: 9,
                name: String::new(),
            }
            .into(),
            Errno::EOPNOTSUPP,
        ),
        (
            Tread {
                fid: 77,
                offset: 0,
                count: 10,
            }
            .into(),
            Errno::EBADF,
        ),
        (Tclunk { fid: 77 }.into(), Errno::EBADF),
        (
            Tmkdir {
                dfid: 0,
                name: "../x".into(),
                mode: 0o755,
                gid: 0,
            }
            .into(),
            Errno::EINVAL,
        ),
    ] {
        assert_eq!(c.rpc(msg.clone()).await.unwrap_err(), errno, "{msg:?}");
    }
    assert!(matches!(
        c.rpc(Tflush { oldtag: 5 }).await.unwrap(),
        Message::Rflush(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_plugin_directory_is_listed_whole_with_one_plugin_call_per_pass() {
    use wasm9p_proto::consts::open;
    use wasm9p_proto::*;
    let memfs = c_plugin(&repo("examples/plugins/memfs.c"));
    let (plugin, mut c) = plugin_over_9p(&memfs, Default::default()).await;
    c.attach(0, "").await.unwrap();
    c.rpc(Tmkdir {
        dfid: 0,
        name: "big".into(),
        mode: 0o755,
        gid: 0,
    })
    .await
    .unwrap();
    c.walk(0, 1, "big").await.unwrap();
    let names: Vec<String> = (0..600).map(|i| format!("entry-{i:04}")).collect();
    for name in &names {
        c.walk(1, 2, "").await.unwrap();
        c.rpc(Tlcreate {
            fid: 2,
            name: name.clone(),
            flags: open::RDWR,
            mode: 0o644,
            gid: 0,
        })
        .await
        .unwrap();
        c.clunk(2).await.unwrap();
    }
    c.lopen(1, open::RDONLY).await.unwrap();
    // 600 entries take about 20 replies of 1 KiB: one plugin call in all.
    let before = plugin.calls();
    let listed = c.readdir_all(1, 1024).await.unwrap();
    assert_eq!(plugin.calls() - before, 1, "plugin calls for one pass");
    let mut seen: Vec<String> = listed.iter().map(|e| e.name.clone()).collect();
    seen.sort();
    assert_eq!(seen, names, "every entry exactly once");
    // Reading from the start again asks the plugin again, and sees what changed.
    c.walk(1, 2, "").await.unwrap();
    c.rpc(Tlcreate {
        fid: 2,
        name: "late".into(),
        flags: open::RDWR,
        mode: 0o644,
        gid: 0,
    })
    .await
    .unwrap();
    let before = plugin.calls();
    let again = c.readdir_all(1, 1024).await.unwrap();
    assert_eq!(plugin.calls() - before, 1);
    assert_eq!(again.len(), 601);
    assert!(again.iter().any(|e| e.name == "late"));
}

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

/// Run by [`a_plugins_files_belong_to_the_user_running_the_host`] as another user:
/// loads memfs from `WASM9P_TEST_PLUGIN` and prints the root's owner.
#[test]
#[ignore = "run as another user by a_plugins_files_belong_to_the_user_running_the_host"]
fn plugin_owner_probe() {
    use wasm9p_proto::*;
    let Some(memfs) = std::env::var_os("WASM9P_TEST_PLUGIN") else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (_, mut c) = plugin_over_9p(Path::new(&memfs), Default::default()).await;
        c.attach(0, "").await.unwrap();
        let attr: Rgetattr = c.getattr(0).await.unwrap();
        println!("owner {} {}", attr.uid, attr.gid);
    });
}

#[test]
fn a_plugins_files_belong_to_the_user_running_the_host() {
    use std::os::unix::process::CommandExt;
    let memfs = c_plugin(&repo("examples/plugins/memfs.c"));
    // As root, become `nobody` (65534) for the probe; as anyone else, stay yourself.
    let me = rustix::process::geteuid().as_raw();
    let (uid, gid) = if me == 0 {
        (65534, 65534)
    } else {
        (me, rustix::process::getegid().as_raw())
    };
    // The probe and the plugin, copied where that user can reach them (the checkout
    // may be private to root).
    use std::os::unix::fs::PermissionsExt;
    let place = tempfile::tempdir().unwrap();
    std::fs::set_permissions(place.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let probe = place.path().join("probe");
    std::fs::copy(std::env::current_exe().unwrap(), &probe).unwrap();
    let plugin = place.path().join("memfs.wasm");
    std::fs::copy(&memfs, &plugin).unwrap();
    for (file, mode) in [(&probe, 0o755), (&plugin, 0o644)] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let out = Command::new(&probe)
        .args(["--ignored", "--exact", "plugin_owner_probe", "--nocapture"])
        .env("WASM9P_TEST_PLUGIN", &plugin)
        .current_dir(place.path())
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("owner {uid} {gid}")),
        "{stdout}\n{stderr}"
    );
}

#[test]
fn a_plugin_stuck_in_a_host_call_does_not_hold_up_its_runtime_going_away() {
    use wasm9p_proto::consts::open;
    use wasm9p_proto::*;
    let faulty = c_plugin(&repo("host/tests/plugins/faulty.c"));
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let read = rt.block_on(async {
            let mut limits = wasm9p_host::plugin::PluginLimits::default();
            limits.set("call_timeout", "1").unwrap();
            let (_, mut c) = plugin_over_9p(&faulty, limits).await;
            c.attach(0, "").await.unwrap();
            c.walk(0, 1, "sleep").await.unwrap();
            c.lopen(1, open::RDONLY).await.unwrap();
            // The plugin sleeps for an hour in this call.
            c.rpc(Tread {
                fid: 1,
                offset: 0,
                count: 10,
            })
            .await
            .map(|_| ())
        });
        // The instance is still in its hour-long sleep: dropping the runtime must not
        // wait for it (an embedder's shutdown would hang for the hour). (It does not:
        // the sleep is a timer of this runtime, which fires as the runtime goes.)
        drop(rt);
        done.send(read).unwrap();
    });
    let read = finished
        .recv_timeout(Duration::from_secs(120))
        .expect("dropping the runtime waited for the sleeping plugin");
    assert_eq!(read, Err(Errno::EIO));
}
