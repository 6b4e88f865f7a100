//! The guest's namespace in a container: what `wasm9p run --mount` would be given.
//! - `/`: the container's root, served by the embedded 9P server with the node's
//!   `root_options` (`cache=loose`: the rootfs is the container's own, so every change
//!   comes through this mount), `ro` when the spec's root is read-only. Never copied.
//! - Each volume at its destination, its own export with the node's `volume_options`
//!   (`cache=loose,revalidate=1000`: another container or the kubelet may change it),
//!   `ro` as the spec says. A volume that is a file (`/etc/hosts`) is reached through
//!   the root's export, which crosses into it as the kernel does.
//! - The annotation's node-side servers, dialed through the broker.
//! - `/proc`, `/sys` and `/dev` hidden by empty mounts: through the root's export a
//!   guest would otherwise reach the shim process's own `/proc/self/mem`.

use std::path::Path;
use std::sync::Arc;

use wasm9p_guest_fs::client::Dialer;
use wasm9p_host::mounts::{MountTable, MountTableBuilder};

use crate::broker::{BrokerDial, Described};
use crate::bundle::SYSTEM_DIRS;

/// The mounts of a container's guest, as `described` says, node-side servers dialed
/// through `dial`; the error is one line.
pub fn mounts(described: &Described, dial: Arc<BrokerDial>) -> Result<MountTableBuilder, String> {
    let bundle = &described.bundle;
    let ro = |read_only: bool| if read_only { ",ro" } else { "" };
    let mut specs = vec![format!(
        "type=9p,export=/,target=/,{}{}",
        described.root_options,
        ro(bundle.root_read_only)
    )];
    for volume in &bundle.volumes {
        if Path::new(&volume.destination).is_dir() {
            specs.push(format!(
                "type=9p,export={0},target={0},{1}{2}",
                volume.destination,
                described.volume_options,
                ro(volume.read_only)
            ));
        }
    }
    specs.extend(bundle.node_mounts.iter().cloned());
    specs.extend(
        SYSTEM_DIRS
            .iter()
            .filter(|dir| Path::new(dir).exists())
            .map(|dir| format!("type=empty,target={dir}")),
    );
    let mut table = MountTable::builder().dialer(Dialer::new(dial));
    for spec in &specs {
        table = table.mount(spec).map_err(|e| e.to_string())?;
    }
    Ok(table)
}
