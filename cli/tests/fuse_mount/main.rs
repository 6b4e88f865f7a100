//! `wasm9p mount`: the namespace through FUSE, driven by ordinary host programs and
//! std::fs, with the backing directory (or an in-memory model) as the oracle.
//!
//! Each test starts the real binary on a tempdir mount point and stops it with SIGTERM
//! (a guard unmounts lazily if anything is left). Needs /dev/fuse and root (or
//! fusermount3); `fio` comes from Debian (scripts/test installs it).
//!
//! By scenario: here, file operations, a remote server, unmounting, bad options and
//! owners; `fsx` (fsx and fio against models), `suites` (dbench, postmark, stress-ng)
//! and `posix` (POSIX scenarios against a local directory, as two users).

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wasm9p_tests::{spawn_serve, Rng, Tree};

#[path = "../fuse_support/mod.rs"]
mod fuse_support;
use fuse_support::{embedded, wait_bounded, Mounted, BIN};

mod fsx;
mod posix;
mod suites;

/// The cache modes a mount is tried in.
const MODES: [&str; 3] = ["none", "mmap", "loose"];

/// File operations through the mount, each checked there and on the backing directory.
fn exercise(mnt: &Path, backing: &Path, label: &str) {
    let w = mnt.join("work");
    std::fs::create_dir(&w).unwrap();
    std::fs::write(w.join("f"), "hello").unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(w.join("f"))
        .unwrap();
    f.write_all(b" again").unwrap();
    drop(f);
    assert_eq!(std::fs::read_to_string(w.join("f")).unwrap(), "hello again");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(w.join("f"))
        .unwrap();
    f.set_len(3).unwrap();
    drop(f);
    assert_eq!(std::fs::read(w.join("f")).unwrap(), b"hel", "{label}");
    std::fs::set_permissions(w.join("f"), std::fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(
        std::fs::metadata(w.join("f")).unwrap().mode() & 0o777,
        0o640
    );
    std::os::unix::fs::symlink("f", w.join("l")).unwrap();
    assert_eq!(std::fs::read_link(w.join("l")).unwrap(), Path::new("f"));
    assert_eq!(std::fs::read(w.join("l")).unwrap(), b"hel");
    std::fs::hard_link(w.join("f"), w.join("h")).unwrap();
    assert_eq!(
        std::fs::metadata(w.join("f")).unwrap().nlink(),
        2,
        "{label}"
    );
    std::fs::rename(w.join("h"), w.join("h2")).unwrap();
    assert!(!w.join("h").exists() && w.join("h2").exists());
    std::fs::remove_file(w.join("h2")).unwrap();
    std::fs::create_dir_all(w.join("a/b/c")).unwrap();
    std::fs::write(w.join("a/b/c/deep"), "deep").unwrap();
    // A directory renamed with files below it that the kernel has looked up.
    std::fs::rename(w.join("a"), w.join("moved")).unwrap();
    assert_eq!(
        std::fs::read_to_string(w.join("moved/b/c/deep")).unwrap(),
        "deep"
    );
    assert!(std::fs::remove_dir(w.join("moved/b")).is_err(), "not empty");
    std::fs::create_dir(w.join("many")).unwrap();
    for i in 0..300 {
        std::fs::write(w.join(format!("many/e{i:03}")), i.to_string()).unwrap();
    }
    let mut names: Vec<String> = std::fs::read_dir(w.join("many"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), 300, "{label}");
    assert_eq!(names[299], "e299");
    // An unlinked file stays readable through a handle opened before.
    std::fs::write(w.join("gone"), "still here").unwrap();
    let mut open = std::fs::File::open(w.join("gone")).unwrap();
    std::fs::remove_file(w.join("gone")).unwrap();
    assert_eq!(
        open.metadata().unwrap().len(),
        10,
        "{label}: fstat after unlink"
    );
    let mut text = String::new();
    open.read_to_string(&mut text).unwrap();
    assert_eq!(text, "still here", "{label}");
    assert_eq!(
        std::fs::metadata(w.join("missing")).unwrap_err().kind(),
        std::io::ErrorKind::NotFound
    );
    assert_eq!(
        std::fs::create_dir(w.join("many")).unwrap_err().kind(),
        std::io::ErrorKind::AlreadyExists
    );

    // The same on the backing directory.
    let b = backing.join("work");
    assert_eq!(std::fs::read(b.join("f")).unwrap(), b"hel", "{label}");
    assert_eq!(
        std::fs::metadata(b.join("f")).unwrap().mode() & 0o777,
        0o640
    );
    assert_eq!(std::fs::read_link(b.join("l")).unwrap(), Path::new("f"));
    assert_eq!(
        std::fs::read_to_string(b.join("moved/b/c/deep")).unwrap(),
        "deep"
    );
    assert_eq!(std::fs::read_dir(b.join("many")).unwrap().count(), 300);
    assert!(!b.join("gone").exists() && !b.join("h2").exists() && !b.join("a").exists());
}

#[test]
fn file_operations_through_fuse_reach_the_export_in_every_mode() {
    for mode in MODES {
        let dir = Tree::build(&[Tree::file("seed.txt", "seed\n")]);
        let mut m = Mounted::start(&embedded(dir.path(), mode));
        assert_eq!(
            std::fs::read_to_string(m.path().join("seed.txt")).unwrap(),
            "seed\n"
        );
        exercise(m.path(), dir.path(), mode);
        let (status, stderr) = m.stop();
        assert!(status.success(), "{mode}: {status} {stderr}");
        assert!(
            stderr.contains("unmounted") && !stderr.contains("WARN"),
            "{stderr}"
        );
    }
}

#[test]
fn a_remote_server_through_fuse_with_stats() {
    let dir = Tree::build(&[]);
    let (mut serve, line) = spawn_serve(
        BIN,
        [
            "--export".as_ref(),
            dir.path().as_os_str(),
            "--listen".as_ref(),
            "tcp:127.0.0.1:0".as_ref(),
        ],
    );
    let addr = wasm9p_tests::served_addr(&line);
    let work = tempfile::tempdir().unwrap();
    let stats = work.path().join("stats.json");
    let mut m = Mounted::start(&[
        "--mount".into(),
        format!("type=9p,source={addr},target=/,cache=loose"),
        format!("--stats={}", stats.display()),
    ]);
    exercise(m.path(), dir.path(), "tcp loose");
    // A name looked up twice under loose is asked of the server once.
    for _ in 0..2 {
        assert!(!m.path().join("work/nothing-here.h").exists());
    }
    let (status, stderr) = m.stop();
    assert!(status.success(), "{status} {stderr}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let mount = &json["mounts"][0];
    assert!(mount["rpc"]["walk"].as_u64().unwrap() > 0, "{json}");
    assert!(
        mount["cache"]["negative_hits"].as_u64().unwrap() >= 1,
        "{json}"
    );
    let _ = serve.kill();
    let _ = serve.wait();
}

#[test]
fn unmounted_from_outside_it_exits_cleanly() {
    let dir = Tree::build(&[Tree::file("x", "x")]);
    let mut m = Mounted::start(&embedded(dir.path(), "loose"));
    assert!(m.path().join("x").exists());
    let umount = Command::new("umount").arg(m.path()).status().unwrap();
    assert!(umount.success());
    let mut child = m.child.take().unwrap();
    let status = wait_bounded(&mut child, Duration::from_secs(20));
    assert!(status.success(), "{status}");
    assert!(!m.path().join("x").exists(), "still mounted");
}

#[test]
fn bad_mount_points_and_specs_are_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    let cases: Vec<(Vec<PathBuf>, &str)> = vec![
        (vec![dir.path().join("absent")], "is not a directory"),
        (vec![file.clone()], "is not a directory"),
        (
            vec![
                "--mount".into(),
                "type=9p,target=/".into(),
                dir.path().into(),
            ],
            "needs source=ADDR or export=HOSTDIR",
        ),
    ];
    for (args, needle) in cases {
        let out = Command::new(BIN).arg("mount").args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle) && stderr.lines().count() == 1,
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn owners_are_the_servers_and_chown_changes_them_or_says_eperm() {
    let root = rustix::process::geteuid().is_root();
    for mode in ["none", "loose", "bind"] {
        let dir = Tree::build(&[]);
        let mut m = Mounted::start(&embedded(dir.path(), mode));
        let (file, backing) = (m.path().join("owned"), dir.path().join("owned"));
        std::fs::write(&file, "x").unwrap();
        let on_disk = std::fs::metadata(&backing).unwrap();
        let shown = std::fs::metadata(&file).unwrap();
        assert_eq!(
            (shown.uid(), shown.gid()),
            (on_disk.uid(), on_disk.gid()),
            "{mode}"
        );
        let result = std::os::unix::fs::chown(&file, Some(65534), Some(65534));
        let after = std::fs::metadata(&backing).unwrap();
        if root {
            result.unwrap_or_else(|e| panic!("{mode}: chown as root: {e}"));
            assert_eq!(
                (after.uid(), after.gid()),
                (65534, 65534),
                "{mode}: on disk"
            );
            let shown = std::fs::metadata(&file).unwrap();
            assert_eq!((shown.uid(), shown.gid()), (65534, 65534), "{mode}: shown");
        } else {
            // Not allowed: an error, and nothing changed.
            let err = result.expect_err(mode);
            assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{mode}: {err}");
            assert_eq!(after.uid(), on_disk.uid(), "{mode}");
        }
        let (status, stderr) = m.stop();
        assert!(status.success(), "{mode}: {status} {stderr}");
    }
}

/// A path of PATH_MAX bytes relative to a directory inside the mount (what pjd's
/// `*/03.t` checks make from their working directory) works as on a local file
/// system, although the path from the mount's root is longer; one byte more is
/// ENAMETOOLONG, from the kernel.
#[test]
fn a_path_max_path_from_a_directory_inside_the_mount_works() {
    use rustix::fs::{mkdirat, openat, statat, unlinkat, AtFlags, Mode, OFlags};
    for mode in ["none", "loose", "bind"] {
        let backing = tempfile::tempdir().unwrap();
        let mut m = Mounted::start(&embedded(backing.path(), mode));
        std::fs::create_dir(m.path().join("inside")).unwrap();
        let here = openat(
            rustix::fs::CWD,
            m.path().join("inside"),
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        )
        .unwrap();
        // 31 directories of 127 bytes and a file name of 127: 4,095 bytes with the
        // slashes, PATH_MAX with its NUL.
        let name = |i: usize| format!("{i:02}{}", "d".repeat(125));
        let mut rel = String::new();
        for i in 0..31 {
            rel.push_str(&name(i));
            mkdirat(&here, &rel, Mode::from_raw_mode(0o755)).unwrap();
            rel.push('/');
        }
        rel.push_str(&name(99));
        assert_eq!(rel.len(), 4095);
        let file = openat(
            &here,
            &rel,
            OFlags::CREATE | OFlags::WRONLY,
            Mode::from_raw_mode(0o644),
        );
        assert!(file.is_ok(), "{mode}: create: {file:?}");
        let st = statat(&here, &rel, AtFlags::empty()).unwrap();
        assert_eq!(st.st_mode & 0o7777, 0o644, "{mode}");
        let longer = format!("{rel}x");
        assert_eq!(
            statat(&here, &longer, AtFlags::empty()).unwrap_err(),
            rustix::io::Errno::NAMETOOLONG
        );
        unlinkat(&here, &rel, AtFlags::empty()).unwrap();
        assert_eq!(
            statat(&here, &rel, AtFlags::empty()).unwrap_err(),
            rustix::io::Errno::NOENT,
            "{mode}"
        );
        drop((file, here));
        let (status, stderr) = m.stop();
        assert!(status.success(), "{mode}: {status} {stderr}");
    }
}

/// The 9P requests of one message type a mount's `--stats` file counted.
fn rpcs(stats: &Path, name: &str) -> u64 {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(stats).unwrap()).unwrap();
    json["mounts"][0]["rpc"][name].as_u64().unwrap_or(0)
}

/// `cache=none` keeps a fid per node the kernel holds: a `stat` 30 directories deep
/// walks one name from its parent's fid per level (31 walks for 31 lookups), where
/// resolving every lookup from the root walked thousands of names; a second stat
/// walks again only what the kernel looks up again (every level: entries live for no
/// time), no more.
#[test]
fn a_deep_stat_in_cache_none_walks_once_per_level() {
    const DEPTH: usize = 30;
    let backing = tempfile::tempdir().unwrap();
    let rel: PathBuf = (0..DEPTH).map(|i| format!("level{i}")).collect();
    std::fs::create_dir_all(backing.path().join(&rel)).unwrap();
    std::fs::write(backing.path().join(&rel).join("f"), "deep").unwrap();
    let work = tempfile::tempdir().unwrap();
    let walks = |stats_times: usize| {
        let stats = work.path().join(format!("stats{stats_times}.json"));
        let mut args = embedded(backing.path(), "none");
        args.push(format!("--stats={}", stats.display()));
        let mut m = Mounted::start(&args);
        for _ in 0..stats_times {
            let meta = std::fs::metadata(m.path().join(&rel).join("f")).unwrap();
            assert_eq!(meta.len(), 4);
        }
        let (status, stderr) = m.stop();
        assert!(status.success(), "{status} {stderr}");
        rpcs(&stats, "walk")
    };
    let once = walks(1);
    assert!(once <= DEPTH as u64 + 1, "one stat walked {once} times");
    let twice = walks(2);
    assert!(
        twice <= 2 * once,
        "two stats walked {twice} times, one {once}"
    );
}

/// A server that lets the mount's connection hold few fids (`--max-fids-per-peer`):
/// nodes give theirs back when it runs out, so looking up many more files than it
/// allows works; opening more at once than it allows gets EMFILE ("Too many open
/// files"), the files open before stay usable, and once they are closed the mount
/// serves as before, with nothing lost.
#[test]
fn past_the_servers_fid_limit_the_mount_says_emfile_and_goes_on() {
    const FIDS: usize = 48;
    let export = Tree::build(&[]);
    for i in 0..100 {
        std::fs::write(export.path().join(format!("f{i}")), format!("file {i}")).unwrap();
    }
    let work = tempfile::tempdir().unwrap();
    let socket = work.path().join("sock");
    let listen = format!("unix:{}", socket.display());
    let name = export
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let (_serve, _) = spawn_serve(
        BIN,
        [
            "--export".to_string(),
            export.path().display().to_string(),
            "--listen".to_string(),
            listen.clone(),
            "--allow".to_string(),
            format!("{name}=listen:{listen}"),
            "--max-fids-per-peer".to_string(),
            FIDS.to_string(),
        ],
    );
    let mut m = Mounted::start(&[
        "--mount".into(),
        format!("type=9p,source={listen},aname={name},target=/,cache=none"),
    ]);
    // Every file looked up (twice the fids the server allows), and read.
    for i in 0..100 {
        let text = std::fs::read_to_string(m.path().join(format!("f{i}"))).unwrap();
        assert_eq!(text, format!("file {i}"));
    }
    // Opened all at once: the ones past the limit get EMFILE.
    let mut open = Vec::new();
    let mut refused = None;
    for i in 0..100 {
        match std::fs::File::open(m.path().join(format!("f{i}"))) {
            Ok(f) => open.push((i, f)),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let refused = refused.expect("more files opened than the server has fids");
    assert_eq!(refused.raw_os_error(), Some(libc::EMFILE), "{refused}");
    assert!(open.len() >= FIDS / 2, "only {} opened", open.len());
    for (i, f) in &mut open {
        let mut text = String::new();
        f.read_to_string(&mut text).unwrap();
        assert_eq!(text, format!("file {i}"), "an open file still reads");
    }
    drop(open);
    // Closed: the mount serves every file again, and takes a new one.
    std::fs::write(m.path().join("new"), "after").unwrap();
    for i in (0..100).step_by(7) {
        let text = std::fs::read_to_string(m.path().join(format!("f{i}"))).unwrap();
        assert_eq!(text, format!("file {i}"));
    }
    let (status, stderr) = m.stop();
    assert!(status.success(), "{status} {stderr}");
    assert_eq!(
        std::fs::read_to_string(export.path().join("new")).unwrap(),
        "after"
    );
}
