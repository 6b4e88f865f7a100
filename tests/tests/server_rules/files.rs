//! Changing the tree: readdir, create, write, truncate, unlink, rename, link, mkdir,
//! and the node types refused.

use super::*;

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
        .lcreate(1, "new.txt", open::RDWR | open::EXCL, 0o640)
        .await
        .unwrap();
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
        .lcreate(2, "new.txt", open::RDWR | open::EXCL, 0o640)
        .await;
    assert_eq!(again.err(), Some(Errno::EEXIST));
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
    c.lcreate(1, "doomed", open::RDWR, 0o644).await.unwrap();
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
