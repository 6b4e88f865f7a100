//! `wasm9p_host::http` as a serverless runtime embeds it: handlers built from
//! components and one shared [`MountTable`], called with hyper requests on the
//! runtime's own tasks (no socket); and `examples/http_embed.rs` run as written.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use wasm9p_host::http::{HttpHandler, HttpLimits, Reuse};
use wasm9p_host::module_cache::ModuleCache;
use wasm9p_host::mounts::MountTable;

use super::{hello, limits, static_files};

async fn body_of(response: hyper::Response<wasm9p_host::http::ResponseBody>) -> (u16, Vec<u8>) {
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, bytes.to_vec())
}

fn get(path: &str) -> hyper::Request<Full<Bytes>> {
    hyper::Request::get(path)
        .header("host", "tenant.example")
        .body(Full::new(Bytes::new()))
        .unwrap()
}

#[test]
fn two_components_on_one_mount_table_share_its_caches() {
    let site = tempfile::tempdir().unwrap();
    std::fs::write(site.path().join("index.html"), b"<p>shared</p>\n").unwrap();
    let cache = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mounts = Arc::new(
            MountTable::builder()
                .mount(&format!(
                    "type=9p,export={},target=/,cache=loose",
                    site.path().display()
                ))
                .unwrap()
                .build()
                .await
                .unwrap(),
        );
        let handler = |component: std::path::PathBuf| {
            HttpHandler::builder(component, Arc::clone(&mounts))
                .module_cache(ModuleCache::at(cache.path()))
                .limits(HttpLimits {
                    max_instances: 4,
                    ..HttpLimits::default()
                })
                .build()
                .unwrap()
        };
        let (files, greeter) = (handler(static_files()), handler(hello()));
        assert_eq!(
            body_of(greeter.handle(get("/")).await).await,
            (200, b"Hello from wasm9p\n".to_vec())
        );
        for _ in 0..3 {
            assert_eq!(
                body_of(files.handle(get("/index.html")).await).await,
                (200, b"<p>shared</p>\n".to_vec())
            );
        }
        // Three requests, three instances, one 9P read of the page: the table's page
        // cache is every instance's.
        let stats = files.stats_now();
        assert_eq!(stats["http"]["responses"], 3, "{stats}");
        assert_eq!(stats["mounts"][0]["rpc"]["read"], 1, "{stats}");
        // Both handlers see the same table.
        assert_eq!(greeter.stats_now()["mounts"], files.stats_now()["mounts"],);
    });
}

#[test]
fn an_embedder_turns_reuse_on_through_the_limits_and_reads_it_back_in_the_stats() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mounts = Arc::new(MountTable::builder().build().await.unwrap());
        let handler = HttpHandler::builder(limits(), mounts)
            .limits(HttpLimits {
                reuse: Reuse {
                    uses: 2,
                    ..Reuse::default()
                },
                ..HttpLimits::default()
            })
            .build()
            .unwrap();
        let mut counts = Vec::new();
        for _ in 0..5 {
            let (status, body) = body_of(handler.handle(get("/count")).await).await;
            assert_eq!(status, 200);
            counts.push(String::from_utf8(body).unwrap().trim().to_owned());
        }
        assert_eq!(
            counts,
            ["1", "2", "1", "2", "1"],
            "each instance serves two"
        );
        let stats = handler.stats_now();
        assert_eq!(stats["http"]["reused"], 2, "{stats}");
        assert_eq!(stats["http"]["instances"], 3, "{stats}");
    });
}

#[test]
fn the_embedding_example_serves_tenants_by_host_as_the_readme_says() {
    let site = tempfile::tempdir().unwrap();
    std::fs::write(site.path().join("index.html"), b"<p>tenant</p>\n").unwrap();
    // `cargo test --workspace` builds the examples beside the tests; a narrower run
    // builds this one here.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let example = root.join("target/debug/examples/http_embed");
    if !example.exists() {
        let built = std::process::Command::new(env!("CARGO"))
            .args([
                "build",
                "-q",
                "-p",
                "wasm9p-host",
                "--example",
                "http_embed",
            ])
            .current_dir(&root)
            .status()
            .unwrap();
        assert!(built.success(), "building examples/http_embed.rs");
    }
    let dir = tempfile::tempdir().unwrap();
    // The example names tenants after the components' file names.
    let (hello_wasm, static_wasm) = (
        dir.path().join("hello.wasm"),
        dir.path().join("static.wasm"),
    );
    std::fs::copy(hello(), &hello_wasm).unwrap();
    std::fs::copy(static_files(), &static_wasm).unwrap();
    let addr = format!("127.0.0.1:{}", wasm9p_tests::free_port());
    let mut child = Killed(
        std::process::Command::new(&example)
            .arg(&addr)
            .arg(site.path())
            .args([&hello_wasm, &static_wasm])
            .env("WASM9P_CACHE_DIR", dir.path().join("modules"))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("serving 2 tenants"), "{line}");
    let page = super::client::get(&addr, "/index.html", &[("Host", "static.localhost")]);
    assert_eq!((page.status, page.text()), (200, "<p>tenant</p>\n".into()));
    let greeting = super::client::get(&addr, "/", &[("Host", "hello.localhost:8080")]);
    assert_eq!(
        (greeting.status, greeting.text()),
        (200, "Hello from wasm9p\n".into())
    );
    let nobody = super::client::get(&addr, "/", &[("Host", "nobody.localhost")]);
    assert_eq!(nobody.status, 404);
}

/// A child process killed when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
