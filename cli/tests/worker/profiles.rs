//! What a worker reads ahead and shares: access profiles, a slow CAS, the shared page
//! cache.

use super::*;

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
