//! The 9P2000.L client: one multiplexed session per connection, shared by any number
//! of tasks and threads.
//!
//! - [`Session::connect`] negotiates the msize (asks [`ClientConfig::msize`], takes what
//!   the server grants, refuses below 4096, above what it asked, or another dialect) and
//!   [`Session::attach`] binds a root [`Fid`].
//! - Requests carry tags from a pool; replies are matched by tag in any order. At most
//!   [`ClientConfig::max_inflight`] requests are outstanding; further callers wait.
//! - A [`Fid`] is clunked when dropped; its number returns to the allocator only after
//!   Rclunk, so [`Session::live_fids`] comes back to its baseline after any workload.
//! - Walks send at most 16 names per Twalk and split longer paths; a partial walk
//!   reports the index of the first name that is missing ([`WalkError`]), so a cache can
//!   record a negative entry for exactly that name.
//! - Large reads and writes are split at `msize - IOHDRSZ` with up to
//!   [`ClientConfig::io_depth`] requests in flight per call.
//! - [`Fid::walk_open`] walks to a file and opens it, with its attributes and first
//!   bytes, in one round trip on a server that says it handles requests in order
//!   (module `flight`).
//! - Dropping a request future (or its timeout firing) sends Tflush; the tag is reused
//!   only after Rflush. Every request times out after [`ClientConfig::timeout`].
//! - Connection loss fails every pending request with EIO at once and marks the
//!   session dead; later calls fail with EIO immediately. With
//!   [`ClientConfig::reconnect`] the session connects again instead and restores its
//!   fids (module `reconnect`: what is retried, what fails, what goes stale).
//! - A fid number whose Tclunk got no answer is never reused (the server may still
//!   have it bound); [`Session::lost_fids`] counts them. A reply with an unknown tag or
//!   a frame over msize kills the session; a reply of the wrong type, a body that does
//!   not decode, or a count larger than asked fails that request with EIO. Nothing a
//!   server sends can make the client allocate more than msize per frame.
//!
//! The modules build on one another, none on one above it: `config` (what a caller
//! sets and reads back), `fid_pool` (fid numbers) and `learned` (what the server
//! promised or refused) stand alone; `reconnect` sees the session only as its trait
//! `Supervised`; `session` (with `session/link`, the connection's tasks) is the tag
//! pool and the calls, its shared state private to it; `fid`, `io`, `ops` and
//! `flight` are fids and the requests on them, through [`Session`]'s methods.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use wasm9p_guest_fs::client::{ClientConfig, Session};
//!
//! let session = Session::connect(&"tcp:127.0.0.1:5640".parse()?, ClientConfig::default()).await?;
//! let root = session.attach("").await?;
//! let file = root.walk(&["usr", "include", "stdio.h"]).await?.fid;
//! file.lopen(wasm9p_proto::consts::open::RDONLY).await?;
//! let bytes = file.read_at(0, 1 << 20).await?;
//! # Ok(()) }
//! ```

mod config;
mod fid;
mod fid_pool;
mod flight;
mod io;
mod learned;
mod ops;
mod reconnect;
mod session;

pub use config::{ClientConfig, ConnectError, Dial, Dialer, ReconnectStats, RpcCounts};
pub use fid::{Fid, Walk, WalkError};
pub use flight::{first_entries, first_read, First, FlightError, OpenedWalk};
pub use ops::{Entries, SetAttr};
pub use session::{Session, CLOSE_DRAIN};
