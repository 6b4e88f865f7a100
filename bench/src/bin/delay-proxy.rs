//! `delay-proxy UPSTREAM MICROSECONDS`: a 9P proxy on 127.0.0.1 that holds every reply
//! from the `tcp:` server UPSTREAM for MICROSECONDS after it arrives before passing it
//! on, as a slow link between the client and the server would (the build workload's
//! `BENCH_DELAY_US`). Prints `tcp:127.0.0.1:PORT` on stdout, then relays until killed.
//!
//! It is a link's latency, not a queue: each reply leaves MICROSECONDS after it came
//! in, whatever is in flight with it (replies keep their order). A client that sends
//! three requests at once waits one delay for the three replies, as it would over a
//! real link. Requests pass at once.
//!
//! The delay is kept to within tens of microseconds: each connection's replies wait on
//! a thread of their own in `nanosleep` with a timer slack of 1 ns. (Until 2026-12-02
//! they waited on tokio's timer, which rounds every deadline up to its next
//! millisecond: a round trip through the proxy took 1.2 ms at "0", 1.3 ms at
//! "200 us" and 2.3 ms at "1 ms"; `bench/proxy-latency` measures it.)
//!
//! When a connection ends it prints one line on stderr: `delay-proxy: connection
//! closed: N requests, M round trips`. A round trip is a request that reached the
//! proxy while the client was waiting for no reply: the client had nothing on the wire
//! but Tclunks and Tflushes (which nobody waits for), so it was waiting for nothing
//! else and this request starts a new wait of one delay. Requests sent behind it before
//! its reply left (a flight, a window of reads) ride in the same round trip. For a
//! client that does one thing at a time (`--jobs 1`) this is the number of delays the
//! run paid: the requests it sent one after another.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use wasm9p_proto::Message;

/// The largest frame relayed (a larger length is not 9P: the connection ends).
const MAX_FRAME: usize = 16 << 20;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(upstream), Some(delay), 2) = (args.first(), args.get(1), args.len()) else {
        eprintln!("usage: delay-proxy tcp:HOST:PORT MICROSECONDS");
        return ExitCode::from(2);
    };
    let Ok(wasm9p_proto::Addr::Tcp { host, port }) = upstream.parse::<wasm9p_proto::Addr>() else {
        eprintln!("delay-proxy: {upstream:?} is not a tcp: address");
        return ExitCode::from(2);
    };
    let Ok(micros) = delay.parse::<u64>() else {
        eprintln!("delay-proxy: {delay:?} is not a number of microseconds");
        return ExitCode::from(2);
    };
    let listener = match TcpListener::bind("127.0.0.1:0").and_then(|l| Ok((l.local_addr()?, l))) {
        Ok((addr, listener)) => {
            println!("tcp:127.0.0.1:{}", addr.port());
            listener
        }
        Err(e) => {
            eprintln!("delay-proxy: {e}");
            return ExitCode::from(1);
        }
    };
    let upstream = format!("{host}:{port}");
    let delay = Duration::from_micros(micros);
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        let Ok(server) = TcpStream::connect(&upstream) else {
            continue;
        };
        thread::spawn(move || {
            if let Ok((requests, round_trips)) = relay(client, server, delay) {
                eprintln!(
                    "delay-proxy: connection closed: {requests} requests, {round_trips} round trips"
                );
            }
        });
    }
    ExitCode::SUCCESS
}

/// What a connection's client is waiting for.
#[derive(Default)]
struct Waiting {
    /// Tags of requests whose replies have not left the proxy, but Tclunks and Tflushes.
    tags: HashSet<u16>,
    /// Tflushes on the wire: their tag, and the tag they flush (whose request may get
    /// no reply of its own: the Rflush answers for it).
    flushes: HashMap<u16, u16>,
    requests: u64,
    round_trips: u64,
}

/// Relays one connection until either side closes it: requests as they come, replies
/// `delay` after they came. Returns the connection's requests and round trips.
fn relay(client: TcpStream, server: TcpStream, delay: Duration) -> std::io::Result<(u64, u64)> {
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let waiting = Arc::new(Mutex::new(Waiting::default()));
    let (mut client_in, mut client_out) = (client.try_clone()?, client);
    let (mut server_in, mut server_out) = (server.try_clone()?, server);
    let requests = {
        let waiting = waiting.clone();
        thread::spawn(move || {
            while let Some(frame) = read_frame(&mut client_in) {
                let (ty, tag) = (frame[4], u16::from_le_bytes([frame[5], frame[6]]));
                {
                    let mut w = waiting.lock().unwrap_or_else(PoisonError::into_inner);
                    w.requests += 1;
                    if Message::type_name(ty) == Some("Tflush") && frame.len() >= 9 {
                        w.flushes
                            .insert(tag, u16::from_le_bytes([frame[7], frame[8]]));
                    }
                    if !matches!(Message::type_name(ty), Some("Tclunk" | "Tflush")) {
                        if w.tags.is_empty() {
                            w.round_trips += 1;
                        }
                        w.tags.insert(tag);
                    }
                }
                if server_out.write_all(&frame).is_err() {
                    break;
                }
            }
            let _ = server_out.shutdown(Shutdown::Both);
        })
    };
    // Replies with the time they may leave, in order; this thread holds each until then.
    let (due, held) = mpsc::channel::<(Instant, Vec<u8>)>();
    let replies = thread::spawn(move || {
        while let Some(frame) = read_frame(&mut server_in) {
            if due.send((Instant::now() + delay, frame)).is_err() {
                return;
            }
        }
    });
    precise_sleeps();
    while let Ok((at, frame)) = held.recv() {
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
        // Before the write: once the client has the reply it may send what it waited
        // to send, and that must find this request answered.
        let tag = u16::from_le_bytes([frame[5], frame[6]]);
        {
            let mut w = waiting.lock().unwrap_or_else(PoisonError::into_inner);
            w.tags.remove(&tag);
            if let Some(flushed) = w.flushes.remove(&tag) {
                w.tags.remove(&flushed);
            }
        }
        if client_out.write_all(&frame).is_err() {
            break;
        }
    }
    let _ = client_out.shutdown(Shutdown::Both);
    let _ = requests.join();
    let _ = replies.join();
    let w = waiting.lock().unwrap_or_else(PoisonError::into_inner);
    Ok((w.requests, w.round_trips))
}

/// Asks the kernel to wake this thread's sleeps on time (its default slack is 50 us).
#[allow(unsafe_code)]
fn precise_sleeps() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// One whole frame, or `None` at the end of the stream or on a length that is not 9P.
fn read_frame(from: &mut TcpStream) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    from.read_exact(&mut size).ok()?;
    let len = u32::from_le_bytes(size) as usize;
    if !(7..=MAX_FRAME).contains(&len) {
        return None;
    }
    let mut frame = vec![0u8; len];
    frame[..4].copy_from_slice(&size);
    from.read_exact(&mut frame[4..]).ok()?;
    Some(frame)
}
