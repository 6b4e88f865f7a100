//! The fid number allocator.

use wasm9p_proto::consts::NOFID;

/// Hands out fid numbers; a number comes back only after its Tclunk was answered.
/// One whose Tclunk got no answer is not handed out again on that connection: the
/// server may still have it bound, and a walk to it would fail (or worse, succeed on
/// the wrong file). A new connection (a reconnect) starts with no fid bound but those
/// the session restores, so the lost numbers come back then.
#[derive(Debug, Default)]
pub(crate) struct FidPool {
    next: u32,
    free: Vec<u32>,
    live: usize,
    lost: Vec<u32>,
}

impl FidPool {
    pub(crate) fn alloc(&mut self) -> Option<u32> {
        let fid = match self.free.pop() {
            Some(fid) => fid,
            None if self.next == NOFID => return None,
            None => {
                self.next += 1;
                self.next - 1
            }
        };
        self.live += 1;
        Some(fid)
    }

    pub(crate) fn free(&mut self, fid: u32) {
        self.live -= 1;
        self.free.push(fid);
    }

    /// Retires a number whose clunk was not answered, until [`FidPool::reclaim_lost`].
    pub(crate) fn lose(&mut self, fid: u32) {
        self.live -= 1;
        self.lost.push(fid);
    }

    /// The connection those numbers were lost on is gone: they are free again.
    pub(crate) fn reclaim_lost(&mut self) {
        self.free.append(&mut self.lost);
    }

    pub(crate) fn live(&self) -> usize {
        self.live
    }

    pub(crate) fn lost(&self) -> usize {
        self.lost.len()
    }
}
