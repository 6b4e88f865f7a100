//! Who is at the other end of an accepted connection: what a server decides access by.

use std::net::IpAddr;

use crate::addr::Addr;

/// The identity a transport gives a peer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PeerId {
    /// A tcp peer's address.
    Ip(IpAddr),
    /// A Unix-socket peer's credentials (SO_PEERCRED). Behind a hybrid-vsock
    /// (`fc-vsock:`) listener this is the VMM's process, not the guest: decide by the
    /// listener there.
    Unix {
        /// Its user.
        uid: u32,
        /// Its group.
        gid: u32,
    },
    /// An AF_VSOCK peer's context id.
    Vsock {
        /// The CID.
        cid: u32,
    },
    /// Nothing known (an in-process pipe, or credentials the kernel did not give).
    Unknown,
}

/// An accepted connection's peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// A printable name for logs (`127.0.0.1:40312`, `unix:/run/9p.sock uid 1000`...).
    pub name: String,
    /// The listener it arrived on (`None`: not through a listener).
    pub listener: Option<Addr>,
    /// Who it is.
    pub id: PeerId,
}

impl Peer {
    /// A peer of an in-process connection, known by `name` only.
    pub fn local(name: impl Into<String>) -> Peer {
        Peer {
            name: name.into(),
            listener: None,
            id: PeerId::Unknown,
        }
    }
}
