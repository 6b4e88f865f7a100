//! Numbers of nodes: the tree's from a stable hash of path and digest, made ones from a
//! worker-wide counter with the top bit set (see the module docs of [`super`]).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::tree::TreeNode;

/// The top bit: nodes the action made.
pub(super) const MADE: u64 = 1 << 63;

/// A made file's first version. Made files' versions are even (they move by 2), the
/// tree's files' odd (the digest's first bytes, with the low bit set): a tree file
/// copied up keeps its number but never meets its tree version again, so that
/// (number, odd version) names one content for ever ([`fixed_content`]).
pub(super) const MADE_FILE_VERSION: u32 = 2;

/// Whether the node numbered `path` at qid `version` is a node of a tree as the tree
/// has it: the same bytes, names, attributes or target in every action, for ever (a
/// slot's shared cache keeps them across actions). Nodes an action made, files it
/// changed (copied up) and directories it changed (names added or removed) are not:
/// those have even versions.
pub fn fixed_content(path: u64, version: u32) -> bool {
    path & MADE == 0 && version & 1 == 1
}

/// Numbers of made nodes, worker-wide: never the same twice in one process, and
/// started from the clock, so not in the next either.
static NEXT_MADE: AtomicU64 = AtomicU64::new(0);

pub(super) fn next_made() -> u64 {
    if NEXT_MADE.load(Ordering::Relaxed) == 0 {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            & !MADE;
        let _ = NEXT_MADE.compare_exchange(0, seed.max(1), Ordering::Relaxed, Ordering::Relaxed);
    }
    MADE | (NEXT_MADE.fetch_add(1, Ordering::Relaxed) & !MADE)
}

/// The number of the tree node at `path`: the first eight bytes of a SHA-256 of the
/// path and of what the node is. A stable hash, unlike `DefaultHasher`, whose output
/// Rust does not promise to keep: the same tree gets the same numbers in every worker
/// process and release, so qids a client kept stay right.
pub(super) fn tree_id(node: &TreeNode, path: &str) -> u64 {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update((path.len() as u64).to_le_bytes());
    h.update(path.as_bytes());
    match node {
        TreeNode::Dir { digest, .. } => {
            h.update([0]);
            h.update(digest.hex());
            h.update(digest.size().to_le_bytes());
        }
        TreeNode::File { digest, executable } => {
            h.update([1, u8::from(*executable)]);
            h.update(digest.hex());
            h.update(digest.size().to_le_bytes());
        }
        TreeNode::Symlink { target } => {
            h.update([2]);
            h.update(target.as_bytes());
        }
    }
    let sum = h.finalize();
    u64::from_le_bytes(sum[..8].try_into().expect("eight bytes")) & !MADE
}
