//! An open file's fid, which a lazy open (see `file`) gets only when it first needs
//! the server, and the mount's list of opens still waiting for theirs.
//!
//! A deferred open names its file by a path from the root, or by a fid walked to it
//! but not opened. Either loses the file once this mount unlinks it, renames it (or
//! a directory above it) or renames another file over it: the walk finds nothing, or
//! another file. (A chmod or chown could refuse it the open it was promised.) POSIX says an open file is kept until its last close, so every such
//! change goes through [`Deferrals`] first: the deferred opens of what it changes
//! are walked and opened on the server before the change is sent, and then read,
//! and answer fstat with a link count of 0, as any open file does. It costs nothing
//! unless a deferred open of that file is live.
//!
//! Changes made behind the mount (by another client of the server) cannot be seen
//! coming; there a deferred open's first read fails (ENOENT), which is what the
//! trust of loose mode accepts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use wasm9p_proto::consts::open;
use wasm9p_proto::Errno;

use crate::client::{Fid, Session};

/// How a deferred open gets its fid.
pub(super) enum Deferred {
    /// Walk there from this root first.
    Walk { root: Arc<Fid>, path: Vec<String> },
    /// Open this walked fid.
    Open(Arc<Fid>),
}

/// An open file's fid: there from the start, or got on first need.
pub(super) struct OpenFid {
    fid: tokio::sync::OnceCell<Arc<Fid>>,
    deferred: Option<Deferred>,
}

impl OpenFid {
    /// A fid opened already.
    pub(super) fn ready(fid: Fid) -> Arc<OpenFid> {
        Arc::new(OpenFid {
            fid: tokio::sync::OnceCell::new_with(Some(Arc::new(fid))),
            deferred: None,
        })
    }

    /// A fid to get by `deferred` on first need.
    pub(super) fn deferred(deferred: Deferred) -> Arc<OpenFid> {
        Arc::new(OpenFid {
            fid: tokio::sync::OnceCell::new(),
            deferred: Some(deferred),
        })
    }

    /// The fid, if it has been opened.
    pub(super) fn get(&self) -> Option<&Arc<Fid>> {
        self.fid.get()
    }

    /// Whether the file is found by a path from the root when first needed.
    pub(super) fn by_path(&self) -> bool {
        self.fid.get().is_none() && matches!(self.deferred, Some(Deferred::Walk { .. }))
    }

    /// The session the fid is (or will be) on.
    pub(super) fn session(&self) -> &Session {
        match (self.fid.get(), &self.deferred) {
            (Some(fid), _) => fid.session(),
            (None, Some(Deferred::Walk { root, .. })) => root.session(),
            (None, Some(Deferred::Open(walked))) => walked.session(),
            (None, None) => unreachable!("an open fid is ready or deferred"),
        }
    }

    /// The fid, walking to the file and opening it (read-only) first if deferred.
    pub(super) async fn fid(&self) -> Result<&Arc<Fid>, Errno> {
        self.fid
            .get_or_try_init(|| async {
                match self.deferred.as_ref().ok_or(Errno::EBADF)? {
                    Deferred::Walk { root, path } => {
                        let walked = root.walk(path).await.map_err(|e| e.errno)?;
                        walked.fid.lopen(open::RDONLY).await?;
                        Ok(Arc::new(walked.fid))
                    }
                    Deferred::Open(walked) => {
                        walked.lopen(open::RDONLY).await?;
                        Ok(walked.clone())
                    }
                }
            })
            .await
    }
}

/// Files listed at which the ones whose opens all closed (or got their fid) go.
const PURGE_AT: usize = 1024;

/// The mount's opens still waiting for their fid, by the file's qid path.
#[derive(Default)]
pub(super) struct Deferrals(Mutex<HashMap<u64, Vec<Weak<OpenFid>>>>);

impl Deferrals {
    /// `open`, of `file`, gets its fid on first need (or before a change to `file`).
    pub(super) fn register(&self, file: u64, open: &Arc<OpenFid>) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= PURGE_AT {
            map.retain(|_, list| {
                list.retain(Self::waiting);
                !list.is_empty()
            });
        }
        let list = map.entry(file).or_default();
        list.retain(Self::waiting);
        list.push(Arc::downgrade(open));
    }

    fn waiting(open: &Weak<OpenFid>) -> bool {
        open.upgrade().is_some_and(|o| o.get().is_none())
    }

    /// Whether any open of the mount still waits for its fid.
    pub(super) fn any(&self) -> bool {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.values().any(|list| list.iter().any(Self::waiting))
    }

    /// Opens on the server every deferred open of `file` (`None`: of every file),
    /// before a change through the mount takes the file from their paths. A failure
    /// is left for the open's own next read to meet.
    pub(super) async fn open_now(&self, file: Option<u64>) {
        let waiting: Vec<Arc<OpenFid>> = {
            let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
            let lists: Vec<Vec<Weak<OpenFid>>> = match file {
                Some(file) => map.remove(&file).into_iter().collect(),
                None => map.drain().map(|(_, list)| list).collect(),
            };
            lists
                .into_iter()
                .flatten()
                .filter_map(|w| w.upgrade())
                .filter(|o| o.get().is_none())
                .collect()
        };
        for open in waiting {
            let _ = open.fid().await;
        }
    }
}
