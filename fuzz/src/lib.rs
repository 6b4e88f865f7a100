//! Fuzz-target bodies, shared by the libFuzzer binaries and the stable replay test.

use bytes::BytesMut;
use wasm9p_proto::{encode_frame, DirEntry, FrameDecoder, Message};

/// Feeds `data` to a frame decoder in chunks; every frame that decodes must re-encode
/// and decode to itself, and nothing may panic or reserve past the limit.
pub fn frame_decode(data: &[u8]) {
    let Some((&knobs, data)) = data.split_first() else {
        return;
    };
    let limit = 4096 + u32::from(knobs & 0x0f) * 4096;
    let chunk = 1 + usize::from(knobs >> 4) * 7;
    let mut decoder = FrameDecoder::new(limit);
    let mut buf = BytesMut::new();
    for piece in data.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    if let Ok(msg) = frame.body {
                        check_round_trip(frame.tag, &msg);
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
            assert!(buf.capacity() <= limit as usize + 2 * chunk + 64 * 1024);
        }
    }
}

fn check_round_trip(tag: u16, msg: &Message) {
    let mut out = BytesMut::new();
    encode_frame(tag, msg, &mut out);
    let again = FrameDecoder::new(u32::MAX)
        .decode(&mut out)
        .unwrap()
        .unwrap();
    assert_eq!(again.body.as_ref(), Ok(msg));
    if let Message::Rreaddir(r) = msg {
        let _ = DirEntry::decode_all(r.data.0.clone());
    }
}

/// The server's request handling against arbitrary frames, on both kinds of export:
/// a host directory, and a file system of numbered nodes ([`nodes::MemoryNodes`]).
pub mod server {
    use std::path::PathBuf;
    use std::sync::OnceLock;
    use std::time::Duration;

    use bytes::BytesMut;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use wasm9p_proto::transport::duplex;
    use wasm9p_proto::{encode_frame, FrameDecoder, Message, Tattach, Tversion};
    use wasm9p_server::{ExportConfig, Server, ServerConfig};

    /// What every input runs against: a server exporting `root/export` (with a few
    /// files), next to `root/outside`, which no input may touch.
    struct Env {
        rt: tokio::runtime::Runtime,
        server: Server,
        root: PathBuf,
        /// The node export, kept across inputs as the directory is.
        nodes: std::sync::Arc<super::nodes::MemoryNodes>,
    }

    /// Panics seen, in any thread.
    static PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    /// The sentinel next to the export.
    const OUTSIDE: &[u8] = b"outside the export";

    fn env() -> &'static Env {
        static ENV: OnceLock<Env> = OnceLock::new();
        ENV.get_or_init(|| {
            let root = std::env::temp_dir().join(format!("wasm9p-fuzz-{}", std::process::id()));
            let export = root.join("export");
            std::fs::create_dir_all(export.join("dir/sub")).unwrap();
            std::fs::write(export.join("file"), b"some bytes").unwrap();
            std::fs::write(export.join("dir/sub/deep"), b"deep").unwrap();
            let _ = std::os::unix::fs::symlink("../../outside", export.join("escape"));
            let _ = std::os::unix::fs::symlink("/", export.join("abs"));
            std::fs::write(root.join("outside"), OUTSIDE).unwrap();
            // A panic in any of the server's tasks is a finding, even one tokio
            // catches: count them.
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                previous(info);
            }));
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let server = Server::new(ServerConfig {
                exports: vec![ExportConfig::new(&export)],
                msize: 16384,
                ..Default::default()
            })
            .unwrap();
            let nodes = std::sync::Arc::new(super::nodes::MemoryNodes::new());
            Env {
                rt,
                server,
                root,
                nodes,
            }
        })
    }

    /// A session's opening (version, attach of fid 0), so inputs reach the operations.
    pub fn opening() -> BytesMut {
        let mut out = BytesMut::new();
        let version = Tversion {
            msize: 16384,
            version: "9P2000.L".into(),
        };
        encode_frame(0xffff, &Message::from(version), &mut out);
        let attach = Tattach {
            fid: 0,
            afid: u32::MAX,
            uname: "fuzz".into(),
            aname: String::new(),
            n_uname: 0,
        };
        encode_frame(1, &Message::from(attach), &mut out);
        out
    }

    /// Seed inputs (what follows the opening): realistic sessions that reach every
    /// family of operations, escape attempts included; each one leaves the export as
    /// it found it. Written to `seeds/server_requests/` (see the replay test).
    pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
        use wasm9p_proto::consts::{open, AT_REMOVEDIR};
        use wasm9p_proto::*;
        fn session(msgs: Vec<Message>) -> Vec<u8> {
            let mut out = BytesMut::new();
            for (i, m) in msgs.iter().enumerate() {
                encode_frame(10 + i as u16, m, &mut out);
            }
            out.to_vec()
        }
        let walk = |fid, newfid, names: &[&str]| {
            Message::from(Twalk {
                fid,
                newfid,
                wnames: names.iter().map(|n| n.to_string()).collect(),
            })
        };
        vec![
            (
                "read",
                session(vec![
                    walk(0, 1, &["file"]),
                    Tlopen {
                        fid: 1,
                        flags: open::RDONLY,
                    }
                    .into(),
                    Tread {
                        fid: 1,
                        offset: 0,
                        count: 100,
                    }
                    .into(),
                    Tgetattr {
                        fid: 1,
                        request_mask: 0x3fff,
                    }
                    .into(),
                    Tclunk { fid: 1 }.into(),
                ]),
            ),
            (
                "escapes",
                session(vec![
                    walk(0, 2, &[".."]),
                    walk(0, 3, &["escape"]),
                    Tlopen {
                        fid: 3,
                        flags: open::RDONLY,
                    }
                    .into(),
                    Treadlink { fid: 3 }.into(),
                    walk(0, 4, &["abs", "etc"]),
                    walk(0, 5, &["dir", "..", "..", "outside"]),
                    walk(0, 6, &["a/b"]),
                ]),
            ),
            (
                "changes",
                session(vec![
                    walk(0, 1, &["dir"]),
                    walk(0, 2, &["dir"]),
                    Tlcreate {
                        fid: 1,
                        name: "new".into(),
                        flags: open::RDWR,
                        mode: 0o644,
                        gid: 0,
                    }
                    .into(),
                    Twrite {
                        fid: 1,
                        offset: 0,
                        data: Data::from(b"hello".to_vec()),
                    }
                    .into(),
                    Tsetattr {
                        fid: 1,
                        valid: consts::setattr::SIZE,
                        size: 2,
                        ..Default::default()
                    }
                    .into(),
                    Tmkdir {
                        dfid: 2,
                        name: "m".into(),
                        mode: 0o755,
                        gid: 0,
                    }
                    .into(),
                    Tsymlink {
                        fid: 2,
                        name: "l".into(),
                        symtgt: "../../outside".into(),
                        gid: 0,
                    }
                    .into(),
                    Trenameat {
                        olddirfid: 2,
                        oldname: "new".into(),
                        newdirfid: 2,
                        newname: "n2".into(),
                    }
                    .into(),
                    Tunlinkat {
                        dirfd: 2,
                        name: "m".into(),
                        flags: AT_REMOVEDIR,
                    }
                    .into(),
                    Tunlinkat {
                        dirfd: 2,
                        name: "l".into(),
                        flags: 0,
                    }
                    .into(),
                    Tunlinkat {
                        dirfd: 2,
                        name: "n2".into(),
                        flags: 0,
                    }
                    .into(),
                    Tclunk { fid: 1 }.into(),
                ]),
            ),
            (
                "listing",
                session(vec![
                    walk(0, 7, &["dir"]),
                    Tlopen {
                        fid: 7,
                        flags: open::RDONLY,
                    }
                    .into(),
                    Treaddir {
                        fid: 7,
                        offset: 0,
                        count: 4096,
                    }
                    .into(),
                    Treaddir {
                        fid: 7,
                        offset: 2,
                        count: 30,
                    }
                    .into(),
                    Tstatfs { fid: 0 }.into(),
                    Txattrwalk {
                        fid: 0,
                        newfid: 8,
                        name: String::new(),
                    }
                    .into(),
                    Tread {
                        fid: 8,
                        offset: 0,
                        count: 256,
                    }
                    .into(),
                    Tflush { oldtag: 11 }.into(),
                ]),
            ),
        ]
    }

    /// Sends the opening and then `data` to a fresh connection of each kind of export,
    /// closes it, and reads every reply to the end: the server must answer with
    /// well-formed frames, finish within seconds, and leave everything outside its
    /// export as it was. Returns how many replies the directory export sent.
    pub fn requests(data: &[u8]) -> usize {
        let env = env();
        let count = exchange(env, data, |stream| {
            let server = env.server.clone();
            tokio::spawn(async move { server.serve_connection(stream, "fuzz".into()).await })
        });
        exchange(env, data, |stream| {
            tokio::spawn(wasm9p_server::nodes::serve(env.nodes.clone(), stream))
        });
        count
    }

    /// One connection served by what `serve` starts, fed the opening and `data`: how
    /// many replies came (each checked), after the checks every input must pass.
    fn exchange(
        env: &Env,
        data: &[u8],
        serve: impl FnOnce(wasm9p_proto::transport::BoxStream) -> tokio::task::JoinHandle<()>,
    ) -> usize {
        let count = env.rt.block_on(async {
            let (mut client, server_side) = duplex();
            let serving = serve(server_side);
            let mut input = opening();
            input.extend_from_slice(data);
            let (mut rd, mut wr) = tokio::io::split(&mut client);
            let write = async {
                let _ = wr.write_all(&input).await;
                let _ = wr.shutdown().await;
            };
            let read = async {
                let mut replies = Vec::new();
                let _ = rd.read_to_end(&mut replies).await;
                replies
            };
            let (_, replies) =
                tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(write, read) })
                    .await
                    .expect("the server answered and closed within 10 s");
            let mut buf = BytesMut::from(&replies[..]);
            let mut decoder = FrameDecoder::new(u32::MAX);
            let mut count = 0;
            while let Some(frame) = decoder.decode(&mut buf).expect("replies are frames") {
                assert!(
                    frame.body.is_ok(),
                    "a reply that does not decode: {frame:?}"
                );
                count += 1;
            }
            assert!(buf.is_empty(), "a torn reply");
            serving
                .await
                .expect("the connection task ended without a panic");
            count
        });
        assert_eq!(
            PANICS.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "the server panicked"
        );
        let outside = std::fs::read(env.root.join("outside")).expect("the sentinel is there");
        assert_eq!(outside, OUTSIDE, "a file outside the export changed");
        let names: Vec<_> = std::fs::read_dir(&env.root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names.len(),
            2,
            "something was made outside the export: {names:?}"
        );
        count
    }
}

pub mod client;
pub mod namespace;
pub mod nodes;
pub mod trees;
