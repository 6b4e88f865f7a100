//! WASI 0.3 components (`wasi:http/handler@0.3.0`), built here from C with
//! wit-bindgen's async bindings (`examples/http/files_p3.c`,
//! `tests/guests/http_limits_p3.c`): served, bounded and stopped as 0.2 proxies
//! are, their bodies streamed after their handler returned.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{component_of, curl, sum, Server};

fn p3_component(cell: &'static OnceLock<PathBuf>, src: &str) -> PathBuf {
    component_of(cell, src, wasm9p_tests::c_http_p3)
}

pub(crate) fn files() -> PathBuf {
    static CELL: OnceLock<PathBuf> = OnceLock::new();
    p3_component(&CELL, "examples/http/files_p3.c")
}

pub(crate) fn limits() -> PathBuf {
    static CELL: OnceLock<PathBuf> = OnceLock::new();
    p3_component(&CELL, "tests/guests/http_limits_p3.c")
}

#[test]
fn a_wasi_0_3_component_streams_the_exports_files_on_9p_from_its_cache() {
    let work = tempfile::tempdir().unwrap();
    let site = work.path().join("site");
    std::fs::create_dir_all(site.join("sub")).unwrap();
    // Larger than a stream write goes through at once: the guest waits on it.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(site.join("big.bin"), &big).unwrap();
    std::fs::write(site.join("sub/a.txt"), b"file body\n").unwrap();
    std::fs::write(work.path().join("secret"), b"secret\n").unwrap();
    let stats = work.path().join("stats.json");
    let mount = format!("type=9p,export={},target=/,cache=loose", site.display());
    // The default tier (auto): the first requests run on the baseline code.
    let server = Server::start(
        &files(),
        &["--mount", &mount, &format!("--stats={}", stats.display())],
    );

    assert_eq!(
        curl(&server.url("/"), &[]),
        (200, b"hello from a WASI 0.3 component\n".to_vec())
    );
    let (status, body) = curl(&server.url("/big.bin"), &[]);
    assert_eq!(status, 200);
    assert!(body == big, "the bytes differ from the export's");
    let response = server.get("/sub/a.txt");
    assert_eq!(
        (response.status, response.text()),
        (200, "file body\n".into())
    );
    assert_eq!(response.header("content-length"), Some("10"));
    for _ in 0..10 {
        assert_eq!(server.get("/missing").status, 404);
    }
    for path in ["/../secret", "/sub/../../secret"] {
        let response = server.get(path);
        assert_ne!(response.status, 200, "{path}");
        assert!(!response.body.starts_with(b"secret"), "{path}");
    }

    // Many at once, each in its own instance.
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let url = server.url("/big.bin");
            std::thread::spawn(move || curl(&url, &[]))
        })
        .collect();
    for client in clients {
        let (status, body) = client.join().unwrap();
        assert_eq!(status, 200);
        assert!(body == big, "a concurrent body differs");
    }

    let (status, stderr) = server.stop();
    assert!(status.success(), "{stderr}");
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(stats["http"]["responses"].as_u64(), Some(31), "{stats}");
    assert_eq!(stats["http"]["traps"].as_u64(), Some(0), "{stats}");
    // 17 reads of big.bin, all but the first from the mount's pages.
    assert!(sum(&stats, "page_hits") > 0, "{stats}");
    assert!(
        sum(&stats, "negative_hits") + sum(&stats, "listing_hits") >= 9,
        "{stats}"
    );
}

#[test]
fn a_wasi_0_3_component_past_each_limit_answers_its_5xx_and_a_stalled_body_is_cut_at_the_deadline()
{
    let work = tempfile::tempdir().unwrap();
    let stats = work.path().join("stats.json");
    let server = Server::start(
        &limits(),
        &[
            "--no-mounts",
            "--timeout",
            "2s",
            "--memory-limit",
            "32M",
            &format!("--stats={}", stats.display()),
        ],
    );
    let cases = [
        (
            "/loop",
            504,
            "the request took longer than its timeout of 2s",
        ),
        ("/grow", 500, "memory limit: "),
        ("/trap", 500, "the component trapped: "),
    ];
    for (path, status, line) in cases {
        let response = server.get(path);
        assert_eq!(response.status, status, "{path}: {}", response.text());
        assert!(
            response.text().starts_with(line),
            "{path}: {}",
            response.text()
        );
        assert_eq!(response.text().lines().count(), 1, "{path}");
        let next = server.get("/ok");
        assert_eq!(
            (next.status, next.text()),
            (200, "ok\n".into()),
            "after {path}"
        );
    }

    // Its head is out (200, 5 bytes said) and no byte of its body ever comes: curl
    // sees the connection end short (exit 18) at the deadline, not later.
    let started = Instant::now();
    let out = Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "30",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg(server.url("/stall"))
        .output()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    assert_eq!(out.status.code(), Some(18), "a short body: {out:?}");
    assert!(took < Duration::from_secs(10), "cut after {took:?}");
    let next = server.get("/ok");
    assert_eq!(
        (next.status, next.text()),
        (200, "ok\n".into()),
        "after the stall"
    );
    let (status, stderr) = server.stop();
    assert!(status.success(), "{stderr}");
}
