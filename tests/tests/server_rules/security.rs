//! Security models: mapped-xattr keeps special files, owners and modes in `user.virtfs.*`
//! attributes of regular host files; passthrough makes device nodes only when allowed,
//! and the server opens no device's bytes in either.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};

use wasm9p_proto::consts::mode as m;
use wasm9p_server::SecurityModel;

use super::*;

fn serving(dir: &std::path::Path, model: SecurityModel, allow_devices: bool) -> TestServer {
    TestServer::start(
        ServerConfig {
            exports: vec![ExportConfig {
                security_model: model,
                allow_devices,
                ..ExportConfig::new(dir)
            }],
            ..Default::default()
        },
        "tcp:127.0.0.1:0",
    )
}

async fn mknod(c: &mut Conn, name: &str, mode: u32, major: u32, minor: u32) -> Result<Qid, Errno> {
    let made = c
        .rpc(Tmknod {
            dfid: 0,
            name: name.into(),
            mode,
            major,
            minor,
            gid: 5,
        })
        .await;
    made.map(|r| expect_reply!(Ok::<_, Errno>(r), Rmknod).qid)
}

async fn setattr(c: &mut Conn, path: &str, valid: u32, mode: u32, uid: u32, gid: u32) {
    c.walk(0, 9, path).await.unwrap();
    let set = Tsetattr {
        fid: 9,
        valid,
        mode,
        uid,
        gid,
        ..Tsetattr::default()
    };
    expect_reply!(c.rpc(set).await, Rsetattr);
    c.clunk(9).await.unwrap();
}

async fn attr(c: &mut Conn, path: &str) -> Rgetattr {
    c.walk(0, 9, path).await.unwrap();
    let a = c.getattr(9).await.unwrap();
    c.clunk(9).await.unwrap();
    a
}

fn xattr(path: &std::path::Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = [0u8; 64];
    rustix::fs::lgetxattr(path, name, &mut buf)
        .ok()
        .map(|n| buf[..n].to_vec())
}

#[tokio::test]
async fn mapped_xattr_keeps_devices_owners_and_modes_in_attributes_of_regular_files() {
    mapped(SecurityModel::MappedXattr).await;
}

#[tokio::test]
async fn mapped_file_keeps_devices_owners_and_modes_in_hidden_metadata_files() {
    mapped(SecurityModel::MappedFile).await;
}

/// What a root client makes in an export of `model`, as it sees it and as the host
/// keeps it.
async fn mapped(model: SecurityModel) {
    let dir = tempfile::tempdir().unwrap();
    if model == SecurityModel::MappedXattr
        && rustix::fs::lsetxattr(
            dir.path(),
            "user.probe",
            b"1",
            rustix::fs::XattrFlags::empty(),
        )
        .is_err()
    {
        panic!("{} keeps no user xattrs", dir.path().display());
    }
    std::fs::write(dir.path().join("plain"), "host\n").unwrap();
    let server = serving(dir.path(), model, false);
    let (mut c, _) = Conn::attached(&server.addr, MSIZE, "").await;

    // A device node, a FIFO, a symlink, a directory and a file, as a root client asks.
    let char_dev = mknod(&mut c, "null", m::S_IFCHR | 0o666, 1, 3)
        .await
        .unwrap();
    assert_eq!(char_dev.ty, qid::FILE);
    mknod(&mut c, "sda1", m::S_IFBLK | 0o660, 8, 1)
        .await
        .unwrap();
    mknod(&mut c, "fifo", m::S_IFIFO | 0o620, 0, 0)
        .await
        .unwrap();
    let link = c
        .rpc(Tsymlink {
            fid: 0,
            name: "link".into(),
            symtgt: "plain".into(),
            gid: 5,
        })
        .await;
    assert_eq!(expect_reply!(link, Rsymlink).qid.ty, qid::SYMLINK);
    expect_reply!(
        c.rpc(Tmkdir {
            dfid: 0,
            name: "d".into(),
            mode: 0o2775,
            gid: 5
        })
        .await,
        Rmkdir
    );
    c.walk(0, 1, "").await.unwrap();
    let created = c
        .rpc(Tlcreate {
            fid: 1,
            name: "f".into(),
            flags: open::RDWR,
            mode: 0o4755,
            gid: 5,
        })
        .await;
    expect_reply!(created, Rlcreate);
    c.clunk(1).await.unwrap();

    // What the client sees: what it asked for.
    let a = attr(&mut c, "null").await;
    assert_eq!(a.mode, m::S_IFCHR | 0o666);
    assert_eq!(
        (a.uid, a.gid),
        (0, 5),
        "the attaching user and the asked group"
    );
    assert_eq!(a.rdev, rustix::fs::makedev(1, 3));
    let a = attr(&mut c, "sda1").await;
    assert_eq!(
        (a.mode, a.rdev),
        (m::S_IFBLK | 0o660, rustix::fs::makedev(8, 1))
    );
    assert_eq!(attr(&mut c, "fifo").await.mode, m::S_IFIFO | 0o620);
    assert_eq!(attr(&mut c, "link").await.mode, m::S_IFLNK | 0o777);
    assert_eq!(attr(&mut c, "d").await.mode, m::S_IFDIR | 0o2775);
    assert_eq!(attr(&mut c, "f").await.mode, m::S_IFREG | 0o4755);
    // A file the host put there shows as the host has it.
    let plain = attr(&mut c, "plain").await;
    let host = std::fs::metadata(dir.path().join("plain")).unwrap();
    assert_eq!((plain.mode, plain.uid), (host.mode(), host.uid()));
    c.walk(0, 2, "link").await.unwrap();
    let target = expect_reply!(c.rpc(Treadlink { fid: 2 }).await, Rreadlink);
    assert_eq!(target.target, "plain");
    assert_eq!(c.lopen(2, open::RDONLY).await.err(), Some(Errno::ELOOP));

    // A listing says what each entry stands for.
    c.walk(0, 3, "").await.unwrap();
    c.lopen(3, open::RDONLY | open::DIRECTORY).await.unwrap();
    let listed: std::collections::HashMap<String, u8> = c
        .readdir_all(3, MSIZE - 64)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.ty))
        .collect();
    assert_eq!(listed["null"], consts::dt::CHR);
    assert_eq!(listed["sda1"], consts::dt::BLK);
    assert_eq!(listed["fifo"], consts::dt::FIFO);
    assert_eq!(listed["link"], consts::dt::LNK);
    assert_eq!(listed["d"], consts::dt::DIR);
    assert_eq!(listed["f"], consts::dt::REG);

    // chown and chmod change what the client sees, not the host's file.
    setattr(
        &mut c,
        "f",
        consts::setattr::UID | consts::setattr::GID,
        0,
        1234,
        5678,
    )
    .await;
    setattr(&mut c, "null", consts::setattr::MODE, 0o600, 0, 0).await;
    let a = attr(&mut c, "f").await;
    assert_eq!((a.uid, a.gid, a.mode), (1234, 5678, m::S_IFREG | 0o4755));
    assert_eq!(
        attr(&mut c, "null").await.mode,
        m::S_IFCHR | 0o600,
        "still a device"
    );

    // The server opens no special file's bytes.
    for name in ["null", "sda1", "fifo"] {
        c.walk(0, 4, name).await.unwrap();
        assert_eq!(
            c.lopen(4, open::RDONLY).await.err(),
            Some(Errno::EACCES),
            "{name}"
        );
        c.clunk(4).await.unwrap();
    }

    // Hard links share the metadata; it moves with a rename and goes with an unlink.
    c.walk(0, 7, "f").await.unwrap();
    let linked = c
        .rpc(Tlink {
            dfid: 0,
            fid: 7,
            name: "f-link".into(),
        })
        .await;
    expect_reply!(linked, Rlink);
    c.clunk(7).await.unwrap();
    setattr(&mut c, "f-link", consts::setattr::UID, 0, 4321, 0).await;
    assert_eq!(attr(&mut c, "f").await.uid, 4321, "one file, one owner");
    let renamed = c
        .rpc(Trenameat {
            olddirfid: 0,
            oldname: "f-link".into(),
            newdirfid: 0,
            newname: "moved".into(),
        })
        .await;
    expect_reply!(renamed, Rrenameat);
    assert_eq!(attr(&mut c, "moved").await.uid, 4321);
    let unlinked = c
        .rpc(Tunlinkat {
            dirfd: 0,
            name: "moved".into(),
            flags: 0,
        })
        .await;
    expect_reply!(unlinked, Runlinkat);
    setattr(&mut c, "f", consts::setattr::UID, 0, 1234, 0).await;
    assert_eq!(attr(&mut c, "f").await.uid, 1234);

    match model {
        SecurityModel::MappedXattr => xattrs_hidden(&mut c).await,
        _ => metadata_files_hidden(&mut c, &listed, dir.path()).await,
    }
    host_keeps_regular_files_and_the_metadata(model, dir.path());

    // A server started again on the directory serves the same.
    drop(c);
    drop(server);
    let server = serving(dir.path(), model, false);
    let (mut c, _) = Conn::attached(&server.addr, MSIZE, "").await;
    let a = attr(&mut c, "f").await;
    assert_eq!((a.uid, a.gid), (1234, 5678));
    assert_eq!(attr(&mut c, "sda1").await.rdev, rustix::fs::makedev(8, 1));
}

/// mapped-xattr's attributes are neither listed, read nor written by clients.
async fn xattrs_hidden(c: &mut Conn) {
    c.walk(0, 5, "f").await.unwrap();
    let list = c
        .rpc(Txattrwalk {
            fid: 5,
            newfid: 6,
            name: String::new(),
        })
        .await;
    expect_reply!(list, Rxattrwalk);
    let names = c.read_all(6).await.unwrap();
    assert!(
        !String::from_utf8_lossy(&names).contains("virtfs"),
        "{names:?}"
    );
    c.clunk(6).await.unwrap();
    let read = c
        .rpc(Txattrwalk {
            fid: 5,
            newfid: 6,
            name: "user.virtfs.uid".into(),
        })
        .await;
    assert_eq!(read.err(), Some(Errno::ENODATA));
    let write = c
        .rpc(Txattrcreate {
            fid: 5,
            name: "user.virtfs.uid".into(),
            attr_size: 4,
            flags: 0,
        })
        .await;
    assert_eq!(write.err(), Some(Errno::EACCES));
    c.clunk(5).await.unwrap();
}

/// mapped-file's metadata files are neither listed, found nor made by clients.
async fn metadata_files_hidden(
    c: &mut Conn,
    listed: &std::collections::HashMap<String, u8>,
    export: &std::path::Path,
) {
    // Nor attached to, as a directory inside the export.
    let inside = format!("{}/.virtfs_metadata", export.display());
    assert_eq!(c.attach(20, &inside).await.err(), Some(Errno::ENOENT));
    for name in [".virtfs_metadata", ".virtfs_metadata_root"] {
        assert!(!listed.contains_key(name), "{name} listed");
        assert_eq!(
            c.walk(0, 5, name).await.err(),
            Some(Errno::ENOENT),
            "{name}"
        );
        let made = c
            .rpc(Tmkdir {
                dfid: 0,
                name: name.into(),
                mode: 0o755,
                gid: 0,
            })
            .await;
        assert_eq!(made.err(), Some(Errno::EINVAL), "{name}");
    }
}

/// The host holds regular files and directories only, owned by the server, private,
/// and the metadata in the model's format (QEMU's: a later QEMU, or a later server of
/// ours, reads the same).
fn host_keeps_regular_files_and_the_metadata(model: SecurityModel, dir: &std::path::Path) {
    let me = rustix::process::geteuid().as_raw();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.path().symlink_metadata().unwrap();
        let ft = meta.file_type();
        assert!(ft.is_file() || ft.is_dir(), "{:?} is {ft:?}", entry.path());
        assert_eq!(meta.uid(), me);
        if entry.file_name() != "plain" {
            let want = if ft.is_dir() { 0o700 } else { 0o600 };
            assert_eq!(
                meta.permissions().mode() & 0o7777,
                want,
                "{:?}",
                entry.path()
            );
        }
    }
    assert!(!std::fs::symlink_metadata(dir.join("null"))
        .unwrap()
        .file_type()
        .is_char_device());
    let device_mode = m::S_IFCHR | 0o600;
    match model {
        SecurityModel::MappedXattr => {
            assert_eq!(
                xattr(&dir.join("null"), "user.virtfs.mode"),
                Some(device_mode.to_le_bytes().to_vec())
            );
            assert_eq!(
                xattr(&dir.join("f"), "user.virtfs.uid"),
                Some(1234u32.to_le_bytes().to_vec())
            );
        }
        _ => {
            let meta = |name: &str| {
                std::fs::read_to_string(dir.join(".virtfs_metadata").join(name)).unwrap()
            };
            assert!(meta("null").contains(&format!("virtfs.mode={device_mode}\n")));
            assert!(meta("f").contains("virtfs.uid=1234\n"), "{}", meta("f"));
            assert!(
                !dir.join(".virtfs_metadata/moved").exists(),
                "went with its file"
            );
        }
    }
    assert_eq!(std::fs::read(dir.join("link")).unwrap(), b"plain");
}

#[tokio::test]
async fn passthrough_makes_device_nodes_only_when_allowed_and_never_opens_them() {
    let dir = tempfile::tempdir().unwrap();
    let refused = serving(dir.path(), SecurityModel::Passthrough, false);
    let (mut c, _) = Conn::attached(&refused.addr, MSIZE, "").await;
    assert_eq!(
        mknod(&mut c, "null", m::S_IFCHR | 0o666, 1, 3).await.err(),
        Some(Errno::EPERM)
    );
    drop(c);

    let allowed = serving(dir.path(), SecurityModel::Passthrough, true);
    let (mut c, _) = Conn::attached(&allowed.addr, MSIZE, "").await;
    match mknod(&mut c, "null", m::S_IFCHR | 0o666, 1, 3).await {
        Ok(_) => {}
        // Without CAP_MKNOD the host refuses: the client hears it.
        Err(Errno::EPERM) if !rustix::process::geteuid().is_root() => {
            eprintln!("not root: the host refuses device nodes, as the client was told");
            return;
        }
        Err(e) => panic!("mknod: {e:?}"),
    }
    let meta = std::fs::symlink_metadata(dir.path().join("null")).unwrap();
    assert!(meta.file_type().is_char_device());
    assert_eq!(meta.rdev(), rustix::fs::makedev(1, 3));
    let a = attr(&mut c, "null").await;
    assert_eq!(
        (a.mode & m::S_IFMT, a.rdev),
        (m::S_IFCHR, rustix::fs::makedev(1, 3))
    );
    // Neither opened, nor created over, nor read for xattrs.
    c.walk(0, 1, "null").await.unwrap();
    assert_eq!(c.lopen(1, open::RDWR).await.err(), Some(Errno::EACCES));
    c.walk(0, 2, "").await.unwrap();
    let over = c.lcreate(2, "null", open::WRONLY, 0o644).await;
    assert_eq!(over.err(), Some(Errno::EACCES));
    let xattrs = c
        .rpc(Txattrwalk {
            fid: 1,
            newfid: 3,
            name: String::new(),
        })
        .await;
    assert_eq!(expect_reply!(xattrs, Rxattrwalk).size, 0);
}
