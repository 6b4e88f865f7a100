//! `wasm9p run` as a user runs it: the binary, a C guest built with clang for
//! wasm32-wasi, the embedded 9p default, exit codes, stats, and one-line errors.

use std::path::{Path, PathBuf};
use std::process::Command;

use wasm9p_tests::{compile_c_guest, Tree};

const BIN: &str = env!("CARGO_BIN_EXE_wasm9p");

/// The binary, with compiled modules cached in this crate's target tmpdir (not the
/// user's cache).
fn wasm9p() -> Command {
    wasm9p_tests::wasm9p_command(BIN, env!("CARGO_TARGET_TMPDIR"))
}

fn guest() -> PathBuf {
    compile_c_guest(&wasm9p_tests::guest_source("fileops.c"))
}

#[test]
fn runs_a_guest_on_an_embedded_9p_mount_with_stats() {
    let wasm = guest();
    let dir = Tree::build(&[Tree::file("hello.txt", "hello\n")]);
    let stats = dir.path().join("stats.json");
    let out = wasm9p()
        .args([
            "run",
            "--mount",
            &format!(
                "type=9p,export={},target=/data,cache=loose",
                dir.path().display()
            ),
        ])
        .args([
            "--env",
            "WASM9P_TEST=yes",
            &format!("--stats={}", stats.display()),
        ])
        .arg(&wasm)
        .args(["/data", "5"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(5),
        "the guest's exit code: {stdout}"
    );
    assert!(
        stdout.contains("args 3 fileops-")
            && stdout.contains(" env yes")
            && stdout.contains("read 6 bytes: hello"),
        "{stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let mount = &json["mounts"][0];
    assert_eq!(
        (mount["target"].as_str(), mount["type"].as_str()),
        (Some("/data"), Some("9p"))
    );
    // The guest's probes of missing names are answered from the cache: a negative
    // dentry, or its directory's listing once read (complete directories).
    let cache = &mount["cache"];
    assert!(
        cache["negative_hits"].as_u64().unwrap() + cache["listing_hits"].as_u64().unwrap() >= 2,
        "{cache}"
    );
    assert_eq!(
        mount["rpc"]["write"].as_u64(),
        Some(1),
        "11,000 one-byte writes, one Twrite"
    );
    assert_eq!(json["guests"].as_u64(), Some(1));
}

#[test]
fn with_no_mounts_the_current_directory_is_served_at_the_root() {
    let wasm = guest();
    let dir = Tree::build(&[Tree::file("hello.txt", "from cwd\n")]);
    let out = wasm9p()
        .current_dir(dir.path())
        .arg("run")
        .arg(&wasm)
        .arg("/")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("read 9 bytes: from cwd"), "{stdout}");
}

#[test]
fn setup_errors_are_one_line_and_exit_2() {
    let wasm = guest();
    let dir = tempfile::tempdir().unwrap();
    // The address once, then why.
    let unreachable = format!(
        "cannot mount /g: cannot connect to unix:{}/none: No such file or directory",
        dir.path().display()
    );
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "--mount".into(),
                "type=9p,target=/g".into(),
                wasm.display().to_string(),
            ],
            "needs source=ADDR or export=HOSTDIR",
        ),
        (
            vec![
                "--mount".into(),
                format!(
                    "type=9p,source=unix:{}/none,target=/g",
                    dir.path().display()
                ),
                wasm.display().to_string(),
            ],
            &unreachable,
        ),
        (
            vec![
                "--dir".into(),
                "/no/such::/g".into(),
                wasm.display().to_string(),
            ],
            "cannot mount /g",
        ),
        (
            vec![dir.path().join("missing.wasm").display().to_string()],
            "cannot read",
        ),
        (
            vec![
                "--env".into(),
                "NOEQUALS".into(),
                wasm.display().to_string(),
            ],
            "is not K=V",
        ),
    ];
    for (args, needle) in cases {
        let out = wasm9p()
            .current_dir(dir.path())
            .arg("run")
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle) && !stderr.contains("panicked"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn batch_runs_one_guest_per_line_on_shared_mounts_and_sums_up_exit_codes() {
    let module = guest();
    // The same program as a core module (preview1) and as a component (preview2).
    // WASI 0.2's `exit` takes ok or err: a component's nonzero statuses all become 1.
    batch_of_three(&module, 3);
    batch_of_three(&wasm9p_tests::componentize(&module), 1);
}

#[test]
fn batch_passes_rerun_the_list_on_warm_mounts_with_stats_per_pass() {
    let dir = Tree::build(&[Tree::Dir("a", vec![Tree::file("hello.txt", "hello\n")])]);
    let commands = dir.path().join("commands");
    std::fs::write(&commands, "fileops /data/a\nfileops /data/a 3\n").unwrap();
    let stats = dir.path().join("stats.json");
    let out = wasm9p()
        .args(["batch", "--jobs", "1", "--passes", "2", "--mount"])
        .arg(format!(
            "type=9p,export={},target=/data,cache=loose",
            dir.path().display()
        ))
        .arg(format!("--stats={}", stats.display()))
        .arg("--module")
        .arg(guest())
        .arg(&commands)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "a guest exited 3: {stderr}");
    for pass in [
        "pass 1 of 2: 2 guests, 1 exited 0, 1 did not",
        "pass 2 of 2: 2 guests",
    ] {
        assert!(stderr.contains(pass), "{pass}: {stderr}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(json["guests"].as_u64(), Some(4));
    let passes = json["passes"].as_array().expect("one entry per pass");
    assert_eq!(passes.len(), 2);
    let total = |v: &serde_json::Value| v["mounts"][0]["rpc"]["total"].as_u64().unwrap();
    assert_eq!(passes[0]["guests"].as_u64(), Some(2));
    assert_eq!(passes[1]["guests"].as_u64(), Some(2));
    assert_eq!(passes[0]["mounts"][0]["target"], "/data");
    assert!(total(&passes[0]) > 0);
    // Every RPC belongs to a pass except the mount's own set-up.
    let rpc = &json["mounts"][0]["rpc"];
    let setup = ["version", "attach"].map(|k| rpc[k].as_u64().unwrap_or(0));
    assert_eq!(
        total(&passes[0]) + total(&passes[1]) + setup[0] + setup[1],
        total(&json)
    );
    let wall = |v: &serde_json::Value| v["wall_ms"].as_u64().unwrap();
    assert!(wall(&passes[0]) + wall(&passes[1]) <= wall(&json));
}

fn batch_of_three(wasm: &Path, failing_status: u8) {
    let hello = || vec![Tree::file("hello.txt", "hello\n")];
    let dir = Tree::build(&[
        Tree::Dir("a", hello()),
        Tree::Dir("b", hello()),
        Tree::Dir("c d", hello()),
    ]);
    let commands = dir.path().join("commands");
    std::fs::write(
        &commands,
        "# three guests\nfileops /data/a\n\nfileops /data/b 3\nfileops '/data/c d'\n",
    )
    .unwrap();
    let stats = dir.path().join("stats.json");
    let out = wasm9p()
        .args(["batch", "--jobs", "2", "--mount"])
        .arg(format!(
            "type=9p,export={},target=/data,cache=loose",
            dir.path().display()
        ))
        .arg(format!("--stats={}", stats.display()))
        .arg("--module")
        .arg(wasm)
        .arg(&commands)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "one guest exited 3: {stderr}");
    assert!(
        stderr.contains(&format!("line 4: exit {failing_status} ")),
        "{stderr}"
    );
    assert!(
        stderr.contains("line 2: exit 0") && stderr.contains("line 5: exit 0"),
        "{stderr}"
    );
    assert!(
        stderr.contains("3 guests, 2 exited 0, 1 did not"),
        "{stderr}"
    );
    // Each guest's output comes out whole, never interleaved with another's.
    let blocks: Vec<&str> = stdout.split("args ").skip(1).collect();
    assert_eq!(blocks.len(), 3, "{stdout}");
    for block in blocks {
        assert_eq!(block.matches("read 6 bytes: hello").count(), 1, "{block}");
        assert_eq!(block.matches("rmdir again:").count(), 1, "{block}");
    }
    // argv[0] is the line's first word; '/data/c d' arrived as one word (the guest
    // read hello.txt in it).
    assert_eq!(stdout.matches("args 2 fileops env").count(), 2, "{stdout}");
    assert_eq!(stdout.matches("args 3 fileops env").count(), 1, "{stdout}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(json["guests"].as_u64(), Some(3));
    assert_eq!(
        json["mounts"].as_array().unwrap().len(),
        1,
        "one shared mount"
    );
}

#[test]
fn batch_with_unreadable_or_malformed_commands_is_one_line_and_exit_2() {
    let wasm = guest();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad");
    std::fs::write(&bad, "fileops /\nfileops 'unbalanced\n").unwrap();
    for (commands, needle) in [
        (dir.path().join("missing"), "bad COMMANDS"),
        (bad, "line 2: unbalanced"),
    ] {
        let out = wasm9p()
            .current_dir(dir.path())
            .args(["batch", "--module"])
            .arg(&wasm)
            .arg(&commands)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(needle) && stderr.lines().count() == 1,
            "{stderr}"
        );
    }
}

#[test]
fn poll_on_an_inherited_stdin_waits_for_input() {
    use std::io::{BufRead, BufReader, Write};
    let wasm = compile_c_guest(&wasm9p_tests::guest_source("pollin.c"));
    let dir = tempfile::tempdir().unwrap();
    let mut child = wasm9p()
        .current_dir(dir.path())
        .arg("run")
        .arg(&wasm)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "first poll: 0\n", "no input yet: the poll times out");
    stdin.write_all(b"hi\n").unwrap();
    stdin.flush().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert_eq!(rest, "second poll: 1 readable 1\nread 3: hi\n");
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_server_connection_cut_mid_run_gives_the_guest_eio_and_the_host_a_clean_exit() {
    use wasm9p_tests::fault_proxy::{Direction, Fault, FaultProxy, Schedule};
    let wasm = compile_c_guest(&wasm9p_tests::guest_source("export_tour.c"));
    let dir = Tree::build(&[Tree::Dir("src", vec![Tree::file("hello.txt", "hello\n")])]);
    let server = wasm9p_tests::TestServer::tcp(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    // The connection is cut at the 20th reply: in the middle of the guest's work.
    let proxy = rt.block_on(FaultProxy::start(
        &server.addr,
        Schedule {
            seed: 1,
            fault: Fault::Reset,
            direction: Direction::Replies,
            every: 1,
            spare: 20,
        },
    ));
    let started = std::time::Instant::now();
    let out = wasm9p()
        .args([
            "run",
            "--mount",
            &format!("type=9p,source={},target=/d,cache=none", proxy.addr),
            &wasm.display().to_string(),
            "/d",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(proxy.injected(), 1, "{stdout}{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    // The guest saw I/O errors from then on, and went on to its end.
    assert!(stdout.contains("I/O error"), "{stdout}");
    assert!(stdout.contains("list out:"), "{stdout}");
    // The host says why, in plain text, and ends with the guest's status.
    assert!(
        stderr.contains("9p session lost: connection closed by the server")
            && !stderr.contains('\x1b')
            && !stderr.contains("panicked"),
        "{stderr}"
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

#[test]
fn fsync_of_a_directory_reaches_the_server() {
    // wasi_calls.c fsyncs and fdatasyncs its directory once each, and no file: both
    // must go to the server as Tfsync of the directory, not be answered on the spot.
    let wasm = compile_c_guest(&wasm9p_tests::guest_source("wasi_calls.c"));
    let dir = Tree::build(&[]);
    let stats = tempfile::NamedTempFile::new().unwrap();
    let out = wasm9p()
        .args([
            "run",
            "--mount",
            &format!(
                "type=9p,export={},target=/data,cache=none",
                dir.path().display()
            ),
            &format!("--stats={}", stats.path().display()),
        ])
        .arg(&wasm)
        .arg("/data")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("fsync dir: 0\nfdatasync dir: 0\n"),
        "{stdout}"
    );
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(stats.path()).unwrap()).unwrap();
    assert_eq!(stats["mounts"][0]["rpc"]["fsync"], 2, "{stats}");
}

#[test]
fn batch_and_run_tell_a_wasi_0_3_component_and_run_it_on_9p() {
    // The conformance suite's `filesystem-io` (reads, writes and appends through
    // streams, its own checks inside), in the root its spec gives it.
    let suite = std::env::var_os("WASI_TESTSUITE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/wasi-testsuite")
        })
        .join("tests/rust/testsuite/wasm32-wasip3");
    let dir = Tree::build(&[
        Tree::file(
            "a.txt",
            &std::fs::read_to_string(suite.join("fs-tests.dir/a.txt")).unwrap(),
        ),
        Tree::file(
            "b.txt",
            &std::fs::read_to_string(suite.join("fs-tests.dir/b.txt")).unwrap(),
        ),
    ]);
    let mount = format!(
        "type=9p,export={},target=/,cache=loose",
        dir.path().display()
    );
    let component = suite.join("filesystem-io.wasm");
    let out = wasm9p()
        .args(["run", "--mount", &mount])
        .arg(&component)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let side = tempfile::tempdir().unwrap();
    let (commands, stats) = (side.path().join("commands"), side.path().join("stats.json"));
    std::fs::write(&commands, "io\nio\n").unwrap();
    let out = wasm9p()
        .args(["batch", "--jobs", "1", "--passes", "2", "--mount", &mount])
        .arg(format!("--stats={}", stats.display()))
        .arg("--module")
        .arg(&component)
        .arg(&commands)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("pass 2 of 2: 2 guests"), "{stderr}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(json["guests"].as_u64(), Some(4), "{json}");
    assert!(
        json["mounts"][0]["rpc"]["walk"].as_u64().unwrap() > 0,
        "{json}"
    );
    // Each guest cleaned up after itself, over 9p.
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a.txt", "b.txt"]);
}

#[test]
fn help_names_every_guest_kind_the_mount_keys_and_the_compiler_tools() {
    let text = |args: &[&str]| {
        let out = wasm9p().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let top = text(&["--help"]);
    assert!(
        top.contains("a preview1 module, a 0.2 or 0.3 component"),
        "{top}"
    );
    let run = text(&["help", "run"]);
    for key in [
        "aname=NAME",
        "instances=N",
        "call_timeout=SECONDS",
        "negtimeout=MS",
    ] {
        assert!(run.contains(key), "run --help lacks {key}: {run}");
    }
    // `wasm9p help cc` is our options for the tool, with the tool's own left to it.
    let cc = text(&["help", "cc"]);
    assert!(
        cc.starts_with("clang.wasm's `cc` as a host command"),
        "{cc}"
    );
    for option in [
        "--root DIR",
        "--root-source ADDR",
        "--toolchain DIR",
        "--daemon",
    ] {
        assert!(cc.contains(option), "help cc lacks {option}: {cc}");
    }
    assert!(text(&["help", "ar"]).contains("wasm9p ar [--root DIR]"));
    let unknown = wasm9p().args(["help", "nosuchtool"]).output().unwrap();
    assert_eq!(unknown.status.code(), Some(2));
}
