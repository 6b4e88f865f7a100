//! # wasm9p-remote: the build farm's side of wasm9p
//!
//! What a `wasm9p worker` needs from a Remote Execution farm (BuildGrid, say), apart
//! from running guests, which is `wasm9p-host`'s:
//! - [`digest`]: blobs named as REAPI names them (SHA-256 and size);
//! - [`cas`]: a client of the farm's CAS (FindMissingBlobs, BatchReadBlobs,
//!   BatchUpdateBlobs, ByteStream for large blobs);
//! - [`directories`]: the `Directory` messages already read, by digest, for the
//!   actions after (a build's input roots share most of theirs);
//! - [`store`]: the worker's content store on local disk, by digest: each blob
//!   fetched once per worker, verified, bounded, crash-safe, shared by every action;
//! - [`tree`]: an action's input root from its `Directory` messages, checked (names,
//!   duplicates, symlinks that leave it) before any guest sees it;
//! - [`layer`]: that tree with a writable layer for the action's outputs, as a
//!   `wasm9p_server::nodes::NodeFs`, so that it is served over 9P2000.L like any
//!   export (the embedded transport, a Unix socket, vsock): directories are complete
//!   listings, a file's bytes are fetched on its first read and never before, and qid
//!   paths and versions come from the digests, so the client's caches know a file
//!   they saw in an earlier action;
//! - [`outputs`]: what an action made, as an `ActionResult` (files, directories as
//!   `Tree`s, symlinks), uploaded;
//! - [`lease`]: a lease's states and the moves between them, apart from the gRPC;
//! - [`bots`]: the Remote Workers API bot session (v1test2), as BuildGrid's Bots
//!   service speaks it.
//!
//! What it is not: a scheduler, a CAS server, or anything that runs a guest. It
//! depends on `wasm9p-proto` and `wasm9p-server`, never on `wasm9p-host`.

pub mod bots;
pub mod cas;
pub mod digest;
pub mod directories;
pub mod layer;
pub mod lease;
pub mod outputs;
pub mod store;
pub mod tree;

pub use digest::Digest;

/// The farm's APIs: the REAPI v2 messages and clients, bytestream and google.rpc, as
/// `bazel-remote-apis` generates them, and the Remote Workers API (named apart from
/// the `wasm9p-proto` crate, which is 9P).
pub mod apis {
    pub use bazel_remote_apis::build::bazel::remote::execution::v2;
    pub use bazel_remote_apis::google::bytestream;
    pub use bazel_remote_apis::google::longrunning;
    pub use bazel_remote_apis::google::protobuf;
    /// The Remote Workers API (v1test2) and its google.rpc.
    pub mod workers {
        pub use googleapis_tonic_google_devtools_remoteworkers_v1test2::google::devtools::remoteworkers::v1test2::*;
        pub use googleapis_tonic_google_devtools_remoteworkers_v1test2::google::rpc;
    }
}

pub use wasm9p_proto::BoxFuture;
