//! `wasm9p run`: one guest on the namespace its options make; and, with `--root`, as a
//! build system's runner (CMake's `CMAKE_CROSSCOMPILING_EMULATOR`, a Makefile's test
//! rule).
//!
//! With `--root DIR` the guest sees the project root at its own absolute path (the
//! embedded 9p server, `cache=loose`) and starts in the host's working directory, with
//! `PWD` set to it, so relative paths and `..` mean what they mean on the host, as
//! `wasm9p cc` arranges for the compiler: a test that writes a file beside itself, or
//! reads one from the source tree by a relative path, finds it where the build put
//! it. The working directory must be inside the root. That working directory is a
//! preview1 notion (wasi-libc resolves relative paths against a preopen); a component
//! is refused under `--root`. The exit code is the guest's.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::guests::{exit_code, GuestArgs};
use super::shared::{fail, say, EXIT_USAGE};
use wasm9p_host::engine::Guest;

/// `wasm9p run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub guest: GuestArgs,
    /// Run as a build's runner: the project root DIR at its own path (embedded 9p,
    /// cache=loose; other --mount and --dir beside it) and the guest in the host's
    /// working directory, which must be inside it, with PWD set (preview1 modules).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// The guest: a WASI preview1 module or a WASI preview2 component (.wasm).
    pub module: PathBuf,
    /// Arguments for the guest (its argv[0] is the module's file name).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// Where a `--root` guest starts: the host's working directory, checked to be inside
/// `root` (both made absolute, without symlinks).
struct InRoot {
    root: PathBuf,
    cwd: String,
}

impl InRoot {
    fn new(root: &Path) -> Result<InRoot, String> {
        let root =
            std::fs::canonicalize(root).map_err(|e| format!("--root {}: {e}", root.display()))?;
        if !root.is_dir() {
            return Err(format!("--root {}: not a directory", root.display()));
        }
        let cwd = std::env::current_dir()
            .and_then(std::fs::canonicalize)
            .map_err(|e| format!("cannot tell the working directory: {e}"))?;
        if !cwd.starts_with(&root) {
            return Err(format!(
                "the working directory {} is outside the root {} (run inside it, or give a \
                 --root that holds it)",
                cwd.display(),
                root.display()
            ));
        }
        match (root.to_str(), cwd.to_str()) {
            (Some(r), Some(c)) if !r.contains(',') => Ok(InRoot {
                cwd: c.to_owned(),
                root,
            }),
            _ => Err(format!(
                "--root {}: the root must be UTF-8 without commas",
                root.display()
            )),
        }
    }

    /// The root's mount, as a SPEC.
    fn mount(&self) -> String {
        let root = self.root.display();
        format!("type=9p,export={root},target={root},cache=loose")
    }
}

/// `wasm9p run`: the guest's exit code; 2 for a setup error, 1 for a trap.
pub fn run(mut args: RunArgs) -> ExitCode {
    let in_root = match args.root.as_deref().map(InRoot::new).transpose() {
        Ok(in_root) => in_root,
        Err(e) => return fail(EXIT_USAGE, &e),
    };
    if let Some(in_root) = &in_root {
        if args.guest.namespace.no_mounts {
            return fail(EXIT_USAGE, "--root and --no-mounts: choose one");
        }
        args.guest.namespace.mounts.insert(0, in_root.mount());
    }
    let host = match args.guest.engine(&args.module) {
        Ok(host) => host,
        Err(code) => return code,
    };
    if in_root.is_some() && !host.runs_modules() {
        return fail(
            EXIT_USAGE,
            &format!(
                "--root: {} is a component; the working directory is given to preview1 \
                 modules only",
                args.module.display()
            ),
        );
    }
    let argv0 = args
        .module
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let argv = std::iter::once(argv0)
        .chain(args.args.iter().cloned())
        .collect();
    let mut env = args.guest.env.clone();
    if let Some(in_root) = &in_root {
        if !env.iter().any(|(k, _)| k == "PWD") {
            env.push(("PWD".into(), in_root.cwd.clone()));
        }
    }
    let working_dir = in_root.as_ref().map(|r| r.cwd.as_str());
    let finished = host.run(Guest::new(argv).env(&env).working_dir(working_dir));
    let (code, trap) = exit_code(&finished.outcome);
    if let Some(trap) = trap {
        say(&format!("guest trapped: {trap}"));
    }
    args.guest.namespace.report_stats(host.stats_now(1));
    host.finish();
    ExitCode::from(code)
}
