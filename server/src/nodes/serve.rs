//! A [`super::NodeFs`] export as the shell (`crate::shell`) serves it: the same
//! session rules, bounds and constants as a host-directory export (Tversion first, bad
//! frames answered, `MAX_INFLIGHT_PER_CONNECTION` requests at once, Tflush), with
//! what a request does written here. Every request runs in a task of its own (so that
//! a file system that can answer several calls at once does), its reply through the
//! shell's writer.
//!
//! A fid is a node plus the walk that reached it (ancestors and names, for `..`,
//! `Trename` and `Tremove`); at most [`MAX_FIDS_PER_CONNECTION`] of them (the next
//! attach or walk is EMFILE). A Treaddir at offset 0 asks for the listing and keeps it
//! with the fid; later offsets page through that snapshot (a large directory costs one
//! call per pass, not one per reply).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use wasm9p_proto::consts::mode::{S_IFDIR, S_IFLNK, S_IFREG};
use wasm9p_proto::consts::{
    dt, getattr, open, qid as qt, AT_REMOVEDIR, IOHDRSZ, MAX_MSIZE, MIN_MSIZE, V9FS_MAGIC,
};
use wasm9p_proto::transport::BoxStream;
use wasm9p_proto::*;

use super::fs::{Attr, Dirent, Kind, New, NodeFs};
use crate::shared::MAX_FIDS_PER_CONNECTION;
use crate::shell::{self, Later, Now, Served};

/// One fid: the node, how the walk got there, and whether it is open.
#[derive(Clone, Debug)]
struct FidState {
    node: u64,
    /// `(node, name)` of each step from the root: `..` pops, Trename needs the last.
    steps: Vec<(u64, String)>,
    open: Option<u32>,
    /// The directory's listing as read at offset 0: later offsets page through this
    /// snapshot instead of asking the plugin for the whole listing again.
    listing: Option<Arc<Vec<Dirent>>>,
}

impl FidState {
    fn parent(&self, root: u64) -> u64 {
        match self.steps.len() {
            0 | 1 => root,
            n => self.steps[n - 2].0,
        }
    }
}

struct Conn {
    fs: Arc<dyn NodeFs>,
    fids: Mutex<HashMap<u32, FidState>>,
    msize: AtomicU32,
}

/// Serves 9P2000.L for `fs` on `stream` until the client goes away.
pub async fn serve(fs: Arc<dyn NodeFs>, stream: BoxStream) {
    let conn = Arc::new(Conn {
        fs,
        fids: Mutex::new(HashMap::new()),
        msize: AtomicU32::new(MIN_MSIZE),
    });
    shell::run(conn, stream, "node export", MAX_MSIZE).await;
}

impl Served for Conn {
    fn version(&self, msize: Option<u32>) {
        self.fids.lock().unwrap_or_else(|e| e.into_inner()).clear();
        if let Some(msize) = msize {
            self.msize.store(msize, Ordering::Relaxed);
        }
    }

    fn answer_now(&self, msg: Message) -> Now {
        // Every call of a node file system may wait (a plugin, a lazy fetch).
        Now::Later(msg)
    }

    fn answer_later(self: &Arc<Self>, msg: Message, later: Later) {
        let conn = self.clone();
        tokio::spawn(async move { later.reply(conn.handle(msg).await) });
    }

    fn closed(&self) {
        self.fids.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

fn qid_of(node: u64, attr: &Attr) -> Qid {
    Qid {
        ty: qid_type(attr.kind),
        version: attr.version,
        path: node,
    }
}

fn qid_type(kind: Kind) -> u8 {
    match kind {
        Kind::Directory => qt::DIR,
        Kind::Symlink => qt::SYMLINK,
        Kind::File => 0,
    }
}

fn type_bits(kind: Kind) -> u32 {
    match kind {
        Kind::Directory => S_IFDIR,
        Kind::Symlink => S_IFLNK,
        Kind::File => S_IFREG,
    }
}

fn dirent_type(kind: Kind) -> u8 {
    match kind {
        Kind::Directory => dt::DIR,
        Kind::Symlink => dt::LNK,
        Kind::File => dt::REG,
    }
}

/// A name a client gave for an entry: one path component (see `crate::ops::names::check_name`).
fn check_name(name: &str) -> Result<String, Errno> {
    crate::ops::names::check_name(name)?;
    Ok(name.to_owned())
}

impl Conn {
    fn fid(&self, fid: u32) -> Result<FidState, Errno> {
        self.fids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&fid)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    /// Replaces the state of `fid` (EBADF if it was clunked meanwhile).
    fn set_fid(&self, fid: u32, state: FidState) -> Result<(), Errno> {
        let mut fids = self.fids.lock().unwrap_or_else(|e| e.into_inner());
        *fids.get_mut(&fid).ok_or(Errno::EBADF)? = state;
        Ok(())
    }

    /// Binds a new fid number: EEXIST if it is in use, EMFILE past the bound.
    fn bind_fid(&self, fid: u32, state: FidState) -> Result<(), Errno> {
        let mut fids = self.fids.lock().unwrap_or_else(|e| e.into_inner());
        if fids.contains_key(&fid) {
            return Err(Errno::EEXIST);
        }
        if fids.len() >= MAX_FIDS_PER_CONNECTION {
            return Err(Errno::EMFILE);
        }
        fids.insert(fid, state);
        Ok(())
    }

    fn writable(&self) -> Result<(), Errno> {
        if self.fs.writable() {
            Ok(())
        } else {
            Err(Errno::EROFS)
        }
    }

    async fn qid(&self, node: u64) -> Result<Qid, Errno> {
        Ok(qid_of(node, &self.fs.getattr(node).await?))
    }

    async fn handle(&self, msg: Message) -> Result<Message, Errno> {
        match msg {
            Message::Tattach(t) => self.attach(t).await,
            Message::Twalk(t) => self.walk(t).await,
            Message::Tgetattr(t) => self.getattr(t).await,
            Message::Tsetattr(t) => self.setattr(t).await,
            Message::Tlopen(t) => self.lopen(t).await,
            Message::Tread(t) => self.read(t).await,
            Message::Twrite(t) => self.write(t).await,
            Message::Treaddir(t) => self.readdir(t).await,
            Message::Tlcreate(t) => self.lcreate(t).await,
            Message::Tmkdir(t) => self.mkdir(t).await,
            Message::Tsymlink(t) => self.symlink(t).await,
            Message::Tunlinkat(t) => self.unlinkat(t).await,
            Message::Trenameat(t) => self.renameat(t).await,
            Message::Trename(t) => self.rename(t).await,
            Message::Tremove(t) => self.remove(t).await,
            Message::Tclunk(t) => self.clunk(t).await,
            Message::Tstatfs(t) => self.statfs(t).await,
            Message::Tfsync(t) => self.fsync(t).await,
            Message::Treadlink(t) => Ok(Rreadlink {
                target: self.fs.readlink(self.fid(t.fid)?.node).await?,
            }
            .into()),
            _ => Err(Errno::EOPNOTSUPP),
        }
    }

    async fn attach(&self, t: Tattach) -> Result<Message, Errno> {
        let fs = &self.fs;
        let root = fs.root();
        let qid = self.qid(root).await?;
        self.bind_fid(
            t.fid,
            FidState {
                node: root,
                steps: Vec::new(),
                open: None,
                listing: None,
            },
        )?;
        Ok(Rattach { qid }.into())
    }

    async fn walk(&self, t: Twalk) -> Result<Message, Errno> {
        let fs = &self.fs;
        let from = self.fid(t.fid)?;
        if t.newfid != t.fid && self.fid(t.newfid).is_ok() {
            return Err(Errno::EEXIST);
        }
        let mut at = FidState {
            open: None,
            listing: None,
            ..from
        };
        let mut wqids = Vec::new();
        for (i, name) in t.wnames.iter().enumerate() {
            let step = async {
                if name == ".." {
                    at.steps.pop();
                    at.node = at.steps.last().map_or(fs.root(), |s| s.0);
                } else if name != "." {
                    at.node = fs.lookup(at.node, &check_name(name)?).await?;
                    at.steps.push((at.node, name.clone()));
                }
                self.qid(at.node).await
            };
            match step.await {
                Ok(qid) => wqids.push(qid),
                Err(e) if i == 0 => return Err(e),
                Err(_) => return Ok(Rwalk { wqids }.into()),
            }
        }
        if t.newfid == t.fid {
            self.set_fid(t.newfid, at)?;
        } else {
            self.bind_fid(t.newfid, at)?;
        }
        Ok(Rwalk { wqids }.into())
    }

    async fn getattr(&self, t: Tgetattr) -> Result<Message, Errno> {
        let fs = &self.fs;
        let node = self.fid(t.fid)?.node;
        let a = fs.getattr(node).await?;
        Ok(Rgetattr {
            valid: getattr::BASIC,
            qid: qid_of(node, &a),
            mode: type_bits(a.kind) | (a.mode & 0o7777),
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            nlink: a.nlink,
            size: a.size,
            blksize: 4096,
            blocks: a.size.div_ceil(512),
            atime_sec: a.mtime_sec,
            atime_nsec: u64::from(a.mtime_nsec),
            mtime_sec: a.mtime_sec,
            mtime_nsec: u64::from(a.mtime_nsec),
            ctime_sec: a.mtime_sec,
            ctime_nsec: u64::from(a.mtime_nsec),
            ..Default::default()
        }
        .into())
    }

    async fn setattr(&self, t: Tsetattr) -> Result<Message, Errno> {
        let fs = &self.fs;
        use wasm9p_proto::consts::setattr as v;
        let node = self.fid(t.fid)?.node;
        // A node file system keeps its own times and has no owners or
        // permission changes: saying "done" to those would be a lie.
        if t.valid & (v::MODE | v::UID | v::GID | v::ATIME | v::MTIME) != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if t.valid & v::SIZE != 0 {
            self.writable()?;
            fs.set_size(node, t.size).await?;
        }
        Ok(Rsetattr {}.into())
    }

    async fn lopen(&self, t: Tlopen) -> Result<Message, Errno> {
        let fs = &self.fs;
        let mut state = self.fid(t.fid)?;
        let a = fs.getattr(state.node).await?;
        let writes = t.flags & open::ACCMODE != open::RDONLY || t.flags & open::TRUNC != 0;
        if writes {
            if a.kind == Kind::Directory {
                return Err(Errno::EISDIR);
            }
            self.writable()?;
        }
        if t.flags & open::TRUNC != 0 && a.size > 0 {
            fs.set_size(state.node, 0).await?;
        }
        if !writes && a.kind == Kind::File {
            fs.opened_for_reading(state.node);
        }
        state.open = Some(t.flags);
        state.listing = None;
        let qid = self.qid(state.node).await?;
        self.set_fid(t.fid, state)?;
        Ok(Rlopen { qid, iounit: 0 }.into())
    }

    async fn read(&self, t: Tread) -> Result<Message, Errno> {
        let fs = &self.fs;
        let node = self.fid(t.fid)?.node;
        let most = self.msize.load(Ordering::Relaxed).saturating_sub(IOHDRSZ);
        let count = t.count.min(most);
        let data = fs.read(node, t.offset, count).await?;
        if data.len() > count as usize {
            return Err(Errno::EIO);
        }
        Ok(Rread { data: Data(data) }.into())
    }

    async fn write(&self, t: Twrite) -> Result<Message, Errno> {
        let fs = &self.fs;
        self.writable()?;
        let node = self.fid(t.fid)?.node;
        let len = t.data.0.len();
        let count = fs.write(node, t.offset, t.data.0).await?;
        if count as usize > len {
            return Err(Errno::EIO);
        }
        Ok(Rwrite { count }.into())
    }

    async fn readdir(&self, t: Treaddir) -> Result<Message, Errno> {
        let fs = &self.fs;
        let state = self.fid(t.fid)?;
        let entries = match &state.listing {
            Some(listing) if t.offset > 0 => listing.clone(),
            _ => {
                let listing = Arc::new(fs.readdir(state.node).await?);
                let mut fids = self.fids.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(state) = fids.get_mut(&t.fid) {
                    state.listing = Some(listing.clone());
                }
                listing
            }
        };
        let mut packer = DirEntryPacker::new(t.count as usize);
        for (i, e) in entries.iter().enumerate().skip(t.offset as usize) {
            let entry = DirEntry {
                qid: Qid {
                    ty: qid_type(e.kind),
                    version: 0,
                    path: e.node,
                },
                offset: i as u64 + 1,
                ty: dirent_type(e.kind),
                name: e.name.clone(),
            };
            if !packer.push(&entry) {
                break;
            }
        }
        Ok(Rreaddir {
            data: Data(packer.finish()),
        }
        .into())
    }

    async fn lcreate(&self, t: Tlcreate) -> Result<Message, Errno> {
        let fs = &self.fs;
        self.writable()?;
        let mut dir = self.fid(t.fid)?;
        let name = check_name(&t.name)?;
        let node = fs
            .create(dir.node, &name, New::File(t.mode & 0o7777))
            .await?;
        dir.node = node;
        dir.steps.push((node, name));
        dir.open = Some(t.flags);
        let qid = self.qid(node).await?;
        self.set_fid(t.fid, dir)?;
        Ok(Rlcreate { qid, iounit: 0 }.into())
    }

    async fn mkdir(&self, t: Tmkdir) -> Result<Message, Errno> {
        let new = New::Directory(t.mode & 0o7777);
        let qid = self.make(t.dfid, &t.name, new).await?;
        Ok(Rmkdir { qid }.into())
    }

    async fn symlink(&self, t: Tsymlink) -> Result<Message, Errno> {
        let qid = self.make(t.fid, &t.name, New::Symlink(&t.symtgt)).await?;
        Ok(Rsymlink { qid }.into())
    }

    /// Makes `name` in the directory of `dir_fid` as `new` says (the fid stays where
    /// it is): the new node's qid.
    async fn make(&self, dir_fid: u32, name: &str, new: New<'_>) -> Result<Qid, Errno> {
        self.writable()?;
        let dir = self.fid(dir_fid)?.node;
        let node = self.fs.create(dir, &check_name(name)?, new).await?;
        self.qid(node).await
    }

    async fn unlinkat(&self, t: Tunlinkat) -> Result<Message, Errno> {
        let fs = &self.fs;
        self.writable()?;
        let dir = self.fid(t.dirfd)?.node;
        let name = check_name(&t.name)?;
        let target = fs.getattr(fs.lookup(dir, &name).await?).await?;
        match (target.kind == Kind::Directory, t.flags & AT_REMOVEDIR != 0) {
            (true, false) => return Err(Errno::EISDIR),
            (false, true) => return Err(Errno::ENOTDIR),
            _ => {}
        }
        fs.unlink(dir, &name).await?;
        Ok(Runlinkat {}.into())
    }

    async fn renameat(&self, t: Trenameat) -> Result<Message, Errno> {
        let fs = &self.fs;
        self.writable()?;
        let from = self.fid(t.olddirfid)?.node;
        let to = self.fid(t.newdirfid)?.node;
        fs.rename(from, &check_name(&t.oldname)?, to, &check_name(&t.newname)?)
            .await?;
        Ok(Rrenameat {}.into())
    }

    async fn rename(&self, t: Trename) -> Result<Message, Errno> {
        let fs = &self.fs;
        self.writable()?;
        let file = self.fid(t.fid)?;
        let (_, name) = file.steps.last().cloned().ok_or(Errno::EBUSY)?;
        let to = self.fid(t.dfid)?.node;
        fs.rename(file.parent(fs.root()), &name, to, &check_name(&t.name)?)
            .await?;
        Ok(Rrename {}.into())
    }

    async fn remove(&self, t: Tremove) -> Result<Message, Errno> {
        let fs = &self.fs;
        let file = self
            .fids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&t.fid)
            .ok_or(Errno::EBADF)?;
        self.writable()?;
        let (_, name) = file.steps.last().cloned().ok_or(Errno::EBUSY)?;
        fs.unlink(file.parent(fs.root()), &name).await?;
        Ok(Rremove {}.into())
    }

    async fn clunk(&self, t: Tclunk) -> Result<Message, Errno> {
        self.fids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&t.fid)
            .ok_or(Errno::EBADF)?;
        Ok(Rclunk {}.into())
    }

    async fn statfs(&self, t: Tstatfs) -> Result<Message, Errno> {
        self.fid(t.fid)?;
        Ok(Rstatfs {
            ty: V9FS_MAGIC,
            bsize: 4096,
            namelen: 255,
            ..Default::default()
        }
        .into())
    }

    async fn fsync(&self, t: Tfsync) -> Result<Message, Errno> {
        self.fid(t.fid)?;
        Ok(Rfsync {}.into())
    }
}

/// Serves `fs` to every client of `listener` (a Unix socket, vsock, a hybrid vsock
/// socket, tcp), each connection in a task of its own, until the listener fails.
pub async fn serve_on(fs: Arc<dyn NodeFs>, listener: wasm9p_proto::transport::Listener) {
    while let Ok((stream, _peer)) = listener.accept().await {
        tokio::spawn(serve(fs.clone(), stream));
    }
}
