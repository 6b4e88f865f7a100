//! `delay-proxy` is a link's latency, not a queue: every reply reaches the client at
//! least the delay after its request left, intact and in order, and requests sent
//! together are answered together (their replies are held side by side). It counts the
//! round trips a client waited for, requests sent together as one and Tclunks as none.

use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use wasm9p_guest_fs::client::{ClientConfig, Session};
use wasm9p_proto::consts::{NOFID, NOTAG};
use wasm9p_proto::{encode_frame, Message, Tattach, Tclunk, Tflush, Tgetattr, Tversion, Twalk};
use wasm9p_tests::{TestServer, Tree};

const PROXY: &str = env!("CARGO_BIN_EXE_delay-proxy");

/// The proxy in front of `upstream`, holding replies `micros`: (its process, address).
fn proxy(upstream: &wasm9p_proto::Addr, micros: u64) -> (std::process::Child, wasm9p_proto::Addr) {
    let mut child = Command::new(PROXY)
        .arg(upstream.to_string())
        .arg(micros.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line.trim().parse().unwrap())
}

#[tokio::test]
async fn replies_come_intact_and_no_sooner_than_the_delay_and_together_when_sent_together() {
    let dir = Tree::build(&[Tree::file("a", "content of a")]);
    let server = TestServer::tcp(dir.path());
    const DELAY: Duration = Duration::from_millis(400);
    let (mut child, addr) = proxy(&server.addr, DELAY.as_micros() as u64);
    let started = Instant::now();
    let session = Session::connect(&addr, ClientConfig::default())
        .await
        .unwrap();
    let root = session.attach("").await.unwrap();
    // Tversion and Tattach: one delay each, one after the other.
    assert!(started.elapsed() >= 2 * DELAY);
    let file = root.walk(&["a"]).await.unwrap().fid;
    // Eight Tgetattrs at once: each answered right, none sooner than the delay.
    let file = std::sync::Arc::new(file);
    let sent = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let file = file.clone();
        set.spawn(async move { file.getattr().await });
    }
    while let Some(answer) = set.join_next().await {
        assert_eq!(answer.unwrap().unwrap().size, 12);
    }
    let took = sent.elapsed();
    assert!(took >= DELAY, "{took:?}");
    // Held side by side, not one after another (eight delays would be 3.2 s); bounded
    // loosely, so that only a machine stalled for seconds could miss it.
    assert!(
        took < 5 * DELAY,
        "replies queued behind each other: {took:?}"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends `requests` (tag, message) in one write, then reads one reply for each: the
/// reply types, in the order they came.
fn exchange(link: &mut TcpStream, requests: &[(u16, Message)]) -> Vec<u8> {
    let mut frames = BytesMut::new();
    for (tag, msg) in requests {
        encode_frame(*tag, msg, &mut frames);
    }
    link.write_all(&frames).unwrap();
    (0..requests.len())
        .map(|_| {
            let mut size = [0u8; 4];
            link.read_exact(&mut size).unwrap();
            let mut rest = vec![0u8; u32::from_le_bytes(size) as usize - 4];
            link.read_exact(&mut rest).unwrap();
            rest[0]
        })
        .collect()
}

#[test]
fn a_round_trip_is_a_wait_for_a_reply_requests_sent_together_share_one_clunks_and_flushes_none() {
    let dir = Tree::build(&[Tree::file("a", "content of a")]);
    let server = TestServer::tcp(dir.path());
    let (mut child, addr) = proxy(&server.addr, 100_000);
    let wasm9p_proto::Addr::Tcp { host, port } = addr else {
        panic!("{addr}")
    };
    let mut link = TcpStream::connect((host.as_str(), port)).unwrap();
    let getattr = |fid| {
        Message::from(Tgetattr {
            fid,
            request_mask: 0x7ff,
        })
    };
    let replies = [
        // 1: the version.
        exchange(
            &mut link,
            &[(
                NOTAG,
                Tversion {
                    msize: 8192,
                    version: "9P2000.L".into(),
                }
                .into(),
            )],
        ),
        // 2: the attach.
        exchange(
            &mut link,
            &[(
                1,
                Tattach {
                    fid: 0,
                    afid: NOFID,
                    uname: String::new(),
                    aname: String::new(),
                    n_uname: 0,
                }
                .into(),
            )],
        ),
        // 3: four requests sent together.
        exchange(
            &mut link,
            &[
                (1, getattr(0)),
                (2, getattr(0)),
                (3, getattr(0)),
                (
                    4,
                    Twalk {
                        fid: 0,
                        newfid: 1,
                        wnames: vec!["a".into()],
                    }
                    .into(),
                ),
            ],
        ),
        // 4: a request sent while only a clunk is on the wire waits on its own.
        exchange(&mut link, &[(1, Tclunk { fid: 1 }.into()), (2, getattr(0))]),
        // None: a clunk alone, a flush alone.
        exchange(&mut link, &[(1, Tclunk { fid: 0 }.into())]),
        exchange(&mut link, &[(1, Tflush { oldtag: 7 }.into())]),
    ];
    let lerror = 7;
    assert!(
        replies.iter().flatten().all(|&ty| ty != lerror),
        "{replies:?}"
    );
    drop(link);
    let mut line = String::new();
    std::io::BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(
        line.trim(),
        "delay-proxy: connection closed: 10 requests, 4 round trips"
    );
    let _ = child.kill();
    let _ = child.wait();
}
