//! `delay-proxy` is a link's latency, not a queue: every reply reaches the client at
//! least the delay after its request left, intact and in order, and requests sent
//! together are answered together (their replies are held side by side).

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wasm9p_guest_fs::client::{ClientConfig, Session};
use wasm9p_tests::{TestServer, Tree};

const PROXY: &str = env!("CARGO_BIN_EXE_delay-proxy");

/// The proxy in front of `upstream`, holding replies `micros`: (its process, address).
fn proxy(upstream: &wasm9p_proto::Addr, micros: u64) -> (std::process::Child, wasm9p_proto::Addr) {
    let mut child = Command::new(PROXY)
        .arg(upstream.to_string())
        .arg(micros.to_string())
        .stdout(Stdio::piped())
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
