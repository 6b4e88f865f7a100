//! Each rule of the server (confinement, walk, readdir, mutations, xattrs, locks,
//! flush, session) checked over a real loopback TCP connection against a tempdir
//! fixture, with `std::fs` as the oracle.

use std::os::unix::fs::MetadataExt;

use wasm9p_proto::consts::{getattr, lock, open, qid, AT_REMOVEDIR, IOHDRSZ};
use wasm9p_proto::*;
use wasm9p_server::{ExportConfig, ServerConfig};
use wasm9p_tests::{expect_reply, Conn, TestServer, Tree};

const MSIZE: u32 = 64 * 1024;

fn fixture() -> tempfile::TempDir {
    Tree::build(&[
        Tree::file("hello.txt", "hello, world\n"),
        Tree::Dir(
            "sub",
            vec![
                Tree::file("inner.txt", "inner"),
                Tree::Dir("deeper", vec![]),
            ],
        ),
        Tree::Symlink("abs-escape", "/etc"),
        Tree::Symlink("rel-escape", "../../../../../../etc"),
        Tree::Symlink("to-sub", "sub"),
        Tree::Symlink("dangling", "/nonexistent/target"),
    ])
}

async fn session(dir: &std::path::Path) -> (TestServer, Conn) {
    let server = TestServer::tcp(dir);
    let (conn, _) = Conn::attached(&server.addr, MSIZE, "").await;
    (server, conn)
}

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
    let create = c
        .rpc(Tlcreate {
            fid: 2,
            name: "x".into(),
            flags: open::RDWR,
            mode: 0o644,
            gid: 0,
        })
        .await;
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
async fn readdir_offsets_are_stable_across_many_calls() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..600 {
        std::fs::write(dir.path().join(format!("entry-{i:04}")), b"").unwrap();
    }
    let (_s, mut c) = session(dir.path()).await;
    c.walk(0, 1, "").await.unwrap();
    c.lopen(1, open::RDONLY | open::DIRECTORY).await.unwrap();
    // Small counts force dozens of calls.
    let entries = c.readdir_all(1, 512).await.unwrap();
    let mut names: Vec<_> = entries.iter().map(|e| e.name.clone()).collect();
    assert_eq!(&names[..2], &[".", ".."]);
    names.sort();
    let before = names.len();
    names.dedup();
    assert_eq!(names.len(), before, "no duplicates");
    assert_eq!(names.len(), 602, "no loss");
    // Resuming from any cookie gives exactly the rest.
    let cookie = entries[300].offset;
    let r = expect_reply!(
        c.rpc(Treaddir {
            fid: 1,
            offset: cookie,
            count: 8192
        })
        .await,
        Rreaddir
    );
    let rest = DirEntry::decode_all(r.data.0).unwrap();
    assert_eq!(rest[0], entries[301]);
    // A count too small for one entry is an error, not an empty (end-of-directory) reply.
    assert_eq!(
        c.rpc(Treaddir {
            fid: 1,
            offset: 0,
            count: 10
        })
        .await,
        Err(Errno::EINVAL)
    );
}

#[tokio::test]
async fn create_write_read_truncate_and_times() {
    let dir = fixture();
    let (_s, mut c) = session(dir.path()).await;
    c.walk(0, 1, "sub").await.unwrap();
    let created = c
        .rpc(Tlcreate {
            fid: 1,
            name: "new.txt".into(),
            flags: open::RDWR | open::EXCL,
            mode: 0o640,
            gid: 0,
        })
        .await;
    let created = expect_reply!(created, Rlcreate);
    assert_eq!(created.qid.ty, qid::FILE);
    let w = c
        .rpc(Twrite {
            fid: 1,
            offset: 0,
            data: Data::from(b"0123456789".to_vec()),
        })
        .await;
    assert_eq!(expect_reply!(w, Rwrite).count, 10);
    let path = dir.path().join("sub/new.txt");
    assert_eq!(std::fs::read(&path).unwrap(), b"0123456789");
    assert_eq!(
        std::fs::metadata(&path).unwrap().mode() & 0o777,
        0o640 & !umask()
    );
    // lcreate of an existing name with EXCL fails.
    c.walk(0, 2, "sub").await.unwrap();
    let again = c
        .rpc(Tlcreate {
            fid: 2,
            name: "new.txt".into(),
            flags: open::RDWR | open::EXCL,
            mode: 0o640,
            gid: 0,
        })
        .await;
    assert_eq!(again, Err(Errno::EEXIST));
    // Truncate, chmod and set times through setattr.
    let set = Tsetattr {
        fid: 1,
        valid: consts::setattr::SIZE
            | consts::setattr::MODE
            | consts::setattr::MTIME
            | consts::setattr::MTIME_SET,
        mode: 0o600,
        size: 4,
        mtime_sec: 1_000_000_000,
        mtime_nsec: 5,
        ..Default::default()
    };
    expect_reply!(c.rpc(set).await, Rsetattr);
    let m = std::fs::metadata(&path).unwrap();
    assert_eq!(
        (m.len(), m.mode() & 0o777, m.mtime(), m.mtime_nsec()),
        (4, 0o600, 1_000_000_000, 5)
    );
    // fsync on the open file succeeds.
    expect_reply!(
        c.rpc(Tfsync {
            fid: 1,
            datasync: TrailingU32(0)
        })
        .await,
        Rfsync
    );
}

#[tokio::test]
async fn an_open_file_is_truncated_through_its_fid_even_after_an_unlink() {
    let dir = fixture();
    let (_s, mut c) = session(dir.path()).await;
    c.walk(0, 1, "sub").await.unwrap();
    let created = c
        .rpc(Tlcreate {
            fid: 1,
            name: "doomed".into(),
            flags: open::RDWR,
            mode: 0o644,
            gid: 0,
        })
        .await;
    expect_reply!(created, Rlcreate);
    std::fs::remove_file(dir.path().join("sub/doomed")).unwrap();
    let size = |size: u64| Tsetattr {
        fid: 1,
        valid: consts::setattr::SIZE,
        size,
        ..Default::default()
    };
    expect_reply!(c.rpc(size(12_345)).await, Rsetattr);
    assert_eq!(c.getattr(1).await.unwrap().size, 12_345);
    // A size the host refuses is its error (EFBIG), not a failed lookup of the name.
    assert_eq!(c.rpc(size(1 << 62)).await, Err(Errno::EFBIG));
}

fn umask() -> u32 {
    // The test process's umask applies to files the server creates in-process.
    let probe = tempfile::tempdir().unwrap();
    let p = probe.path().join("f");
    std::fs::File::create(&p).unwrap();
    !std::fs::metadata(&p).unwrap().mode() & 0o666
}

#[tokio::test]
async fn unlinkat_rename_renameat_remove_and_link() {
    let dir = fixture();
    let (_s, mut c) = session(dir.path()).await;
    // unlinkat without AT_REMOVEDIR refuses a directory; with it, removes an empty one.
    c.walk(0, 1, "sub").await.unwrap();
    assert_eq!(
        c.rpc(Tunlinkat {
            dirfd: 1,
            name: "deeper".into(),
            flags: 0
        })
        .await,
        Err(Errno::EISDIR)
    );
    expect_reply!(
        c.rpc(Tunlinkat {
            dirfd: 1,
            name: "deeper".into(),
            flags: AT_REMOVEDIR
        })
        .await,
        Runlinkat
    );
    assert!(!dir.path().join("sub/deeper").exists());
    assert_eq!(
        c.rpc(Tunlinkat {
            dirfd: 0,
            name: "sub".into(),
            flags: AT_REMOVEDIR
        })
        .await,
        Err(Errno::ENOTEMPTY)
    );
    // renameat across directories.
    expect_reply!(
        c.rpc(Trenameat {
            olddirfid: 0,
            oldname: "hello.txt".into(),
            newdirfid: 1,
            newname: "moved.txt".into()
        })
        .await,
        Rrenameat
    );
    assert_eq!(
        std::fs::read(dir.path().join("sub/moved.txt")).unwrap(),
        b"hello, world\n"
    );
    // rename: the fid follows its file.
    c.walk(1, 2, "moved.txt").await.unwrap();
    expect_reply!(
        c.rpc(Trename {
            fid: 2,
            dfid: 0,
            name: "back.txt".into()
        })
        .await,
        Rrename
    );
    assert!(dir.path().join("back.txt").exists());
    let a = c.getattr(2).await.unwrap();
    assert_eq!(a.size, 13);
    // link makes a second name for the same inode; symlinks are linked as links.
    expect_reply!(
        c.rpc(Tlink {
            dfid: 1,
            fid: 2,
            name: "hard".into()
        })
        .await,
        Rlink
    );
    assert_eq!(
        std::fs::metadata(dir.path().join("back.txt"))
            .unwrap()
            .nlink(),
        2
    );
    c.walk(0, 3, "abs-escape").await.unwrap();
    expect_reply!(
        c.rpc(Tlink {
            dfid: 1,
            fid: 3,
            name: "hardlink-to-link".into()
        })
        .await,
        Rlink
    );
    assert!(
        std::fs::symlink_metadata(dir.path().join("sub/hardlink-to-link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // remove clunks the fid even when it fails; removing the root is refused.
    expect_reply!(c.rpc(Tremove { fid: 2 }).await, Rremove);
    assert!(!dir.path().join("back.txt").exists());
    assert_eq!(c.getattr(2).await, Err(Errno::EBADF));
    c.walk(0, 4, "").await.unwrap();
    assert_eq!(c.rpc(Tremove { fid: 4 }).await, Err(Errno::EBUSY));
    assert_eq!(
        c.getattr(4).await,
        Err(Errno::EBADF),
        "failed remove still clunks"
    );
}

#[tokio::test]
async fn mkdir_mknod_and_device_nodes_refused() {
    let dir = fixture();
    let (_s, mut c) = session(dir.path()).await;
    let made = expect_reply!(
        c.rpc(Tmkdir {
            dfid: 0,
            name: "d".into(),
            mode: 0o750,
            gid: 0
        })
        .await,
        Rmkdir
    );
    assert!(made.qid.is_dir());
    assert!(dir.path().join("d").is_dir());
    assert_eq!(
        c.rpc(Tmkdir {
            dfid: 0,
            name: "d".into(),
            mode: 0o750,
            gid: 0
        })
        .await,
        Err(Errno::EEXIST)
    );
    let fifo = c
        .rpc(Tmknod {
            dfid: 0,
            name: "fifo".into(),
            mode: 0o10644,
            major: 0,
            minor: 0,
            gid: 0,
        })
        .await;
    expect_reply!(fifo, Rmknod);
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(dir.path().join("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    // Opening a FIFO does not hang the server.
    c.walk(0, 1, "fifo").await.unwrap();
    c.lopen(1, open::RDONLY).await.unwrap();
    for mode in [0o20644u32, 0o60644] {
        let dev = c
            .rpc(Tmknod {
                dfid: 0,
                name: "dev".into(),
                mode,
                major: 8,
                minor: 0,
                gid: 0,
            })
            .await;
        assert_eq!(dev, Err(Errno::EPERM));
    }
}

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

#[tokio::test]
async fn version_negotiates_msize_and_rejects_unknown_dialects() {
    let dir = fixture();
    let server = TestServer::tcp(dir.path());
    let mut c = Conn::connect(&server.addr).await;
    assert_eq!(c.version(8192).await.msize, 8192);
    assert_eq!(c.version(64 << 20).await.msize, consts::DEFAULT_MSIZE);
    c.send(
        consts::NOTAG,
        Tversion {
            msize: 8192,
            version: "9P2000.u".into(),
        },
    )
    .await;
    let r = expect_reply!(
        c.recv().await.unwrap().body.map_err(|_| Errno::EIO),
        Rversion
    );
    assert_eq!(r.version, "unknown");
    // Without a successful version nothing else is served.
    assert_eq!(c.attach(0, "").await, Err(Errno::EPROTO));
    c.send(
        consts::NOTAG,
        Tversion {
            msize: 100,
            version: "9P2000.L".into(),
        },
    )
    .await;
    assert!(matches!(
        c.recv().await.unwrap().body,
        Ok(Message::Rlerror(_))
    ));
}

#[tokio::test]
async fn tversion_resets_the_session_fids() {
    let dir = fixture();
    let server = TestServer::tcp(dir.path());
    let (mut c, _) = Conn::attached(&server.addr, MSIZE, "").await;
    c.walk(0, 1, "sub").await.unwrap();
    c.version(MSIZE).await;
    assert_eq!(c.getattr(1).await, Err(Errno::EBADF));
}

#[tokio::test]
async fn flush_answers_for_finished_unknown_and_inflight_requests() {
    let dir = Tree::build(&[Tree::File("big", vec![7u8; 4 << 20])]);
    let server = TestServer::tcp(dir.path());
    let (mut c, _) = Conn::attached(&server.addr, consts::DEFAULT_MSIZE, "").await;
    // Flush of a tag nobody used.
    c.send(9, Tflush { oldtag: 1234 }).await;
    let f = c.recv().await.unwrap();
    assert_eq!((f.tag, f.body), (9, Ok(Rflush {}.into())));
    // Several reads in flight, each flushed right after it is sent: every flush is
    // answered, and a read's reply (if it comes) always comes before its Rflush.
    c.walk(0, 1, "big").await.unwrap();
    c.lopen(1, open::RDONLY).await.unwrap();
    for i in 0..8u16 {
        c.send(
            100 + i,
            Tread {
                fid: 1,
                offset: i as u64 * 400_000,
                count: 400_000,
            },
        )
        .await;
        c.send(200 + i, Tflush { oldtag: 100 + i }).await;
    }
    let mut flushed = std::collections::HashSet::new();
    let mut replied = std::collections::HashSet::new();
    while flushed.len() < 8 {
        let f = c.recv().await.unwrap();
        match f.body.unwrap() {
            Message::Rflush(_) => {
                flushed.insert(f.tag - 200);
            }
            Message::Rread(_) => {
                assert!(!flushed.contains(&(f.tag - 100)), "reply after its Rflush");
                replied.insert(f.tag - 100);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn malformed_frames_get_errors_and_oversized_frames_close_only_that_connection() {
    let dir = fixture();
    let server = TestServer::tcp(dir.path());
    let (mut c, _) = Conn::attached(&server.addr, 8192, "").await;
    // A Twalk whose string runs past the frame: Rlerror for that tag, connection lives.
    c.send_raw(&[17, 0, 0, 0, 110, 5, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0])
        .await;
    let f = c.recv().await.unwrap();
    assert_eq!(
        (f.tag, f.body),
        (
            5,
            Ok(Rlerror {
                ecode: Errno::EINVAL.0
            }
            .into())
        )
    );
    // An unknown message type: EOPNOTSUPP.
    c.send_raw(&[7, 0, 0, 0, 250, 6, 0]).await;
    let f = c.recv().await.unwrap();
    assert_eq!(
        (f.tag, f.body),
        (
            6,
            Ok(Rlerror {
                ecode: Errno::EOPNOTSUPP.0
            }
            .into())
        )
    );
    // A reply type sent as a request: EINVAL.
    c.send(7, Rclunk {}).await;
    assert_eq!(
        c.recv().await.unwrap().body,
        Ok(Rlerror {
            ecode: Errno::EINVAL.0
        }
        .into())
    );
    assert!(c.getattr(0).await.is_ok(), "connection still serves");
    // A frame over the negotiated msize: that connection is closed...
    c.send_raw(&(1u32 << 30).to_le_bytes()).await;
    c.send_raw(&[120, 1, 0]).await;
    assert!(c.recv().await.is_none(), "connection closed");
    // ...and the server still serves others.
    let (mut d, _) = Conn::attached(&server.addr, 8192, "").await;
    assert_eq!(d.cat(1, "hello.txt").await.unwrap(), b"hello, world\n");
}

#[tokio::test]
async fn fid_table_is_bounded_per_connection() {
    let dir = fixture();
    let server = TestServer::tcp(dir.path());
    let (mut c, _) = Conn::attached(&server.addr, MSIZE, "").await;
    let max = wasm9p_server::MAX_FIDS_PER_CONNECTION as u32;
    for fid in 1..max {
        c.send(
            1,
            Twalk {
                fid: 0,
                newfid: fid,
                wnames: vec![],
            },
        )
        .await;
        assert!(
            matches!(c.recv().await.unwrap().body, Ok(Message::Rwalk(_))),
            "fid {fid}"
        );
    }
    assert_eq!(c.walk(0, max, "").await, Err(Errno::EMFILE));
    c.clunk(1).await.unwrap();
    c.walk(0, max, "").await.unwrap();
}

#[tokio::test]
async fn many_connections_at_once() {
    let dir = fixture();
    let server = TestServer::tcp(dir.path());
    let mut tasks = Vec::new();
    for i in 0..24u32 {
        let addr = server.addr.clone();
        tasks.push(tokio::spawn(async move {
            let (mut c, _) = Conn::attached(&addr, MSIZE, "").await;
            for _ in 0..20 {
                assert_eq!(c.cat(1 + i, "sub/inner.txt").await.unwrap(), b"inner");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn pending_xattr_values_are_bounded_per_connection() {
    let dir = fixture();
    let (_s, mut c) = session(dir.path()).await;
    let budget = 1 << 20;
    let each = 64 * 1024u64;
    let fits = (budget / each as usize) as u32;
    for fid in 1..=fits + 1 {
        c.walk(0, fid, "hello.txt").await.unwrap();
        let create = Txattrcreate {
            fid,
            name: "user.big".into(),
            attr_size: each,
            flags: 0,
        };
        let r = c.rpc(create).await;
        if fid <= fits {
            expect_reply!(r, Rxattrcreate);
        } else {
            assert_eq!(r, Err(Errno::ENOSPC), "past the connection's budget");
        }
    }
    // Clunking an unfinished one (its value never written: EINVAL) frees its share.
    assert_eq!(c.clunk(1).await, Err(Errno::EINVAL));
    c.walk(0, 1, "hello.txt").await.unwrap();
    let again = Txattrcreate {
        fid: 1,
        name: "user.big".into(),
        attr_size: each,
        flags: 0,
    };
    expect_reply!(c.rpc(again).await, Rxattrcreate);
}

#[tokio::test]
async fn rflush_never_overtakes_the_reply_it_flushes() {
    // Small reads finish fast: the race between a request's reply still queued for
    // writing and the Rflush that follows it is hit often here.
    let dir = Tree::build(&[Tree::File("f", vec![1u8; 4096])]);
    let server = TestServer::tcp(dir.path());
    let (mut c, _) = Conn::attached(&server.addr, MSIZE, "").await;
    c.walk(0, 1, "f").await.unwrap();
    c.lopen(1, open::RDONLY).await.unwrap();
    for round in 0..200u16 {
        for i in 0..50u16 {
            c.send(
                i,
                Tread {
                    fid: 1,
                    offset: 0,
                    count: 16,
                },
            )
            .await;
            c.send(1000 + i, Tflush { oldtag: i }).await;
        }
        let mut flushed = std::collections::HashSet::new();
        while flushed.len() < 50 {
            let f = c.recv().await.unwrap();
            match f.body.unwrap() {
                Message::Rflush(_) => {
                    flushed.insert(f.tag - 1000);
                }
                Message::Rread(_) => {
                    assert!(
                        !flushed.contains(&f.tag),
                        "round {round}: Rread {} after its Rflush",
                        f.tag
                    );
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        // Tags may be reused now; make sure no late reply is still on its way.
        assert!(c.getattr(1).await.is_ok());
    }
}
