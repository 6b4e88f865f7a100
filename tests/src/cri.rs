//! containerd's CRI as a kubelet calls it, for the shim's CRI tests and `bench/shim`'s
//! pods a second (`cri-pods`): a client of the CRI's runtime service over containerd's
//! Unix socket, and a pod's configuration the way both run pods here (the host's
//! network, since there is no CNI; logs in a directory of the caller's).

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    LinuxContainerConfig, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption, PodSandboxConfig,
    PodSandboxMetadata,
};
use tonic::transport::{Channel, Endpoint, Uri};

/// A client of the CRI's runtime service on containerd's socket `socket`.
pub async fn connect(socket: PathBuf) -> Result<RuntimeServiceClient<Channel>, String> {
    // The URI is only a placeholder: every connection is the Unix socket.
    let endpoint = Endpoint::try_from("http://[::]:50051").map_err(|e| e.to_string())?;
    let channel = endpoint
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(
                    tokio::net::UnixStream::connect(socket).await?,
                ))
            }
        }))
        .await
        .map_err(|e| format!("containerd's CRI socket: {e}"))?;
    Ok(RuntimeServiceClient::new(channel))
}

/// Pod `name` in Kubernetes namespace `namespace`: the host's network, its logs in
/// `logs`, with `annotations`.
pub fn pod_config(
    name: &str,
    namespace: &str,
    logs: &Path,
    annotations: &[(&str, &str)],
) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: namespace.into(),
            attempt: 0,
        }),
        log_directory: logs.display().to_string(),
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        linux: Some(LinuxPodSandboxConfig {
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(host_network()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The namespaces of a pod (or its containers) on the host's network: a process
/// namespace a container, IPC the pod's.
pub fn host_network() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Node as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

/// A container's Linux settings in a pod of [`pod_config`]'s: the same namespaces.
pub fn container_linux() -> LinuxContainerConfig {
    LinuxContainerConfig {
        security_context: Some(LinuxContainerSecurityContext {
            namespace_options: Some(host_network()),
            ..Default::default()
        }),
        ..Default::default()
    }
}
