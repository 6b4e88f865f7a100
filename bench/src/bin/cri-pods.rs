//! Pods a second through containerd's CRI, as a kubelet asks for them (`bench/shim`'s
//! `cri` figures): for one runtime handler, the time from `RunPodSandbox` until the
//! pod's container runs, `--pods` one at a time and as many in `--parallel` lanes at
//! once; and an HTTP pod's
//! first answer, from `RunPodSandbox` to the first response.
//!
//! ```text
//! cri-pods --socket PATH --handler NAME --task IMAGE --hello IMAGE --logs DIR
//!          [--pods N] [--parallel P] [--first K]
//! ```
//!
//! The task image's entrypoint is `shim/tests/guests/task.c` (run as `sleep 60`), the
//! hello image's `examples/http/hello.c`. Pods use the host's network. Every pod is
//! removed after its measure, outside the time. Prints one JSON object.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::*;
use tonic::transport::Channel;
use wasm9p_tests::cri::container_linux;

struct Args {
    socket: PathBuf,
    handler: String,
    task: String,
    hello: String,
    logs: PathBuf,
    pods: usize,
    parallel: usize,
    first: usize,
}

fn args() -> Result<Args, String> {
    let mut given = std::collections::HashMap::new();
    let mut rest = std::env::args().skip(1);
    while let Some(flag) = rest.next() {
        let value = rest.next().ok_or(format!("{flag} needs a value"))?;
        given.insert(flag.trim_start_matches("--").to_owned(), value);
    }
    let mut take = |key: &str| given.remove(key).ok_or(format!("--{key} is needed"));
    let number = |value: Option<String>, default: usize| -> Result<usize, String> {
        value.map_or(Ok(default), |v| {
            v.parse().map_err(|_| format!("{v:?} is not a number"))
        })
    };
    let args = Args {
        socket: take("socket")?.into(),
        handler: take("handler")?,
        task: take("task")?,
        hello: take("hello")?,
        logs: take("logs")?.into(),
        pods: number(given.remove("pods"), 20)?,
        parallel: number(given.remove("parallel"), 8)?,
        first: number(given.remove("first"), 3)?,
    };
    match given.keys().next() {
        Some(unknown) => Err(format!("unknown option --{unknown}")),
        None => Ok(args),
    }
}

fn main() {
    let args = match args() {
        Ok(args) => args,
        Err(why) => {
            eprintln!("cri-pods: {why}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let report = runtime.block_on(measure(&args));
    match report {
        Ok(report) => println!("{report}"),
        Err(why) => {
            eprintln!("cri-pods: {why}");
            std::process::exit(1);
        }
    }
}

async fn measure(args: &Args) -> Result<String, String> {
    let cri = wasm9p_tests::cri::connect(args.socket.clone()).await?;
    // One pod first, unmeasured: the images' snapshots and the module cache warm.
    let (pod, _, _) = pod_running(&cri, args, "warm", 0).await?;
    remove(&cri, &pod).await?;

    let begin = Instant::now();
    let mut pods = Vec::new();
    for i in 0..args.pods {
        pods.push(pod_running(&cri, args, "seq", i).await?);
    }
    let sequential = args.pods as f64 / begin.elapsed().as_secs_f64();
    let sequential_ms = median(pods.iter().map(|(_, took, _)| took.as_secs_f64() * 1e3));
    // Each call's median; what is left of a pod's time is waiting for RUNNING.
    let phase_ms = |phase: usize| median(pods.iter().map(|(_, _, p)| p[phase].as_secs_f64() * 1e3));
    let phases_ms = [phase_ms(0), phase_ms(1), phase_ms(2)];
    for (pod, _, _) in pods.drain(..) {
        remove(&cri, &pod).await?;
    }

    let begin = Instant::now();
    let mut waves = Vec::new();
    for lane in 0..args.parallel {
        let (cri, lane_pods) = (cri.clone(), args.pods.div_ceil(args.parallel));
        let args = Args {
            socket: args.socket.clone(),
            handler: args.handler.clone(),
            task: args.task.clone(),
            hello: args.hello.clone(),
            logs: args.logs.clone(),
            ..*args
        };
        waves.push(tokio::spawn(async move {
            let mut made = Vec::new();
            for i in 0..lane_pods {
                made.push(pod_running(&cri, &args, &format!("par{lane}"), i).await?);
            }
            Ok::<_, String>(made)
        }));
    }
    for wave in waves {
        pods.extend(wave.await.map_err(|e| e.to_string())??);
    }
    let parallel = pods.len() as f64 / begin.elapsed().as_secs_f64();
    for (pod, _, _) in pods.drain(..) {
        remove(&cri, &pod).await?;
    }

    let mut first = Vec::new();
    for i in 0..args.first {
        first.push(first_answer(&cri, args, i).await?);
    }
    Ok(format!(
        "{{\"handler\": {:?}, \"pods\": {}, \"parallel\": {}, \"sequential_pods_per_s\": {sequential:.3}, \
         \"sequential_ms_median\": {sequential_ms:.1}, \"run_pod_sandbox_ms\": {:.1}, \
         \"create_container_ms\": {:.1}, \"start_container_ms\": {:.1}, \
         \"parallel_pods_per_s\": {parallel:.3}, \"http_first_answer_ms\": [{}]}}",
        args.handler,
        args.pods,
        args.parallel,
        phases_ms[0],
        phases_ms[1],
        phases_ms[2],
        first
            .iter()
            .map(|ms| format!("{ms:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn pod_config(args: &Args, name: &str) -> PodSandboxConfig {
    wasm9p_tests::cri::pod_config(name, "bench", &args.logs.join(name), &[])
}

/// How long each call that makes a pod took: RunPodSandbox, CreateContainer,
/// StartContainer.
type Phases = [Duration; 3];

/// A pod whose one container (`image`, with `args` and `env`) was started: their ids,
/// and how long each call took.
async fn pod_with(
    cri: &RuntimeServiceClient<Channel>,
    args: &Args,
    name: &str,
    (image, argv, env): (&str, &[&str], &[(&str, String)]),
) -> Result<(String, String, Phases), String> {
    let config = pod_config(args, name);
    let mut phases = Phases::default();
    let mut at = Instant::now();
    let pod = cri
        .clone()
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: args.handler.clone(),
        })
        .await
        .map_err(|e| format!("RunPodSandbox {name}: {e}"))?
        .into_inner()
        .pod_sandbox_id;
    (phases[0], at) = (at.elapsed(), Instant::now());
    let container = cri
        .clone()
        .create_container(CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(ContainerConfig {
                metadata: Some(ContainerMetadata {
                    name: "main".into(),
                    attempt: 0,
                }),
                image: Some(ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                args: argv.iter().map(|a| a.to_string()).collect(),
                envs: env
                    .iter()
                    .map(|(key, value)| KeyValue {
                        key: key.to_string(),
                        value: value.clone(),
                    })
                    .collect(),
                log_path: "main.log".into(),
                linux: Some(container_linux()),
                ..Default::default()
            }),
            sandbox_config: Some(config),
        })
        .await
        .map_err(|e| format!("CreateContainer {name}: {e}"))?
        .into_inner()
        .container_id;
    (phases[1], at) = (at.elapsed(), Instant::now());
    cri.clone()
        .start_container(StartContainerRequest {
            container_id: container.clone(),
        })
        .await
        .map_err(|e| format!("StartContainer {name}: {e}"))?;
    phases[2] = at.elapsed();
    Ok((pod, container, phases))
}

/// A pod of the task image, from RunPodSandbox until its container runs: the pod's id,
/// how long that took, and each call of it.
async fn pod_running(
    cri: &RuntimeServiceClient<Channel>,
    args: &Args,
    tag: &str,
    i: usize,
) -> Result<(String, Duration, Phases), String> {
    let begin = Instant::now();
    let name = format!("{}-{tag}-{i}", args.handler);
    let (pod, container, phases) =
        pod_with(cri, args, &name, (&args.task, &["sleep", "60"], &[])).await?;
    loop {
        let status = cri
            .clone()
            .container_status(ContainerStatusRequest {
                container_id: container.clone(),
                verbose: false,
            })
            .await
            .map_err(|e| e.to_string())?
            .into_inner()
            .status
            .ok_or("no status")?;
        if status.state == ContainerState::ContainerRunning as i32 {
            return Ok((pod, begin.elapsed(), phases));
        }
        if status.state == ContainerState::ContainerExited as i32 {
            return Err(format!("{name} exited: {status:?}"));
        }
        if begin.elapsed() > Duration::from_secs(60) {
            return Err(format!("{name} did not run within 60 s"));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// An HTTP pod's first answer, from RunPodSandbox: milliseconds.
async fn first_answer(
    cri: &RuntimeServiceClient<Channel>,
    args: &Args,
    i: usize,
) -> Result<f64, String> {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        listener.local_addr().map_err(|e| e.to_string())?.port()
    };
    let begin = Instant::now();
    let name = format!("{}-http-{i}", args.handler);
    let env = [(
        "WASMTIME_HTTP_PROXY_SOCKET_ADDR",
        format!("127.0.0.1:{port}"),
    )];
    let (pod, _, _) = pod_with(cri, args, &name, (&args.hello, &[], &env)).await?;
    loop {
        if answered(port) {
            let took = begin.elapsed().as_secs_f64() * 1e3;
            remove(cri, &pod).await?;
            return Ok(took);
        }
        if begin.elapsed() > Duration::from_secs(60) {
            return Err(format!("{name} did not answer within 60 s"));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Whether `GET /` on the port answers 200.
fn answered(port: u16) -> bool {
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n";
    let mut head = [0u8; 12];
    stream.write_all(request).is_ok()
        && stream.read_exact(&mut head).is_ok()
        && head.starts_with(b"HTTP/1.1 200")
}

async fn remove(cri: &RuntimeServiceClient<Channel>, pod: &str) -> Result<(), String> {
    cri.clone()
        .stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: pod.into(),
        })
        .await
        .map_err(|e| format!("StopPodSandbox: {e}"))?;
    cri.clone()
        .remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: pod.into(),
        })
        .await
        .map_err(|e| format!("RemovePodSandbox: {e}"))?;
    Ok(())
}
