//! `wasm9p worker` on a real BuildGrid (see `farm`): actions run as guests with their
//! outputs, a clang.wasm compile sent by BuildGrid's own client gives the object
//! `wasm9p cc` makes (and fetches only what it reads), bad inputs fail their action
//! alone with a status that names the problem, cancelled and timed-out actions stop,
//! a killed worker's action completes on another, SIGTERM drains.

mod farm;

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

/// A worker of one slot whose guests get 64 MiB of memory and whose actions' outputs
/// 100,000 bytes.
fn limited_worker(farm: &Farm, pool: &str) -> Worker {
    Worker::start(
        farm,
        pool,
        &[
            "--jobs",
            "1",
            "--memory-limit",
            "64M",
            "--max-output",
            "100000",
        ],
    )
}

#[test]
fn the_memory_limit_is_known_by_the_engine_not_by_what_the_guest_prints() {
    const RESOURCE_EXHAUSTED: i32 = 8;
    let farm = Farm::get();
    let pool = "limits-typed";
    let _worker = limited_worker(farm, pool);
    let client = Client::new(farm);
    let root = Root::default().file("tool.wasm", guest(), true).make();
    client.upload(root.blobs.clone());
    let run = |args: &[&str]| {
        let action = client.action(root.digest, args, &[], pool, None);
        client.execute(action, |_| {})
    };
    // wasmtime's own words for a memory grown past a limit, printed by a guest that
    // is nowhere near it: the action completes with the guest's exit code.
    let words = "forcing trap when growing memory to 1 bytes; \
                 forcing a memory growth failure to be a trap";
    let said = run(&["tool.wasm", "say", words, "3"]);
    assert_eq!(code(&said), 0, "{}", message(&said));
    let result = said.result.as_ref().unwrap();
    assert_eq!(result.exit_code, 3);
    let stderr = client.blob(result.stderr_digest.as_ref().unwrap());
    assert!(String::from_utf8_lossy(&stderr).contains(words));
    // A guest past the limit after filling its stderr past what the worker keeps
    // (nothing it or the worker writes after that is kept): still RESOURCE_EXHAUSTED.
    let flooded = run(&["tool.wasm", "flood", "200000", "128"]);
    assert_eq!(code(&flooded), RESOURCE_EXHAUSTED, "{}", message(&flooded));
    assert!(
        message(&flooded).contains("--memory-limit of 67108864 bytes"),
        "{}",
        message(&flooded)
    );
}

#[test]
fn a_guest_past_the_memory_limit_fails_resource_exhausted_and_writes_past_the_output_bound_fail() {
    const RESOURCE_EXHAUSTED: i32 = 8;
    let farm = Farm::get();
    let pool = "limits";
    let _worker = limited_worker(farm, pool);
    let client = Client::new(farm);
    let root = Root::default().file("tool.wasm", guest(), true).make();
    client.upload(root.blobs.clone());
    let run = |args: &[&str], outputs: &[&str]| {
        let action = client.action(root.digest, args, outputs, pool, None);
        client.execute(action, |_| {})
    };
    let over = run(&["tool.wasm", "alloc", "128"], &[]);
    assert_eq!(code(&over), RESOURCE_EXHAUSTED, "{}", message(&over));
    assert!(
        message(&over).contains("--memory-limit"),
        "{}",
        message(&over)
    );
    // Under it, the next guest runs.
    let under = run(&["tool.wasm", "alloc", "16"], &[]);
    assert_eq!(code(&under), 0, "{}", message(&under));
    assert_eq!(stdout_of(&client, &under), "allocated\n");
    // A write past the outputs' bound is the guest's ENOSPC: it fails as a program.
    let big = "x".repeat(150_000);
    let full = run(&["tool.wasm", "write", "out.txt", &big], &["out.txt"]);
    assert_eq!(code(&full), 0, "{}", message(&full));
    let result = full.result.as_ref().unwrap();
    assert_eq!(result.exit_code, 1);
    let stderr = client.blob(result.stderr_digest.as_ref().unwrap());
    assert!(
        String::from_utf8_lossy(&stderr).contains("No space left on device"),
        "{}",
        String::from_utf8_lossy(&stderr)
    );
}

/// One `--stats` number of an action.
fn stat(action: &serde_json::Value, name: &str) -> u64 {
    action[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} in {action}"))
}

/// `worker` killed and started again in `pool` with `extra` on its directory, its
/// content store emptied (its access profiles kept), its compiled code in `modules`.
fn cold_again(worker: Worker, pool: &str, extra: &[&str], modules: &Path) -> Worker {
    let dir = worker.kill();
    std::fs::remove_dir_all(dir.path().join("cas")).unwrap();
    Worker::start_with(Farm::get(), pool, extra, dir, modules)
}

#[test]
fn a_cold_worker_prefetches_what_its_profile_lists_and_a_stale_profile_changes_no_result() {
    let farm = Farm::get();
    let pool = "profiles";
    let client = Client::new(farm);
    let cat = |root: Root, files: &[&str]| {
        let mut args = vec!["bin/tool.wasm", "cat"];
        args.extend(files);
        let response = run(&client, root.make(), &args, &[], pool, None);
        assert_eq!(code(&response), 0, "{}", message(&response));
        stdout_of(&client, &response)
    };
    let tool = || Root::default().file("bin/tool.wasm", guest(), true);

    // The first action of its kind: no profile; it records one. Its program is new
    // to the worker's module cache: fetched, and compiled.
    let modules = tempfile::tempdir().unwrap();
    let worker = Worker::start_with(
        farm,
        pool,
        &["--jobs", "1"],
        tempfile::tempdir().unwrap(),
        modules.path(),
    );
    let first = tool()
        .file("data/a", "profile a\n", false)
        .file("data/b", "profile b\n", false)
        .file("data/c", "profile c\n", false)
        .file("data/x", "profile x\n", false);
    let out = cat(first, &["data/a", "data/b", "data/c", "data/x"]);
    assert_eq!(out, "profile a\nprofile b\nprofile c\nprofile x\n");
    let took = &worker.actions()[0];
    assert_eq!(stat(took, "profile_paths"), 0, "{took}");
    assert_eq!(stat(took, "prefetched_blobs"), 0, "{took}");
    assert_eq!(
        stat(took, "blobs_fetched"),
        5,
        "the program and 4 files: {took}"
    );
    assert_eq!(took["program_by_digest"], false, "{took}");

    // The same worker's profiles and compiled code, none of its blobs: a cold worker.
    let worker = cold_again(worker, pool, &["--jobs", "1"], modules.path());
    // An action of the same kind (same program, same mode, same top-level names) on
    // another tree: the profile's data/a is gone, data/b has other bytes, data/x is
    // there but not read, data/d is read but not in the profile.
    let second = || {
        tool()
            .file("data/b", "profile b, changed\n", false)
            .file("data/c", "profile c\n", false)
            .file("data/x", "profile x\n", false)
            .file("data/d", "profile d\n", false)
    };
    let out = cat(second(), &["data/b", "data/c", "data/d"]);
    assert_eq!(out, "profile b, changed\nprofile c\nprofile d\n");
    let took = &worker.actions()[0];
    assert_eq!(stat(took, "profile_paths"), 4, "{took}");
    // b (as it is now), c and x came in before the guest started; the guest fetched
    // only data/d itself. The program was not fetched: its code is known by its
    // digest.
    assert_eq!(stat(took, "prefetched_blobs"), 3, "{took}");
    assert_eq!(stat(took, "blobs_fetched"), 1, "{took}");
    assert_eq!(stat(took, "files_read"), 3, "{took}");
    assert_eq!(took["program_by_digest"], true, "{took}");
    let program = Digest::of(&guest()).hex();
    let blob = worker
        .dir
        .path()
        .join("cas/blobs")
        .join(&program[..2])
        .join(&program);
    assert!(!blob.exists(), "the program's bytes were fetched");

    // The next one has the profile the second recorded: b, c, d; all in the store.
    let out = cat(second(), &["data/d", "data/c"]);
    assert_eq!(out, "profile d\nprofile c\n");
    let took = &worker.actions()[1];
    assert_eq!(stat(took, "profile_paths"), 3, "{took}");
    assert_eq!(stat(took, "prefetched_blobs"), 0, "{took}");
    assert_eq!(stat(took, "blobs_fetched"), 0, "{took}");

    // --no-prefetch: cold again, every file fetched as it is read.
    let worker = cold_again(
        worker,
        pool,
        &["--jobs", "1", "--no-prefetch"],
        modules.path(),
    );
    let out = cat(second(), &["data/b", "data/c", "data/d"]);
    assert_eq!(out, "profile b, changed\nprofile c\nprofile d\n");
    let took = &worker.actions()[0];
    assert_eq!(stat(took, "profile_paths"), 0, "{took}");
    assert_eq!(stat(took, "prefetched_blobs"), 0, "{took}");
    assert_eq!(stat(took, "blobs_fetched"), 3, "{took}");

    // Its compiled code gone, a cold worker fetches the program and compiles it.
    let no_modules = tempfile::tempdir().unwrap();
    let worker = cold_again(worker, pool, &["--jobs", "1"], no_modules.path());
    let out = cat(second(), &["data/c"]);
    assert_eq!(out, "profile c\n");
    let took = &worker.actions()[0];
    assert_eq!(took["program_by_digest"], false, "{took}");
    assert_eq!(stat(took, "blobs_fetched"), 1, "the program: {took}");
}

/// A TCP relay to `upstream` (`grpc://HOST:PORT`) that holds each chunk the server
/// sends back for `delay`: a slow CAS. Its address, as a `grpc://` URL.
fn slow_relay(upstream: &str, delay: Duration) -> String {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let upstream = upstream.trim_start_matches("grpc://").to_owned();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("grpc://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let (Ok(client), Ok(server)) = (client, TcpStream::connect(&upstream)) else {
                continue;
            };
            let pipe = |mut from: TcpStream, mut to: TcpStream, delay: Duration| {
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 1 << 16];
                    while let Ok(n @ 1..) = from.read(&mut buf) {
                        std::thread::sleep(delay);
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Both);
                })
            };
            pipe(
                client.try_clone().unwrap(),
                server.try_clone().unwrap(),
                Duration::ZERO,
            );
            pipe(server, client, delay);
        }
    });
    addr
}

#[test]
fn an_action_s_timeout_does_not_count_its_guest_s_waits_for_a_slow_cas() {
    let farm = Farm::get();
    let pool = "slow-cas";
    // Every answer of the CAS comes 400 ms late; no prefetch, so that the guest fetches
    // each file as it reads it.
    let cas = slow_relay(&farm.address, Duration::from_millis(400));
    let worker = Worker::start(farm, pool, &["--jobs", "1", "--cas", &cas, "--no-prefetch"]);
    let client = Client::new(farm);
    let mut root = Root::default().file("tool.wasm", guest(), true);
    let files: Vec<String> = (0..4).map(|i| format!("data/f{i}")).collect();
    for (i, f) in files.iter().enumerate() {
        root = root.file(f, format!("slow file {i}\n"), false);
    }
    let mut args = vec!["tool.wasm", "cat"];
    args.extend(files.iter().map(String::as_str));
    // Four reads of at least 400 ms each: 1.6 s of waits, past a timeout of 1 s that
    // the guest's own work is far within.
    let response = run(
        &client,
        root.make(),
        &args,
        &[],
        pool,
        Some(Duration::from_secs(1)),
    );
    assert_eq!(code(&response), 0, "{}", message(&response));
    assert_eq!(
        stdout_of(&client, &response),
        "slow file 0\nslow file 1\nslow file 2\nslow file 3\n"
    );
    let took = &worker.actions()[0];
    assert!(stat(took, "run_ms") >= 1600, "the waits were real: {took}");
    // The four files, and the program unless its code was kept by its digest.
    let program = u64::from(took["program_by_digest"] == false);
    assert_eq!(stat(took, "blobs_fetched"), 4 + program, "{took}");
    // Its metadata says so: the waits are in the input fetch.
    let m = response.result.unwrap().execution_metadata.unwrap();
    let secs = |t: Option<wasm9p_remote::apis::protobuf::Timestamp>| {
        let t = t.unwrap();
        t.seconds as f64 + t.nanos as f64 / 1e9
    };
    let fetch = secs(m.input_fetch_completed_timestamp) - secs(m.input_fetch_start_timestamp);
    assert!(fetch >= 1.6, "input fetch {fetch} s: {m:?}");
}

/// A file one action read costs the next action that reads it (same path, same bytes,
/// another input root) no 9P read and no store read: its pages are in the page cache
/// of the worker's slot (one slot here, `--jobs 1`). A file with other bytes, and a
/// file an action wrote over, are
/// never answered from another's pages.
#[test]
fn a_file_an_earlier_action_read_is_read_from_the_shared_page_cache() {
    let farm = Farm::get();
    let pool = "shared-pages";
    let client = Client::new(farm);
    let worker = Worker::start(farm, pool, &["--jobs", "1"]);
    let header: String = (0..3000)
        .map(|i| format!("#define LINE_{i} {i}\n"))
        .collect();
    // Each root is another action (its own marker file), the header the same.
    let root = |n: usize, header: &str| {
        Root::default()
            .file("bin/tool.wasm", guest(), true)
            .file("inc/shared.h", header.to_owned(), false)
            .file(&format!("marker/{n}"), n.to_string(), false)
    };
    let act = |n: usize, header: &str, args: &[&str]| {
        let mut argv = vec!["bin/tool.wasm"];
        argv.extend(args);
        let response = run(&client, root(n, header).make(), &argv, &[], pool, None);
        assert_eq!(code(&response), 0, "{}", message(&response));
        let out = stdout_of(&client, &response);
        (out, worker.actions()[n].clone())
    };

    let (out, first) = act(0, &header, &["cat", "inc/shared.h"]);
    assert_eq!(out, header);
    assert!(stat(&first, "read_9p") > 0, "{first}");
    assert_eq!(stat(&first, "shared_page_hits"), 0, "{first}");

    let (out, second) = act(1, &header, &["cat", "inc/shared.h"]);
    assert_eq!(out, header);
    assert!(stat(&second, "shared_page_hits") > 0, "{second}");
    // Nor a walk or a Tgetattr for what the first learnt of inc/ and the header:
    // the names and attributes of the tree are shared too.
    assert!(stat(&second, "shared_metadata_hits") > 0, "{second}");
    assert!(
        stat(&second, "rpc_9p") < stat(&first, "rpc_9p"),
        "{first}\n{second}"
    );
    assert_eq!(stat(&second, "read_9p"), 0, "{second}");
    assert_eq!(stat(&second, "files_read"), 0, "{second}");
    assert_eq!(stat(&second, "bytes_of_files_read"), 0, "{second}");
    // Nothing looked up in the store but the program, if the first action fetched it
    // (its code was not kept yet); else it is loaded by its digest.
    let program = u64::from(second["program_by_digest"] == false);
    assert_eq!(stat(&second, "store_hits"), program, "{second}");
    assert_eq!(stat(&second, "blobs_fetched"), 0, "{second}");

    // Other bytes at the same path: read from the server.
    let other = header.replace("LINE_7 7", "LINE_7 seven");
    let (out, third) = act(2, &other, &["cat", "inc/shared.h"]);
    assert_eq!(out, other);
    assert_eq!(stat(&third, "files_read"), 1, "{third}");

    // An action writes over the header (its copy, in its own layer); the next one
    // reads the tree's bytes.
    let (_, fourth) = act(3, &header, &["write", "inc/shared.h", "written over"]);
    assert_eq!(stat(&fourth, "status"), 0, "{fourth}");
    let (out, fifth) = act(4, &header, &["cat", "inc/shared.h"]);
    assert_eq!(out, header);
    assert!(stat(&fifth, "shared_page_hits") > 0, "{fifth}");
    assert_eq!(stat(&fifth, "read_9p"), 0, "{fifth}");

    // A name one action found missing in inc/ ...
    let stdout_and_exit = |n: usize, args: &[&str]| {
        let mut argv = vec!["bin/tool.wasm"];
        argv.extend(args);
        let response = run(&client, root(n, &header).make(), &argv, &[], pool, None);
        assert_eq!(code(&response), 0, "{}", message(&response));
        let exit = response.result.as_ref().unwrap().exit_code;
        (
            stdout_of(&client, &response),
            exit,
            worker.actions()[n].clone(),
        )
    };
    let (_, exit, _) = stdout_and_exit(5, &["cat", "inc/absent.h"]);
    assert_eq!(exit, 1);
    // ... the next action, told it is missing by what the first learnt, makes it and
    // reads it back: its own change, not the shared answer.
    let (out, exit, made) = stdout_and_exit(6, &["make", "inc/absent.h", "made here"]);
    assert_eq!((out.as_str(), exit), ("made here", 0), "{made}");
    assert!(stat(&made, "shared_metadata_hits") > 0, "{made}");
    // And the one after does not see it: it was that action's.
    let (_, exit, _) = stdout_and_exit(7, &["cat", "inc/absent.h"]);
    assert_eq!(exit, 1);
}
