//! The session: version and msize, flush, malformed and oversized frames, and the
//! per-connection bounds.

use super::*;

#[tokio::test]
async fn version_negotiates_msize_and_rejects_unknown_dialects() {
    let dir = fixture();
    let server = TestServer::tcp(dir.path());
    let mut c = Conn::connect(&server.addr).await;
    assert_eq!(c.version(8192).await.msize, 8192);
    assert_eq!(c.version(64 << 20).await.msize, consts::DEFAULT_MSIZE);
    c.send(
        consts::NOTAG,
        Tversion {
            msize: 8192,
            version: "9P2000.u".into(),
        },
    )
    .await;
    let r = expect_reply!(
        c.recv().await.unwrap().body.map_err(|_| Errno::EIO),
        Rversion
    );
    assert_eq!(r.version, "unknown");
    // Without a successful version nothing else is served.
    assert_eq!(c.attach(0, "").await, Err(Errno::EPROTO));
    c.send(
        consts::NOTAG,
        Tversion {
            msize: 100,
            version: "9P2000.L".into(),
        },
    )
    .await;
    assert!(matches!(
        c.recv().await.unwrap().body,
        Ok(Message::Rlerror(_))
    ));
}

#[tokio::test]
async fn tversion_resets_the_session_fids() {
    let dir = fixture();
    let server = TestServer::tcp(dir.path());
    let (mut c, _) = Conn::attached(&server.addr, MSIZE, "").await;
    c.walk(0, 1, "sub").await.unwrap();
    c.version(MSIZE).await;
    assert_eq!(c.getattr(1).await, Err(Errno::EBADF));
}

#[tokio::test]
async fn flush_answers_for_finished_unknown_and_inflight_requests() {
    let dir = Tree::build(&[Tree::File("big", vec![7u8; 4 << 20])]);
    let server = TestServer::tcp(dir.path());
    let (mut c, _) = Conn::attached(&server.addr, consts::DEFAULT_MSIZE, "").await;
    // Flush of a tag nobody used.
    c.send(9, Tflush { oldtag: 1234 }).await;
    let f = c.recv().await.unwrap();
    assert_eq!((f.tag, f.body), (9, Ok(Rflush {}.into())));
    // Several reads in flight, each flushed right after it is sent: every flush is
    // answered, and a read's reply (if it comes) always comes before its Rflush.
    c.walk(0, 1, "big").await.unwrap();
    c.lopen(1, open::RDONLY).await.unwrap();
    for i in 0..8u16 {
        c.send(
            100 + i,
            Tread {
                fid: 1,
                offset: i as u64 * 400_000,
                count: 400_000,
            },
        )
        .await;
        c.send(200 + i, Tflush { oldtag: 100 + i }).await;
    }
    let mut flushed = std::collections::HashSet::new();
    let mut replied = std::collections::HashSet::new();
    while flushed.len() < 8 {
        let f = c.recv().await.unwrap();
        match f.body.unwrap() {
            Message::Rflush(_) => {
                flushed.insert(f.tag - 200);
            }
            Message::Rread(_) => {
                assert!(!flushed.contains(&(f.tag - 100)), "reply after its Rflush");
                replied.insert(f.tag - 100);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn malformed_frames_get_errors_and_oversized_frames_close_only_that_connection() {
    let dir = fixture();
    let server = TestServer::tcp(dir.path());
    let (mut c, _) = Conn::attached(&server.addr, 8192, "").await;
    // A Twalk whose string runs past the frame: Rlerror for that tag, connection lives.
    c.send_raw(&[17, 0, 0, 0, 110, 5, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0])
        .await;
    assert_eq!(c.recv_error().await, (5, Errno::EINVAL));
    // An unknown message type: EOPNOTSUPP.
    c.send_raw(&[7, 0, 0, 0, 250, 6, 0]).await;
    assert_eq!(c.recv_error().await, (6, Errno::EOPNOTSUPP));
    // A reply type sent as a request: EINVAL.
    c.send(7, Rclunk {}).await;
    assert_eq!(c.recv_error().await.1, Errno::EINVAL);
    assert!(c.getattr(0).await.is_ok(), "connection still serves");
    // A frame over the negotiated msize: that connection is closed...
    c.send_raw(&(1u32 << 30).to_le_bytes()).await;
    c.send_raw(&[120, 1, 0]).await;
    assert!(c.recv().await.is_none(), "connection closed");
    // ...and the server still serves others.
    let (mut d, _) = Conn::attached(&server.addr, 8192, "").await;
    assert_eq!(d.cat(1, "hello.txt").await.unwrap(), b"hello, world\n");
}

#[tokio::test]
async fn fid_table_is_bounded_per_connection() {
    let dir = fixture();
    let server = TestServer::tcp(dir.path());
    let (mut c, _) = Conn::attached(&server.addr, MSIZE, "").await;
    let max = fill_the_fid_table(&mut c).await;
    assert_eq!(c.walk(0, max, "").await, Err(Errno::EMFILE));
    c.clunk(1).await.unwrap();
    c.walk(0, max, "").await.unwrap();
}

#[tokio::test]
async fn many_connections_at_once() {
    let dir = fixture();
    let server = TestServer::tcp(dir.path());
    let mut tasks = Vec::new();
    for i in 0..24u32 {
        let addr = server.addr.clone();
        tasks.push(tokio::spawn(async move {
            let (mut c, _) = Conn::attached(&addr, MSIZE, "").await;
            for _ in 0..20 {
                assert_eq!(c.cat(1 + i, "sub/inner.txt").await.unwrap(), b"inner");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn pending_xattr_values_are_bounded_per_connection() {
    let dir = fixture();
    let (_s, mut c) = session(dir.path()).await;
    let budget = 1 << 20;
    let each = 64 * 1024u64;
    let fits = (budget / each as usize) as u32;
    for fid in 1..=fits + 1 {
        c.walk(0, fid, "hello.txt").await.unwrap();
        let create = Txattrcreate {
            fid,
            name: "user.big".into(),
            attr_size: each,
            flags: 0,
        };
        let r = c.rpc(create).await;
        if fid <= fits {
            expect_reply!(r, Rxattrcreate);
        } else {
            assert_eq!(r, Err(Errno::ENOSPC), "past the connection's budget");
        }
    }
    // Clunking an unfinished one (its value never written: EINVAL) frees its share.
    assert_eq!(c.clunk(1).await, Err(Errno::EINVAL));
    c.walk(0, 1, "hello.txt").await.unwrap();
    let again = Txattrcreate {
        fid: 1,
        name: "user.big".into(),
        attr_size: each,
        flags: 0,
    };
    expect_reply!(c.rpc(again).await, Rxattrcreate);
}

#[tokio::test]
async fn rflush_never_overtakes_the_reply_it_flushes() {
    // Small reads finish fast: the race between a request's reply still queued for
    // writing and the Rflush that follows it is hit often here.
    let dir = Tree::build(&[Tree::File("f", vec![1u8; 4096])]);
    let server = TestServer::tcp(dir.path());
    let (mut c, _) = Conn::attached(&server.addr, MSIZE, "").await;
    c.walk(0, 1, "f").await.unwrap();
    c.lopen(1, open::RDONLY).await.unwrap();
    for round in 0..200u16 {
        for i in 0..50u16 {
            c.send(
                i,
                Tread {
                    fid: 1,
                    offset: 0,
                    count: 16,
                },
            )
            .await;
            c.send(1000 + i, Tflush { oldtag: i }).await;
        }
        let mut flushed = std::collections::HashSet::new();
        while flushed.len() < 50 {
            let f = c.recv().await.unwrap();
            match f.body.unwrap() {
                Message::Rflush(_) => {
                    flushed.insert(f.tag - 1000);
                }
                Message::Rread(_) => {
                    assert!(
                        !flushed.contains(&f.tag),
                        "round {round}: Rread {} after its Rflush",
                        f.tag
                    );
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        // Tags may be reused now; make sure no late reply is still on its way.
        assert!(c.getattr(1).await.is_ok());
    }
}
