//! Looking names up, reading links and attributes on a 9p mount: the cache first,
//! then what `cache=fscache` kept, a complete directory's listing, and only then the
//! server (one Twalk for the whole path, shared by everyone missing the same name at
//! once). Answers past the trust window are confirmed by their directory's version
//! (see `check`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use wasm9p_proto::{Errno, Qid};

use super::{attr_of, child_path, held_node, node, parts, NinepFs};
use crate::cache::Lookup;
use crate::client::Fid;
use crate::node::{Attr, Node};
use crate::path::SharedPath;

impl NinepFs {
    /// Walks from the attached root to `path` (one Twalk per 16 names).
    pub(super) async fn walk(&self, path: &SharedPath) -> Result<Fid, Errno> {
        self.walk_path(&path.to_vec())
            .await
            .map(|w| w.fid)
            .map_err(|e| e.errno)
    }

    /// One walk for a dentry miss, shared by everyone missing the same name at once.
    pub(super) async fn lookup_remote(&self, dir: &Node, name: &str) -> Result<Qid, Errno> {
        self.lookups
            .run((dir.id, name.to_owned()), || async {
                let path = child_path(dir, name)?.to_vec();
                let before = self.seen_before(dir);
                match self.walk_path(&path).await {
                    Ok(walk) => {
                        let q = walk.qids.last().copied().ok_or(Errno::EIO)?;
                        if self.policy().metadata() {
                            let seen = Self::seen_in(dir, &walk.qids, path.len(), before);
                            self.cache.insert_dentry_seen(dir.id, name, q, seen);
                        }
                        Ok(q)
                    }
                    Err(e) => {
                        if e.errno == Errno::ENOENT {
                            self.failed_walks.fetch_add(1, Ordering::Relaxed);
                        }
                        // Cache the absence only of this very name, not of a parent
                        // that vanished meanwhile.
                        if e.errno == Errno::ENOENT && e.index + 1 == path.len() {
                            let seen = Self::seen_in(dir, &e.qids, path.len(), before);
                            self.cache.insert_negative_seen(dir.id, name, seen);
                        }
                        Err(e.errno)
                    }
                }
            })
            .await
    }

    /// An answer about `name` in `dir` past the trust window, confirmed if the
    /// directory still has the version it was learnt under.
    async fn confirm_lookup(&self, dir: &Node, name: &str) -> Option<Result<Qid, Errno>> {
        let Lookup::Unconfirmed { found, dir_version } = self.cache.peek_lookup(dir.id, name)
        else {
            return None;
        };
        if dir_version == 0 {
            return None;
        }
        let names = parts(dir).ok()?.path.to_vec();
        if self.check_dir(dir, &names).await.ok()? != dir_version {
            return None;
        }
        self.cache.count_revalidated();
        Some(found.ok_or(Errno::ENOENT))
    }

    /// A lookup from a node that keeps its fid: one Twalk of one name from it (shared
    /// by everyone missing the same name at once), and the child keeps the fid walked
    /// to. A missing name is remembered as `lookup_remote` does (for `negtimeout`).
    async fn walk_one(&self, dir: &Node, held: &Fid, name: &str) -> Result<Node, Errno> {
        let fid = self
            .held_lookups
            .run((dir.id, name.to_owned()), || async {
                let before = self.seen_before(dir);
                match held.walk(&[name]).await {
                    Ok(walk) => Ok(Arc::new(walk.fid)),
                    Err(e) => {
                        if e.errno == Errno::ENOENT {
                            self.failed_walks.fetch_add(1, Ordering::Relaxed);
                            self.cache.insert_negative_seen(dir.id, name, before);
                        }
                        Err(e.errno)
                    }
                }
            })
            .await?;
        Ok(held_node(child_path(dir, name)?, fid))
    }

    pub(super) async fn lookup_name(&self, dir: &Node, name: &str) -> Result<Node, Errno> {
        if let Some(held) = parts(dir)?.held.as_ref() {
            return self.walk_one(dir, held, name).await;
        }
        let confirmed = match self.policy().checks() {
            true => self.confirm_lookup(dir, name).await,
            false => None,
        };
        let q = match confirmed {
            Some(answer) => answer?,
            None => match self.answer_from_store(dir, name).await {
                Some(answer) => answer?,
                None => match self.answer_from_listing(dir, name).await {
                    Some(answer) => answer?,
                    None => self.lookup_remote(dir, name).await?,
                },
            },
        };
        Ok(node(child_path(dir, name)?, q))
    }

    pub(super) async fn read_link(&self, link: &Node) -> Result<Arc<str>, Errno> {
        let n = parts(link)?;
        if let Some(held) = n.held.as_ref() {
            // No metadata cached: one Treadlink on the link's own fid.
            return Ok(Arc::from(held.readlink().await?));
        }
        if self.policy().symlinks() {
            if let Some(target) = self.link_from_store(link).await {
                return Ok(target);
            }
        }
        let asked = self.cache.asking();
        let (fid, target) = self.readlink_in_flight(&n.path, asked).await?;
        let target: Arc<str> = Arc::from(target);
        if self.policy().symlinks() {
            let read_at = if fid.qid.path == n.qid.path {
                fid.qid.version
            } else {
                0
            };
            self.cache
                .insert_symlink_read(n.qid, target.clone(), read_at, asked);
        }
        Ok(target)
    }

    pub(super) async fn attributes(&self, n: &Node) -> Result<Attr, Errno> {
        if let Some(held) = parts(n)?.held.as_ref() {
            // Writes still buffered by open files count: send them first.
            self.writers.push_out(n.id).await;
            return Ok(attr_of(&held.getattr().await?));
        }
        if self.policy().metadata() {
            if let Some(a) = self.cache.attr(n.id) {
                return Ok(attr_of(&a));
            }
        }
        // Writes still buffered by open files count: send them first.
        self.writers.push_out(n.id).await;
        if let Some(a) = self.attr_from_store(n).await {
            return Ok(attr_of(&a));
        }
        if self.policy().metadata() {
            if let Some(a) = self.cache.shared_attr(parts(n)?.qid) {
                return Ok(attr_of(&a));
            }
        }
        let path = &parts(n)?.path;
        let asked = self.cache.asking();
        // Attributes past the window may be confirmed by the walk's qid alone;
        // else the walk and the Tgetattr go together (one flight, where it flies).
        let checkable = self.policy().metadata()
            && self.policy().checks()
            && self.cache.unconfirmed_attr(n.id).is_some();
        if !checkable {
            let a = self.getattr_in_flight(path, asked).await?;
            let attr = attr_of(&a);
            if self.policy().metadata() {
                self.cache.insert_attr(a, asked);
            }
            return Ok(attr);
        }
        let fid = self.walk(path).await?;
        if self.policy().metadata() && self.policy().checks() && !path.is_empty() {
            // Attributes past the window stand if the file's version has not moved
            // (the walk's qid says; a server without versions always sends 0).
            if let Some(old) = self.cache.unconfirmed_attr(n.id) {
                if old.qid == fid.qid && fid.qid.version != 0 {
                    self.cache.count_revalidated();
                    self.cache.confirm_attr(old.clone(), asked);
                    return Ok(attr_of(&old));
                }
            }
        }
        let a = fid.getattr().await?;
        let attr = attr_of(&a);
        if self.policy().metadata() {
            self.cache.insert_attr(a, asked);
        }
        Ok(attr)
    }
}
