//! Large reads and writes: split at `msize - IOHDRSZ`, several requests in flight.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use wasm9p_proto::consts::IOHDRSZ;
use wasm9p_proto::{Data, Errno, Message, Tread, Twrite};

use super::fid::Fid;
use super::session::Call;

impl Fid {
    fn chunk(&self) -> usize {
        (self.session.msize() - IOHDRSZ) as usize
    }

    fn depth(&self) -> usize {
        self.session.config().io_depth.max(1)
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
        if len <= self.chunk() {
            return self.read(offset, len as u32).await;
        }
        let mut replies = self.read_replies_at(offset, len, 1).await?;
        if replies.len() == 1 {
            return Ok(replies.remove(0));
        }
        let mut out = BytesMut::with_capacity(replies.iter().map(Bytes::len).sum());
        for reply in &replies {
            out.extend_from_slice(reply);
        }
        Ok(out.freeze())
    }

    /// Reads up to `len` bytes at `offset` and returns the server's replies as they
    /// came (no copy), in order; stops early at end of file (a short reply is the
    /// last). Every request but the last asks for a multiple of `align` bytes when
    /// msize allows, so that the replies split into `align`-sized pieces without
    /// copying (the page cache's pages). Up to `io_depth` Treads are in flight at once.
    pub async fn read_replies_at(
        &self,
        offset: u64,
        len: usize,
        align: usize,
    ) -> Result<Vec<Bytes>, Errno> {
        let chunk = self.chunk();
        let step = match chunk / align.max(1) * align.max(1) {
            0 => chunk,
            aligned => aligned,
        };
        let mut replies = Vec::with_capacity(len.div_ceil(step));
        let mut inflight: VecDeque<(Call, usize)> = VecDeque::new();
        let mut next = 0usize;
        loop {
            while inflight.len() < self.depth() && next < len {
                let count = step.min(len - next);
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
            let short = data.len() < asked;
            if !data.is_empty() {
                replies.push(data);
            }
            if short {
                // End of file (or a short read): what follows is not contiguous; the
                // calls still in flight are dropped, which flushes them.
                break;
            }
        }
        Ok(replies)
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
