//! Exports whose files are not host files: a 9P2000.L server in front of any
//! [`NodeFs`], a file system of numbered nodes (a plugin component's, a content-
//! addressed input root's).
//!
//! A host directory export (the rest of this crate) is served from file descriptors
//! (cap-std handles, `*at()` calls, io threads per tenant); a `NodeFs` knows nothing of
//! those: it answers lookups, attributes, listings, reads and changes by node number,
//! and [`serve`] speaks the protocol for it, over any transport stream (the in-process
//! duplex, a Unix socket, vsock). So a plugin mount and a build action's input root are
//! 9p mounts like any other, with the client's caches in front of them.
//!
//! What the protocol sees of a node: its qid path is the node number and its qid
//! version the [`Attr::version`] the file system gives (it must move when the file's
//! contents do, so that pages cached by a reader are dropped), its owner the user
//! running the server. What a `NodeFs` cannot express (ownership and permission
//! changes, setting times, xattrs, hard links, device nodes, locks) is EOPNOTSUPP:
//! saying "done" would be a lie.

mod fs;
mod serve;

pub use fs::{Attr, BoxFuture, Dirent, Kind, New, NodeFs};
pub use serve::{serve, serve_on};
