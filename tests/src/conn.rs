//! A plain 9P2000.L connection for tests: one request at a time, or raw frames.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasm9p_proto::consts::{getattr, NOFID, VERSION_9P2000_L};
use wasm9p_proto::transport::{connect, BoxStream};
use wasm9p_proto::*;

/// A connection to a 9P server.
pub struct Conn {
    stream: BoxStream,
    decoder: FrameDecoder,
    buf: BytesMut,
    /// The msize negotiated by [`Conn::version`].
    pub msize: u32,
}

/// Unwraps a reply of the expected variant or panics with what came instead.
#[macro_export]
macro_rules! expect_reply {
    ($reply:expr, $variant:ident) => {
        match $reply {
            Ok(wasm9p_proto::Message::$variant(m)) => m,
            other => panic!(
                concat!("expected ", stringify!($variant), ", got {:?}"),
                other
            ),
        }
    };
}

impl Conn {
    /// Connects to `addr` (no Tversion yet).
    pub async fn connect(addr: &Addr) -> Conn {
        let stream = connect(addr, crate::TEST_TIMEOUT).await.expect("connect");
        Conn::over(stream)
    }

    /// Wraps a connected stream.
    pub fn over(stream: BoxStream) -> Conn {
        Conn {
            stream,
            decoder: FrameDecoder::new(16 * 1024 * 1024),
            buf: BytesMut::new(),
            msize: 0,
        }
    }

    /// Connects, negotiates `msize` and attaches fid 0 to `aname`.
    pub async fn attached(addr: &Addr, msize: u32, aname: &str) -> (Conn, Qid) {
        let mut conn = Conn::connect(addr).await;
        conn.version(msize).await;
        let qid = conn.attach(0, aname).await.expect("attach");
        (conn, qid)
    }

    /// Sends raw bytes.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("send");
    }

    /// Sends one message with `tag`.
    pub async fn send(&mut self, tag: u16, msg: impl Into<Message>) {
        let mut out = BytesMut::new();
        encode_frame(tag, &msg.into(), &mut out);
        self.send_raw(&out).await;
    }

    /// Receives one frame; `None` if the server closed the connection.
    pub async fn recv(&mut self) -> Option<Frame> {
        let read = async {
            loop {
                if let Some(frame) = self.decoder.decode(&mut self.buf).expect("frame") {
                    return Some(frame);
                }
                self.buf.reserve(64 * 1024);
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(crate::TEST_TIMEOUT, read)
            .await
            .expect("server answered in time")
    }

    /// Like [`Conn::recv`], but `None` if no frame arrives within `wait`.
    pub async fn recv_for(&mut self, wait: std::time::Duration) -> Option<Frame> {
        tokio::time::timeout(wait, self.recv()).await.ok().flatten()
    }

    /// The next frame, which must be an Rlerror: its tag and the error.
    pub async fn recv_error(&mut self) -> (u16, Errno) {
        let frame = self.recv().await.expect("connection closed");
        match frame.body {
            Ok(Message::Rlerror(e)) => (frame.tag, Errno(e.ecode)),
            other => panic!("expected Rlerror for tag {}, got {other:?}", frame.tag),
        }
    }

    /// One request and its reply; Rlerror becomes `Err`.
    pub async fn rpc(&mut self, msg: impl Into<Message>) -> Result<Message, Errno> {
        self.send(1, msg).await;
        let frame = self.recv().await.expect("connection closed");
        assert_eq!(frame.tag, 1, "reply tag");
        match frame.body.expect("reply decodes") {
            Message::Rlerror(e) => Err(Errno(e.ecode)),
            m => Ok(m),
        }
    }

    /// Tversion; returns the granted msize and version.
    pub async fn version(&mut self, msize: u32) -> Rversion {
        self.send(
            consts::NOTAG,
            Tversion {
                msize,
                version: VERSION_9P2000_L.into(),
            },
        )
        .await;
        let frame = self.recv().await.expect("version reply");
        let reply = expect_reply!(frame.body.map_err(|_| Errno::EIO), Rversion);
        self.msize = reply.msize;
        reply
    }

    /// Tattach without authentication.
    pub async fn attach(&mut self, fid: u32, aname: &str) -> Result<Qid, Errno> {
        let msg = Tattach {
            fid,
            afid: NOFID,
            uname: "root".into(),
            aname: aname.into(),
            n_uname: 0,
        };
        self.rpc(msg)
            .await
            .map(|m| expect_reply!(Ok::<_, Errno>(m), Rattach).qid)
    }

    /// Twalk of slash-separated `path` (empty: clone).
    pub async fn walk(&mut self, fid: u32, newfid: u32, path: &str) -> Result<Vec<Qid>, Errno> {
        let wnames = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        self.rpc(Twalk {
            fid,
            newfid,
            wnames,
        })
        .await
        .map(|m| expect_reply!(Ok::<_, Errno>(m), Rwalk).wqids)
    }

    /// Tgetattr of everything.
    pub async fn getattr(&mut self, fid: u32) -> Result<Rgetattr, Errno> {
        self.rpc(Tgetattr {
            fid,
            request_mask: getattr::ALL,
        })
        .await
        .map(|m| expect_reply!(Ok::<_, Errno>(m), Rgetattr))
    }

    /// Tlopen.
    pub async fn lopen(&mut self, fid: u32, flags: u32) -> Result<Rlopen, Errno> {
        self.rpc(Tlopen { fid, flags })
            .await
            .map(|m| expect_reply!(Ok::<_, Errno>(m), Rlopen))
    }

    /// Tlcreate in directory fid `fid` (which becomes the new file, open), the group
    /// the server's default (0).
    pub async fn lcreate(
        &mut self,
        fid: u32,
        name: &str,
        flags: u32,
        mode: u32,
    ) -> Result<Rlcreate, Errno> {
        self.rpc(Tlcreate {
            fid,
            name: name.into(),
            flags,
            mode,
            gid: 0,
        })
        .await
        .map(|m| expect_reply!(Ok::<_, Errno>(m), Rlcreate))
    }

    /// Tclunk.
    pub async fn clunk(&mut self, fid: u32) -> Result<(), Errno> {
        self.rpc(Tclunk { fid }).await.map(|_| ())
    }

    /// Treads an open fid to the end.
    pub async fn read_all(&mut self, fid: u32) -> Result<Vec<u8>, Errno> {
        let mut out = Vec::new();
        loop {
            let count = self.msize - consts::IOHDRSZ;
            let r = self
                .rpc(Tread {
                    fid,
                    offset: out.len() as u64,
                    count,
                })
                .await?;
            let data = expect_reply!(Ok::<_, Errno>(r), Rread).data.0;
            if data.is_empty() {
                return Ok(out);
            }
            out.extend_from_slice(&data);
        }
    }

    /// Reads a whole directory with Treaddir calls of `count` bytes.
    pub async fn readdir_all(&mut self, fid: u32, count: u32) -> Result<Vec<DirEntry>, Errno> {
        let mut entries: Vec<DirEntry> = Vec::new();
        let mut offset = 0;
        loop {
            let r = self.rpc(Treaddir { fid, offset, count }).await?;
            let data: Bytes = expect_reply!(Ok::<_, Errno>(r), Rreaddir).data.0;
            if data.is_empty() {
                return Ok(entries);
            }
            let batch = DirEntry::decode_all(data).expect("dirents decode");
            offset = batch.last().unwrap().offset;
            entries.extend(batch);
        }
    }

    /// Walks to `path` from fid 0 into `fid`, opens it read-only and reads it all.
    pub async fn cat(&mut self, fid: u32, path: &str) -> Result<Vec<u8>, Errno> {
        self.walk(0, fid, path).await?;
        let result = async {
            self.lopen(fid, consts::open::RDONLY).await?;
            self.read_all(fid).await
        }
        .await;
        self.clunk(fid).await.unwrap();
        result
    }
}
