//! `wasm9p mount`: the namespace through FUSE, driven by ordinary host programs and
//! std::fs, with the backing directory (or an in-memory model) as the oracle.
//!
//! Each test starts the real binary on a tempdir mount point and stops it with SIGTERM
//! (a guard unmounts lazily if anything is left). Needs /dev/fuse and root (or
//! fusermount3); `fio` comes from Debian (scripts/test installs it).

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wasm9p_tests::{spawn_serve, Rng, Tree};

mod fuse_support;
use fuse_support::{embedded, wait_bounded, Mounted, BIN};

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

/// fsx-style: random writes, reads, truncates, reopens and fsyncs on one file through
/// two handles (one read-write, one read-only), every read and size checked against an
/// in-memory model; at the end the backing file must equal the model.
fn fsx(mnt: &Path, backing: &Path, seed: u64, ops: usize) -> Vec<String> {
    const MAX_LEN: u64 = 512 << 10;
    let path = mnt.join("fsx.bin");
    let mut model: Vec<u8> = Vec::new();
    let open_rw = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap()
    };
    let mut rw = open_rw();
    let mut ro = std::fs::File::open(&path).unwrap();
    let mut rng = Rng::new(seed);
    let mut log = Vec::new();
    for step in 0..ops {
        let op = rng.below(100);
        let context = |log: &Vec<String>| {
            format!(
                "seed {seed} step {step}; last ops:\n{}",
                log[log.len().saturating_sub(40)..].join("\n")
            )
        };
        match op {
            0..=39 => {
                let off = rng.below(MAX_LEN);
                let len = 1 + rng.below(64 << 10).min(MAX_LEN - off);
                let byte = rng.next_u64() as u8;
                let data: Vec<u8> = (0..len).map(|i| byte.wrapping_add(i as u8)).collect();
                rw.write_all_at(&data, off).unwrap();
                let end = (off + len) as usize;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].copy_from_slice(&data);
                log.push(format!("write {off} {len}"));
            }
            40..=74 => {
                let off = rng.below(model.len() as u64 + 4096);
                let len = 1 + rng.below(96 << 10);
                let file = if rng.below(2) == 0 { &ro } else { &rw };
                let mut buf = vec![0u8; len as usize];
                let mut got = 0;
                while got < buf.len() {
                    let n = file.read_at(&mut buf[got..], off + got as u64).unwrap();
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
                let want = model
                    .get(off as usize..(off as usize + len as usize).min(model.len()))
                    .unwrap_or(&[]);
                log.push(format!("read {off} {len} -> {got}"));
                if &buf[..got] != want {
                    let first = buf.iter().zip(want).position(|(a, b)| a != b);
                    if let Some(k) = first {
                        let upto = (k + 16).min(got);
                        let disk = std::fs::read(backing.join("fsx.bin")).unwrap_or_default();
                        let at = off as usize + k;
                        eprintln!(
                            "got {:?}\nwant {:?}\nbacking file {:?}",
                            &buf[k..upto],
                            &want[k..upto],
                            disk.get(at..at + (upto - k))
                        );
                    }
                    panic!(
                        "read {off}+{len}: got {got} bytes, model has {}; first difference at \
                         +{first:?}; {}",
                        want.len(),
                        context(&log)
                    );
                }
            }
            75..=84 => {
                let size = rng.below(MAX_LEN);
                rw.set_len(size).unwrap();
                model.resize(size as usize, 0);
                log.push(format!("truncate {size}"));
            }
            85..=89 => {
                rw.sync_all().unwrap();
                log.push("fsync".into());
            }
            90..=94 => {
                rw = open_rw();
                ro = std::fs::File::open(&path).unwrap();
                log.push("reopen".into());
            }
            _ => {
                let size = std::fs::metadata(&path).unwrap().len();
                log.push(format!("stat -> {size}"));
                assert_eq!(size, model.len() as u64, "{}", context(&log));
                let mut end = rw.try_clone().unwrap();
                assert_eq!(
                    end.seek(SeekFrom::End(0)).unwrap(),
                    model.len() as u64,
                    "{}",
                    context(&log)
                );
            }
        }
    }
    drop((rw, ro));
    let on_disk = std::fs::read(backing.join("fsx.bin")).unwrap();
    assert!(
        on_disk == model,
        "seed {seed}: backing file differs from the model ({} vs {} bytes)",
        on_disk.len(),
        model.len()
    );
    log
}

#[test]
fn fsx_agrees_with_the_host_filesystem_itself() {
    // The tester's own check: on a plain directory its model must hold.
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(fsx(dir.path(), dir.path(), 7, 1500).len(), 1500);
}

#[test]
fn fsx_random_io_matches_a_model_in_every_mode() {
    // Longer runs: WASM9P_FSX_OPS=100000 (and another WASM9P_FSX_SEED).
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let ops = env("WASM9P_FSX_OPS").unwrap_or(1500) as usize;
    let seed = env("WASM9P_FSX_SEED").unwrap_or(0x5eed_0000);
    // The same sequence on bind (the baseline through the same FUSE layer) and 9p.
    for mode in ["bind"].iter().chain(&MODES) {
        let dir = Tree::build(&[]);
        let mut m = Mounted::start(&embedded(dir.path(), mode));
        eprintln!("fsx on {mode}, seed {seed}, {ops} operations");
        let log = fsx(m.path(), dir.path(), seed, ops);
        assert_eq!(log.len(), ops);
        let (status, stderr) = m.stop();
        assert!(status.success(), "{mode}: {status} {stderr}");
    }
}

#[test]
fn fio_verifies_sequential_and_random_io() {
    let fio = Path::new("/usr/bin/fio");
    assert!(
        fio.exists(),
        "fio missing: apt-get install fio (scripts/test does)"
    );
    // fio writes its verify state files (`*-verify.state`) to its working directory:
    // a temporary one, so that none lands in the source tree.
    let work = tempfile::tempdir().unwrap();
    for mode in ["none", "loose"] {
        let dir = Tree::build(&[]);
        let mut m = Mounted::start(&embedded(dir.path(), mode));
        for (name, rw, bs, jobs) in [("seq", "write", "64k", "1"), ("rand", "randrw", "4k", "2")] {
            let out = Command::new(fio)
                .current_dir(work.path())
                .args([
                    &format!("--name={name}"),
                    &format!("--directory={}", m.path().display()),
                    &format!("--rw={rw}"),
                    &format!("--bs={bs}"),
                    "--size=8m",
                    "--verify=crc32c",
                    "--do_verify=1",
                    "--verify_fatal=1",
                    "--ioengine=psync",
                    &format!("--numjobs={jobs}"),
                    "--output-format=json",
                ])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "fio {name} on {mode}: {}\n{text}",
                String::from_utf8_lossy(&out.stderr)
            );
            let json: serde_json::Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("fio output: {e}\n{text}"));
            for job in json["jobs"].as_array().unwrap() {
                assert_eq!(job["error"].as_i64(), Some(0), "{mode} {name}: {job}");
                assert!(job["write"]["io_bytes"].as_u64().unwrap() > 0, "{job}");
            }
        }
        let (status, stderr) = m.stop();
        assert!(status.success(), "{mode}: {status} {stderr}");
    }
}

/// Every path below `dir`, relative, sorted.
fn walkdir(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Runs `program ARGS` (stdin from `input`), bounded in time; its output.
fn suite(program: &str, args: &[&str], input: &str, limit: Duration) -> String {
    let path = Path::new("/usr/bin").join(program);
    assert!(
        path.exists(),
        "{program} missing: apt-get install {program} (scripts/test does)"
    );
    let mut child = Command::new(&path)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = std::thread::spawn(move || child.wait_with_output().unwrap());
    let deadline = Instant::now() + limit;
    while !out.is_finished() {
        assert!(Instant::now() < deadline, "{program} ran past {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = out.join().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\n{text}",
        out.status
    );
    text
}

/// The stress-ng stressors of its filesystem class that apply to a 9p-backed mount
/// (leaving out xattrs, leases, notify, ioctls, binderfs and the like, which the
/// mount does not serve or which test the kernel rather than the filesystem).
const STRESSORS: [&str; 22] = [
    "access",
    "chdir",
    "chmod",
    "copy-file",
    "dentry",
    "dir",
    "dirdeep",
    "dirmany",
    "fallocate",
    "filename",
    "fsize",
    "fstat",
    "getdent",
    "hdd",
    "io",
    "iomix",
    "link",
    "open",
    "rename",
    "symlink",
    "sync-file",
    "utime",
];

#[test]
fn dbench_postmark_and_stress_ng_run_clean() {
    for mode in ["none", "loose"] {
        let dir = Tree::build(&[]);
        let mut m = Mounted::start(&embedded(dir.path(), mode));
        let mnt = m.path().display().to_string();
        let out = suite(
            "dbench",
            &[
                "-D",
                &mnt,
                "-t",
                "3",
                "-c",
                "/usr/share/dbench/client.txt",
                "2",
            ],
            "",
            Duration::from_secs(120),
        );
        assert!(out.contains("Throughput"), "{out}");
        let out = suite(
            "postmark",
            &[],
            &format!(
                "set location {mnt}\nset number 200\nset transactions 600\nset size 500 20000\nrun\nquit\n"
            ),
            Duration::from_secs(120),
        );
        assert!(out.contains("created") && out.contains("deleted"), "{out}");
        if mode == "loose" {
            let flags: Vec<String> = STRESSORS.iter().map(|s| format!("--{s}")).collect();
            let mut args = vec!["--temp-path", &mnt, "--timeout", "1", "--metrics-brief"];
            for flag in &flags {
                args.extend([flag.as_str(), "1"]);
            }
            let out = suite("stress-ng", &args, "", Duration::from_secs(300));
            assert!(out.contains("successful run completed"), "{out}");
            assert!(!out.contains("fail:"), "{out}");
        }
        // What the suites cleaned up is gone from the export too: no file is left
        // (dbench keeps its directories).
        let (status, stderr) = m.stop();
        assert!(status.success(), "{mode}: {status} {stderr}");
        let files: Vec<_> = walkdir(dir.path())
            .into_iter()
            .filter(|p| !dir.path().join(p).is_dir())
            .collect();
        assert!(files.is_empty(), "{mode}: left behind {files:?}");
    }
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
            out.push(outcome(
                "truncate f",
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(p("f"))
                    .and_then(|f| f.set_len(100)),
            ));
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
        }
        other => panic!("no phase {other}"),
    }
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
        "posix_probe",
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
        ] {
            assert!(
                reference.contains(line),
                "local run lacks {line:?}:\n{reference}"
            );
        }
    }
    for mode in ["none", "loose", "bind"] {
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
