//! Changes to a 9p mount's names and attributes: making nodes (one helper for every
//! kind), removing, renaming and linking names, and setting attributes. Each drops
//! what it makes stale in the mount's cache, and in loose mode records what it made,
//! so that the next lookup of the name needs no round trip.

use wasm9p_proto::consts::{open, AT_REMOVEDIR};
use wasm9p_proto::{Errno, Qid};

use super::{child_path, node, parts, NinepFs};
use crate::backend::{NewNode, SetAttr};
use crate::cache::Lookup;
use crate::node::Node;

impl NinepFs {
    /// Makes `name` in `dir` on the server and records it: the parent's walk, the
    /// request for the kind, the cache's bookkeeping, the new node.
    pub(super) async fn make_node(
        &self,
        dir: &Node,
        name: &str,
        what: NewNode<'_>,
    ) -> Result<Node, Errno> {
        let mut parent = self.walk(&parts(dir)?.path).await?;
        let q = match what {
            NewNode::Dir { mode } => parent.mkdir(name, mode, 0).await?,
            NewNode::File { mode, exclusive } => {
                let flags = open::RDWR | open::CREAT | if exclusive { open::EXCL } else { 0 };
                parent.lcreate(name, flags, mode, 0).await?.qid
            }
            NewNode::Symlink { target } => parent.symlink(name, target, 0).await?,
            NewNode::Special {
                special,
                mode,
                rdev,
            } => {
                let (major, minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
                let mode = special.mode_bits() | (mode & 0o7777);
                parent.mknod(name, mode, major, minor, 0).await?
            }
        };
        self.created(dir, name, q);
        Ok(node(child_path(dir, name)?, q))
    }

    /// A name was created or replaced locally: drop what was known, record the new.
    fn created(&self, dir: &Node, name: &str, q: Qid) {
        self.cache.forget(dir.id, name);
        self.cache.dir_changed(dir.id); // its listing, mtime, and nlink for a new directory
        if self.policy().metadata() {
            self.cache.insert_dentry(dir.id, name, q);
            self.cache.complete_added(dir.id, name, q);
            // Nothing is known of what is new (a listing kept under its qid path is
            // a removed directory's whose inode number the server reused).
            self.cache.complete_forget(q.path);
        }
    }

    pub(super) async fn remove(&self, dir: &Node, name: &str, dir_only: bool) -> Result<(), Errno> {
        if self.policy().metadata() && !matches!(self.cache.lookup(dir.id, name), Lookup::Found(_))
        {
            // Learn which file goes, so that its cached attributes (reachable by
            // another hard link) can be dropped with it.
            let _ = self.lookup_remote(dir, name).await;
        }
        let fid = self.walk(&parts(dir)?.path).await?;
        let gone = self.cache.peek_lookup(dir.id, name).found();
        // (Not known: no such file, as the lookup above asked where opens defer.)
        if let Some(q) = gone {
            self.open_deferred(Some(q)).await;
        }
        let result = fid
            .unlinkat(name, if dir_only { AT_REMOVEDIR } else { 0 })
            .await;
        // Whatever happened, what we knew about the name may be wrong now.
        self.cache.forget(dir.id, name);
        self.cache.dir_changed(dir.id);
        match result {
            Ok(()) => {
                self.cache.complete_removed(dir.id, name);
                // A removed directory's listing must not outlive it: a directory
                // made later may get its inode number, and so its qid path.
                if let Some(q) = gone {
                    self.cache.complete_forget(q.path);
                }
            }
            Err(_) => self.cache.complete_forget(dir.id),
        }
        result
    }

    /// Before a change takes `file` from its path (unlink, rename): its deferred
    /// opens get their fids now, every file's for `None` (see `deferred`).
    async fn open_deferred(&self, file: Option<Qid>) {
        match file {
            Some(q) => self.deferrals.open_now(Some(q.path)).await,
            None if self.deferrals.any() => self.deferrals.open_now(None).await,
            None => {}
        }
    }

    pub(super) async fn move_name(
        &self,
        from_dir: &Node,
        from: &str,
        to_dir: &Node,
        to: &str,
    ) -> Result<(), Errno> {
        let a = self.walk(&parts(from_dir)?.path).await?;
        let b = self.walk(&parts(to_dir)?.path).await?;
        // What moves, if the cache knows: the listings then follow the move.
        let moved = self.cache.peek_lookup(from_dir.id, from).found();
        // The target as the cache knows it: its qid, or known missing (`Some(None)`).
        let target = match self.cache.peek_lookup(to_dir.id, to) {
            Lookup::Found(q) => Some(Some(q)),
            Lookup::Missing => Some(None),
            _ => None,
        };
        let replaced = target.flatten();
        // Deferred opens of the file that moves and of the one it replaces; of
        // everything where a directory moves (its files' paths change) or the cache
        // does not say what moves or goes.
        match moved {
            Some(q) if q.is_dir() => self.open_deferred(None).await,
            Some(q) => self.open_deferred(Some(q)).await,
            None => self.open_deferred(None).await,
        }
        match target {
            Some(Some(q)) => self.open_deferred(Some(q)).await,
            Some(None) => {}
            None => self.open_deferred(None).await,
        }
        let result = a.renameat(from, &b, to).await;
        self.cache.forget(from_dir.id, from);
        self.cache.forget(to_dir.id, to);
        self.cache.dir_changed(from_dir.id);
        self.cache.dir_changed(to_dir.id);
        if let (Ok(()), Some(q)) = (&result, replaced) {
            self.cache.complete_forget(q.path); // a directory replaced is gone
        }
        match (&result, moved, target) {
            // Onto another name of the same file: POSIX changes nothing, both names
            // stay.
            (Ok(()), Some(q), Some(Some(t))) if t.path == q.path => {}
            // The source and the target known: the listings follow the move. (With
            // the target unknown it might be the same file: forget, below.)
            (Ok(()), Some(q), Some(_)) => {
                self.cache.complete_removed(from_dir.id, from);
                self.cache.complete_added(to_dir.id, to, q);
            }
            _ => {
                self.cache.complete_forget(from_dir.id);
                self.cache.complete_forget(to_dir.id);
            }
        }
        result
    }

    pub(super) async fn set_attributes(&self, node: &Node, attr: &SetAttr) -> Result<(), Errno> {
        // Buffered writes land before a truncate, not after it.
        self.writers.push_out(node.id).await;
        // A new size changes the content; new permissions or owner may change who
        // can open it: either way later opens go to the server again.
        if attr.size.is_some() || attr.mode.is_some() || attr.uid.is_some() || attr.gid.is_some() {
            self.cache.mark_written(node.id);
        }
        // Opens made before a chmod or chown keep the access they were given.
        if attr.mode.is_some() || attr.uid.is_some() || attr.gid.is_some() {
            self.deferrals.open_now(Some(node.id)).await;
        }
        let result = self.walk(&parts(node)?.path).await?.setattr(attr).await;
        self.cache.forget_attr(node.id);
        result
    }

    pub(super) async fn hard_link(
        &self,
        target: &Node,
        dir: &Node,
        name: &str,
    ) -> Result<(), Errno> {
        let file = self.walk(&parts(target)?.path).await?;
        let dir_fid = self.walk(&parts(dir)?.path).await?;
        let result = dir_fid.link(&file, name).await;
        // The name is new and the target's link count changed.
        self.cache.forget(dir.id, name);
        self.cache.forget_attr(target.id);
        self.cache.dir_changed(dir.id);
        match &result {
            Ok(()) => self.cache.complete_added(dir.id, name, file.qid),
            Err(_) => self.cache.complete_forget(dir.id),
        }
        result
    }
}
