//! A stand-in for the few `crictl` commands the book's CRI walkthrough uses
//! (docs/shim.md, "Walkthrough: a pod through containerd's CRI"), for machines without
//! crictl (no Debian package has it): the same command lines, the same JSON files,
//! the same CRI calls (the runtime service's gRPC API, as the kubelet calls it).
//! `shim/tests/cri/walkthrough.rs` runs the walkthrough with it. It is not crictl:
//! it knows these commands and these configuration fields, and refuses anything else
//! by name rather than ignore it.
//!
//! ```text
//! crictl [--runtime-endpoint unix:///run/containerd/containerd.sock] COMMAND
//!   runp [--runtime HANDLER] POD.json        RunPodSandbox; prints the pod's ID
//!   create POD-ID CONTAINER.json POD.json     CreateContainer; prints its ID
//!   start ID                                  StartContainer; prints the ID
//!   inspect ID                                ContainerStatus, as JSON
//!   logs ID                                   the container's log, its lines as written
//!   pods -q [--name NAME]                     the pods' IDs (of that name)
//!   stopp POD-ID / rmp POD-ID                 StopPodSandbox / RemovePodSandbox
//! ```
//!
//! The endpoint is `--runtime-endpoint` (`-r`), else `CONTAINER_RUNTIME_ENDPOINT`, else
//! containerd's socket, as crictl takes it.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::*;
use serde::Deserialize;
use tonic::transport::Channel;

const DEFAULT_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if let Err(e) = runtime.block_on(run(args)) {
        eprintln!("crictl (wasm9p's stand-in): {e}");
        std::process::exit(1);
    }
}

async fn run(mut args: Vec<String>) -> Result<(), String> {
    let mut endpoint =
        std::env::var("CONTAINER_RUNTIME_ENDPOINT").unwrap_or_else(|_| DEFAULT_ENDPOINT.to_owned());
    while args.first().is_some_and(|a| a.starts_with('-')) {
        let flag = args.remove(0);
        match flag.as_str() {
            "--runtime-endpoint" | "-r" if !args.is_empty() => endpoint = args.remove(0),
            _ => return Err(format!("{flag}: not an option this stand-in knows")),
        }
    }
    let socket = endpoint
        .strip_prefix("unix://")
        .ok_or_else(|| format!("{endpoint}: only unix:// endpoints"))?;
    let mut cri = wasm9p_tests::cri::connect(PathBuf::from(socket)).await?;
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["runp", "--runtime", handler, pod] => runp(&mut cri, handler, pod).await,
        ["runp", pod] => runp(&mut cri, "", pod).await,
        ["create", pod_id, container, pod] => create(&mut cri, pod_id, container, pod).await,
        ["start", id] => {
            let request = StartContainerRequest {
                container_id: id.to_string(),
            };
            cri.start_container(request).await.map_err(status)?;
            println!("{id}");
            Ok(())
        }
        ["inspect", id] => {
            let status = container_status(&mut cri, id).await?;
            let state = ContainerState::try_from(status.state)
                .map(|s| s.as_str_name())
                .unwrap_or("CONTAINER_UNKNOWN");
            let json = serde_json::json!({ "status": {
                "id": status.id, "state": state, "exitCode": status.exit_code,
                "reason": status.reason, "logPath": status.log_path,
            }});
            println!("{json:#}");
            Ok(())
        }
        ["logs", id] => logs(&mut cri, id).await,
        ["pods", "-q"] => pods(&mut cri, None).await,
        ["pods", "-q", "--name", name] | ["pods", "--name", name, "-q"] => {
            pods(&mut cri, Some(name)).await
        }
        ["stopp", id] => {
            let request = StopPodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            };
            cri.stop_pod_sandbox(request).await.map_err(status)?;
            println!("Stopped sandbox {id}");
            Ok(())
        }
        ["rmp", id] => {
            let request = RemovePodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            };
            cri.remove_pod_sandbox(request).await.map_err(status)?;
            println!("Removed sandbox {id}");
            Ok(())
        }
        _ => Err(format!(
            "{}: not a command this stand-in knows (runp, create, start, inspect, logs, \
             pods -q [--name NAME], stopp, rmp)",
            args.join(" ")
        )),
    }
}

/// The pods' IDs, a line each; with `name`, only the pods of that name (crictl takes
/// a pattern; the stand-in, the name whole).
async fn pods(cri: &mut RuntimeServiceClient<Channel>, name: Option<&str>) -> Result<(), String> {
    let pods = cri
        .list_pod_sandbox(ListPodSandboxRequest { filter: None })
        .await
        .map_err(status)?
        .into_inner();
    for pod in pods.items {
        let named = pod.metadata.as_ref().map(|m| m.name.as_str());
        if name.is_none() || named == name {
            println!("{}", pod.id);
        }
    }
    Ok(())
}

fn status(e: tonic::Status) -> String {
    format!("{:?}: {}", e.code(), e.message())
}

async fn runp(
    cri: &mut RuntimeServiceClient<Channel>,
    handler: &str,
    pod: &str,
) -> Result<(), String> {
    let request = RunPodSandboxRequest {
        config: Some(read::<PodJson>(pod)?.into()),
        runtime_handler: handler.to_owned(),
    };
    let ran = cri.run_pod_sandbox(request).await.map_err(status)?;
    println!("{}", ran.into_inner().pod_sandbox_id);
    Ok(())
}

async fn create(
    cri: &mut RuntimeServiceClient<Channel>,
    pod_id: &str,
    container: &str,
    pod: &str,
) -> Result<(), String> {
    let request = CreateContainerRequest {
        pod_sandbox_id: pod_id.to_owned(),
        config: Some(read::<ContainerJson>(container)?.into()),
        sandbox_config: Some(read::<PodJson>(pod)?.into()),
    };
    let created = cri.create_container(request).await.map_err(status)?;
    println!("{}", created.into_inner().container_id);
    Ok(())
}

async fn container_status(
    cri: &mut RuntimeServiceClient<Channel>,
    id: &str,
) -> Result<ContainerStatus, String> {
    let request = ContainerStatusRequest {
        container_id: id.to_owned(),
        verbose: false,
    };
    cri.container_status(request)
        .await
        .map_err(status)?
        .into_inner()
        .status
        .ok_or_else(|| format!("{id}: no status"))
}

/// The container's log (the CRI's format: `TIME STREAM TAG MESSAGE` a line, `P` for a
/// part of a line, `F` for its end), each message to the stream it came from.
async fn logs(cri: &mut RuntimeServiceClient<Channel>, id: &str) -> Result<(), String> {
    let path = container_status(cri, id).await?.log_path;
    let log = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let (mut stdout, mut stderr) = (std::io::stdout().lock(), std::io::stderr().lock());
    for line in log.lines() {
        let mut fields = line.splitn(4, ' ');
        let (_time, stream, tag) = (fields.next(), fields.next(), fields.next());
        let message = fields.next().unwrap_or("");
        let out: &mut dyn Write = match stream {
            Some("stderr") => &mut stderr,
            _ => &mut stdout,
        };
        let end = if tag == Some("P") { "" } else { "\n" };
        write!(out, "{message}{end}").map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn read<T: for<'de> Deserialize<'de>>(path: &str) -> Result<T, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))
}

// The configuration files: crictl's JSON (the CRI's messages, fields in snake_case),
// only the fields the walkthrough uses; any other is an error, not ignored.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PodJson {
    metadata: PodMetadataJson,
    #[serde(default)]
    log_directory: String,
    #[serde(default)]
    annotations: HashMap<String, String>,
    #[serde(default)]
    linux: Option<LinuxJson>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PodMetadataJson {
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    attempt: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinuxJson {
    #[serde(default)]
    security_context: SecurityJson,
    #[serde(default)]
    resources: Option<ResourcesJson>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SecurityJson {
    #[serde(default)]
    namespace_options: Option<NamespacesJson>,
    #[serde(default)]
    readonly_rootfs: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NamespacesJson {
    #[serde(default)]
    network: i32,
    #[serde(default)]
    pid: i32,
    #[serde(default)]
    ipc: i32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourcesJson {
    memory_limit_in_bytes: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContainerJson {
    metadata: ContainerMetadataJson,
    image: ImageJson,
    #[serde(default)]
    command: Vec<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    envs: Vec<KeyValueJson>,
    #[serde(default)]
    annotations: HashMap<String, String>,
    #[serde(default)]
    log_path: String,
    #[serde(default)]
    linux: Option<LinuxJson>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContainerMetadataJson {
    name: String,
    #[serde(default)]
    attempt: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImageJson {
    image: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyValueJson {
    key: String,
    value: String,
}

impl From<NamespacesJson> for NamespaceOption {
    fn from(n: NamespacesJson) -> Self {
        NamespaceOption {
            network: n.network,
            pid: n.pid,
            ipc: n.ipc,
            ..Default::default()
        }
    }
}

impl From<ResourcesJson> for LinuxContainerResources {
    fn from(r: ResourcesJson) -> Self {
        LinuxContainerResources {
            memory_limit_in_bytes: r.memory_limit_in_bytes,
            ..Default::default()
        }
    }
}

impl From<PodJson> for PodSandboxConfig {
    fn from(pod: PodJson) -> Self {
        let linux = pod.linux.map(|linux| LinuxPodSandboxConfig {
            resources: linux.resources.map(Into::into),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: linux.security_context.namespace_options.map(Into::into),
                readonly_rootfs: linux.security_context.readonly_rootfs,
                ..Default::default()
            }),
            ..Default::default()
        });
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: pod.metadata.name,
                uid: pod.metadata.uid,
                namespace: pod.metadata.namespace,
                attempt: pod.metadata.attempt,
            }),
            log_directory: pod.log_directory,
            annotations: pod.annotations,
            linux,
            ..Default::default()
        }
    }
}

impl From<ContainerJson> for ContainerConfig {
    fn from(c: ContainerJson) -> Self {
        let linux = c.linux.map(|linux| LinuxContainerConfig {
            resources: linux.resources.map(Into::into),
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: linux.security_context.namespace_options.map(Into::into),
                readonly_rootfs: linux.security_context.readonly_rootfs,
                ..Default::default()
            }),
        });
        ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: c.metadata.name,
                attempt: c.metadata.attempt,
            }),
            image: Some(ImageSpec {
                image: c.image.image,
                ..Default::default()
            }),
            command: c.command,
            args: c.args,
            envs: c
                .envs
                .into_iter()
                .map(|kv| KeyValue {
                    key: kv.key,
                    value: kv.value,
                })
                .collect(),
            annotations: c.annotations,
            log_path: c.log_path,
            linux,
            ..Default::default()
        }
    }
}
