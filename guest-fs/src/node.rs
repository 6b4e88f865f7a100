//! The values every layer passes around: what a file is ([`Kind`], [`Special`]), a
//! backend's handle on one ([`Node`]), its attributes ([`Attr`]), a directory entry
//! ([`Entry`]) and file system statistics ([`StatFs`]).
//!
//! They sit below both the caches (`cache`, `fscache`) and the backends, so neither
//! reaches up into the other for them; `backend` re-exports them where its trait
//! names them.

use std::any::Any;
use std::sync::Arc;

/// The type of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// Anything else (FIFO, socket, device: [`Attr::special`] says which).
    Other,
}

impl Kind {
    /// The kind a 9P qid's type names (9P has no type for the others: they are files).
    pub fn of_qid(q: &wasm9p_proto::Qid) -> Kind {
        if q.is_dir() {
            Kind::Dir
        } else if q.is_symlink() {
            Kind::Symlink
        } else {
            Kind::File
        }
    }

    /// The 9P qid type of this kind.
    pub fn qid_type(self) -> u8 {
        use wasm9p_proto::consts::qid;
        match self {
            Kind::Dir => qid::DIR,
            Kind::Symlink => qid::SYMLINK,
            Kind::File | Kind::Other => qid::FILE,
        }
    }
}

/// A file that is neither a directory, a regular file nor a symlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Special {
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
}

impl Special {
    /// What the `S_IFMT` bits of a Linux mode say, if they name a special file.
    pub fn from_mode(mode: u32) -> Option<Special> {
        match mode & 0o170000 {
            0o010000 => Some(Special::Fifo),
            0o140000 => Some(Special::Socket),
            0o020000 => Some(Special::CharDevice),
            0o060000 => Some(Special::BlockDevice),
            _ => None,
        }
    }

    /// Its `S_IFMT` bits.
    pub fn mode_bits(self) -> u32 {
        match self {
            Special::Fifo => 0o010000,
            Special::Socket => 0o140000,
            Special::CharDevice => 0o020000,
            Special::BlockDevice => 0o060000,
        }
    }
}

/// A file of some backend: cheap to clone.
#[derive(Clone)]
pub struct Node {
    /// Unique within its backend (qid path, inode number).
    pub id: u64,
    /// What it is.
    pub kind: Kind,
    /// Whatever else the backend keeps for it.
    pub handle: Option<Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .finish()
    }
}

impl Node {
    /// A node with no backend handle.
    pub fn new(id: u64, kind: Kind) -> Node {
        Node {
            id,
            kind,
            handle: None,
        }
    }
}

/// Attributes of a file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attr {
    /// Permission bits.
    pub mode: u32,
    /// Owner, as the backend reports it (a 9p server's numbers, the host's for bind).
    pub uid: u32,
    /// Group, as the backend reports it.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Hard links.
    pub nlink: u64,
    /// Inode / qid path.
    pub ino: u64,
    /// Modification time, seconds and nanoseconds.
    pub mtime: (u64, u32),
    /// Access time.
    pub atime: (u64, u32),
    /// Status change time.
    pub ctime: (u64, u32),
    /// For a special file, which kind (a 9p server's qid says only "file" for these,
    /// the mode from getattr says more).
    pub special: Option<Special>,
    /// For a device node, which device (Linux's `dev_t`: `rustix::fs::major`/`minor`).
    pub rdev: u64,
}

/// File system statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatFs {
    /// Block size.
    pub bsize: u32,
    /// Total blocks.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Blocks available to unprivileged users.
    pub bavail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Longest name.
    pub namelen: u32,
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Name in its directory.
    pub name: String,
    /// What it is.
    pub kind: Kind,
    /// Its id.
    pub id: u64,
    /// Pass this to [`Backend::readdir`](crate::backend::Backend::readdir) to continue
    /// after this entry.
    pub cookie: u64,
}
