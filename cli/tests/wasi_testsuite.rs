//! The WebAssembly community's conformance suite (wasi-testsuite, a snapshot in
//! `../shared/wasi-testsuite`, or `$WASI_TESTSUITE`) run through the real `wasm9p run`
//! on every mount type, as its `specification.md` says: each test's `root` copied
//! fresh (its `*.cleanup` files removed) and mounted as the guest's `/`, its `args` and
//! `env` (and nothing else) given, its exit code and the output its spec names checked.
//! A test without a `root` runs with no file system at all (`--no-mounts`), as stock
//! wasmtime runs it with no `--dir`.
//!
//! Mount types: bind, the embedded 9p server in `none` and `loose`, and 9p over tcp to
//! a separate `wasm9p serve` (exporting one base directory; each test attaches its
//! root by `aname=BASE/TEST/root`) in `none` and `loose`. The same tests made
//! components with the preview1 adapter run through our preview2 on the same mounts.
//! The 14 WASI 0.3 filesystem components (`wasm32-wasip3`) run the same way, on the
//! same mounts, through our `wasi:filesystem@0.3.0`. Each mount type prints one line, `wasi-testsuite MOUNT: N passed, N failed` (and,
//! for components, how many failed as expected inside the adapter), and appends it to
//! `target/wasi-testsuite.txt`, which `scripts/test` shows at the end.
//!
//! Stock wasmtime passes every test as a module, and so does wasm9p on every mount:
//! [`EXPECTED_DIFFERENCES`] (tests where wasm9p answers otherwise by design) is empty.
//! As components, four AssemblyScript tests fail inside the preview1 adapter itself,
//! before or after any host call, exactly as they do on stock wasmtime-wasi 48's
//! preview2 with the same adapter (checked by hand: same traps, same exit codes); they
//! are [`ADAPTER_FAILURES`]. Every 0.3 test passes on every mount
//! ([`P3_EXPECTED_DIFFERENCES`] is empty). A listed test that passes fails the run, so
//! the lists cannot go stale.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use wasm9p_tests::{componentize, served_addr, spawn_serve};

const BIN: &str = env!("CARGO_BIN_EXE_wasm9p");

/// Tests where wasm9p differs from stock wasmtime on purpose: (test, reason).
const EXPECTED_DIFFERENCES: &[(&str, &str)] = &[];

/// WASI 0.3 tests that wasmtime-wasi 48's `p3` cannot pass under wasm9p (a piece it
/// does not provide): (test, the missing piece).
const P3_EXPECTED_DIFFERENCES: &[(&str, &str)] = &[];

/// Tests that fail as components because of the preview1 command adapter (48.0.8),
/// on stock wasmtime-wasi's preview2 as on ours: (test, what the adapter does).
const ADAPTER_FAILURES: &[(&str, &str)] = &[
    (
        "assemblyscript/args_get-multiple-arguments",
        "the adapter's args_get asserts (adapter line 2858) on AssemblyScript's buffer layout",
    ),
    (
        "assemblyscript/environ_get-multiple-variables",
        "the adapter's fd_write asserts (adapter line 2858) on AssemblyScript's buffer layout",
    ),
    (
        "assemblyscript/fd_write-to-invalid-fd",
        "the adapter answers a write of no iovecs to a bad fd without EBADF",
    ),
    (
        "assemblyscript/proc_exit-failure",
        "preview2's wasi:cli/exit carries only ok/err: exit code 33 becomes 1",
    ),
];

/// Longest one test may run before it counts as failed (and is killed).
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The suite's root directory; a missing suite fails the tests (it is part of CI).
fn suite() -> PathBuf {
    let dir = std::env::var_os("WASI_TESTSUITE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/wasi-testsuite")
        });
    assert!(
        dir.join("tests").is_dir(),
        "wasi-testsuite not found at {} (set WASI_TESTSUITE to its directory)",
        dir.display()
    );
    dir
}

/// One test case: its module and what its spec asks.
#[derive(Clone, Debug)]
struct Case {
    /// `LANGUAGE/NAME`, e.g. `rust/fd_readdir`.
    name: String,
    module: PathBuf,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    /// The directory to copy and mount as `/`, if any.
    root: Option<PathBuf>,
    exit_code: i32,
    /// Expected output, where the spec gives it (unchecked otherwise).
    stdout: Option<String>,
    stderr: Option<String>,
}

impl Case {
    /// The case for `module`, from `NAME.json` beside it if there is one: the legacy
    /// form or the operation-based one (`run`, `wait`, `read`; a test that needs a
    /// network peer is an error here, as none of the preview1 tests do).
    fn load(module: &Path) -> Case {
        let dir = module.parent().unwrap();
        let stem = module.file_stem().unwrap().to_string_lossy().into_owned();
        let language = dir.parent().unwrap().parent().unwrap().file_name().unwrap();
        let mut case = Case {
            name: format!("{}/{stem}", language.to_string_lossy()),
            module: module.to_owned(),
            args: Vec::new(),
            env: BTreeMap::new(),
            root: None,
            exit_code: 0,
            stdout: None,
            stderr: None,
        };
        let spec_file = dir.join(format!("{stem}.json"));
        let Ok(text) = std::fs::read_to_string(&spec_file) else {
            return case;
        };
        let spec: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", spec_file.display()));
        let operations = match spec.get("operations") {
            Some(ops) => ops.as_array().cloned().unwrap_or_default(),
            None => {
                // Legacy: one run, its output, one wait.
                let mut run = spec.clone();
                run["type"] = "run".into();
                let mut ops = vec![run];
                for id in ["stdout", "stderr"] {
                    if let Some(payload) = spec.get(id) {
                        ops.push(serde_json::json!({"type": "read", "id": id, "payload": payload}));
                    }
                }
                let code = spec.get("exit_code").cloned().unwrap_or(0.into());
                ops.push(serde_json::json!({"type": "wait", "exit_code": code}));
                ops
            }
        };
        for op in operations {
            match op["type"].as_str().unwrap_or("") {
                "run" => {
                    case.args = op["args"]
                        .as_array()
                        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
                        .unwrap_or_default();
                    if let Some(env) = op["env"].as_object() {
                        for (k, v) in env {
                            case.env.insert(k.clone(), v.as_str().unwrap().to_owned());
                        }
                    }
                    case.root = op["root"].as_str().map(|r| dir.join(r));
                }
                "wait" => case.exit_code = op["exit_code"].as_i64().unwrap_or(0) as i32,
                "read" => {
                    let payload = op["payload"].as_str().unwrap_or("").to_owned();
                    match op["id"].as_str().unwrap_or("stdout") {
                        "stderr" => case.stderr = Some(payload),
                        _ => case.stdout = Some(payload),
                    }
                }
                other => panic!(
                    "{}: operation {other:?} is not supported",
                    spec_file.display()
                ),
            }
        }
        case
    }
}

/// What a pass runs: the preview1 modules, the same made components with the
/// preview1 adapter, or the WASI 0.3 components.
#[derive(Clone, Copy, PartialEq)]
enum Guests {
    Modules,
    Components,
    P3,
}

/// The suite's WASI 0.3 filesystem components, named `rust-p3/NAME`.
fn p3_cases() -> &'static [Case] {
    static CASES: OnceLock<Vec<Case>> = OnceLock::new();
    CASES.get_or_init(|| {
        let dir = suite().join("tests/rust/testsuite/wasm32-wasip3");
        let mut cases: Vec<Case> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "wasm"))
            .map(|path| {
                let mut case = Case::load(&path);
                case.name = case.name.replacen("rust/", "rust-p3/", 1);
                case
            })
            .collect();
        cases.sort_by(|a, b| a.name.cmp(&b.name));
        cases
    })
}

/// Every preview1 test case of the suite, by name.
fn cases() -> &'static [Case] {
    static CASES: OnceLock<Vec<Case>> = OnceLock::new();
    CASES.get_or_init(|| {
        let tests = suite().join("tests");
        let mut cases = Vec::new();
        for language in ["assemblyscript", "c", "rust"] {
            let dir = tests.join(language).join("testsuite/wasm32-wasip1");
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "wasm") {
                    cases.push(Case::load(&path));
                }
            }
        }
        cases.sort_by(|a, b| a.name.cmp(&b.name));
        cases
    })
}

/// The case's module made a component with the preview1 command adapter, once per
/// test process (the suite is read-only: the component is made in our target dir).
fn component_of(case: &Case) -> PathBuf {
    static MADE: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    // Held while making one, so two passes never make the same one at once.
    let mut made = MADE.lock().unwrap();
    if let Some(component) = made.get(&case.name) {
        return component.clone();
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("wasi-testsuite-components");
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join(format!(
        "{}-{}.wasm",
        case.name.replace('/', "-"),
        std::process::id()
    ));
    std::fs::copy(&case.module, &copy).unwrap();
    let component = componentize(&copy);
    made.insert(case.name.clone(), component.clone());
    component
}

/// How the guest's `/` is mounted.
#[derive(Clone, Copy, Debug)]
enum Mount {
    Bind,
    Embedded(&'static str),
    Tcp(&'static str),
}

impl Mount {
    fn label(self) -> String {
        match self {
            Mount::Bind => "bind".into(),
            Mount::Embedded(cache) => format!("embedded-9p-{cache}"),
            Mount::Tcp(cache) => format!("tcp-9p-{cache}"),
        }
    }
}

/// Copies `from` to `to` as it is (symlinks as symlinks), leaving out `*.cleanup`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name.to_string_lossy().ends_with(".cleanup") {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if kind.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// Runs `case` on `mount` (`server`: the tcp server's address and exported base);
/// `None` if it passed, else what went wrong.
fn run_case(
    case: &Case,
    guest: &Path,
    mount: Mount,
    base: &Path,
    server: Option<&str>,
) -> Option<String> {
    let work = tempfile::tempdir_in(base).unwrap();
    let mut cmd = wasm9p_tests::wasm9p_command(BIN, env!("CARGO_TARGET_TMPDIR"));
    cmd.arg("run");
    match &case.root {
        Some(root) => {
            let copy = work.path().join("root");
            copy_tree(root, &copy);
            let spec = match mount {
                Mount::Bind => format!("type=bind,source={},target=/", copy.display()),
                Mount::Embedded(cache) => {
                    format!("type=9p,export={},target=/,cache={cache}", copy.display())
                }
                Mount::Tcp(cache) => format!(
                    "type=9p,source={},aname={},target=/,cache={cache}",
                    server.unwrap(),
                    copy.display()
                ),
            };
            cmd.arg("--mount").arg(spec);
        }
        None => {
            cmd.arg("--no-mounts");
        }
    }
    for (k, v) in &case.env {
        cmd.arg("--env").arg(format!("{k}={v}"));
    }
    let mut child = cmd
        .arg(guest)
        .args(&case.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let readers = (
        std::thread::spawn(move || read_all(&mut out)),
        std::thread::spawn(move || read_all(&mut err)),
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > TEST_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let (stdout, stderr) = (readers.0.join().unwrap(), readers.1.join().unwrap());
    let Some(status) = status else {
        return Some(format!("timed out after {TEST_TIMEOUT:?}"));
    };
    let mut wrong = Vec::new();
    if status.code() != Some(case.exit_code) {
        wrong.push(format!(
            "exit code {:?}, expected {}",
            status.code(),
            case.exit_code
        ));
    }
    if case.stdout.as_ref().is_some_and(|s| *s != stdout) {
        wrong.push(format!(
            "stdout {stdout:?}, expected {:?}",
            case.stdout.as_ref().unwrap()
        ));
    }
    if case.stderr.as_ref().is_some_and(|s| *s != stderr) {
        wrong.push(format!(
            "stderr {stderr:?}, expected {:?}",
            case.stderr.as_ref().unwrap()
        ));
    }
    if wrong.is_empty() {
        None
    } else {
        let tail: String = stderr
            .chars()
            .rev()
            .take(600)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        Some(format!("{}; stderr ends: {tail}", wrong.join("; ")))
    }
}

fn read_all(r: &mut impl std::io::Read) -> String {
    let mut bytes = Vec::new();
    let _ = r.read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Runs the whole suite on `mount`, as `guests` says; prints and records the report
/// line, and fails with every failure listed.
fn run_suite(mount: Mount, guests: Guests) {
    let label = format!(
        "{}{}",
        mount.label(),
        match guests {
            Guests::Modules => "",
            Guests::Components => " (components)",
            Guests::P3 => " (wasip3)",
        }
    );
    let base = tempfile::tempdir().unwrap();
    // One server for the whole pass, exporting the base directory every test's root is
    // copied into; each test attaches its own root inside it.
    let server = match mount {
        Mount::Tcp(_) => {
            let args = [
                "--export".into(),
                base.path().as_os_str().to_owned(),
                "--listen".into(),
                "tcp:127.0.0.1:0".into(),
            ];
            let (child, line) = spawn_serve::<_, std::ffi::OsString>(BIN, args);
            Some((child, served_addr(&line)))
        }
        _ => None,
    };
    let cases = match guests {
        Guests::P3 => p3_cases(),
        Guests::Modules | Guests::Components => cases(),
    };
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                let guest = match guests {
                    Guests::Components => component_of(case),
                    Guests::Modules | Guests::P3 => case.module.clone(),
                };
                let addr = server.as_ref().map(|(_, a)| a.as_str());
                if let Some(why) = run_case(case, &guest, mount, base.path(), addr) {
                    failures.lock().unwrap().push((case.name.clone(), why));
                }
            });
        }
    });
    if let Some((mut child, _)) = server {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut failures = failures.into_inner().unwrap();
    failures.sort();
    let differences = match guests {
        Guests::P3 => P3_EXPECTED_DIFFERENCES,
        Guests::Modules | Guests::Components => EXPECTED_DIFFERENCES,
    };
    let mut expected: Vec<&str> = differences.iter().map(|(name, _)| *name).collect();
    if guests == Guests::Components {
        expected.extend(ADAPTER_FAILURES.iter().map(|(name, _)| *name));
    }
    let mut unexpected: Vec<(String, String)> = failures
        .iter()
        .filter(|(name, _)| !expected.contains(&name.as_str()))
        .cloned()
        .collect();
    for name in &expected {
        if !failures.iter().any(|(failed, _)| failed == name) {
            unexpected.push((
                name.to_string(),
                "passes: take it off the expected list".into(),
            ));
        }
    }
    // Expected failures (the adapter's) are counted apart, so that the line's
    // "failed" is what fails the run.
    let known = failures
        .iter()
        .filter(|(name, _)| expected.contains(&name.as_str()))
        .count();
    let line = format!(
        "wasi-testsuite {label}: {} passed, {} failed{}",
        cases.len() - failures.len(),
        failures.len() - known,
        if known > 0 {
            format!(", {known} failed as expected (listed with their reasons)")
        } else {
            String::new()
        }
    );
    println!("{line}");
    let report = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/wasi-testsuite.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(report)
    {
        let _ = writeln!(f, "{line}");
    }
    assert!(
        unexpected.is_empty(),
        "{line}\n{}",
        unexpected
            .iter()
            .map(|(name, why)| format!("  {name}: {why}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_suite_has_every_preview1_test_with_its_spec() {
    // 72 tests in the snapshot; a runner that found fewer would pass on nothing.
    let cases = cases();
    assert_eq!(
        cases.len(),
        72,
        "{:?}",
        cases.iter().map(|c| &c.name).collect::<Vec<_>>()
    );
    let with_root = cases.iter().filter(|c| c.root.is_some()).count();
    assert!(with_root >= 40, "only {with_root} tests have a root");
    let exit = cases
        .iter()
        .find(|c| c.name == "assemblyscript/proc_exit-failure")
        .unwrap();
    assert_ne!(exit.exit_code, 0);
    let stdout = cases
        .iter()
        .find(|c| c.name == "assemblyscript/fd_write-to-stdout")
        .unwrap();
    assert!(stdout.stdout.as_ref().is_some_and(|s| !s.is_empty()));
}

#[test]
fn wasi_testsuite_on_bind() {
    run_suite(Mount::Bind, Guests::Modules);
}

#[test]
fn wasi_testsuite_on_embedded_9p_none() {
    run_suite(Mount::Embedded("none"), Guests::Modules);
}

#[test]
fn wasi_testsuite_on_embedded_9p_loose() {
    run_suite(Mount::Embedded("loose"), Guests::Modules);
}

#[test]
fn wasi_testsuite_on_tcp_9p_none() {
    run_suite(Mount::Tcp("none"), Guests::Modules);
}

#[test]
fn wasi_testsuite_on_tcp_9p_loose() {
    run_suite(Mount::Tcp("loose"), Guests::Modules);
}

#[test]
fn wasi_testsuite_components_on_bind() {
    run_suite(Mount::Bind, Guests::Components);
}

#[test]
fn wasi_testsuite_components_on_embedded_9p_none() {
    run_suite(Mount::Embedded("none"), Guests::Components);
}

#[test]
fn wasi_testsuite_components_on_embedded_9p_loose() {
    run_suite(Mount::Embedded("loose"), Guests::Components);
}

#[test]
fn wasi_testsuite_components_on_tcp_9p_none() {
    run_suite(Mount::Tcp("none"), Guests::Components);
}

#[test]
fn wasi_testsuite_components_on_tcp_9p_loose() {
    run_suite(Mount::Tcp("loose"), Guests::Components);
}

#[test]
fn the_suite_has_every_wasip3_filesystem_test() {
    // 14 in the snapshot, each with the root it runs in.
    let cases = p3_cases();
    assert_eq!(
        cases.len(),
        14,
        "{:?}",
        cases.iter().map(|c| &c.name).collect::<Vec<_>>()
    );
    assert!(cases.iter().all(|c| c.root.is_some()));
    assert!(cases.iter().any(|c| c.name == "rust-p3/filesystem-io"));
}

#[test]
fn wasi_testsuite_wasip3_on_bind() {
    run_suite(Mount::Bind, Guests::P3);
}

#[test]
fn wasi_testsuite_wasip3_on_embedded_9p_none() {
    run_suite(Mount::Embedded("none"), Guests::P3);
}

#[test]
fn wasi_testsuite_wasip3_on_embedded_9p_loose() {
    run_suite(Mount::Embedded("loose"), Guests::P3);
}

#[test]
fn wasi_testsuite_wasip3_on_tcp_9p_none() {
    run_suite(Mount::Tcp("none"), Guests::P3);
}

#[test]
fn wasi_testsuite_wasip3_on_tcp_9p_loose() {
    run_suite(Mount::Tcp("loose"), Guests::P3);
}
