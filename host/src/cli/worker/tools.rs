//! The programs a worker runs, by the digest of their module: each compiled (or mapped
//! from the module cache) once per worker process, whatever number of actions use it.
//!
//! A module is a blob of the content store, a file that never changes: the module
//! cache knows its digest by the file's identity and does not hash it again, and its
//! compiled code is kept on disk for the worker's restarts (`--tier auto`: a big
//! module starts on the baseline code while the optimized one is compiled in the
//! background, as everywhere). Concurrent first actions of one module share its
//! load. Each program is a [`GuestEngine`] without mounts of its own: every action
//! brings its namespace. A module that does not load fails its actions with the
//! reason.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use wasm9p_remote::Digest;

use crate::cli::engines::{engine_for, tier_from_env};
use crate::engine::GuestEngine;
use crate::module_cache::ModuleCache;

type Loading = Arc<tokio::sync::OnceCell<Result<Arc<GuestEngine>, String>>>;

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
    pub(super) async fn get(
        &self,
        digest: Digest,
        path: &Path,
    ) -> Result<Arc<GuestEngine>, String> {
        let cell = self
            .loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(digest)
            .or_default()
            .clone();
        let cache = tier_from_env(ModuleCache::at(&self.module_cache))
            .map_err(|_| "WASM9P_TIER_FROM is not a number of bytes".to_owned())?;
        let path = path.to_owned();
        cell.get_or_init(|| async move {
            // Loading maps or compiles the module: work for a thread of its own.
            let loaded = tokio::task::spawn_blocking(move || {
                engine_for(&path, cache)
                    // A cancelled lease stops its guest within a tick, even
                    // mid-computation.
                    .interruptible(true)
                    .build()
                    .map_err(|e| format!("its module does not load: {e}"))
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
