//! The shim as a kubelet drives it: Debian's containerd with its CRI plugin on, its
//! configuration made by `containerd-shim-wasm9p-v1 install` from Debian's default
//! `config.toml` (as a node would have it), driven over the CRI's gRPC API (the
//! `k8s-cri` crate's client) the way the kubelet calls it. Pods use the host's network
//! (no CNI here); their pause container is busybox, from an image the tests make.
//!
//! Covered: a pod sandbox through the `wasm9p` handler to READY; two containers in one
//! pod served by one shim process; stdout and stderr in the CRI log format; exit codes
//! and reasons (past the memory limit: one line on stderr); a read-only root;
//! allow-listed annotations reaching the container and others not; ExecSync and a tty
//! refused at once; attach streaming a task's output (as `kubectl attach` gets it); the memory in ContainerStats; a container restarted with its attempt + 1;
//! StopContainer: within its grace period an HTTP task's request in flight is
//! answered and the task ends with 0, past it the task is killed (137); removal
//! leaving no shim, mount or state behind; containerd restarted under a running pod
//! (on a containerd of that test's own), which finds the pod READY and its HTTP task
//! serving on the same shim, a request in flight answered across the restart. And a
//! runc pod on the same node, which the installer must not have broken.

#[path = "../containerd/mod.rs"]
mod containerd;
mod walkthrough;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::*;
use tonic::transport::Channel;
use wasm9p_tests::cri::container_linux;

use containerd::{containerd_with_cri, Containerd};

/// The CRI's namespace in containerd.
const NAMESPACE: &str = "k8s.io";
/// The sandbox (pause) image the CRI plugin is told to use: busybox, made here.
const PAUSE: &str = "docker.io/wasm9p/pause:test";
/// The image of the cli guest (`shim/tests/guests/task.c`).
const TASK: &str = "docker.io/wasm9p/task:cri";
/// The image of an HTTP component that answers slowly on request
/// (`tests/guests/http_limits.c`).
const SLOW: &str = "docker.io/wasm9p/slow:cri";

/// Debian's `/etc/containerd/config.toml` (bookworm's containerd 1.6.20).
const DEBIAN: &str = include_str!("../containerd/debian-config.toml");

/// The node's configuration: Debian's, with the runtime installed by the shim's own
/// installer; its places moved into `dir`, the sandbox image ours, and
/// `restrict_oom_score_adj` (these machines may not lower a score: docs/shim.md).
fn node_config(dir: &Path, places: &str) -> String {
    let config = dir.join("installed.toml");
    std::fs::write(&config, DEBIAN).unwrap();
    let install = std::process::Command::new(containerd::SHIM)
        .args(["install", "--config"])
        .arg(&config)
        .arg("--bin-dir")
        .arg(dir.join("node-bin"))
        .arg("--shim-config")
        .arg(dir.join("node-etc/shim.toml"))
        .output()
        .unwrap();
    assert!(install.status.success(), "{:?}", containerd::text(&install));
    let installed = std::fs::read_to_string(&config).unwrap();
    let body = installed
        .strip_prefix("version = 2\n")
        .expect("the installer keeps the version first")
        .replace("/var/lib/containerd/opt", dir.join("opt").to_str().unwrap())
        .replace(
            "  [plugins.\"io.containerd.grpc.v1.cri\"]\n",
            &format!(
                "  [plugins.\"io.containerd.grpc.v1.cri\"]\n    sandbox_image = \"{PAUSE}\"\n    \
                 restrict_oom_score_adj = true\n"
            ),
        );
    format!("version = 2\n{places}\n{body}")
}

fn node() -> &'static Containerd {
    containerd_with_cri(node_config)
}

/// The CRI's runtime service, over a containerd's socket; a runtime to await it on;
/// and that containerd.
struct Cri {
    runtime: tokio::runtime::Runtime,
    service: RuntimeServiceClient<Channel>,
    node: &'static Containerd,
}

/// The CRI of the test binary's shared containerd.
fn cri() -> Cri {
    cri_of(node())
}

fn cri_of(node: &'static Containerd) -> Cri {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let service = runtime
        .block_on(wasm9p_tests::cri::connect(node.address.clone()))
        .unwrap();
    Cri {
        runtime,
        service,
        node,
    }
}

impl Cri {
    fn call<T>(
        &self,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, tonic::Status> {
        self.runtime
            .block_on(async { tokio::time::timeout(Duration::from_secs(60), call).await })
            .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("no answer within 60 s")))
            .map(tonic::Response::into_inner)
    }
}

/// The images, imported once into `node`'s CRI namespace.
fn images(node: &Containerd) {
    static DONE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    if !done.contains(&node.address) {
        let busybox =
            std::fs::read("/bin/busybox").expect("busybox-static (scripts/test installs it)");
        node.import(
            NAMESPACE,
            PAUSE,
            &["/bin/busybox", "sleep", "2147483647"],
            &[("/bin/busybox", &busybox)],
        );
        let task = wasm9p_tests::compile_c_guest(&repo("shim/tests/guests/task.c"));
        node.import(
            NAMESPACE,
            TASK,
            &["/task.wasm"],
            &[
                ("/task.wasm", &std::fs::read(task).unwrap()),
                ("/etc/greeting", b"hello through the CRI\n"),
            ],
        );
        let slow = wasm9p_tests::c_http(&repo("tests/guests/http_limits.c"));
        node.import(
            NAMESPACE,
            SLOW,
            &["/limits.wasm"],
            &[("/limits.wasm", &std::fs::read(slow).unwrap())],
        );
        done.push(node.address.clone());
    }
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// A pod's configuration: host network, its logs in `logs`.
fn pod_config(name: &str, logs: &Path, annotations: &[(&str, &str)]) -> PodSandboxConfig {
    wasm9p_tests::cri::pod_config(name, "default", logs, annotations)
}

/// A pod running through `handler` ("": the default, runc), READY: its id.
fn run_pod(cri: &Cri, config: &PodSandboxConfig, handler: &str) -> String {
    images(cri.node);
    let request = RunPodSandboxRequest {
        config: Some(config.clone()),
        runtime_handler: handler.into(),
    };
    let reply = cri.call(cri.service.clone().run_pod_sandbox(request));
    let pod = reply
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", cri.node.log()))
        .pod_sandbox_id;
    let request = PodSandboxStatusRequest {
        pod_sandbox_id: pod.clone(),
        verbose: false,
    };
    let status = cri
        .call(cri.service.clone().pod_sandbox_status(request))
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.state, PodSandboxState::SandboxReady as i32);
    assert_eq!(status.runtime_handler, handler);
    pod
}

/// A container of the task image in the pod (as `tweak` leaves it): its id.
fn create(
    cri: &Cri,
    pod: &str,
    pod_config: &PodSandboxConfig,
    (name, attempt): (&str, u32),
    args: &[&str],
    tweak: impl FnOnce(&mut ContainerConfig),
) -> Result<String, tonic::Status> {
    let mut config = ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.into(),
            attempt,
        }),
        image: Some(ImageSpec {
            image: TASK.into(),
            ..Default::default()
        }),
        args: args.iter().map(|a| a.to_string()).collect(),
        log_path: format!("{name}_{attempt}.log"),
        linux: Some(container_linux()),
        ..Default::default()
    };
    tweak(&mut config);
    let request = CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(config),
        sandbox_config: Some(pod_config.clone()),
    };
    cri.call(cri.service.clone().create_container(request))
        .map(|r| r.container_id)
}

fn start(cri: &Cri, id: &str) {
    let request = StartContainerRequest {
        container_id: id.into(),
    };
    cri.call(cri.service.clone().start_container(request))
        .unwrap_or_else(|e| panic!("StartContainer: {e}\n{}", cri.node.log()));
}

/// The container's status, as ContainerStatus gives it.
fn status_of(cri: &Cri, id: &str) -> ContainerStatus {
    let request = ContainerStatusRequest {
        container_id: id.into(),
        verbose: false,
    };
    cri.call(cri.service.clone().container_status(request))
        .unwrap_or_else(|e| panic!("ContainerStatus: {e}\n{}", cri.node.log()))
        .status
        .expect("a status")
}

/// The container's status once it has exited.
fn exited(cri: &Cri, id: &str) -> ContainerStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = status_of(cri, id);
        if status.state == ContainerState::ContainerExited as i32 {
            return status;
        }
        assert!(Instant::now() < deadline, "{id} did not exit: {status:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The shim processes started for `id` (a pod's, as containerd names it): those whose
/// parent is not one of them (a shim's zygote and the containers it forks carry the
/// shim's command line too).
fn shim_pids(id: &str) -> Vec<u32> {
    let out = std::process::Command::new("pgrep")
        .args([
            "-f",
            &format!("[c]ontainerd-shim-wasm9p-v1 .*-id {id}( |$)"),
        ])
        .output()
        .unwrap();
    let pids: Vec<u32> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    pids.iter()
        .copied()
        .filter(|pid| parent(*pid).is_none_or(|p| !pids.contains(&p)))
        .collect()
}

fn shims_for(id: &str) -> usize {
    shim_pids(id).len()
}

/// The pod stopped and removed; what it left is checked.
fn remove_pod(cri: &Cri, pod: &str) {
    cri.call(cri.service.clone().stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: pod.into(),
    }))
    .unwrap();
    cri.call(
        cri.service
            .clone()
            .remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: pod.into(),
            }),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while shims_for(pod) > 0 {
        assert!(Instant::now() < deadline, "the pod's shim is still there");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !cri.node.mounts().contains(pod),
        "a mount of the pod is left: {}",
        cri.node.mounts()
    );
    let state = cri
        .node
        .dir
        .join("state/io.containerd.runtime.v2.task")
        .join(NAMESPACE)
        .join(pod);
    assert!(!state.exists(), "{} is left", state.display());
}

/// The lines of a CRI log: (stream, tag, text) of each.
fn log_lines(path: &Path) -> Vec<(String, String, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let mut fields = line.splitn(4, ' ');
            let time = fields.next().unwrap_or_default();
            assert!(
                time.ends_with('Z') && time.contains('T'),
                "not a CRI log line: {line}"
            );
            let stream = fields.next().unwrap_or_default().to_owned();
            let tag = fields.next().unwrap_or_default().to_owned();
            (stream, tag, fields.next().unwrap_or_default().to_owned())
        })
        .collect()
}

#[test]
fn a_wasm_pod_runs_through_the_cri_and_leaves_nothing_when_removed() {
    let cri = cri();
    let logs = tempfile::tempdir().unwrap();
    let config = pod_config(
        "wasm-pod",
        logs.path(),
        &[
            ("wasm9p.io/http", "max-instances=4"),
            ("example.com/not-ours", "x"),
        ],
    );
    let pod = run_pod(&cri, &config, "wasm9p");

    // Two containers, one shim for the pod: output on both streams, an exit code.
    let talker = create(
        &cri,
        &pod,
        &config,
        ("talker", 0),
        &["cat", "/etc/greeting", "--", "write", "/no/such/dir/x", "y"],
        |_| {},
    )
    .unwrap();
    let quitter = create(&cri, &pod, &config, ("quitter", 0), &["exit", "3"], |_| {}).unwrap();
    start(&cri, &talker);
    start(&cri, &quitter);
    let talked = exited(&cri, &talker);
    let quit = exited(&cri, &quitter);
    assert_eq!(
        (talked.exit_code, talked.reason.as_str()),
        (1, "Error"),
        "{talked:?}"
    );
    assert_eq!(
        (quit.exit_code, quit.reason.as_str()),
        (3, "Error"),
        "{quit:?}"
    );
    assert_eq!(shims_for(&pod), 1, "one shim process serves the pod");
    assert_eq!(shims_for(&talker) + shims_for(&quitter), 0);
    let lines = log_lines(&logs.path().join("talker_0.log"));
    assert!(
        lines.contains(&("stdout".into(), "F".into(), "hello through the CRI".into())),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|(stream, _, text)| stream == "stdout" && text.contains("No such file")),
        "{lines:?}"
    );

    // Allow-listed annotations reach the container; others do not.
    let info = node()
        .ctr(NAMESPACE)
        .args(["container", "info", &talker])
        .output()
        .unwrap();
    let info = containerd::text(&info).0;
    assert!(
        info.contains("\"wasm9p.io/http\": \"max-instances=4\""),
        "{info}"
    );
    assert!(!info.contains("example.com/not-ours"), "{info}");

    // A read-only root; a clean exit is Completed; a restart is attempt 1.
    let reader = create(
        &cri,
        &pod,
        &config,
        ("reader", 0),
        &["write", "/etc/x", "y"],
        |c| {
            if let Some(security) = c.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
                security.readonly_rootfs = true;
            }
        },
    )
    .unwrap();
    start(&cri, &reader);
    let read = exited(&cri, &reader);
    assert_eq!(read.exit_code, 1);
    let lines = log_lines(&logs.path().join("reader_0.log"));
    assert!(
        lines
            .iter()
            .any(|(_, _, text)| text.contains("Read-only file system")),
        "{lines:?}"
    );
    for attempt in [0, 1] {
        let id = create(
            &cri,
            &pod,
            &config,
            ("again", attempt),
            &["exit", "0"],
            |_| {},
        )
        .unwrap();
        start(&cri, &id);
        let done = exited(&cri, &id);
        assert_eq!((done.exit_code, done.reason.as_str()), (0, "Completed"));
        assert_eq!(done.metadata.unwrap().attempt, attempt);
    }

    // Past its memory limit: one line on stderr saying so, exit 1.
    let hungry = create(&cri, &pod, &config, ("hungry", 0), &["alloc", "400"], |c| {
        if let Some(linux) = c.linux.as_mut() {
            linux.resources = Some(LinuxContainerResources {
                memory_limit_in_bytes: 96 << 20,
                ..Default::default()
            });
        }
    })
    .unwrap();
    start(&cri, &hungry);
    let starved = exited(&cri, &hungry);
    assert_eq!(
        (starved.exit_code, starved.reason.as_str()),
        (1, "Error"),
        "{starved:?}"
    );
    let lines = log_lines(&logs.path().join("hungry_0.log"));
    assert!(
        lines
            .iter()
            .any(|(stream, _, text)| stream == "stderr" && text.contains("memory limit")),
        "{lines:?}"
    );

    // What a wasm task has not: exec. Refused at once, saying so, not hung. Its
    // stats have its memory (its CPU is 0: runwasi's library collects a task's stats
    // itself, and on cgroup v1 reads no CPU; docs/shim.md).
    let sleeper = create(
        &cri,
        &pod,
        &config,
        ("sleeper", 0),
        &["sleep", "30"],
        |_| {},
    )
    .unwrap();
    start(&cri, &sleeper);
    let asked = Instant::now();
    let exec = cri.call(cri.service.clone().exec_sync(ExecSyncRequest {
        container_id: sleeper.clone(),
        cmd: vec!["/bin/sh".into()],
        timeout: 10,
    }));
    let refused = exec.expect_err("an exec ran in a wasm task");
    assert!(refused.message().contains("not supported"), "{refused}");
    let stats = cri
        .call(cri.service.clone().container_stats(ContainerStatsRequest {
            container_id: sleeper.clone(),
        }))
        .unwrap()
        .stats
        .unwrap();
    let memory = stats
        .memory
        .and_then(|m| m.working_set_bytes)
        .map(|b| b.value);
    assert!(memory.is_some_and(|bytes| bytes > 0), "{memory:?}");
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "ExecSync took {:?}",
        asked.elapsed()
    );
    cri.call(cri.service.clone().stop_container(StopContainerRequest {
        container_id: sleeper.clone(),
        timeout: 5,
    }))
    .unwrap();
    assert_eq!(
        exited(&cri, &sleeper).state,
        ContainerState::ContainerExited as i32
    );

    remove_pod(&cri, &pod);
}

/// One HTTP/1.1 GET on 127.0.0.1:`port`: the status, or why there was none.
fn get(port: u16, path: &str) -> Result<u16, String> {
    use std::io::{Read, Write};
    let mut stream =
        std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(90)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: cri\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| e.to_string())?;
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status in {answer:?}"))
}

/// An HTTP container of `SLOW` started in `pod` on a free port, answering: its id and
/// port.
fn slow_server(cri: &Cri, pod: &str, config: &PodSandboxConfig, name: &str) -> (String, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let id = create(cri, pod, config, (name, 0), &[], |c| {
        c.image = Some(ImageSpec {
            image: SLOW.into(),
            ..Default::default()
        });
        c.envs = vec![KeyValue {
            key: "WASMTIME_HTTP_PROXY_SOCKET_ADDR".into(),
            value: format!("127.0.0.1:{port}"),
        }];
    })
    .unwrap();
    start(cri, &id);
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(port, "/ok") != Ok(200) {
        assert!(
            Instant::now() < deadline,
            "{name} does not answer on {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (id, port)
}

/// StopContainer with `timeout` seconds of grace.
fn stop_container(cri: &Cri, id: &str, timeout: i64) {
    let request = StopContainerRequest {
        container_id: id.into(),
        timeout,
    };
    cri.call(cri.service.clone().stop_container(request))
        .unwrap_or_else(|e| panic!("StopContainer: {e}\n{}", cri.node.log()));
}

/// The container's state.
fn state_of(cri: &Cri, id: &str) -> i32 {
    status_of(cri, id).state
}

#[test]
fn stop_container_lets_a_request_finish_within_the_grace_period_and_kills_past_it() {
    let cri = cri();
    let logs = tempfile::tempdir().unwrap();
    let config = pod_config("grace-pod", logs.path(), &[]);
    let pod = run_pod(&cri, &config, "wasm9p");
    let stop = |id: &str, timeout: i64| {
        let asked = Instant::now();
        stop_container(&cri, id, timeout);
        asked.elapsed()
    };
    // Within the grace period: SIGTERM stops the accepting, the request in flight is
    // answered, and the task ends well.
    let (patient, port) = slow_server(&cri, &pod, &config, "patient");
    let in_flight = std::thread::spawn(move || get(port, "/sleep?2000"));
    std::thread::sleep(Duration::from_millis(500));
    stop(&patient, 30);
    assert_eq!(
        in_flight.join().unwrap(),
        Ok(200),
        "answered while stopping"
    );
    let status = exited(&cri, &patient);
    assert_eq!((status.exit_code, status.reason.as_str()), (0, "Completed"));
    // Past it: containerd kills the task (SIGKILL: 137), which does not wait out the
    // minute its request would take.
    let (stubborn, port) = slow_server(&cri, &pod, &config, "stubborn");
    let in_flight = std::thread::spawn(move || get(port, "/sleep?60000"));
    std::thread::sleep(Duration::from_millis(500));
    let took = stop(&stubborn, 2);
    let status = exited(&cri, &stubborn);
    assert_eq!((status.exit_code, status.reason.as_str()), (137, "Error"));
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(50),
        "StopContainer with 2 s of grace took {took:?}"
    );
    assert!(
        in_flight.join().unwrap() != Ok(200),
        "the killed request was not answered"
    );
    remove_pod(&cri, &pod);
}

#[test]
fn a_runc_pod_still_runs_on_the_node_the_installer_changed() {
    let cri = cri();
    let logs = tempfile::tempdir().unwrap();
    let config = pod_config("runc-pod", logs.path(), &[]);
    let pod = run_pod(&cri, &config, "");
    // The pause image is busybox: a Linux container under runc, saying hello.
    let id = create(&cri, &pod, &config, ("hello", 0), &[], |c| {
        c.image = Some(ImageSpec {
            image: PAUSE.into(),
            ..Default::default()
        });
        c.command = ["/bin/busybox", "echo", "hello from runc"]
            .map(String::from)
            .to_vec();
    })
    .unwrap();
    start(&cri, &id);
    assert_eq!(exited(&cri, &id).exit_code, 0);
    let lines = log_lines(&logs.path().join("hello_0.log"));
    assert_eq!(
        lines,
        [("stdout".into(), "F".into(), "hello from runc".into())]
    );
    remove_pod(&cri, &pod);
}

#[test]
fn containerd_restarted_under_a_running_pod_finds_it_serving_and_stops_it_cleanly() {
    // A containerd of its own: the other tests' calls would fail while it is down.
    let node: &'static Containerd = Box::leak(Box::new(containerd::own_containerd_with_cri(
        node_config,
        "restart",
    )));
    let cri = cri_of(node);
    let logs = tempfile::tempdir().unwrap();
    let config = pod_config("restart-pod", logs.path(), &[]);
    let pod = run_pod(&cri, &config, "wasm9p");
    let (server, port) = slow_server(&cri, &pod, &config, "survivor");
    let shim = shim_pids(&pod);
    assert_eq!(shim.len(), 1, "one shim for the pod");

    // containerd is not on a request's path: one in flight across the restart is
    // answered.
    let in_flight = std::thread::spawn(move || get(port, "/sleep?3000"));
    std::thread::sleep(Duration::from_millis(500));
    node.restart();
    let cri = cri_of(node);
    assert_eq!(
        in_flight.join().unwrap(),
        Ok(200),
        "answered across the restart"
    );

    // The restarted containerd finds the pod READY and its container RUNNING, on the
    // same shim, which goes on serving.
    let request = PodSandboxStatusRequest {
        pod_sandbox_id: pod.clone(),
        verbose: false,
    };
    let status = cri
        .call(cri.service.clone().pod_sandbox_status(request))
        .unwrap_or_else(|e| panic!("PodSandboxStatus: {e}\n{}", node.log()))
        .status
        .unwrap();
    assert_eq!(status.state, PodSandboxState::SandboxReady as i32);
    assert_eq!(
        state_of(&cri, &server),
        ContainerState::ContainerRunning as i32
    );
    assert_eq!(shim_pids(&pod), shim, "the pod's shim was not replaced");
    assert_eq!(get(port, "/ok"), Ok(200));

    // New work in the pod runs through the same shim to its end.
    let after = create(&cri, &pod, &config, ("after", 0), &["exit", "4"], |_| {}).unwrap();
    start(&cri, &after);
    let done = exited(&cri, &after);
    assert_eq!((done.exit_code, done.reason.as_str()), (4, "Error"));
    assert_eq!(shim_pids(&pod), shim);

    // The task's end reaches the new containerd: a stop within the grace period ends
    // it with 0, and the pod goes leaving nothing.
    stop_container(&cri, &server, 30);
    let status = exited(&cri, &server);
    assert_eq!((status.exit_code, status.reason.as_str()), (0, "Completed"));
    remove_pod(&cri, &pod);
}

/// What `kubectl attach` would show of a container: containerd's streaming server at
/// the URL Attach gave, over a websocket in the `channel.k8s.io` protocol (each
/// message's first byte names its stream: 1 stdout, 2 stderr, 3 the end's status),
/// read until the server closes it (as it does when the task ends): the stdout and
/// the stderr messages' text, each after its stream's number. An error if it is not
/// closed within `within`.
fn attached(url: &str, within: Duration) -> Result<Vec<(u8, String)>, String> {
    use std::io::{Read, Write};
    let rest = url
        .strip_prefix("http://")
        .ok_or(format!("not http: {url}"))?;
    let (host, path) = rest.split_once('/').ok_or(format!("no path: {url}"))?;
    let mut stream = std::net::TcpStream::connect(host).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(within))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET /{path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Protocol: channel.k8s.io\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    let until = Instant::now() + within;
    let mut chunk = [0u8; 4096];
    let mut head_end = None;
    while Instant::now() < until {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e.to_string()),
        }
        head_end = head_end.or_else(|| bytes.windows(4).position(|w| w == b"\r\n\r\n"));
        if head_end.is_some_and(|end| frames(&bytes[end + 4..]).1) {
            break;
        }
    }
    let head_end =
        head_end.ok_or_else(|| format!("no answer: {:?}", String::from_utf8_lossy(&bytes)))?;
    let head = String::from_utf8_lossy(&bytes[..head_end]).into_owned();
    if !head.starts_with("HTTP/1.1 101") {
        return Err(head);
    }
    match frames(&bytes[head_end + 4..]) {
        (messages, true) => Ok(messages),
        (messages, false) => Err(format!("not closed within {within:?}: {messages:?}")),
    }
}

/// The whole websocket messages in `bytes` (a server's: unmasked, unfragmented), as
/// (stream, text); and whether a close message came.
fn frames(mut bytes: &[u8]) -> (Vec<(u8, String)>, bool) {
    let mut messages = Vec::new();
    while bytes.len() >= 2 {
        let opcode = bytes[0] & 0x0f;
        let (len, at) = match bytes[1] & 0x7f {
            126 if bytes.len() >= 4 => (u16::from_be_bytes([bytes[2], bytes[3]]) as usize, 4),
            127 if bytes.len() >= 10 => (
                u64::from_be_bytes(bytes[2..10].try_into().unwrap()) as usize,
                10,
            ),
            126 | 127 => break,
            n => (n as usize, 2),
        };
        let Some(payload) = bytes.get(at..at + len) else {
            break;
        };
        match opcode {
            8 => return (messages, true),
            1 | 2 if !payload.is_empty() => messages.push((
                payload[0],
                String::from_utf8_lossy(&payload[1..]).into_owned(),
            )),
            _ => {}
        }
        bytes = &bytes[at + len..];
    }
    (messages, false)
}

#[test]
fn a_tty_is_refused_at_once_and_attach_streams_a_tasks_output() {
    let cri = cri();
    let logs = tempfile::tempdir().unwrap();
    let config = pod_config("tty-pod", logs.path(), &[]);
    let pod = run_pod(&cri, &config, "wasm9p");
    // A wasm task has no terminal: its start fails at once, saying so.
    let tty = create(&cri, &pod, &config, ("tty", 0), &["exit", "0"], |c| {
        c.tty = true;
        c.stdin = true;
    })
    .unwrap();
    let asked = Instant::now();
    let refused = cri
        .call(cri.service.clone().start_container(StartContainerRequest {
            container_id: tty.clone(),
        }))
        .expect_err("a tty container started");
    assert!(
        refused.message().contains("terminal is not supported"),
        "{refused:?}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    assert_ne!(
        state_of(&cri, &tty),
        ContainerState::ContainerRunning as i32
    );

    // Attach: what the task writes once attached reaches the client, each stream on
    // its own channel.
    let talker = create(
        &cri,
        &pod,
        &config,
        ("attached", 0),
        &[
            "sleep",
            "3",
            "--",
            "cat",
            "/etc/greeting",
            "--",
            "write",
            "/no/dir/x",
            "y",
        ],
        |_| {},
    )
    .unwrap();
    start(&cri, &talker);
    let url = cri
        .call(cri.service.clone().attach(AttachRequest {
            container_id: talker.clone(),
            stdin: false,
            tty: false,
            stdout: true,
            stderr: true,
        }))
        .unwrap()
        .url;
    let messages = attached(&url, Duration::from_secs(30)).unwrap();
    let stdout: String = messages
        .iter()
        .filter(|(stream, _)| *stream == 1)
        .map(|(_, text)| text.as_str())
        .collect();
    assert!(stdout.contains("hello through the CRI"), "{messages:?}");
    assert!(stdout.contains("No such file"), "{messages:?}");
    assert_eq!(exited(&cri, &talker).exit_code, 1);
    remove_pod(&cri, &pod);
}
