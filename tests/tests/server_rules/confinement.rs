//! Walks, symlinks and names: nothing leads out of the export; walk results, fids
//! and what getattr and read report.

use super::*;

#[tokio::test]
async fn walk_dotdot_at_root_stays_at_root() {
    let dir = fixture();
    let (_s, mut c) = session(dir.path()).await;
    let root = c.getattr(0).await.unwrap().qid;
    let qids = c.walk(0, 1, "../../..").await.unwrap();
    assert_eq!(qids, vec![root; 3]);
    // From the root's "parent" we still see the export's own files.
    assert_eq!(c.cat(2, "../hello.txt").await.unwrap(), b"hello, world\n");
    // And `..` from a subdirectory lands on the root.
    let qids = c.walk(0, 3, "sub/..").await.unwrap();
    assert_eq!(qids[1], root);
}

#[tokio::test]
async fn walk_never_follows_symlinks() {
    let dir = fixture();
    let (_s, mut c) = session(dir.path()).await;
    for link in ["abs-escape", "rel-escape", "to-sub"] {
        // Walking to the link itself yields a symlink qid...
        let qids = c.walk(0, 1, link).await.unwrap();
        assert!(qids[0].is_symlink(), "{link}");
        c.clunk(1).await.unwrap();
        // ...walking through it fails at that element: partial walk of one qid.
        let qids = c.walk(0, 1, &format!("{link}/passwd")).await.unwrap();
        assert_eq!(qids.len(), 1, "{link}: walk must stop at the symlink");
        assert_eq!(
            c.getattr(1).await,
            Err(Errno::EBADF),
            "{link}: newfid left unbound"
        );
    }
}

#[tokio::test]
async fn lopen_of_a_symlink_never_opens_its_target() {
    let dir = fixture();
    let (_s, mut c) = session(dir.path()).await;
    for link in ["abs-escape", "rel-escape", "to-sub", "dangling"] {
        c.walk(0, 1, link).await.unwrap();
        assert_eq!(
            c.lopen(1, open::RDONLY).await.unwrap_err(),
            Errno::ELOOP,
            "{link}"
        );
        c.clunk(1).await.unwrap();
    }
    // readlink gives the text, unresolved.
    c.walk(0, 1, "rel-escape").await.unwrap();
    let r = expect_reply!(c.rpc(Treadlink { fid: 1 }).await, Rreadlink);
    assert_eq!(r.target, "../../../../../../etc");
}

#[tokio::test]
async fn client_made_symlinks_do_not_lead_out() {
    let dir = fixture();
    let (_s, mut c) = session(dir.path()).await;
    let made = c
        .rpc(Tsymlink {
            fid: 0,
            name: "mine".into(),
            symtgt: "/".into(),
            gid: 0,
        })
        .await;
    assert!(expect_reply!(made, Rsymlink).qid.is_symlink());
    assert_eq!(
        std::fs::read_link(dir.path().join("mine"))
            .unwrap()
            .to_str(),
        Some("/")
    );
    let qids = c.walk(0, 1, "mine/etc/passwd").await.unwrap();
    assert_eq!(qids.len(), 1);
    // Creating through the link is impossible: it is not a directory fid.
    c.walk(0, 2, "mine").await.unwrap();
    let create = c.lcreate(2, "x", open::RDWR, 0o644).await;
    assert_eq!(create.unwrap_err(), Errno::ENOTDIR);
    let mkdir = c
        .rpc(Tmkdir {
            dfid: 2,
            name: "x".into(),
            mode: 0o755,
            gid: 0,
        })
        .await;
    assert_eq!(mkdir.unwrap_err(), Errno::ENOTDIR);
    // setattr on the link never chmods what it points at (here: the host's /).
    let before = std::fs::metadata("/").unwrap().mode();
    let _ = c
        .rpc(Tsetattr {
            fid: 2,
            valid: consts::setattr::MODE,
            mode: 0o700,
            ..Default::default()
        })
        .await;
    assert_eq!(std::fs::metadata("/").unwrap().mode(), before);
}

#[tokio::test]
async fn names_with_slash_or_dots_are_refused_everywhere() {
    let dir = fixture();
    let (_s, mut c) = session(dir.path()).await;
    c.walk(0, 1, "hello.txt").await.unwrap();
    for bad in ["a/b", "../x", "/etc/passwd", "..", ".", ""] {
        let results = [
            c.rpc(Tlcreate {
                fid: 0,
                name: bad.into(),
                flags: open::RDWR,
                mode: 0o644,
                gid: 0,
            })
            .await,
            c.rpc(Tmkdir {
                dfid: 0,
                name: bad.into(),
                mode: 0o755,
                gid: 0,
            })
            .await,
            c.rpc(Tsymlink {
                fid: 0,
                name: bad.into(),
                symtgt: "t".into(),
                gid: 0,
            })
            .await,
            c.rpc(Tlink {
                dfid: 0,
                fid: 1,
                name: bad.into(),
            })
            .await,
            c.rpc(Trename {
                fid: 1,
                dfid: 0,
                name: bad.into(),
            })
            .await,
            c.rpc(Trenameat {
                olddirfid: 0,
                oldname: "hello.txt".into(),
                newdirfid: 0,
                newname: bad.into(),
            })
            .await,
            c.rpc(Trenameat {
                olddirfid: 0,
                oldname: bad.into(),
                newdirfid: 0,
                newname: "n".into(),
            })
            .await,
            c.rpc(Tunlinkat {
                dirfd: 0,
                name: bad.into(),
                flags: 0,
            })
            .await,
            c.rpc(Tmknod {
                dfid: 0,
                name: bad.into(),
                mode: 0o10644,
                major: 0,
                minor: 0,
                gid: 0,
            })
            .await,
        ];
        for (i, r) in results.into_iter().enumerate() {
            assert_eq!(r, Err(Errno::EINVAL), "operation {i} with name {bad:?}");
        }
    }
    // Nothing moved, nothing was created.
    assert_eq!(
        std::fs::read(dir.path().join("hello.txt")).unwrap(),
        b"hello, world\n"
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 6);
}

#[tokio::test]
async fn partial_walk_reports_prefix_and_leaves_newfid_unbound() {
    let dir = fixture();
    let (_s, mut c) = session(dir.path()).await;
    let qids = c.walk(0, 1, "sub/deeper/missing/more").await.unwrap();
    assert_eq!(qids.len(), 2);
    assert!(qids.iter().all(Qid::is_dir));
    assert_eq!(c.getattr(1).await, Err(Errno::EBADF));
    // The first name missing is an error, not an empty Rwalk.
    assert_eq!(c.walk(0, 1, "missing").await, Err(Errno::ENOENT));
    // A file in the middle: ENOTDIR stops the walk after it.
    let qids = c.walk(0, 1, "hello.txt/x").await.unwrap();
    assert_eq!(qids.len(), 1);
    // More than 16 names is refused.
    let long = vec!["sub".to_string(); 17];
    assert_eq!(
        c.rpc(Twalk {
            fid: 0,
            newfid: 1,
            wnames: long
        })
        .await,
        Err(Errno::EINVAL)
    );
}

#[tokio::test]
async fn walk_to_a_newfid_in_use_is_an_error_and_clunk_frees_it() {
    let dir = fixture();
    let (_s, mut c) = session(dir.path()).await;
    c.walk(0, 1, "sub").await.unwrap();
    assert_eq!(c.walk(0, 1, "hello.txt").await, Err(Errno::EEXIST));
    assert!(
        c.getattr(1).await.unwrap().qid.is_dir(),
        "fid 1 still names sub"
    );
    c.clunk(1).await.unwrap();
    assert_eq!(c.getattr(1).await, Err(Errno::EBADF));
    assert_eq!(c.clunk(1).await, Err(Errno::EBADF));
    c.walk(0, 1, "hello.txt").await.unwrap();
    // Walking a fid onto itself replaces it.
    c.walk(1, 1, "").await.unwrap();
    c.walk(0, 2, "sub").await.unwrap();
    c.walk(2, 2, "inner.txt").await.unwrap();
    assert_eq!(c.getattr(2).await.unwrap().size, 5);
}

#[tokio::test]
async fn getattr_agrees_with_std_metadata() {
    let dir = fixture();
    let (_s, mut c) = session(dir.path()).await;
    for (fid, path) in [
        (1, "hello.txt"),
        (2, "sub"),
        (3, "to-sub"),
        (4, "sub/inner.txt"),
    ] {
        c.walk(0, fid, path).await.unwrap();
        let a = c.getattr(fid).await.unwrap();
        let m = std::fs::symlink_metadata(dir.path().join(path)).unwrap();
        assert_eq!(a.valid & getattr::BASIC, getattr::BASIC);
        assert_eq!(a.mode, m.mode(), "{path} mode");
        assert_eq!(a.size, m.size(), "{path} size");
        assert_eq!(a.nlink, m.nlink(), "{path} nlink");
        assert_eq!((a.uid, a.gid), (m.uid(), m.gid()), "{path} owner");
        assert_eq!(a.qid.path, m.ino(), "{path} qid path is the inode");
        assert_eq!(
            (a.mtime_sec as i64, a.mtime_nsec as i64),
            (m.mtime(), m.mtime_nsec()),
            "{path} mtime"
        );
        assert_eq!(a.qid.is_dir(), m.is_dir());
        assert_eq!(a.qid.is_symlink(), m.file_type().is_symlink());
    }
}

#[tokio::test]
async fn read_count_is_clamped_to_msize() {
    let dir = Tree::build(&[Tree::File(
        "big",
        (0..200_000u32).map(|i| i as u8).collect(),
    )]);
    let (_s, mut c) = session(dir.path()).await;
    c.walk(0, 1, "big").await.unwrap();
    let opened = c.lopen(1, open::RDONLY).await.unwrap();
    assert_eq!(opened.iounit, MSIZE - IOHDRSZ);
    let r = expect_reply!(
        c.rpc(Tread {
            fid: 1,
            offset: 0,
            count: 10_000_000
        })
        .await,
        Rread
    );
    assert_eq!(r.data.0.len() as u32, MSIZE - IOHDRSZ);
    assert_eq!(
        c.read_all(1).await.unwrap(),
        std::fs::read(dir.path().join("big")).unwrap()
    );
}

#[tokio::test]
async fn an_aname_may_name_a_directory_inside_an_export_and_that_is_the_root() {
    let dir = fixture();
    let server = TestServer::start(
        ServerConfig {
            exports: vec![ExportConfig {
                name: Some("base".into()),
                ..ExportConfig::new(dir.path())
            }],
            ..Default::default()
        },
        "tcp:127.0.0.1:0",
    );
    let mut c = Conn::connect(&server.addr).await;
    c.version(MSIZE).await;
    let sub = std::fs::metadata(dir.path().join("sub")).unwrap();
    // By the export's name and by its path, with or without a trailing slash.
    let below = format!("{}/sub/", dir.path().display());
    for (fid, aname) in [(0, "base/sub"), (1, below.as_str()), (2, "base/./sub//")] {
        let qid = c.attach(fid, aname).await.unwrap();
        assert_eq!(qid.path, sub.ino(), "{aname}");
        c.walk(fid, 10 + fid, "inner.txt").await.unwrap();
        c.lopen(10 + fid, open::RDONLY).await.unwrap();
        assert_eq!(c.read_all(10 + fid).await.unwrap(), b"inner", "{aname}");
    }
    // Fid 0 is the attach to base/sub, which `cat` walks from.
    assert_eq!(c.cat(9, "inner.txt").await.unwrap(), b"inner");
    // `..` at that root stays there: the rest of the export is out of reach.
    let qids = c.walk(0, 20, "../..").await.unwrap();
    assert_eq!(
        qids.iter().map(|q| q.path).collect::<Vec<_>>(),
        [sub.ino(); 2]
    );
    let partial = c.walk(0, 21, "../hello.txt").await.unwrap();
    assert_eq!(partial.len(), 1, "hello.txt is outside this root");
    assert_eq!(c.getattr(21).await, Err(Errno::EBADF));
    c.attach(3, "base/sub/deeper").await.unwrap();
    // The whole export is still there under its own name.
    c.attach(4, "base").await.unwrap();
    c.walk(4, 22, "hello.txt").await.unwrap();
    c.lopen(22, open::RDONLY).await.unwrap();
    assert_eq!(c.read_all(22).await.unwrap(), b"hello, world\n");
}

#[tokio::test]
async fn an_aname_inside_an_export_never_leaves_it() {
    let dir = fixture();
    let server = TestServer::start(
        ServerConfig {
            exports: vec![ExportConfig {
                name: Some("base".into()),
                ..ExportConfig::new(dir.path().join("sub"))
            }],
            ..Default::default()
        },
        "tcp:127.0.0.1:0",
    );
    let mut c = Conn::connect(&server.addr).await;
    c.version(MSIZE).await;
    let root = dir.path().display();
    for (aname, errno) in [
        // `..` anywhere in it, even one that would come back inside.
        ("base/..", Errno::EACCES),
        ("base/deeper/../..", Errno::EACCES),
        ("base/deeper/..", Errno::EACCES),
        // A path that only looks like it is below the export.
        (&*format!("{root}/sub/../to-sub"), Errno::EACCES),
        (&*format!("{root}/subway"), Errno::ENOENT),
        // Names inside that are not directories.
        ("base/inner.txt", Errno::ENOTDIR),
        ("base/missing", Errno::ENOENT),
        ("other/deeper", Errno::ENOENT),
    ] {
        assert_eq!(c.attach(0, aname).await, Err(errno), "{aname}");
    }
    // A symlink on the way is never followed, whether it points in or out.
    std::os::unix::fs::symlink("deeper", dir.path().join("sub/in-link")).unwrap();
    std::os::unix::fs::symlink("/etc", dir.path().join("sub/out-link")).unwrap();
    for aname in ["base/in-link", "base/out-link", "base/out-link/ssl"] {
        assert_eq!(c.attach(0, aname).await, Err(Errno::ENOTDIR), "{aname}");
    }
    // And a path into the export's parent by its own absolute path is no export.
    assert_eq!(
        c.attach(0, &format!("{root}/to-sub")).await,
        Err(Errno::ENOENT)
    );
    c.attach(0, "base/deeper").await.unwrap();
}
