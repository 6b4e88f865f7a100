//! Xattrs, locks, statfs, auth and attach, and read-only exports.

use super::*;

#[tokio::test]
async fn xattrs_set_get_list_remove() {
    let dir = fixture();
    let (_s, mut c) = session(dir.path()).await;
    // Set user.color = "blue" with xattrcreate + write + clunk.
    c.walk(0, 1, "hello.txt").await.unwrap();
    expect_reply!(
        c.rpc(Txattrcreate {
            fid: 1,
            name: "user.color".into(),
            attr_size: 4,
            flags: 0
        })
        .await,
        Rxattrcreate
    );
    expect_reply!(
        c.rpc(Twrite {
            fid: 1,
            offset: 0,
            data: Data::from(b"blue".to_vec())
        })
        .await,
        Rwrite
    );
    c.clunk(1).await.unwrap();
    // Read it back.
    c.walk(0, 1, "hello.txt").await.unwrap();
    let size = expect_reply!(
        c.rpc(Txattrwalk {
            fid: 1,
            newfid: 2,
            name: "user.color".into()
        })
        .await,
        Rxattrwalk
    )
    .size;
    assert_eq!(size, 4);
    assert_eq!(c.read_all(2).await.unwrap(), b"blue");
    c.clunk(2).await.unwrap();
    // List.
    expect_reply!(
        c.rpc(Txattrwalk {
            fid: 1,
            newfid: 2,
            name: "".into()
        })
        .await,
        Rxattrwalk
    );
    let list = c.read_all(2).await.unwrap();
    assert!(
        list.split(|b| *b == 0).any(|n| n == b"user.color"),
        "{list:?}"
    );
    c.clunk(2).await.unwrap();
    // Missing attribute.
    assert_eq!(
        c.rpc(Txattrwalk {
            fid: 1,
            newfid: 2,
            name: "user.none".into()
        })
        .await,
        Err(Errno::ENODATA)
    );
    // Remove (size 0, XATTR_REPLACE), as Linux's removexattr does.
    c.walk(0, 3, "hello.txt").await.unwrap();
    expect_reply!(
        c.rpc(Txattrcreate {
            fid: 3,
            name: "user.color".into(),
            attr_size: 0,
            flags: 2
        })
        .await,
        Rxattrcreate
    );
    c.clunk(3).await.unwrap();
    assert_eq!(
        c.rpc(Txattrwalk {
            fid: 1,
            newfid: 2,
            name: "user.color".into()
        })
        .await,
        Err(Errno::ENODATA)
    );
    // A value larger than XATTR_SIZE_MAX is refused up front.
    assert_eq!(
        c.rpc(Txattrcreate {
            fid: 1,
            name: "user.big".into(),
            attr_size: 1 << 20,
            flags: 0
        })
        .await,
        Err(Errno::E2BIG)
    );
}

#[tokio::test]
async fn posix_locks_conflict_between_clients() {
    let dir = fixture();
    let server = TestServer::tcp(dir.path());
    let (mut a, _) = Conn::attached(&server.addr, MSIZE, "").await;
    let (mut b, _) = Conn::attached(&server.addr, MSIZE, "").await;
    for c in [&mut a, &mut b] {
        c.walk(0, 1, "hello.txt").await.unwrap();
        c.lopen(1, open::RDWR).await.unwrap();
    }
    let wr = |ty| Tlock {
        fid: 1,
        ty,
        flags: 0,
        start: 0,
        length: 10,
        proc_id: 1,
        client_id: "t".into(),
    };
    assert_eq!(
        expect_reply!(a.rpc(wr(lock::WRLCK)).await, Rlock).status,
        lock::SUCCESS
    );
    assert_eq!(
        expect_reply!(b.rpc(wr(lock::WRLCK)).await, Rlock).status,
        lock::BLOCKED
    );
    let probe = Tgetlock {
        fid: 1,
        ty: lock::WRLCK,
        start: 0,
        length: 10,
        proc_id: 2,
        client_id: "t".into(),
    };
    let held = expect_reply!(b.rpc(probe.clone()).await, Rgetlock);
    assert_eq!((held.ty, held.start, held.length), (lock::WRLCK, 0, 10));
    assert_eq!(
        expect_reply!(a.rpc(wr(lock::UNLCK)).await, Rlock).status,
        lock::SUCCESS
    );
    assert_eq!(expect_reply!(b.rpc(probe).await, Rgetlock).ty, lock::UNLCK);
    assert_eq!(
        expect_reply!(b.rpc(wr(lock::WRLCK)).await, Rlock).status,
        lock::SUCCESS
    );
}

#[tokio::test]
async fn statfs_matches_the_host() {
    let dir = fixture();
    let (_s, mut c) = session(dir.path()).await;
    let r = expect_reply!(c.rpc(Tstatfs { fid: 0 }).await, Rstatfs);
    let st = rustix_free_statvfs(dir.path());
    assert_eq!((r.bsize as u64, r.blocks, r.namelen as u64), st);
}

fn rustix_free_statvfs(path: &std::path::Path) -> (u64, u64, u64) {
    let out = std::process::Command::new("stat")
        .args(["-f", "-c", "%S %b %l"])
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let v: Vec<u64> = text
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    (v[0], v[1], v[2])
}

#[tokio::test]
async fn auth_is_refused_with_enoent_and_attach_selects_export() {
    let a = fixture();
    let b = Tree::build(&[Tree::file("only-in-b", "b")]);
    let server = TestServer::start(
        ServerConfig {
            exports: vec![
                ExportConfig::new(a.path()),
                ExportConfig {
                    name: Some("bee".into()),
                    ..ExportConfig::new(b.path())
                },
            ],
            ..Default::default()
        },
        "tcp:127.0.0.1:0",
    );
    let mut c = Conn::connect(&server.addr).await;
    c.version(MSIZE).await;
    let auth = c
        .rpc(Tauth {
            afid: 5,
            uname: "u".into(),
            aname: "".into(),
            n_uname: 0,
        })
        .await;
    assert_eq!(auth, Err(Errno::ENOENT));
    // Two exports: an empty aname is ambiguous.
    assert_eq!(c.attach(0, "").await, Err(Errno::ENOENT));
    assert_eq!(c.attach(0, "/no/such/export").await, Err(Errno::ENOENT));
    c.attach(0, "bee").await.unwrap();
    assert_eq!(c.cat(9, "only-in-b").await.unwrap(), b"b");
    c.attach(1, b.path().to_str().unwrap()).await.unwrap();
    c.attach(2, a.path().to_str().unwrap()).await.unwrap();
    c.walk(2, 3, "hello.txt").await.unwrap();
    // An afid other than NOFID is refused (there is no authentication).
    let with_afid = Tattach {
        fid: 4,
        afid: 5,
        uname: "u".into(),
        aname: "bee".into(),
        n_uname: 0,
    };
    assert_eq!(c.rpc(with_afid).await, Err(Errno::EBADF));
}

#[tokio::test]
async fn read_only_export_refuses_every_mutation() {
    let dir = fixture();
    let server = TestServer::start(
        ServerConfig {
            exports: vec![ExportConfig {
                read_only: true,
                ..ExportConfig::new(dir.path())
            }],
            ..Default::default()
        },
        "tcp:127.0.0.1:0",
    );
    let (mut c, _) = Conn::attached(&server.addr, MSIZE, "").await;
    c.walk(0, 1, "hello.txt").await.unwrap();
    c.walk(0, 2, "hello.txt").await.unwrap();
    let attempts: Vec<Message> = vec![
        Tlcreate {
            fid: 0,
            name: "n".into(),
            flags: open::RDWR,
            mode: 0o644,
            gid: 0,
        }
        .into(),
        Tmkdir {
            dfid: 0,
            name: "n".into(),
            mode: 0o755,
            gid: 0,
        }
        .into(),
        Tsymlink {
            fid: 0,
            name: "n".into(),
            symtgt: "t".into(),
            gid: 0,
        }
        .into(),
        Tmknod {
            dfid: 0,
            name: "n".into(),
            mode: 0o10644,
            major: 0,
            minor: 0,
            gid: 0,
        }
        .into(),
        Tlink {
            dfid: 0,
            fid: 1,
            name: "n".into(),
        }
        .into(),
        Trename {
            fid: 1,
            dfid: 0,
            name: "n".into(),
        }
        .into(),
        Trenameat {
            olddirfid: 0,
            oldname: "hello.txt".into(),
            newdirfid: 0,
            newname: "n".into(),
        }
        .into(),
        Tunlinkat {
            dirfd: 0,
            name: "hello.txt".into(),
            flags: 0,
        }
        .into(),
        Tsetattr {
            fid: 1,
            valid: consts::setattr::SIZE,
            size: 0,
            ..Default::default()
        }
        .into(),
        Txattrcreate {
            fid: 1,
            name: "user.x".into(),
            attr_size: 1,
            flags: 0,
        }
        .into(),
        Tlopen {
            fid: 1,
            flags: open::WRONLY,
        }
        .into(),
        Tlopen {
            fid: 1,
            flags: open::RDONLY | open::TRUNC,
        }
        .into(),
        Tremove { fid: 2 }.into(),
    ];
    for msg in attempts {
        let name = msg.name();
        assert_eq!(c.rpc(msg).await, Err(Errno::EROFS), "{name}");
    }
    assert_eq!(
        std::fs::read(dir.path().join("hello.txt")).unwrap(),
        b"hello, world\n"
    );
    // Reading still works.
    assert_eq!(c.cat(3, "hello.txt").await.unwrap(), b"hello, world\n");
}
