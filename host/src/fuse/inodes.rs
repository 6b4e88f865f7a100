//! The FUSE node ids the kernel holds, and the namespace path each one names.
//!
//! The namespace is addressed by path; the kernel addresses files by node id, learnt
//! from `lookup` replies and given back with `forget`. This table hands out ids (the
//! root is 1), counts the kernel's references, and keeps each id's path current when a
//! rename moves it or one of its ancestors. An id whose name was unlinked or renamed
//! over keeps existing (its open files still work) but no longer has a path: calls that
//! need one get ESTALE, as a deleted NFS file does.

use std::collections::HashMap;

/// The root's node id (FUSE_ROOT_ID).
pub const ROOT: u64 = 1;

struct Node {
    /// The namespace path (`/` or `/a/b`), `None` once unlinked.
    path: Option<String>,
    /// References the kernel holds (lookups not yet forgotten).
    lookups: u64,
}

/// Node ids and their paths.
pub struct Inodes {
    nodes: HashMap<u64, Node>,
    by_path: HashMap<String, u64>,
    next: u64,
}

impl Default for Inodes {
    fn default() -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                path: Some("/".into()),
                lookups: 1,
            },
        );
        Inodes {
            nodes,
            by_path: HashMap::from([("/".to_string(), ROOT)]),
            next: ROOT + 1,
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
    /// The path of node `ino`, if it still has one.
    pub fn path(&self, ino: u64) -> Option<String> {
        self.nodes.get(&ino).and_then(|n| n.path.clone())
    }

    /// The node id for `path`, counting one more kernel reference.
    pub fn remember(&mut self, path: &str) -> u64 {
        if let Some(&ino) = self.by_path.get(path) {
            self.nodes.get_mut(&ino).expect("indexed").lookups += 1;
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(
            ino,
            Node {
                path: Some(path.to_string()),
                lookups: 1,
            },
        );
        self.by_path.insert(path.to_string(), ino);
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
            if let Some(path) = self.nodes.remove(&ino).and_then(|n| n.path) {
                self.by_path.remove(&path);
            }
        }
    }

    /// `path` no longer names anything (unlinked, or replaced by a rename).
    pub fn unlinked(&mut self, path: &str) {
        if let Some(ino) = self.by_path.remove(path) {
            if let Some(node) = self.nodes.get_mut(&ino) {
                node.path = None;
            }
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
                node.path = Some(new.clone());
            }
            self.by_path.insert(new, ino);
        }
    }

    /// How many ids are held (the root included).
    #[cfg(test)]
    fn held(&self) -> usize {
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
        let a = t.remember("/a");
        assert_eq!(t.remember("/a"), a);
        assert_ne!(t.remember("/b"), a);
        t.forget(a, 1);
        assert_eq!(t.path(a).as_deref(), Some("/a"));
        t.forget(a, 1);
        assert_eq!(t.path(a), None);
        assert_ne!(t.remember("/a"), a, "a forgotten id is never reused");
        t.forget(ROOT, 100);
        assert_eq!(t.path(ROOT).as_deref(), Some("/"));
        assert_eq!(t.held(), 3);
    }

    #[test]
    fn a_rename_moves_the_subtree_and_drops_what_it_replaced() {
        let mut t = Inodes::default();
        let d = t.remember("/d");
        let f = t.remember("/d/sub/f");
        let sibling = t.remember("/dx");
        let victim = t.remember("/e");
        t.renamed("/d", "/e");
        assert_eq!(t.path(d).as_deref(), Some("/e"));
        assert_eq!(t.path(f).as_deref(), Some("/e/sub/f"));
        assert_eq!(
            t.path(sibling).as_deref(),
            Some("/dx"),
            "a prefix only by name"
        );
        assert_eq!(t.path(victim), None);
        assert_eq!(t.remember("/e"), d);
        assert_ne!(t.remember("/d"), d);
    }

    #[test]
    fn an_unlinked_id_lives_on_without_a_path() {
        let mut t = Inodes::default();
        let f = t.remember("/f");
        t.unlinked("/f");
        assert_eq!(t.path(f), None);
        let again = t.remember("/f");
        assert_ne!(again, f);
        t.forget(f, 1);
        assert_eq!(t.path(again).as_deref(), Some("/f"));
        assert_eq!(child("/", "x"), "/x");
        assert_eq!(child("/a", "x"), "/a/x");
    }
}
