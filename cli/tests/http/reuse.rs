//! `--reuse N`: an instance serves up to N requests one after the other, and only
//! after a request that ended cleanly; the default stays a fresh instance a request.
//! Each guest counts the requests its instance served (`/count`), which is what a
//! reused instance keeps of the requests before it.

use std::time::{Duration, Instant};

use super::{limits, p3, sum, Server};

/// The count `/count` answers: requests this instance has served, this one included.
fn count(server: &Server) -> u64 {
    let response = server.get("/count");
    assert_eq!(response.status, 200, "{}", response.text());
    response.text().trim().parse().unwrap()
}

#[test]
fn without_reuse_every_request_gets_a_fresh_instance_and_with_it_one_serves_n() {
    let fresh = Server::start(&limits(), &["--no-mounts"]);
    let counts: Vec<u64> = (0..4).map(|_| count(&fresh)).collect();
    assert_eq!(
        counts,
        [1, 1, 1, 1],
        "a fresh instance a request by default"
    );
    drop(fresh);

    let work = tempfile::tempdir().unwrap();
    let stats = work.path().join("stats.json");
    let server = Server::start(
        &limits(),
        &[
            "--no-mounts",
            "--reuse",
            "3",
            &format!("--stats={}", stats.display()),
        ],
    );
    let counts: Vec<u64> = (0..7).map(|_| count(&server)).collect();
    assert_eq!(
        counts,
        [1, 2, 3, 1, 2, 3, 1],
        "an instance serves 3, then a fresh one"
    );
    let (status, stderr) = server.stop();
    assert!(status.success(), "{stderr}");
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(stats["http"]["instances"], 3, "{stats}");
    assert_eq!(stats["http"]["reused"], 4, "{stats}");
    assert_eq!(sum(&stats["http"], "responses"), 7);
}

#[test]
fn an_instance_that_trapped_timed_out_overran_its_length_or_left_a_file_open_is_not_reused() {
    let site = tempfile::tempdir().unwrap();
    std::fs::write(site.path().join("page"), "a page\n").unwrap();
    let mount = format!("type=9p,export={},target=/,ro", site.path().display());
    let server = Server::start(
        &limits(),
        &["--mount", &mount, "--reuse", "100", "--timeout", "2s"],
    );
    assert_eq!(
        (count(&server), count(&server)),
        (1, 2),
        "kept between requests"
    );

    for (path, status) in [("/trap", 500), ("/loop", 504)] {
        let response = server.get(path);
        assert_eq!(response.status, status, "{path}: {}", response.text());
        assert_eq!(count(&server), 1, "a fresh instance after {path}");
        assert_eq!(count(&server), 2, "and it is kept");
    }

    // 5 bytes said, 10 written: the client gets the 5 its head promised (hyper sends
    // no more), and the next request gets a fresh instance.
    let response = server.get("/overlong");
    assert_eq!((response.status, response.text()), (200, "01234".into()));
    assert_eq!(count(&server), 1, "a fresh instance after /overlong");

    let response = server.get("/open?page");
    assert_eq!(
        (response.status, response.text()),
        (200, "left open\n".into())
    );
    assert_eq!(count(&server), 1, "a fresh instance after a file left open");

    // A body neither finished nor dropped: the response still ends, at once (its
    // writer goes with the instance), and the instance is not kept.
    let started = Instant::now();
    let out = std::process::Command::new("curl")
        .args(["-s", "--max-time", "20", "-o", "-"])
        .arg(server.url("/unfinished"))
        .output()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the response ended"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "x");
    assert_eq!(count(&server), 1, "a fresh instance after /unfinished");
    let (status, stderr) = server.stop();
    assert!(status.success(), "{stderr}");
}

#[test]
fn a_guest_that_traps_or_stops_midway_through_a_spliced_file_cuts_the_body_and_is_not_reused() {
    let site = tempfile::tempdir().unwrap();
    let file: Vec<u8> = (0..256u32 << 10).map(|i| (i % 251) as u8).collect();
    std::fs::write(site.path().join("file"), &file).unwrap();
    let mount = format!(
        "type=9p,export={},target=/,cache=loose,ro",
        site.path().display()
    );
    let work = tempfile::tempdir().unwrap();
    let stats = work.path().join("stats.json");
    let server = Server::start(
        &limits(),
        &[
            "--mount",
            &mount,
            "--reuse",
            "100",
            &format!("--stats={}", stats.display()),
        ],
    );
    for round in 0..3 {
        for path in ["/splice-trap?file", "/splice-stop?file"] {
            assert_eq!(
                count(&server),
                1,
                "{path}: a fresh instance after the last one"
            );
            assert_eq!(count(&server), 2, "{path}: kept after a clean request");
            // The head says 256 KiB and half of it is spliced from the file's stream;
            // then the guest traps, or ends the body short. The client never takes it
            // for the whole file: the connection ends before the declared length
            // (curl: 18, a partial body of the file's own bytes), or, when the body
            // failed before hyper wrote anything, with no answer at all (curl: 52).
            let out = std::process::Command::new("curl")
                .args(["-s", "--max-time", "20", "-o", "-", "-w", "%{http_code}"])
                .arg(server.url(path))
                .output()
                .unwrap();
            let (body, code) = out.stdout.split_at(out.stdout.len() - 3);
            match out.status.code() {
                Some(18) => {
                    assert_eq!(code, b"200", "{path} (round {round})");
                    assert!(body.len() < file.len(), "{path}: {} bytes", body.len());
                    assert_eq!(body, &file[..body.len()], "{path}");
                }
                Some(52) => assert_eq!(code, b"000", "{path} (round {round})"),
                other => panic!(
                    "{path} (round {round}): curl {other:?}, {} bytes",
                    body.len()
                ),
            }
        }
    }
    assert_eq!(count(&server), 1, "not reused after a body cut short");
    let (status, stderr) = server.stop();
    assert!(status.success(), "{stderr}");
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let http = &stats["http"];
    // Answered, then trapped: not among the requests a limit answered (`traps`).
    assert_eq!(http["trapped_after_answer"], 3, "{stats}");
    assert_eq!(http["traps"], 0, "{stats}");
    // Every instance made was dropped or kept: none still in flight, and the one kept
    // at the end is the only one idle.
    assert_eq!(http["in_flight"], 0, "{stats}");
    assert_eq!(http["idle_instances"], 1, "{stats}");
    assert_eq!(
        http["instances"], 7,
        "one for each of the 6 cut bodies and the last count"
    );
}

#[test]
fn a_kept_instance_idle_past_its_time_is_dropped() {
    let work = tempfile::tempdir().unwrap();
    let stats = work.path().join("stats.json");
    let server = Server::start(
        &limits(),
        &[
            "--no-mounts",
            "--reuse",
            "100",
            "--reuse-idle",
            "300ms",
            &format!("--stats={}", stats.display()),
        ],
    );
    assert_eq!((count(&server), count(&server)), (1, 2));
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(count(&server), 1, "the idle one was dropped");
    // The sweep drops it without a request coming.
    std::thread::sleep(Duration::from_millis(1200));
    let (status, stderr) = server.stop();
    assert!(status.success(), "{stderr}");
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(stats["http"]["idle_instances"], 0, "{stats}");
    assert_eq!(stats["http"]["instances"], 2, "{stats}");
}

#[test]
fn a_wasi_0_3_instance_is_reused_serially_and_not_after_a_trap_or_a_cut_body() {
    let server = Server::start(
        &p3::limits(),
        &["--no-mounts", "--reuse", "3", "--timeout", "2s"],
    );
    let counts: Vec<u64> = (0..4).map(|_| count(&server)).collect();
    assert_eq!(counts, [1, 2, 3, 1]);
    assert_eq!(server.get("/trap").status, 500);
    assert_eq!(count(&server), 1, "a fresh instance after a trap");
    // Its head out, its body never written: cut at the deadline, not kept.
    let out = std::process::Command::new("curl")
        .args(["-s", "--max-time", "20", "-o", "/dev/null"])
        .arg(server.url("/stall"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(18), "a short body: {out:?}");
    assert_eq!(count(&server), 1, "a fresh instance after a cut body");
    let (status, stderr) = server.stop();
    assert!(status.success(), "{stderr}");
}

#[test]
fn a_bad_reuse_option_gets_one_line_and_exit_2() {
    for args in [
        &["--reuse", "0"][..],
        &["--reuse", "many"],
        &["--reuse-idle", "0s"],
    ] {
        let out = super::wasm9p()
            .arg("http")
            .arg(limits())
            .args(["--listen", "tcp:127.0.0.1:0", "--no-mounts"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(args[0]), "{args:?}: {stderr}");
    }
}
