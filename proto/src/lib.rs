//! # wasm9p-proto: the 9P2000.L wire protocol
//!
//! What it is: every 9P2000.L message ([`messages`]), defined once and encoded,
//! decoded and sized from that one definition ([`wire::Wire`]); framing bounded by the
//! negotiated msize ([`frame`]); Linux errno values ([`Errno`]); and, behind the `tokio`
//! feature, the transports (`tcp:`, `unix:`, `vsock:`, `fc-vsock:`, in-process duplex).
//!
//! What it is not: a client or a server. It does no file I/O and, without the `tokio`
//! feature, no OS calls at all, so it also builds for wasm32.
//!
//! ```
//! use bytes::BytesMut;
//! use wasm9p_proto::{encode_frame, FrameDecoder, Message, Twalk};
//!
//! let walk = Twalk { fid: 1, newfid: 2, wnames: vec!["usr".into(), "include".into()] };
//! let mut buf = BytesMut::new();
//! encode_frame(3, &walk.clone().into(), &mut buf);
//! let frame = FrameDecoder::new(8192).decode(&mut buf).unwrap().unwrap();
//! assert_eq!(frame.tag, 3);
//! assert_eq!(frame.body, Ok(Message::Twalk(walk)));
//! ```

pub mod addr;
pub mod consts;
pub mod dirent;
pub mod errno;
pub mod frame;
pub mod messages;
#[cfg(feature = "tokio")]
pub mod transport;
pub mod wire;

pub use addr::{Addr, AddrError};
pub use dirent::{DirEntry, DirEntryPacker};
pub use errno::Errno;
pub use frame::{encode_frame, encode_frame_head, frame_size, Frame, FrameDecoder, ZERO_COPY_MIN};
pub use messages::*;
pub use wire::{Data, Qid, TrailingU32, Wire};

/// A boxed future that can cross threads: what the object-safe async traits of the
/// crates above answer with (a server's `NodeFs`, the client's `Backend`, the farm's
/// fetches). Defined here, their lowest common crate, once.
pub type BoxFuture<'a, T> = core::pin::Pin<Box<dyn core::future::Future<Output = T> + Send + 'a>>;

/// Why a message body could not be decoded. The frame around it was fine, so the
/// connection goes on; the request gets an error reply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The body ended before a field did.
    #[error("message truncated: needed {needed} bytes, {available} left")]
    Truncated {
        /// Bytes the field needed.
        needed: usize,
        /// Bytes left in the body.
        available: usize,
    },
    /// The body had bytes left over after its last field.
    #[error("{0} unexpected bytes after the message")]
    TrailingBytes(usize),
    /// A string was not UTF-8.
    #[error("string is not valid UTF-8")]
    InvalidUtf8,
    /// The type number is not a 9P2000.L message.
    #[error("unknown message type {0}")]
    UnknownType(u8),
}

/// Why a byte stream could not be split into frames. The stream cannot be
/// resynchronised after this, so the connection must close.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The length prefix exceeds the negotiated msize.
    #[error("frame of {size} bytes exceeds msize {max}")]
    TooLarge {
        /// The length the peer announced.
        size: u32,
        /// The negotiated limit.
        max: u32,
    },
    /// The length prefix is smaller than a frame header.
    #[error("frame of {0} bytes is shorter than the 7-byte header")]
    TooSmall(u32),
}
