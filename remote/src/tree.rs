//! An action's input root as REAPI gives it: a `Directory` message per directory,
//! named by its digest, each listing its files (with their digests and executable
//! bits), subdirectories and symlinks.
//!
//! [`InputTree::build`] checks the whole tree before a guest may see any of it:
//! - every name is one component: not empty, not `.` or `..`, without `/` or NUL;
//! - no name is listed twice in a directory (among its files, directories and
//!   symlinks together);
//! - every symlink's target stays inside the input root, read as a guest resolves it
//!   from the link's directory: an absolute target leaves it, as does a `..` above
//!   the root (the guest's namespace would stop it there anyway; the action is wrong);
//! - every directory digest is one of the messages given (fetched and verified);
//! - it is at most [`MAX_DEPTH`] deep, has at most [`MAX_NODES`] nodes, and the paths
//!   of its nodes take at most [`MAX_PATH_BYTES`] together (a small message naming one
//!   subdirectory many times, under long names, must not make the worker build a tree
//!   without bound: each node keeps its path).
//!
//! A directory's listing is complete by construction (a name not listed does not
//! exist); a file is known by its digest, its bytes fetched only when read.
//!
//! One resolver reads paths in it: [`within_root`] joins a relative path to a
//! directory lexically (`..` above the root is an escape), which the symlink check,
//! the outputs' paths ([`crate::outputs::output_path`]) and [`InputTree::resolve`]
//! (a program's path, symlinks followed) all use.

use std::collections::{BTreeMap, HashMap};

use crate::apis::v2;
use crate::digest::{BadDigest, Digest};

/// Most symlinks followed in resolving one path (Linux's `MAXSYMLINKS`).
pub const MAX_SYMLINKS: usize = 40;
/// Deepest directory nesting taken.
pub const MAX_DEPTH: usize = 256;
/// Most nodes (files, directories, symlinks) an input root may have.
pub const MAX_NODES: usize = 1 << 20;
/// Most bytes the paths of an input root's nodes may take together.
pub const MAX_PATH_BYTES: usize = 256 << 20;

/// The bounds a tree is built within.
#[derive(Clone, Copy, Debug)]
pub struct TreeBounds {
    /// Most nodes.
    pub nodes: usize,
    /// Most bytes of all the nodes' paths together.
    pub path_bytes: usize,
}

impl Default for TreeBounds {
    fn default() -> TreeBounds {
        TreeBounds {
            nodes: MAX_NODES,
            path_bytes: MAX_PATH_BYTES,
        }
    }
}

/// Where a node is in the tree's list.
pub type Index = usize;

/// One node of an input root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeNode {
    /// A directory: its digest and its entries by name.
    Dir {
        /// The digest of its `Directory` message.
        digest: Digest,
        /// Its entries.
        entries: BTreeMap<String, Index>,
    },
    /// A file.
    File {
        /// Its bytes' digest.
        digest: Digest,
        /// Whether it is executable.
        executable: bool,
    },
    /// A symbolic link.
    Symlink {
        /// Its target.
        target: String,
    },
}

/// Why an input root is not one a guest may see.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TreeError {
    /// A name that is not a single path component.
    #[error("the input root's directory {dir:?} lists {name:?}, which is not a file name")]
    BadName {
        /// The directory (from the root, `""` for the root).
        dir: String,
        /// The name.
        name: String,
    },
    /// A name listed twice.
    #[error("the input root's directory {dir:?} lists {name:?} twice")]
    Duplicate {
        /// The directory.
        dir: String,
        /// The name.
        name: String,
    },
    /// A symlink leading out of the input root.
    #[error("the input root's symlink {path:?} -> {target:?} leaves the input root")]
    SymlinkEscapes {
        /// The link.
        path: String,
        /// Its target.
        target: String,
    },
    /// A directory whose message is not there.
    #[error("the input root's directory {path:?} ({digest}) is not in the CAS")]
    MissingDirectory {
        /// The directory.
        path: String,
        /// Its digest.
        digest: Digest,
    },
    /// A digest that is not one.
    #[error("the input root's {path:?}: {source}")]
    BadDigest {
        /// The node.
        path: String,
        /// What is wrong.
        #[source]
        source: BadDigest,
    },
    /// Too deep, too many nodes, or paths too long in all.
    #[error(
        "the input root is larger than a worker takes ({MAX_NODES} nodes, {MAX_DEPTH} levels, \
         {MAX_PATH_BYTES} bytes of paths)"
    )]
    TooLarge,
}

/// A checked input root.
#[derive(Clone, Debug)]
pub struct InputTree {
    nodes: Vec<(TreeNode, String)>,
    bounds: TreeBounds,
    path_bytes: usize,
}

impl InputTree {
    /// The tree of the directory `root`, from `directories` (every `Directory` message
    /// it needs, by digest), checked as the module docs say.
    pub fn build(
        root: Digest,
        directories: &HashMap<Digest, v2::Directory>,
    ) -> Result<InputTree, TreeError> {
        Self::build_bounded(root, directories, TreeBounds::default())
    }

    /// As [`InputTree::build`], within `bounds`.
    pub fn build_bounded(
        root: Digest,
        directories: &HashMap<Digest, v2::Directory>,
        bounds: TreeBounds,
    ) -> Result<InputTree, TreeError> {
        let mut tree = InputTree {
            nodes: Vec::new(),
            bounds,
            path_bytes: 0,
        };
        tree.add_dir(root, String::new(), 0, directories)?;
        Ok(tree)
    }

    /// The root directory's index.
    pub fn root(&self) -> Index {
        0
    }

    /// A node and its path from the root (`""` for the root, `a/b` below it).
    pub fn node(&self, index: Index) -> &(TreeNode, String) {
        &self.nodes[index]
    }

    /// How many nodes it has.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether it has no node (never: the root is one).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every node with its index.
    pub fn iter(&self) -> impl Iterator<Item = (Index, &TreeNode, &str)> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, (node, path))| (i, node, path.as_str()))
    }

    /// The node at `path` (`/`-separated, from the root), without following symlinks.
    pub fn find(&self, path: &str) -> Option<Index> {
        let mut at = self.root();
        for name in path.split('/').filter(|n| !n.is_empty() && *n != ".") {
            match &self.nodes[at].0 {
                TreeNode::Dir { entries, .. } => at = *entries.get(name)?,
                _ => return None,
            }
        }
        Some(at)
    }

    /// The node `path` names, read from the directory `dir` (both from the root;
    /// `path` may be absolute, meaning the input root), every symlink on the way
    /// followed as a guest's namespace would follow it, at most [`MAX_SYMLINKS`].
    /// `None` when it is not there, climbs out of the root, or loops.
    pub fn resolve(&self, dir: &str, path: &str) -> Option<Index> {
        let mut pending = match path.strip_prefix('/') {
            Some(absolute) => within_root("", absolute)?,
            None => within_root(dir, path)?,
        };
        let mut followed = 0;
        'path: loop {
            let mut at = self.root();
            let mut walked = String::new();
            let names: Vec<String> = pending
                .split('/')
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect();
            for (i, name) in names.iter().enumerate() {
                let TreeNode::Dir { entries, .. } = &self.nodes[at].0 else {
                    return None;
                };
                at = *entries.get(name)?;
                if let TreeNode::Symlink { target } = &self.nodes[at].0 {
                    followed += 1;
                    if followed > MAX_SYMLINKS {
                        return None;
                    }
                    let rest = names[i + 1..].join("/");
                    let target = match target.strip_prefix('/') {
                        Some(absolute) => within_root("", absolute)?,
                        None => within_root(&walked, target)?,
                    };
                    pending = within_root(&target, &rest)?;
                    continue 'path;
                }
                walked = match walked.is_empty() {
                    true => name.clone(),
                    false => format!("{walked}/{name}"),
                };
            }
            return Some(at);
        }
    }

    /// The digests of every file, once each.
    pub fn files(&self) -> impl Iterator<Item = Digest> + '_ {
        let mut seen = std::collections::HashSet::new();
        self.nodes.iter().filter_map(move |(node, _)| match node {
            TreeNode::File { digest, .. } if seen.insert(*digest) => Some(*digest),
            _ => None,
        })
    }

    fn push(&mut self, node: TreeNode, path: String) -> Result<Index, TreeError> {
        let path_bytes = self.path_bytes.saturating_add(path.len());
        if self.nodes.len() >= self.bounds.nodes || path_bytes > self.bounds.path_bytes {
            return Err(TreeError::TooLarge);
        }
        self.path_bytes = path_bytes;
        self.nodes.push((node, path));
        Ok(self.nodes.len() - 1)
    }

    fn add_dir(
        &mut self,
        digest: Digest,
        path: String,
        depth: usize,
        directories: &HashMap<Digest, v2::Directory>,
    ) -> Result<Index, TreeError> {
        if depth > MAX_DEPTH {
            return Err(TreeError::TooLarge);
        }
        let dir = directories
            .get(&digest)
            .ok_or_else(|| TreeError::MissingDirectory {
                path: path.clone(),
                digest,
            })?;
        let index = self.push(
            TreeNode::Dir {
                digest,
                entries: BTreeMap::new(),
            },
            path.clone(),
        )?;
        let mut entries = BTreeMap::new();
        let named = dir
            .files
            .iter()
            .map(|f| &f.name)
            .chain(dir.directories.iter().map(|d| &d.name))
            .chain(dir.symlinks.iter().map(|s| &s.name));
        for name in named {
            check_name(&path, name)?;
            if entries.insert(name.clone(), usize::MAX).is_some() {
                return Err(TreeError::Duplicate {
                    dir: path.clone(),
                    name: name.clone(),
                });
            }
        }
        let child = |name: &str| match path.is_empty() {
            true => name.to_owned(),
            false => format!("{path}/{name}"),
        };
        let digest_of = |node_path: &str, d: &Option<v2::Digest>| {
            let d = d.clone().unwrap_or_default();
            Digest::from_proto(&d).map_err(|source| TreeError::BadDigest {
                path: node_path.to_owned(),
                source,
            })
        };
        for f in &dir.files {
            let node_path = child(&f.name);
            let node = TreeNode::File {
                digest: digest_of(&node_path, &f.digest)?,
                executable: f.is_executable,
            };
            entries.insert(f.name.clone(), self.push(node, node_path)?);
        }
        for s in &dir.symlinks {
            let node_path = child(&s.name);
            if escapes(&path, &s.target) {
                return Err(TreeError::SymlinkEscapes {
                    path: node_path,
                    target: s.target.clone(),
                });
            }
            let node = TreeNode::Symlink {
                target: s.target.clone(),
            };
            entries.insert(s.name.clone(), self.push(node, node_path)?);
        }
        for d in &dir.directories {
            let node_path = child(&d.name);
            let sub = digest_of(&node_path, &d.digest)?;
            let at = self.add_dir(sub, node_path, depth + 1, directories)?;
            entries.insert(d.name.clone(), at);
        }
        if let TreeNode::Dir { entries: e, .. } = &mut self.nodes[index].0 {
            *e = entries;
        }
        Ok(index)
    }
}

/// A name must be one path component.
fn check_name(dir: &str, name: &str) -> Result<(), TreeError> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(TreeError::BadName {
            dir: dir.to_owned(),
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// `relative` read from the directory `dir` (both from the root), `.` and `..`
/// resolved lexically: the path from the root (`""` for the root itself), or `None`
/// when it climbs above the root or `relative` is absolute.
pub fn within_root(dir: &str, relative: &str) -> Option<String> {
    if relative.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for name in dir.split('/').chain(relative.split('/')) {
        match name {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            name => parts.push(name),
        }
    }
    Some(parts.join("/"))
}

/// Whether the symlink target `target`, read from the link's directory `dir`,
/// leaves the root (an empty target leads nowhere, which is leaving too).
fn escapes(dir: &str, target: &str) -> bool {
    target.is_empty() || within_root(dir, target).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn file(name: &str, bytes: &[u8], executable: bool) -> v2::FileNode {
        v2::FileNode {
            name: name.into(),
            digest: Some(Digest::of(bytes).to_proto()),
            is_executable: executable,
            node_properties: None,
        }
    }

    /// Directories by digest, as the CAS holds them.
    #[derive(Default)]
    struct Cas(HashMap<Digest, v2::Directory>);

    impl Cas {
        fn put(&mut self, dir: v2::Directory) -> Digest {
            let d = Digest::of(&dir.encode_to_vec());
            self.0.insert(d, dir);
            d
        }

        fn sub(&mut self, name: &str, dir: v2::Directory) -> v2::DirectoryNode {
            v2::DirectoryNode {
                name: name.into(),
                digest: Some(self.put(dir).to_proto()),
            }
        }
    }

    fn symlink(name: &str, target: &str) -> v2::SymlinkNode {
        v2::SymlinkNode {
            name: name.into(),
            target: target.into(),
            node_properties: None,
        }
    }

    #[test]
    fn a_tree_has_every_node_at_its_path_and_shared_subdirectories_at_each() {
        let mut cas = Cas::default();
        let inc = v2::Directory {
            files: vec![file("stdio.h", b"int printf();", false)],
            ..Default::default()
        };
        let usr = v2::Directory {
            directories: vec![cas.sub("include", inc.clone()), cas.sub("more", inc)],
            symlinks: vec![symlink("lib", "include")],
            ..Default::default()
        };
        let root = v2::Directory {
            files: vec![file("clang", b"\0asm", true)],
            directories: vec![cas.sub("usr", usr)],
            ..Default::default()
        };
        let root = cas.put(root);
        let tree = InputTree::build(root, &cas.0).unwrap();
        let stdio = tree.find("usr/include/stdio.h").unwrap();
        assert_eq!(tree.node(stdio).1, "usr/include/stdio.h");
        assert!(matches!(
            tree.node(stdio).0,
            TreeNode::File {
                executable: false,
                ..
            }
        ));
        let more = tree.find("usr/more/stdio.h").unwrap();
        assert_ne!(more, stdio, "one node per path");
        assert!(matches!(
            tree.node(tree.find("clang").unwrap()).0,
            TreeNode::File {
                executable: true,
                ..
            }
        ));
        assert!(
            tree.find("usr/lib/stdio.h").is_none(),
            "symlinks are not followed"
        );
        assert!(tree.find("usr/missing.h").is_none());
        assert_eq!(tree.files().count(), 2, "two distinct files");
        assert_eq!(tree.len(), 8);
    }

    #[test]
    fn resolve_follows_symlinks_inside_the_root_and_stops_at_loops() {
        let mut cas = Cas::default();
        let bin = v2::Directory {
            files: vec![file("clang", b"\0asm", true)],
            symlinks: vec![
                symlink("cc", "clang"),
                symlink("c++", "cc"),
                symlink("loop1", "loop2"),
                symlink("loop2", "loop1"),
            ],
            ..Default::default()
        };
        let usr = v2::Directory {
            directories: vec![cas.sub("bin", bin)],
            symlinks: vec![symlink("tools", "bin")],
            ..Default::default()
        };
        let src = v2::Directory {
            symlinks: vec![symlink("compiler", "../usr/tools/c++")],
            ..Default::default()
        };
        let root = v2::Directory {
            directories: vec![cas.sub("usr", usr), cas.sub("src", src)],
            ..Default::default()
        };
        let tree = InputTree::build(cas.put(root), &cas.0).unwrap();
        let clang = tree.find("usr/bin/clang").unwrap();
        // A chain of links, a linked directory in the middle, from a working directory.
        assert_eq!(tree.resolve("src", "compiler"), Some(clang));
        assert_eq!(tree.resolve("", "usr/tools/cc"), Some(clang));
        assert_eq!(tree.resolve("src", "../usr/bin/./clang"), Some(clang));
        assert_eq!(tree.resolve("src", "/usr/tools/c++"), Some(clang));
        // A directory is a node too; what is not there, climbs out or loops is not.
        assert_eq!(tree.resolve("", "usr/tools"), tree.find("usr/bin"));
        assert_eq!(tree.resolve("", "usr/bin/missing"), None);
        assert_eq!(tree.resolve("", "usr/bin/clang/x"), None);
        assert_eq!(tree.resolve("src", "../../usr/bin/clang"), None);
        assert_eq!(tree.resolve("", "usr/bin/loop1"), None);
    }

    #[test]
    fn bad_names_duplicates_escaping_symlinks_and_missing_directories_are_refused() {
        let build = |root: v2::Directory, cas: &mut Cas| {
            let d = cas.put(root);
            InputTree::build(d, &cas.0).unwrap_err()
        };
        let mut cas = Cas::default();
        for bad in ["", ".", "..", "a/b", "nul\0"] {
            let root = v2::Directory {
                files: vec![file(bad, b"", false)],
                ..Default::default()
            };
            assert!(
                matches!(build(root, &mut cas), TreeError::BadName { .. }),
                "{bad:?}"
            );
        }
        let twice = v2::Directory {
            files: vec![file("x", b"1", false)],
            symlinks: vec![symlink("x", "y")],
            ..Default::default()
        };
        assert!(matches!(
            build(twice, &mut cas),
            TreeError::Duplicate { .. }
        ));
        for target in ["/etc/passwd", "../x", "a/../../x", ""] {
            let root = v2::Directory {
                symlinks: vec![symlink("l", target)],
                ..Default::default()
            };
            assert!(
                matches!(build(root, &mut cas), TreeError::SymlinkEscapes { .. }),
                "{target:?}"
            );
        }
        // Inside the root: fine, from a subdirectory too.
        let sub = v2::Directory {
            symlinks: vec![symlink("up", "../x"), symlink("dot", "./a/./b")],
            ..Default::default()
        };
        let root = v2::Directory {
            directories: vec![cas.sub("s", sub)],
            ..Default::default()
        };
        let d = cas.put(root);
        assert!(InputTree::build(d, &cas.0).is_ok());
        let missing = v2::Directory {
            directories: vec![v2::DirectoryNode {
                name: "gone".into(),
                digest: Some(Digest::of(b"not a directory").to_proto()),
            }],
            ..Default::default()
        };
        assert!(matches!(
            build(missing, &mut cas),
            TreeError::MissingDirectory { .. }
        ));
        let bad_digest = v2::Directory {
            files: vec![v2::FileNode {
                name: "f".into(),
                digest: Some(v2::Digest {
                    hash: "xyz".into(),
                    size_bytes: 1,
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(matches!(
            build(bad_digest, &mut cas),
            TreeError::BadDigest { .. }
        ));
    }

    #[test]
    fn a_directory_named_over_and_over_cannot_make_the_tree_grow_without_bound() {
        let mut cas = Cas::default();
        // Each level names the one below 64 times: 64^4 nodes from four messages.
        let mut dir = v2::Directory {
            files: vec![file("f", b"x", false)],
            ..Default::default()
        };
        for _ in 0..4 {
            let d = cas.put(dir);
            dir = v2::Directory {
                directories: (0..64)
                    .map(|i| v2::DirectoryNode {
                        name: format!("d{i:02}"),
                        digest: Some(d.to_proto()),
                    })
                    .collect(),
                ..Default::default()
            };
        }
        let root = cas.put(dir);
        let bounds = TreeBounds {
            nodes: 10_000,
            ..TreeBounds::default()
        };
        let bounded = InputTree::build_bounded(root, &cas.0, bounds);
        assert_eq!(bounded.unwrap_err(), TreeError::TooLarge);
    }

    #[test]
    fn long_names_reached_by_many_paths_are_bounded_by_the_bytes_of_their_paths() {
        let mut cas = Cas::default();
        // 16 long names a level, 5 levels: 1,118,481 nodes of paths up to 1.3 KB each,
        // 1.4 GB of paths, from six messages (within the node bound of 2^21).
        let long = |i: usize| format!("{i:x}{}", "n".repeat(250));
        let mut dir = v2::Directory::default();
        for _ in 0..5 {
            let d = cas.put(dir);
            dir = v2::Directory {
                directories: (0..16)
                    .map(|i| v2::DirectoryNode {
                        name: long(i),
                        digest: Some(d.to_proto()),
                    })
                    .collect(),
                ..Default::default()
            };
        }
        let root = cas.put(dir);
        let bounds = TreeBounds {
            nodes: 1 << 21,
            path_bytes: 8 << 20,
        };
        let bounded = InputTree::build_bounded(root, &cas.0, bounds);
        assert_eq!(bounded.unwrap_err(), TreeError::TooLarge);
        // Within the bounds, the same shape two levels shallower is taken whole.
        let empty = cas.put(v2::Directory::default());
        let small = cas.put(v2::Directory {
            directories: (0..16)
                .map(|i| v2::DirectoryNode {
                    name: long(i),
                    digest: Some(empty.to_proto()),
                })
                .collect(),
            ..Default::default()
        });
        assert_eq!(
            InputTree::build_bounded(small, &cas.0, bounds)
                .unwrap()
                .len(),
            17
        );
    }
}
