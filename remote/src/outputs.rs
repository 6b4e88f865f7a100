//! What an action made, as REAPI wants it back: an `ActionResult` naming each output
//! by digest, and the blobs to upload for it.
//!
//! - **Which outputs.** `output_paths` when the `Command` has any (REAPI 2.1: each
//!   is whatever is there, a file, a directory or a symlink), else `output_files` and
//!   `output_directories`. Each is relative to the working directory, which is
//!   relative to the input root; [`output_path`] makes it a path from the root and
//!   refuses one that leaves the root ([`OutputError::OutsideRoot`], before the action
//!   runs). An output the action did not make is left out, as REAPI says; a file
//!   asked for as a directory, or a directory as a file, is an error of the action.
//! - **Files** by digest (hashed from the layer; a file of the input root left as it
//!   was keeps its digest) with their executable bit; **directories** as a `Tree`
//!   message (the directory and every directory below it, entries sorted by name, as
//!   REAPI asks), uploaded with every file in it; **symlinks** by target.
//! - The stdout and stderr of the action are blobs too ([`Collected::add_stream`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use wasm9p_proto::Errno;

use crate::apis::v2;
use crate::cas::Upload;
use crate::digest::Digest;
use crate::layer::{ActionFs, Inspected};

/// Why an action's outputs cannot be collected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OutputError {
    /// An output path that leaves the input root.
    #[error("the output path {0:?} leaves the input root")]
    OutsideRoot(String),
    /// A working directory that leaves the input root.
    #[error("the working directory {0:?} leaves the input root")]
    WorkingDirOutside(String),
    /// An output file that is a directory, or the other way round.
    #[error("the output {path:?} should be a {wanted}, and the action made {made}")]
    WrongKind {
        /// The output, from the input root.
        path: String,
        /// What the Command asked for.
        wanted: &'static str,
        /// What is there.
        made: &'static str,
    },
    /// Reading an output failed.
    #[error("reading the output {path:?}: {errno}")]
    Unreadable {
        /// The output.
        path: String,
        /// The error.
        errno: Errno,
    },
}

/// `relative` (a working directory, or an output path under `working_dir`) as a path
/// from the input root, `..` resolved lexically: an error if it leaves the root.
pub fn output_path(working_dir: &str, relative: &str) -> Result<String, OutputError> {
    crate::tree::within_root(working_dir, relative)
        .ok_or_else(|| OutputError::OutsideRoot(relative.to_owned()))
}

/// The working directory of a `Command` as a path from the input root.
pub fn working_dir(command: &v2::Command) -> Result<String, OutputError> {
    output_path("", &command.working_directory)
        .map_err(|_| OutputError::WorkingDirOutside(command.working_directory.clone()))
}

/// What an output is to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// A file (`output_files`).
    File,
    /// A directory (`output_directories`).
    Directory,
    /// Whatever is there (`output_paths`).
    Any,
}

/// The outputs a `Command` names: (as REAPI gives it, from the input root, what it is
/// to be), each checked to stay inside the root.
#[allow(deprecated)] // output_files and output_directories: older clients send them
pub fn wanted_outputs(command: &v2::Command) -> Result<Vec<(String, String, Wanted)>, OutputError> {
    let wd = working_dir(command)?;
    let named: Vec<(&String, Wanted)> = match command.output_paths.is_empty() {
        false => command
            .output_paths
            .iter()
            .map(|p| (p, Wanted::Any))
            .collect(),
        true => command
            .output_files
            .iter()
            .map(|p| (p, Wanted::File))
            .chain(
                command
                    .output_directories
                    .iter()
                    .map(|p| (p, Wanted::Directory)),
            )
            .collect(),
    };
    named
        .into_iter()
        .map(|(given, wanted)| Ok((given.clone(), output_path(&wd, given)?, wanted)))
        .collect()
}

/// An `ActionResult` being made, and the blobs it names.
#[derive(Debug, Default)]
pub struct Collected {
    /// The result (outputs; exit code and streams are the caller's).
    pub result: v2::ActionResult,
    /// What to upload for it.
    pub blobs: Vec<Upload>,
    /// Bytes of outputs.
    pub bytes: u64,
}

impl Collected {
    /// Adds stdout or stderr: its digest, and the blob (the empty one is not uploaded).
    pub fn add_stream(&mut self, data: Vec<u8>) -> Option<v2::Digest> {
        let digest = Digest::of(&data);
        if !data.is_empty() {
            self.blobs.push(Upload::Bytes(digest, Bytes::from(data)));
        }
        Some(digest.to_proto())
    }
}

fn kind_name(i: &Inspected) -> &'static str {
    match i {
        Inspected::TreeFile { .. } | Inspected::MadeFile { .. } => "file",
        Inspected::Dir(_) => "directory",
        Inspected::Symlink(_) => "symlink",
    }
}

/// The outputs `command` names, read from `fs` after the action ran.
pub fn collect(fs: &ActionFs, command: &v2::Command) -> Result<Collected, OutputError> {
    let mut out = Collected::default();
    for (given, path, wanted) in wanted_outputs(command)? {
        let node = match fs.resolve(&path) {
            Ok(node) => node,
            Err(Errno::ENOENT) | Err(Errno::ENOTDIR) => continue, // not made: left out
            Err(errno) => return Err(OutputError::Unreadable { path, errno }),
        };
        let unreadable = |errno| OutputError::Unreadable {
            path: path.clone(),
            errno,
        };
        let what = fs.inspect(node).map_err(unreadable)?;
        match (&what, wanted) {
            (Inspected::Dir(_), Wanted::File)
            | (Inspected::TreeFile { .. }, Wanted::Directory)
            | (Inspected::MadeFile { .. }, Wanted::Directory) => {
                return Err(OutputError::WrongKind {
                    path,
                    wanted: if wanted == Wanted::File {
                        "file"
                    } else {
                        "directory"
                    },
                    made: kind_name(&what),
                })
            }
            _ => {}
        }
        match what {
            Inspected::Symlink(target) => out.result.output_symlinks.push(v2::OutputSymlink {
                path: given,
                target,
                node_properties: None,
            }),
            Inspected::Dir(_) => {
                let tree = tree_of(fs, node, &path, &mut out)?;
                let bytes = tree.encode_to_vec();
                let digest = Digest::of(&bytes);
                out.blobs.push(Upload::Bytes(digest, Bytes::from(bytes)));
                out.result.output_directories.push(v2::OutputDirectory {
                    path: given,
                    tree_digest: Some(digest.to_proto()),
                    is_topologically_sorted: false,
                    root_directory_digest: None,
                });
            }
            file => {
                let (digest, executable) = file_digest(file, &mut out).map_err(unreadable)?;
                out.result.output_files.push(v2::OutputFile {
                    path: given,
                    digest: Some(digest.to_proto()),
                    is_executable: executable,
                    contents: Vec::new(),
                    node_properties: None,
                });
            }
        }
    }
    Ok(out)
}

/// A file's digest (its blob queued to upload when the action made it).
fn file_digest(file: Inspected, out: &mut Collected) -> Result<(Digest, bool), Errno> {
    match file {
        Inspected::TreeFile { digest, executable } => Ok((digest, executable)),
        Inspected::MadeFile {
            file,
            size,
            executable,
        } => {
            let digest = digest_of_file(&file, size).map_err(|e| Errno::from(&e))?;
            out.bytes += size;
            out.blobs.push(Upload::File(digest, file));
            Ok((digest, executable))
        }
        _ => Err(Errno::EISDIR),
    }
}

/// The digest of the first `size` bytes of `file`.
fn digest_of_file(file: &Arc<std::fs::File>, size: u64) -> std::io::Result<Digest> {
    use std::io::Read;
    struct At<'a>(&'a std::fs::File, u64);
    impl Read for At<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            use std::os::unix::fs::FileExt;
            let n = self.0.read_at(buf, self.1)?;
            self.1 += n as u64;
            Ok(n)
        }
    }
    Digest::of_reader(At(file, 0).take(size))
}

/// The `Tree` of directory `node` (at `path`), its files queued to upload.
fn tree_of(
    fs: &ActionFs,
    node: u64,
    path: &str,
    out: &mut Collected,
) -> Result<v2::Tree, OutputError> {
    let mut children = BTreeMap::new();
    let root = directory_of(fs, node, path, out, &mut children)?;
    Ok(v2::Tree {
        root: Some(root),
        children: children.into_values().collect(),
    })
}

/// The `Directory` message of `node`, those below it added to `children` by digest.
fn directory_of(
    fs: &ActionFs,
    node: u64,
    path: &str,
    out: &mut Collected,
    children: &mut BTreeMap<Digest, v2::Directory>,
) -> Result<v2::Directory, OutputError> {
    let unreadable = |errno| OutputError::Unreadable {
        path: path.to_owned(),
        errno,
    };
    let Inspected::Dir(entries) = fs.inspect(node).map_err(unreadable)? else {
        return Err(unreadable(Errno::ENOTDIR));
    };
    let mut dir = v2::Directory::default();
    for (name, child) in entries {
        let child_path = format!("{path}/{name}");
        match fs.inspect(child).map_err(unreadable)? {
            Inspected::Dir(_) => {
                let sub = directory_of(fs, child, &child_path, out, children)?;
                let bytes = sub.encode_to_vec();
                let digest = Digest::of(&bytes);
                children.insert(digest, sub);
                dir.directories.push(v2::DirectoryNode {
                    name,
                    digest: Some(digest.to_proto()),
                });
            }
            Inspected::Symlink(target) => dir.symlinks.push(v2::SymlinkNode {
                name,
                target,
                node_properties: None,
            }),
            file => {
                let (digest, executable) =
                    file_digest(file, out).map_err(|errno| OutputError::Unreadable {
                        path: child_path.clone(),
                        errno,
                    })?;
                dir.files.push(v2::FileNode {
                    name,
                    digest: Some(digest.to_proto()),
                    is_executable: executable,
                    node_properties: None,
                });
            }
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_paths_are_taken_from_the_working_directory_and_stay_in_the_root() {
        assert_eq!(output_path("", "out/a.o").unwrap(), "out/a.o");
        assert_eq!(output_path("src", "../out/./a.o").unwrap(), "out/a.o");
        assert_eq!(output_path("a/b", "c").unwrap(), "a/b/c");
        for bad in ["../x", "/etc/passwd", "a/../../x"] {
            assert_eq!(
                output_path("", bad),
                Err(OutputError::OutsideRoot(bad.into())),
                "{bad}"
            );
        }
        assert!(output_path("src", "../../x").is_err());
        let command = v2::Command {
            working_directory: "../up".into(),
            ..Default::default()
        };
        assert!(matches!(
            working_dir(&command),
            Err(OutputError::WorkingDirOutside(_))
        ));
    }
}
