//! `wasi:filesystem/types@0.3.0` and `preopens@0.3.0` over the namespace: each
//! function takes what it needs from the store (the descriptor, the namespace), lets
//! go of it, and runs 0.2's descriptor operation (`crate::p2::descriptor`).

use std::sync::Arc;

use wasm9p_guest_fs::backend::{Attr, Kind};
use wasm9p_guest_fs::namespace::{Location, Namespace};
use wasmtime::component::{Access, Accessor, FutureReader, Resource, StreamReader};
use wasmtime_wasi::p3::bindings::clocks::system_clock::Instant;

use super::bindings::wasi::filesystem::preopens;
use super::bindings::wasi::filesystem::types::{
    self, Advice, DescriptorFlags, DescriptorStat, DescriptorType, DirectoryEntry, ErrorCode,
    Filesize, HostDescriptorWithStore, MetadataHashValue, NewTimestamp, OpenFlags, PathFlags,
};
use super::codes::{descriptor_type, error_code};
use super::streams::{Listing, Reader, Writer};
use super::FsError;
use crate::p2::descriptor::{NewTime, OpenAt};
use crate::p2::{Descriptor, FsView, HasFs};

type FsResult<T> = Result<T, FsError>;

/// A stream and the future that says how it ended, as the stream functions return.
type WithOutcome<T> = (StreamReader<T>, FutureReader<Result<(), ErrorCode>>);

/// 0.2's error as 0.3's: the same code, or the same trap.
fn from_p2(e: crate::p2::FsError) -> FsError {
    match e.downcast() {
        Ok(code) => error_code(code).into(),
        Err(trap) => FsError::trap(trap),
    }
}

/// `?` for 0.2 descriptor operations in 0.3 functions.
trait OrP3<T> {
    fn p3(self) -> FsResult<T>;
}

impl<T> OrP3<T> for Result<T, crate::p2::FsError> {
    fn p3(self) -> FsResult<T> {
        self.map_err(from_p2)
    }
}

fn instant((seconds, nanoseconds): (u64, u32)) -> Instant {
    Instant {
        seconds: i64::try_from(seconds).unwrap_or(i64::MAX),
        nanoseconds,
    }
}

crate::p2::descriptor::stat_and_hash!(instant);

/// A time to set; 9P times start at 1970, so an earlier one is `overflow`.
fn new_time(t: NewTimestamp) -> FsResult<NewTime> {
    Ok(match t {
        NewTimestamp::NoChange => None,
        NewTimestamp::Now => Some(None),
        NewTimestamp::Timestamp(t) => {
            let seconds = u64::try_from(t.seconds).map_err(|_| ErrorCode::Overflow)?;
            Some(Some((seconds, u64::from(t.nanoseconds))))
        }
    })
}

/// Descriptor flags of 0.3 and of 0.2, side by side (the same flags).
fn descriptor_flag_pairs() -> [(DescriptorFlags, crate::p2::DescriptorFlags); 6] {
    use crate::p2::DescriptorFlags as P2;
    use DescriptorFlags as F;
    [
        (F::READ, P2::READ),
        (F::WRITE, P2::WRITE),
        (F::FILE_INTEGRITY_SYNC, P2::FILE_INTEGRITY_SYNC),
        (F::DATA_INTEGRITY_SYNC, P2::DATA_INTEGRITY_SYNC),
        (F::REQUESTED_WRITE_SYNC, P2::REQUESTED_WRITE_SYNC),
        (F::MUTATE_DIRECTORY, P2::MUTATE_DIRECTORY),
    ]
}

fn p2_flags(flags: DescriptorFlags) -> crate::p2::DescriptorFlags {
    descriptor_flag_pairs()
        .into_iter()
        .filter(|(ours, _)| flags.contains(*ours))
        .fold(crate::p2::DescriptorFlags::empty(), |all, (_, p2)| all | p2)
}

fn p3_flags(flags: crate::p2::DescriptorFlags) -> DescriptorFlags {
    descriptor_flag_pairs()
        .into_iter()
        .filter(|(_, p2)| flags.contains(*p2))
        .fold(DescriptorFlags::empty(), |all, (ours, _)| all | ours)
}

fn p2_open_flags(flags: OpenFlags) -> crate::p2::OpenFlags {
    use crate::p2::OpenFlags as P2;
    [
        (OpenFlags::CREATE, P2::CREATE),
        (OpenFlags::DIRECTORY, P2::DIRECTORY),
        (OpenFlags::EXCLUSIVE, P2::EXCLUSIVE),
        (OpenFlags::TRUNCATE, P2::TRUNCATE),
    ]
    .into_iter()
    .filter(|(ours, _)| flags.contains(*ours))
    .fold(P2::empty(), |all, (_, p2)| all | p2)
}

fn follow(flags: PathFlags) -> bool {
    flags.contains(PathFlags::SYMLINK_FOLLOW)
}

/// The namespace and a copy of the descriptor `fd`, taken from the store.
fn take(view: &FsView<'_>, fd: &Resource<Descriptor>) -> FsResult<(Arc<Namespace>, Descriptor)> {
    let d = view.table.get(fd).map_err(FsError::trap)?;
    Ok((view.fs.ns.clone(), d.clone()))
}

trait AccessorExt {
    /// The namespace and a copy of the descriptor `fd`.
    fn descriptor(&self, fd: &Resource<Descriptor>) -> FsResult<(Arc<Namespace>, Descriptor)>;
}

impl<U> AccessorExt for Accessor<U, HasFs> {
    fn descriptor(&self, fd: &Resource<Descriptor>) -> FsResult<(Arc<Namespace>, Descriptor)> {
        self.with(|mut store| take(&store.get(), fd))
    }
}

impl types::Host for FsView<'_> {
    fn convert_error_code(&mut self, err: FsError) -> wasmtime::Result<ErrorCode> {
        err.downcast()
    }
}

impl types::HostDescriptor for FsView<'_> {
    async fn drop(&mut self, fd: Resource<Descriptor>) -> wasmtime::Result<()> {
        self.table.delete(fd)?.close().await;
        Ok(())
    }
}

/// A stream that ends at once, with `error` as its result.
fn failed_stream<U, T>(
    store: &mut Access<'_, U, HasFs>,
    error: ErrorCode,
) -> wasmtime::Result<WithOutcome<T>>
where
    T: wasmtime::component::Lower + wasmtime::component::Lift + Send + Sync + 'static,
{
    Ok((
        StreamReader::new(&mut *store, std::iter::empty())?,
        FutureReader::new(
            &mut *store,
            async move { Ok::<_, wasmtime::Error>(Err(error)) },
        )?,
    ))
}

/// A write the stream `data` feeds, or its refusal.
fn write_stream<U>(
    mut store: Access<'_, U, HasFs>,
    fd: Resource<Descriptor>,
    mut data: StreamReader<u8>,
    at: Option<u64>,
) -> wasmtime::Result<FutureReader<Result<(), ErrorCode>>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let file =
        take(&store.get(), &fd).and_then(|(_, d)| d.file(crate::p2::DescriptorFlags::WRITE).p3());
    match file {
        Ok(file) => data.pipe(&mut store, Writer::new(file, at, tx))?,
        Err(e) => {
            data.close(&mut store)?;
            let _ = tx.send(Err(e.downcast()?));
        }
    }
    FutureReader::new(&mut store, async move {
        // A writer dropped without a word ended well.
        Ok::<_, wasmtime::Error>(rx.await.unwrap_or(Ok(())))
    })
}

impl<U> HostDescriptorWithStore<U> for HasFs {
    fn read_via_stream(
        mut store: Access<U, Self>,
        fd: Resource<Descriptor>,
        offset: Filesize,
    ) -> wasmtime::Result<WithOutcome<u8>> {
        let file = take(&store.get(), &fd).and_then(|(_, d)| match d.file {
            // As wasmtime-wasi: reading a directory as a stream is `is-directory`.
            None => Err(ErrorCode::IsDirectory.into()),
            Some(_) => d.file(crate::p2::DescriptorFlags::READ).p3(),
        });
        let file = match file {
            Ok(file) => file,
            Err(e) => return failed_stream(&mut store, e.downcast()?),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        Ok((
            StreamReader::new(&mut store, Reader::new(file, offset, tx))?,
            FutureReader::new(&mut store, async move {
                Ok::<_, wasmtime::Error>(rx.await.unwrap_or(Ok(())))
            })?,
        ))
    }

    fn write_via_stream(
        store: Access<'_, U, Self>,
        fd: Resource<Descriptor>,
        data: StreamReader<u8>,
        offset: Filesize,
    ) -> wasmtime::Result<FutureReader<Result<(), ErrorCode>>> {
        write_stream(store, fd, data, Some(offset))
    }

    fn append_via_stream(
        store: Access<'_, U, Self>,
        fd: Resource<Descriptor>,
        data: StreamReader<u8>,
    ) -> wasmtime::Result<FutureReader<Result<(), ErrorCode>>> {
        write_stream(store, fd, data, None)
    }

    async fn advise(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
        _offset: Filesize,
        _length: Filesize,
        _advice: Advice,
    ) -> FsResult<()> {
        // Advice only; the page cache already reads ahead of sequential readers.
        let (_, d) = store.descriptor(&fd)?;
        d.file(crate::p2::DescriptorFlags::empty()).p3().map(drop)
    }

    async fn sync_data(store: &Accessor<U, Self>, fd: Resource<Descriptor>) -> FsResult<()> {
        let (ns, d) = store.descriptor(&fd)?;
        d.sync(&ns, true).await.p3()
    }

    async fn get_flags(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
    ) -> FsResult<DescriptorFlags> {
        let (_, d) = store.descriptor(&fd)?;
        Ok(p3_flags(d.flags))
    }

    async fn get_type(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
    ) -> FsResult<DescriptorType> {
        let (_, d) = store.descriptor(&fd)?;
        Ok(descriptor_type(d.loc.node.kind))
    }

    async fn set_size(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
        size: Filesize,
    ) -> FsResult<()> {
        let (_, d) = store.descriptor(&fd)?;
        d.set_size(size).await.p3()
    }

    async fn set_times(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
        atime: NewTimestamp,
        mtime: NewTimestamp,
    ) -> FsResult<()> {
        let (ns, d) = store.descriptor(&fd)?;
        d.set_times(&ns, new_time(atime)?, new_time(mtime)?)
            .await
            .p3()
    }

    fn read_directory(
        mut store: Access<'_, U, Self>,
        fd: Resource<Descriptor>,
    ) -> wasmtime::Result<WithOutcome<DirectoryEntry>> {
        let (ns, d) = match take(&store.get(), &fd) {
            Ok(taken) => taken,
            Err(e) => return failed_stream(&mut store, e.downcast()?),
        };
        if !d.loc.is_dir() {
            return failed_stream(&mut store, ErrorCode::NotDirectory);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        Ok((
            StreamReader::new(&mut store, Listing::new(ns, d, tx))?,
            FutureReader::new(&mut store, async move {
                Ok::<_, wasmtime::Error>(rx.await.unwrap_or(Ok(())))
            })?,
        ))
    }

    async fn sync(store: &Accessor<U, Self>, fd: Resource<Descriptor>) -> FsResult<()> {
        let (ns, d) = store.descriptor(&fd)?;
        d.sync(&ns, false).await.p3()
    }

    async fn create_directory_at(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        let (ns, d) = store.descriptor(&fd)?;
        d.create_directory_at(&ns, &path).await.p3()
    }

    async fn stat(store: &Accessor<U, Self>, fd: Resource<Descriptor>) -> FsResult<DescriptorStat> {
        let (ns, d) = store.descriptor(&fd)?;
        let attr = d.attr(&ns).await.p3()?;
        Ok(stat(d.loc.node.kind, &attr))
    }

    async fn stat_at(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
    ) -> FsResult<DescriptorStat> {
        let (ns, d) = store.descriptor(&fd)?;
        let (loc, attr) = d.stat_at(&ns, follow(path_flags), &path).await.p3()?;
        Ok(stat(loc.node.kind, &attr))
    }

    async fn set_times_at(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        atime: NewTimestamp,
        mtime: NewTimestamp,
    ) -> FsResult<()> {
        let (ns, d) = store.descriptor(&fd)?;
        let (atime, mtime) = (new_time(atime)?, new_time(mtime)?);
        d.set_times_at(&ns, follow(path_flags), &path, atime, mtime)
            .await
            .p3()
    }

    async fn link_at(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
        old_path_flags: PathFlags,
        old_path: String,
        new_fd: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        let (ns, d) = store.descriptor(&fd)?;
        let (_, new_dir) = store.descriptor(&new_fd)?;
        d.link_at(&ns, follow(old_path_flags), &old_path, &new_dir, &new_path)
            .await
            .p3()
    }

    async fn open_at(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        open_flags: OpenFlags,
        flags: DescriptorFlags,
    ) -> FsResult<Resource<Descriptor>> {
        let (ns, d) = store.descriptor(&fd)?;
        let how = OpenAt {
            follow: follow(path_flags),
            oflags: p2_open_flags(open_flags),
            flags: p2_flags(flags),
        };
        let opened = d.open_at(&ns, &path, how).await.p3()?;
        store.with(|mut store| {
            let view = store.get();
            if let Some(file) = &opened.file {
                view.fs.opened(file);
            }
            view.table.push(opened).map_err(FsError::trap)
        })
    }

    async fn readlink_at(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<String> {
        let (ns, d) = store.descriptor(&fd)?;
        d.readlink_at(&ns, &path).await.p3()
    }

    async fn remove_directory_at(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        let (ns, d) = store.descriptor(&fd)?;
        d.remove_directory_at(&ns, &path).await.p3()
    }

    async fn rename_at(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
        old_path: String,
        new_fd: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        let (ns, d) = store.descriptor(&fd)?;
        let (_, new_dir) = store.descriptor(&new_fd)?;
        d.rename_at(&ns, &old_path, &new_dir, &new_path).await.p3()
    }

    async fn symlink_at(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
        old_path: String,
        new_path: String,
    ) -> FsResult<()> {
        let (ns, d) = store.descriptor(&fd)?;
        d.symlink_at(&ns, &old_path, &new_path).await.p3()
    }

    async fn unlink_file_at(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        let (ns, d) = store.descriptor(&fd)?;
        d.unlink_file_at(&ns, &path).await.p3()
    }

    async fn is_same_object(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
        other: Resource<Descriptor>,
    ) -> wasmtime::Result<bool> {
        store.with(|mut store| {
            let view = store.get();
            Ok(view.table.get(&fd)?.is_same_object(view.table.get(&other)?))
        })
    }

    async fn metadata_hash(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
    ) -> FsResult<MetadataHashValue> {
        let (ns, d) = store.descriptor(&fd)?;
        let attr = d.attr(&ns).await.p3()?;
        Ok(hash(&d.loc, &attr))
    }

    async fn metadata_hash_at(
        store: &Accessor<U, Self>,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
    ) -> FsResult<MetadataHashValue> {
        let (ns, d) = store.descriptor(&fd)?;
        let (loc, attr) = d.stat_at(&ns, follow(path_flags), &path).await.p3()?;
        Ok(hash(&loc, &attr))
    }
}

impl preopens::Host for FsView<'_> {
    fn get_directories(&mut self) -> wasmtime::Result<Vec<(Resource<Descriptor>, String)>> {
        let mut dirs = Vec::new();
        for (loc, path) in &self.fs.preopens {
            let d = Descriptor::preopen(loc.clone(), true);
            dirs.push((self.table.push(d)?, path.clone()));
        }
        Ok(dirs)
    }
}
