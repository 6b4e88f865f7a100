//! One C guest per filesystem scenario (`tests/guests/*.c`, built with Debian's clang-14
//! for wasm32-wasi), each run by the real `wasm9p run` on a bind mount (the host kernel
//! is the oracle), on the embedded 9p server in several cache modes, and over tcp to a
//! separate `wasm9p serve` process; and the same guest made a WASI preview2 component
//! (with the preview1 adapter) on bind and on embedded 9p. Every run must print exactly what the bind run
//! prints and leave exactly the same files behind; a few lines of the bind run are
//! checked by hand too, so that agreeing on a wrong answer does not pass.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use wasm9p_tests::{compile_c_guest, componentize, served_addr, spawn_serve, Reaped};

const BIN: &str = env!("CARGO_BIN_EXE_wasm9p");

/// How the guest's /data and /other are mounted.
#[derive(Clone, Copy, Debug)]
enum Variant {
    Bind,
    Embedded(&'static str),
    Tcp(&'static str),
}

const VARIANTS: [Variant; 5] = [
    Variant::Bind,
    Variant::Embedded("loose"),
    Variant::Embedded("none"),
    Variant::Tcp("loose"),
    Variant::Tcp("mmap"),
];

/// The variants the component runs on.
const COMPONENT_VARIANTS: [Variant; 2] = [Variant::Bind, Variant::Embedded("loose")];

/// `wasm9p serve` exporting `dirs` on an ephemeral loopback port; killed on drop.
struct Server {
    _child: Reaped,
    addr: String,
}

impl Server {
    fn start(dirs: &[&Path]) -> Server {
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        for dir in dirs {
            args.extend(["--export".into(), dir.as_os_str().to_owned()]);
        }
        args.extend(["--listen".into(), "tcp:127.0.0.1:0".into()]);
        let (child, line) = spawn_serve(BIN, args);
        Server {
            _child: child,
            addr: served_addr(&line),
        }
    }
}

/// Symlinks made in /data on the host before a guest runs, as (name, target): links a
/// guest cannot make itself (WASI refuses absolute targets) but finds on a server.
type Seed = &'static [(&'static str, &'static str)];

/// Runs `guest` with /data and /other mounted per `variant` on fresh directories
/// (with `seed` in /data); returns what it printed (stdout, then its exit code) and the
/// trees it left.
fn run(guest: &Path, variant: Variant, seed: Seed) -> (String, String) {
    let root = tempfile::tempdir().unwrap();
    let (data, other) = (root.path().join("data"), root.path().join("other"));
    std::fs::create_dir(&data).unwrap();
    std::fs::create_dir(&other).unwrap();
    for (name, target) in seed {
        std::os::unix::fs::symlink(target, data.join(name)).unwrap();
    }
    let mut server = None;
    let mounts: Vec<String> = match variant {
        Variant::Bind => vec![
            format!("type=bind,source={},target=/data", data.display()),
            format!("type=bind,source={},target=/other", other.display()),
        ],
        Variant::Embedded(cache) => vec![
            format!(
                "type=9p,export={},target=/data,cache={cache}",
                data.display()
            ),
            format!(
                "type=9p,export={},target=/other,cache={cache}",
                other.display()
            ),
        ],
        Variant::Tcp(cache) => {
            let s = Server::start(&[&data, &other]);
            let mounts = ["data", "other"]
                .map(|name| {
                    format!(
                        "type=9p,source={},aname={name},target=/{name},cache={cache}",
                        s.addr
                    )
                })
                .to_vec();
            server = Some(s);
            mounts
        }
    };
    let mut cmd = wasm9p_tests::wasm9p_command(BIN, env!("CARGO_TARGET_TMPDIR"));
    cmd.arg("run");
    for m in &mounts {
        cmd.arg("--mount").arg(m);
    }
    let out = cmd.arg(guest).args(["/data", "/other"]).output().unwrap();
    drop(server);
    let printed = format!(
        "{}exit {:?}\n{}",
        String::from_utf8_lossy(&out.stdout),
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    (printed, snapshot(root.path()))
}

/// Every file, directory and symlink under `root`: kind, contents, link target, size.
fn snapshot(root: &Path) -> String {
    fn walk(dir: &Path, rel: &str, out: &mut BTreeMap<String, String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = format!("{rel}/{}", e.file_name().to_string_lossy());
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            let what = if meta.is_symlink() {
                format!(
                    "symlink -> {}",
                    std::fs::read_link(e.path()).unwrap().display()
                )
            } else if meta.is_dir() {
                walk(&e.path(), &name, out);
                "dir".to_string()
            } else {
                let data = std::fs::read(e.path()).unwrap();
                let sum = data
                    .iter()
                    .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(*b)));
                format!("file {} bytes, sum {sum:x}", data.len())
            };
            out.insert(name, what);
        }
    }
    let mut entries = BTreeMap::new();
    walk(root, "", &mut entries);
    entries.iter().map(|(k, v)| format!("{k}: {v}\n")).collect()
}

/// Runs the scenario everywhere; checks agreement and the bind run's `expected` lines.
fn scenario(name: &str, expected: &[&str]) {
    scenario_on(name, expected, true, &[]);
}

/// [`scenario`], as a component too when `components` (not for calls the preview1
/// adapter answers itself, such as `fd_allocate`, which preview2 does not have).
fn scenario_on(name: &str, expected: &[&str], components: bool, seed: Seed) {
    let src: PathBuf = wasm9p_tests::guest_source(&format!("{name}.c"));
    let guest = compile_c_guest(&src);
    let (reference, tree) = run(&guest, Variant::Bind, seed);
    for line in expected {
        assert!(
            reference.lines().any(|l| l == *line),
            "{name} on bind lacks {line:?}:\n{reference}"
        );
    }
    assert!(reference.contains("exit Some(0)"), "{name}:\n{reference}");
    let component = componentize(&guest);
    let component_variants: &[Variant] = if components { &COMPONENT_VARIANTS } else { &[] };
    let runs = VARIANTS[1..].iter().map(|v| (&guest, *v, "module")).chain(
        component_variants
            .iter()
            .map(|v| (&component, *v, "component")),
    );
    for (wasm, variant, what) in runs {
        let (printed, left) = run(wasm, variant, seed);
        let variant = format!("{what} on {variant:?}");
        if printed != reference {
            let diff: Vec<String> = reference
                .lines()
                .zip(printed.lines())
                .filter(|(a, b)| a != b)
                .map(|(a, b)| format!("  bind: {a}\n  {variant}: {b}"))
                .collect();
            panic!(
                "{name}: {variant} prints differently:\n{}\n--- bind:\n{reference}\n--- {variant}:\n{printed}",
                diff.join("\n")
            );
        }
        assert_eq!(left, tree, "{name}: {variant} leaves other files");
    }
}

#[test]
fn open_read_write_seek() {
    scenario(
        "rw_seek",
        &[
            "got \"world\"",
            "seek before start: -1 Invalid argument",
            "Jello world000000000!",
            "create excl existing: File exists",
            "read write-only: -1 Bad file descriptor",
            "contents: 25 \"Jello world\"",
            "truncated: 3 \"new\"",
            "open dir for writing: Is a directory",
            "read back 300000 bytes, checksum 71672832",
        ],
    );
}

#[test]
fn readdir_of_300_entries() {
    scenario(
        "readdir300",
        &[
            "listed 300",
            "duplicates 0 missing 0",
            "seekdir returns the same entry: yes",
            "after rewind 302",
            "after unlinking 100: 200",
            "wrong entries 0",
            "opendir file: Not a directory",
        ],
    );
}

#[test]
fn symlinks_and_readlink() {
    scenario_on(
        "symlinks",
        &[
            "symlink absolute: -1 Operation not permitted",
            "readlink abs: 20 /data/sub/target.txt",
            "  stat: Symbolic link loop",
            "read via chain: 11 \"target text\"",
            "open nofollow: Symbolic link loop",
            "target now: 5 \"later\"",
            "chain now dangling: No such file or directory",
            "read replaced: 5 \"later\"",
        ],
        true,
        // The absolute link the guest may not make is found on the server.
        &[("abs", "/data/sub/target.txt")],
    );
}

#[test]
fn rename_link_unlink_rmdir() {
    scenario(
        "rename_unlink",
        &[
            "replaced: 1 \"B\"",
            "rename dir over non-empty dir: -1 Directory not empty",
            "rename across mounts: -1 Cross-device link",
            "link across mounts: -1 Cross-device link",
            "nlink 2",
            "rmdir non-empty: -1 Directory not empty",
            "read after unlink: 1",
        ],
    );
}

#[test]
fn stat_of_missing_paths() {
    scenario(
        "stat_missing",
        &[
            "  missing file: No such file or directory",
            "  file as dir: Not a directory",
            "created: file size 9",
            "gone again: No such file or directory",
            "renamed in: file size 1",
            "via new link: file size 13",
        ],
    );
}

#[test]
fn utimes_and_truncate() {
    scenario(
        "utimes_truncate",
        &[
            "set: mtime 1234567890.987654321 atime 1000000000.123456789",
            "mtime only: mtime 1500000000.000000005 atime 1000000000.123456789",
            "now is recent: yes",
            "target untouched by nofollow: mtime 1700000000.000000000 atime 1600000000.000000000",
            "012300000000",
            "01000Z",
            "truncate a dir: -1 Is a directory",
            "ftruncate read-only: -1 Bad file descriptor",
            "ftruncate unlinked: 0",
            "fstat unlinked: 4",
            "pread unlinked: 4",
        ],
    );
}

#[test]
fn escape_attempts_stay_inside() {
    scenario_on(
        "escapes",
        &[
            // A path may not climb above the directory it is relative to (for a C
            // program's absolute path, the preopen wasi-libc picked), as in wasmtime.
            "dotdot past mount: open Operation not permitted",
            "dotdot back in: open Operation not permitted",
            "symlink abs out: -1 Operation not permitted",
            "symlink to host file: -1 Operation not permitted",
            // Links out found on the server resolve in the guest's namespace: nothing.
            "via abs: open No such file or directory",
            "via file link: open No such file or directory",
            "create via dangling out: No such file or directory",
            "via rel: open No such file or directory",
            "readlink keeps the text: ../../../../../etc",
            "create through abs link: No such file or directory",
            "open a loop: Symbolic link loop",
            "create through a loop: Symbolic link loop",
            "read through a dir link: 7 \"through\"",
            "create through a dir link: ok",
            "opendir through a dir link: ok",
            "rename across mounts: -1 Cross-device link",
            "rename a dir across mounts: -1 Cross-device link",
            "link across mounts: -1 Cross-device link",
            "still inside: 6 \"inside\"",
        ],
        true,
        // The links out that the guest may not make, found on the server instead.
        &[("etc", "/etc"), ("passwd", "/etc/passwd")],
    );
}

#[test]
fn wasi_calls_answer_as_linux_does() {
    scenario_on(
        "wasi_calls",
        &[
            "fsync dir: 0",
            "fdatasync dir: 0",
            "fallocate grow: 0",
            "  size 4096",
            "fallocate read-only: 8",
            "append flag: off",
            "log: 6 \"ONEtwo\"",
            "two appenders: 3 \"abc\"",
            "  hard-sym: symlink size 6",
            "  hard-target: file size 6",
            "link follow dangling: -1 No such file or directory",
            "random_get 20 MiB: 0",
            "  zero pages: 0",
            "  events 3, clocks both, stdout yes",
            "  events 1, first 10",
        ],
        false,
        &[],
    );
}
