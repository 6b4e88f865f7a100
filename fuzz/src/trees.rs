//! Input roots a client could send a worker, for the tree check
//! (`wasm9p_remote::tree::InputTree::build`): bad names, names listed twice, one
//! digest reached by many paths, fan-out, deep nesting, cycles, symlinks that leave
//! the root, missing directories and malformed digests.
//!
//! The input is read as a handful of `Directory` messages. Its first byte chooses how
//! they are named:
//! - honestly, as a CAS names them (a message's digest is its bytes' hash): a
//!   directory can only name ones made before it, so there are no cycles;
//! - by arbitrary keys, as a hostile or broken CAS could answer: cycles, a directory
//!   that names itself.
//!
//! Each tree is built within small bounds, so that a run is quick. What must hold:
//! nothing panics; the tree stays within its bounds; a tree that is accepted has
//! every node at its path, a valid name at every step and no symlink out of the root;
//! and the verdict (accepted, refused as too large, refused as invalid) is the one an
//! independent walk of the same messages, in the same order, gives: the REAPI's rules,
//! written again here without the tree.

use std::collections::{HashMap, HashSet};

use wasm9p_remote::apis::v2;
use wasm9p_remote::tree::{within_root, InputTree, TreeBounds, TreeError, TreeNode, MAX_DEPTH};
use wasm9p_remote::Digest;

/// The bounds every input is built within.
pub const BOUNDS: TreeBounds = TreeBounds {
    nodes: 4096,
    path_bytes: 256 << 10,
};

/// Names a directory lists: fine ones, and every kind the check refuses.
const NAMES: [&str; 13] = [
    "a", "b", "c", "lib", "", ".", "..", "a/b", "x\0y", "é", " ", "...", "\n",
];

/// Symlink targets: inside the root, and out of it by every way.
const TARGETS: [&str; 11] = [
    "a",
    "../a",
    "/etc/passwd",
    "a/../../b",
    "b/./c",
    "..",
    ".",
    "",
    "a/b/../../..",
    "c/../a",
    "lib/../../../x",
];

/// The input, a byte at a time (zeros past its end).
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }

    /// A name from [`NAMES`], a long one, or a few bytes of a small alphabet.
    fn name(&mut self) -> String {
        match self.byte() {
            b @ 0..=199 => NAMES[usize::from(b) % NAMES.len()].to_owned(),
            200..=209 => "n".repeat(200 + self.below(56)),
            _ => {
                let len = 1 + self.below(6);
                (0..len)
                    .map(|_| ['a', 'b', '.', '/', '\0', 'é'][self.below(6)])
                    .collect()
            }
        }
    }

    fn target(&mut self) -> String {
        match self.byte() {
            b @ 0..=239 => TARGETS[usize::from(b) % TARGETS.len()].to_owned(),
            _ => {
                let len = 1 + self.below(8);
                (0..len).map(|_| ['a', '.', '/'][self.below(3)]).collect()
            }
        }
    }
}

/// A directory as read from the input: its subdirectories by the index of the
/// directory they name (past the last: one the CAS does not have).
struct Spec {
    files: Vec<(String, Option<v2::Digest>, bool)>,
    dirs: Vec<(String, usize)>,
    symlinks: Vec<(String, String)>,
}

fn read_specs(r: &mut Reader) -> Vec<Spec> {
    let count = 1 + r.below(10);
    (0..count)
        .map(|_| {
            let files = (0..r.below(4))
                .map(|_| {
                    let name = r.name();
                    let digest = match r.byte() {
                        0..=219 => Some(Digest::of(name.as_bytes()).to_proto()),
                        220..=229 => None,
                        230..=239 => Some(v2::Digest {
                            hash: "zz".into(),
                            size_bytes: 1,
                        }),
                        _ => Some(v2::Digest {
                            size_bytes: -1,
                            ..Digest::empty().to_proto()
                        }),
                    };
                    (name, digest, r.byte() & 1 == 1)
                })
                .collect();
            let dirs = (0..r.below(6))
                .map(|_| (r.name(), r.below(count + 1)))
                .collect();
            let symlinks = (0..r.below(3)).map(|_| (r.name(), r.target())).collect();
            Spec {
                files,
                dirs,
                symlinks,
            }
        })
        .collect()
}

fn message(spec: &Spec, digest_of: impl Fn(usize) -> Digest) -> v2::Directory {
    v2::Directory {
        files: spec
            .files
            .iter()
            .map(|(name, digest, executable)| v2::FileNode {
                name: name.clone(),
                digest: digest.clone(),
                is_executable: *executable,
                node_properties: None,
            })
            .collect(),
        directories: spec
            .dirs
            .iter()
            .map(|(name, at)| v2::DirectoryNode {
                name: name.clone(),
                digest: Some(digest_of(*at).to_proto()),
            })
            .collect(),
        symlinks: spec
            .symlinks
            .iter()
            .map(|(name, target)| v2::SymlinkNode {
                name: name.clone(),
                target: target.clone(),
                node_properties: None,
            })
            .collect(),
        node_properties: None,
    }
}

/// The messages of the input by digest, and the root's digest.
pub fn directories(data: &[u8]) -> (Digest, HashMap<Digest, v2::Directory>) {
    let mut r = Reader(data);
    let honest = r.byte() & 1 == 0;
    let specs = read_specs(&mut r);
    let absent = Digest::of(b"a directory the CAS does not have");
    let mut map = HashMap::new();
    if honest {
        // From the last to the first: a directory names only later ones (an earlier
        // or its own index is one the CAS does not have).
        let mut digests = vec![absent; specs.len()];
        for (i, spec) in specs.iter().enumerate().rev() {
            let dir = message(spec, |at| match at > i && at < specs.len() {
                true => digests[at],
                false => absent,
            });
            let digest = Digest::of(&prost::Message::encode_to_vec(&dir));
            digests[i] = digest;
            map.insert(digest, dir);
        }
        (digests[0], map)
    } else {
        let key = |i: usize| match i < specs.len() {
            true => Digest::of(&(i as u64).to_le_bytes()),
            false => absent,
        };
        for (i, spec) in specs.iter().enumerate() {
            map.insert(key(i), message(spec, key));
        }
        (key(0), map)
    }
}

/// What the REAPI's rules say of a tree, within [`BOUNDS`].
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Valid,
    TooLarge,
    Invalid,
}

/// The rules walked again, in the order the check walks them, with nothing kept but
/// counts.
struct Walk<'a> {
    directories: &'a HashMap<Digest, v2::Directory>,
    nodes: usize,
    path_bytes: usize,
}

impl Walk<'_> {
    fn node(&mut self, path: &str) -> Result<(), Verdict> {
        self.nodes += 1;
        self.path_bytes += path.len();
        match self.nodes > BOUNDS.nodes || self.path_bytes > BOUNDS.path_bytes {
            true => Err(Verdict::TooLarge),
            false => Ok(()),
        }
    }

    fn dir(&mut self, digest: &Digest, path: &str, depth: usize) -> Result<(), Verdict> {
        if depth > MAX_DEPTH {
            return Err(Verdict::TooLarge);
        }
        let dir = self.directories.get(digest).ok_or(Verdict::Invalid)?;
        self.node(path)?;
        let mut seen = HashSet::new();
        let names = dir
            .files
            .iter()
            .map(|f| &f.name)
            .chain(dir.directories.iter().map(|d| &d.name))
            .chain(dir.symlinks.iter().map(|s| &s.name));
        for name in names {
            let bad = name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']);
            if bad || !seen.insert(name) {
                return Err(Verdict::Invalid);
            }
        }
        let child = |name: &str| match path.is_empty() {
            true => name.to_owned(),
            false => format!("{path}/{name}"),
        };
        let digest_of = |d: &Option<v2::Digest>| {
            Digest::from_proto(&d.clone().unwrap_or_default()).map_err(|_| Verdict::Invalid)
        };
        for f in &dir.files {
            digest_of(&f.digest)?;
            self.node(&child(&f.name))?;
        }
        for s in &dir.symlinks {
            // An empty target is no link (symlink(2) refuses it with ENOENT).
            if s.target.is_empty() {
                return Err(Verdict::Invalid);
            }
            within_root(path, &s.target).ok_or(Verdict::Invalid)?;
            self.node(&child(&s.name))?;
        }
        for d in &dir.directories {
            let sub = digest_of(&d.digest)?;
            self.dir(&sub, &child(&d.name), depth + 1)?;
        }
        Ok(())
    }
}

/// The fuzz target's body: builds the input's tree and checks it (see the module
/// docs).
pub fn trees(data: &[u8]) {
    let (root, directories) = directories(data);
    let built = InputTree::build_bounded(root, &directories, BOUNDS);
    let mut walk = Walk {
        directories: &directories,
        nodes: 0,
        path_bytes: 0,
    };
    let expected = match walk.dir(&root, "", 0) {
        Ok(()) => Verdict::Valid,
        Err(verdict) => verdict,
    };
    match built {
        Ok(tree) => {
            assert_eq!(expected, Verdict::Valid, "accepted");
            check_accepted(&tree);
        }
        Err(e) => {
            // The worker refuses the action with this line: INVALID_ARGUMENT.
            assert!(!e.to_string().contains('\n'), "{e}");
            let verdict = match e {
                TreeError::TooLarge => Verdict::TooLarge,
                _ => Verdict::Invalid,
            };
            assert_eq!(expected, verdict, "{e}");
        }
    }
}

/// What an accepted tree promises a guest.
fn check_accepted(tree: &InputTree) {
    assert!(tree.len() <= BOUNDS.nodes);
    let path_bytes: usize = tree.iter().map(|(_, _, path)| path.len()).sum();
    assert!(path_bytes <= BOUNDS.path_bytes);
    for (index, node, path) in tree.iter() {
        assert_eq!(tree.find(path), Some(index), "{path:?}");
        if !path.is_empty() {
            for name in path.split('/') {
                assert!(
                    !matches!(name, "" | "." | "..") && !name.contains('\0'),
                    "{path:?}"
                );
            }
        }
        let parent = path.rsplit_once('/').map_or("", |(dir, _)| dir);
        match node {
            TreeNode::Symlink { target } => {
                let inside = !target.is_empty() && within_root(parent, target).is_some();
                assert!(inside, "{path:?} -> {target:?}");
            }
            TreeNode::Dir { entries, .. } => {
                for (name, at) in entries {
                    let expected = match path.is_empty() {
                        true => name.clone(),
                        false => format!("{path}/{name}"),
                    };
                    assert_eq!(tree.node(*at).1, expected);
                }
            }
            TreeNode::File { .. } => {}
        }
    }
}

/// The tree check's answer for an input: the accepted tree's node count, or why not.
pub fn build(data: &[u8]) -> Result<usize, TreeError> {
    let (root, directories) = directories(data);
    InputTree::build_bounded(root, &directories, BOUNDS).map(|tree| tree.len())
}

/// Inputs of each kind the module docs name, for the seed corpus, with what the check
/// answers each (the replay test holds it to that).
pub fn seeds() -> Vec<(&'static str, Vec<u8>, Result<usize, &'static str>)> {
    // Honest, ten directories, each naming the next one under five names (the last
    // naming none): 5^9 paths to one directory.
    let mut fan_out = vec![0, 9];
    for i in 1..10 {
        fan_out.extend([0, 5, 0, i, 1, i, 2, i, 3, i, 9, i, 0]);
    }
    fan_out.extend([0, 0, 0]);
    vec![
        // Honest: files a and b, and a symlink c -> a.
        ("plain", vec![0, 0, 2, 0, 0, 1, 1, 0, 0, 0, 1, 2, 0], Ok(4)),
        // A name listed twice.
        (
            "duplicate",
            vec![0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0],
            Err("Duplicate"),
        ),
        // A file named `..`.
        ("dot-dot", vec![0, 0, 1, 6, 0, 0, 0, 0], Err("BadName")),
        // A symlink a -> /etc/passwd.
        ("escape", vec![0, 0, 0, 0, 1, 0, 2], Err("SymlinkEscapes")),
        // Arbitrary keys: a directory naming itself under five long names.
        (
            "cycle",
            vec![
                1, 0, 0, 5, 205, 0, 0, 205, 1, 0, 205, 2, 0, 205, 3, 0, 205, 4, 0, 0,
            ],
            Err("TooLarge"),
        ),
        ("fan-out", fan_out, Err("TooLarge")),
        // A directory the CAS does not have.
        (
            "missing",
            vec![0, 0, 0, 1, 0, 1, 0],
            Err("MissingDirectory"),
        ),
        // A file whose digest is not one.
        (
            "bad-digest",
            vec![0, 0, 1, 0, 230, 0, 0, 0],
            Err("BadDigest"),
        ),
    ]
}
