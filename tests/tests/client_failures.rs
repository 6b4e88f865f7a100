//! The client facing a scripted server (over the in-process duplex) that misbehaves in
//! each way a broken or hostile server can, plus timeouts, cancellation and
//! connection loss. Every case ends in an error on that request or on the session;
//! none panics or hangs.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use wasm9p_guest_fs::client::{ClientConfig, ConnectError, Fid, Session, CLOSE_DRAIN};
use wasm9p_proto::consts::qid;
use wasm9p_proto::*;
use wasm9p_tests::Conn;

const ASKED: u32 = 64 * 1024;

fn config(timeout: Duration) -> ClientConfig {
    ClientConfig {
        msize: ASKED,
        timeout,
        ..ClientConfig::default()
    }
}

/// Starts a session over a duplex whose other end the test scripts; the script
/// answers Tversion with `grant` and `version`.
async fn handshake(
    grant: u32,
    version: &str,
    cfg: ClientConfig,
) -> (Result<Session, ConnectError>, Conn) {
    let (client_end, server_end) = transport::duplex();
    let mut server = Conn::over(server_end);
    let client = tokio::spawn(Session::over(client_end, cfg));
    let f = server.recv().await.unwrap();
    assert!(matches!(
        f.body,
        Ok(Message::Tversion(Tversion { msize: ASKED, .. }))
    ));
    server
        .send(
            f.tag,
            Rversion {
                msize: grant,
                version: version.into(),
            },
        )
        .await;
    (client.await.unwrap(), server)
}

/// A session and its attached root, with the server side ready for scripting.
async fn attached(timeout: Duration) -> (Session, Fid, Conn) {
    let (session, mut server) = handshake(ASKED, "9P2000.L", config(timeout)).await;
    let session = session.unwrap();
    let s = session.clone();
    let attach = tokio::spawn(async move { s.attach("").await });
    let f = server.recv().await.unwrap();
    assert!(matches!(f.body, Ok(Message::Tattach(_))));
    server
        .send(
            f.tag,
            Rattach {
                qid: Qid {
                    ty: qid::DIR,
                    version: 0,
                    path: 1,
                },
            },
        )
        .await;
    (session, attach.await.unwrap().unwrap(), server)
}

fn raw_frame(ty: u8, tag: u16, body: &[u8]) -> Vec<u8> {
    let mut f = ((7 + body.len()) as u32).to_le_bytes().to_vec();
    f.push(ty);
    f.extend_from_slice(&tag.to_le_bytes());
    f.extend_from_slice(body);
    f
}

#[tokio::test]
async fn version_replies_that_cannot_be_accepted_are_clear_errors() {
    let (r, _s) = handshake(ASKED * 2, "9P2000.L", config(Duration::from_secs(5))).await;
    assert!(
        matches!(r, Err(ConnectError::MsizeTooLarge { granted, asked: ASKED }) if granted == ASKED * 2)
    );
    let (r, _s) = handshake(1024, "9P2000.L", config(Duration::from_secs(5))).await;
    assert!(matches!(r, Err(ConnectError::MsizeTooSmall(1024))));
    let (r, _s) = handshake(ASKED, "unknown", config(Duration::from_secs(5))).await;
    let err = r.unwrap_err();
    assert!(matches!(err, ConnectError::UnknownVersion(_)));
    assert!(err.to_string().contains("not 9P2000.L"), "{err}");
    assert!(!err.should_retry());

    // A server that never answers: the handshake times out instead of hanging.
    let (client_end, _server_end) = transport::duplex();
    let started = Instant::now();
    let r = Session::over(client_end, config(Duration::from_millis(300))).await;
    assert!(matches!(r, Err(ConnectError::Handshake(ref m)) if m.contains("timed out")));
    assert!(started.elapsed() < Duration::from_secs(5));

    // A server that hangs up.
    let (client_end, server_end) = transport::duplex();
    drop(server_end);
    assert!(matches!(
        Session::over(client_end, config(Duration::from_secs(5))).await,
        Err(ConnectError::Handshake(_))
    ));

    // Nobody listening.
    let dir = tempfile::tempdir().unwrap();
    let err = Session::connect(
        &Addr::Unix(dir.path().join("none")),
        config(Duration::from_secs(5)),
    )
    .await
    .unwrap_err();
    assert!(
        err.should_retry() && err.to_string().contains("cannot connect"),
        "{err}"
    );
}

#[tokio::test]
async fn reply_with_unknown_tag_kills_the_session() {
    let (session, root, mut server) = attached(Duration::from_secs(10)).await;
    let call = tokio::spawn(async move { root.getattr().await });
    let f = server.recv().await.unwrap();
    server
        .send(f.tag.wrapping_add(77), Rgetattr::default())
        .await;
    assert_eq!(call.await.unwrap(), Err(Errno::EIO));
    assert!(session.is_dead());
    assert_eq!(
        session.attach("").await.unwrap_err(),
        Errno::EIO,
        "later calls fail at once"
    );
}

#[tokio::test]
async fn wrong_type_bad_count_and_undecodable_bodies_fail_only_that_request() {
    let (session, root, mut server) = attached(Duration::from_secs(10)).await;
    let root = std::sync::Arc::new(root);

    // Wrong reply type.
    let r = root.clone();
    let call = tokio::spawn(async move { r.getattr().await });
    let f = server.recv().await.unwrap();
    server.send(f.tag, Rclunk {}).await;
    assert_eq!(call.await.unwrap(), Err(Errno::EIO));

    // More bytes than asked for.
    let r = root.clone();
    let call = tokio::spawn(async move { r.read(0, 10).await });
    let f = server.recv().await.unwrap();
    server
        .send(
            f.tag,
            Rread {
                data: Data(Bytes::from(vec![1u8; 20])),
            },
        )
        .await;
    assert_eq!(call.await.unwrap(), Err(Errno::EIO));

    // A string that runs past the end of its frame.
    let r = root.clone();
    let call = tokio::spawn(async move { r.readlink().await });
    let f = server.recv().await.unwrap();
    server
        .send_raw(&raw_frame(23, f.tag, &[50, 0, b'a', b'b', b'c']))
        .await;
    assert_eq!(call.await.unwrap(), Err(Errno::EIO));

    // A directory entry that runs past the end of its payload.
    let r = root.clone();
    let call = tokio::spawn(async move { r.readdir(0, 4096).await });
    let f = server.recv().await.unwrap();
    let mut entry = Vec::new();
    let good = DirEntry {
        qid: Qid::default(),
        offset: 1,
        ty: 8,
        name: "name".into(),
    };
    good.encode(&mut entry);
    entry.truncate(entry.len() - 2);
    server
        .send(
            f.tag,
            Rreaddir {
                data: Data(Bytes::from(entry)),
            },
        )
        .await;
    assert_eq!(call.await.unwrap(), Err(Errno::EIO));

    // Rwrite claiming more than was sent.
    let r = root.clone();
    let call = tokio::spawn(async move { r.write(0, Bytes::from_static(b"abc")).await });
    let f = server.recv().await.unwrap();
    server.send(f.tag, Rwrite { count: 4 }).await;
    assert_eq!(call.await.unwrap(), Err(Errno::EIO));

    // Through all of that the session stayed up.
    assert!(!session.is_dead());
    let r = root.clone();
    let call = tokio::spawn(async move { r.getattr().await });
    let f = server.recv().await.unwrap();
    server
        .send(
            f.tag,
            Rgetattr {
                size: 42,
                ..Default::default()
            },
        )
        .await;
    assert_eq!(call.await.unwrap().unwrap().size, 42);
}

#[tokio::test]
async fn frame_over_msize_kills_the_session_without_allocating_it() {
    let (session, root, mut server) = attached(Duration::from_secs(10)).await;
    let call = tokio::spawn(async move { root.getattr().await });
    let f = server.recv().await.unwrap();
    // Announce a 1 GiB frame; the client must refuse it from the length alone.
    let mut head = (1u32 << 30).to_le_bytes().to_vec();
    head.extend_from_slice(&[25, f.tag as u8, (f.tag >> 8) as u8]);
    server.send_raw(&head).await;
    assert_eq!(call.await.unwrap(), Err(Errno::EIO));
    assert!(session.is_dead());
}

#[tokio::test]
async fn an_unanswered_request_times_out_and_is_flushed() {
    let (session, root, mut server) = attached(Duration::from_millis(300)).await;
    let started = Instant::now();
    let call = tokio::spawn(async move { root.getattr().await });
    let f = server.recv().await.unwrap();
    assert_eq!(call.await.unwrap(), Err(Errno::ETIMEDOUT));
    assert!(started.elapsed() < Duration::from_secs(5));
    let flush = server.recv().await.unwrap();
    assert_eq!(flush.body, Ok(Tflush { oldtag: f.tag }.into()));
    assert!(
        !session.is_dead(),
        "a timeout fails the request, not the session"
    );
}

#[tokio::test]
async fn a_dropped_request_is_flushed_and_its_tag_waits_for_rflush() {
    let (session, root, mut server) = attached(Duration::from_secs(10)).await;
    let root = std::sync::Arc::new(root);
    let r = root.clone();
    let call = tokio::spawn(async move { r.getattr().await });
    let first = server.recv().await.unwrap();
    call.abort();
    let flush = server.recv().await.unwrap();
    assert_eq!(flush.body, Ok(Tflush { oldtag: first.tag }.into()));
    // Until Rflush, neither the flushed tag nor the flush's own tag is handed out.
    for _ in 0..20 {
        let r = root.clone();
        let call = tokio::spawn(async move { r.getattr().await });
        let f = server.recv().await.unwrap();
        assert!(
            f.tag != first.tag && f.tag != flush.tag,
            "tag {} reused before Rflush",
            f.tag
        );
        server.send(f.tag, Rgetattr::default()).await;
        call.await.unwrap().unwrap();
    }
    // The server answers the original late, then Rflush: both are absorbed.
    server.send(first.tag, Rgetattr::default()).await;
    server.send(flush.tag, Rflush {}).await;
    // One round trip after Rflush guarantees the client has read it (replies are
    // processed in order); then several requests at once draw on the freed tags.
    let r = root.clone();
    let call = tokio::spawn(async move { r.getattr().await });
    let f = server.recv().await.unwrap();
    server.send(f.tag, Rgetattr::default()).await;
    call.await.unwrap().unwrap();
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let r = root.clone();
            tokio::spawn(async move { r.getattr().await })
        })
        .collect();
    let mut seen = HashSet::new();
    for _ in 0..4 {
        let f = server.recv().await.unwrap();
        seen.insert(f.tag);
        server.send(f.tag, Rgetattr::default()).await;
    }
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert!(
        seen.contains(&first.tag),
        "the flushed tag is free again after Rflush: {seen:?}"
    );
    assert!(!session.is_dead());
}

#[tokio::test]
async fn connection_loss_fails_every_pending_request_at_once() {
    let (session, root, mut server) = attached(Duration::from_secs(30)).await;
    let root = std::sync::Arc::new(root);
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let r = root.clone();
            tokio::spawn(async move { r.getattr().await })
        })
        .collect();
    for _ in 0..10 {
        server.recv().await.unwrap();
    }
    let started = Instant::now();
    drop(server);
    for call in calls {
        assert_eq!(call.await.unwrap(), Err(Errno::EIO));
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "failed at once, not by timeout"
    );
    assert!(session.is_dead());
    assert_eq!(root.getattr().await, Err(Errno::EIO));
}

#[tokio::test]
async fn large_reads_keep_at_most_io_depth_requests_in_flight() {
    let (session, mut server) = handshake(
        8192,
        "9P2000.L",
        ClientConfig {
            io_depth: 3,
            ..config(Duration::from_secs(10))
        },
    )
    .await;
    let session = session.unwrap();
    let s = session.clone();
    let attach = tokio::spawn(async move { s.attach("").await });
    let f = server.recv().await.unwrap();
    server
        .send(
            f.tag,
            Rattach {
                qid: Qid::default(),
            },
        )
        .await;
    let root = attach.await.unwrap().unwrap();
    let chunk = (8192 - consts::IOHDRSZ) as usize;
    let total = chunk * 10;
    let read = tokio::spawn(async move { root.read_at(0, total).await });
    let mut outstanding: Vec<Frame> = Vec::new();
    let mut max_seen = 0;
    let mut served = 0;
    while served < 10 {
        // Take whatever the client has sent so far.
        while let Some(f) = server.recv_for(Duration::from_millis(50)).await {
            outstanding.push(f);
        }
        max_seen = max_seen.max(outstanding.len());
        let f = outstanding.remove(0);
        let Ok(Message::Tread(t)) = f.body else {
            panic!("expected Tread")
        };
        let data: Vec<u8> = (0..t.count)
            .map(|i| ((t.offset + i as u64) % 251) as u8)
            .collect();
        server
            .send(
                f.tag,
                Rread {
                    data: Data(Bytes::from(data)),
                },
            )
            .await;
        served += 1;
    }
    let bytes = read.await.unwrap().unwrap();
    assert_eq!(bytes.len(), total);
    assert!(
        bytes.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8),
        "assembled in order"
    );
    assert_eq!(max_seen, 3, "io_depth bounds the reads in flight");
}

/// A request answered but never looked at (a pipelined read past the end of file) is
/// dropped after its tag went to someone else: that someone must not be flushed. (Two
/// guests reading at once on one mount hit this: the other guest's walk was flushed,
/// and its fid number freed while the server still held it.)
#[tokio::test]
async fn dropping_an_answered_request_leaves_the_next_user_of_its_tag_alone() {
    let (session, root, mut server) = attached(Duration::from_secs(10)).await;
    let root = std::sync::Arc::new(root);
    let getattr = |root: &std::sync::Arc<Fid>| {
        let r = root.clone();
        tokio::spawn(async move { r.getattr().await })
    };
    let chunk = (ASKED - consts::IOHDRSZ) as usize;
    let r = root.clone();
    let read = tokio::spawn(async move { r.read_at(0, 3 * chunk).await });
    let mut reads = Vec::new();
    for _ in 0..3 {
        let f = server.recv().await.unwrap();
        assert!(matches!(f.body, Ok(Message::Tread(_))));
        reads.push(f.tag);
    }
    // Answer the 2nd and 3rd reads, then a probe: once the probe is answered, the
    // client has taken in both replies (it reads in order) and freed their tags.
    let probe = getattr(&root);
    let p = server.recv().await.unwrap();
    let full = Rread {
        data: Data(Bytes::from(vec![7u8; chunk])),
    };
    server.send(reads[1], full.clone()).await;
    server.send(reads[2], full).await;
    server.send(p.tag, Rgetattr::default()).await;
    probe.await.unwrap().unwrap();
    // New requests draw those tags (and the probe's) again.
    let mut waiting = Vec::new();
    let mut reused = HashSet::new();
    for _ in 0..3 {
        let call = getattr(&root);
        let f = server.recv().await.unwrap();
        assert!(matches!(f.body, Ok(Message::Tgetattr(_))), "{:?}", f.body);
        if reads.contains(&f.tag) {
            reused.insert(f.tag);
        }
        waiting.push((call, f.tag));
    }
    assert_eq!(reused.len(), 2, "the answered reads' tags are in use again");
    // The first read comes back short (end of file): the read ends, dropping the two
    // answered calls behind it.
    server
        .send(
            reads[0],
            Rread {
                data: Data(Bytes::from_static(b"short")),
            },
        )
        .await;
    assert_eq!(read.await.unwrap().unwrap().len(), 5);
    for (call, tag) in waiting {
        server.send(tag, Rgetattr::default()).await;
        assert_eq!(call.await.unwrap().map(drop), Ok(()), "tag {tag}");
    }
    // Nothing was flushed: the next frame the server sees is the next request.
    let next = getattr(&root);
    let f = server.recv().await.unwrap();
    assert!(matches!(f.body, Ok(Message::Tgetattr(_))), "{:?}", f.body);
    server.send(f.tag, Rgetattr::default()).await;
    next.await.unwrap().unwrap();
    assert!(!session.is_dead());
}

/// A closing session (its owner is shutting down) does not clunk fids one by one and
/// takes the end of the connection as expected; calls still work until then.
#[tokio::test]
async fn a_closing_session_drops_fids_without_clunks_and_still_answers() {
    let (session, root, mut server) = attached(Duration::from_secs(10)).await;
    let walk = tokio::spawn(async move {
        let fid = root.clone_fid().await;
        (root, fid)
    });
    let f = server.recv().await.unwrap();
    assert!(matches!(f.body, Ok(Message::Twalk(_))));
    server.send(f.tag, Rwalk { wqids: vec![] }).await;
    let (root, fid) = walk.await.unwrap();
    let fid = fid.unwrap();
    session.close();
    let live = session.live_fids();
    drop(fid);
    assert_eq!(session.live_fids(), live - 1, "the number is free at once");
    let call = tokio::spawn(async move { root.getattr().await });
    let f = server.recv().await.unwrap();
    assert!(
        matches!(f.body, Ok(Message::Tgetattr(_))),
        "no Tclunk went out: {:?}",
        f.body
    );
    server.send(f.tag, Rgetattr::default()).await;
    call.await.unwrap().unwrap();
}

/// Closing waits for the Tclunks already on their way to be answered, so the
/// connection does not close under a reply (a server writing it gets EPIPE, and diod
/// 1.0.24 started by hand dies of the SIGPIPE); a server that never answers holds the
/// close up for `CLOSE_DRAIN` at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_waits_for_the_clunks_on_their_way_but_not_for_ever() {
    for answered in [true, false] {
        let (session, root, mut server) = attached(Duration::from_secs(10)).await;
        let walk = tokio::spawn(async move { (root.clone_fid().await, root) });
        let f = server.recv().await.unwrap();
        assert!(matches!(f.body, Ok(Message::Twalk(_))), "{:?}", f.body);
        server.send(f.tag, Rwalk { wqids: vec![] }).await;
        let (fid, _root) = walk.await.unwrap();
        drop(fid.unwrap());
        let clunk = server.recv().await.unwrap();
        assert!(
            matches!(clunk.body, Ok(Message::Tclunk(_))),
            "{:?}",
            clunk.body
        );

        let closing = tokio::task::spawn_blocking(move || session.close());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !closing.is_finished(),
            "close returned with a Tclunk unanswered"
        );
        if answered {
            server.send(clunk.tag, Rclunk {}).await;
        }
        tokio::time::timeout(CLOSE_DRAIN * 10, closing)
            .await
            .unwrap_or_else(|_| panic!("close hung (the clunk answered: {answered})"))
            .unwrap();
    }
}
