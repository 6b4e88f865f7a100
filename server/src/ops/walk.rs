//! Twalk: up to 16 names from a fid; never follows a symlink, `..` stops at the root.

use std::sync::Arc;

use cap_fs_ext::DirExt;
use cap_std::fs::Dir;
use wasm9p_proto::consts::MAXWELEM;
use wasm9p_proto::{Errno, Message, Qid, Rwalk, Twalk};

use super::names::check_name;
use super::seen::{qid_in, stat_node};
use crate::connection::Connection;
use crate::errors::ioerr;
use crate::export::Export;
use crate::fid::{Fid, Node};
use crate::stat;

pub(super) fn walk(s: &Connection, t: Twalk) -> Result<Message, Errno> {
    if t.wnames.len() > MAXWELEM {
        return Err(Errno::EINVAL);
    }
    let fid = s.fids.get(t.fid)?;
    if t.newfid != t.fid && s.fids.get(t.newfid).is_ok() {
        return Err(Errno::EEXIST);
    }
    let export = fid.export.clone();
    let mut cursor = Cursor {
        node: fid.node(),
        qid: fid.qid,
        dir: None,
    };
    let mut wqids = Vec::with_capacity(t.wnames.len());
    for (i, name) in t.wnames.iter().enumerate() {
        let dir = if i == 0 && cursor.qid.is_dir() {
            Some(fid.dir())
        } else {
            None
        };
        match cursor.step(&export, name, dir) {
            Ok(()) => wqids.push(cursor.qid),
            // The first name failing is an error; a later one is a partial walk that
            // reports how far it got and leaves newfid unbound.
            Err(e) if i == 0 => return Err(e),
            Err(_) => break,
        }
    }
    if wqids.len() == t.wnames.len() {
        let new = if t.wnames.is_empty() {
            fid.clone_unopened()
        } else {
            let new = Fid::new(export, cursor.node, cursor.qid, fid.uid);
            if let Some(dir) = cursor.dir {
                new.set_dir(dir);
            }
            new
        };
        if t.newfid == t.fid {
            s.fids.replace(t.fid, new);
        } else {
            s.fids.insert(t.newfid, new)?;
        }
    }
    Ok(Rwalk { wqids }.into())
}

/// Where a walk has got to.
struct Cursor {
    node: Node,
    qid: Qid,
    /// The node's own handle when it is a directory and we have one.
    dir: Option<Arc<Dir>>,
}

impl Cursor {
    fn step(
        &mut self,
        export: &Export,
        name: &str,
        known_dir: Option<Result<Arc<Dir>, Errno>>,
    ) -> Result<(), Errno> {
        if !self.qid.is_dir() {
            // Walking through a file or a symlink: symlinks are never followed here.
            return Err(Errno::ENOTDIR);
        }
        match name {
            "." => Ok(()),
            ".." => {
                if !self.node.is_root() {
                    let mut path = std::mem::take(&mut self.node.path);
                    path.pop();
                    self.node = node_at(export, path)?;
                    self.qid = stat::qid(&stat_node(export, &self.node)?, export.root_dev);
                    self.dir = None;
                }
                Ok(())
            }
            name => {
                check_name(name)?;
                if export.metadata_files() && crate::security::is_metadata_name(name) {
                    // Hidden: the model's own.
                    return Err(Errno::ENOENT);
                }
                let dir = match (self.dir.take(), known_dir) {
                    (Some(dir), _) => dir,
                    (None, Some(dir)) => dir?,
                    (None, None) => open_dir(&self.node)?,
                };
                self.qid = qid_in(export, &dir, name)?;
                let mut path = std::mem::take(&mut self.node.path);
                path.push(name.to_owned());
                self.node = Node {
                    parent: dir,
                    name: name.to_owned(),
                    path,
                };
                Ok(())
            }
        }
    }
}

/// A directory node's own handle.
pub(crate) fn open_dir(node: &Node) -> Result<Arc<Dir>, Errno> {
    if node.is_root() {
        Ok(node.parent.clone())
    } else {
        node.parent
            .open_dir_nofollow(&node.name)
            .map(Arc::new)
            .map_err(ioerr)
    }
}

/// The node at `path` below the export root, its parent opened through cap-std's
/// confined resolution (it cannot leave the root whatever the path holds).
fn node_at(export: &Export, mut path: Vec<String>) -> Result<Node, Errno> {
    let Some(name) = path.last().cloned() else {
        return Ok(Node::root(export));
    };
    path.pop();
    let parent = if path.is_empty() {
        export.root.clone()
    } else {
        Arc::new(export.root.open_dir(path.join("/")).map_err(ioerr)?)
    };
    path.push(name.clone());
    Ok(Node { parent, name, path })
}
