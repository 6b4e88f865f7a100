//! An exported directory and how a client's `aname` selects it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

/// What to export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportConfig {
    /// Host directory.
    pub path: PathBuf,
    /// Name a client may use as `aname` (default: the directory's last component).
    pub name: Option<String>,
    /// Refuse every mutation with EROFS.
    pub read_only: bool,
}

impl ExportConfig {
    /// A writable export of `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        ExportConfig {
            path: path.into(),
            name: None,
            read_only: false,
        }
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
    /// The root, the only ambient-authority handle; all access goes beneath it.
    pub(crate) root: Arc<Dir>,
    /// Device of the root, to keep qid paths of other mounted file systems apart.
    pub(crate) root_dev: u64,
    /// Fids on this export alive now, over every connection.
    pub(crate) live_fids: std::sync::atomic::AtomicUsize,
}

impl Export {
    /// Opens the export's root directory.
    pub fn open(config: &ExportConfig) -> io::Result<Export> {
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
            root: Arc::new(root),
            root_dev,
            live_fids: Default::default(),
        })
    }

    /// Whether `aname` names this export: empty, its name, its path as configured, or
    /// its canonical path.
    pub fn matches(&self, aname: &str) -> bool {
        aname == self.name
            || Path::new(aname) == self.path
            || Path::new(aname) == self.canonical
            || Path::new(aname.trim_end_matches('/')) == self.canonical
    }
}
