//! Whole file system suites from Debian through the mount: dbench, postmark and
//! stress-ng's file stressors.

use super::*;

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
