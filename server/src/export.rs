//! An exported directory and how a client's `aname` selects it.
//!
//! An `aname` names an export (empty for the only one, its name, its path as
//! configured, or its canonical path) or a directory inside one: `NAME/sub/dir`, or a
//! path below the export's path (`/srv/base/sub/dir`, as diod accepts). A directory
//! inside is reached one name at a time beneath the export's root without following
//! any symlink, and a `..` in the aname is refused: an attach can never leave its
//! export. The fids of such an attach have that directory as their root (`..` stays
//! there) and count with the export's own.

use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use crate::security::{At, SecurityModel};

/// What to export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportConfig {
    /// Host directory.
    pub path: PathBuf,
    /// Name a client may use as `aname` (default: the directory's last component).
    pub name: Option<String>,
    /// Refuse every mutation with EROFS.
    pub read_only: bool,
    /// How owners, modes and special files are kept (see [`crate::security`]).
    pub security_model: SecurityModel,
    /// In passthrough, make the device nodes clients ask for (else EPERM).
    pub allow_devices: bool,
}

impl ExportConfig {
    /// A writable export of `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        ExportConfig {
            path: path.into(),
            name: None,
            read_only: false,
            security_model: SecurityModel::default(),
            allow_devices: false,
        }
    }
}

/// A configuration no export can have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExportConfigError {
    /// Device nodes are allowed in a mapped model, which keeps them as regular files.
    #[error("allowing device nodes applies to the passthrough security model (mapped models keep device nodes as regular files)")]
    DevicesNeedPassthrough,
}

impl ExportConfig {
    /// Whether this configuration makes sense: the one place that decides it (the
    /// server refuses to open what it refuses; `wasm9p serve` and the SPEC parser ask
    /// it first, to say so in their own option names).
    pub fn check(&self) -> Result<(), ExportConfigError> {
        if self.allow_devices && self.security_model != SecurityModel::Passthrough {
            return Err(ExportConfigError::DevicesNeedPassthrough);
        }
        Ok(())
    }
}

/// An opened export.
#[derive(Debug)]
pub struct Export {
    /// The name clients may attach by.
    pub name: String,
    /// The directory as configured.
    pub path: PathBuf,
    /// The same directory with symlinks resolved.
    pub canonical: PathBuf,
    /// Every mutation gets EROFS.
    pub read_only: bool,
    /// How owners, modes and special files are kept.
    pub security_model: SecurityModel,
    /// Device nodes are made (passthrough).
    pub allow_devices: bool,
    /// The root, the only ambient-authority handle; all access goes beneath it.
    pub(crate) root: Arc<Dir>,
    /// Device of the root, to keep qid paths of other mounted file systems apart.
    pub(crate) root_dev: u64,
    /// Fids on this export alive now, over every connection (shared with the
    /// attach points inside it).
    pub(crate) live_fids: Arc<std::sync::atomic::AtomicUsize>,
}

impl Export {
    /// Opens the export's root directory.
    pub fn open(config: &ExportConfig) -> io::Result<Export> {
        config
            .check()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let with_path =
            |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", config.path.display()));
        let root = Dir::open_ambient_dir(&config.path, ambient_authority()).map_err(with_path)?;
        let root_dev = rustix::fs::fstat(&root)
            .map_err(io::Error::from)
            .map_err(with_path)?
            .st_dev;
        let canonical = std::fs::canonicalize(&config.path).map_err(with_path)?;
        let name = config.name.clone().unwrap_or_else(|| {
            canonical
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "/".into())
        });
        Ok(Export {
            name,
            path: config.path.clone(),
            canonical,
            read_only: config.read_only,
            security_model: config.security_model,
            allow_devices: config.allow_devices,
            root: Arc::new(root),
            root_dev,
            live_fids: Default::default(),
        })
    }

    /// Whether what clients make is mapped (kept in attributes, see [`crate::security`]).
    pub(crate) fn mapped(&self) -> bool {
        self.security_model != SecurityModel::Passthrough
    }

    /// Whether the mapped metadata is in files (mapped-file), whose names are hidden.
    pub(crate) fn metadata_files(&self) -> bool {
        self.security_model == SecurityModel::MappedFile
    }

    /// The mapped metadata of `name` in `dir`.
    pub(crate) fn meta<'a>(&self, dir: &'a impl AsFd, name: &'a str) -> At<'a> {
        At::name(self.security_model, dir, name)
    }

    /// The mapped metadata of a file just made as `name` in `dir` and open as `fd`.
    pub(crate) fn meta_of_new<'a>(
        &self,
        fd: &'a impl AsFd,
        dir: &'a impl AsFd,
        name: &'a str,
    ) -> At<'a> {
        match self.security_model {
            SecurityModel::MappedFile => At::name(self.security_model, dir, name),
            model => At::fd(model, fd),
        }
    }

    /// Whether `self` is `configured`, or a directory attached inside it (which shares
    /// its export's fid counter, and so is known by it).
    pub(crate) fn within(&self, configured: &Export) -> bool {
        Arc::ptr_eq(&self.live_fids, &configured.live_fids)
    }

    /// Whether `aname` names this export: its name, its path as configured, or its
    /// canonical path.
    pub fn matches(&self, aname: &str) -> bool {
        self.below(aname).is_some_and(|rest| rest.is_empty())
    }

    /// What `aname` names below this export, as the path after the export's name or
    /// path (empty: the export itself); `None` if it does not start with either.
    pub fn below<'a>(&self, aname: &'a str) -> Option<&'a str> {
        let trimmed = aname.trim_end_matches('/');
        let prefixes = [
            self.name.as_str(),
            self.path.to_str().unwrap_or(""),
            self.canonical.to_str().unwrap_or(""),
        ];
        prefixes
            .into_iter()
            .map(|p| p.trim_end_matches('/'))
            .filter(|p| !p.is_empty() || aname.starts_with('/'))
            .find_map(|prefix| {
                let rest = trimmed.strip_prefix(prefix)?;
                if rest.is_empty() {
                    Some("")
                } else {
                    rest.strip_prefix('/')
                }
            })
    }

    /// The directory `rel` (names separated by `/`) inside this export, as an export
    /// of its own for one attach: each name opened beneath the root without following
    /// symlinks; `..` is EACCES, a missing name ENOENT, a non-directory or a symlink
    /// ENOTDIR.
    pub(crate) fn subdir(&self, rel: &str) -> Result<Export, wasm9p_proto::Errno> {
        use cap_fs_ext::DirExt;
        use wasm9p_proto::Errno;
        let mut dir: Option<Dir> = None;
        let mut names = Vec::new();
        for name in rel.split('/').filter(|n| !n.is_empty() && *n != ".") {
            if name == ".." {
                return Err(Errno::EACCES);
            }
            if self.metadata_files() && crate::security::is_metadata_name(name) {
                // The model's own, hidden as from a walk.
                return Err(Errno::ENOENT);
            }
            let parent = dir.as_ref().unwrap_or(&self.root);
            let next = parent
                .open_dir_nofollow(name)
                .map_err(|e| match Errno::from(&e) {
                    Errno::ELOOP => Errno::ENOTDIR,
                    other => other,
                })?;
            names.push(name);
            dir = Some(next);
        }
        let Some(dir) = dir else {
            return Err(Errno::EINVAL);
        };
        let rel = names.join("/");
        Ok(Export {
            name: format!("{}/{rel}", self.name),
            path: self.path.join(&rel),
            canonical: self.canonical.join(&rel),
            read_only: self.read_only,
            security_model: self.security_model,
            allow_devices: self.allow_devices,
            root: Arc::new(dir),
            root_dev: self.root_dev,
            live_fids: self.live_fids.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_allowed_in_passthrough_only_and_the_server_refuses_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let passthrough = ExportConfig {
            allow_devices: true,
            ..ExportConfig::new(dir.path())
        };
        assert_eq!(passthrough.check(), Ok(()));
        assert!(Export::open(&passthrough).is_ok());
        for model in [SecurityModel::MappedXattr, SecurityModel::MappedFile] {
            let mapped = ExportConfig {
                security_model: model,
                ..passthrough.clone()
            };
            assert_eq!(
                mapped.check(),
                Err(ExportConfigError::DevicesNeedPassthrough)
            );
            let e = Export::open(&mapped).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            // Without devices, every model is fine.
            let plain = ExportConfig {
                allow_devices: false,
                ..mapped
            };
            assert_eq!(plain.check(), Ok(()));
        }
    }
}
