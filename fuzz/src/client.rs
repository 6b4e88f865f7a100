//! The client against a hostile server: the input is the server's side of a session.
//!
//! A scripted server answers each request the client sends with the next *chunk* of
//! the input: a control byte, a 16-bit length, and that many bytes, sent as they are or
//! patched to carry the request's tag (bit 0x80), the matching reply type (0x40) and a
//! size field equal to the chunk's length (0x10); with bit 0x20 the chunk is sent
//! without waiting for a request (an unsolicited frame). The first chunk answers
//! Tversion, so msize games are in scope. When the script ends the server hangs up.
//!
//! Meanwhile the client runs a fixed workload (attach, walk, getattr, lopen, a
//! pipelined read, readdir, readlink, a pipelined write, xattr, statfs, clunk) with a
//! 1 s request timeout on a paused clock. It must never panic (in any task), finish
//! (within 10 minutes of virtual time), and return no more than it asked for.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasm9p_guest_fs::client::{ClientConfig, Session};
use wasm9p_proto::transport::{duplex, BoxStream};
use wasm9p_proto::{encode_frame, FrameDecoder, Message};

/// Panics seen, in any thread.
static PANICS: AtomicUsize = AtomicUsize::new(0);

const PATCH_TAG: u8 = 0x80;
const PATCH_TYPE: u8 = 0x40;
const UNSOLICITED: u8 = 0x20;
const PATCH_SIZE: u8 = 0x10;

/// Runs the workload against the script `data`; returns how many of its calls
/// succeeded.
pub fn replies(data: &[u8]) -> usize {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let script = data.to_vec();
    let ok = rt.block_on(async move {
        let (client_end, server_end) = duplex();
        let server = tokio::spawn(scripted_server(server_end, script));
        let config = ClientConfig {
            msize: 8192,
            timeout: Duration::from_secs(1),
            max_inflight: 8,
            io_depth: 4,
            ..ClientConfig::default()
        };
        let finished = tokio::time::timeout(Duration::from_secs(600), async {
            match Session::over(client_end, config).await {
                Ok(session) => workload(&session).await,
                Err(_) => 0,
            }
        })
        .await;
        server.abort();
        finished.expect("the client hung")
    });
    drop(rt);
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "the client panicked");
    ok
}

/// Runs the workload; returns how many of its 13 calls succeeded.
async fn workload(session: &Session) -> usize {
    let mut ok = 0;
    let mut count = |r: bool| ok += usize::from(r);
    let Ok(root) = session.attach("").await else {
        return 0;
    };
    count(true);
    count(root.getattr().await.is_ok());
    let Ok(walk) = root.walk(&["dir", "file"]).await else {
        return ok;
    };
    count(true);
    let file = walk.fid;
    count(file.getattr().await.is_ok());
    count(file.lopen(wasm9p_proto::consts::open::RDWR).await.is_ok());
    if let Ok(bytes) = file.read_at(0, 20_000).await {
        assert!(bytes.len() <= 20_000, "read returned more than asked");
        count(true);
    }
    if let Ok(bytes) = file.read(5, 100).await {
        assert!(bytes.len() <= 100, "read returned more than asked");
        count(true);
    }
    count(
        file.write_all_at(0, Bytes::from(vec![7u8; 20_000]))
            .await
            .is_ok(),
    );
    count(root.readdir_all().await.is_ok());
    count(file.readlink().await.is_ok());
    count(file.get_xattr("user.x").await.is_ok());
    count(root.statfs().await.is_ok());
    count(file.clunk().await.is_ok());
    ok
}

/// Answers requests from `stream` with the chunks of `script`, then hangs up.
async fn scripted_server(mut stream: BoxStream, script: Vec<u8>) {
    let mut decoder = FrameDecoder::new(1 << 20);
    let mut buf = BytesMut::new();
    let mut rest = &script[..];
    while rest.len() >= 3 {
        let ctl = rest[0];
        let len = usize::from(u16::from_le_bytes([rest[1], rest[2]])).min(rest.len() - 3);
        let mut chunk = rest[3..3 + len].to_vec();
        rest = &rest[3 + len..];
        if ctl & UNSOLICITED == 0 {
            // Wait for the next request.
            let request = loop {
                match decoder.decode(&mut buf) {
                    Ok(Some(frame)) => break frame,
                    Ok(None) => {}
                    Err(_) => return,
                }
                buf.reserve(8192);
                match stream.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            };
            if ctl & PATCH_TAG != 0 && chunk.len() >= 7 {
                chunk[5..7].copy_from_slice(&request.tag.to_le_bytes());
            }
            if ctl & PATCH_TYPE != 0 && chunk.len() >= 5 {
                chunk[4] = request.ty.wrapping_add(1);
            }
        }
        if ctl & PATCH_SIZE != 0 && chunk.len() >= 4 {
            let size = chunk.len() as u32;
            chunk[..4].copy_from_slice(&size.to_le_bytes());
        }
        if stream.write_all(&chunk).await.is_err() {
            return;
        }
    }
}

/// One chunk of a script: `msg` with whatever tag, patched to the request's tag, type
/// and its own size.
pub fn chunk(msg: &Message) -> Vec<u8> {
    let mut frame = BytesMut::new();
    encode_frame(0, msg, &mut frame);
    let mut out = vec![PATCH_TAG | PATCH_TYPE | PATCH_SIZE];
    out.extend_from_slice(&(frame.len() as u16).to_le_bytes());
    out.extend_from_slice(&frame);
    out
}

/// Seed scripts: a well-behaved server for the whole workload, and variants (errors,
/// short reads, a smaller msize) that reach the client's other paths.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    use wasm9p_proto::*;
    let qid = |path| Qid {
        ty: 0,
        version: 0,
        path,
    };
    let dir_qid = Qid {
        ty: 0x80,
        version: 0,
        path: 1,
    };
    let version = |msize| {
        Message::from(Rversion {
            msize,
            version: "9P2000.L".into(),
        })
    };
    let getattr = |q| {
        Message::from(Rgetattr {
            qid: q,
            mode: 0o100644,
            size: 30_000,
            ..Default::default()
        })
    };
    let data = |n: usize| {
        Message::from(Rread {
            data: Data::from(vec![b'x'; n]),
        })
    };
    // The workload's pipelined read and write of 20,000 bytes, cut at msize - 24.
    let pieces = |msize: u32| {
        let chunk = msize as usize - 24;
        (0..20_000usize.div_ceil(chunk))
            .map(|i| chunk.min(20_000 - i * chunk))
            .collect::<Vec<usize>>()
    };
    // `last`: how much of the last read piece the file has.
    let happy = |msize: u32, last: Option<usize>| -> Vec<Message> {
        let mut msgs = vec![
            version(msize),
            Rattach { qid: dir_qid }.into(),
            getattr(dir_qid),
            Rwalk {
                wqids: vec![dir_qid, qid(2)],
            }
            .into(),
            getattr(qid(2)),
            Rlopen {
                qid: qid(2),
                iounit: 0,
            }
            .into(),
        ];
        let reads = pieces(msize);
        let n = reads.len();
        msgs.extend(
            reads
                .iter()
                .enumerate()
                .map(|(i, &len)| data(if i == n - 1 { last.unwrap_or(len) } else { len })),
        );
        msgs.push(data(100));
        msgs.extend(
            pieces(msize)
                .into_iter()
                .map(|len| Message::from(Rwrite { count: len as u32 })),
        );
        let entry = DirEntry {
            qid: qid(2),
            offset: 1,
            ty: 0,
            name: "file".into(),
        };
        let mut listing = DirEntryPacker::new(4096);
        listing.push(&entry);
        msgs.push(
            Rreaddir {
                data: Data(listing.finish()),
            }
            .into(),
        );
        msgs.push(
            Rreaddir {
                data: Data::from(Vec::new()),
            }
            .into(),
        );
        msgs.push(
            Rreadlink {
                target: "../elsewhere".into(),
            }
            .into(),
        );
        msgs.push(Rxattrwalk { size: 5 }.into());
        msgs.push(data(5));
        msgs.push(Rstatfs::default().into());
        // The xattr fid's clunk (sent by a task once the statfs waits), then the file's.
        msgs.push(Rclunk {}.into());
        msgs.push(Rclunk {}.into());
        msgs
    };
    let script = |msgs: Vec<Message>| msgs.iter().flat_map(chunk).collect::<Vec<u8>>();
    let mut errors = happy(8192, None);
    for i in [3, 5, 8] {
        errors[i] = Rlerror { ecode: 2 }.into();
    }
    vec![
        ("happy", script(happy(8192, None))),
        ("short-file", script(happy(8192, Some(100)))),
        ("small-msize", script(happy(4096, None))),
        ("errors", script(errors)),
    ]
}
