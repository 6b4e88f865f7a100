//! New files get the mode the client asked for. A 9P2000.L client sends a mode with
//! its user's umask applied already (Linux's v9fs does, and so do our FUSE layer and
//! WASI guests), so the serving process's own umask must not take bits away again:
//! a `creat(..., 0620)` under umask 0 is 0620 on the export, as on a local disk, not
//! 0600 because the server runs under umask 022. diod and QEMU's helper run under
//! umask 0; a server embedded in a process of the user's cannot change that process's
//! umask, so what it strips is put back on the new file, by its descriptor (never by
//! its name, which a client could swap for a symlink in between), only when the
//! umask took something.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::OnceLock;

use rustix::fs::{Mode, OFlags};

/// The process's umask, read once (`Umask:` of /proc/self/status; where that cannot
/// be read, every bit is taken as masked, so that every new file is fixed).
fn umask() -> u32 {
    static UMASK: OnceLock<u32> = OnceLock::new();
    *UMASK.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                let line = status.lines().find(|l| l.starts_with("Umask:"))?;
                u32::from_str_radix(line["Umask:".len()..].trim(), 8).ok()
            })
            .unwrap_or(0o7777)
    })
}

/// Whether the umask took bits of `mode` from a file just made with it.
fn stripped(mode: u32) -> bool {
    mode & 0o7777 & umask() != 0
}

/// Gives the file open as `fd`, just made with `mode`, that mode exactly.
pub(super) fn exact(fd: impl AsFd, mode: u32) {
    if stripped(mode) {
        if let Err(e) = rustix::fs::fchmod(fd, Mode::from_raw_mode(mode & 0o7777)) {
            // A file system that cannot hold the bits keeps the mode it gave.
            tracing::debug!("fchmod of a new file to {mode:o}: {e}");
        }
    }
}

/// Gives `name` in `dir`, a directory or special file just made with `mode`, that mode
/// exactly: through a descriptor of it opened without following a symlink, and the
/// descriptor's `/proc/self/fd` link (fchmod refuses an `O_PATH` descriptor).
pub(super) fn exact_at(dir: impl AsFd, name: &str, mode: u32) {
    if !stripped(mode) {
        return;
    }
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fixed = rustix::fs::openat(dir, name, flags, Mode::empty()).and_then(|fd| {
        let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
        rustix::fs::chmod(link.as_str(), Mode::from_raw_mode(mode & 0o7777))
    });
    if let Err(e) = fixed {
        tracing::debug!("chmod of a new {name:?} to {mode:o}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn what_the_umask_strips_is_put_back_and_nothing_else_is_touched() {
        // The process's own umask: CI's (and a login shell's) 022 strips group write.
        // (Not changed here: it is the whole process's, other tests' files included.)
        if umask() & 0o020 == 0 {
            eprintln!(
                "umask {:o} strips no group write: nothing to put back",
                umask()
            );
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let fd = rustix::fs::open(dir.path(), OFlags::DIRECTORY, Mode::empty()).unwrap();
        let file = rustix::fs::openat(
            &fd,
            "f",
            OFlags::CREATE | OFlags::WRONLY,
            Mode::from_raw_mode(0o620),
        )
        .unwrap();
        rustix::fs::mkdirat(&fd, "d", Mode::from_raw_mode(0o770)).unwrap();
        let mode = |name: &str| {
            std::fs::metadata(dir.path().join(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(
            (mode("f") & 0o020, mode("d") & 0o020),
            (0, 0),
            "the umask took bits"
        );
        exact(&file, 0o620);
        exact_at(&fd, "d", 0o770);
        assert_eq!((mode("f"), mode("d")), (0o620, 0o770));
        // A symlink in the name's place is not followed.
        std::os::unix::fs::symlink(dir.path().join("f"), dir.path().join("l")).unwrap();
        exact_at(&fd, "l", 0o666);
        assert_eq!(mode("f"), 0o620, "not through a symlink");
    }
}
