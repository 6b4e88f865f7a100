//! The broker: the shim process's node side, serving the containers it starts.
//!
//! A task's code runs inside its container: runwasi's libcontainer has pivoted it into
//! the rootfs, so the node's files are out of its sight, the bundle's `config.json`
//! among them (runwasi hands the sandbox only the process's args and environment).
//! The broker runs in the shim process, which still sees the node, and does for a
//! container what the container cannot:
//! - [`Request::Describe`]: reads the container's spec ([`crate::bundle::Bundle`]);
//! - [`Request::Artifact`]: opens the compiled code the node keeps under a key,
//!   read-only, for the container to map (the module cache is the node's: no
//!   container holds a descriptor it could write native code through, which other
//!   containers would then run; and the container's user needs no access to the
//!   cache's directory, so non-root tasks get the code too);
//! - [`Request::Dial`]: connects to a node-side 9P server the container's annotation
//!   names (and the node allows), at its start and again at each reconnect;
//! - [`Request::Compile`]: compiles the program whose code a container did not find
//!   (its wasm file handed over, never code) into the module cache, so that the next
//!   container runs it without compiling; containers store nothing themselves. The shim process outlives its last
//!   container for it ([`finish_compiles`]): containerd does not wait for a shim it
//!   has shut down.
//!
//! Sockets and files cross over as descriptors (`SCM_RIGHTS`).
//!
//! How a container reaches it: [`start`] makes a `SOCK_SEQPACKET` socket pair before
//! runwasi forks its zygote, so every container process inherits one end
//! (libcontainer marks inherited descriptors close-on-exec, which a wasm task never
//! reaches: it does not exec; a Linux container under this runtime does, and loses
//! it). Each request carries the end of a fresh pair the reply goes to.
//!
//! Who asks: the kernel attaches the sender's process id to each request
//! (`SO_PASSCRED`), translated into the shim's pid namespace; the broker finds the
//! container whose root that process has (`/proc/PID/root`, compared by device and
//! inode with each bundle's rootfs beside the shim's own). A container cannot name
//! another container's bundle, nor a source its own annotation does not name.

mod container;
mod node;

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::OnceLock;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};

pub use container::{compile_on_node, compile_on_node_now, describe, fetch_artifact, BrokerDial};
pub use node::finish_compiles;

use crate::bundle::Bundle;
use crate::config::ShimConfig;

/// A request, from a container.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    /// The container's setup: [`Described`].
    Describe,
    /// The compiled code kept under `key` (the module cache's key of a program's
    /// digest and an engine's settings), opened read-only.
    Artifact {
        /// Its key: 64 hex digits.
        key: String,
    },
    /// A connection to `source`, a node-side address the container's annotation names.
    Dial {
        /// The address, as the annotation writes it.
        source: String,
    },
    /// The compile of the program whose file comes with the request (its wasm, never
    /// code), for the engines `engines` says, kept in the module cache: the tier
    /// `wait_for` names before the reply ([`Reply::Compiled`]), the rest (the optimized
    /// code) after it; with no tier to wait for, all of it after the reply
    /// ([`Reply::Compiling`]).
    Compile {
        /// Which engines' code.
        engines: CompileFor,
        /// The tier whose code the container waits for, if any.
        wait_for: Option<CodeTier>,
    },
}

/// The engines a program's code is compiled for: their settings are part of the
/// code's key in the module cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompileFor {
    /// The guest engine's (a cli task).
    Guest {
        /// With epoch interruption.
        interruptible: bool,
    },
    /// The HTTP handler's, for these limits.
    Http {
        /// The memory bound of each instance.
        memory: Option<usize>,
        /// Instances at once.
        max_instances: usize,
        /// For a 0.3 service (with concurrency support), not a 0.2 proxy.
        service: bool,
    },
}

/// A tier of compiled code, as a request names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CodeTier {
    /// The baseline compiler's (quick to make, for a big program's first start).
    Baseline,
    /// The optimizing compiler's.
    Optimized,
}

impl CodeTier {
    /// The module cache's tier.
    pub fn tier(self) -> wasm9p_host::module_cache::Tier {
        match self {
            CodeTier::Baseline => wasm9p_host::module_cache::Tier::Baseline,
            CodeTier::Optimized => wasm9p_host::module_cache::Tier::Optimized,
        }
    }

    /// As the module cache names it.
    pub fn of(tier: wasm9p_host::module_cache::Tier) -> CodeTier {
        match tier {
            wasm9p_host::module_cache::Tier::Baseline => CodeTier::Baseline,
            wasm9p_host::module_cache::Tier::Optimized => CodeTier::Optimized,
        }
    }
}

/// A reply, from the broker.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    /// The container's setup.
    Described(Described),
    /// The artifact: its read-only descriptor comes with the reply.
    Artifact,
    /// No code is kept under that key.
    NotKept,
    /// Connected: the socket comes with the reply.
    Dialed,
    /// The compile is under way on the node.
    Compiling,
    /// The code of the tier waited for is kept.
    Compiled,
    /// Not done: one line saying why.
    Refused(String),
}

/// What a container learns of its setup.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Described {
    /// What its spec says.
    pub bundle: Bundle,
    /// The 9p mount options of its root (the node's configuration).
    pub root_options: String,
    /// The 9p mount options of its volumes.
    pub volume_options: String,
    /// Whether the node keeps compiled code (asked for by [`Request::Artifact`]).
    pub keeps_code: bool,
    /// Programs from this size up start on the baseline tier.
    pub tier_from: u64,
    /// How an HTTP task reuses instances (the node's configuration).
    pub http_reuse: u32,
    /// How long a kept instance waits, in milliseconds.
    pub http_reuse_idle_ms: u64,
}

impl Described {
    /// How the task's HTTP handler reuses instances.
    pub fn http_reuse(&self) -> wasm9p_host::http::Reuse {
        wasm9p_host::http::Reuse {
            uses: self.http_reuse,
            idle: std::time::Duration::from_millis(self.http_reuse_idle_ms),
        }
    }
}

/// The largest message either side sends.
const MAX_MESSAGE: usize = 256 << 10;

/// The containers' end of the broker's socket, inherited by every process the shim
/// forks once [`start`] has run.
static CONTAINER_END: OnceLock<OwnedFd> = OnceLock::new();

/// Starts the broker for the shim process (call it before anything forks, while the
/// process has one thread): the socket pair now, its node-side thread once runwasi's
/// zygote (the process containers are forked from) has been forked with the other end.
pub fn start(config: Result<ShimConfig, String>) {
    let pair = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    );
    let (node_end, container_end) = match pair {
        Ok(pair) => pair,
        Err(e) => {
            log::error!("wasm9p broker: cannot make its socket: {e}");
            return;
        }
    };
    if let Err(e) = rustix::net::sockopt::set_socket_passcred(&node_end, true) {
        log::error!("wasm9p broker: cannot ask for senders' credentials: {e}");
        return;
    }
    let _ = CONTAINER_END.set(container_end);
    // The zygote is forked now, single-threaded, holding the containers' end; the
    // broker's thread comes after it. (runwasi's own call finds it made.)
    zygote::Zygote::init();
    node::spawn(node_end, config);
}

/// Sends `message` and `fds` as one packet.
fn send<T: Serialize>(
    socket: BorrowedFd<'_>,
    message: &T,
    fds: &[BorrowedFd<'_>],
) -> Result<(), String> {
    let bytes = serde_json::to_vec(message).map_err(|e| e.to_string())?;
    if bytes.len() > MAX_MESSAGE {
        return Err(format!(
            "a broker message of {} bytes is too long",
            bytes.len()
        ));
    }
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err("cannot attach descriptors".into());
    }
    rustix::net::sendmsg(
        socket,
        &[IoSlice::new(&bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )
    .map_err(|e| format!("broker socket: {e}"))?;
    Ok(())
}

/// One packet: its message, the descriptors that came with it, and the sender's
/// process id when the socket asks for credentials.
struct Received<T> {
    message: T,
    fds: Vec<OwnedFd>,
    pid: Option<i32>,
}

/// At most this many descriptors come with one packet.
const MAX_FDS: usize = 4;

/// Receives one packet. A closed socket is `Ok(None)`; the error is one line, or that
/// the socket's receive timeout passed (`None`).
fn receive<T: for<'de> Deserialize<'de>>(
    socket: BorrowedFd<'_>,
) -> Result<Option<Received<T>>, Option<String>> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut space =
        vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS), ScmCredentials(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match rustix::net::recvmsg(
            socket,
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(got) => break got,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => return Err(None),
            Err(e) => return Err(Some(format!("broker socket: {e}"))),
        }
    };
    let mut fds = Vec::new();
    let mut pid = None;
    for message in control.drain() {
        match message {
            RecvAncillaryMessage::ScmRights(received) => fds.extend(received),
            RecvAncillaryMessage::ScmCredentials(cred) => {
                pid = Some(cred.pid.as_raw_nonzero().get())
            }
            _ => {}
        }
    }
    if got.bytes == 0 && fds.is_empty() {
        return Ok(None);
    }
    if got.flags.contains(rustix::net::ReturnFlags::TRUNC)
        || got.flags.contains(rustix::net::ReturnFlags::CTRUNC)
    {
        return Err(Some("a broker message was cut short".into()));
    }
    let message = serde_json::from_slice(&buf[..got.bytes])
        .map_err(|e| Some(format!("a broker message that does not parse: {e}")))?;
    Ok(Some(Received { message, fds, pid }))
}

/// Whether the broker's socket was made (a process started without [`start`] has
/// none: it cannot run tasks).
pub fn available() -> bool {
    CONTAINER_END.get().is_some()
}

fn container_end() -> Option<BorrowedFd<'static>> {
    CONTAINER_END.get().map(AsFd::as_fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packet_carries_its_message_descriptors_and_senders_pid() {
        let (a, b) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        rustix::net::sockopt::set_socket_passcred(&b, true).unwrap();
        let file = tempfile::tempfile().unwrap();
        let request = Request::Dial {
            source: "unix:/run/wasm9p/node.sock".into(),
        };
        send(a.as_fd(), &request, &[file.as_fd()]).unwrap();
        let got = receive::<Request>(b.as_fd()).unwrap().unwrap();
        assert!(
            matches!(&got.message, Request::Dial { source } if source == "unix:/run/wasm9p/node.sock")
        );
        assert_eq!(got.fds.len(), 1);
        assert_eq!(got.pid, Some(std::process::id() as i32));
        // A closed peer is the end, not an error.
        drop(a);
        assert!(receive::<Request>(b.as_fd()).unwrap().is_none());
    }

    #[test]
    fn a_message_past_the_bound_is_refused_before_it_is_sent() {
        let (a, _b) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let huge = Reply::Refused("x".repeat(MAX_MESSAGE));
        assert!(send(a.as_fd(), &huge, &[])
            .unwrap_err()
            .contains("too long"));
    }
}
