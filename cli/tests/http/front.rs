//! `wasm9p http` facing the clients the internet sends, through the real binary on
//! loopback: slow and idle connections, the bound on connections, HTTP/2 cleartext,
//! reloads under load, metrics read by a real Prometheus parser, 503 exactly past the
//! instances and the queue, a slow request body's 408, and bad input.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::{curl, hello, limits, static_files, wasm9p, Server};

/// Reads from `stream` until it closes (`Ok(bytes)`), or `limit` passes (`Err`).
fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> Result<Vec<u8>, Vec<u8>> {
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(got),
            Err(_) => {}
        }
        if started.elapsed() > limit {
            return Err(got);
        }
    }
}

/// One keep-alive request on `stream`: the response's status and body (by its
/// Content-Length).
fn keep_alive_get(stream: &mut TcpStream, path: &str) -> (u16, Vec<u8>) {
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).unwrap();
    let code = status.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, body)
}

#[test]
fn slow_headers_are_cut_at_the_header_timeout_while_other_requests_answer() {
    let server = Server::start(
        &hello(),
        &[
            "--no-mounts",
            "--header-timeout",
            "600ms",
            "--idle-timeout",
            "60s",
        ],
    );
    // Twenty clients each sending a head a line at a time, never finishing it.
    let mut slow: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = TcpStream::connect(&server.addr).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
            s
        })
        .collect();
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(300) {
        for s in &mut slow {
            let _ = s.write_all(b"X-Slow: 1\r\n");
        }
        // Meanwhile, whole requests answer.
        assert_eq!(server.get("/").status, 200);
        std::thread::sleep(Duration::from_millis(100));
    }
    for (i, s) in slow.iter_mut().enumerate() {
        let got = read_until_closed(s, Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("slow client {i} still open after 10 s"));
        assert!(
            !got.starts_with(b"HTTP/1.1 200"),
            "no answer to a head never ended"
        );
    }
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "not cut before the timeout"
    );
    assert_eq!(server.get("/").status, 200);
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let server = Server::start(
        &hello(),
        &[
            "--no-mounts",
            "--idle-timeout",
            "1s",
            "--header-timeout",
            "30s",
        ],
    );
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    assert_eq!(keep_alive_get(&mut stream, "/").0, 200);
    // Kept alive between requests shorter apart than the timeout.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(keep_alive_get(&mut stream, "/").0, 200);
    let idle = Instant::now();
    read_until_closed(&mut stream, Duration::from_secs(10)).expect("closed once idle");
    assert!(
        idle.elapsed() >= Duration::from_millis(800),
        "{:?}",
        idle.elapsed()
    );
}

#[test]
fn past_max_connections_a_connection_waits_and_is_served_once_one_closes() {
    let server = Server::start(&hello(), &["--no-mounts", "--max-connections", "4"]);
    let mut open: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(&server.addr).unwrap();
            assert_eq!(keep_alive_get(&mut s, "/").0, 200);
            s
        })
        .collect();
    // The fifth is held in the listen backlog: connected, not answered.
    let mut fifth = TcpStream::connect(&server.addr).unwrap();
    write!(
        fifth,
        "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    fifth
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        fifth.read(&mut buf).is_err(),
        "the fifth connection is not served while four are open"
    );
    // One closes: the fifth is served, and the other three still work.
    drop(open.remove(0));
    let answer = read_until_closed(&mut fifth, Duration::from_secs(10)).expect("answered");
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    for s in &mut open {
        assert_eq!(keep_alive_get(s, "/").0, 200);
    }
}

#[test]
fn an_h2c_request_gets_the_same_body_as_http_1_1() {
    let site = tempfile::tempdir().unwrap();
    let page: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(site.path().join("page.bin"), &page).unwrap();
    let mount = format!(
        "type=9p,export={},target=/,cache=loose",
        site.path().display()
    );
    let server = Server::start(&static_files(), &["--mount", &mount]);
    let (status, body) = curl(&server.url("/page.bin"), &[]);
    assert_eq!((status, body.len()), (200, page.len()));
    let out = Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "60",
            "--http2-prior-knowledge",
            "-o",
            "-",
        ])
        .args(["-w", "\n%{http_version} %{http_code}"])
        .arg(server.url("/page.bin"))
        .output()
        .unwrap();
    let mut got = out.stdout;
    let at = got.iter().rposition(|b| *b == b'\n').unwrap();
    let trailer = String::from_utf8_lossy(&got[at + 1..]).into_owned();
    got.truncate(at);
    assert_eq!(trailer, "2 200", "HTTP/2 over cleartext");
    assert!(got == page, "the same bytes over HTTP/2");
}

/// Copies `from` over `to` by writing a new file and renaming it into place (as a
/// deploy would).
fn deploy(from: &Path, to: &Path) {
    let staged = to.with_extension("staged");
    std::fs::copy(from, &staged).unwrap();
    std::fs::rename(&staged, to).unwrap();
}

fn hangup(server: &Server) {
    let pid = rustix::process::Pid::from_child(&server.child);
    rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
}

/// Waits until the server said `line`.
fn wait_for_line(server: &Server, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !server.stderr.lock().unwrap().contains(line) {
        assert!(
            Instant::now() < deadline,
            "no {line:?}: {}",
            server.stderr.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sighup_switches_to_a_new_component_under_load_a_broken_one_leaves_the_old_and_a_0_3_one_follows_a_0_2_one(
) {
    let work = tempfile::tempdir().unwrap();
    let component = work.path().join("app.wasm");
    deploy(&hello(), &component);
    let cache = work.path().join("modules");
    let server = Server::start(
        &component,
        &["--no-mounts", "--module-cache", cache.to_str().unwrap()],
    );
    // hello answers every path with its greeting; http_limits answers /ok with "ok".
    let old = b"Hello from wasm9p\n".to_vec();
    let new = b"ok\n".to_vec();
    let stop = Arc::new(AtomicBool::new(false));
    let switched_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (addr, stop) = (server.addr.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let response = super::client::get(&addr, "/ok", &[]);
                    seen.push((started, response.status, response.body));
                }
                seen
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    deploy(&limits(), &component);
    hangup(&server);
    wait_for_line(&server, "reloaded");
    *switched_at.lock().unwrap() = Some(Instant::now());
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let switched = switched_at.lock().unwrap().unwrap();
    let mut olds_after = 0;
    let mut total = 0;
    for client in clients {
        let seen = client.join().unwrap();
        let mut was_new = false;
        for (started, status, body) in seen {
            total += 1;
            assert_eq!(status, 200, "no request fails across the reload");
            assert!(
                body == old || body == new,
                "{}",
                String::from_utf8_lossy(&body)
            );
            if body == new {
                was_new = true;
            } else {
                assert!(!was_new, "an old answer after a new one on the same client");
                if started > switched {
                    olds_after += 1;
                }
            }
        }
    }
    assert_eq!(
        olds_after, 0,
        "no request started after the switch got the old version"
    );
    assert!(total > 8, "{total} requests");

    // A broken version: the one before serves on, and the log says why.
    std::fs::write(work.path().join("broken.wasm"), b"\0asm\x01\0\0\0garbage").unwrap();
    deploy(&work.path().join("broken.wasm"), &component);
    hangup(&server);
    wait_for_line(&server, "failed, the previous version serves on");
    assert_eq!(server.get("/ok").body, new);

    // A WASI 0.3 service in place of the 0.2 proxy: compiled on engines of its own
    // (with the concurrency support a proxy's go without), and served.
    deploy(&super::p3::files(), &component);
    hangup(&server);
    let deadline = Instant::now() + Duration::from_secs(120);
    while server.stderr.lock().unwrap().matches("reloaded").count() < 2 {
        assert!(
            Instant::now() < deadline,
            "no second reload: {}",
            server.stderr.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let answer = server.get("/");
    assert_eq!(
        (answer.status, answer.body.as_slice()),
        (200, &b"hello from a WASI 0.3 component\n"[..])
    );
}

/// A Python with `prometheus_client` from PyPI, in a venv made once under target/.
fn prometheus_python() -> PathBuf {
    static CELL: OnceLock<PathBuf> = OnceLock::new();
    CELL.get_or_init(|| {
        let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/prometheus-venv");
        let python = venv.join("bin/python");
        let ready = Command::new(&python)
            .args(["-c", "import prometheus_client"])
            .status()
            .is_ok_and(|s| s.success());
        if !ready {
            let made = Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .unwrap();
            assert!(made.success(), "python3 -m venv");
            let pip = Command::new(venv.join("bin/pip"))
                .args(["install", "-q", "prometheus_client==0.21.1"])
                .status()
                .unwrap();
            assert!(pip.success(), "pip install prometheus_client");
        }
        python
    })
    .clone()
}

/// `text` parsed by prometheus_client's parser: each sample as (name, labels, value).
fn parse_metrics(text: &str) -> Vec<(String, serde_json::Value, f64)> {
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        out.append([s.name, s.labels, s.value])
print(json.dumps(out))
"#;
    let mut child = Command::new(prometheus_python())
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the parser refused the metrics:\n{text}"
    );
    let samples: Vec<(String, serde_json::Value, f64)> =
        serde_json::from_slice(&out.stdout).unwrap();
    samples
}

#[test]
fn the_metrics_parse_as_prometheus_text_and_count_the_requests_sent() {
    let site = tempfile::tempdir().unwrap();
    let mount = format!(
        "type=9p,export={},target=/,cache=loose",
        site.path().display()
    );
    let server = Server::start(
        &limits(),
        &["--mount", &mount, "--metrics-listen", "tcp:127.0.0.1:0"],
    );
    let metrics_addr = {
        let said = server.stderr.lock().unwrap().clone();
        said.lines()
            .find_map(|l| {
                l.split_once("metrics on tcp:")
                    .map(|(_, a)| a.trim().to_owned())
            })
            .unwrap_or_else(|| panic!("no metrics line: {said}"))
    };
    for _ in 0..5 {
        assert_eq!(server.get("/ok").status, 200);
    }
    for _ in 0..2 {
        assert_eq!(server.get("/trap").status, 500);
    }
    assert_eq!(server.get("/write?made.txt").status, 200);
    let sum = |samples: &[(String, serde_json::Value, f64)],
               name: &str,
               labels: &[(&str, &str)]| {
        samples
            .iter()
            .filter(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l[*k].as_str() == Some(*v)))
            .map(|(_, _, v)| *v)
            .sum::<f64>()
    };
    // An instance is torn down (its pool slot reset, its place given back) just after
    // its response went out: scrape until the last one is gone, as a dashboard would.
    let mut text = String::new();
    for _ in 0..100 {
        text = super::client::get(&metrics_addr, "/metrics", &[]).text();
        if sum(
            &parse_metrics(&text),
            "wasm9p_http_instances_in_flight",
            &[],
        ) == 0.0
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let samples = parse_metrics(&text);
    let value = |name: &str, labels: &[(&str, &str)]| sum(&samples, name, labels);
    assert_eq!(value("wasm9p_http_requests_total", &[]), 8.0, "{text}");
    assert_eq!(
        value("wasm9p_http_responses_total", &[("status", "200")]),
        6.0
    );
    assert_eq!(
        value("wasm9p_http_responses_total", &[("status", "500")]),
        2.0
    );
    assert_eq!(
        value("wasm9p_http_limit_hits_total", &[("limit", "trap")]),
        2.0
    );
    assert_eq!(
        value("wasm9p_http_request_duration_seconds_count", &[]),
        8.0
    );
    assert_eq!(value("wasm9p_http_instances_made_total", &[]), 8.0);
    assert_eq!(value("wasm9p_http_instances_in_flight", &[]), 0.0);
    assert!(value("wasm9p_http_connections_open", &[]) >= 0.0);
    assert!(
        value("wasm9p_mount_messages_total", &[("mount", "/")]) > 0.0,
        "{text}"
    );
    assert!(samples
        .iter()
        .any(|(n, l, _)| n == "wasm9p_mount_cache_hits_total"
            && l["cache"].as_str() == Some("dentry")));
    assert_eq!(
        super::client::get(&metrics_addr, "/other", &[]).status,
        404,
        "only /metrics"
    );
}

#[test]
fn past_one_instance_and_no_queue_every_answer_is_200_or_503() {
    let server = Server::start(
        &limits(),
        &["--no-mounts", "--max-instances", "1", "--queue", "0"],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (addr, stop) = (server.addr.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut statuses = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    statuses.push(super::client::get(&addr, "/ok", &[]).status);
                }
                statuses
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let statuses: Vec<u16> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    let others: Vec<&u16> = statuses
        .iter()
        .filter(|s| **s != 200 && **s != 503)
        .collect();
    assert!(others.is_empty(), "only 200 or 503: {others:?}");
    assert!(
        statuses.contains(&200) && statuses.contains(&503),
        "both seen"
    );
    let (_, stderr) = server.stop();
    assert!(!stderr.contains("trapped"), "{stderr}");
}

#[test]
fn a_request_body_that_stops_coming_gets_408_and_frees_its_instance() {
    let server = Server::start(
        &limits(),
        &["--no-mounts", "--timeout", "1s", "--max-instances", "1"],
    );
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    write!(
        stream,
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    stream.write_all(&[b'x'; 10]).unwrap();
    let answer = read_until_closed(&mut stream, Duration::from_secs(20)).expect("an answer");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("request body did not arrive"), "{text}");
    // Its instance is free: the one instance serves the next request.
    assert_eq!(server.get("/ok").status, 200);
}

#[test]
fn bad_front_door_options_and_inputs_get_one_line_and_exit_2() {
    let work = tempfile::tempdir().unwrap();
    let page = work.path().join("index.html");
    std::fs::write(&page, "<h1>not wasm</h1>\n").unwrap();
    let hello = hello().display().to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![hello.clone(), "--max-connections".into(), "0".into()],
            "at least 1",
        ),
        (
            vec![hello.clone(), "--max-connections".into(), "many".into()],
            "expected a number",
        ),
        (
            vec![hello.clone(), "--header-timeout".into(), "0".into()],
            "longer than 0",
        ),
        (
            vec![hello.clone(), "--idle-timeout".into(), "soon".into()],
            "--idle-timeout",
        ),
        (
            vec![
                hello.clone(),
                "--metrics-listen".into(),
                "127.0.0.1:9090".into(),
            ],
            "expected tcp:HOST:PORT",
        ),
        (vec![page.display().to_string()], "not a wasm component"),
        (
            vec![hello.clone(), "--memory-limit".into(), "64K".into()],
            "at least 128K",
        ),
    ];
    for (args, says) in cases {
        let out = wasm9p()
            .args(["http", "--no-mounts", "--listen", "tcp:127.0.0.1:0"])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("WARN") && !stderr.contains("panicked"),
            "{args:?}: {stderr}"
        );
    }
}
