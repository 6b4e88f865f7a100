//! A TCP relay that holds back the reply to one chosen request until the test lets it
//! go: the deterministic way to make an answer leave the server before a change and
//! reach the client after it.
//!
//! [`ReplyGate::hold_next`] arms the gate with a test on requests (decoded
//! T-messages). The next request it picks passes to the server as usual; its reply is
//! kept at the gate ([`Held::reply_held`] says when it is there: the server has
//! answered, before anything the test does next) until [`Held::release`]. Every other
//! frame, both ways, passes at once and in order. One reply is held at a time per
//! [`Held`]; several may be armed.
//!
//! [`ReplyGate::cut`] closes every connection relayed so far (the client sees the
//! connection drop with its held requests unanswered), and
//! [`ReplyGate::delay_connections`] makes later connections wait before they reach
//! the server: together, a reconnect that takes as long as the test needs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use wasm9p_proto::{Addr, Message};

type Picks = Box<dyn Fn(&Message) -> bool + Send + Sync>;

/// One armed hold: which request, its tag once seen, and its state.
struct Hold {
    picks: Picks,
    /// The picked request's connection and tag.
    tag: Option<(u64, u16)>,
    state: watch::Sender<Stage>,
    release: watch::Receiver<bool>,
}

/// How far a held exchange has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Armed,
    Sent,
    ReplyHeld,
    Delivered,
}

#[derive(Default)]
struct Holds {
    armed: Vec<Hold>,
}

/// A running gate; stops relaying when dropped.
pub struct ReplyGate {
    /// Where clients connect.
    pub addr: Addr,
    holds: Arc<Mutex<Holds>>,
    /// Bumped by [`ReplyGate::cut`]; every relay ends when it changes.
    cuts: watch::Sender<u64>,
    /// How long a new connection waits before it is relayed.
    delay: Arc<Mutex<Duration>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ReplyGate {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A reply the gate holds (or will hold) back.
pub struct Held {
    state: watch::Receiver<Stage>,
    release: watch::Sender<bool>,
}

impl Held {
    /// Waits until the picked request's reply is at the gate: the server has answered.
    pub async fn reply_held(&mut self) {
        let _ = self.state.wait_for(|s| *s >= Stage::ReplyHeld).await;
    }

    /// Whether the picked request has reached the server yet.
    pub fn sent(&self) -> bool {
        *self.state.borrow() >= Stage::Sent
    }

    /// Lets the held reply go on to the client.
    pub fn release(&self) {
        let _ = self.release.send(true);
    }

    /// Waits until the released reply has been written to the client.
    pub async fn delivered(&mut self) {
        let _ = self.state.wait_for(|s| *s >= Stage::Delivered).await;
    }
}

impl ReplyGate {
    /// Listens on 127.0.0.1 and relays each connection to `upstream` (a `tcp:` address).
    pub async fn start(upstream: &Addr) -> ReplyGate {
        let Addr::Tcp { host, port } = upstream else {
            panic!("the reply gate relays tcp only, not {upstream}")
        };
        let upstream = format!("{host}:{port}");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let holds = Arc::new(Mutex::new(Holds::default()));
        let (cuts, cut_rx) = watch::channel(0);
        let delay = Arc::new(Mutex::new(Duration::ZERO));
        let shared = (holds.clone(), delay.clone());
        let task = tokio::spawn(async move {
            let mut conn = 0u64;
            while let Ok((client, _)) = listener.accept().await {
                let wait = *shared.1.lock().unwrap();
                tokio::time::sleep(wait).await;
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                conn += 1;
                let mut cut = cut_rx.clone();
                cut.mark_unchanged();
                tokio::spawn(relay(conn, client, server, shared.0.clone(), cut));
            }
        });
        ReplyGate {
            addr: Addr::Tcp {
                host: "127.0.0.1".into(),
                port,
            },
            holds,
            cuts,
            delay,
            task,
        }
    }

    /// Closes every connection relayed so far, both sides, held replies unsent.
    pub fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Connections accepted from now on wait `by` before they reach the server.
    pub fn delay_connections(&self, by: Duration) {
        *self.delay.lock().unwrap() = by;
    }

    /// Holds back the reply to the next request `picks` chooses (from now on).
    pub fn hold_next(&self, picks: impl Fn(&Message) -> bool + Send + Sync + 'static) -> Held {
        let (state, state_rx) = watch::channel(Stage::Armed);
        let (release, release_rx) = watch::channel(false);
        self.holds.lock().unwrap().armed.push(Hold {
            picks: Box::new(picks),
            tag: None,
            state,
            release: release_rx,
        });
        Held {
            state: state_rx,
            release,
        }
    }
}

async fn read_frame(from: &mut (impl tokio::io::AsyncRead + Unpin)) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    from.read_exact(&mut size).await.ok()?;
    let len = u32::from_le_bytes(size) as usize;
    if !(7..=16 << 20).contains(&len) {
        return None;
    }
    let mut frame = size.to_vec();
    frame.resize(len, 0);
    from.read_exact(&mut frame[4..]).await.ok()?;
    Some(frame)
}

fn tag_of(frame: &[u8]) -> u16 {
    u16::from_le_bytes([frame[5], frame[6]])
}

async fn relay(
    conn: u64,
    client: TcpStream,
    server: TcpStream,
    holds: Arc<Mutex<Holds>>,
    mut cut: watch::Receiver<u64>,
) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_in, mut client_out) = client.into_split();
    let (mut server_in, mut server_out) = server.into_split();
    let requests = {
        let holds = holds.clone();
        tokio::spawn(async move {
            while let Some(frame) = read_frame(&mut client_in).await {
                let message = Message::decode_body(frame[4], Bytes::copy_from_slice(&frame[7..]));
                if let Ok(message) = message {
                    let mut holds = holds.lock().unwrap();
                    if let Some(hold) = holds
                        .armed
                        .iter_mut()
                        .find(|h| h.tag.is_none() && (h.picks)(&message))
                    {
                        hold.tag = Some((conn, tag_of(&frame)));
                        let _ = hold.state.send(Stage::Sent);
                    }
                }
                if server_out.write_all(&frame).await.is_err() {
                    return;
                }
            }
        })
    };
    // One writer to the client: replies passing, and held ones once released.
    let (to_client, mut replies) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(async move {
        while let Some(frame) = replies.recv().await {
            if client_out.write_all(&frame).await.is_err() {
                return;
            }
        }
    });
    loop {
        let frame = tokio::select! {
            frame = read_frame(&mut server_in) => frame,
            _ = cut.changed() => {
                writer.abort();
                break;
            }
        };
        let Some(frame) = frame else {
            break;
        };
        let held = {
            let mut holds = holds.lock().unwrap();
            let at = holds
                .armed
                .iter()
                .position(|h| h.tag == Some((conn, tag_of(&frame))));
            at.map(|i| holds.armed.remove(i))
        };
        match held {
            None => {
                if to_client.send(frame).is_err() {
                    break;
                }
            }
            Some(mut hold) => {
                let _ = hold.state.send(Stage::ReplyHeld);
                let to_client = to_client.clone();
                tokio::spawn(async move {
                    let _ = hold.release.wait_for(|go| *go).await;
                    let _ = to_client.send(frame);
                    let _ = hold.state.send(Stage::Delivered);
                });
            }
        }
    }
    requests.abort();
    drop(to_client);
    let _ = writer.await;
}
