//! The programs a worker runs, by the digest of their module: each compiled (or mapped
//! from the module cache) once per worker process, whatever number of actions use it.
//!
//! A module is a blob of the content store, a file that never changes: the module
//! cache knows its digest by the file's identity and does not hash it again, and its
//! compiled code is kept on disk for the worker's restarts (`--tier auto`: a big
//! module starts on the baseline code while the optimized one is compiled in the
//! background, as everywhere). Concurrent first actions of one module share its
//! load. Each program is a [`Host`] without mounts of its own: every action brings
//! its namespace.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use wasm9p_remote::Digest;

use crate::cli::guests::{GuestArgs, Host, NamespaceArgs};
use crate::module_cache::TierChoice;

type Loading = Arc<tokio::sync::OnceCell<Result<Arc<Host>, String>>>;

/// The worker's programs.
pub(super) struct Tools {
    module_cache: PathBuf,
    loaded: Mutex<HashMap<Digest, Loading>>,
}

impl Tools {
    /// Programs whose compiled code is kept in `module_cache`.
    pub(super) fn new(module_cache: PathBuf) -> Tools {
        Tools {
            module_cache,
            loaded: Mutex::default(),
        }
    }

    /// The program of the module `digest`, whose bytes are the file `path`: loaded
    /// once (an error is one line, and kept: the same module fails the same way).
    pub(super) async fn get(&self, digest: Digest, path: &Path) -> Result<Arc<Host>, String> {
        let cell = self
            .loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(digest)
            .or_default()
            .clone();
        let args = GuestArgs {
            namespace: NamespaceArgs {
                mounts: Vec::new(),
                dirs: Vec::new(),
                no_mounts: true,
                stats: None,
            },
            env: Vec::new(),
            module_cache: Some(self.module_cache.clone()),
            no_module_cache: false,
            allow_mount: Vec::new(),
            tier: TierChoice::Auto,
            // A cancelled lease stops its guest within a tick, even mid-computation.
            interruptible: true,
        };
        let path = path.to_owned();
        cell.get_or_init(|| async move {
            // Loading maps or compiles the module: work for a thread of its own.
            let loaded = tokio::task::spawn_blocking(move || {
                Host::prepare(&args, &path).map_err(|_| {
                    "its module does not load (the reason is on the worker's stderr)".to_owned()
                })
            })
            .await
            .map_err(|e| format!("loading the module: {e}"))?;
            loaded.map(Arc::new)
        })
        .await
        .clone()
    }

    /// Waits for what the programs still store, and hands their unfinished optimized
    /// compiles to background processes (the worker is stopping).
    pub(super) fn finish(&self) {
        let loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        for cell in loaded.values() {
            if let Some(Ok(host)) = cell.get() {
                host.finish();
            }
        }
    }
}
