//! The product's client (`wasm9p_guest_fs::client::Session`) against our server and
//! diod: getattr round trips with 1 and 32 in flight, and sequential reads through
//! `read_at` (split at msize, `io_depth` requests in flight).

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasm9p_guest_fs::client::{ClientConfig, Session};
use wasm9p_proto::consts::open;
use wasm9p_proto::Addr;

/// One row of the client table.
pub struct ClientRow {
    pub msize: u32,
    pub getattr1: f64,
    pub getattr32: f64,
    pub read_mbps: f64,
}

async fn getattr_rate(session: &Session, aname: &str, tasks: usize, duration: Duration) -> f64 {
    let root = Arc::new(session.attach(aname).await.unwrap());
    let file = Arc::new(root.walk(&["dir00", "file00.h"]).await.unwrap().fid);
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let file = file.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while start.elapsed() < duration {
                    file.getattr().await.unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut total = 0;
    for h in handles {
        total += h.await.unwrap();
    }
    total as f64 / start.elapsed().as_secs_f64()
}

async fn read_rate(session: &Session, aname: &str, size: usize) -> f64 {
    let root = session.attach(aname).await.unwrap();
    let file = root.walk(&["big.bin"]).await.unwrap().fid;
    file.lopen(open::RDONLY).await.unwrap();
    let step = 8 << 20;
    let start = Instant::now();
    let mut got = 0;
    while got < size {
        let chunk = file.read_at(got as u64, step).await.unwrap();
        assert!(!chunk.is_empty());
        got += chunk.len();
    }
    got as f64 / (1 << 20) as f64 / start.elapsed().as_secs_f64()
}

/// Measures one server.
pub async fn measure(
    addr: &Addr,
    aname: &str,
    msize: u32,
    big: usize,
    duration: Duration,
) -> ClientRow {
    let config = ClientConfig {
        msize,
        max_inflight: 64,
        io_depth: 4,
        ..ClientConfig::default()
    };
    let session = Session::connect(addr, config).await.unwrap();
    read_rate(&session, aname, big).await; // warm-up
    ClientRow {
        msize: session.msize(),
        getattr1: getattr_rate(&session, aname, 1, duration).await,
        getattr32: getattr_rate(&session, aname, 32, duration).await,
        read_mbps: read_rate(&session, aname, big).await,
    }
}
