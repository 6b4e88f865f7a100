//! A 9P-aware TCP proxy that injects faults between a client and a server.
//!
//! Each accepted connection gets its own upstream connection. Two reader tasks cut
//! the byte streams into frames (`size[4]` first) and hand them to one switch task,
//! which forwards them and, on a seeded schedule, delays, drops, reorders or cuts them:
//! a reset closes both sides at once, a truncation sends the first half of a frame and
//! then closes. The first `spare` frames of each direction pass untouched (the version
//! and attach exchange), so faults land on the operations under test.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use wasm9p_proto::Addr;

use crate::Rng;

/// What can happen to a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forwarded after this long.
    Delay(Duration),
    /// Never forwarded.
    Drop,
    /// Both sides closed at once.
    Reset,
    /// Half the frame forwarded, then both sides closed.
    Truncate,
    /// Held back and forwarded after the next frame in the same direction.
    Reorder,
    /// Not a fault but a server quirk within the spec: an Rread carries at most this
    /// many bytes of what the server read (other frames pass as they are).
    ShortRead(u32),
    /// A server quirk: Rlerror sent as type 107 (Rerror) with the same errno body, as
    /// some production 9P2000.L servers do (other frames pass as they are).
    AsRerror,
}

/// `frame` rewritten by a quirk `fault`; `None` if the quirk leaves it alone.
fn quirk(fault: Fault, frame: &[u8]) -> Option<Vec<u8>> {
    const RREAD: u8 = 117;
    const RLERROR: u8 = 7;
    match fault {
        Fault::ShortRead(most) if frame[4] == RREAD && frame.len() >= 11 => {
            let count = u32::from_le_bytes(frame[7..11].try_into().unwrap());
            let keep = count.min(most);
            let mut out = Vec::with_capacity(11 + keep as usize);
            out.extend_from_slice(&(11 + keep).to_le_bytes());
            out.extend_from_slice(&frame[4..7]);
            out.extend_from_slice(&keep.to_le_bytes());
            out.extend_from_slice(&frame[11..11 + keep as usize]);
            Some(out)
        }
        Fault::AsRerror if frame[4] == RLERROR => {
            let mut out = frame.to_vec();
            out[4] = 107;
            Some(out)
        }
        _ => None,
    }
}

/// Which frames faults apply to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Client to server (T-messages).
    Requests,
    /// Server to client (R-messages).
    Replies,
}

/// When faults happen.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// Seeds the choice of frames.
    pub seed: u64,
    /// The fault.
    pub fault: Fault,
    /// Frames it applies to.
    pub direction: Direction,
    /// One frame in `every` (1: all of them) after the spare ones.
    pub every: u64,
    /// Frames per direction and connection that always pass.
    pub spare: u64,
}

/// A running proxy.
pub struct FaultProxy {
    /// Where clients connect.
    pub addr: Addr,
    injected: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Listens on 127.0.0.1 and relays to `upstream` (a `tcp:` address).
    pub async fn start(upstream: &Addr, schedule: Schedule) -> FaultProxy {
        let Addr::Tcp { host, port } = upstream else {
            panic!("the fault proxy relays tcp only, not {upstream}")
        };
        let upstream = format!("{host}:{port}");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let injected = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&injected);
        let task = tokio::spawn(async move {
            let mut conn = 0u64;
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                conn += 1;
                let mut schedule = schedule.clone();
                schedule.seed = schedule.seed.wrapping_add(conn.wrapping_mul(0x9e37_79b9));
                tokio::spawn(relay(client, server, schedule, Arc::clone(&counter)));
            }
        });
        FaultProxy {
            addr: Addr::Tcp {
                host: "127.0.0.1".into(),
                port,
            },
            injected,
            task,
        }
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }
}

/// Reads whole frames from `from` into `to`, until either side ends.
async fn frames(mut from: OwnedReadHalf, to: mpsc::Sender<Vec<u8>>) {
    loop {
        let mut size = [0u8; 4];
        if from.read_exact(&mut size).await.is_err() {
            return;
        }
        let len = u32::from_le_bytes(size) as usize;
        if !(7..=16 << 20).contains(&len) {
            return; // not a frame: the relay ends, as a reset would
        }
        let mut frame = vec![0u8; len];
        frame[..4].copy_from_slice(&size);
        if from.read_exact(&mut frame[4..]).await.is_err() || to.send(frame).await.is_err() {
            return;
        }
    }
}

/// One direction's output and its schedule state.
struct Lane {
    out: OwnedWriteHalf,
    seen: u64,
    held: Option<Vec<u8>>,
    faulty: bool,
}

impl Lane {
    async fn send(&mut self, frame: &[u8]) -> std::io::Result<()> {
        self.out.write_all(frame).await
    }
}

async fn relay(client: TcpStream, server: TcpStream, s: Schedule, injected: Arc<AtomicU64>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_in, client_out) = client.into_split();
    let (server_in, server_out) = server.into_split();
    let (req_tx, mut req_rx) = mpsc::channel(64);
    let (rep_tx, mut rep_rx) = mpsc::channel(64);
    let readers = [
        tokio::spawn(frames(client_in, req_tx)),
        tokio::spawn(frames(server_in, rep_tx)),
    ];
    let mut to_server = Lane {
        out: server_out,
        seen: 0,
        held: None,
        faulty: s.direction == Direction::Requests,
    };
    let mut to_client = Lane {
        out: client_out,
        seen: 0,
        held: None,
        faulty: s.direction == Direction::Replies,
    };
    let mut rng = Rng::new(s.seed);
    loop {
        let (frame, lane) = tokio::select! {
            f = req_rx.recv() => match f { Some(f) => (f, &mut to_server), None => break },
            f = rep_rx.recv() => match f { Some(f) => (f, &mut to_client), None => break },
            // A reordered frame with nothing after it goes out on its own.
            _ = tokio::time::sleep(Duration::from_millis(20)),
                if to_server.held.is_some() || to_client.held.is_some() => {
                for lane in [&mut to_server, &mut to_client] {
                    if let Some(held) = lane.held.take() {
                        let _ = lane.send(&held).await;
                    }
                }
                continue;
            }
        };
        lane.seen += 1;
        let hit = lane.faulty && lane.seen > s.spare && rng.below(s.every) == 0;
        let fault = if hit { Some(s.fault) } else { None };
        let (frame, fault) = match fault.map(|f| (f, quirk(f, &frame))) {
            Some((f @ (Fault::ShortRead(_) | Fault::AsRerror), Some(rewritten))) => {
                (rewritten, Some(f))
            }
            // A quirk that does not apply to this frame: not injected.
            Some((Fault::ShortRead(_) | Fault::AsRerror, None)) => (frame, None),
            other => (frame, other.map(|(f, _)| f)),
        };
        if fault.is_some() {
            injected.fetch_add(1, Ordering::Relaxed);
        }
        let sent = match fault {
            None | Some(Fault::ShortRead(_) | Fault::AsRerror) => lane.send(&frame).await,
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                lane.send(&frame).await
            }
            Some(Fault::Drop) => Ok(()),
            Some(Fault::Reorder) => match lane.held.replace(frame) {
                Some(earlier) => lane.send(&earlier).await,
                None => Ok(()),
            },
            Some(Fault::Reset) => break,
            Some(Fault::Truncate) => {
                let _ = lane.send(&frame[..frame.len() / 2]).await;
                break;
            }
        };
        // A frame behind a held one: the held one follows it.
        if fault != Some(Fault::Reorder) {
            if let Some(held) = lane.held.take() {
                let _ = lane.send(&held).await;
            }
        }
        if sent.is_err() {
            break;
        }
    }
    for r in readers {
        r.abort();
    }
}
