//! A host-directory export as the shell (`crate::shell`) serves it: what a
//! connection's requests do, on the async workers, or on the tenant's I/O thread for a
//! tenant's connection (`crate::io_thread`).
//!
//! Metadata requests run on the reader, each done before the next frame is read, so
//! every request sees what the metadata requests before it did: the promise a client
//! learns from `ORDERED_XATTR` and pipelines on (a Tlopen behind the Twalk that binds
//! its fid). They are a syscall or two: running them there saves two task hops per
//! request, which is most of a round trip on loopback. Data transfers, fsync and
//! directory listings may take long (a cold disk, a huge directory) and run as their
//! own tasks, so they overlap and can be flushed; a tenant's run on the data threads
//! instead, in the tenant's turn (`crate::scheduler`), after its export's byte-rate
//! cap has paid for them (`crate::rates`). Before each request, a connection whose
//! access rules changed releases the fids of exports its peer may no longer use.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::Semaphore;
use wasm9p_proto::transport::{BoxStream, Peer};
use wasm9p_proto::Message;

use crate::connection::Connection;
use crate::shared::Shared;
use crate::shell::{self, Later, Now, Served};
use crate::tenants::Membership;

/// Serves one connection of `who`, a member of `member`'s tenant if it has one (kept
/// until the connection's end).
pub(crate) async fn run(
    shared: Arc<Shared>,
    stream: BoxStream,
    who: Peer,
    member: Option<Membership>,
) {
    let peer = who.name.clone();
    let tenant = member.as_ref().map(|m| m.0.clone());
    let max_msize = shared.msize;
    let connection = Arc::new(Connection::new(shared, who, tenant));
    shell::run(connection, stream, &peer, max_msize).await;
}

impl Served for Connection {
    fn version(&self, msize: Option<u32>) {
        self.fids.clear();
        if let Some(msize) = msize {
            self.msize.store(msize, Ordering::Relaxed);
        }
    }

    fn before_request(&self) {
        self.follow_rules();
    }

    fn answer_now(&self, msg: Message) -> Now {
        match msg {
            Message::Tread(_) | Message::Twrite(_) | Message::Tfsync(_) | Message::Treaddir(_) => {
                Now::Later(msg)
            }
            msg => Now::Answered(crate::ops::handle(self, msg)),
        }
    }

    fn answer_later(self: &Arc<Self>, msg: Message, later: Later) {
        let tenant = self.tenant.as_ref().map(|t| Arc::as_ptr(t) as usize);
        let wait = rate_wait(self, &msg);
        let connection = self.clone();
        let job = move || later.reply(crate::ops::handle(&connection, msg));
        let run = move || match tenant {
            Some(tenant) => crate::scheduler::submit(tenant, Box::new(job)),
            None => drop(tokio::spawn(async move { job() })),
        };
        match wait {
            // Over its export's byte rate: it runs when the rate has paid for it.
            Some(wait) if !wait.is_zero() => drop(tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                run();
            })),
            _ => run(),
        }
    }

    fn tenant_requests(&self) -> Option<Arc<Semaphore>> {
        self.tenant.as_ref().map(|t| t.requests.clone())
    }

    fn closed(&self) {
        self.fids.clear();
    }
}

/// How long a read or write must wait for its export's byte-rate cap (`None`: its
/// export has none, or it moves no bytes).
fn rate_wait(connection: &Connection, msg: &Message) -> Option<std::time::Duration> {
    if !connection.shared.capped() {
        return None;
    }
    let (fid, bytes) = match msg {
        Message::Tread(t) => (t.fid, u64::from(t.count)),
        Message::Twrite(t) => (t.fid, t.data.0.len() as u64),
        _ => return None,
    };
    let fid = connection.fids.get(fid).ok()?;
    let bucket = connection.shared.bucket(&fid.export)?;
    Some(bucket.take(bytes, std::time::Instant::now()))
}
