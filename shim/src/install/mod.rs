//! `containerd-shim-wasm9p-v1 install` and `uninstall`: the shim put on a node, and
//! taken off it, without breaking what the node runs.
//!
//! ```text
//! containerd-shim-wasm9p-v1 install   [--dry-run] [--config FILE] [--bin-dir DIR] [--shim-config FILE]
//! containerd-shim-wasm9p-v1 uninstall [--dry-run] [--config FILE] [--bin-dir DIR] [--shim-config FILE]
//! ```
//!
//! `install`, as root on the node:
//! 1. copies this binary to `--bin-dir` (`/usr/local/bin`, on containerd's `PATH`
//!    under systemd), by a rename, so that running shims keep their file;
//! 2. writes the shim's configuration (`--shim-config`, `/etc/wasm9p/shim.toml`) with
//!    its defaults if there is none, and checks the one there if there is;
//! 3. adds the runtime `wasm9p` to containerd's configuration (`--config`,
//!    `/etc/containerd/config.toml`), keeping runc and everything else there
//!    ([`containerd_config`]), after a copy of the old file beside it
//!    (`config.toml.before-wasm9p`);
//! 4. says what it did, and that containerd must be restarted to take the runtime.
//!
//! Run again, it changes nothing and says so. `--dry-run` says what it would do, the
//! configuration's change as a diff, and touches nothing. `uninstall` takes the runtime
//! out of the configuration and the binary out of `--bin-dir`; the shim's
//! configuration goes only if it is still the one `install` wrote, and the module
//! cache stays (it is data: `rm -r /var/lib/wasm9p` removes it).
//!
//! Exit codes: 0 done (or nothing to do), 1 a step failed (the step and why in one
//! line; what was done before it is said), 2 a bad command line.

pub mod containerd_config;

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::config::{ShimConfig, DEFAULT_PATH, SAMPLE};

/// The binary's name, which containerd looks for on its `PATH`.
pub const BINARY: &str = "containerd-shim-wasm9p-v1";

/// The suffix of the copy of containerd's configuration kept before a change.
pub const BACKUP_SUFFIX: &str = ".before-wasm9p";

/// What to install where (the command line's options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Only say what would be done.
    pub dry_run: bool,
    /// containerd's configuration.
    pub config: PathBuf,
    /// Where the binary goes.
    pub bin_dir: PathBuf,
    /// The shim's own configuration.
    pub shim_config: PathBuf,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            dry_run: false,
            config: PathBuf::from("/etc/containerd/config.toml"),
            bin_dir: PathBuf::from("/usr/local/bin"),
            shim_config: PathBuf::from(DEFAULT_PATH),
        }
    }
}

/// Which of the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Put the shim on the node.
    Install,
    /// Take it off.
    Uninstall,
}

const USAGE: &str = "usage: containerd-shim-wasm9p-v1 install|uninstall [--dry-run] \
                     [--config FILE] [--bin-dir DIR] [--shim-config FILE]";

/// Whether the command line (without the program's name) is one of these commands.
pub fn is_command(args: &[String]) -> bool {
    matches!(
        args.first().map(String::as_str),
        Some("install" | "uninstall")
    )
}

/// Parses the command line (without the program's name); the error is one line.
pub fn parse_args(args: &[String]) -> Result<(Action, Options), String> {
    let action = match args.first().map(String::as_str) {
        Some("install") => Action::Install,
        Some("uninstall") => Action::Uninstall,
        _ => return Err(USAGE.into()),
    };
    let mut options = Options::default();
    let mut rest = args[1..].iter();
    while let Some(arg) = rest.next() {
        let mut path = |name: &str| match rest.next() {
            Some(value) if !value.is_empty() => Ok(PathBuf::from(value)),
            _ => Err(format!("{name} needs a path; {USAGE}")),
        };
        match arg.as_str() {
            "--dry-run" => options.dry_run = true,
            "--config" => options.config = path("--config")?,
            "--bin-dir" => options.bin_dir = path("--bin-dir")?,
            "--shim-config" => options.shim_config = path("--shim-config")?,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown option {other:?}; {USAGE}")),
        }
    }
    Ok((action, options))
}

/// The commands' entry point: prints what it does, returns the exit code.
pub fn main(args: &[String]) -> i32 {
    let (action, options) = match parse_args(args) {
        Ok(parsed) => parsed,
        Err(why) => {
            eprintln!("{why}");
            return 2;
        }
    };
    let source = match std::env::current_exe() {
        Ok(path) => path,
        Err(e) => {
            eprintln!("{BINARY}: cannot find its own binary: {e}");
            return 1;
        }
    };
    let mut out = std::io::stdout().lock();
    let result = match action {
        Action::Install => install(&options, &source, &mut out),
        Action::Uninstall => uninstall(&options, &mut out),
    };
    match result {
        Ok(()) => 0,
        Err(why) => {
            let _ = out.flush();
            eprintln!("{BINARY} {}: {why}", args[0]);
            1
        }
    }
}

/// Installs `source` (the shim's binary) as `options` say; reports to `out`.
pub fn install(options: &Options, source: &Path, out: &mut dyn Write) -> Result<(), String> {
    let would = if options.dry_run { "would " } else { "" };
    let mut changed_config = false;

    // 1. The binary.
    let target = options.bin_dir.join(BINARY);
    if same_contents(source, &target)? {
        say(out, format!("{}: up to date", target.display()));
    } else {
        if !options.dry_run {
            copy_by_rename(source, &target)?;
        }
        say(
            out,
            format!("{would}copy {} to {}", source.display(), target.display()),
        );
    }

    // 2. The shim's configuration.
    match std::fs::read_to_string(&options.shim_config) {
        Ok(text) => {
            ShimConfig::parse(&text)
                .map_err(|why| format!("{}: {why}", options.shim_config.display()))?;
            say(
                out,
                format!("{}: kept (it parses)", options.shim_config.display()),
            );
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !options.dry_run {
                write_file(&options.shim_config, SAMPLE.as_bytes(), 0o644)?;
            }
            say(
                out,
                format!(
                    "{would}write {} (the defaults)",
                    options.shim_config.display()
                ),
            );
        }
        Err(e) => return Err(format!("{}: {e}", options.shim_config.display())),
    }

    // 3. containerd's configuration.
    let (old, mode) = read_config(&options.config)?;
    let edit = containerd_config::add_runtime(old.as_deref().unwrap_or(""))?;
    if edit.text == old.as_deref().unwrap_or("") {
        say(
            out,
            format!("{}: already has the runtime", options.config.display()),
        );
    } else {
        changed_config = true;
        apply_edit(options, (old.as_deref(), mode), &edit, out)?;
    }
    for note in edit.changes.iter().filter(|c| c.starts_with("note:")) {
        say(out, format!("{}: {note}", options.config.display()));
    }

    // 4. What is left to do.
    if changed_config {
        say(
            out,
            format!(
                "containerd {would}take the runtime once restarted: systemctl restart containerd\n\
                 then a RuntimeClass with handler: {} runs pods on it (docs/shim.md)",
                containerd_config::RUNTIME_NAME
            ),
        );
    } else {
        say(out, "nothing to do: the node has the runtime".into());
    }
    Ok(())
}

/// Uninstalls as `options` say; reports to `out`.
pub fn uninstall(options: &Options, out: &mut dyn Write) -> Result<(), String> {
    let would = if options.dry_run { "would " } else { "" };
    let mut did = false;

    let (old, mode) = read_config(&options.config)?;
    if let Some(old) = old {
        let edit = containerd_config::remove_runtime(&old)?;
        if edit.text != old {
            did = true;
            apply_edit(options, (Some(&old), mode), &edit, out)?;
            say(
                out,
                format!("containerd {would}stop offering the runtime once restarted"),
            );
        }
    }

    let target = options.bin_dir.join(BINARY);
    if target.exists() {
        did = true;
        if !options.dry_run {
            std::fs::remove_file(&target).map_err(|e| format!("{}: {e}", target.display()))?;
        }
        say(out, format!("{would}remove {}", target.display()));
    }

    match std::fs::read_to_string(&options.shim_config) {
        Ok(text) if text == SAMPLE => {
            did = true;
            if !options.dry_run {
                std::fs::remove_file(&options.shim_config)
                    .map_err(|e| format!("{}: {e}", options.shim_config.display()))?;
            }
            say(
                out,
                format!(
                    "{would}remove {} (the defaults install wrote)",
                    options.shim_config.display()
                ),
            );
        }
        Ok(_) => say(
            out,
            format!(
                "{}: kept (changed since install)",
                options.shim_config.display()
            ),
        ),
        Err(_) => {}
    }
    if !did {
        say(
            out,
            "nothing to do: the node does not have the runtime".into(),
        );
    }
    Ok(())
}

/// Says what `edit` changes in containerd's configuration (whose text was `old`, and
/// mode `mode`), and makes the change, or in a dry run shows it as a diff.
fn apply_edit(
    options: &Options,
    (old, mode): (Option<&str>, u32),
    edit: &containerd_config::Edit,
    out: &mut dyn Write,
) -> Result<(), String> {
    let path = options.config.display();
    for change in edit.changes.iter().filter(|c| !c.starts_with("note:")) {
        say(out, format!("{path}: {}", tensed(change, options.dry_run)));
    }
    if options.dry_run {
        say(out, diff(&options.config, old.unwrap_or(""), &edit.text));
        Ok(())
    } else {
        replace_config(&options.config, old, &edit.text, mode)
    }
}

/// A change as the edit says it ("added ...", "set ...", "removed ..."), or, in a dry
/// run, as what would be done ("would add ...").
fn tensed(change: &str, dry_run: bool) -> String {
    if !dry_run {
        return change.to_owned();
    }
    for (done, to_do) in [
        ("added ", "add "),
        ("set ", "set "),
        ("removed ", "remove "),
    ] {
        if let Some(rest) = change.strip_prefix(done) {
            return format!("would {to_do}{rest}");
        }
    }
    change.to_owned()
}

fn say(out: &mut dyn Write, line: String) {
    // A closed stdout must not stop an install halfway.
    let _ = writeln!(out, "{line}");
}

/// containerd's configuration's text (none if there is no file) and mode.
fn read_config(path: &Path) -> Result<(Option<String>, u32), String> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let mode = std::fs::metadata(path)
                .map(|m| m.permissions().mode() & 0o7777)
                .unwrap_or(0o644);
            Ok((Some(text), mode))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((None, 0o644)),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Writes the new configuration, the old one kept beside it first.
fn replace_config(path: &Path, old: Option<&str>, text: &str, mode: u32) -> Result<(), String> {
    if let Some(old) = old {
        let mut backup = path.as_os_str().to_owned();
        backup.push(BACKUP_SUFFIX);
        write_file(Path::new(&backup), old.as_bytes(), mode)?;
    }
    write_file(path, text.as_bytes(), mode)
}

/// Whether `target` exists with `source`'s bytes.
fn same_contents(source: &Path, target: &Path) -> Result<bool, String> {
    let Ok(theirs) = std::fs::metadata(target) else {
        return Ok(false);
    };
    let ours = std::fs::metadata(source).map_err(|e| format!("{}: {e}", source.display()))?;
    if ours.len() != theirs.len() {
        return Ok(false);
    }
    let read = |path: &Path| std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()));
    Ok(read(source)? == read(target)?)
}

fn copy_by_rename(source: &Path, target: &Path) -> Result<(), String> {
    let bytes = std::fs::read(source).map_err(|e| format!("{}: {e}", source.display()))?;
    write_file(target, &bytes, 0o755)
}

/// Writes `path` whole or not at all: a file beside it, synced, renamed over it (the
/// directory is made if missing).
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let fail = |e: std::io::Error| format!("{}: {e}", path.display());
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(fail)?;
    let name = path
        .file_name()
        .ok_or_else(|| format!("{}: not a file name", path.display()))?;
    let mut temporary = name.to_owned();
    temporary.push(format!(".wasm9p-{}", std::process::id()));
    let temporary = dir.join(temporary);
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&temporary)?;
        file.write_all(bytes)?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.map_err(fail)
}

/// The change from `old` to `new` as a unified diff of one hunk (the lines between
/// what the two share at the start and at the end).
pub fn diff(path: &Path, old: &str, new: &str) -> String {
    let old: Vec<&str> = old.lines().collect();
    let new: Vec<&str> = new.lines().collect();
    let head = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let tail = old[head..]
        .iter()
        .rev()
        .zip(new[head..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let context = 3;
    let from = head.saturating_sub(context);
    let (old_end, new_end) = (old.len() - tail, new.len() - tail);
    let (old_to, new_to) = (
        (old_end + context).min(old.len()),
        (new_end + context).min(new.len()),
    );
    let mut text = format!(
        "--- {path}\n+++ {path}\n@@ -{},{} +{},{} @@\n",
        from + 1,
        old_to - from,
        from + 1,
        new_to - from,
        path = path.display()
    );
    for line in &old[from..head] {
        text.push_str(&format!(" {line}\n"));
    }
    for line in &old[head..old_end] {
        text.push_str(&format!("-{line}\n"));
    }
    for line in &new[head..new_end] {
        text.push_str(&format!("+{line}\n"));
    }
    for line in &new[new_end..new_to] {
        text.push_str(&format!(" {line}\n"));
    }
    text.pop();
    text
}
