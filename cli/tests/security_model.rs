//! The mapped-xattr security model as its users meet it: an unprivileged `wasm9p serve`
//! (run as `nobody`) whose export a root user mounts with `wasm9p mount`, makes device
//! nodes and FIFOs in, and chowns files of; all of it still there after a remount,
//! while the host directory holds only regular files and directories of `nobody`.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};

mod fuse_support;
use fuse_support::{Mounted, BIN};

const NOBODY: u32 = 65534;

/// `wasm9p serve` of `export` in mapped-xattr as uid and gid `NOBODY`, on a Unix
/// socket in `sockets`; killed when dropped.
struct Unprivileged(Child);

impl Unprivileged {
    fn start(export: &Path, socket: &Path) -> Unprivileged {
        let id = NOBODY.to_string();
        let mut child = Command::new("setpriv")
            .args([
                "--reuid",
                &id,
                "--regid",
                &id,
                "--clear-groups",
                BIN,
                "serve",
            ])
            .arg("--export")
            .arg(export)
            .args(["--security-model", "mapped-xattr", "--listen"])
            .arg(format!("unix:{}", socket.display()))
            .stderr(Stdio::piped())
            .spawn()
            .expect("setpriv (util-linux)");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        assert!(line.contains("serving"), "{line}");
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        Unprivileged(child)
    }
}

impl Drop for Unprivileged {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What a root user checks of what it made, through the mount at `mnt`.
fn check_made(mnt: &Path, when: &str) {
    let device = |name: &str| {
        let meta = std::fs::symlink_metadata(mnt.join(name)).unwrap();
        let rdev = meta.rdev();
        (meta, (rustix::fs::major(rdev), rustix::fs::minor(rdev)))
    };
    let (null, number) = device("null");
    assert!(null.file_type().is_char_device(), "{when}: {null:?}");
    assert_eq!(number, (1, 3), "{when}");
    assert_eq!(null.mode() & 0o7777, 0o666, "{when}");
    let (disk, number) = device("disk");
    assert!(disk.file_type().is_block_device(), "{when}");
    assert_eq!(number, (8, 17), "{when}");
    let fifo = std::fs::symlink_metadata(mnt.join("fifo")).unwrap();
    assert!(fifo.file_type().is_fifo(), "{when}");
    let owned = std::fs::metadata(mnt.join("dir/owned")).unwrap();
    assert_eq!((owned.uid(), owned.gid()), (1234, 5678), "{when}");
    assert_eq!(owned.mode() & 0o7777, 0o640, "{when}");
    assert_eq!(
        std::fs::read_to_string(mnt.join("dir/owned")).unwrap(),
        "mine\n"
    );
    let dir = std::fs::metadata(mnt.join("dir")).unwrap();
    assert_eq!((dir.uid(), dir.mode() & 0o7777), (0, 0o751), "{when}");
    assert_eq!(
        std::fs::read_link(mnt.join("link")).unwrap(),
        Path::new("dir/owned"),
        "{when}"
    );
    assert_eq!(std::fs::read_to_string(mnt.join("link")).unwrap(), "mine\n");
}

/// Every entry below `dir`, as the host has it: (path, is regular or directory, uid).
fn host_entries(dir: &Path) -> Vec<(String, bool, u32)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let ft = meta.file_type();
        out.push((
            path.display().to_string(),
            ft.is_file() || ft.is_dir(),
            meta.uid(),
        ));
        if ft.is_dir() {
            out.extend(host_entries(&path));
        }
    }
    out
}

#[test]
fn an_unprivileged_server_in_mapped_xattr_serves_a_root_guest_devices_and_owners() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("needs root (to run the server as nobody and mount through FUSE)");
        return;
    }
    let export = tempfile::tempdir().unwrap();
    let sockets = tempfile::tempdir().unwrap();
    for dir in [export.path(), sockets.path()] {
        std::os::unix::fs::chown(dir, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    let socket = sockets.path().join("9p.sock");
    let spec = format!(
        "type=9p,source=unix:{},target=/,cache=none",
        socket.display()
    );
    let server = Unprivileged::start(export.path(), &socket);

    let mut m = Mounted::start(&["--mount".into(), spec.clone()]);
    let mnt = m.path().to_owned();
    let at = |name: &str| mnt.join(name).display().to_string();
    run("mknod", &[&at("null"), "c", "1", "3"]);
    run("chmod", &["666", &at("null")]);
    run("mknod", &[&at("disk"), "b", "8", "17"]);
    run("mkfifo", &[&at("fifo")]);
    run("mkdir", &["-m", "751", &at("dir")]);
    std::fs::write(mnt.join("dir/owned"), "mine\n").unwrap();
    run("chown", &["1234:5678", &at("dir/owned")]);
    run("chmod", &["640", &at("dir/owned")]);
    std::os::unix::fs::symlink("dir/owned", mnt.join("link")).unwrap();
    check_made(&mnt, "as made");
    let (status, stderr) = m.stop();
    assert!(status.success(), "{status} {stderr}");

    // Another mount, and another server process, see the same.
    drop(server);
    let _server = Unprivileged::start(export.path(), &socket);
    let mut again = Mounted::start(&["--mount".into(), spec]);
    check_made(again.path(), "after a remount");
    let (status, stderr) = again.stop();
    assert!(status.success(), "{status} {stderr}");

    // The host has regular files and directories of nobody's only.
    let entries = host_entries(export.path());
    assert_eq!(entries.len(), 6, "{entries:?}");
    for (path, plain, uid) in entries {
        assert!(plain, "{path} is not a regular file or directory");
        assert_eq!(uid, NOBODY, "{path}");
    }
}

/// `sh -c SCRIPT` as uid and gid `id`: whether it succeeded, and its stderr.
fn as_user(id: u32, script: &str) -> (bool, String) {
    let id = id.to_string();
    let out = Command::new("setpriv")
        .args([
            "--reuid",
            &id,
            "--regid",
            &id,
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_shared_mount_checks_each_user_against_the_owners_the_export_keeps() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("needs root (to mount for other users and to run as them)");
        return;
    }
    let export = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        export.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let spec = format!(
        "type=9p,export={},target=/,cache=loose,security_model=mapped-xattr",
        export.path().display()
    );
    let mut m = Mounted::start(&["--allow-other".into(), "--mount".into(), spec]);
    let home = m.path().join("home");
    std::fs::create_dir(&home).unwrap();
    run("chown", &[&NOBODY.to_string(), &home.display().to_string()]);
    run("chmod", &["700", &home.display().to_string()]);

    // nobody writes in its own directory; what it makes is its own.
    let note = home.join("note");
    let (ok, err) = as_user(NOBODY, &format!("echo hi > {}", note.display()));
    assert!(ok, "nobody in its own directory: {err}");
    let meta = std::fs::metadata(&note).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (NOBODY, NOBODY));
    // Another user is kept out by the owner and mode the export keeps.
    let (ok, err) = as_user(1234, &format!("cat {}", note.display()));
    assert!(!ok && err.contains("Permission denied"), "{ok} {err}");
    let (ok, _) = as_user(1234, &format!("touch {}/intruder", home.display()));
    assert!(!ok, "a stranger wrote in nobody's 0700 directory");

    // On the host both are the server's, private to it.
    for path in [export.path().join("home"), export.path().join("home/note")] {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(meta.uid(), 0, "{}", path.display());
        assert_eq!(
            meta.mode() & 0o077,
            0,
            "{}: {:o}",
            path.display(),
            meta.mode()
        );
    }
    let (status, stderr) = m.stop();
    assert!(status.success(), "{status} {stderr}");
}
