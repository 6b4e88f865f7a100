//! `wasm9p http COMPONENT --listen tcp:ADDR`: serves a `wasi:http/proxy` component,
//! each request in a fresh instance, every instance on the namespace the mount options
//! make (see `wasm9p_host::http`).
//!
//! The mounts are built once, before anything listens (an unreachable server is exit
//! 2), and so is the component (loaded through the module cache on its tiers; one
//! that is not a proxy is exit 2, naming the missing export). Then one line,
//! `serving COMPONENT on ADDR`, which scripts wait for (and, with `--metrics-listen`,
//! `metrics on ADDR` before it). SIGHUP loads the component again
//! (`HttpHandler::reload`: one line saying it did, or why not, the old one serving
//! on). SIGINT or SIGTERM stops accepting, lets the requests in flight finish, prints
//! the `--stats` and exits 0.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::engines::{report_progress, setup_failed};
use super::guests::{CodeArgs, NamespaceArgs};
use super::shared::{fail, parse_bytes, parse_duration, parse_env, say, EXIT_USAGE};
use wasm9p_host::http::{
    default_max_connections, AllowedHost, HttpHandler, HttpLimits, Listen, Reuse, MAX_INSTANCES,
    MAX_MEMORY, MAX_USES, MIN_MEMORY,
};

/// `wasm9p http`.
#[derive(Debug, Args)]
pub struct HttpArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub namespace: NamespaceArgs,
    /// Where to listen: tcp:HOST:PORT (port 0: any free one, said on stderr) or
    /// unix:PATH.
    #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
    pub listen: Listen,
    /// An environment variable every instance sees (repeatable).
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub code: CodeArgs,
    /// The most memory each instance may take (K, M or G); past it the request gets a
    /// 500 saying so.
    #[arg(long, value_name = "BYTES", default_value = "256M", value_parser = parse_memory)]
    pub memory_limit: u64,
    /// The longest a request may take, from its arrival to its instance's end (Nms,
    /// Ns, Nm); past it, a 504.
    #[arg(long, value_name = "TIME", default_value = "30s", value_parser = parse_timeout)]
    pub timeout: Duration,
    /// The largest request body (K, M or G); past it, a 413.
    #[arg(long, value_name = "BYTES", default_value = "16M", value_parser = parse_bytes)]
    pub max_request_body: u64,
    /// The largest response body (K, M or G): a longer declared length is a 502, a
    /// longer stream is cut.
    #[arg(long, value_name = "BYTES", default_value = "1G", value_parser = parse_bytes)]
    pub max_response_body: u64,
    /// Instances running at once (at most 2048).
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=MAX_INSTANCES as i64))]
    pub max_instances: u32,
    /// Requests that may wait for an instance; past them, a 503.
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub queue: u32,
    /// The longest a request's head may take, from its first byte to its end (Nms,
    /// Ns, Nm); past it, the connection is closed.
    #[arg(long, value_name = "TIME", default_value = "30s", value_parser = parse_timeout)]
    pub header_timeout: Duration,
    /// How long a connection may stay open with no request in flight and no byte
    /// moving (Nms, Ns, Nm); past it, it is closed.
    #[arg(long, value_name = "TIME", default_value = "60s", value_parser = parse_timeout)]
    pub idle_timeout: Duration,
    /// Connections open at once; past it, no more are accepted until one closes
    /// (default: the descriptor limit less an eighth of it, or 256, for the mounts).
    #[arg(long, value_name = "N", value_parser = parse_connections)]
    pub max_connections: Option<usize>,
    /// The most requests one instance serves, one after the other (default 1: a
    /// fresh instance for every request). A kept instance sees what earlier requests
    /// left in its memory; see the book's page on serving.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX_USES as i64))]
    pub reuse: u32,
    /// How long a kept instance waits for its next request before it is dropped
    /// (Nms, Ns, Nm; with --reuse).
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = parse_timeout)]
    pub reuse_idle: Duration,
    /// Where to serve the metrics (Prometheus text, at /metrics): tcp:HOST:PORT or
    /// unix:PATH.
    #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
    pub metrics_listen: Option<Listen>,
    /// A host instances may send HTTP requests to (HOST or HOST:PORT; repeatable).
    /// Without any, outgoing requests are refused.
    #[arg(long = "allow-outgoing", value_name = "HOST[:PORT]", value_parser = parse_allowed)]
    pub allow_outgoing: Vec<AllowedHost>,
    /// The component: it exports wasi:http/incoming-handler@0.2.x or
    /// wasi:http/handler@0.3.x.
    pub component: PathBuf,
}

/// On each SIGHUP, loads the component again (on a blocking thread: it may compile),
/// saying in one line that it did, or why not (the old one serves on).
fn reload_on_hangup(handler: &HttpHandler, component: &std::path::Path) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = signal(SignalKind::hangup())?;
    let handler = handler.clone();
    let component = component.to_owned();
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let reloading = handler.clone();
            let reloaded = tokio::task::spawn_blocking(move || reloading.reload()).await;
            match reloaded {
                Ok(Ok(())) => say(&format!("reloaded {}", component.display())),
                Ok(Err(e)) => say(&format!(
                    "reload of {} failed, the previous version serves on: {e}",
                    component.display()
                )),
                Err(e) => say(&format!("reload of {} failed: {e}", component.display())),
            }
        }
    });
    Ok(())
}

fn parse_listen(s: &str) -> Result<Listen, String> {
    s.parse()
}

fn parse_allowed(s: &str) -> Result<AllowedHost, String> {
    s.parse()
}

fn parse_memory(s: &str) -> Result<u64, String> {
    match parse_bytes(s)? {
        n if n < MIN_MEMORY as u64 => Err(format!(
            "{s:?}: at least 128K (the least a component can run in)"
        )),
        n if n > MAX_MEMORY as u64 => {
            Err(format!("{s:?}: at most 4G (a 32-bit memory's whole range)"))
        }
        n => Ok(n),
    }
}

fn parse_connections(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err(format!("{s:?}: at least 1")),
        Ok(n) if n > 1 << 24 => Err(format!("{s:?}: at most 16777216")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{s:?}: expected a number of connections")),
    }
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("{s:?}: a timeout must be longer than 0")),
        d => Ok(d),
    }
}

/// Runs `wasm9p http` until SIGINT or SIGTERM.
pub fn http(args: HttpArgs) -> ExitCode {
    let Ok(memory) = usize::try_from(args.memory_limit) else {
        return fail(EXIT_USAGE, "--memory-limit: too large for this machine");
    };
    let table = match args.namespace.table() {
        Ok(table) => table,
        Err(code) => return code,
    };
    let cache = match args.code.cache() {
        Ok(cache) => cache,
        Err(code) => return code,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(1, &format!("cannot start the runtime: {e}")),
    };
    let mounts = match runtime.block_on(table.module_cache(cache.clone()).build()) {
        Ok(mounts) => Arc::new(mounts),
        Err(e) => return fail(EXIT_USAGE, &e.to_string()),
    };
    let mut builder = HttpHandler::builder(&args.component, Arc::clone(&mounts))
        .module_cache(cache.clone())
        .tier(args.code.tier)
        .env(&args.env)
        .allow_outgoing(args.allow_outgoing.clone())
        .limits(HttpLimits {
            memory: Some(memory),
            timeout: args.timeout,
            max_request_body: args.max_request_body,
            max_response_body: args.max_response_body,
            max_instances: args.max_instances as usize,
            queue: args.queue as usize,
            header_timeout: args.header_timeout,
            idle_timeout: args.idle_timeout,
            max_connections: args.max_connections.unwrap_or_else(default_max_connections),
            reuse: Reuse {
                uses: args.reuse,
                idle: args.reuse_idle,
            },
        })
        .notes(Arc::new(say))
        .progress(Arc::new(report_progress(cache)));
    if let Ok(exe) = std::env::current_exe() {
        builder = builder.hand_off_compiles_to(exe);
    }
    let handler = match builder.build() {
        Ok(handler) => handler,
        Err(e) => return setup_failed(e),
    };
    let served = runtime.block_on(async {
        let bind = |listen: &Listen| {
            let listen = listen.clone();
            async move {
                listen
                    .bind()
                    .await
                    .map_err(|e| (EXIT_USAGE, format!("cannot listen on {listen:?}: {e}")))
            }
        };
        let listener = bind(&args.listen).await?;
        let metrics = match &args.metrics_listen {
            Some(listen) => Some(bind(listen).await?),
            None => None,
        };
        let stop = super::shared::Shutdown::register()
            .map_err(|e| (1, format!("cannot handle signals: {e}")))?;
        reload_on_hangup(&handler, &args.component)
            .map_err(|e| (1, format!("cannot handle signals: {e}")))?;
        let (stopped, metrics_stop) = tokio::sync::watch::channel(false);
        if let Some(metrics) = metrics {
            say(&format!("metrics on {}", metrics.local_addr()));
            let mut metrics_stop = metrics_stop;
            tokio::spawn(wasm9p_host::http::serve_metrics(
                metrics,
                handler.clone(),
                async move {
                    let _ = metrics_stop.wait_for(|stop| *stop).await;
                },
            ));
        }
        // Scripts wait for this line.
        say(&format!(
            "serving {} on {}",
            args.component.display(),
            listener.local_addr()
        ));
        wasm9p_host::http::serve(listener, handler.clone(), stop.wait()).await;
        let _ = stopped.send(true);
        Ok::<(), (u8, String)>(())
    });
    if let Err((code, line)) = served {
        return fail(code, &line);
    }
    args.namespace.report_stats(handler.stats_now());
    handler.finish();
    // The mounts (and their sessions) go before the runtime that serves them.
    drop(handler);
    drop(mounts);
    say("stopped");
    ExitCode::SUCCESS
}
