//! Large reads and writes: split at `msize - IOHDRSZ`, several requests in flight.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use wasm9p_proto::consts::IOHDRSZ;
use wasm9p_proto::{Data, Errno, Message, Tread, Twrite};

use super::fid::Fid;
use super::session::Call;

impl Fid {
    fn chunk(&self) -> usize {
        (self.session.inner.msize - IOHDRSZ) as usize
    }

    fn depth(&self) -> usize {
        self.session.inner.config.io_depth.max(1)
    }

    /// Starts one more request of a pipeline. With nothing in flight it may wait for
    /// the session's in-flight limit; otherwise it only takes a free slot (`None`:
    /// none free, finish the oldest call first), so pipelines never wait on each other
    /// while holding slots.
    async fn pipeline(&self, msg: Message, first: bool) -> Option<Result<Call, Errno>> {
        if first {
            Some(self.session.start(msg).await)
        } else {
            self.session.try_start(msg)
        }
    }

    /// Reads up to `len` bytes at `offset`, stopping early at end of file. Up to
    /// `io_depth` Treads are in flight at once; the result is assembled in order.
    pub async fn read_at(&self, offset: u64, len: usize) -> Result<Bytes, Errno> {
        let chunk = self.chunk();
        if len <= chunk {
            return self.read(offset, len as u32).await;
        }
        let mut out = BytesMut::with_capacity(len.min(64 << 20));
        let mut inflight: VecDeque<(Call, usize)> = VecDeque::new();
        let mut next = 0usize;
        loop {
            while inflight.len() < self.depth() && next < len {
                let count = chunk.min(len - next);
                let msg = Tread {
                    fid: self.id,
                    offset: offset + next as u64,
                    count: count as u32,
                };
                let first = inflight.is_empty();
                let Some(call) = self.pipeline(msg.into(), first).await else {
                    break;
                };
                inflight.push_back((call?, count));
                next += count;
            }
            let Some((call, asked)) = inflight.pop_front() else {
                break;
            };
            let data = match call.wait().await? {
                Message::Rread(r) => r.data.0,
                _ => return Err(Errno::EIO),
            };
            if data.len() > asked {
                return Err(Errno::EIO);
            }
            out.extend_from_slice(&data);
            if data.len() < asked {
                // End of file (or a short read): what follows is not contiguous; the
                // calls still in flight are dropped, which flushes them.
                break;
            }
        }
        Ok(out.freeze())
    }

    /// Writes all of `data` at `offset`, up to `io_depth` Twrites in flight. A short
    /// write from the server is an error (EIO): the data is not all there.
    pub async fn write_all_at(&self, offset: u64, data: Bytes) -> Result<(), Errno> {
        let chunk = self.chunk();
        let mut inflight: VecDeque<(Call, usize)> = VecDeque::new();
        let mut next = 0usize;
        loop {
            while inflight.len() < self.depth() && next < data.len() {
                let piece = data.slice(next..(next + chunk).min(data.len()));
                let len = piece.len();
                let msg = Twrite {
                    fid: self.id,
                    offset: offset + next as u64,
                    data: Data(piece),
                };
                let first = inflight.is_empty();
                let Some(call) = self.pipeline(msg.into(), first).await else {
                    break;
                };
                inflight.push_back((call?, len));
                next += len;
            }
            let Some((call, sent)) = inflight.pop_front() else {
                return Ok(());
            };
            match call.wait().await? {
                Message::Rwrite(r) if r.count as usize == sent => {}
                Message::Rwrite(_) => return Err(Errno::EIO),
                _ => return Err(Errno::EIO),
            }
        }
    }
}
