//! Serving wasi:http components from your own runtime, on your own hyper server.
//!
//! One mount table (HOSTDIR at `/`, served by the in-process 9P server with
//! `cache=loose`) shared by several components, one tenant each: a request goes to
//! the component named by the first label of its `Host` (`hello.localhost:8080` is
//! `hello.wasm`; a host naming none gets 404). Every request of every tenant runs in a
//! fresh instance, and all of them share the table's caches.
//!
//! ```sh
//! cargo run --release -p wasm9p-host --example http_embed -- 127.0.0.1:8080 HOSTDIR hello.wasm static.wasm
//! curl -H 'Host: static.localhost' http://127.0.0.1:8080/index.html
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use wasm9p_host::http::{HttpHandler, HttpLimits};
use wasm9p_host::mounts::MountTable;
use wasmtime::{bail, format_err};

#[tokio::main]
async fn main() -> wasmtime::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, dir, components @ ..] = &args[..] else {
        bail!("usage: http_embed ADDR HOSTDIR COMPONENT.wasm...");
    };
    if components.is_empty() {
        bail!("usage: http_embed ADDR HOSTDIR COMPONENT.wasm...");
    }

    // One table for every tenant: its 9P session and caches are shared.
    let mounts = Arc::new(
        MountTable::builder()
            .mount(&format!("type=9p,export={dir},target=/,cache=loose"))?
            .build()
            .await?,
    );

    // A handler per component, each with the bounds this runtime gives a tenant.
    let limits = HttpLimits {
        memory: Some(64 << 20),
        max_instances: 16,
        ..HttpLimits::default()
    };
    let mut tenants = HashMap::new();
    for component in components {
        let name = Path::new(component)
            .file_stem()
            .and_then(|s| s.to_str())
            .ok_or_else(|| format_err!("{component}: no file name"))?
            .to_owned();
        // Loading compiles (or maps the cached code): off the runtime's threads.
        let builder = HttpHandler::builder(component, Arc::clone(&mounts)).limits(limits.clone());
        let handler = tokio::task::spawn_blocking(move || builder.build()).await??;
        tenants.insert(name, handler);
    }
    let tenants = Arc::new(tenants);

    let listener = tokio::net::TcpListener::bind(addr.as_str()).await?;
    eprintln!(
        "serving {} tenants on {}",
        tenants.len(),
        listener.local_addr()?
    );
    loop {
        let (stream, _) = listener.accept().await?;
        let tenants = Arc::clone(&tenants);
        let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let tenants = Arc::clone(&tenants);
            async move {
                let tenant = request
                    .headers()
                    .get(hyper::header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .and_then(|h| h.split(['.', ':']).next())
                    .and_then(|name| tenants.get(name));
                let response = match tenant {
                    Some(handler) => handler.handle(request).await,
                    None => {
                        let mut response =
                            hyper::Response::new(wasm9p_host::http::text_body("no such tenant\n"));
                        *response.status_mut() = hyper::StatusCode::NOT_FOUND;
                        response
                    }
                };
                Ok::<_, Infallible>(response)
            }
        });
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
