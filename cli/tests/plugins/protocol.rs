//! The 9P in front of a plugin: the protocol's rules, and a large directory listed
//! whole.

use super::*;

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
