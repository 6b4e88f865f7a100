//! The writable layer over an input tree: what the action made, and what it changed of
//! the tree's directories and files (see the module docs of [`super`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// A node the action made.
#[derive(Debug)]
pub(super) enum Made {
    File {
        file: Arc<File>,
        size: u64,
        mode: u32,
        version: u32,
        mtime: (u64, u32),
    },
    Dir {
        entries: BTreeMap<String, u64>,
        mode: u32,
        version: u32,
        mtime: (u64, u32),
    },
    Symlink {
        target: String,
    },
}

#[derive(Debug, Default)]
pub(super) struct Layer {
    pub(super) made: HashMap<u64, Made>,
    /// A tree directory's names made or moved in (over its listing).
    pub(super) added: HashMap<u64, BTreeMap<String, u64>>,
    /// A tree directory's names removed or moved away.
    pub(super) removed: HashMap<u64, HashSet<String>>,
    /// Tree files written: their copies, which stand for them from then on.
    pub(super) copied: HashMap<u64, u64>,
    /// Changes made to tree directories (their versions move with them).
    pub(super) changed: HashMap<u64, u32>,
    /// Tree files read (for the stats).
    pub(super) read: HashSet<u64>,
    /// Tree files opened for reading or read, in the order of their first opens or
    /// reads (for access profiles: a file whose pages another action left in the
    /// worker's shared cache is opened, never read).
    pub(super) used: HashSet<u64>,
    pub(super) read_order: Vec<u64>,
    pub(super) bytes_of_files_read: u64,
    /// Bytes the layer's files hold.
    pub(super) bytes: u64,
    /// Names of scratch files.
    pub(super) next_scratch: u64,
}

impl Layer {
    /// Notes the first use of tree file `node`, in order.
    pub(super) fn mark_used(&mut self, node: u64) {
        if self.used.insert(node) {
            self.read_order.push(node);
        }
    }
}

pub(super) fn now() -> (u64, u32) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs(), d.subsec_nanos())
}

/// Copies `size` bytes of `from` into `to`.
pub(super) fn copy_file(from: &File, to: &File, size: u64) -> std::io::Result<()> {
    let mut buf = vec![0u8; 256 << 10];
    let mut at = 0u64;
    while at < size {
        let n = from.read_at(&mut buf, at)?;
        if n == 0 {
            break;
        }
        to.write_all_at(&buf[..n], at)?;
        at += n as u64;
    }
    Ok(())
}
