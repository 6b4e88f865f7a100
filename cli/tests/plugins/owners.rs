//! Whose a plugin's files are, and a plugin stuck in a host call when its runtime
//! goes away.

use super::*;

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
        .args([
            "--ignored",
            "--exact",
            "owners::plugin_owner_probe",
            "--nocapture",
        ])
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
    let faulty = c_plugin(&repo("cli/tests/plugins/faulty.c"));
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
