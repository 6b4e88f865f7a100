//! `delay-proxy UPSTREAM MICROSECONDS`: a 9P proxy on 127.0.0.1 that holds every reply
//! from the `tcp:` server UPSTREAM for MICROSECONDS after it arrives before passing it
//! on, as a slow link between the client and the server would (the build workload's
//! `BENCH_DELAY_US`). Prints `tcp:127.0.0.1:PORT` on stdout, then relays until killed.
//!
//! It is a link's latency, not a queue: each reply leaves MICROSECONDS after it came
//! in, whatever is in flight with it (replies keep their order). A client that sends
//! three requests at once waits one delay for the three replies, as it would over a
//! real link; a proxy that held each reply in turn after the one before (as this one
//! did until 2026-12-02, by the test crate's fault proxy) made it wait three.
//! Requests pass at once.

use std::process::ExitCode;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

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
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("delay-proxy: {e}");
            return ExitCode::from(1);
        }
    };
    let upstream = format!("{host}:{port}");
    runtime.block_on(async move {
        let listener = match TcpListener::bind("127.0.0.1:0").await {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("delay-proxy: {e}");
                return ExitCode::from(1);
            }
        };
        match listener.local_addr() {
            Ok(addr) => println!("tcp:127.0.0.1:{}", addr.port()),
            Err(e) => {
                eprintln!("delay-proxy: {e}");
                return ExitCode::from(1);
            }
        }
        let delay = Duration::from_micros(micros);
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                continue;
            };
            tokio::spawn(relay(client, server, delay));
        }
        ExitCode::SUCCESS
    })
}

/// Relays one connection: requests as they come, replies `delay` after they came.
async fn relay(client: TcpStream, server: TcpStream, delay: Duration) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_in, mut client_out) = client.into_split();
    let (mut server_in, mut server_out) = server.into_split();
    let requests = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_in, &mut server_out).await;
    });
    // Replies with the time they may leave, in order; the writer holds each until then.
    let (due, mut held) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let replies = tokio::spawn(async move {
        while let Some(frame) = read_frame(&mut server_in).await {
            if due.send((Instant::now() + delay, frame)).is_err() {
                return;
            }
        }
    });
    while let Some((at, frame)) = held.recv().await {
        tokio::time::sleep_until(at).await;
        if client_out.write_all(&frame).await.is_err() {
            break;
        }
    }
    requests.abort();
    replies.abort();
}

/// One whole frame, or `None` at the end of the stream or on a length that is not 9P.
async fn read_frame(from: &mut tokio::net::tcp::OwnedReadHalf) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    from.read_exact(&mut size).await.ok()?;
    let len = u32::from_le_bytes(size) as usize;
    if !(7..=MAX_FRAME).contains(&len) {
        return None;
    }
    let mut frame = vec![0u8; len];
    frame[..4].copy_from_slice(&size);
    from.read_exact(&mut frame[4..]).await.ok()?;
    Some(frame)
}
