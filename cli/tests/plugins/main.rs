//! Plugin mounts (`type=plugin`): file systems written as components, built here from C
//! (`examples/plugins/memfs.c`, `cli/tests/plugins/faulty.c`) with wit-bindgen,
//! clang-14 and wit-component, mounted by the real `wasm9p` binary.
//!
//! By scenario: here, what memfs serves and cannot do, failing plugins, two guests at
//! once and bad options; `runtime_mounts`, `protocol`, `module_cache` and `owners`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use wasm9p_tests::{c_plugin, compile_c_guest};

const BIN: &str = env!("CARGO_BIN_EXE_wasm9p");

mod module_cache;
mod owners;
mod protocol;
mod runtime_mounts;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn guest(name: &str) -> PathBuf {
    compile_c_guest(&repo(&format!("tests/guests/{name}.c")))
}

fn wasm9p(args: &[String]) -> Output {
    wasm9p_tests::wasm9p_command(BIN, env!("CARGO_TARGET_TMPDIR"))
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
    let faulty = c_plugin(&repo("cli/tests/plugins/faulty.c"));
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
    let guest = wasm9p_tests::c_sandbox_guest(&repo("tests/guests/sandbox_mounts.c"));
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
