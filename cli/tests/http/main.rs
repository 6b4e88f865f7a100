//! `wasm9p http`: wasi:http components built here from C (`examples/http/hello.c`,
//! `examples/http/static.c`, `tests/guests/http_limits.c`) with wit-bindgen,
//! clang-14 and wit-component, served by the real `wasm9p` binary on loopback, asked
//! over real HTTP (curl, and a plain HTTP/1.1 client of ours where the request must be
//! malformed or the timing counted).
//!
//! By scenario: here, hello, static files, the limits, the queue, SIGTERM and bad
//! input; `p3`, WASI 0.3 components; `reuse`, instances serving more than one
//! request; `embedded`, the library as a runtime embeds it
//! and `examples/http_embed.rs`; `client`, the plain client.

mod client;
mod embedded;
mod front;
mod p3;
mod reuse;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use client::{get, request, Response};

const BIN: &str = env!("CARGO_BIN_EXE_wasm9p");

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// A component built once per test binary by `build` (`c_http`, or `c_http_p3`).
fn component_of(
    cell: &'static OnceLock<PathBuf>,
    src: &str,
    build: fn(&Path) -> PathBuf,
) -> PathBuf {
    cell.get_or_init(|| build(&repo(src))).clone()
}

/// A `wasi:http/proxy` (0.2) component built once per test binary.
fn component(cell: &'static OnceLock<PathBuf>, src: &str) -> PathBuf {
    component_of(cell, src, wasm9p_tests::c_http)
}

fn hello() -> PathBuf {
    static CELL: OnceLock<PathBuf> = OnceLock::new();
    component(&CELL, "examples/http/hello.c")
}

fn static_files() -> PathBuf {
    static CELL: OnceLock<PathBuf> = OnceLock::new();
    component(&CELL, "examples/http/static.c")
}

fn limits() -> PathBuf {
    static CELL: OnceLock<PathBuf> = OnceLock::new();
    component(&CELL, "tests/guests/http_limits.c")
}

fn wasm9p() -> Command {
    wasm9p_tests::wasm9p_command(BIN, env!("CARGO_TARGET_TMPDIR"))
}

/// A running `wasm9p http`, killed when dropped; what it printed is kept.
struct Server {
    child: Child,
    addr: String,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `wasm9p http COMPONENT --listen tcp:127.0.0.1:0 ARGS...` and waits for
    /// its "serving" line.
    fn start(component: &Path, args: &[&str]) -> Server {
        Server::start_with(wasm9p(), component, args)
    }

    /// [`Server::start`] from a command of the caller's (its environment).
    fn start_with(mut command: Command, component: &Path, args: &[&str]) -> Server {
        let mut child = command
            .arg("http")
            .arg(component)
            .args(["--listen", "tcp:127.0.0.1:0"])
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        let addr = loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap() == 0 {
                let _ = child.kill();
                panic!("wasm9p http ended before serving: {seen}");
            }
            seen.push_str(&line);
            // The listener's line (a metrics listener's comes before it).
            if let Some((_, addr)) = line
                .trim()
                .split_once(" on tcp:")
                .filter(|(said, _)| said.contains("serving "))
            {
                break addr.to_owned();
            }
        };
        let kept = Arc::new(Mutex::new(seen));
        let drained = Arc::clone(&kept);
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let mut kept = drained.lock().unwrap();
                kept.push_str(&line);
                kept.push('\n');
            }
        });
        Server {
            child,
            addr,
            stderr: kept,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn get(&self, path: &str) -> Response {
        get(&self.addr, path, &[])
    }

    /// SIGTERM, then its exit status and everything it printed.
    fn stop(mut self) -> (std::process::ExitStatus, String) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let status = wait_bounded(&mut self.child, Duration::from_secs(60));
        // The drain thread ends with the pipe.
        std::thread::sleep(Duration::from_millis(100));
        let stderr = self.stderr.lock().unwrap().clone();
        (status, stderr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_bounded(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("the server did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// curl's status and body for `url`, with `headers`.
fn curl(url: &str, headers: &[&str]) -> (u16, Vec<u8>) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "--max-time", "60", "-o", "-", "-w", "\n%{http_code}"]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd.arg(url).output().expect("curl (Debian's)");
    let mut body = out.stdout;
    let at = body.iter().rposition(|b| *b == b'\n').unwrap();
    let status = std::str::from_utf8(&body[at + 1..])
        .unwrap()
        .parse()
        .unwrap();
    body.truncate(at);
    (status, body)
}

/// The sum of every `key` in a stats JSON.
fn sum(json: &serde_json::Value, key: &str) -> u64 {
    match json {
        serde_json::Value::Object(map) => map
            .iter()
            .map(|(k, v)| match (k == key, v.as_u64()) {
                (true, Some(n)) => n,
                _ => sum(v, key),
            })
            .sum(),
        serde_json::Value::Array(items) => items.iter().map(|v| sum(v, key)).sum(),
        _ => 0,
    }
}

#[test]
fn hello_answers_over_real_http_and_a_sigterm_stops_it_with_exit_0() {
    let server = Server::start(&hello(), &["--no-mounts"]);
    let (status, body) = curl(&server.url("/anything"), &[]);
    assert_eq!(status, 200);
    assert_eq!(body, b"Hello from wasm9p\n");
    let response = server.get("/");
    assert_eq!(
        response.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    let (status, stderr) = server.stop();
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("stopped"), "{stderr}");
}

#[test]
fn static_serves_the_export_byte_for_byte_with_404_304_and_no_way_out() {
    let work = tempfile::tempdir().unwrap();
    let site = work.path().join("site");
    std::fs::create_dir_all(site.join("docs")).unwrap();
    let page: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(site.join("index.html"), b"<h1>home</h1>\n").unwrap();
    std::fs::write(site.join("docs/index.html"), b"<h1>docs</h1>\n").unwrap();
    std::fs::write(site.join("data.bin"), &page).unwrap();
    std::fs::write(site.join("a file.txt"), b"spaced\n").unwrap();
    // Beside the export, never to be served.
    std::fs::write(work.path().join("secret"), b"secret\n").unwrap();
    let stats = work.path().join("stats.json");
    let mount = format!(
        "type=9p,export={},target=/,cache=loose,revalidate=100",
        site.display()
    );
    let server = Server::start(
        &static_files(),
        &["--mount", &mount, &format!("--stats={}", stats.display())],
    );

    let (status, body) = curl(&server.url("/data.bin"), &[]);
    assert_eq!(status, 200);
    assert!(body == page, "the bytes differ from the export's");
    assert_eq!(
        curl(&server.url("/"), &[]),
        (200, b"<h1>home</h1>\n".to_vec())
    );
    assert_eq!(
        curl(&server.url("/docs/"), &[]),
        (200, b"<h1>docs</h1>\n".to_vec())
    );
    assert_eq!(
        curl(&server.url("/a%20file.txt"), &[]),
        (200, b"spaced\n".to_vec())
    );
    let redirect = server.get("/docs");
    assert_eq!(redirect.status, 301);
    assert_eq!(redirect.header("location"), Some("/docs/"));

    // Misses: after the first, answered from the cache (a negative entry or the
    // directory's cached listing), with no 9P walk each (counted below).
    for _ in 0..30 {
        assert_eq!(server.get("/missing.html").status, 404);
    }

    // ETag and If-None-Match.
    let first = server.get("/index.html");
    let etag = first.header("etag").expect("an etag").to_owned();
    let again = get(&server.addr, "/index.html", &[("If-None-Match", &etag)]);
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    let other = get(
        &server.addr,
        "/index.html",
        &[("If-None-Match", "\"other\"")],
    );
    assert_eq!(other.status, 200);

    // Climbing out, plain or encoded, never reaches beside the export.
    for path in [
        "/../secret",
        "/docs/../../secret",
        "/%2e%2e/secret",
        "/%2E%2E%2Fsecret",
        "/docs/..%2f..%2fsecret",
    ] {
        let response = server.get(path);
        assert_ne!(response.status, 200, "{path}");
        assert!(!response.body.starts_with(b"secret"), "{path}");
    }

    // A file changed on the server is seen within revalidate.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(site.join("index.html"), b"<h1>new home</h1>\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let response = server.get("/index.html");
        if response.body == b"<h1>new home</h1>\n" {
            assert_ne!(response.header("etag"), Some(etag.as_str()));
            break;
        }
        assert!(Instant::now() < deadline, "the change was never seen");
        std::thread::sleep(Duration::from_millis(50));
    }

    let (status, stderr) = server.stop();
    assert!(status.success(), "{stderr}");
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let cached_misses = sum(&stats, "negative_hits") + sum(&stats, "listing_hits");
    assert!(cached_misses >= 29, "{stats}");
    assert!(sum(&stats, "walk") < 30, "a walk per miss: {stats}");
    assert!(
        stats["http"]["responses"].as_u64().unwrap() >= 40,
        "{stats}"
    );
}

#[test]
fn each_limit_answers_its_5xx_in_one_line_and_the_next_request_succeeds() {
    let server = Server::start(
        &limits(),
        &[
            "--no-mounts",
            "--timeout",
            "2s",
            "--memory-limit",
            "32M",
            "--max-request-body",
            "64K",
        ],
    );
    let cases: [(&str, u16, &str); 3] = [
        ("/loop", 504, "timeout"),
        ("/grow", 500, "memory limit"),
        ("/trap", 500, "trapped"),
    ];
    for (path, status, says) in cases {
        let started = Instant::now();
        let response = server.get(path);
        assert_eq!(response.status, status, "{path}: {}", response.text());
        assert!(
            response.text().contains(says),
            "{path}: {}",
            response.text()
        );
        assert_eq!(response.text().lines().count(), 1, "{path}");
        assert!(started.elapsed() < Duration::from_secs(20), "{path}");
        assert_eq!(server.get("/ok").status, 200, "after {path}");
    }
    // The request body: within its bound, read whole; past it, 413 whether its length
    // was declared or streamed.
    let within = request(&server.addr, "POST", "/echo", &[], &vec![7; 60_000]);
    assert_eq!((within.status, within.text().trim()), (200, "60000"));
    let declared = request(&server.addr, "POST", "/echo", &[], &vec![7; 70_000]);
    assert_eq!(declared.status, 413, "{}", declared.text());
    let streamed = client::chunked(&server.addr, "/echo", &vec![7; 70_000]);
    assert_eq!(streamed.status, 413, "{}", streamed.text());
    assert_eq!(server.get("/ok").status, 200);
    let (status, stderr) = server.stop();
    assert!(status.success(), "{stderr}");
}

#[test]
fn past_the_instances_and_the_queue_requests_get_503_and_then_all_are_served() {
    let server = Server::start(
        &limits(),
        &["--no-mounts", "--max-instances", "1", "--queue", "1"],
    );
    let addr = server.addr.clone();
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let addr = addr.clone();
            let handle = std::thread::spawn(move || get(&addr, "/sleep?1500", &[]).status);
            // The first takes the instance, the second the queue's one place.
            std::thread::sleep(Duration::from_millis(300));
            handle
        })
        .collect();
    let refused = server.get("/ok");
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert!(refused.text().contains("busy"), "{}", refused.text());
    for handle in slow {
        assert_eq!(handle.join().unwrap(), 200);
    }
    assert_eq!(server.get("/ok").status, 200);
}

#[test]
fn a_sigterm_under_load_answers_every_accepted_request_then_exits_0() {
    let server = Server::start(&limits(), &["--no-mounts", "--max-instances", "8"]);
    let addr = server.addr.clone();
    let clients: Vec<_> = (0..6)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || get(&addr, "/sleep?1000", &[]))
        })
        .collect();
    // Every request is in flight before the signal.
    std::thread::sleep(Duration::from_millis(400));
    let (status, stderr) = server.stop();
    for client in clients {
        let response = client.join().unwrap();
        assert_eq!(response.status, 200, "{}", response.text());
        assert_eq!(response.text(), "slept\n");
    }
    assert!(status.success(), "{status}: {stderr}");
}

#[test]
fn outgoing_http_is_refused_unless_its_host_is_allowed() {
    // A plain HTTP server on loopback that answers 204 to anything.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(4) {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0; 4096];
            let _ = std::io::Read::read(&mut stream, &mut buf);
            let _ = std::io::Write::write_all(
                &mut stream,
                b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let refusing = Server::start(&limits(), &["--no-mounts"]);
    let response = refusing.get(&format!("/fetch?{target}"));
    assert_eq!((response.status, response.text()), (502, "denied\n".into()));
    drop(refusing);

    let allowing = Server::start(&limits(), &["--no-mounts", "--allow-outgoing", &target]);
    let response = allowing.get(&format!("/fetch?{target}"));
    assert_eq!(
        (response.status, response.text()),
        (200, "fetched 204\n".into())
    );
}

#[test]
fn bad_input_gets_one_line_and_exit_2_and_a_malformed_request_gets_400() {
    let work = tempfile::tempdir().unwrap();
    // A command component, not a proxy.
    let command = wasm9p_tests::componentize(&wasm9p_tests::compile_c_guest(&repo(
        "tests/guests/wasi_calls.c",
    )));
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![command.display().to_string(), "--no-mounts".into()],
            "exports no HTTP handler (wasi:http/incoming-handler@0.2.x or wasi:http/handler@0.3.x)",
        ),
        (
            vec![
                hello().display().to_string(),
                "--listen".into(),
                "127.0.0.1:80".into(),
            ],
            "expected tcp:HOST:PORT",
        ),
        (
            vec![
                hello().display().to_string(),
                "--mount".into(),
                "type=9p".into(),
            ],
            "type=9p",
        ),
        (
            vec![
                hello().display().to_string(),
                "--timeout".into(),
                "0".into(),
            ],
            "longer than 0",
        ),
        (
            vec![
                hello().display().to_string(),
                "--max-instances".into(),
                "0".into(),
            ],
            "max-instances",
        ),
        (
            vec![
                hello().display().to_string(),
                "--max-instances".into(),
                "100000".into(),
            ],
            "max-instances",
        ),
        (
            vec![
                hello().display().to_string(),
                "--memory-limit".into(),
                "100G".into(),
            ],
            "at most 4G",
        ),
        (
            vec![
                work.path().join("absent.wasm").display().to_string(),
                "--no-mounts".into(),
            ],
            "absent.wasm",
        ),
    ];
    for (args, says) in cases {
        let mut cmd = wasm9p();
        cmd.arg("http");
        if !args.iter().any(|a| a == "--listen") {
            cmd.args(["--listen", "tcp:127.0.0.1:0"]);
        }
        let out = cmd.args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }

    let server = Server::start(&hello(), &["--no-mounts"]);
    let malformed = client::raw(
        &server.addr,
        b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    );
    assert_eq!(malformed.status, 400);
    assert_eq!(server.get("/").status, 200);
}

#[test]
fn a_9p_server_restarted_under_load_leaves_no_request_past_its_timeout() {
    let work = tempfile::tempdir().unwrap();
    let site = work.path().join("site");
    std::fs::create_dir(&site).unwrap();
    std::fs::write(site.join("index.html"), b"<p>up</p>\n").unwrap();
    let socket = work.path().join("9p.sock");
    let listen = format!("unix:{}", socket.display());
    let serve = || {
        wasm9p_tests::spawn_serve(
            BIN,
            ["--listen", &listen, "--export", site.to_str().unwrap()],
        )
        .0
    };
    let mut nine_p = serve();
    // cache=none: every request reaches the 9P server.
    let mount = format!("type=9p,source={listen},target=/,cache=none,reconnect=on");
    let timeout = Duration::from_secs(3);
    let server = Server::start(&static_files(), &["--mount", &mount, "--timeout", "3s"]);

    let started = Instant::now();
    let load = Duration::from_secs(7);
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let addr = server.addr.clone();
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                while started.elapsed() < load {
                    let at = started.elapsed();
                    let status = get(&addr, "/index.html", &[]).status;
                    seen.push((at, started.elapsed() - at, status));
                    std::thread::sleep(Duration::from_millis(20));
                }
                seen
            })
        })
        .collect();
    // Down for a second in the middle of the load, then up again on the same socket.
    std::thread::sleep(Duration::from_millis(1500));
    let _ = nine_p.kill();
    let _ = nine_p.wait();
    std::thread::sleep(Duration::from_secs(1));
    let _restarted = serve();

    let seen: Vec<_> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    assert!(seen.len() > 40, "too little load: {}", seen.len());
    // The outage was met: requests waited for the server to come back.
    assert!(
        seen.iter()
            .any(|(_, took, _)| *took > Duration::from_millis(500)),
        "no request met the outage"
    );
    for (at, took, status) in &seen {
        // Our timeout, and a margin for the client's own connect and read.
        assert!(
            *took < timeout + Duration::from_secs(2),
            "a request at {at:?} took {took:?} ({status})"
        );
    }
    let last_second: Vec<_> = seen
        .iter()
        .filter(|(at, _, _)| *at > load - Duration::from_secs(1))
        .collect();
    assert!(!last_second.is_empty());
    assert!(
        last_second.iter().all(|(_, _, status)| *status == 200),
        "{last_second:?}"
    );
}

#[test]
fn a_cold_server_starts_on_the_baseline_tier_and_moves_new_requests_to_the_optimized() {
    let work = tempfile::tempdir().unwrap();
    let stats = work.path().join("stats.json");
    let modules = work.path().join("modules");
    // Every component counts as big: nothing is cached, so it starts on Winch's code.
    let mut child = wasm9p();
    child.env("WASM9P_TIER_FROM", "1");
    let server = Server::start_with(
        child,
        &hello(),
        &[
            "--no-mounts",
            "--module-cache",
            modules.to_str().unwrap(),
            &format!("--stats={}", stats.display()),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut served = 0;
    while Instant::now() < deadline && served < 400 {
        assert_eq!(server.get("/").status, 200);
        served += 1;
        if served % 50 == 0 {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let (status, stderr) = server.stop();
    assert!(status.success(), "{stderr}");
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let tier = &stats["tier"];
    assert_eq!(tier["started_on"], "baseline", "{stats}");
    assert!(tier["guests"]["baseline"].as_u64().unwrap() >= 1, "{stats}");
    assert!(
        tier["guests"]["optimized"].as_u64().unwrap() >= 1,
        "{stats}"
    );
}

#[test]
fn an_instance_writes_through_its_mount_and_a_ro_mount_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let rw = format!(
        "type=9p,export={},target=/,cache=loose",
        dir.path().display()
    );
    let writable = Server::start(&limits(), &["--mount", &rw]);
    let response = writable.get("/write?made.txt");
    assert_eq!(
        (response.status, response.text()),
        (200, "written\n".into())
    );
    drop(writable);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("made.txt")).unwrap(),
        "from a request\n"
    );

    let ro = format!("{rw},ro");
    let read_only = Server::start(&limits(), &["--mount", &ro]);
    let response = read_only.get("/write?refused.txt");
    assert_eq!((response.status, response.text()), (500, "EROFS\n".into()));
    assert!(!dir.path().join("refused.txt").exists());
}

#[test]
fn a_response_body_past_its_bound_is_refused_before_its_head_and_the_next_succeeds() {
    let site = tempfile::tempdir().unwrap();
    std::fs::write(site.path().join("big.txt"), vec![b'x'; 4096]).unwrap();
    std::fs::write(site.path().join("small.txt"), vec![b'y'; 500]).unwrap();
    let mount = format!(
        "type=9p,export={},target=/,cache=loose",
        site.path().display()
    );
    let server = Server::start(
        &static_files(),
        &["--mount", &mount, "--max-response-body", "1K"],
    );
    let big = server.get("/big.txt");
    assert_eq!(big.status, 502, "{}", big.text());
    assert!(
        big.text().contains("past the bound of 1024 bytes"),
        "{}",
        big.text()
    );
    assert_eq!(big.text().lines().count(), 1);
    let small = server.get("/small.txt");
    assert_eq!((small.status, small.body.len()), (200, 500));
}
