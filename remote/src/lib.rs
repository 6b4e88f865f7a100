//! # wasm9p-remote: the build farm's side of wasm9p
//!
//! A `wasm9p worker`'s logic, all but running guests (`wasm9p-host`'s, behind the
//! small trait [`action::Guests`]: "run this argv in this namespace and say how it
//! ended"):
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
//! - [`profiles`] and [`prefetch`]: which input files the actions of one kind read,
//!   kept across actions and restarts, and fetched in batches for the next action of
//!   that kind before its guest asks (never trusted: a path is looked up afresh);
//! - [`lease`]: a lease's states and the moves between them, apart from the gRPC;
//! - [`bots`]: the Remote Workers API bot session (v1test2), as BuildGrid's Bots
//!   service speaks it;
//! - [`action`]: one lease start to end: the `Action` decoded, its input root and
//!   program found, the guest run by the [`action::Guests`] the worker is given, the
//!   outputs uploaded, an `ActionResult` or the `google.rpc` status saying why not;
//! - [`bazel_test`]: Bazel's test actions (`test-setup.sh` and a test binary), carried
//!   out as the script would for a wasm test, `test.xml` and the undeclared outputs'
//!   zip ([`stored_zip`]) included;
//! - [`worker`]: the bot's loop: leases started, taken back and reported, the
//!   scheduler's restarts ridden out, a drain on request;
//! - [`stats`]: `--stats`, a JSON line per action and the totals, each figure defined
//!   once.
//!
//! What it is not: a scheduler, a CAS server, or anything that runs a guest. It
//! depends on `wasm9p-proto` and `wasm9p-server`, never on `wasm9p-host`. The command
//! (`wasm9p worker`, in `wasm9p-cli`'s `worker/`) parses its arguments, wires these
//! parts together, and implements [`action::Guests`] with a pool of slot processes
//! (each a `wasm9p worker-slot` running guests on `wasm9p-host`), keeps the bot id
//! across restarts and prints the worker's stats.

pub mod action;
pub mod bazel_test;
pub mod bots;
pub mod cas;
pub mod digest;
pub mod directories;
pub mod layer;
pub mod lease;
pub mod outputs;
pub mod prefetch;
pub mod profiles;
pub mod stats;
pub mod store;
pub mod stored_zip;
pub mod timeline;
pub mod tree;
pub mod worker;

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
