//! What a session learns about its server as it goes, and what it did with that: the
//! promises asked at the first flight (module `flight`), whether flights are off, how
//! many went, and which newer requests the server refused (Trenameat and Tunlinkat,
//! answered EOPNOTSUPP, are not sent again: module `ops` falls back to Trename and
//! Tremove).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::OnceCell;

/// What a server promised when asked (module `flight` asks, at the first flight).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Promises {
    /// It handles a connection's requests in order (`ORDERED_XATTR`): flights may go.
    pub ordered: bool,
    /// Its listings are filled (`LISTINGS_FILL_XATTR`): a Treaddir's reply with room
    /// left for another entry ended the listing.
    pub listings_fill: bool,
}

/// A request the server may not know, which the session stops sending once refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Newer {
    Renameat,
    Unlinkat,
}

/// One session's record (shared by its clones; see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Learned {
    promises: OnceCell<Promises>,
    no_flights: AtomicBool,
    flights: AtomicU64,
    flight_retries: AtomicU64,
    no_renameat: AtomicBool,
    no_unlinkat: AtomicBool,
}

impl Learned {
    /// The promises, asked once (by `ask`, the first caller's).
    pub(crate) async fn promises<F>(&self, ask: impl FnOnce() -> F) -> Promises
    where
        F: std::future::Future<Output = Promises>,
    {
        *self.promises.get_or_init(ask).await
    }

    /// The promises if they were asked already.
    pub(crate) fn promises_known(&self) -> Option<Promises> {
        self.promises.get().copied()
    }

    /// Flights off (a mount's `pipeline=off`).
    pub(crate) fn turn_flights_off(&self) {
        self.no_flights.store(true, Ordering::Relaxed);
    }

    pub(crate) fn flights_on(&self) -> bool {
        !self.no_flights.load(Ordering::Relaxed)
    }

    pub(crate) fn flight_sent(&self) {
        self.flights.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn flight_request_retried(&self) {
        self.flight_retries.fetch_add(1, Ordering::Relaxed);
    }

    /// Flights sent, and requests of flights sent again.
    pub(crate) fn flights(&self) -> (u64, u64) {
        (
            self.flights.load(Ordering::Relaxed),
            self.flight_retries.load(Ordering::Relaxed),
        )
    }

    fn refused_flag(&self, request: Newer) -> &AtomicBool {
        match request {
            Newer::Renameat => &self.no_renameat,
            Newer::Unlinkat => &self.no_unlinkat,
        }
    }

    /// Whether the server refused `request` before.
    pub(crate) fn refuses(&self, request: Newer) -> bool {
        self.refused_flag(request).load(Ordering::Relaxed)
    }

    /// The server answered `request` with EOPNOTSUPP or ENOSYS.
    pub(crate) fn refused(&self, request: Newer) {
        self.refused_flag(request).store(true, Ordering::Relaxed);
    }
}
