//! `wasm9p worker` on a real BuildGrid (see `farm`): actions run as guests with their
//! outputs, a clang.wasm compile sent by BuildGrid's own client gives the object
//! `wasm9p cc` makes (and fetches only what it reads), bad inputs fail their action
//! alone with a status that names the problem, cancelled and timed-out actions stop,
//! a killed worker's action completes on another, SIGTERM drains.

#[path = "../farm/mod.rs"]
mod farm;
mod limits;
mod profiles;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use farm::{guest, stdout_of, Client, Farm, Root, Worker};
use wasm9p_remote::apis::v2;
use wasm9p_remote::Digest;

/// The code of a response's status (0: OK).
fn code(response: &v2::ExecuteResponse) -> i32 {
    response.status.as_ref().map_or(0, |s| s.code)
}

fn message(response: &v2::ExecuteResponse) -> String {
    response
        .status
        .as_ref()
        .map(|s| s.message.clone())
        .unwrap_or_default()
}

/// The result's `execution_metadata`, as BuildGrid passed it on: the worker's name and
/// every phase's timestamps, in order (the queued one is the scheduler's).
fn assert_phases_in_order(result: &v2::ActionResult) {
    let m = result
        .execution_metadata
        .as_ref()
        .expect("execution metadata");
    assert!(!m.worker.is_empty(), "{m:?}");
    let phases = [
        ("worker_start", &m.worker_start_timestamp),
        ("input_fetch_start", &m.input_fetch_start_timestamp),
        ("input_fetch_completed", &m.input_fetch_completed_timestamp),
        ("execution_start", &m.execution_start_timestamp),
        ("execution_completed", &m.execution_completed_timestamp),
        ("output_upload_start", &m.output_upload_start_timestamp),
        (
            "output_upload_completed",
            &m.output_upload_completed_timestamp,
        ),
        ("worker_completed", &m.worker_completed_timestamp),
    ];
    // BuildGrid fills the queued time (and replaces the worker's start and completion
    // with its lease's, which enclose the rest).
    assert!(m.queued_timestamp.is_some(), "{m:?}");
    let mut last = (String::from("queued"), m.queued_timestamp);
    for (name, at) in phases {
        let at = (*at).unwrap_or_else(|| panic!("no {name} in {m:?}"));
        let nanos = |t: &wasm9p_remote::apis::protobuf::Timestamp| {
            t.seconds as i128 * 1_000_000_000 + t.nanos as i128
        };
        if let Some(before) = &last.1 {
            assert!(
                nanos(before) <= nanos(&at),
                "{} after {name}: {m:?}",
                last.0
            );
        }
        last = (name.to_owned(), Some(at));
    }
    let executed = m
        .virtual_execution_duration
        .as_ref()
        .expect("virtual_execution_duration");
    assert!(executed.seconds >= 0 && executed.nanos >= 0, "{m:?}");
}

/// Runs `args` on `root` in `pool`: the response.
fn run(
    client: &Client,
    made: farm::Made,
    args: &[&str],
    outputs: &[&str],
    pool: &str,
    timeout: Option<Duration>,
) -> v2::ExecuteResponse {
    let root = made.digest;
    client.upload(made.blobs);
    let action = client.action(root, args, outputs, pool, timeout);
    client.execute(action, |_| {})
}

#[test]
fn an_action_runs_as_a_guest_with_its_outputs_streams_and_exit_code() {
    let farm = Farm::get();
    let pool = "outputs";
    let _worker = Worker::start(farm, pool, &["--jobs", "1"]);
    let client = Client::new(farm);
    let root = || {
        Root::default().file("bin/tool.wasm", guest(), true).file(
            "data/in.txt",
            "from the input root\n",
            false,
        )
    };
    // A file written where an output was asked for, its parent made by the worker.
    let response = run(
        &client,
        root().make(),
        &["bin/tool.wasm", "write", "out/deep/x.txt", "written"],
        &["out/deep/x.txt"],
        pool,
        None,
    );
    assert_eq!(code(&response), 0, "{}", message(&response));
    let result = response.result.clone().unwrap();
    assert_eq!(result.exit_code, 0);
    assert_eq!(stdout_of(&client, &response), "wrote out/deep/x.txt\n");
    assert_phases_in_order(&result);
    let file = &result.output_files[0];
    assert_eq!(file.path, "out/deep/x.txt");
    assert_eq!(&client.blob(file.digest.as_ref().unwrap())[..], b"written");
    // Inputs read; a failing guest's exit code and stderr come back as they are.
    let response = run(
        &client,
        root().make(),
        &["bin/tool.wasm", "read", "data/in.txt"],
        &[],
        pool,
        None,
    );
    assert_eq!(stdout_of(&client, &response), "from the input root\n");
    let response = run(
        &client,
        root().make(),
        &["bin/tool.wasm", "exit", "7"],
        &[],
        pool,
        None,
    );
    assert_eq!(code(&response), 0, "a failing guest is no worker error");
    let result = response.result.unwrap();
    assert_eq!(result.exit_code, 7);
    let stderr = client.blob(result.stderr_digest.as_ref().unwrap());
    assert_eq!(&stderr[..], b"exiting 7\n");
    // An output directory comes back as a Tree.
    let response = run(
        &client,
        root().make(),
        &["bin/tool.wasm", "write", "gen/sub/y.txt", "y"],
        &["gen"],
        pool,
        None,
    );
    let dir = &response.result.unwrap().output_directories[0];
    assert_eq!(dir.path, "gen");
    use prost::Message;
    let tree = v2::Tree::decode(client.blob(dir.tree_digest.as_ref().unwrap())).unwrap();
    let sub = &tree.root.unwrap().directories[0];
    assert_eq!(sub.name, "sub");
    assert_eq!(tree.children[0].files[0].name, "y.txt");
}

#[test]
fn bad_inputs_fail_their_action_alone_with_a_status_that_names_the_problem() {
    const INVALID_ARGUMENT: i32 = 3;
    const FAILED_PRECONDITION: i32 = 9;
    let farm = Farm::get();
    let pool = "bad-inputs";
    let worker = Worker::start(farm, pool, &["--jobs", "1"]);
    let client = Client::new(farm);
    let good = || Root::default().file("tool.wasm", guest(), true);
    let named = |name: &'static str| {
        good().make_with(move |path, dir| {
            if path.is_empty() {
                dir.files.push(v2::FileNode {
                    name: name.into(),
                    digest: Some(Digest::of(b"x").to_proto()),
                    ..Default::default()
                });
            }
        })
    };
    /// What is wrong, the input root, the arguments, the outputs, the status, what
    /// its message says.
    type Case = (
        &'static str,
        farm::Made,
        Vec<&'static str>,
        Vec<&'static str>,
        i32,
        &'static str,
    );
    let mut cases: Vec<Case> = Vec::new();
    for (name, why) in [
        ("..", "\"..\""),
        (".", "\".\""),
        ("", "\"\""),
        ("a/b", "\"a/b\""),
    ] {
        cases.push((
            "a bad name",
            named(name),
            vec!["tool.wasm", "exit", "0"],
            vec![],
            INVALID_ARGUMENT,
            why,
        ));
    }
    cases.push((
        "a name twice",
        good().make_with(|path, dir| {
            if path.is_empty() {
                let again = dir.files[0].clone();
                dir.files.push(again);
            }
        }),
        vec!["tool.wasm", "exit", "0"],
        vec![],
        INVALID_ARGUMENT,
        "twice",
    ));
    cases.push((
        "an escaping symlink",
        good().symlink("etc", "../../etc").make(),
        vec!["tool.wasm", "exit", "0"],
        vec![],
        INVALID_ARGUMENT,
        "leaves the input root",
    ));
    cases.push((
        "an output outside the root",
        good().make(),
        vec!["tool.wasm", "exit", "0"],
        vec!["../escape.txt"],
        INVALID_ARGUMENT,
        "leaves the input root",
    ));
    cases.push((
        "no arguments[0] in the root",
        good().make(),
        vec!["missing.wasm"],
        vec![],
        INVALID_ARGUMENT,
        "not a file of the input root",
    ));
    cases.push((
        "arguments[0] not wasm",
        good().file("script.sh", "#!/bin/sh\n", true).make(),
        vec!["script.sh"],
        vec![],
        INVALID_ARGUMENT,
        "not a wasm module",
    ));
    for (what, made, args, outputs, want, says) in cases {
        let response = run(&client, made, &args, &outputs, pool, None);
        assert_eq!(code(&response), want, "{what}: {}", message(&response));
        assert!(
            message(&response).contains(says),
            "{what}: {}",
            message(&response)
        );
    }
    // A blob the CAS lacks, met when the guest reads it (inputs are fetched lazily):
    // the action fails for it, whatever the guest made of its EIO. (A blob whose
    // bytes are not its digest's, which a CAS that checks uploads cannot be made to
    // hold, is refused the same way: `wasm9p-remote`'s store tests.)
    let never: Vec<u8> = format!("never uploaded {:?}", Instant::now()).into_bytes();
    let missing = good().file("data.bin", never.clone(), false).make();
    let without: Vec<_> = missing
        .blobs
        .iter()
        .filter(|(d, _)| *d != Digest::of(&never))
        .cloned()
        .collect();
    client.upload(without);
    let action = client.action(
        missing.digest,
        &["tool.wasm", "read", "data.bin"],
        &[],
        pool,
        None,
    );
    let response = client.execute(action, |_| {});
    assert_eq!(
        code(&response),
        FAILED_PRECONDITION,
        "{}",
        message(&response)
    );
    assert!(
        message(&response).contains("\"data.bin\"")
            && message(&response).contains("not in the CAS"),
        "{}",
        message(&response)
    );
    // The worker goes on: the next action runs.
    let response = run(
        &client,
        good().make(),
        &["tool.wasm", "exit", "0"],
        &[],
        pool,
        None,
    );
    assert_eq!(code(&response), 0, "{}", message(&response));
    assert!(
        worker.log().contains("code 3"),
        "the failures are in the log: {}",
        worker.log()
    );
}

#[test]
fn a_cancelled_or_timed_out_action_stops_its_guest_and_the_next_one_runs() {
    const DEADLINE_EXCEEDED: i32 = 4;
    let farm = Farm::get();
    let pool = "cancel";
    let worker = Worker::start(farm, pool, &["--jobs", "1"]);
    let client = Client::new(farm);
    let root = Root::default().file("tool.wasm", guest(), true).make();
    client.upload(root.blobs.clone());
    // Past its timeout: a guest computing without a WASI call, and one asleep in one
    // long WASI call (stopped in its sleep).
    for argv in [&["tool.wasm", "spin"][..], &["tool.wasm", "sleep", "60"]] {
        let action = client.action(root.digest, argv, &[], pool, Some(Duration::from_secs(2)));
        let started = Instant::now();
        let response = client.execute(action, |_| {});
        assert_eq!(
            code(&response),
            DEADLINE_EXCEEDED,
            "{argv:?}: {}",
            message(&response)
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{argv:?}: {:?}",
            started.elapsed()
        );
    }
    // Cancelled by the client while it spins: the guest is stopped.
    let action = client.action(
        root.digest,
        &["tool.wasm", "spin"],
        &["cancelled"],
        pool,
        None,
    );
    let name = std::sync::Mutex::new(String::new());
    std::thread::scope(|s| {
        let waiting = s.spawn(|| client.execute(action, |n| *name.lock().unwrap() = n.to_owned()));
        worker.wait_until_running();
        std::thread::sleep(Duration::from_secs(1)); // it spins
        let cancelled_at = Instant::now();
        client.cancel(&name.lock().unwrap());
        let response = waiting.join().unwrap();
        assert_ne!(code(&response), 0, "a cancelled action is no success");
        worker.wait_for_log("taken back", Duration::from_secs(30));
        // The guest stopped within about a second of the scheduler taking it back.
        let deadline = Instant::now() + Duration::from_secs(10);
        while worker.actions().len() < 2 {
            assert!(
                Instant::now() < deadline,
                "the guest still runs: {}",
                worker.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let took = cancelled_at.elapsed();
        assert!(took < Duration::from_secs(5), "{took:?}");
    });
    // And the worker runs the next one.
    let action = client.action(root.digest, &["tool.wasm", "exit", "0"], &[], pool, None);
    assert_eq!(code(&client.execute(action, |_| {})), 0);
}

#[test]
fn a_killed_worker_s_action_completes_on_another_and_sigterm_drains() {
    let farm = Farm::get();
    let pool = "kill";
    let first = Worker::start(farm, pool, &["--jobs", "1"]);
    let client = Client::new(farm);
    let root = Root::default().file("tool.wasm", guest(), true).make();
    client.upload(root.blobs.clone());
    let action = client.action(
        root.digest,
        &["tool.wasm", "sleep", "3"],
        &["done.txt"],
        pool,
        None,
    );
    let client = &client;
    std::thread::scope(|s| {
        let waiting = s.spawn(move || client.execute(action, |_| {}));
        // The first worker takes it; it is killed while the guest sleeps.
        first.wait_until_running();
        drop(first.kill());
        let second = Worker::start(farm, pool, &["--jobs", "1"]);
        let response = waiting.join().unwrap();
        assert_eq!(code(&response), 0, "{}", message(&response));
        assert_eq!(stdout_of(client, &response), "slept\n");
        assert_eq!(second.actions().len(), 1, "the other worker ran it");
        // SIGTERM while an action runs: it finishes and is reported, then exit 0.
        let action = client.action(
            root.digest,
            &["tool.wasm", "sleep", "2"],
            &["drained"],
            pool,
            None,
        );
        let waiting = s.spawn(move || client.execute(action, |_| {}));
        second.wait_until_running();
        let status = second.terminate(Duration::from_secs(60));
        assert_eq!(status.code(), Some(0));
        let response = waiting.join().unwrap();
        assert_eq!(code(&response), 0, "{}", message(&response));
        assert_eq!(stdout_of(client, &response), "slept\n");
    });
}

/// The clang.wasm toolchain as `scripts/fetch-clang-wasm` fetched it.
fn toolchain() -> PathBuf {
    wasm9p_tests::clang_wasm()
        .module
        .parent()
        .unwrap()
        .to_owned()
}

#[test]
fn a_clang_compile_on_the_farm_makes_the_object_wasm9p_cc_makes_and_fetches_only_what_it_reads() {
    let farm = Farm::get();
    let pool = "clang";
    let worker = Worker::start(farm, pool, &["--jobs", "1"]);
    // The input root as a build sends it: clang.wasm, its sysroot at usr/, the source.
    let root = tempfile::tempdir().unwrap();
    let r = root.path().join("root");
    std::fs::create_dir_all(r.join("bin")).unwrap();
    std::fs::create_dir_all(r.join("src")).unwrap();
    std::fs::hard_link(toolchain().join("llvm.core.wasm"), r.join("bin/clang"))
        .or_else(|_| {
            std::fs::copy(toolchain().join("llvm.core.wasm"), r.join("bin/clang")).map(drop)
        })
        .unwrap();
    wasm9p_tests::copy_tree(&toolchain().join("sysroot/usr"), &r.join("usr"));
    let source = "#include <stdio.h>\n#include <string.h>\n\
                  int shout(const char *s) { return printf(\"%s!\\n\", s) + (int)strlen(s); }\n";
    std::fs::write(r.join("src/a.c"), source).unwrap();
    let compile = |out: &str| {
        let output = farm.bgd_execute(
            root.path(),
            &[
                "-p",
                "OSFamily",
                "wasi",
                "-p",
                "ISA",
                "wasm32",
                "-p",
                "pool",
                pool,
                "--output-file",
                "out/a.o",
                "--output-directory",
                out,
                "root",
                "--",
                "bin/clang",
                "-O2",
                "-c",
                "src/a.c",
                "-o",
                "out/a.o",
            ],
        );
        assert!(
            output.status.success(),
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::read(root.path().join(out).join("out/a.o")).unwrap()
    };
    let object = compile("got1");
    // What `wasm9p cc` makes of the same file.
    let cc = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(cc.path().join("src")).unwrap();
    std::fs::write(cc.path().join("src/a.c"), source).unwrap();
    let made = std::process::Command::new(farm::BIN)
        .current_dir(cc.path())
        .env("WASM9P_DAEMON", "off")
        .env("WASM9P_TOOLCHAIN", toolchain())
        .env("WASM9P_CACHE_DIR", farm::module_cache())
        .args(["cc", "-O2", "-c", "src/a.c", "-o", "a.o"])
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    assert!(
        object == std::fs::read(cc.path().join("a.o")).unwrap(),
        "the objects differ"
    );
    // Lazily: the bytes fetched are the files the guest read (and the compiler), not
    // the tree's.
    let first = &worker.actions()[0];
    let fetched = first["bytes_fetched"].as_u64().unwrap();
    let read = first["bytes_of_files_read"].as_u64().unwrap();
    let clang = std::fs::metadata(toolchain().join("llvm.core.wasm"))
        .unwrap()
        .len();
    let tree = first["input_root_bytes"].as_u64().unwrap();
    assert!(
        fetched as f64 <= 1.1 * (read + clang) as f64,
        "fetched {fetched} bytes for {read} read and a {clang}-byte compiler: {first}"
    );
    assert!(
        read < (tree - clang) / 100,
        "{read} of the sysroot's {} bytes",
        tree - clang
    );
    // Again, the action cache skipped: nothing fetched at all.
    assert!(compile("got2") == object);
    let second = &worker.actions()[1];
    assert_eq!(second["blobs_fetched"], 0, "{second}");
    // Nor read from the store: clang.wasm is loaded by its digest (its code compiled
    // by the first action at the latest), its files' pages are in the slot's cache.
    assert_eq!(second["program_by_digest"], true, "{second}");
    assert_eq!(second["store_hits"], 0, "{second}");
    // Its input root's Directory messages too: known from the first.
    assert!(first["directories_read"].as_u64().unwrap() > 10, "{first}");
    assert_eq!(second["directories_read"], 0, "{second}");
}
