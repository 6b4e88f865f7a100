//! Declarative file trees in a tempdir.

use std::path::{Path, PathBuf};

/// One entry of a tree.
#[derive(Clone, Debug)]
pub enum Tree {
    /// A file with contents.
    File(&'static str, Vec<u8>),
    /// A directory with entries.
    Dir(&'static str, Vec<Tree>),
    /// A symlink with a target (stored verbatim, never resolved here).
    Symlink(&'static str, &'static str),
}

impl Tree {
    /// A file with text contents.
    pub fn file(name: &'static str, text: &str) -> Tree {
        Tree::File(name, text.as_bytes().to_vec())
    }

    /// Creates the entry under `dir`.
    pub fn create_in(&self, dir: &Path) -> PathBuf {
        match self {
            Tree::File(name, data) => {
                let p = dir.join(name);
                std::fs::write(&p, data).unwrap();
                p
            }
            Tree::Dir(name, entries) => {
                let p = dir.join(name);
                std::fs::create_dir(&p).unwrap();
                for e in entries {
                    e.create_in(&p);
                }
                p
            }
            Tree::Symlink(name, target) => {
                let p = dir.join(name);
                std::os::unix::fs::symlink(target, &p).unwrap();
                p
            }
        }
    }

    /// A tempdir holding `entries`.
    pub fn build(entries: &[Tree]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for e in entries {
            e.create_in(dir.path());
        }
        dir
    }
}

/// Copies the directory `from` to `to` (made), recursively; symlinks are copied as
/// symlinks.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            copy_tree(&entry.path(), &dest);
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path()).unwrap(), &dest).unwrap();
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}
