//! POSIX scenarios through the mount against a local directory, each phase in a
//! process of its own (as root, then as nobody).

use super::*;

/// One POSIX step's outcome as a line: `ok`, or the errno's name.
fn outcome<T>(label: &str, result: std::io::Result<T>) -> String {
    match result {
        Ok(_) => format!("{label}: ok"),
        Err(e) => format!(
            "{label}: {}",
            e.raw_os_error()
                .map_or(e.to_string(), |n| wasm9p_proto::Errno(n as u32).to_string())
        ),
    }
}

/// `path`'s type, permission bits, owner and size (not its times or inode).
fn described(label: &str, path: &Path) -> String {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            let t = m.file_type();
            let kind = if t.is_fifo() {
                "fifo"
            } else if t.is_socket() {
                "socket"
            } else if t.is_symlink() {
                "symlink"
            } else if t.is_dir() {
                "dir"
            } else {
                "file"
            };
            let size = if t.is_dir() { 0 } else { m.size() };
            format!(
                "{label}: {kind} {:04o} {}:{} size {size} nlink {}",
                m.mode() & 0o7777,
                m.uid(),
                m.gid(),
                if t.is_dir() { 0 } else { m.nlink() }
            )
        }
        Err(e) => outcome(label, Err::<(), _>(e)),
    }
}

/// The POSIX scenario, one phase, under `root`: what a POSIX test suite checks of
/// chmod, chown, link, mkdir, mkfifo, open, rename, rmdir, symlink, truncate, unlink
/// and utimensat. `owner` sets up (run as root when the tests are); `user` acts on
/// what it left as an unprivileged user (nobody), where permissions decide.
fn posix_scenario(root: &Path, phase: &str) -> Vec<String> {
    use std::os::unix::fs::{chown, lchown, symlink};
    let p = |rel: &str| root.join(rel);
    let mode = |rel: &str, bits: u32| {
        std::fs::set_permissions(p(rel), std::fs::Permissions::from_mode(bits))
    };
    let truncate = |rel: &str, len: u64| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(p(rel))
            .and_then(|f| f.set_len(len))
    };
    let mkfifo = |rel: &str, bits: u32| {
        let c = std::ffi::CString::new(p(rel).into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path and changes nothing in this process.
        #[allow(unsafe_code)]
        let r = unsafe { libc::mkfifo(c.as_ptr(), bits) };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    let times = |rel: &str, secs: Option<u64>| {
        let file = std::fs::OpenOptions::new()
            .write(secs.is_none())
            .read(secs.is_some())
            .open(p(rel))?;
        let at = secs.map_or_else(std::time::SystemTime::now, |s| {
            std::time::UNIX_EPOCH + Duration::from_secs(s)
        });
        file.set_times(std::fs::FileTimes::new().set_modified(at).set_accessed(at))
    };
    let mut out = Vec::new();
    match phase {
        "owner" => {
            out.push(outcome("mkdir d", std::fs::create_dir(p("d"))));
            out.push(outcome("create f", std::fs::write(p("f"), "twelve bytes")));
            out.push(outcome("chmod f 0600", mode("f", 0o600)));
            out.push(described("f", &p("f")));
            out.push(outcome("chmod f 04755", mode("f", 0o4755)));
            out.push(described("f", &p("f")));
            out.push(outcome("chown f", chown(p("f"), Some(65534), Some(65534))));
            out.push(described("f", &p("f")));
            out.push(outcome("chgrp f", chown(p("f"), None, Some(0))));
            out.push(described("f", &p("f")));
            out.push(outcome("mkfifo p", mkfifo("p", 0o640)));
            out.push(described("p", &p("p")));
            out.push(outcome("chmod p", mode("p", 0o600)));
            out.push(outcome("chown p", chown(p("p"), Some(65534), None)));
            out.push(described("p", &p("p")));
            out.push(outcome("rename p", std::fs::rename(p("p"), p("d/p2"))));
            out.push(described("d/p2", &p("d/p2")));
            out.push(outcome("mkfifo over p2", mkfifo("d/p2", 0o600)));
            out.push(outcome("unlink p2", std::fs::remove_file(p("d/p2"))));
            // A Unix socket's file, made by bind(2) (mknod with S_IFSOCK through FUSE).
            out.push(outcome(
                "bind socket",
                std::os::unix::net::UnixListener::bind(p("sock")),
            ));
            out.push(described("sock", &p("sock")));
            out.push(outcome("unlink sock", std::fs::remove_file(p("sock"))));
            out.push(outcome("symlink s", symlink("f", p("s"))));
            out.push(outcome(
                "lchown s",
                lchown(p("s"), Some(65534), Some(65534)),
            ));
            out.push(described("s", &p("s")));
            out.push(described("s's target", &p("f")));
            out.push(outcome("link f", std::fs::hard_link(p("f"), p("d/f2"))));
            out.push(described("f", &p("f")));
            out.push(outcome("link to dir", std::fs::hard_link(p("d"), p("d2"))));
            out.push(outcome("rmdir non-empty", std::fs::remove_dir(p("d"))));
            out.push(outcome("truncate f", truncate("f", 100)));
            out.push(described("f", &p("f")));
            out.push(outcome("utimes f", times("f", Some(1_000_000_000))));
            out.push(format!(
                "f mtime: {:?}",
                std::fs::metadata(p("f")).map(|m| m.mtime())
            ));
            // What the user phase works on: a sticky shared dir with the owner's file
            // in it, an open dir, a private dir, a read-only file.
            out.push(outcome(
                "mkdir sticky",
                std::fs::create_dir(p("sticky")).and_then(|()| mode("sticky", 0o1777)),
            ));
            out.push(outcome(
                "owner's file",
                std::fs::write(p("sticky/owners"), "x"),
            ));
            out.push(outcome(
                "mkdir open",
                std::fs::create_dir(p("open")).and_then(|()| mode("open", 0o777)),
            ));
            out.push(outcome(
                "mkdir private",
                std::fs::create_dir(p("private")).and_then(|()| mode("private", 0o700)),
            ));
            out.push(outcome(
                "ro",
                std::fs::write(p("ro"), "read only").and_then(|()| mode("ro", 0o644)),
            ));
            // Set-ID bits: a write by root (CAP_FSETID) keeps them; the user phase
            // writes and truncates files like these.
            for (name, bits) in [
                ("setid", 0o6777),
                ("sgid-nox", 0o2666),
                ("sgid-grp", 0o2666),
                ("trunc", 0o6777),
            ] {
                out.push(outcome(name, std::fs::write(p(name), "x")));
                if name == "sgid-grp" {
                    out.push(outcome(name, chown(p(name), None, Some(65534))));
                }
                out.push(outcome(name, mode(name, bits)));
            }
            out.push(outcome("root writes", append(&p("trunc"))));
            out.push(described("trunc", &p("trunc")));
            // Directories and a file for the user to move between two open dirs.
            out.push(outcome(
                "mkdir open2",
                std::fs::create_dir(p("open2")).and_then(|()| mode("open2", 0o777)),
            ));
            out.push(outcome(
                "root's dir",
                std::fs::create_dir(p("open/rootdir")),
            ));
            out.push(outcome(
                "root's file",
                std::fs::write(p("open/rootfile"), "r"),
            ));
            out.extend(unlinked_while_open(&p("gone")));
        }
        "user" => {
            out.push(outcome("read ro", std::fs::read(p("ro"))));
            out.push(outcome(
                "write ro",
                std::fs::OpenOptions::new().write(true).open(p("ro")),
            ));
            out.push(outcome(
                "truncate ro",
                std::fs::OpenOptions::new()
                    .write(true)
                    .truncate(true)
                    .open(p("ro")),
            ));
            out.push(outcome("chmod ro", mode("ro", 0o666)));
            out.push(outcome("chown ro", chown(p("ro"), Some(65534), None)));
            out.push(outcome("utimes ro given", times("ro", Some(5))));
            out.push(outcome("utimes ro now", times("ro", None)));
            out.push(outcome("unlink ro", std::fs::remove_file(p("ro"))));
            out.push(outcome("rename ro", std::fs::rename(p("ro"), p("open/ro"))));
            out.push(outcome("create in root", std::fs::write(p("mine"), "x")));
            out.push(outcome(
                "create in private",
                std::fs::write(p("private/mine"), "x"),
            ));
            out.push(outcome(
                "stat in private",
                std::fs::metadata(p("private/x")),
            ));
            out.push(outcome(
                "create in open",
                std::fs::write(p("open/mine"), "mine"),
            ));
            out.push(described("open/mine", &p("open/mine")));
            out.push(outcome("mkdir in open", std::fs::create_dir(p("open/dir"))));
            out.push(described("open/dir", &p("open/dir")));
            out.push(outcome("mkfifo in open", mkfifo("open/fifo", 0o644)));
            out.push(described("open/fifo", &p("open/fifo")));
            out.push(outcome("symlink in open", symlink("mine", p("open/link"))));
            out.push(described("open/link", &p("open/link")));
            out.push(outcome("chmod mine", mode("open/mine", 0o600)));
            out.push(described("open/mine", &p("open/mine")));
            out.push(outcome(
                "chown mine to root",
                chown(p("open/mine"), Some(0), None),
            ));
            out.push(outcome("utimes mine given", times("open/mine", Some(7))));
            out.push(outcome(
                "unlink owner's in sticky",
                std::fs::remove_file(p("sticky/owners")),
            ));
            out.push(outcome(
                "rename owner's in sticky",
                std::fs::rename(p("sticky/owners"), p("sticky/taken")),
            ));
            out.push(outcome(
                "create in sticky",
                std::fs::write(p("sticky/mine"), "x"),
            ));
            out.push(outcome(
                "unlink own in sticky",
                std::fs::remove_file(p("sticky/mine")),
            ));
            out.push(outcome(
                "rmdir open/dir",
                std::fs::remove_dir(p("open/dir")),
            ));
            // A write or truncate by someone without CAP_FSETID clears set-user-ID,
            // and set-group-ID where the group may execute.
            out.push(outcome("write setid", append(&p("setid"))));
            out.push(described("setid", &p("setid")));
            out.push(outcome("write sgid-nox", append(&p("sgid-nox"))));
            out.push(described("sgid-nox", &p("sgid-nox")));
            out.push(outcome("write sgid-grp", append(&p("sgid-grp"))));
            out.push(described("sgid-grp", &p("sgid-grp")));
            out.push(outcome("truncate trunc", truncate("trunc", 0)));
            out.push(described("trunc", &p("trunc")));
            // Moving a directory to another one rewrites its `..`: it needs write
            // access to the directory itself; within one directory, or for a file,
            // the parents' write access is enough.
            let mv = |from: &str, to: &str| std::fs::rename(p(from), p(to));
            out.push(outcome(
                "move root's dir",
                mv("open/rootdir", "open2/rootdir"),
            ));
            out.push(outcome(
                "rename root's dir",
                mv("open/rootdir", "open/rootdir2"),
            ));
            out.push(outcome(
                "move root's file",
                mv("open/rootfile", "open2/rootfile"),
            ));
            out.push(outcome(
                "mkdir mydir 0500",
                std::fs::create_dir(p("open/mydir")).and_then(|()| mode("open/mydir", 0o500)),
            ));
            out.push(outcome("move mydir 0500", mv("open/mydir", "open2/mydir")));
            out.push(outcome("chmod mydir 0700", mode("open/mydir", 0o700)));
            out.push(outcome("move mydir 0700", mv("open/mydir", "open2/mydir")));
            out.extend(unlinked_while_open(&p("open/gone")));
        }
        other => panic!("no phase {other}"),
    }
    out
}

/// Appends a byte to `path`.
fn append(path: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)?
        .write_all(b"y")
}

/// An open file outlives its name: made empty and closed, opened for reading (twice:
/// a warm reopen may not have reached the server), unlinked, then fstat'ed; and one
/// written, unlinked and read back through its descriptor.
fn unlinked_while_open(path: &Path) -> Vec<String> {
    let mut out = vec![outcome("create empty", std::fs::write(path, ""))];
    let fstat = std::fs::File::open(path).and_then(|first| {
        drop(first);
        let reopened = std::fs::File::open(path)?;
        std::fs::remove_file(path)?;
        reopened.metadata()
    });
    out.push(match fstat {
        Ok(m) => format!("fstat unlinked: nlink {} size {}", m.nlink(), m.size()),
        Err(e) => outcome("fstat unlinked", Err::<(), _>(e)),
    });
    let written = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| {
            f.write_all(b"still here")?;
            std::fs::remove_file(path)?;
            f.rewind()?;
            let mut back = String::new();
            f.read_to_string(&mut back)?;
            Ok((back, f.metadata()?.nlink()))
        });
    out.push(match written {
        Ok((back, nlink)) => format!("read unlinked: {back:?} nlink {nlink}"),
        Err(e) => outcome("read unlinked", Err::<(), _>(e)),
    });
    out
}

/// Runs one phase of [`posix_scenario`] in a process of its own, as `uid`:`gid`
/// (this test binary again, its `posix_probe` entry point, from a place that user can
/// reach).
fn posix_phase(probe: &Path, root: &Path, phase: &str, ids: Option<(u32, u32)>) -> String {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(probe);
    cmd.args([
        "--ignored",
        "--exact",
        "posix::posix_probe",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("WASM9P_PROBE_ROOT", root)
    .env("WASM9P_PROBE_PHASE", phase)
    .current_dir("/");
    if let Some((uid, gid)) = ids {
        // std drops the supplementary groups too when root changes uid.
        cmd.uid(uid).gid(gid);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{phase}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // libtest's "test posix_probe ... " may lead the first line.
    stdout
        .lines()
        .filter_map(|l| l.split_once("posix ").map(|(_, line)| format!("{line}\n")))
        .collect()
}

#[test]
#[ignore = "run by posix_scenarios_through_the_mount_match_a_local_directory"]
fn posix_probe() {
    let root = std::env::var_os("WASM9P_PROBE_ROOT").expect("WASM9P_PROBE_ROOT");
    let phase = std::env::var("WASM9P_PROBE_PHASE").expect("WASM9P_PROBE_PHASE");
    for line in posix_scenario(Path::new(&root), &phase) {
        println!("posix {line}");
    }
}

#[test]
fn posix_scenarios_through_the_mount_match_a_local_directory() {
    // As root: set up as root, then act as nobody. As anyone else: both as yourself.
    let root_user = rustix::process::geteuid().is_root();
    let user = root_user.then_some((65534, 65534));
    let place = tempfile::tempdir().unwrap();
    std::fs::set_permissions(place.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let probe = place.path().join("probe");
    std::fs::copy(std::env::current_exe().unwrap(), &probe).unwrap();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |dir: &Path| {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let owner = posix_phase(&probe, dir, "owner", None);
        let acting = posix_phase(&probe, dir, "user", user);
        format!("{owner}--- as {user:?}\n{acting}")
    };
    let local = tempfile::tempdir().unwrap();
    let reference = run(local.path());
    // Key lines by hand, so that agreeing on a wrong answer does not pass.
    for line in [
        "mkdir d: ok",
        "f: file 0600",
        "p: fifo 0640",
        "sock: socket",
        "rmdir non-empty: Directory not empty (ENOTEMPTY)",
        "link to dir: Operation not permitted (EPERM)",
        "f: file 0600",
        "fstat unlinked: nlink 0 size 0",
        "read unlinked: \"still here\" nlink 0",
    ] {
        assert!(
            reference.contains(line),
            "local run lacks {line:?}:\n{reference}"
        );
    }
    if root_user {
        for line in [
            "f: file 4755 0:0",
            "read ro: ok",
            "write ro: Permission denied (EACCES)",
            "open/mine: file 0644 65534:65534 size 4",
            "open/fifo: fifo 0644 65534:65534",
            "unlink owner's in sticky: Operation not permitted (EPERM)",
            "chmod ro: Operation not permitted (EPERM)",
            "trunc: file 6777 0:0",
            "setid: file 0777 0:0",
            // Set-group-ID without group execution: cleared unless the writer is
            // in the file's group (Linux 6).
            "sgid-nox: file 0666 0:0",
            "sgid-grp: file 2666 0:65534",
            "trunc: file 0777 0:0 size 0",
            "move root's dir: Permission denied (EACCES)",
            "rename root's dir: ok",
            "move root's file: ok",
            "move mydir 0500: Permission denied (EACCES)",
            "move mydir 0700: ok",
        ] {
            assert!(
                reference.contains(line),
                "local run lacks {line:?}:\n{reference}"
            );
        }
    }
    // Each cache mode, each security model (passthrough unless named), and bind.
    for mode in [
        "none",
        "loose",
        "loose,security_model=mapped-xattr",
        "none,security_model=mapped-xattr",
        "loose,security_model=mapped-file",
        "bind",
    ] {
        let backing = tempfile::tempdir().unwrap();
        std::fs::set_permissions(backing.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut args = embedded(backing.path(), mode);
        if root_user {
            args.push("--allow-other".into());
        }
        let mut m = Mounted::start(&args);
        let got = run(m.path());
        let (status, stderr) = m.stop();
        assert!(status.success(), "{mode}: {status} {stderr}");
        if got != reference {
            let diff: Vec<String> = reference
                .lines()
                .zip(got.lines())
                .filter(|(a, b)| a != b)
                .map(|(a, b)| format!("  local: {a}\n  {mode}: {b}"))
                .collect();
            panic!(
                "{mode} differs from a local directory:\n{}\n--- local:\n{reference}",
                diff.join("\n")
            );
        }
    }
}
