//! `wasm9p mount`: the namespace at a host directory through FUSE.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;

use super::guests::NamespaceArgs;
use super::shared::Shutdown;
use super::shared::{fail, say, EXIT_USAGE};
use wasm9p_fuse::{self as fuse, NamespaceFs};

/// `wasm9p mount`.
#[derive(Debug, Args)]
pub struct MountArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub namespace: NamespaceArgs,
    /// Mount read-only.
    #[arg(long)]
    pub read_only: bool,
    /// Let users other than the one mounting in (FUSE's allow_other; root may always,
    /// others only where /etc/fuse.conf has user_allow_other). Their access is checked
    /// by the kernel on the files' owners and modes.
    #[arg(long)]
    pub allow_other: bool,
    /// Where the namespace's root appears (an existing directory).
    pub mountpoint: PathBuf,
}

/// Mounts the namespace at MOUNTPOINT and serves it until SIGINT or SIGTERM (then
/// unmounts) or until it is unmounted from outside (`umount`, `fusermount3 -u`).
pub fn mount(args: MountArgs) -> ExitCode {
    let started = Instant::now();
    // Plugin mounts keep their compiled code where guests' goes by default.
    let cache =
        match super::engines::tier_from_env(wasm9p_host::module_cache::ModuleCache::user_default())
        {
            Ok(cache) => cache,
            Err(code) => return code,
        };
    let plugins = super::engines::plugin_compile(cache, Default::default());
    let table = match args.namespace.table() {
        Ok(table) => table
            .module_cache(plugins.cache)
            .plugin_tier(plugins.tier, plugins.upgrade_in),
        Err(code) => return code,
    };
    if !args.mountpoint.is_dir() {
        return fail(
            EXIT_USAGE,
            &format!("{} is not a directory", args.mountpoint.display()),
        );
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(1, &format!("cannot start the runtime: {e}")),
    };
    let mounts = match runtime.block_on(table.build()) {
        Ok(mounts) => mounts,
        Err(e) => return fail(EXIT_USAGE, &e.to_string()),
    };
    let shutdown = match runtime.block_on(async { Shutdown::register() }) {
        Ok(s) => s,
        Err(e) => return fail(1, &format!("cannot handle signals: {e}")),
    };
    let fs = NamespaceFs::new(mounts.namespace().clone(), runtime.handle().clone());
    let session = match fuser::spawn_mount2(
        fs,
        &args.mountpoint,
        &fuse::config(args.read_only, args.allow_other),
    ) {
        Ok(session) => session,
        Err(e) => {
            return fail(
                EXIT_USAGE,
                &format!("cannot mount on {}: {e}", args.mountpoint.display()),
            )
        }
    };
    // Scripts wait for this line to know the mount is usable.
    say(&format!("mounted on {}", args.mountpoint.display()));
    let unmounted_outside = runtime.block_on(async {
        let wait = shutdown.wait();
        tokio::pin!(wait);
        loop {
            tokio::select! {
                _ = &mut wait => return false,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {
                    if session.guard.is_finished() {
                        return true;
                    }
                }
            }
        }
    });
    let ended = if unmounted_outside {
        session.join()
    } else {
        match unmount(&args.mountpoint) {
            Ok(()) => session.join(),
            // Not root: fuser goes through fusermount3.
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => session.umount_and_join(),
            Err(e) => Err(e),
        }
    };
    args.namespace
        .report_stats(mounts.stats_json(0, started.elapsed().as_millis() as u64));
    drop(mounts);
    match ended {
        Ok(()) => {
            say("unmounted");
            ExitCode::SUCCESS
        }
        Err(e) => fail(1, &format!("unmounting {}: {e}", args.mountpoint.display())),
    }
}

/// Unmounts `point`. Files closed an instant before are released by the kernel
/// asynchronously, and until then the mount counts as busy: retried for up to 5 s, then
/// detached lazily (the kernel finishes when the last user lets go), which is said.
fn unmount(point: &Path) -> std::io::Result<()> {
    use rustix::mount::{unmount, UnmountFlags};
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match unmount(point, UnmountFlags::empty()) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::BUSY) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(rustix::io::Errno::BUSY) => {
                say(&format!(
                    "{} is still in use: detached lazily",
                    point.display()
                ));
                return unmount(point, UnmountFlags::DETACH).map_err(Into::into);
            }
            Err(e) => return Err(e.into()),
        }
    }
}
