//! A component's descriptor and what the `wasi:filesystem` functions do with it, for
//! WASI 0.2 and 0.3 alike.
//!
//! The operations work on owned values (a clone of the descriptor and the namespace's
//! `Arc`), never on the store: 0.2's functions run them while holding the store's
//! data, 0.3's run them after letting go of it (a 0.3 host call awaits without the
//! store, so that the guest's other tasks go on meanwhile). Errors are 0.2's codes;
//! 0.3 converts them one to one.

use std::sync::Arc;

use wasm9p_guest_fs::backend::{Attr, Entry, OpenFile, SetAttr};
use wasm9p_guest_fs::namespace::{Location, Namespace};

use super::bindings::wasi::filesystem::types::{DescriptorFlags, ErrorCode, OpenFlags};
use super::errors::OrFsError;
use super::FsError;

pub(crate) type FsResult<T> = Result<T, FsError>;

/// A time to set: `None` for no change, `Some(None)` for now, `Some(Some((s, ns)))`.
pub(crate) type NewTime = Option<Option<(u64, u64)>>;

/// An open file or directory.
///
/// Its flags are what `get-flags` reports, as wasmtime-wasi reports them: a file's
/// mode, `read` (and `mutate-directory` for a preopen) for a directory. The right to
/// change a directory's contents is apart (`mutate`): a directory opened under one
/// that has it has it too, whatever flags the open gave.
///
/// A `confined` directory (WASI 0.3's) may not be left through a symlink either, as
/// cap-std confines wasmtime-wasi's descriptors and 0.3's conformance tests check;
/// 0.2's resolve symlinks in the guest's namespace, as preview1 does, so that a
/// preview1 program made a component behaves as the program does.
#[derive(Clone)]
pub struct Descriptor {
    pub(crate) loc: Location,
    pub(crate) flags: DescriptorFlags,
    pub(crate) mutate: bool,
    pub(crate) confined: bool,
    pub(crate) file: Option<Arc<dyn OpenFile>>,
}

/// How `open-at` was asked to open, in 0.2's terms.
#[derive(Clone, Copy)]
pub(crate) struct OpenAt {
    pub(crate) follow: bool,
    pub(crate) oflags: OpenFlags,
    pub(crate) flags: DescriptorFlags,
}

impl Descriptor {
    /// A preopened directory, with every right; `confined`: see [`Descriptor`].
    pub(crate) fn preopen(loc: Location, confined: bool) -> Descriptor {
        Descriptor {
            loc,
            flags: DescriptorFlags::READ | DescriptorFlags::MUTATE_DIRECTORY,
            mutate: true,
            confined,
            file: None,
        }
    }

    /// Its attributes: a file's through its open (so after an unlink too, and with
    /// buffered writes counted), a directory's by location.
    pub(crate) async fn attr(&self, ns: &Namespace) -> FsResult<Attr> {
        match &self.file {
            Some(file) => file.getattr().await.fs(),
            None => ns.getattr_at(&self.loc).await.fs(),
        }
    }

    /// The guest path for `rel` under this directory, which it may not leave by `..`;
    /// nor, when confined, through a symlink (a final one only with `follow`).
    pub(crate) async fn path_at(
        &self,
        ns: &Namespace,
        rel: &str,
        follow: bool,
    ) -> FsResult<String> {
        if !self.loc.is_dir() {
            return Err(ErrorCode::NotDirectory.into());
        }
        let path = crate::wasi_fs::beneath(&self.loc, rel).fs()?;
        if self.confined {
            ns.stays_beneath(&self.loc, rel, follow).await.fs()?;
        }
        Ok(path)
    }

    /// The guest path for `rel` (a final symlink not followed) under this directory,
    /// which must have the right to change its contents.
    async fn mutable_path_at(&self, ns: &Namespace, rel: &str) -> FsResult<String> {
        self.mutable()?;
        self.path_at(ns, rel, false).await
    }

    /// `not-permitted` unless this directory has the right to change its contents.
    fn mutable(&self) -> FsResult<()> {
        if self.mutate {
            Ok(())
        } else {
            Err(ErrorCode::NotPermitted.into())
        }
    }

    /// The open file, which must have been opened with `needs` (`READ`, `WRITE`, or
    /// nothing).
    pub(crate) fn file(&self, needs: DescriptorFlags) -> FsResult<Arc<dyn OpenFile>> {
        match &self.file {
            Some(_) if !self.flags.contains(needs) => Err(ErrorCode::BadDescriptor.into()),
            Some(f) => Ok(f.clone()),
            // As wasmtime-wasi: a file operation on a directory is a bad descriptor.
            None => Err(ErrorCode::BadDescriptor.into()),
        }
    }

    /// `sync` / `sync-data`: a file's writes made durable, or a directory's entries.
    pub(crate) async fn sync(&self, ns: &Namespace, datasync: bool) -> FsResult<()> {
        match &self.file {
            Some(file) => file.clone().fsync(datasync).await.fs(),
            None => ns.sync_dir_at(&self.loc).await.fs(),
        }
    }

    /// `set-size`, through the open file: it works after the file is unlinked or
    /// renamed.
    pub(crate) async fn set_size(&self, size: u64) -> FsResult<()> {
        self.file(DescriptorFlags::WRITE)?.set_len(size).await.fs()
    }

    pub(crate) async fn set_times(
        &self,
        ns: &Namespace,
        atime: NewTime,
        mtime: NewTime,
    ) -> FsResult<()> {
        ns.setattr_at(&self.loc, &times(atime, mtime)).await.fs()
    }

    /// The directory's entries (not `.` and `..`).
    pub(crate) async fn list(&self, ns: &Namespace) -> FsResult<Vec<Entry>> {
        if !self.loc.is_dir() {
            return Err(ErrorCode::NotDirectory.into());
        }
        ns.readdir(&self.loc.join("")).await.fs()
    }

    pub(crate) async fn create_directory_at(&self, ns: &Namespace, rel: &str) -> FsResult<()> {
        let path = self.mutable_path_at(ns, rel).await?;
        if names_itself(rel) {
            // `mkdir .`: it exists, as Linux says.
            return Err(ErrorCode::Exist.into());
        }
        ns.mkdir(&path, 0o755).await.fs().map(drop)
    }

    /// Where `rel` leads and its attributes.
    pub(crate) async fn stat_at(
        &self,
        ns: &Namespace,
        follow: bool,
        rel: &str,
    ) -> FsResult<(Location, Attr)> {
        let path = self.path_at(ns, rel, follow).await?;
        let loc = ns.resolve(&path, follow).await.fs()?;
        let attr = ns.getattr_at(&loc).await.fs()?;
        Ok((loc, attr))
    }

    pub(crate) async fn set_times_at(
        &self,
        ns: &Namespace,
        follow: bool,
        rel: &str,
        atime: NewTime,
        mtime: NewTime,
    ) -> FsResult<()> {
        self.mutable()?;
        let path = self.path_at(ns, rel, follow).await?;
        ns.setattr(&path, &times(atime, mtime), follow).await.fs()
    }

    pub(crate) async fn link_at(
        &self,
        ns: &Namespace,
        follow: bool,
        old: &str,
        new_dir: &Descriptor,
        new: &str,
    ) -> FsResult<()> {
        new_dir.mutable()?;
        let from = self.path_at(ns, old, follow).await?;
        let to = new_dir.path_at(ns, new, false).await?;
        ns.link(&from, &to, follow).await.fs()
    }

    /// Opens `rel` under this directory; the caller keeps the new descriptor.
    pub(crate) async fn open_at(
        &self,
        ns: &Namespace,
        rel: &str,
        how: OpenAt,
    ) -> FsResult<Descriptor> {
        use crate::wasi_fs::{OpenRequest, Opened};
        let OpenAt {
            follow,
            oflags,
            flags,
        } = how;
        let path = self.path_at(ns, rel, follow).await?;
        let request = OpenRequest {
            follow,
            create: oflags.contains(OpenFlags::CREATE),
            exclusive: oflags.contains(OpenFlags::EXCLUSIVE),
            truncate: oflags.contains(OpenFlags::TRUNCATE),
            directory: oflags.contains(OpenFlags::DIRECTORY),
            read: flags.contains(DescriptorFlags::READ),
            write: flags.contains(DescriptorFlags::WRITE),
            append: false,
        };
        let mutates = request.write
            || request.create
            || request.truncate
            || flags.contains(DescriptorFlags::MUTATE_DIRECTORY);
        if mutates && !self.mutate {
            return Err(ErrorCode::NotPermitted.into());
        }
        let sync = DescriptorFlags::FILE_INTEGRITY_SYNC
            | DescriptorFlags::DATA_INTEGRITY_SYNC
            | DescriptorFlags::REQUESTED_WRITE_SYNC;
        if flags.intersects(sync) {
            // As wasmtime: synchronous writes are not offered.
            return Err(ErrorCode::Unsupported.into());
        }
        Ok(match crate::wasi_fs::open(ns, &path, request).await.fs()? {
            // A directory keeps the right to change its contents only if its parent had
            // it.
            Opened::Dir(loc) => Descriptor {
                loc,
                flags: DescriptorFlags::READ,
                mutate: self.mutate,
                confined: self.confined,
                file: None,
            },
            Opened::File {
                loc,
                file,
                read,
                write,
            } => {
                let mut mode = DescriptorFlags::empty();
                if read {
                    mode |= DescriptorFlags::READ;
                }
                if write {
                    mode |= DescriptorFlags::WRITE;
                }
                Descriptor {
                    loc,
                    flags: mode,
                    mutate: self.mutate,
                    confined: self.confined,
                    file: Some(Arc::from(file)),
                }
            }
        })
    }

    pub(crate) async fn readlink_at(&self, ns: &Namespace, rel: &str) -> FsResult<String> {
        let path = self.path_at(ns, rel, false).await?;
        Ok(ns.readlink(&path).await.fs()?.to_string())
    }

    pub(crate) async fn remove_directory_at(&self, ns: &Namespace, rel: &str) -> FsResult<()> {
        let path = self.mutable_path_at(ns, rel).await?;
        ns.unlink(&path, true).await.fs()
    }

    pub(crate) async fn rename_at(
        &self,
        ns: &Namespace,
        old: &str,
        new_dir: &Descriptor,
        new: &str,
    ) -> FsResult<()> {
        self.mutable()?;
        new_dir.mutable()?;
        let from = self.path_at(ns, old, false).await?;
        let to = new_dir.path_at(ns, new, false).await?;
        ns.rename(&from, &to).await.fs()
    }

    pub(crate) async fn symlink_at(&self, ns: &Namespace, target: &str, rel: &str) -> FsResult<()> {
        let path = self.mutable_path_at(ns, rel).await?;
        if target.starts_with('/') {
            // A link out of the directory capability, which wasmtime refuses too.
            return Err(ErrorCode::NotPermitted.into());
        }
        ns.symlink(target, &path).await.fs()
    }

    pub(crate) async fn unlink_file_at(&self, ns: &Namespace, rel: &str) -> FsResult<()> {
        let path = self.mutable_path_at(ns, rel).await?;
        if names_itself(rel) {
            // `unlink .`: a directory, as Linux says.
            return Err(ErrorCode::IsDirectory.into());
        }
        ns.unlink(&path, false).await.fs()
    }

    pub(crate) fn is_same_object(&self, other: &Descriptor) -> bool {
        self.loc.mount == other.loc.mount && self.loc.node.id == other.loc.node.id
    }

    /// The end of the descriptor: what its file still buffers is written back. A close
    /// cannot report errors in WASI; a failed write-back is logged.
    pub(crate) async fn close(self) {
        if let Some(file) = self.file {
            if let Err(e) = file.flush().await {
                tracing::warn!("writing back {} on close failed: {e}", self.loc.join(""));
            }
        }
    }
}

/// Whether the last component of `rel` is `.` or `..` (a directory the path is in).
fn names_itself(rel: &str) -> bool {
    matches!(
        rel.trim_end_matches('/').rsplit('/').next(),
        Some("." | "..")
    )
}

fn times(atime: NewTime, mtime: NewTime) -> SetAttr {
    SetAttr {
        atime,
        mtime,
        ..SetAttr::default()
    }
}

/// Defines `stat` and `hash` for one WASI version's bindings: 0.2's and 0.3's
/// `descriptor-stat` and `metadata-hash-value` have the same fields under types of
/// their own. Expects that version's `DescriptorStat`, `MetadataHashValue` and
/// `descriptor_type` in scope, and takes its conversion of a time.
macro_rules! stat_and_hash {
    ($time:ident) => {
        fn stat(kind: Kind, attr: &Attr) -> DescriptorStat {
            DescriptorStat {
                type_: descriptor_type(kind),
                link_count: attr.nlink,
                size: attr.size,
                data_access_timestamp: Some($time(attr.atime)),
                data_modification_timestamp: Some($time(attr.mtime)),
                status_change_timestamp: Some($time(attr.ctime)),
            }
        }

        fn hash(loc: &Location, attr: &Attr) -> MetadataHashValue {
            let (lower, upper) = $crate::p2::descriptor::metadata_hash(loc, attr);
            MetadataHashValue { lower, upper }
        }
    };
}
pub(crate) use stat_and_hash;

/// The two halves of `metadata-hash`: a hash of what identifies a file and its
/// version (mount, id, size and times).
pub(crate) fn metadata_hash(loc: &Location, attr: &Attr) -> (u64, u64) {
    use std::hash::{Hash, Hasher};
    let mut lower = std::collections::hash_map::DefaultHasher::new();
    (loc.mount, loc.node.id, attr.size, attr.mtime, attr.ctime).hash(&mut lower);
    let mut upper = std::collections::hash_map::DefaultHasher::new();
    (attr.ctime, attr.mtime, attr.size, loc.node.id, loc.mount).hash(&mut upper);
    (lower.finish(), upper.finish())
}
