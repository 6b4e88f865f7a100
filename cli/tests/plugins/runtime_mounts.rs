//! Mounts a component makes at run time (`wasm9p:fs/mounts`), within its grants, and
//! `--allow-mount` checked.

use super::*;

#[test]
fn a_component_mounts_an_export_and_a_plugin_at_run_time_within_its_grants() {
    let memfs = c_plugin(&repo("examples/plugins/memfs.c"));
    let guest = wasm9p_tests::c_sandbox_guest(&repo("tests/guests/sandbox_mounts.c"));
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
