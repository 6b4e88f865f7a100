//! The FUSE node ids the kernel holds, and the namespace paths each one names.
//!
//! The namespace is addressed by path; the kernel addresses files by node id, learnt
//! from `lookup` replies and given back with `forget`, and shows it as the inode number.
//! This table hands out ids (the root is 1), one per file: the paths of a file's hard
//! links share its id, known by the file's [`Identity`] (its mount and the backend's
//! node id), so `stat` shows them as one inode, as a local disk does. It counts the
//! kernel's references and keeps each id's paths current when a rename moves one of
//! them or an ancestor. An id whose names were all unlinked or renamed over keeps
//! existing (its open files still work) but no longer has a path: calls that need one
//! get ESTALE, as a deleted NFS file does.
//!
//! A node may also hold where its lookup led ([`Location`]): its children are looked
//! up from there, one name each, and its attributes asked of it, without resolving
//! its path from the root again. On a `cache=none` 9p mount that location keeps the
//! fid the lookup walked to (the kernel's v9fs keeps a fid per dentry the same way):
//! it is given back when the kernel forgets the node, when the path it was found by
//! stops naming the node (unlink, rename), and when the server runs out of fids.
//! At most [`MAX_HELD`] nodes hold one, fewer once the server has run out of fids;
//! the others resolve their path.

use std::collections::HashMap;

use wasm9p_guest_fs::namespace::Location;

/// Most nodes holding a [`Location`] at once: a quarter of what one 9P connection to
/// our server may hold (16,384 fids), leaving the rest to open files.
pub const MAX_HELD: usize = 4096;
/// Fewest nodes that may hold one, however few fids the server gives.
const MIN_HELD: usize = 8;

/// The root's node id (FUSE_ROOT_ID).
pub const ROOT: u64 = 1;

/// Which file a path leads to: the mount's index and the backend's node id (a qid
/// path, an inode number), unique within the namespace.
pub type Identity = (usize, u64);

struct Node {
    /// The namespace paths (`/` or `/a/b`) known to name it, the first one used; none
    /// once all are unlinked.
    paths: Vec<String>,
    /// The file it is, where known (not for the namespace's own directories).
    identity: Option<Identity>,
    /// References the kernel holds (lookups not yet forgotten).
    lookups: u64,
    /// Where the lookup of one of `paths` (the first of the pair) led.
    held: Option<(String, Location)>,
}

/// Node ids and their paths.
pub struct Inodes {
    nodes: HashMap<u64, Node>,
    by_path: HashMap<String, u64>,
    by_identity: HashMap<Identity, u64>,
    next: u64,
    /// Nodes with `held` set.
    held: usize,
    /// Most nodes that may hold one: [`MAX_HELD`], or half of what they held when
    /// the server last ran out of fids.
    max_held: usize,
}

impl Default for Inodes {
    fn default() -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                paths: vec!["/".into()],
                identity: None,
                lookups: 1,
                held: None,
            },
        );
        Inodes {
            nodes,
            by_path: HashMap::from([("/".to_string(), ROOT)]),
            by_identity: HashMap::new(),
            next: ROOT + 1,
            held: 0,
            max_held: MAX_HELD,
        }
    }
}

/// `name` in the directory at `dir`.
pub fn child(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

impl Inodes {
    /// A path of node `ino`, if it still has one.
    pub fn path(&self, ino: u64) -> Option<String> {
        self.nodes.get(&ino).and_then(|n| n.paths.first().cloned())
    }

    /// The node id for `path`, which leads to the file `identity` (`None`: the
    /// namespace's own directory), counting one more kernel reference. A path that
    /// led to another file before (replaced behind the mount) is that file's no more.
    pub fn remember(&mut self, path: &str, identity: Option<Identity>) -> u64 {
        if let Some(&ino) = self.by_path.get(path) {
            let node = self.nodes.get_mut(&ino).expect("indexed");
            if identity.is_none() || node.identity == identity || ino == ROOT {
                node.lookups += 1;
                return ino;
            }
            self.unlinked(path);
        }
        if let Some(&ino) = identity.as_ref().and_then(|i| self.by_identity.get(i)) {
            // Another hard link of a file the kernel knows.
            let node = self.nodes.get_mut(&ino).expect("indexed");
            node.paths.push(path.to_string());
            node.lookups += 1;
            self.by_path.insert(path.to_string(), ino);
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(
            ino,
            Node {
                paths: vec![path.to_string()],
                identity,
                lookups: 1,
                held: None,
            },
        );
        self.by_path.insert(path.to_string(), ino);
        if let Some(identity) = identity {
            self.by_identity.insert(identity, ino);
        }
        ino
    }

    /// The kernel dropped `n` references to `ino`; the id goes with the last.
    pub fn forget(&mut self, ino: u64, n: u64) {
        if ino == ROOT {
            return;
        }
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups == 0 {
            let node = self.nodes.remove(&ino).expect("present");
            self.held -= usize::from(node.held.is_some());
            for path in node.paths {
                self.by_path.remove(&path);
            }
            self.forget_identity(node.identity, ino);
        }
    }

    fn forget_identity(&mut self, identity: Option<Identity>, ino: u64) {
        if let Some(identity) = identity {
            if self.by_identity.get(&identity) == Some(&ino) {
                self.by_identity.remove(&identity);
            }
        }
    }

    /// `path` no longer names anything (unlinked, or replaced by a rename). A file
    /// left with no known path is no longer found by its identity either: a later
    /// lookup of a link never looked up gets an id of its own (its backend may reuse
    /// the number for a new file).
    pub fn unlinked(&mut self, path: &str) {
        let Some(ino) = self.by_path.remove(path) else {
            return;
        };
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        node.paths.retain(|p| p != path);
        if node.held.as_ref().is_some_and(|(by, _)| by == path) {
            node.held = None;
            self.held -= 1;
        }
        if node.paths.is_empty() {
            let identity = node.identity;
            self.forget_identity(identity, ino);
        }
    }

    /// `from` was renamed to `to`: whatever `to` named is gone, and `from` and every
    /// path below it move.
    pub fn renamed(&mut self, from: &str, to: &str) {
        self.unlinked(to);
        let below = format!("{from}/");
        let moved: Vec<(String, u64)> = self
            .by_path
            .iter()
            .filter(|(p, _)| *p == from || p.starts_with(&below))
            .map(|(p, &i)| (p.clone(), i))
            .collect();
        for (old, ino) in moved {
            self.by_path.remove(&old);
            let new = format!("{to}{}", &old[from.len()..]);
            if let Some(node) = self.nodes.get_mut(&ino) {
                for path in node.paths.iter_mut().filter(|p| **p == old) {
                    *path = new.clone();
                }
                // Found by the old path: its location names the old place.
                if node.held.take().is_some() {
                    self.held -= 1;
                }
            }
            self.by_path.insert(new, ino);
        }
    }

    /// Where the lookup of node `ino` led, if it holds that.
    pub fn held(&self, ino: u64) -> Option<Location> {
        let node = self.nodes.get(&ino)?;
        node.held.as_ref().map(|(_, at)| at.clone())
    }

    /// Node `ino`, found by `path`, keeps `at` (unless [`MAX_HELD`] nodes do, or
    /// `path` no longer names it).
    pub fn hold(&mut self, ino: u64, path: &str, at: Location) {
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        if !node.paths.iter().any(|p| p == path) {
            return;
        }
        if node.held.is_none() {
            if self.held >= self.max_held {
                return;
            }
            self.held += 1;
        }
        node.held = Some((path.to_string(), at));
    }

    /// Node `ino` gives back what it holds; whether it held anything.
    pub fn let_go(&mut self, ino: u64) -> bool {
        let held = self.nodes.get_mut(&ino).and_then(|n| n.held.take());
        self.held -= usize::from(held.is_some());
        held.is_some()
    }

    /// Every node gives back what it holds (the server ran out of fids), and from now
    /// on at most half as many hold one, leaving the server's other fids to the rest.
    pub fn release_held(&mut self) {
        // Nothing held (already given back for this shortage): the bound stays.
        if self.held == 0 {
            return;
        }
        for node in self.nodes.values_mut() {
            node.held = None;
        }
        self.max_held = self.max_held.min(self.held / 2).max(MIN_HELD);
        self.held = 0;
    }

    /// How many nodes hold a location.
    #[cfg(test)]
    fn holding(&self) -> usize {
        self.held
    }

    /// How many ids are given out (the root included).
    #[cfg(test)]
    fn ids(&self) -> usize {
        self.nodes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_per_path_and_go_with_the_last_forget() {
        let mut t = Inodes::default();
        assert_eq!(t.path(ROOT).as_deref(), Some("/"));
        let a = t.remember("/a", None);
        assert_eq!(t.remember("/a", None), a);
        assert_ne!(t.remember("/b", None), a);
        t.forget(a, 1);
        assert_eq!(t.path(a).as_deref(), Some("/a"));
        t.forget(a, 1);
        assert_eq!(t.path(a), None);
        assert_ne!(t.remember("/a", None), a, "a forgotten id is never reused");
        t.forget(ROOT, 100);
        assert_eq!(t.path(ROOT).as_deref(), Some("/"));
        assert_eq!(t.ids(), 3);
    }

    #[test]
    fn a_rename_moves_the_subtree_and_drops_what_it_replaced() {
        let mut t = Inodes::default();
        let d = t.remember("/d", None);
        let f = t.remember("/d/sub/f", None);
        let sibling = t.remember("/dx", None);
        let victim = t.remember("/e", None);
        t.renamed("/d", "/e");
        assert_eq!(t.path(d).as_deref(), Some("/e"));
        assert_eq!(t.path(f).as_deref(), Some("/e/sub/f"));
        assert_eq!(
            t.path(sibling).as_deref(),
            Some("/dx"),
            "a prefix only by name"
        );
        assert_eq!(t.path(victim), None);
        assert_eq!(t.remember("/e", None), d);
        assert_ne!(t.remember("/d", None), d);
    }

    #[test]
    fn hard_links_share_one_id_until_the_file_is_another() {
        let mut t = Inodes::default();
        let f = t.remember("/f", Some((0, 7)));
        let link = t.remember("/d/link", Some((0, 7)));
        assert_eq!(link, f, "two names of one file");
        assert_ne!(t.remember("/g", Some((1, 7))), f, "another mount's file 7");
        t.unlinked("/f");
        assert_eq!(
            t.path(f).as_deref(),
            Some("/d/link"),
            "the other name serves"
        );
        t.renamed("/d", "/e");
        assert_eq!(t.path(f).as_deref(), Some("/e/link"));
        // The name now leads to another file: it gets an id of its own.
        let other = t.remember("/e/link", Some((0, 8)));
        assert_ne!(other, f);
        assert_eq!(t.path(f), None);
        // With no name left, the file is not found by its identity again.
        assert_ne!(t.remember("/h", Some((0, 7))), f);
    }

    fn somewhere() -> Location {
        Location {
            mount: None,
            node: wasm9p_guest_fs::node::Node {
                id: 0,
                kind: wasm9p_guest_fs::node::Kind::Dir,
                handle: None,
            },
            path: wasm9p_guest_fs::path::SharedPath::root(),
        }
    }

    #[test]
    fn locations_are_held_within_the_bound_and_go_with_their_path() {
        let mut t = Inodes::default();
        let d = t.remember("/d", None);
        let f = t.remember("/d/f", Some((0, 7)));
        let link = t.remember("/link", Some((0, 7)));
        assert_eq!(link, f);
        t.hold(d, "/d", somewhere());
        t.hold(f, "/link", somewhere());
        t.hold(f, "/elsewhere", somewhere()); // not a path of f: ignored
        assert!(t.held(d).is_some() && t.held(f).is_some());
        assert_eq!(t.holding(), 2);
        // The file's other name goes: what was found by /link stays.
        t.unlinked("/d/f");
        assert!(t.held(f).is_some());
        // The name it was found by goes: so does the location.
        t.unlinked("/link");
        assert!(t.held(f).is_none());
        // A rename takes the moved node's (its location names the old place).
        t.renamed("/d", "/e");
        assert!(t.held(d).is_none());
        assert_eq!(t.holding(), 0);
        t.hold(d, "/e", somewhere());
        assert!(t.let_go(d) && !t.let_go(d));
        assert_eq!(t.holding(), 0);
        // Never more than MAX_HELD at once; a forgotten node gives its place back.
        let many: Vec<u64> = (0..MAX_HELD + 10)
            .map(|i| {
                let path = format!("/n{i}");
                let ino = t.remember(&path, None);
                t.hold(ino, &path, somewhere());
                ino
            })
            .collect();
        assert_eq!(t.holding(), MAX_HELD);
        t.forget(many[0], 1);
        assert_eq!(t.holding(), MAX_HELD - 1);
        // Out of fids: all given back, and half as many held from then on.
        t.release_held();
        assert_eq!(t.holding(), 0);
        for (i, ino) in many.iter().enumerate().skip(1) {
            t.hold(*ino, &format!("/n{i}"), somewhere());
        }
        assert_eq!(t.holding(), (MAX_HELD - 1) / 2);
        // A second word of the same shortage, with nothing held, shrinks nothing.
        t.release_held();
        t.release_held();
        for (i, ino) in many.iter().enumerate().skip(1) {
            t.hold(*ino, &format!("/n{i}"), somewhere());
        }
        assert_eq!(t.holding(), (MAX_HELD - 1) / 4);
    }

    #[test]
    fn an_unlinked_id_lives_on_without_a_path() {
        let mut t = Inodes::default();
        let f = t.remember("/f", None);
        t.unlinked("/f");
        assert_eq!(t.path(f), None);
        let again = t.remember("/f", None);
        assert_ne!(again, f);
        t.forget(f, 1);
        assert_eq!(t.path(again).as_deref(), Some("/f"));
        assert_eq!(child("/", "x"), "/x");
        assert_eq!(child("/a", "x"), "/a/x");
    }
}
