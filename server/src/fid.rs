//! Fids: what a client's 32-bit handle stands for on this side.
//!
//! A fid names a [`Node`]: a directory handle (`parent`) plus one name in it (`"."`
//! for the export root itself), and the path from the root for `..`. Operations on the
//! node are `*at(parent, name)` calls, so nothing is ever resolved by a host path. Once
//! opened, the fid also holds the open file, directory listing or xattr buffer.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use bytes::{Bytes, BytesMut};
use cap_fs_ext::DirExt;
use cap_std::fs::Dir;
use wasm9p_proto::{DirEntry, Errno, Qid};

use crate::export::Export;
use crate::shared::MAX_FIDS_PER_CONNECTION;

/// Where a fid points.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    /// Handle on the directory holding the node (the root itself for the root).
    pub parent: Arc<Dir>,
    /// The node's name in `parent`; `"."` for the export root.
    pub name: String,
    /// Names from the export root to the node (empty for the root).
    pub path: Vec<String>,
}

impl Node {
    pub fn root(export: &Export) -> Node {
        Node {
            parent: export.root.clone(),
            name: ".".into(),
            path: Vec::new(),
        }
    }

    pub fn is_root(&self) -> bool {
        self.path.is_empty()
    }
}

/// What an opened fid holds.
#[derive(Debug, Default)]
pub(crate) enum Open {
    /// Not opened.
    #[default]
    None,
    /// An open file.
    File(Arc<std::fs::File>),
    /// An open directory and, once read, a snapshot of its entries: the readdir cookie
    /// of entry `i` is `i + 1`, so offsets stay stable across calls.
    Dir {
        fd: Arc<OwnedFd>,
        listing: Option<Arc<Vec<DirEntry>>>,
    },
    /// The value (or name list) of an xattr, to be read.
    XattrRead(Bytes),
    /// An xattr being written: set on clunk.
    XattrWrite {
        name: String,
        size: u64,
        flags: u32,
        value: BytesMut,
        /// Its share of the connection's budget, returned when the fid goes.
        _reserved: XattrReservation,
    },
}

/// Bytes of xattr values a connection may have announced (Txattrcreate) and not yet
/// set: without a budget, 16,384 fids × 64 KiB would let one client pin 1 GiB.
pub(crate) const MAX_PENDING_XATTR_BYTES: usize = 1 << 20;

/// A claim on a connection's pending-xattr budget, released when dropped.
#[derive(Debug)]
pub(crate) struct XattrReservation {
    budget: Arc<std::sync::atomic::AtomicUsize>,
    bytes: usize,
}

impl XattrReservation {
    /// Claims `bytes` of `budget`, or ENOSPC when that would pass the limit.
    pub fn claim(
        budget: &Arc<std::sync::atomic::AtomicUsize>,
        bytes: usize,
    ) -> Result<Self, Errno> {
        use std::sync::atomic::Ordering;
        let before = budget.fetch_add(bytes, Ordering::AcqRel);
        if before + bytes > MAX_PENDING_XATTR_BYTES {
            budget.fetch_sub(bytes, Ordering::AcqRel);
            return Err(Errno::ENOSPC);
        }
        Ok(XattrReservation {
            budget: budget.clone(),
            bytes,
        })
    }
}

impl Drop for XattrReservation {
    fn drop(&mut self) {
        self.budget
            .fetch_sub(self.bytes, std::sync::atomic::Ordering::AcqRel);
    }
}

/// One fid.
#[derive(Debug)]
pub(crate) struct Fid {
    pub export: Arc<Export>,
    pub node: RwLock<Node>,
    pub qid: Qid,
    /// Who attached (Tattach's `n_uname`, or the server's own uid when it sent none):
    /// the owner a mapped export gives what is made through this fid.
    pub uid: u32,
    /// The node's own handle when it is a directory, opened on first use.
    dir: OnceLock<Arc<Dir>>,
    pub open: Mutex<Open>,
}

impl Drop for Fid {
    fn drop(&mut self) {
        self.export
            .live_fids
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Fid {
    pub fn new(export: Arc<Export>, node: Node, qid: Qid, uid: u32) -> Fid {
        export
            .live_fids
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Fid {
            export,
            node: RwLock::new(node),
            qid,
            uid,
            dir: OnceLock::new(),
            open: Mutex::new(Open::None),
        }
    }

    /// A fid at the same place, not opened (walk with no names).
    pub fn clone_unopened(&self) -> Fid {
        let fid = Fid::new(self.export.clone(), self.node(), self.qid, self.uid);
        if let Some(dir) = self.dir.get() {
            let _ = fid.dir.set(dir.clone());
        }
        fid
    }

    pub fn node(&self) -> Node {
        self.node.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_node(&self, node: Node) {
        *self.node.write().unwrap_or_else(|e| e.into_inner()) = node;
    }

    pub fn open_state(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The directory this fid names, as a handle to create in, walk from or list.
    pub fn dir(&self) -> Result<Arc<Dir>, Errno> {
        if !self.qid.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        if let Some(dir) = self.dir.get() {
            return Ok(dir.clone());
        }
        let node = self.node();
        let dir = if node.is_root() {
            node.parent.clone()
        } else {
            Arc::new(
                node.parent
                    .open_dir_nofollow(&node.name)
                    .map_err(|e| Errno::from(&e))?,
            )
        };
        Ok(self.dir.get_or_init(|| dir).clone())
    }

    /// Preset the directory handle (a walk that opened it on the way).
    pub fn set_dir(&self, dir: Arc<Dir>) {
        let _ = self.dir.set(dir);
    }

    pub fn read_only(&self) -> bool {
        self.export.read_only
    }
}

/// A connection's fids, bounded by [`MAX_FIDS_PER_CONNECTION`].
#[derive(Debug, Default)]
pub(crate) struct FidTable {
    fids: Mutex<HashMap<u32, Arc<Fid>>>,
    /// Fid numbers released because the rules no longer let the peer use their export:
    /// each answers EACCES once, then is free.
    revoked: Mutex<std::collections::HashSet<u32>>,
    /// The tenant whose share of fids these count against, if any.
    tenant: Option<Arc<crate::tenants::Tenant>>,
}

impl FidTable {
    /// A table counting its fids against `tenant`'s share too.
    pub fn counted(tenant: Option<Arc<crate::tenants::Tenant>>) -> FidTable {
        FidTable {
            tenant,
            ..FidTable::default()
        }
    }

    /// Gives `n` released fids back to the tenant.
    fn released(&self, n: usize) {
        if let Some(t) = &self.tenant {
            t.give_fids(n);
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Arc<Fid>>> {
        self.fids.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, fid: u32) -> Result<Arc<Fid>, Errno> {
        match self.map().get(&fid).cloned() {
            Some(f) => Ok(f),
            None => Err(self.missing(fid)),
        }
    }

    /// Why `fid` is not bound: EACCES (once) for a revoked one, else EBADF.
    fn missing(&self, fid: u32) -> Errno {
        let mut revoked = self.revoked.lock().unwrap_or_else(|e| e.into_inner());
        match revoked.remove(&fid) {
            true => Errno::EACCES,
            false => Errno::EBADF,
        }
    }

    /// Releases every fid `keep` refuses, remembering their numbers (see `revoked`).
    pub fn revoke(&self, keep: impl Fn(&Fid) -> bool) {
        let mut map = self.map();
        let gone: Vec<u32> = map
            .iter()
            .filter(|(_, f)| !keep(f))
            .map(|(n, _)| *n)
            .collect();
        let mut revoked = self.revoked.lock().unwrap_or_else(|e| e.into_inner());
        self.released(gone.len());
        for n in gone {
            map.remove(&n);
            revoked.insert(n);
        }
    }

    /// Binds a new fid number; EEXIST if it is in use, EMFILE past the bound.
    pub fn insert(&self, fid: u32, value: Fid) -> Result<(), Errno> {
        let mut map = self.map();
        if map.contains_key(&fid) {
            return Err(Errno::EEXIST);
        }
        if map.len() >= MAX_FIDS_PER_CONNECTION {
            return Err(Errno::EMFILE);
        }
        if self.tenant.as_ref().is_some_and(|t| !t.take_fid()) {
            return Err(Errno::EMFILE);
        }
        self.revoked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fid);
        map.insert(fid, Arc::new(value));
        Ok(())
    }

    /// Rebinds an existing fid number (walk with `newfid == fid`).
    pub fn replace(&self, fid: u32, value: Fid) {
        self.map().insert(fid, Arc::new(value));
    }

    pub fn remove(&self, fid: u32) -> Result<Arc<Fid>, Errno> {
        let removed = self.map().remove(&fid);
        if removed.is_some() {
            self.released(1);
        }
        removed.ok_or_else(|| self.missing(fid))
    }

    pub fn clear(&self) -> Vec<Arc<Fid>> {
        let all: Vec<Arc<Fid>> = self.map().drain().map(|(_, f)| f).collect();
        self.released(all.len());
        all
    }
}
