//! The broker's container side: asking, from inside a container, over the socket the
//! container inherited.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

use wasm9p_guest_fs::client::Dial;
use wasm9p_proto::transport::{BoxStream, Connected};
use wasm9p_proto::{Addr, BoxFuture};

use super::{container_end, receive, send, CodeTier, CompileFor, Described, Reply, Request};

/// How long a reply may take (a dial's own timeout, and some).
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a compile the container waits for may take.
const COMPILE_TIMEOUT: Duration = Duration::from_secs(600);

/// Asks the broker: its reply, and the descriptors that came with it.
fn ask(request: &Request) -> Result<(Reply, Vec<OwnedFd>), String> {
    ask_with(request, None, REPLY_TIMEOUT)
}

/// Asks the broker, handing `file` over with the request, waiting `timeout` at most.
fn ask_with(
    request: &Request,
    file: Option<BorrowedFd<'_>>,
    timeout: Duration,
) -> Result<(Reply, Vec<OwnedFd>), String> {
    let end = container_end()
        .ok_or("this process was not started by the shim's main: it has no broker to ask")?;
    let (mine, theirs) = reply_pair(timeout)?;
    let mut fds = vec![theirs.as_fd()];
    fds.extend(file);
    send(end, request, &fds)?;
    drop(fds);
    drop(theirs);
    match receive::<Reply>(mine.as_fd()) {
        Ok(Some(received)) => Ok((received.message, received.fds)),
        Ok(None) => Err("the shim's broker went away without replying".into()),
        Err(None) => Err(format!(
            "the shim's broker did not reply within {timeout:?}"
        )),
        Err(Some(why)) => Err(why),
    }
}

/// A socket pair for one reply: this side's end (with a receive timeout), and the end
/// that goes with the request.
fn reply_pair(timeout: Duration) -> Result<(OwnedFd, OwnedFd), String> {
    let (mine, theirs) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| format!("cannot make a socket for the broker's reply: {e}"))?;
    rustix::net::sockopt::set_socket_timeout(
        &mine,
        rustix::net::sockopt::Timeout::Recv,
        Some(timeout),
    )
    .map_err(|e| format!("broker socket: {e}"))?;
    Ok((mine, theirs))
}

/// This container's setup.
pub fn describe() -> Result<Described, String> {
    match ask(&Request::Describe)? {
        (Reply::Described(described), _) => Ok(described),
        (Reply::Refused(why), _) => Err(why),
        (other, _) => Err(format!("the broker answered {other:?} to Describe")),
    }
}

/// The compiled code the node keeps under `key`, read-only; `None` when it keeps none
/// (or the broker could not be asked: the task then compiles, and says why in the
/// shim's log).
pub fn fetch_artifact(key: &str) -> Option<std::fs::File> {
    let request = Request::Artifact {
        key: key.to_owned(),
    };
    match ask(&request) {
        Ok((Reply::Artifact, fds)) => fds.into_iter().next().map(std::fs::File::from),
        Ok((Reply::NotKept, _)) => None,
        Ok((other, _)) => {
            log::warn!("wasm9p: the broker answered {other:?} to an artifact's request");
            None
        }
        Err(why) => {
            log::warn!("wasm9p: no compiled code from the node: {why}");
            None
        }
    }
}

/// A connection to `source` (an address the container's annotation names), made on
/// the node.
pub fn dial(source: &str) -> io::Result<OwnedFd> {
    let refused = |why: String| io::Error::new(io::ErrorKind::ConnectionRefused, why);
    let request = Request::Dial {
        source: source.to_owned(),
    };
    match ask(&request).map_err(refused)? {
        (Reply::Dialed, fds) => fds
            .into_iter()
            .next()
            .ok_or_else(|| refused("the broker's reply came without its socket".into())),
        (Reply::Refused(why), _) => Err(refused(why)),
        (other, _) => Err(refused(format!("the broker answered {other:?} to Dial"))),
    }
}

/// Hands the program at `path` (its wasm) to the node side, to compile for `engines`
/// and keep, later: whether it took it on.
pub fn compile_on_node(path: &std::path::Path, engines: CompileFor) -> io::Result<bool> {
    let file = std::fs::File::open(path)?;
    let request = Request::Compile {
        engines,
        wait_for: None,
    };
    match ask_with(&request, Some(file.as_fd()), REPLY_TIMEOUT).map_err(io::Error::other)? {
        (Reply::Compiling, _) => Ok(true),
        (Reply::Refused(why), _) => Err(io::Error::other(why)),
        _ => Ok(false),
    }
}

/// Hands the program at `path` (its wasm) to the node side, to compile for `engines`
/// and keep, and waits until the code of `tier` is kept (the rest is compiled after):
/// whether it is. A failure is said in the shim's log; the task then compiles the
/// code itself.
pub fn compile_on_node_now(
    path: &std::path::Path,
    engines: CompileFor,
    tier: wasm9p_host::module_cache::Tier,
) -> bool {
    let asked = std::fs::File::open(path)
        .map_err(|e| e.to_string())
        .and_then(|file| {
            let request = Request::Compile {
                engines,
                wait_for: Some(CodeTier::of(tier)),
            };
            ask_with(&request, Some(file.as_fd()), COMPILE_TIMEOUT)
        });
    match asked {
        Ok((Reply::Compiled, _)) => true,
        Ok((other, _)) => {
            log::warn!(
                "wasm9p: {}: not compiled on the node: {other:?}",
                path.display()
            );
            false
        }
        Err(why) => {
            log::warn!(
                "wasm9p: {}: not compiled on the node: {why}",
                path.display()
            );
            false
        }
    }
}

/// Dials through the broker: how a container's 9p mounts of node-side servers connect
/// (and reconnect). A connection made ahead ([`BrokerDial::dial_ahead`], at the
/// container's create, so that a server refusing it fails the create) is used first.
#[derive(Default)]
pub struct BrokerDial {
    ahead: Mutex<HashMap<String, Vec<OwnedFd>>>,
}

impl BrokerDial {
    /// Connects to `source` now, keeping the socket for the mount's first dial; the
    /// error is one line.
    pub fn dial_ahead(&self, source: &str) -> Result<(), String> {
        let fd = dial(source).map_err(|e| e.to_string())?;
        self.ahead
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(source.to_owned())
            .or_default()
            .push(fd);
        Ok(())
    }
}

impl Dial for BrokerDial {
    fn dial<'a>(&'a self, addr: &'a Addr) -> BoxFuture<'a, io::Result<BoxStream>> {
        let source = addr.to_string();
        let ready = self
            .ahead
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&source)
            .and_then(Vec::pop);
        Box::pin(async move {
            let fd = match ready {
                Some(fd) => fd,
                None => tokio::task::spawn_blocking(move || dial(&source))
                    .await
                    .map_err(io::Error::other)??,
            };
            Connected::from_fd(fd)?.into_stream()
        })
    }
}
