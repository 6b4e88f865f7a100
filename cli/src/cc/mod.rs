//! `wasm9p cc`, `c++`, `ar`, `ld`, `nm`, ...: clang.wasm's tools as host commands a
//! build system can call as `$CC`, `$AR` and the rest.
//!
//! The tools themselves, and the compiler driver run job by job, are
//! [`wasm9p_host::toolchain`]'s; this module is the command around them: its options
//! and environment, the daemon that keeps a build's guests in one process
//! ([`daemon`], reached through `autostart` and `client`), and the paths a guest
//! sees. stdout, stderr, stdin and the exit code are the guests' own, so `-E` and
//! `-o -` write to stdout and `-x c -` reads stdin.
//!
//! What the guest sees, so that every path a build passes means the same file:
//! - the project root (`--root DIR`, `WASM9P_ROOT`, default the working directory)
//!   at its own absolute path, served by the embedded 9p server (or by the `wasm9p
//!   serve` at `--root-source ADDR`, `WASM9P_ROOT_SOURCE`), `cache=loose`: the process
//!   lives for one compile and its own writes go through the mount;
//! - the toolchain's sysroot (`--toolchain DIR`, `WASM9P_TOOLCHAIN`, default what
//!   `scripts/fetch-clang-wasm` fetched) at `/usr`, read-only, where clang.wasm looks
//!   for its headers, libraries and resource directory;
//! - a private `/tmp` (a host directory of its own, removed at the end) for the
//!   driver's temporary objects;
//! - the working directory as the guest's working directory (see
//!   [`wasm9p_host::p1::WasiP1CtxBuilder::working_dir`]), and `PWD` set to it, so relative
//!   paths and `..` mean what they mean on the host, and clang records the real
//!   compilation directory.
//!
//! A path outside the root is refused before anything runs (`paths`); so is a
//! working directory outside the root.
//!
//! Our own options come before the tool's arguments (`wasm9p cc --root DIR -c a.c`);
//! called through a link named after a tool (`ln -s wasm9p cc`), every argument is
//! the tool's and only the environment variables apply.

mod autostart;
mod client;
mod daemon;
mod paths;
mod wire;

pub use daemon::{daemon, DaemonArgs};

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::engines::{engine_for, setup_failed, tier_from_env};
use wasm9p_host::engine::GuestEngine;
use wasm9p_host::module_cache::ModuleCache;
use wasm9p_host::mounts::MountTable;
pub use wasm9p_host::toolchain::Tool;
use wasm9p_host::toolchain::{Invocation, Io, TOOLS};

/// The clang.wasm release `scripts/fetch-clang-wasm` fetches (the default toolchain).
pub const CLANG_WASM_VERSION: &str = "22.0.0-git20542-10";

/// Exit code for a setup problem (no toolchain, a path outside the root).
const EXIT_SETUP: u8 = super::shared::EXIT_USAGE;

/// Where things are, from our options and the environment.
#[derive(Debug, Default)]
struct Options {
    root: Option<PathBuf>,
    root_source: Option<String>,
    toolchain: Option<PathBuf>,
    /// Where the work goes: `--daemon`, else `WASM9P_DAEMON`, else the user's daemon
    /// for the root (see [`autostart`]).
    daemon: Option<autostart::Daemon>,
}

impl Options {
    /// Our leading options (when `leading`), then the environment for what they left.
    fn take(args: &mut Vec<String>, leading: bool) -> Result<Options, String> {
        let mut opts = Options::default();
        let mut used = 0;
        while leading && used < args.len() {
            let arg = &args[used];
            let (key, inline) = match arg.split_once('=') {
                Some((k, v)) => (k, Some(v.to_owned())),
                None => (arg.as_str(), None),
            };
            if !["--root", "--root-source", "--toolchain", "--daemon"].contains(&key) {
                break;
            }
            let key = key.to_owned();
            let value = match inline {
                Some(v) => v,
                None => {
                    used += 1;
                    args.get(used)
                        .cloned()
                        .ok_or_else(|| format!("{key} needs a value"))?
                }
            };
            used += 1;
            match key.as_str() {
                "--root" => opts.root = Some(value.into()),
                "--root-source" => opts.root_source = Some(value),
                "--daemon" => {
                    opts.daemon = Some(
                        autostart::Daemon::parse(&value).map_err(|e| format!("--daemon: {e}"))?,
                    )
                }
                _ => opts.toolchain = Some(value.into()),
            }
        }
        args.drain(..used);
        opts.fill_from_env();
        if opts.daemon.is_none() {
            if let Some(addr) = std::env::var("WASM9P_DAEMON")
                .ok()
                .filter(|v| !v.is_empty())
            {
                opts.daemon = Some(
                    autostart::Daemon::parse(&addr).map_err(|e| format!("WASM9P_DAEMON: {e}"))?,
                );
            }
        }
        Ok(opts)
    }

    /// What the options left unsaid, from `WASM9P_ROOT`, `WASM9P_ROOT_SOURCE` and
    /// `WASM9P_TOOLCHAIN`.
    fn fill_from_env(&mut self) {
        let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        self.root = self
            .root
            .take()
            .or_else(|| env("WASM9P_ROOT").map(PathBuf::from));
        self.root_source = self
            .root_source
            .take()
            .or_else(|| env("WASM9P_ROOT_SOURCE").map(|v| v.to_string_lossy().into_owned()));
        self.toolchain = self
            .toolchain
            .take()
            .or_else(|| env("WASM9P_TOOLCHAIN").map(PathBuf::from));
    }
}

/// The default toolchain: where `scripts/fetch-clang-wasm` puts clang.wasm.
fn default_toolchain() -> Option<PathBuf> {
    let base = match std::env::var_os("WASM9P_FETCH_CACHE").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/wasm9p"),
    };
    Some(base.join(format!("yowasp-clang-{CLANG_WASM_VERSION}")))
}

/// A toolchain directory: `llvm.core.wasm` and `sysroot/usr`.
struct Toolchain {
    module: PathBuf,
    usr: PathBuf,
}

impl Toolchain {
    fn at(dir: Option<PathBuf>) -> Result<Toolchain, String> {
        let dir = dir.or_else(default_toolchain).ok_or(
            "no toolchain: give --toolchain DIR or set WASM9P_TOOLCHAIN (or HOME for the default)",
        )?;
        let toolchain = Toolchain {
            module: dir.join("llvm.core.wasm"),
            usr: dir.join("sysroot/usr"),
        };
        if !toolchain.module.is_file() || !toolchain.usr.is_dir() {
            return Err(format!(
                "no clang.wasm toolchain in {} (llvm.core.wasm and sysroot/usr): run \
                 scripts/fetch-clang-wasm, or give --toolchain DIR / WASM9P_TOOLCHAIN",
                dir.display()
            ));
        }
        Ok(toolchain)
    }
}

/// One line on stderr, prefixed with the tool's name as a build log shows it.
fn complain(tool: &str, message: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr().lock(), "wasm9p {tool}: {message}");
    ExitCode::from(EXIT_SETUP)
}

/// `wasm9p TOOL ARGS...`, or a link named TOOL: runs `tool` on `args` (our leading
/// options first, unless `called_as_tool`), here or in the daemon.
pub fn main(name: &str, tool: Tool, mut args: Vec<String>, called_as_tool: bool) -> ExitCode {
    let opts = match Options::take(&mut args, !called_as_tool) {
        Ok(opts) => opts,
        Err(e) => return complain(name, &e),
    };
    match opts.daemon.clone().unwrap_or(autostart::Daemon::Auto) {
        autostart::Daemon::Off => {}
        autostart::Daemon::At(socket) => {
            let sent = UnixStream::connect(&socket)
                .map_err(|e| {
                    client::Failure::Failed(format!(
                        "cannot reach the daemon at unix:{}: {e}",
                        socket.display()
                    ))
                })
                .and_then(|stream| client::run(stream, &socket, name, &opts, args.clone()));
            return match sent {
                Ok(code) => ExitCode::from(code),
                Err(client::Failure::Failed(e) | client::Failure::Unanswered(e)) => {
                    complain(name, &e)
                }
            };
        }
        autostart::Daemon::Auto => match through_own_daemon(name, &opts, &args) {
            Some(Ok(code)) => return ExitCode::from(code),
            Some(Err(e)) => return complain(name, &e),
            None => {} // said why; compiled here
        },
    }
    in_process(name, tool, opts, args)
}

/// `name` run by the user's daemon for the root (started if need be): its exit code,
/// or why it failed; `None` (said on stderr) when no daemon could take it, so that
/// it runs in this process instead. A daemon found that goes away unanswered (it
/// stopped, idle, at that moment) is started again once.
fn through_own_daemon(name: &str, opts: &Options, args: &[String]) -> Option<Result<u8, String>> {
    // What the daemon would serve; a setup this process could not use either is
    // left to it to report.
    let (_, root) = roots(opts).ok()?;
    let toolchain = opts.toolchain.clone().or_else(default_toolchain)?;
    let toolchain = std::fs::canonicalize(&toolchain).ok()?;
    Toolchain::at(Some(toolchain.clone())).ok()?;
    let identity = autostart::Identity {
        root: &root,
        toolchain: &toolchain,
        root_source: opts.root_source.as_deref(),
    };
    let mut why = String::new();
    for _ in 0..2 {
        let reached = match autostart::reach(&identity) {
            Ok(reached) => reached,
            Err(e) => {
                why = e;
                break;
            }
        };
        if reached.started {
            let _ = writeln!(
                std::io::stderr().lock(),
                "wasm9p {name}: started a daemon for {} (unix:{}); {}",
                root.display(),
                reached.socket.display(),
                daemon::idle_words(),
            );
        }
        match client::run(reached.stream, &reached.socket, name, opts, args.to_vec()) {
            Ok(code) => return Some(Ok(code)),
            Err(client::Failure::Failed(e)) => return Some(Err(e)),
            Err(client::Failure::Unanswered(e)) => {
                why = e;
                if reached.started {
                    break;
                }
            }
        }
    }
    let _ = writeln!(
        std::io::stderr().lock(),
        "wasm9p {name}: no daemon ({why}); compiling in this process"
    );
    None
}

/// `name` run in this process.
fn in_process(name: &str, tool: Tool, opts: Options, args: Vec<String>) -> ExitCode {
    let setup = match Setup::new(opts, true) {
        Ok(setup) => setup,
        Err(e) => return complain(name, &e),
    };
    if let Some(path) = paths::outside_root(&args, &setup.cwd, &setup.root) {
        return complain(
            name,
            &format!(
                "{path} is outside the project root {} that the guest sees (give a \
                 --root or WASM9P_ROOT that holds it)",
                setup.root.display()
            ),
        );
    }
    let host = match setup.host(false) {
        Ok(host) => host,
        Err(code) => return code,
    };
    let session = Invocation {
        host: &host,
        env: guest_env(std::env::vars_os(), &setup.cwd),
        cwd: &setup.cwd,
        usr: Some(&setup.toolchain.usr),
        tmp: setup.tmp.path(),
        io: Io::Local,
        namespace: None,
        memory_limit: None,
    };
    let code = session.run(tool, &args).exit_code();
    host.finish();
    drop(host);
    drop(setup);
    ExitCode::from(code)
}

/// The root, the working directory and the toolchain, checked, and the private `/tmp`.
struct Setup {
    root: PathBuf,
    root_source: Option<String>,
    /// The root mount's cache options.
    root_cache: &'static str,
    cwd: PathBuf,
    toolchain: Toolchain,
    tmp: tempfile::TempDir,
}

/// The working directory and the project root, resolved.
fn roots(opts: &Options) -> Result<(PathBuf, PathBuf), String> {
    let cwd = std::env::current_dir()
        .and_then(std::fs::canonicalize)
        .map_err(|e| format!("cannot tell the working directory: {e}"))?;
    let root = match &opts.root {
        Some(root) => std::fs::canonicalize(root)
            .map_err(|e| format!("the project root {}: {e}", root.display()))?,
        None => cwd.clone(),
    };
    Ok((cwd, root))
}

impl Setup {
    /// Checks the options; a daemon (`in_root == false`) may run outside its root,
    /// a tool must not.
    fn new(opts: Options, in_root: bool) -> Result<Setup, String> {
        let (cwd, root) = roots(&opts)?;
        if root == Path::new("/") || root.starts_with("/usr") {
            return Err(format!(
                "the project root cannot be {}: the guest has the toolchain at /usr \
                 (give --root or WASM9P_ROOT)",
                root.display()
            ));
        }
        if root.to_str().is_none_or(|r| r.contains(',')) || cwd.to_str().is_none() {
            return Err(format!(
                "the project root {} must be UTF-8 without commas",
                root.display()
            ));
        }
        if in_root && !cwd.starts_with(&root) {
            return Err(format!(
                "the working directory {} is outside the project root {} (give --root or \
                 WASM9P_ROOT)",
                cwd.display(),
                root.display()
            ));
        }
        let toolchain = Toolchain::at(opts.toolchain)?;
        let tmp = tempfile::Builder::new()
            .prefix("wasm9p-cc-")
            .tempdir()
            .map_err(|e| format!("cannot make a temporary directory: {e}"))?;
        Ok(Setup {
            root,
            root_source: opts.root_source,
            // What a tool's process reads lives as long as one compile; a daemon lives
            // on while the build and the user change files.
            root_cache: if in_root {
                "cache=loose"
            } else {
                "cache=loose,revalidate=0"
            },
            cwd,
            toolchain,
            tmp,
        })
    }

    /// The mounts, as `--mount` SPECs.
    fn mounts(&self) -> Vec<String> {
        let root = self.root.display();
        let cache = self.root_cache;
        let root_mount = match self.root_source.as_deref() {
            Some("bind") => format!("type=bind,source={root},target={root}"),
            Some(addr) => format!("type=9p,source={addr},target={root},{cache}"),
            None => format!("type=9p,export={root},target={root},{cache}"),
        };
        vec![
            format!(
                "type=9p,export={},target=/usr,cache=loose,ro",
                self.toolchain.usr.display()
            ),
            format!("type=bind,source={},target=/tmp", self.tmp.path().display()),
            root_mount,
        ]
    }

    /// The mounts made and the module loaded; `interruptible`: on engines that stop a
    /// cancelled guest at once (`wasm9p daemon --prompt-cancel`).
    fn host(&self, interruptible: bool) -> Result<GuestEngine, ExitCode> {
        let mut table = MountTable::builder();
        for spec in self.mounts() {
            table = table
                .mount(&spec)
                .map_err(|e| super::shared::fail(EXIT_SETUP, &e.to_string()))?;
        }
        let cache = tier_from_env(ModuleCache::user_default())?;
        engine_for(&self.toolchain.module, cache)
            .mounts(table)
            .interruptible(interruptible)
            .build()
            .map_err(setup_failed)
    }
}

/// The guests' environment: `vars` (the caller's), with `PWD` the working directory
/// and no temporary directory but the guest's own `/tmp`.
fn guest_env(
    vars: impl IntoIterator<Item = (impl Into<OsString>, impl Into<OsString>)>,
    cwd: &Path,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vars
        .into_iter()
        .filter_map(|(k, v)| Some((k.into().into_string().ok()?, v.into().into_string().ok()?)))
        .filter(|(k, _)| !["PWD", "TMPDIR", "TMP", "TEMP"].contains(&k.as_str()))
        .collect();
    env.push(("PWD".into(), cwd.display().to_string()));
    env
}

/// What `wasm9p help TOOL` prints for a tool of [`TOOLS`]: our own options (the
/// tool's own are its `--help`, `wasm9p TOOL --help`, answered by clang.wasm).
pub fn help(tool: &str) -> Option<String> {
    TOOLS.iter().find(|(n, _)| *n == tool)?;
    let names: Vec<&str> = TOOLS.iter().map(|(n, _)| *n).collect();
    Some(format!(
        "clang.wasm's `{tool}` as a host command: each run a guest (compiles job by job), \
         the project root at its own path through 9P, the toolchain's sysroot at /usr\n\n\
         Usage: wasm9p {tool} [--root DIR] [--root-source ADDR] [--toolchain DIR] \
         [--daemon off|auto|unix:PATH] ARGS...\n       \
         or a link to wasm9p named `{tool}` (then every argument is the tool's)\n\n\
         Options (before the tool's arguments):\n  \
         --root DIR          the project root, seen at its own path (WASM9P_ROOT; default: \
         the working directory)\n  \
         --root-source ADDR  the root from a `wasm9p serve` at ADDR instead of the \
         embedded server (WASM9P_ROOT_SOURCE)\n  \
         --toolchain DIR     clang.wasm and its sysroot (WASM9P_TOOLCHAIN; default: what \
         scripts/fetch-clang-wasm fetched)\n  \
         --daemon off|auto|unix:PATH\n                      \
         off: compile in this process; auto: the user's daemon for the root, started if need be; unix:PATH: through that `wasm9p daemon` \
         (WASM9P_DAEMON; default: auto)\n\n\
         The tool's own options: wasm9p {tool} --help. Tools: {}\n",
        names.join(", ")
    ))
}

/// Splits `std::env::args_os()` for [`main`]: the tool this process was called as
/// (through a link named after it), or the tool subcommand `wasm9p TOOL ...` names.
pub fn called(args: &[OsString]) -> Option<(String, Tool, Vec<String>, bool)> {
    let strings =
        || -> Option<Vec<String>> { args.iter().map(|a| a.clone().into_string().ok()).collect() };
    let argv0 = Path::new(args.first()?).file_name()?.to_str()?;
    if !argv0.starts_with("wasm9p") {
        if let Some(tool) = Tool::named(argv0) {
            return Some((argv0.to_owned(), tool, strings()?.split_off(1), true));
        }
    }
    let sub = args.get(1)?.to_str()?;
    let tool = Tool::named(sub).filter(|_| TOOLS.iter().any(|(n, _)| *n == sub))?;
    Some((sub.to_owned(), tool, strings()?.split_off(2), false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_passes_every_argument_and_a_subcommand_its_own() {
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let (name, tool, args, as_tool) = called(&os(&["/bin/cc", "--root", "x"])).unwrap();
        assert_eq!(
            (name.as_str(), tool, as_tool),
            ("cc", Tool::Driver("clang"), true)
        );
        assert_eq!(args, ["--root", "x"]);
        let (name, tool, args, as_tool) = called(&os(&["/x/wasm9p", "ar", "rcs", "l.a"])).unwrap();
        assert_eq!(
            (name.as_str(), tool, as_tool),
            ("ar", Tool::Direct("ar"), false)
        );
        assert_eq!(args, ["rcs", "l.a"]);
        assert!(called(&os(&["/x/wasm9p", "run", "m.wasm"])).is_none());
        assert!(called(&os(&["/x/wasm9p", "llvm-ar"])).is_none());
    }

    #[test]
    fn leading_options_are_ours_and_the_rest_the_tool_s() {
        let mut args: Vec<String> = ["--root=/p", "--toolchain", "/t", "-c", "--root", "a.c"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let opts = Options::take(&mut args, true).unwrap();
        assert_eq!(opts.root.as_deref(), Some(Path::new("/p")));
        assert_eq!(opts.toolchain.as_deref(), Some(Path::new("/t")));
        assert_eq!(args, ["-c", "--root", "a.c"]);
        let mut missing = vec!["--root".to_string()];
        assert!(Options::take(&mut missing, true).is_err());
    }

    #[test]
    fn the_default_toolchain_is_the_one_the_fetch_script_fetches() {
        let script = include_str!("../../../scripts/fetch-clang-wasm");
        assert!(
            script.contains(&format!("version={CLANG_WASM_VERSION}\n")),
            "scripts/fetch-clang-wasm fetches another version than CLANG_WASM_VERSION"
        );
    }
}
