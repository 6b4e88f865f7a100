//! The client against real servers: every operation against our server (over tcp, unix
//! and the in-process duplex) and against Debian's diod (over tcp and unix), with the
//! host filesystem as the oracle; fids return to their baseline afterwards.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use wasm9p_guest_fs::client::{ClientConfig, Session, SetAttr};
use wasm9p_proto::consts::{lock, open, AT_REMOVEDIR};
use wasm9p_proto::{Addr, Errno};
use wasm9p_server::{ExportConfig, Server, ServerConfig};
use wasm9p_tests::{Diod, TestServer, Tree};

fn fixture() -> tempfile::TempDir {
    let dir = Tree::build(&[
        Tree::file("hello.txt", "hello, world\n"),
        Tree::Dir("sub", vec![Tree::file("inner.txt", "inner")]),
        Tree::Symlink("link", "sub/inner.txt"),
        Tree::File(
            "big.bin",
            (0..2_500_000u32).map(|i| (i * 13 % 251) as u8).collect(),
        ),
    ]);
    let mut deep = dir.path().to_path_buf();
    for i in 0..20 {
        deep.push(format!("d{i}"));
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("bottom"), b"deep down").unwrap();
    std::fs::create_dir(dir.path().join("many")).unwrap();
    for i in 0..300 {
        std::fs::write(dir.path().join(format!("many/f{i:03}")), b"").unwrap();
    }
    dir
}

fn config(msize: u32) -> ClientConfig {
    ClientConfig {
        msize,
        timeout: Duration::from_secs(20),
        ..ClientConfig::default()
    }
}

/// Waits (bounded) for background clunks to land and the fid count to return.
async fn settle(session: &Session, baseline: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while session.live_fids() != baseline {
        assert!(
            Instant::now() < deadline,
            "fids leaked: {} live, baseline {baseline}",
            session.live_fids()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs every operation and checks it against `dir` on the host.
async fn exercise(session: &Session, dir: &Path, aname: &str, server: &str) {
    let root = session.attach(aname).await.unwrap();
    let baseline = session.live_fids();
    assert_eq!(baseline, 1);

    // Walks: short, 21 names (two Twalks), partial, missing first, symlink qids.
    let w = root.walk(&["sub", "inner.txt"]).await.unwrap();
    assert_eq!(w.qids.len(), 2);
    assert_eq!(w.fid.getattr().await.unwrap().size, 5);
    drop(w);
    let deep: Vec<String> = (0..20)
        .map(|i| format!("d{i}"))
        .chain(["bottom".into()])
        .collect();
    let w = root.walk(&deep).await.unwrap();
    assert_eq!(w.qids.len(), 21);
    w.fid.lopen(open::RDONLY).await.unwrap();
    assert_eq!(&w.fid.read_at(0, 100).await.unwrap()[..], b"deep down");
    let mut partial = deep.clone();
    partial[18] = "missing".into();
    let e = root.walk(&partial).await.unwrap_err();
    assert_eq!(
        (e.index, e.errno, e.qids.len()),
        (18, Errno::ENOENT, 18),
        "{server}"
    );
    let e = root.walk(&["nope", "x"]).await.unwrap_err();
    assert_eq!((e.index, e.errno), (0, Errno::ENOENT), "{server}");
    let link = root.walk(&["link"]).await.unwrap();
    assert!(link.qids[0].is_symlink(), "{server}");
    assert_eq!(link.fid.readlink().await.unwrap(), "sub/inner.txt");

    // Large read, split and pipelined.
    let big = root.walk(&["big.bin"]).await.unwrap().fid;
    big.lopen(open::RDONLY).await.unwrap();
    let expected = std::fs::read(dir.join("big.bin")).unwrap();
    assert_eq!(
        big.read_at(0, 10 << 20).await.unwrap(),
        expected,
        "{server}"
    );
    assert_eq!(
        &big.read_at(1_000_000, 70_000).await.unwrap()[..],
        &expected[1_000_000..1_070_000]
    );

    // Create, large write, fsync, setattr.
    let mut file = root.clone_fid().await.unwrap();
    file.lcreate("made.bin", open::RDWR | open::CREAT | open::EXCL, 0o644, 0)
        .await
        .unwrap();
    let payload: Vec<u8> = (0..700_000u32).map(|i| (i % 241) as u8).collect();
    file.write_all_at(0, Bytes::from(payload.clone()))
        .await
        .unwrap();
    file.fsync(false).await.unwrap();
    assert_eq!(
        std::fs::read(dir.join("made.bin")).unwrap(),
        payload,
        "{server}"
    );
    file.setattr(&SetAttr {
        size: Some(10),
        mode: Some(0o600),
        mtime: Some(Some((1_500_000_000, 7))),
        ..Default::default()
    })
    .await
    .unwrap();
    let m = std::fs::metadata(dir.join("made.bin")).unwrap();
    assert_eq!(
        (m.len(), m.mode() & 0o777, m.mtime()),
        (10, 0o600, 1_500_000_000),
        "{server}"
    );
    file.clunk().await.unwrap();

    // mkdir, symlink, mknod, link.
    let q = root.mkdir("newdir", 0o755, 0).await.unwrap();
    assert!(q.is_dir() && dir.join("newdir").is_dir());
    assert!(root
        .symlink("sl", "hello.txt", 0)
        .await
        .unwrap()
        .is_symlink());
    assert_eq!(
        std::fs::read_link(dir.join("sl")).unwrap().to_str(),
        Some("hello.txt")
    );
    root.mknod("fifo", 0o10644, 0, 0, 0).await.unwrap();
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(dir.join("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    let hello = root.walk(&["hello.txt"]).await.unwrap().fid;
    root.link(&hello, "hard").await.unwrap();
    assert_eq!(
        std::fs::metadata(dir.join("hello.txt")).unwrap().nlink(),
        2,
        "{server}"
    );

    // New files get the modes asked for: the client applied its user's umask, and the
    // server's own (this process's 022 for ours) takes nothing more.
    let mut exact = root.clone_fid().await.unwrap();
    exact
        .lcreate("g620", open::WRONLY | open::CREAT | open::EXCL, 0o620, 0)
        .await
        .unwrap();
    exact.clunk().await.unwrap();
    root.mkdir("d770", 0o770, 0).await.unwrap();
    root.mknod("fifo620", 0o10620, 0, 0, 0).await.unwrap();
    let mode = |n: &str| std::fs::symlink_metadata(dir.join(n)).unwrap().mode() & 0o7777;
    assert_eq!(
        (mode("g620"), mode("d770"), mode("fifo620")),
        (0o620, 0o770, 0o620),
        "{server}"
    );

    // readdir of 300 entries.
    let many = root.walk(&["many"]).await.unwrap().fid;
    many.lopen(open::RDONLY | open::DIRECTORY).await.unwrap();
    let mut names: Vec<String> = many
        .readdir_all()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n != "." && n != "..")
        .collect();
    names.sort();
    let mut expected: Vec<String> = std::fs::read_dir(dir.join("many"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    expected.sort();
    assert_eq!(names, expected, "{server}");

    // rename, renameat (with fallback on diod), unlinkat, remove.
    let subdir = root.walk(&["sub"]).await.unwrap().fid;
    hello.rename(&subdir, "moved.txt").await.unwrap();
    assert!(
        dir.join("sub/moved.txt").exists() && !dir.join("hello.txt").exists(),
        "{server}"
    );
    root.renameat("hard", &subdir, "hard2").await.unwrap();
    assert!(dir.join("sub/hard2").exists(), "{server}");
    assert_eq!(
        root.renameat("absent", &subdir, "x").await,
        Err(Errno::ENOENT)
    );
    subdir.unlinkat("hard2", 0).await.unwrap();
    assert!(!dir.join("sub/hard2").exists());
    root.mkdir("gone", 0o755, 0).await.unwrap();
    assert_eq!(
        root.unlinkat("gone", 0).await,
        Err(Errno::EISDIR),
        "{server}"
    );
    root.unlinkat("gone", AT_REMOVEDIR).await.unwrap();
    assert!(!dir.join("gone").exists());
    root.walk(&["sl"])
        .await
        .unwrap()
        .fid
        .remove()
        .await
        .unwrap();
    assert!(std::fs::symlink_metadata(dir.join("sl")).is_err());

    // statfs, xattrs, locks.
    assert!(root.statfs().await.unwrap().bsize > 0);
    let target = root.walk(&["sub", "inner.txt"]).await.unwrap().fid;
    target
        .set_xattr("user.wasm9p", Bytes::from_static(b"blue"), 0)
        .await
        .unwrap();
    assert_eq!(
        &target.get_xattr("user.wasm9p").await.unwrap()[..],
        b"blue",
        "{server}"
    );
    let list = target.get_xattr("").await.unwrap();
    assert!(
        list.split(|b| *b == 0).any(|n| n == b"user.wasm9p"),
        "{server}: {list:?}"
    );
    assert_eq!(
        target.get_xattr("user.absent").await,
        Err(Errno::ENODATA),
        "{server}"
    );
    let locked = target.clone_fid().await.unwrap();
    locked.lopen(open::RDWR).await.unwrap();
    assert_eq!(
        locked.lock(lock::WRLCK, 0, 0, 10, 1, "c").await.unwrap(),
        lock::SUCCESS
    );
    assert_eq!(
        locked.getlock(lock::RDLCK, 0, 10, 1, "c").await.unwrap().ty,
        lock::UNLCK,
        "own lock does not conflict"
    );
    assert_eq!(
        locked.lock(lock::UNLCK, 0, 0, 10, 1, "c").await.unwrap(),
        lock::SUCCESS
    );

    // Errors come back as errnos.
    assert_eq!(root.mkdir("newdir", 0o755, 0).await, Err(Errno::EEXIST));
    assert_eq!(
        root.walk(&["hello.txt"]).await.unwrap_err().errno,
        Errno::ENOENT
    );

    // Every fid handed out comes back.
    drop((w, link, big, hello, many, subdir, target, locked));
    settle(session, baseline).await;
    drop(root);
    settle(session, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_against_our_server_over_tcp_unix_and_duplex() {
    // TCP, at a small msize so large I/O is split into many requests.
    let dir = fixture();
    let server = TestServer::tcp(dir.path());
    let session = Session::connect(&server.addr, config(8192)).await.unwrap();
    exercise(&session, dir.path(), "", "ours/tcp").await;
    // Our server has Trenameat/Tunlinkat: no fallback was needed (the one Trename and
    // the one Tremove are the explicit calls).
    let counts: std::collections::HashMap<_, _> = session.counts().snapshot().into_iter().collect();
    assert_eq!((counts["rename"], counts["remove"]), (1, 1), "{counts:?}");

    let dir = fixture();
    let sock = tempfile::tempdir().unwrap();
    let addr = format!("unix:{}", sock.path().join("s").display());
    let server = TestServer::start(
        ServerConfig {
            exports: vec![ExportConfig::new(dir.path())],
            ..Default::default()
        },
        &addr,
    );
    let session = Session::connect(&server.addr, config(512 * 1024))
        .await
        .unwrap();
    exercise(&session, dir.path(), "", "ours/unix").await;

    let dir = fixture();
    let server = Server::new(ServerConfig {
        exports: vec![ExportConfig::new(dir.path())],
        ..Default::default()
    })
    .unwrap();
    let (client_end, server_end) = wasm9p_proto::transport::duplex();
    tokio::spawn(async move { server.serve_connection(server_end, "duplex".into()).await });
    let session = Session::over(client_end, config(64 * 1024)).await.unwrap();
    exercise(&session, dir.path(), "", "ours/duplex").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_against_diod_over_tcp_and_unix() {
    let dir = fixture();
    let diod = Diod::start(dir.path());
    let addr = Addr::Tcp {
        host: "127.0.0.1".into(),
        port: diod.port,
    };
    let session = Session::connect(&addr, config(512 * 1024)).await.unwrap();
    assert_eq!(session.msize(), 65536, "diod grants 64 KiB");
    exercise(
        &session,
        dir.path(),
        dir.path().to_str().unwrap(),
        "diod/tcp",
    )
    .await;
    // diod 1.0.24 answers Trenameat/Tunlinkat with EOPNOTSUPP: the fallbacks ran, once.
    let counts: std::collections::HashMap<_, _> = session.counts().snapshot().into_iter().collect();
    assert_eq!(counts.get("renameat"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("unlinkat"), Some(&1), "{counts:?}");
    assert!(counts["rename"] >= 2 && counts["remove"] >= 3, "{counts:?}");

    let dir = fixture();
    let sock = tempfile::tempdir().unwrap();
    let path = sock.path().join("diod.sock");
    let diod = Diod::start_on(dir.path(), path.to_str().unwrap());
    let session = Session::connect(&Addr::Unix(path), config(16384))
        .await
        .unwrap();
    exercise(
        &session,
        dir.path(),
        dir.path().to_str().unwrap(),
        "diod/unix",
    )
    .await;
    drop(diod);
}
