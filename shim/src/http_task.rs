//! A task that serves: a `wasi:http` component (a 0.2 proxy or a 0.3 service) with
//! `wasm9p_host::http`, as `wasm9p http` serves it: one pre-instance, each request a
//! fresh instance on the pooling allocator (or one kept from a request before, when
//! the node's `shim.toml` sets `http_reuse`), every instance on the one namespace and
//! its caches, within the limits the pod's annotation `wasm9p.io/http` or the node's
//! `http_limits` set, else `wasm9p http`'s defaults ([`crate::http_settings`]), each
//! instance's memory bounded by the container's memory limit too (past it: 500). The
//! "serving" line says the limits it serves with.
//!
//! It listens on `WASMTIME_HTTP_PROXY_SOCKET_ADDR` from the task's environment
//! (`HOST:PORT`, default `0.0.0.0:8080`): runwasi's wasmtime shim reads the same
//! variable, so a pod written for it runs here by changing only its RuntimeClass.
//! SIGTERM or SIGINT stops accepting, lets the requests in flight finish, and ends
//! the task with 0.

use std::sync::Arc;

use wasm9p_host::http::{HandlerKind, HttpHandler, HttpLimits, Listen};
use wasm9p_host::module_cache::TierChoice;

use crate::broker::CompileFor;
use crate::prepared::{hand_off, notes, progress, report, say_working_dir_not_applied, Prepared};
use crate::workload::Workload;

/// The variable naming where to listen.
pub const LISTEN_VAR: &str = "WASMTIME_HTTP_PROXY_SOCKET_ADDR";

/// Where to listen without it.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:8080";

/// Serves the task's component until a signal: its exit code.
pub fn serve(prepared: Prepared) -> i32 {
    match serve_until_signal(prepared) {
        Ok(()) => 0,
        Err(line) => {
            report(&line);
            1
        }
    }
}

/// Where the task listens, from its environment.
pub fn listen_address(env: &[(String, String)]) -> Result<Listen, String> {
    let value = env
        .iter()
        .rev()
        .find(|(k, _)| k == LISTEN_VAR)
        .map_or(DEFAULT_LISTEN, |(_, v)| v.as_str());
    format!("tcp:{value}")
        .parse()
        .map_err(|_| format!("{LISTEN_VAR}={value:?}: expected HOST:PORT"))
}

fn serve_until_signal(prepared: Prepared) -> Result<(), String> {
    let name = prepared.name();
    let listen = listen_address(&prepared.env)?;
    say_working_dir_not_applied();
    let memory = prepared.memory_bound();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let limits = prepared.described.bundle.http.apply(
        HttpLimits {
            reuse: prepared.described.http_reuse(),
            ..HttpLimits::default()
        },
        memory,
    );
    let kind = match prepared.workload {
        Workload::HttpComponent(kind) => kind,
        Workload::Module | Workload::CliComponent => HandlerKind::Service,
    };
    let engines = CompileFor::Http {
        memory: limits.memory,
        max_instances: limits.max_instances,
        service: kind == HandlerKind::Service,
    };
    let cache = prepared.module_cache(engines);
    let mounts = runtime
        .block_on(prepared.mounts.module_cache(cache.clone()).build())
        .map_err(|e| e.to_string())?;
    let mounts = Arc::new(mounts);
    let mut builder = HttpHandler::builder_for(prepared.program, Arc::clone(&mounts))
        .module_cache(cache)
        .tier(TierChoice::Auto)
        .env(&prepared.env)
        .limits(limits.clone())
        .compiled_ahead_for(kind)
        .notes(notes())
        .progress(progress());
    if prepared.described.keeps_code {
        builder = builder.hand_off_compiles_with(hand_off(engines));
    }
    let handler = builder.build().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let listener = listen
            .bind()
            .await
            .map_err(|e| format!("cannot listen on {listen:?}: {e}"))?;
        let stop = async {
            crate::signals::stopped().await;
            log::info!("wasm9p: stopping: finishing the requests in flight");
        };
        let line = format!(
            "serving {name} on {} ({})",
            listener.local_addr(),
            crate::http_settings::Shown(&limits)
        );
        log::info!("wasm9p: {line}");
        eprintln!("wasm9p: {line}");
        wasm9p_host::http::serve(listener, handler.clone(), stop).await;
        Ok::<(), String>(())
    })?;
    log::info!("wasm9p: stopped: {}", handler.stats_now()["http"]);
    handler.finish();
    drop(handler);
    drop(mounts);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listen_address_comes_from_the_variable_runwasi_reads() {
        let env = |v: &str| vec![(LISTEN_VAR.to_owned(), v.to_owned())];
        assert_eq!(listen_address(&[]), Ok(Listen::Tcp("0.0.0.0:8080".into())));
        assert_eq!(
            listen_address(&env("127.0.0.1:9000")),
            Ok(Listen::Tcp("127.0.0.1:9000".into()))
        );
        assert_eq!(
            listen_address(&env("[::1]:80")),
            Ok(Listen::Tcp("[::1]:80".into()))
        );
        let err = listen_address(&env("9000")).unwrap_err();
        assert!(err.contains("expected HOST:PORT"), "{err}");
    }
}
