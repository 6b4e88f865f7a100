//! Connections: how many may be open at once, and how long one may be slow or idle.
//!
//! - **The bound** ([`Connections`]): a permit per open connection. The accept loop
//!   takes one before it accepts, so past the bound the listener stops accepting and
//!   new connections wait in the kernel's backlog until one closes: backpressure, never
//!   an error for a connection already open, and never a failed `accept` that would
//!   take descriptors from the 9P mounts' reconnects.
//! - **Each connection's [`Watch`]**: the bytes moving (its I/O is wrapped, [`Watched`]),
//!   the requests in flight (a [`Busy`] per request, held by the response body until
//!   hyper is done with it), and when the head of the next request began arriving. A
//!   watchdog on the connection's task ([`Watch::verdict`]) then applies:
//!   - the **header timeout**, from the first byte of a request's head to the head's
//!     end: past it, the connection is closed. (hyper's own header timer starts as soon
//!     as a connection waits for a head, idle keep-alive included, which would make
//!     every idle connection a slow one.)
//!   - the **idle timeout**: no request in flight, and no byte in either direction,
//!     for that long: the connection is shut down gracefully (HTTP/1.1: closed;
//!     HTTP/2: GOAWAY, then closed).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::bodies::{Holding, ResponseBody};

/// Descriptors kept free of connections under the default bound, at least: the
/// mounts' sessions and their reconnects, the module cache, the guests' files.
pub const RESERVED_DESCRIPTORS: u64 = 256;

/// The bound a server takes without being told: the process's descriptor limit, less
/// an eighth of it or [`RESERVED_DESCRIPTORS`], whichever is more (at least 1).
pub fn default_max_connections() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(1 << 20);
    let reserved = RESERVED_DESCRIPTORS.max(limit / 8);
    usize::try_from(limit.saturating_sub(reserved).max(1)).unwrap_or(usize::MAX)
}

/// The bound on open connections.
pub(crate) struct Connections {
    permits: Arc<Semaphore>,
    max: u32,
}

impl Connections {
    pub(crate) fn new(max: usize) -> Connections {
        let max = u32::try_from(max.min(Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
        Connections {
            permits: Arc::new(Semaphore::new(max as usize)),
            max,
        }
    }

    /// Waits until every connection given a place has closed (each holds its place
    /// until then).
    pub(crate) async fn all_closed(&self) {
        let _ = self.permits.acquire_many(self.max).await;
    }

    /// A place for one more connection: at once, or once one closes.
    pub(crate) async fn place(&self) -> OwnedSemaphorePermit {
        Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .expect("the connections' semaphore is never closed")
    }
}

/// What a watchdog decides about its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing to do.
    Fine,
    /// A head took longer than the header timeout: close it.
    HeadTooSlow,
    /// Idle longer than the idle timeout: shut it down gracefully.
    Idle,
}

/// One connection's activity (see the module docs). Times are milliseconds since
/// the watch began, plus one (0 means none).
pub(crate) struct Watch {
    began: Instant,
    last_byte: AtomicU64,
    head_since: AtomicU64,
    in_flight: AtomicUsize,
}

impl Watch {
    pub(crate) fn new() -> Arc<Watch> {
        Arc::new(Watch {
            began: Instant::now(),
            last_byte: AtomicU64::new(1),
            head_since: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        })
    }

    fn now(&self) -> u64 {
        u64::try_from(self.began.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1
    }

    /// Bytes came in: the first of a new head starts its clock.
    fn read(&self) {
        let now = self.now();
        self.last_byte.store(now, Ordering::Relaxed);
        if self.in_flight.load(Ordering::Acquire) == 0 {
            let _ = self
                .head_since
                .compare_exchange(0, now, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    fn wrote(&self) {
        self.last_byte.store(self.now(), Ordering::Relaxed);
    }

    /// A request's head has arrived whole: it is in flight until its [`Busy`] goes.
    pub(crate) fn request(self: &Arc<Watch>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(0, Ordering::Release);
        Busy(Arc::clone(self))
    }

    /// What the watchdog does now, with these timeouts.
    pub(crate) fn verdict(&self, header_timeout: Duration, idle_timeout: Duration) -> Verdict {
        let now = self.now();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let head = self.head_since.load(Ordering::Acquire);
        if head != 0 && now.saturating_sub(head) >= ms(header_timeout) {
            return Verdict::HeadTooSlow;
        }
        let quiet = now.saturating_sub(self.last_byte.load(Ordering::Relaxed));
        if self.in_flight.load(Ordering::Acquire) == 0 && quiet >= ms(idle_timeout) {
            return Verdict::Idle;
        }
        Verdict::Fine
    }
}

/// How often a watchdog looks at its connection: a quarter of the shorter timeout,
/// between 10 ms and a second.
pub(crate) fn watch_tick(header_timeout: Duration, idle_timeout: Duration) -> Duration {
    (header_timeout.min(idle_timeout) / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// One request in flight on a connection; the idle clock starts again when it goes.
pub(crate) struct Busy(Arc<Watch>);

/// `body`, its request in flight until hyper is done with it.
pub(crate) fn busy_body(body: ResponseBody, busy: Busy) -> ResponseBody {
    Holding::body(body, busy)
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.wrote();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's I/O, telling its [`Watch`] of every byte.
pub(crate) struct Watched<T> {
    inner: T,
    watch: Arc<Watch>,
}

impl<T> Watched<T> {
    pub(crate) fn new(inner: T, watch: Arc<Watch>) -> Watched<T> {
        Watched { inner, watch }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.watch.read();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.watch.wrote();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.watch.wrote();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_timed_from_its_first_byte_and_idleness_only_between_requests() {
        let watch = Watch::new();
        let (header, idle) = (Duration::from_millis(30), Duration::from_millis(60));
        assert_eq!(watch.verdict(header, idle), Verdict::Fine);
        // An idle connection is not a slow head, however long it idles.
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(watch.verdict(header, idle), Verdict::Fine);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(watch.verdict(header, idle), Verdict::Idle);
        // Bytes of a head start its clock; the head's end stops it.
        watch.read();
        assert_eq!(watch.verdict(header, idle), Verdict::Fine);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(watch.verdict(header, idle), Verdict::HeadTooSlow);
        let busy = watch.request();
        // A request in flight is never idle, nor are its body's bytes a head.
        watch.read();
        std::thread::sleep(Duration::from_millis(70));
        assert_eq!(watch.verdict(header, idle), Verdict::Fine);
        drop(busy);
        assert_eq!(
            watch.verdict(header, idle),
            Verdict::Fine,
            "idle from the end"
        );
    }

    #[tokio::test]
    async fn past_the_bound_a_place_waits_until_one_is_given_back() {
        let connections = Connections::new(2);
        let first = connections.place().await;
        let _second = connections.place().await;
        let third = tokio::time::timeout(Duration::from_millis(50), connections.place()).await;
        assert!(third.is_err(), "a third waits");
        let closed =
            tokio::time::timeout(Duration::from_millis(50), connections.all_closed()).await;
        assert!(closed.is_err(), "two are open");
        drop(first);
        let _third = tokio::time::timeout(Duration::from_secs(5), connections.place())
            .await
            .expect("a place once one closes");
        drop((_second, _third));
        tokio::time::timeout(Duration::from_secs(5), connections.all_closed())
            .await
            .expect("all closed");
    }

    #[test]
    fn the_default_bound_leaves_descriptors_for_the_mounts() {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap();
        let max = default_max_connections() as u64;
        assert!(max >= 1);
        if limit > 2 * RESERVED_DESCRIPTORS {
            assert!(limit - max >= RESERVED_DESCRIPTORS, "{max} of {limit}");
            assert!(limit - max >= limit / 8, "{max} of {limit}");
        }
    }
}
