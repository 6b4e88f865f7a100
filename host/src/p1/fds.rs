//! The descriptor table: stdio, preopened directories, open directories and files, each
//! with the mode it was opened with. Rights are what wasmtime makes of them: reported
//! from the open mode, never narrowed (`fd_fdstat_set_rights` is `ENOTSUP`), and the
//! mode is what is enforced.

use std::collections::BTreeMap;

use wasm9p_guest_fs::backend::OpenFile;
use wasm9p_guest_fs::namespace::Location;

use super::types::{Errno, Fdflags};

/// Most descriptors one guest may hold open.
pub const MAX_FDS: usize = 16 * 1024;

/// What a descriptor stands for.
pub enum Desc {
    /// Standard input (the host's, read-only).
    Stdin,
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// A directory.
    Dir(DirDesc),
    /// A regular file.
    File(FileDesc),
}

/// An open directory.
pub struct DirDesc {
    /// Where it is.
    pub loc: Location,
    /// The guest path it was preopened as, if it was.
    pub preopen: Option<String>,
    /// The guest's working directory, preopened as `/`: wasi-libc (whose own working
    /// directory is always `/`) sends every relative path here, and `..` may climb
    /// above it, as from a process's working directory.
    pub working_dir: bool,
    /// Entries read so far, as `(name, filetype, inode)`; cookie `i` is entry `i`.
    pub listing: Option<Vec<(String, super::types::Filetype, u64)>>,
}

/// An open regular file.
pub struct FileDesc {
    /// Where it is.
    pub loc: Location,
    /// The open file.
    pub file: Box<dyn OpenFile>,
    /// The current offset.
    pub pos: u64,
    /// Fd flags (append, nonblock); append may change on an open file.
    pub flags: Fdflags,
    /// Open for reading.
    pub read: bool,
    /// Open for writing.
    pub write: bool,
}

/// A guest's descriptors.
#[derive(Default)]
pub struct FdTable {
    fds: BTreeMap<u32, Desc>,
}

impl FdTable {
    /// Descriptors 0, 1 and 2.
    pub fn with_stdio() -> FdTable {
        let mut fds = BTreeMap::new();
        fds.insert(0, Desc::Stdin);
        fds.insert(1, Desc::Stdout);
        fds.insert(2, Desc::Stderr);
        FdTable { fds }
    }

    /// Adds a preopened directory.
    pub fn push_preopen(&mut self, loc: Location, guest_path: String) {
        let desc = Desc::Dir(DirDesc {
            loc,
            preopen: Some(guest_path),
            working_dir: false,
            listing: None,
        });
        let _ = self.push(desc);
    }

    /// Adds the guest's working directory, preopened as `/` (see
    /// `DirDesc::working_dir`).
    pub fn push_working_dir(&mut self, loc: Location) {
        let desc = Desc::Dir(DirDesc {
            loc,
            preopen: Some("/".into()),
            working_dir: true,
            listing: None,
        });
        let _ = self.push(desc);
    }

    /// Adds a descriptor at the lowest free number.
    pub fn push(&mut self, desc: Desc) -> Result<u32, Errno> {
        if self.fds.len() >= MAX_FDS {
            return Err(Errno::Mfile);
        }
        let mut fd = 0;
        for used in self.fds.keys() {
            if *used != fd {
                break;
            }
            fd += 1;
        }
        self.fds.insert(fd, desc);
        Ok(fd)
    }

    /// The descriptor `fd`.
    pub fn get(&self, fd: u32) -> Result<&Desc, Errno> {
        self.fds.get(&fd).ok_or(Errno::Badf)
    }

    /// The descriptor `fd`, mutably.
    pub fn get_mut(&mut self, fd: u32) -> Result<&mut Desc, Errno> {
        self.fds.get_mut(&fd).ok_or(Errno::Badf)
    }

    /// Removes `fd`.
    pub fn remove(&mut self, fd: u32) -> Result<Desc, Errno> {
        self.fds.remove(&fd).ok_or(Errno::Badf)
    }

    /// Moves `from` onto `to` (closing what `to` was).
    pub fn renumber(&mut self, from: u32, to: u32) -> Result<Option<Desc>, Errno> {
        if !self.fds.contains_key(&to) {
            return Err(Errno::Badf);
        }
        let desc = self.remove(from)?;
        Ok(self.fds.insert(to, desc))
    }

    /// Every descriptor, leaving the table empty.
    pub fn drain(&mut self) -> Vec<(u32, Desc)> {
        std::mem::take(&mut self.fds).into_iter().collect()
    }
}
