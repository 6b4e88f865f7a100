//! [`SharedPath`]: a path as a persistent list of names.
//!
//! Resolution extends the path it has taken by one name per component. Copying a
//! `Vec<String>` each time costs O(depth) allocations per component, on the cache-hit
//! path too; a persistent list shares the prefix, so extending is one small allocation
//! and comparing with a mount point allocates nothing.

use std::fmt;
use std::sync::Arc;

/// A path from some root, as names; cheap to clone and to extend.
#[derive(Clone, Default)]
pub struct SharedPath(Option<Arc<Link>>);

struct Link {
    parent: SharedPath,
    name: Box<str>,
    len: usize,
}

impl SharedPath {
    /// The empty path (the root).
    pub fn root() -> SharedPath {
        SharedPath(None)
    }

    /// How many names.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |l| l.len)
    }

    /// Whether it is the root.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// This path and one more name.
    pub fn join(&self, name: &str) -> SharedPath {
        SharedPath(Some(Arc::new(Link {
            parent: self.clone(),
            name: name.into(),
            len: self.len() + 1,
        })))
    }

    /// The last name.
    pub fn name(&self) -> Option<&str> {
        self.0.as_deref().map(|l| &*l.name)
    }

    /// The path without its last name.
    pub fn parent(&self) -> Option<&SharedPath> {
        self.0.as_deref().map(|l| &l.parent)
    }

    /// The names, root first.
    pub fn to_vec(&self) -> Vec<String> {
        let mut names = Vec::with_capacity(self.len());
        let mut at = self;
        while let Some(link) = at.0.as_deref() {
            names.push(link.name.to_string());
            at = &link.parent;
        }
        names.reverse();
        names
    }

    /// Whether the names are exactly `names`.
    pub fn equals(&self, names: &[String]) -> bool {
        self.len() == names.len() && self.is_prefix_of(names)
    }

    /// Whether `names` starts with this path (or is it).
    pub fn is_prefix_of(&self, names: &[String]) -> bool {
        if self.len() > names.len() {
            return false;
        }
        let mut at = self;
        let mut i = self.len();
        while let Some(link) = at.0.as_deref() {
            i -= 1;
            if *link.name != *names[i] {
                return false;
            }
            at = &link.parent;
        }
        true
    }
}

impl fmt::Debug for SharedPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "/{}", self.to_vec().join("/"))
    }
}

impl PartialEq for SharedPath {
    fn eq(&self, other: &SharedPath) -> bool {
        self.to_vec() == other.to_vec()
    }
}

impl Eq for SharedPath {}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn extending_shares_and_compares_without_copying() {
        let usr = SharedPath::root().join("usr");
        let include = usr.join("include");
        let lib = usr.join("lib");
        assert_eq!(include.to_vec(), names(&["usr", "include"]));
        assert_eq!(lib.parent(), Some(&usr));
        assert_eq!((include.len(), include.name()), (2, Some("include")));
        assert!(include.equals(&names(&["usr", "include"])));
        assert!(!include.equals(&names(&["usr", "lib"])));
        assert!(usr.is_prefix_of(&names(&["usr", "include", "x"])));
        assert!(!lib.is_prefix_of(&names(&["usr"])));
        assert!(SharedPath::root().is_prefix_of(&[]) && SharedPath::root().is_empty());
        assert_eq!(format!("{include:?}"), "/usr/include");
    }
}
