//! One client session shared by many tasks, against real servers: content stays right,
//! fids come back, and a server dying mid-run fails every pending call at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use wasm9p_guest_fs::client::{ClientConfig, Session};
use wasm9p_proto::consts::open;
use wasm9p_proto::{Addr, Errno};
use wasm9p_tests::{Diod, TestServer, Tree};

fn shared_tree() -> tempfile::TempDir {
    Tree::build(&[
        Tree::Dir(
            "inc",
            (0..8)
                .map(|i| {
                    Tree::File(
                        ["a.h", "b.h", "c.h", "d.h", "e.h", "f.h", "g.h", "h.h"][i],
                        vec![b'a' + i as u8; 1000 + i * 517],
                    )
                })
                .collect(),
        ),
        Tree::File(
            "big.bin",
            (0..3_000_000u32).map(|i| (i % 253) as u8).collect(),
        ),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_tasks_hammer_one_session() {
    let dir = shared_tree();
    let server = TestServer::tcp(dir.path());
    let cfg = ClientConfig {
        msize: 16 * 1024,
        ..ClientConfig::default()
    };
    let session = Session::connect(&server.addr, cfg).await.unwrap();
    let root = Arc::new(session.attach("").await.unwrap());
    let mut tasks = Vec::new();
    for t in 0..32u32 {
        let root = root.clone();
        let host = dir.path().to_path_buf();
        tasks.push(tokio::spawn(async move {
            let mut mine = root.clone_fid().await.unwrap();
            mine.lcreate(&format!("task{t}"), open::RDWR | open::CREAT, 0o644, 0)
                .await
                .unwrap();
            let mut expected: Vec<u8> = Vec::new();
            for round in 0..25u32 {
                // Write a chunk of a size that varies, sometimes past one msize.
                let len = 100 + ((t * 7919 + round * 104_729) % 40_000) as usize;
                let chunk: Vec<u8> = (0..len).map(|i| (i as u32 ^ t ^ round) as u8).collect();
                mine.write_all_at(expected.len() as u64, Bytes::from(chunk.clone()))
                    .await
                    .unwrap();
                expected.extend_from_slice(&chunk);
                let back = mine.read_at(0, expected.len() + 10).await.unwrap();
                assert_eq!(back.len(), expected.len(), "task {t} round {round}");
                assert!(back == expected, "task {t} round {round}: content differs");
                // Shared headers: walk, getattr, read.
                let name = ["a.h", "b.h", "c.h", "d.h", "e.h", "f.h", "g.h", "h.h"]
                    [((t + round) % 8) as usize];
                let w = root.walk(&["inc", name]).await.unwrap();
                let size = w.fid.getattr().await.unwrap().size as usize;
                w.fid.lopen(open::RDONLY).await.unwrap();
                let data = w.fid.read_at(0, size).await.unwrap();
                assert_eq!(data, std::fs::read(host.join("inc").join(name)).unwrap());
                // A missing header, as a compiler probes for.
                let e = root.walk(&["inc", "missing.h"]).await.unwrap_err();
                assert_eq!((e.index, e.errno), (1, Errno::ENOENT));
            }
            mine.clunk().await.unwrap();
            expected
        }));
    }
    for (t, task) in tasks.into_iter().enumerate() {
        // Bounded: a deadlock must fail the test, not hang CI.
        let expected = tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("tasks finish")
            .unwrap();
        assert_eq!(
            std::fs::read(dir.path().join(format!("task{t}"))).unwrap(),
            expected
        );
    }
    // Every fid but the root is back once the background clunks land.
    let deadline = Instant::now() + Duration::from_secs(10);
    while session.live_fids() != 1 {
        assert!(
            Instant::now() < deadline,
            "{} fids live",
            session.live_fids()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(session.counts().total() > 32 * 25 * 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_server_mid_run_fails_every_pending_call_with_eio() {
    let dir = shared_tree();
    let mut diod = Diod::start(dir.path());
    let addr = Addr::Tcp {
        host: "127.0.0.1".into(),
        port: diod.port,
    };
    let cfg = ClientConfig {
        timeout: Duration::from_secs(30),
        ..ClientConfig::default()
    };
    let session = Session::connect(&addr, cfg).await.unwrap();
    let root = Arc::new(session.attach(dir.path().to_str().unwrap()).await.unwrap());
    let file = Arc::new(root.walk(&["big.bin"]).await.unwrap().fid);
    file.lopen(open::RDONLY).await.unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let file = file.clone();
            tokio::spawn(async move {
                loop {
                    if let Err(e) = file.read_at(0, 3_000_000).await {
                        return e;
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = Instant::now();
    diod.kill();
    for task in tasks {
        assert_eq!(task.await.unwrap(), Errno::EIO);
    }
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "pending calls failed at once, took {:?}",
        killed.elapsed()
    );
    assert!(session.is_dead());
    assert_eq!(root.getattr().await, Err(Errno::EIO));
}
