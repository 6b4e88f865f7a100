//! `wasi:filesystem/types` and `wasi:filesystem/preopens` over the namespace.
//!
//! A descriptor is a resolved [`Location`] plus, for a file, the open file. Paths
//! given to `*-at` functions are relative to their descriptor (an absolute path is
//! `not-permitted`, as in wasmtime-wasi) and resolved in the guest's namespace, where
//! `..` stops at the root and symlinks stay inside: the same rules as preview1. The
//! operations themselves are `super::descriptor`'s (shared with WASI 0.3); this module
//! maps 0.2's types onto them.

use std::sync::Arc;

use wasm9p_guest_fs::backend::{Attr, Entry, Kind};
use wasm9p_guest_fs::namespace::{Location, Namespace};
use wasm9p_proto::Errno;
use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream};

use super::bindings::wasi::filesystem::types::{
    self, Advice, DescriptorFlags, DescriptorStat, DescriptorType, DirectoryEntry, ErrorCode,
    Filesize, MetadataHashValue, NewTimestamp, OpenFlags, PathFlags,
};
use super::bindings::wasi::filesystem::{preopens, types::HostDescriptor};
pub use super::descriptor::Descriptor;
use super::descriptor::{FsResult, NewTime, OpenAt};
use super::errors::{error_code, OrFsError};
use super::streams::{FileReader, FileWriter};
use super::{FsError, FsView};
use wasmtime_wasi::p2::bindings::clocks::wall_clock::Datetime;

/// A directory listing being read.
pub struct DirectoryStream {
    entries: std::vec::IntoIter<Entry>,
}

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

super::descriptor::stat_and_hash!(datetime);

fn new_time(t: NewTimestamp) -> NewTime {
    match t {
        NewTimestamp::NoChange => None,
        NewTimestamp::Now => Some(None),
        NewTimestamp::Timestamp(d) => Some(Some((d.seconds, u64::from(d.nanoseconds)))),
    }
}

impl FsView<'_> {
    /// The descriptor `fd` and the namespace, to run a descriptor operation on.
    fn get(&self, fd: &Resource<Descriptor>) -> FsResult<(Arc<Namespace>, Descriptor)> {
        let d = self.table.get(fd).map_err(trap)?;
        Ok((self.fs.ns.clone(), d.clone()))
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
        let file = self.get(&fd)?.1.file(DescriptorFlags::READ)?;
        let stream: DynInputStream = Box::new(FileReader::new(file, offset));
        self.table.push_child(stream, &fd).map_err(trap)
    }

    async fn write_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: Filesize,
    ) -> FsResult<Resource<DynOutputStream>> {
        let file = self.get(&fd)?.1.file(DescriptorFlags::WRITE)?;
        let stream: DynOutputStream = Box::new(FileWriter::at(file, offset));
        self.table.push_child(stream, &fd).map_err(trap)
    }

    async fn append_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
    ) -> FsResult<Resource<DynOutputStream>> {
        let file = self.get(&fd)?.1.file(DescriptorFlags::WRITE)?;
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
        self.get(&fd)?.1.file(DescriptorFlags::empty()).map(drop)
    }

    async fn sync_data(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        let (ns, d) = self.get(&fd)?;
        d.sync(&ns, true).await
    }

    async fn get_flags(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorFlags> {
        Ok(self.get(&fd)?.1.flags)
    }

    async fn get_type(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorType> {
        Ok(descriptor_type(self.get(&fd)?.1.loc.node.kind))
    }

    async fn set_size(&mut self, fd: Resource<Descriptor>, size: Filesize) -> FsResult<()> {
        self.get(&fd)?.1.set_size(size).await
    }

    async fn set_times(
        &mut self,
        fd: Resource<Descriptor>,
        atime: NewTimestamp,
        mtime: NewTimestamp,
    ) -> FsResult<()> {
        let (ns, d) = self.get(&fd)?;
        d.set_times(&ns, new_time(atime), new_time(mtime)).await
    }

    async fn read(
        &mut self,
        fd: Resource<Descriptor>,
        len: Filesize,
        offset: Filesize,
    ) -> FsResult<(Vec<u8>, bool)> {
        let file = self.get(&fd)?.1.file(DescriptorFlags::READ)?;
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
        let file = self.get(&fd)?.1.file(DescriptorFlags::WRITE)?;
        let n = file.write_at(offset, buf.into()).await.fs()?;
        Ok(n as Filesize)
    }

    async fn read_directory(
        &mut self,
        fd: Resource<Descriptor>,
    ) -> FsResult<Resource<DirectoryStream>> {
        let (ns, d) = self.get(&fd)?;
        let entries = d.list(&ns).await?;
        let stream = DirectoryStream {
            entries: entries.into_iter(),
        };
        self.table.push(stream).map_err(trap)
    }

    async fn sync(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        let (ns, d) = self.get(&fd)?;
        d.sync(&ns, false).await
    }

    async fn create_directory_at(
        &mut self,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        let (ns, d) = self.get(&fd)?;
        d.create_directory_at(&ns, &path).await
    }

    async fn stat(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorStat> {
        let (ns, d) = self.get(&fd)?;
        let attr = d.attr(&ns).await?;
        Ok(stat(d.loc.node.kind, &attr))
    }

    async fn stat_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
    ) -> FsResult<DescriptorStat> {
        let (ns, d) = self.get(&fd)?;
        let follow = path_flags.contains(PathFlags::SYMLINK_FOLLOW);
        let (loc, attr) = d.stat_at(&ns, follow, &path).await?;
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
        let (ns, d) = self.get(&fd)?;
        let follow = path_flags.contains(PathFlags::SYMLINK_FOLLOW);
        d.set_times_at(&ns, follow, &path, new_time(atime), new_time(mtime))
            .await
    }

    async fn link_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_flags: PathFlags,
        old_path: String,
        new_fd: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        let (ns, d) = self.get(&fd)?;
        let new_dir = self.get(&new_fd)?.1;
        let follow = old_flags.contains(PathFlags::SYMLINK_FOLLOW);
        d.link_at(&ns, follow, &old_path, &new_dir, &new_path).await
    }

    async fn open_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        oflags: OpenFlags,
        flags: DescriptorFlags,
    ) -> FsResult<Resource<Descriptor>> {
        let (ns, d) = self.get(&fd)?;
        let how = OpenAt {
            follow: path_flags.contains(PathFlags::SYMLINK_FOLLOW),
            oflags,
            flags,
        };
        let opened = d.open_at(&ns, &path, how).await?;
        if let Some(file) = &opened.file {
            self.fs.opened(file);
        }
        self.push(opened)
    }

    async fn readlink_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<String> {
        let (ns, d) = self.get(&fd)?;
        d.readlink_at(&ns, &path).await
    }

    async fn remove_directory_at(
        &mut self,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        let (ns, d) = self.get(&fd)?;
        d.remove_directory_at(&ns, &path).await
    }

    async fn rename_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path: String,
        new_fd: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        let (ns, d) = self.get(&fd)?;
        let new_dir = self.get(&new_fd)?.1;
        d.rename_at(&ns, &old_path, &new_dir, &new_path).await
    }

    async fn symlink_at(
        &mut self,
        fd: Resource<Descriptor>,
        target: String,
        path: String,
    ) -> FsResult<()> {
        let (ns, d) = self.get(&fd)?;
        d.symlink_at(&ns, &target, &path).await
    }

    async fn unlink_file_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        let (ns, d) = self.get(&fd)?;
        d.unlink_file_at(&ns, &path).await
    }

    async fn is_same_object(
        &mut self,
        a: Resource<Descriptor>,
        b: Resource<Descriptor>,
    ) -> wasmtime::Result<bool> {
        Ok(self.table.get(&a)?.is_same_object(self.table.get(&b)?))
    }

    async fn metadata_hash(&mut self, fd: Resource<Descriptor>) -> FsResult<MetadataHashValue> {
        let (ns, d) = self.get(&fd)?;
        let attr = d.attr(&ns).await?;
        Ok(hash(&d.loc, &attr))
    }

    async fn metadata_hash_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
    ) -> FsResult<MetadataHashValue> {
        let (ns, d) = self.get(&fd)?;
        let follow = path_flags.contains(PathFlags::SYMLINK_FOLLOW);
        let (loc, attr) = d.stat_at(&ns, follow, &path).await?;
        Ok(hash(&loc, &attr))
    }

    async fn drop(&mut self, fd: Resource<Descriptor>) -> wasmtime::Result<()> {
        self.table.delete(fd)?.close().await;
        Ok(())
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
            let d = Descriptor::preopen(loc.clone(), false);
            dirs.push((self.table.push(d)?, path.clone()));
        }
        Ok(dirs)
    }
}
