//! Requests on open directories: opendir (a snapshot of the entries), readdir,
//! releasedir, fsyncdir.

use fuser::{
    Errno as FuseErrno, FileHandle, FileType, FopenFlags, INodeNo, ReplyDirectory, ReplyEmpty,
    ReplyOpen,
};
use wasm9p_guest_fs::backend::Attr;

use crate::convert::file_type;
use crate::{DirHandle, NamespaceFs};

pub(crate) fn opendir(fs: &NamespaceFs, ino: INodeNo, reply: ReplyOpen) {
    let result = fs.path(ino).and_then(|path| {
        let listing = fs
            .rt
            .block_on(fs.holding(async || fs.ns.readdir(&path).await))?;
        let mut entries = vec![
            (".".to_string(), FileType::Directory, ino.0),
            ("..".to_string(), FileType::Directory, ino.0),
        ];
        entries.extend(
            listing
                .into_iter()
                .filter(|e| e.name != "." && e.name != "..")
                .map(|e| (e.name, file_type(e.kind, &Attr::default()), e.id.max(2))),
        );
        let fh = fs.fh();
        fs.dirs.lock().unwrap().insert(fh, DirHandle { entries });
        Ok(fh)
    });
    match result {
        Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
        Err(e) => reply.error(fs.refused(e)),
    }
}

pub(crate) fn readdir(fs: &NamespaceFs, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
    let dirs = fs.dirs.lock().unwrap();
    let Some(dir) = dirs.get(&fh.0) else {
        return reply.error(FuseErrno::EBADF);
    };
    for (i, (name, kind, id)) in dir.entries.iter().enumerate().skip(offset as usize) {
        if reply.add(INodeNo(*id), i as u64 + 1, *kind, name) {
            break; // the kernel's buffer is full; it asks again from here
        }
    }
    reply.ok();
}

pub(crate) fn releasedir(fs: &NamespaceFs, fh: FileHandle, reply: ReplyEmpty) {
    fs.dirs.lock().unwrap().remove(&fh.0);
    reply.ok();
}

pub(crate) fn fsyncdir(fs: &NamespaceFs, ino: INodeNo, reply: ReplyEmpty) {
    let result = fs.path(ino).and_then(|p| {
        fs.rt.block_on(async {
            let dir = fs.ns.resolve(&p, false).await?;
            fs.ns.sync_dir_at(&dir).await
        })
    });
    fs.empty(reply, result);
}
