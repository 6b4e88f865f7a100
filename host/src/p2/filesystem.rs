//! `wasi:filesystem/types` and `wasi:filesystem/preopens` over the namespace.
//!
//! A descriptor is a resolved [`Location`] plus, for a file, the open file. Paths
//! given to `*-at` functions are relative to their descriptor (an absolute path is
//! `not-permitted`, as in wasmtime-wasi) and resolved in the guest's namespace, where
//! `..` stops at the root and symlinks stay inside: the same rules as preview1.

use std::sync::Arc;

use wasm9p_guest_fs::backend::{Attr, Entry, Kind, OpenFile, SetAttr};
use wasm9p_guest_fs::namespace::Location;
use wasm9p_proto::Errno;
use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream};

use super::bindings::wasi::filesystem::types::{
    self, Advice, DescriptorFlags, DescriptorStat, DescriptorType, DirectoryEntry, ErrorCode,
    Filesize, MetadataHashValue, NewTimestamp, OpenFlags, PathFlags,
};
use super::bindings::wasi::filesystem::{preopens, types::HostDescriptor};
use super::errors::{error_code, OrFsError};
use super::streams::{FileReader, FileWriter};
use super::{FsError, FsView};
use wasmtime_wasi::p2::bindings::clocks::wall_clock::Datetime;

/// An open file or directory.
pub struct Descriptor {
    loc: Location,
    flags: DescriptorFlags,
    file: Option<Arc<dyn OpenFile>>,
}

/// A directory listing being read.
pub struct DirectoryStream {
    entries: std::vec::IntoIter<Entry>,
}

type FsResult<T> = Result<T, FsError>;

/// A resource-table failure is the host's bug or a forged handle: a trap.
fn trap(e: wasmtime::component::ResourceTableError) -> FsError {
    FsError::trap(e)
}

fn descriptor_type(kind: Kind) -> DescriptorType {
    match kind {
        Kind::Dir => DescriptorType::Directory,
        Kind::File => DescriptorType::RegularFile,
        Kind::Symlink => DescriptorType::SymbolicLink,
        Kind::Other => DescriptorType::Unknown,
    }
}

fn datetime((seconds, nanoseconds): (u64, u32)) -> Datetime {
    Datetime {
        seconds,
        nanoseconds,
    }
}

fn stat(kind: Kind, attr: &Attr) -> DescriptorStat {
    DescriptorStat {
        type_: descriptor_type(kind),
        link_count: attr.nlink,
        size: attr.size,
        data_access_timestamp: Some(datetime(attr.atime)),
        data_modification_timestamp: Some(datetime(attr.mtime)),
        status_change_timestamp: Some(datetime(attr.ctime)),
    }
}

/// `Some(None)` for now, `Some(Some(t))` for a time, `None` for no change.
fn new_time(t: NewTimestamp) -> Option<Option<(u64, u64)>> {
    match t {
        NewTimestamp::NoChange => None,
        NewTimestamp::Now => Some(None),
        NewTimestamp::Timestamp(d) => Some(Some((d.seconds, u64::from(d.nanoseconds)))),
    }
}

impl FsView<'_> {
    fn get(&self, fd: &Resource<Descriptor>) -> FsResult<&Descriptor> {
        self.table.get(fd).map_err(trap)
    }

    /// Where `fd` is and its attributes: a file's through its open (so after an
    /// unlink too, and with buffered writes counted), a directory's by location.
    async fn descriptor_attr(&mut self, fd: &Resource<Descriptor>) -> FsResult<(Location, Attr)> {
        let d = self.get(fd)?;
        let (loc, file) = (d.loc.clone(), d.file.clone());
        let attr = match file {
            Some(file) => file.getattr().await.fs()?,
            None => self.fs.ns.getattr_at(&loc).await.fs()?,
        };
        Ok((loc, attr))
    }

    /// The guest path for `rel` under directory `fd`.
    fn path_at(&self, fd: &Resource<Descriptor>, rel: &str) -> FsResult<String> {
        let d = self.get(fd)?;
        if !d.loc.is_dir() {
            return Err(ErrorCode::NotDirectory.into());
        }
        crate::wasi_fs::beneath(&d.loc, rel).fs()
    }

    fn writable_dir(&self, fd: &Resource<Descriptor>) -> FsResult<()> {
        if self
            .get(fd)?
            .flags
            .contains(DescriptorFlags::MUTATE_DIRECTORY)
        {
            Ok(())
        } else {
            Err(ErrorCode::NotPermitted.into())
        }
    }

    /// The open file of `fd`, which must have been opened with `needs` (`READ`,
    /// `WRITE`, or nothing).
    fn file(
        &self,
        fd: &Resource<Descriptor>,
        needs: DescriptorFlags,
    ) -> FsResult<Arc<dyn OpenFile>> {
        let d = self.get(fd)?;
        match &d.file {
            Some(_) if !d.flags.contains(needs) => Err(ErrorCode::BadDescriptor.into()),
            Some(f) => Ok(f.clone()),
            None => Err(ErrorCode::IsDirectory.into()),
        }
    }

    /// `sync` / `sync-data`: a file's writes made durable, or a directory's entries.
    async fn sync_descriptor(&mut self, fd: &Resource<Descriptor>, datasync: bool) -> FsResult<()> {
        let d = self.get(fd)?;
        match &d.file {
            Some(file) => file.clone().fsync(datasync).await.fs(),
            None => {
                let loc = d.loc.clone();
                self.fs.ns.sync_dir_at(&loc).await.fs()
            }
        }
    }

    fn push(&mut self, d: Descriptor) -> FsResult<Resource<Descriptor>> {
        self.table.push(d).map_err(trap)
    }
}

impl types::Host for FsView<'_> {
    async fn filesystem_error_code(
        &mut self,
        err: Resource<wasmtime::Error>,
    ) -> wasmtime::Result<Option<ErrorCode>> {
        let err = self.table.get(&err)?;
        Ok(err
            .downcast_ref::<std::io::Error>()
            .and_then(|e| e.raw_os_error())
            .map(|n| error_code(Errno(n as u32))))
    }

    fn convert_error_code(&mut self, err: FsError) -> wasmtime::Result<ErrorCode> {
        err.downcast()
    }
}

impl HostDescriptor for FsView<'_> {
    async fn read_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: Filesize,
    ) -> FsResult<Resource<DynInputStream>> {
        let file = self.file(&fd, DescriptorFlags::READ)?;
        let stream: DynInputStream = Box::new(FileReader::new(file, offset));
        self.table.push_child(stream, &fd).map_err(trap)
    }

    async fn write_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: Filesize,
    ) -> FsResult<Resource<DynOutputStream>> {
        let file = self.file(&fd, DescriptorFlags::WRITE)?;
        let stream: DynOutputStream = Box::new(FileWriter::at(file, offset));
        self.table.push_child(stream, &fd).map_err(trap)
    }

    async fn append_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
    ) -> FsResult<Resource<DynOutputStream>> {
        let file = self.file(&fd, DescriptorFlags::WRITE)?;
        let stream: DynOutputStream = Box::new(FileWriter::appending(file));
        self.table.push_child(stream, &fd).map_err(trap)
    }

    async fn advise(
        &mut self,
        fd: Resource<Descriptor>,
        _offset: Filesize,
        _len: Filesize,
        _advice: Advice,
    ) -> FsResult<()> {
        // Advice only; the page cache already reads ahead of sequential readers.
        self.file(&fd, DescriptorFlags::empty())?;
        Ok(())
    }

    async fn sync_data(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        self.sync_descriptor(&fd, true).await
    }

    async fn get_flags(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorFlags> {
        Ok(self.get(&fd)?.flags)
    }

    async fn get_type(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorType> {
        Ok(descriptor_type(self.get(&fd)?.loc.node.kind))
    }

    async fn set_size(&mut self, fd: Resource<Descriptor>, size: Filesize) -> FsResult<()> {
        // Through the open file: it works after the file is unlinked or renamed.
        let file = self.file(&fd, DescriptorFlags::WRITE)?;
        file.set_len(size).await.fs()
    }

    async fn set_times(
        &mut self,
        fd: Resource<Descriptor>,
        atime: NewTimestamp,
        mtime: NewTimestamp,
    ) -> FsResult<()> {
        let loc = self.get(&fd)?.loc.clone();
        let attr = SetAttr {
            atime: new_time(atime),
            mtime: new_time(mtime),
            ..SetAttr::default()
        };
        self.fs.ns.setattr_at(&loc, &attr).await.fs()
    }

    async fn read(
        &mut self,
        fd: Resource<Descriptor>,
        len: Filesize,
        offset: Filesize,
    ) -> FsResult<(Vec<u8>, bool)> {
        let file = self.file(&fd, DescriptorFlags::READ)?;
        let len = usize::try_from(len)
            .unwrap_or(usize::MAX)
            .min(crate::p1::MAX_IO);
        let data = file.read_at(offset, len).await.fs()?;
        let end = data.len() < len;
        Ok((data.to_vec(), end))
    }

    async fn write(
        &mut self,
        fd: Resource<Descriptor>,
        buf: Vec<u8>,
        offset: Filesize,
    ) -> FsResult<Filesize> {
        let file = self.file(&fd, DescriptorFlags::WRITE)?;
        let n = file.write_at(offset, buf.into()).await.fs()?;
        Ok(n as Filesize)
    }

    async fn read_directory(
        &mut self,
        fd: Resource<Descriptor>,
    ) -> FsResult<Resource<DirectoryStream>> {
        let d = self.get(&fd)?;
        if !d.loc.is_dir() {
            return Err(ErrorCode::NotDirectory.into());
        }
        let path = d.loc.join("");
        let entries = self.fs.ns.readdir(&path).await.fs()?;
        let stream = DirectoryStream {
            entries: entries.into_iter(),
        };
        self.table.push(stream).map_err(trap)
    }

    async fn sync(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        self.sync_descriptor(&fd, false).await
    }

    async fn create_directory_at(
        &mut self,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        self.writable_dir(&fd)?;
        let path = self.path_at(&fd, &path)?;
        self.fs.ns.mkdir(&path, 0o755).await.fs().map(drop)
    }

    async fn stat(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorStat> {
        let (loc, attr) = self.descriptor_attr(&fd).await?;
        Ok(stat(loc.node.kind, &attr))
    }

    async fn stat_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
    ) -> FsResult<DescriptorStat> {
        let path = self.path_at(&fd, &path)?;
        let follow = path_flags.contains(PathFlags::SYMLINK_FOLLOW);
        let loc = self.fs.ns.resolve(&path, follow).await.fs()?;
        let attr = self.fs.ns.getattr_at(&loc).await.fs()?;
        Ok(stat(loc.node.kind, &attr))
    }

    async fn set_times_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        atime: NewTimestamp,
        mtime: NewTimestamp,
    ) -> FsResult<()> {
        self.writable_dir(&fd)?;
        let path = self.path_at(&fd, &path)?;
        let attr = SetAttr {
            atime: new_time(atime),
            mtime: new_time(mtime),
            ..SetAttr::default()
        };
        let follow = path_flags.contains(PathFlags::SYMLINK_FOLLOW);
        self.fs.ns.setattr(&path, &attr, follow).await.fs()
    }

    async fn link_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_flags: PathFlags,
        old_path: String,
        new_fd: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        self.writable_dir(&new_fd)?;
        let from = self.path_at(&fd, &old_path)?;
        let to = self.path_at(&new_fd, &new_path)?;
        let follow = old_flags.contains(PathFlags::SYMLINK_FOLLOW);
        self.fs.ns.link(&from, &to, follow).await.fs()
    }

    async fn open_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        oflags: OpenFlags,
        flags: DescriptorFlags,
    ) -> FsResult<Resource<Descriptor>> {
        use crate::wasi_fs::{OpenRequest, Opened};
        let parent_flags = self.get(&fd)?.flags;
        let path = self.path_at(&fd, &path)?;
        let request = OpenRequest {
            follow: path_flags.contains(PathFlags::SYMLINK_FOLLOW),
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
        if mutates && !parent_flags.contains(DescriptorFlags::MUTATE_DIRECTORY) {
            return Err(ErrorCode::NotPermitted.into());
        }
        let sync = DescriptorFlags::FILE_INTEGRITY_SYNC
            | DescriptorFlags::DATA_INTEGRITY_SYNC
            | DescriptorFlags::REQUESTED_WRITE_SYNC;
        if flags.intersects(sync) {
            // As wasmtime: synchronous writes are not offered.
            return Err(ErrorCode::Unsupported.into());
        }
        let descriptor = match crate::wasi_fs::open(&self.fs.ns, &path, request)
            .await
            .fs()?
        {
            // A directory keeps the right to change its contents only if its parent had
            // it.
            Opened::Dir(loc) => Descriptor {
                loc,
                flags: DescriptorFlags::READ | (parent_flags & DescriptorFlags::MUTATE_DIRECTORY),
                file: None,
            },
            Opened::File {
                loc,
                file,
                read,
                write,
            } => {
                let file: Arc<dyn OpenFile> = Arc::from(file);
                self.fs.opened(&file);
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
                    file: Some(file),
                }
            }
        };
        self.push(descriptor)
    }

    async fn readlink_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<String> {
        let path = self.path_at(&fd, &path)?;
        Ok(self.fs.ns.readlink(&path).await.fs()?.to_string())
    }

    async fn remove_directory_at(
        &mut self,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        self.writable_dir(&fd)?;
        let path = self.path_at(&fd, &path)?;
        self.fs.ns.unlink(&path, true).await.fs()
    }

    async fn rename_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path: String,
        new_fd: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        self.writable_dir(&fd)?;
        self.writable_dir(&new_fd)?;
        let from = self.path_at(&fd, &old_path)?;
        let to = self.path_at(&new_fd, &new_path)?;
        self.fs.ns.rename(&from, &to).await.fs()
    }

    async fn symlink_at(
        &mut self,
        fd: Resource<Descriptor>,
        target: String,
        path: String,
    ) -> FsResult<()> {
        self.writable_dir(&fd)?;
        let path = self.path_at(&fd, &path)?;
        if target.starts_with('/') {
            // A link out of the directory capability, which wasmtime refuses too.
            return Err(ErrorCode::NotPermitted.into());
        }
        self.fs.ns.symlink(&target, &path).await.fs()
    }

    async fn unlink_file_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        self.writable_dir(&fd)?;
        let path = self.path_at(&fd, &path)?;
        self.fs.ns.unlink(&path, false).await.fs()
    }

    async fn is_same_object(
        &mut self,
        a: Resource<Descriptor>,
        b: Resource<Descriptor>,
    ) -> wasmtime::Result<bool> {
        let (a, b) = (&self.table.get(&a)?.loc, &self.table.get(&b)?.loc);
        Ok(a.mount == b.mount && a.node.id == b.node.id)
    }

    async fn metadata_hash(&mut self, fd: Resource<Descriptor>) -> FsResult<MetadataHashValue> {
        let (loc, attr) = self.descriptor_attr(&fd).await?;
        Ok(hash(&loc, &attr))
    }

    async fn metadata_hash_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
    ) -> FsResult<MetadataHashValue> {
        let path = self.path_at(&fd, &path)?;
        let follow = path_flags.contains(PathFlags::SYMLINK_FOLLOW);
        let loc = self.fs.ns.resolve(&path, follow).await.fs()?;
        let attr = self.fs.ns.getattr_at(&loc).await.fs()?;
        Ok(hash(&loc, &attr))
    }

    async fn drop(&mut self, fd: Resource<Descriptor>) -> wasmtime::Result<()> {
        let d = self.table.delete(fd)?;
        if let Some(file) = d.file {
            // A close cannot report errors in preview2; a failed write-back is logged.
            if let Err(e) = file.flush().await {
                tracing::warn!("writing back {} on close failed: {e}", d.loc.join(""));
            }
        }
        Ok(())
    }
}

/// A hash of what identifies a file and its version: mount, id, size and times.
fn hash(loc: &Location, attr: &Attr) -> MetadataHashValue {
    use std::hash::{Hash, Hasher};
    let mut lower = std::collections::hash_map::DefaultHasher::new();
    (loc.mount, loc.node.id, attr.size, attr.mtime, attr.ctime).hash(&mut lower);
    let mut upper = std::collections::hash_map::DefaultHasher::new();
    (attr.ctime, attr.mtime, attr.size, loc.node.id, loc.mount).hash(&mut upper);
    MetadataHashValue {
        lower: lower.finish(),
        upper: upper.finish(),
    }
}

impl types::HostDirectoryEntryStream for FsView<'_> {
    async fn read_directory_entry(
        &mut self,
        stream: Resource<DirectoryStream>,
    ) -> FsResult<Option<DirectoryEntry>> {
        let stream = self.table.get_mut(&stream).map_err(trap)?;
        Ok(stream.entries.next().map(|e| DirectoryEntry {
            type_: descriptor_type(e.kind),
            name: e.name,
        }))
    }

    async fn drop(&mut self, stream: Resource<DirectoryStream>) -> wasmtime::Result<()> {
        self.table.delete(stream)?;
        Ok(())
    }
}

impl preopens::Host for FsView<'_> {
    async fn get_directories(&mut self) -> wasmtime::Result<Vec<(Resource<Descriptor>, String)>> {
        let mut dirs = Vec::new();
        for (loc, path) in &self.fs.preopens {
            let d = Descriptor {
                loc: loc.clone(),
                flags: DescriptorFlags::READ | DescriptorFlags::MUTATE_DIRECTORY,
                file: None,
            };
            dirs.push((self.table.push(d)?, path.clone()));
        }
        Ok(dirs)
    }
}
