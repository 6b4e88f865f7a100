//! Flights: a walk and the requests on the fid it binds, sent together.
//!
//! Opening a file the client has no fid for takes a Twalk, a Tlopen on the fid the walk
//! binds, and (for a reader) a Tgetattr and a first Tread: three round trips one after
//! another, because 9P2000.L has no open-by-name (a directory's listing likewise: a
//! Twalk, a Tlopen, a first Treaddir). Over a slow link (a hypervisor's, a
//! network's) those round trips are what a cold compile waits for.
//!
//! A server that handles a connection's requests in order (each request sees what the
//! metadata requests before it did) can take all four at once: the Tlopen arrives after
//! the Twalk that binds its fid, and the Tread (or Treaddir) after the Tlopen. A `stat`
//! of a file the client knows nothing of is a Twalk and a Tgetattr, and reading a link
//! it never read a Twalk and a Treadlink: one flight each too. A wasm9p server says it
//! does by answering the extended attribute [`ORDERED_XATTR`]; the session asks once,
//! at its first flight (a Txattrwalk, and the Tclunk of the fid it binds), beside the
//! attribute of the server's other promise, [`LISTINGS_FILL_XATTR`] (listings filled:
//! a listing's last Treaddir, which would come back empty, is not sent). Other
//! servers (diod's worker threads, QEMU's coroutines) may run two requests of a
//! connection at once, where a request on a fid still being walked is undefined, so
//! they get the requests one round trip after another, as before.
//!
//! Even on a server that promised, nothing is taken on trust: a request of the flight
//! that failed while the walk succeeded is sent again after it (its error then is the
//! answer), and the fid's number is given back only once every reply of the flight is
//! in, so no request of a failed flight can reach a later fid of the same number.

use bytes::Bytes;
use wasm9p_proto::consts::READDIRHDRSZ;
use wasm9p_proto::consts::{getattr, LISTINGS_FILL_XATTR, ORDERED_XATTR};
use wasm9p_proto::{
    Errno, Message, Qid, Rgetattr, Tgetattr, Tlopen, Tread, Treaddir, Treadlink, Twalk, Txattrwalk,
};

use super::fid::{Fid, Walk, WalkError};
use super::learned::Promises;
use super::ops::Entries;
use super::session::{Call, Session};

/// What a flight asks of the opened fid after the open (and the attributes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum First {
    /// Nothing.
    Nothing,
    /// A file's first bytes: a Tread of this many from offset 0.
    Read(u32),
    /// A directory's first entries: a Treaddir of this many bytes from cookie 0.
    Entries(u32),
}

/// A file walked to and opened, with what came back beside the open.
#[derive(Debug)]
pub struct OpenedWalk {
    /// The walk: its fid, now open.
    pub walk: Walk,
    /// The file's attributes, when they were asked for and came.
    pub attr: Option<Rgetattr>,
    /// The file's first bytes (from offset 0; fewer than asked at its end), when
    /// [`First::Read`] was asked and came in the flight.
    pub data: Option<Bytes>,
    /// The directory's first entries (from cookie 0), and whether they are all of
    /// them, when [`First::Entries`] was asked and came in the flight.
    pub entries: Option<Entries>,
}

/// Why [`Fid::walk_open`], [`Fid::walk_getattr`] or [`Fid::walk_readlink`] failed.
#[derive(Debug, thiserror::Error)]
pub enum FlightError {
    /// The walk did not reach the file.
    #[error(transparent)]
    Walk(#[from] WalkError),
    /// The file is there but the server refused what was asked of it (the open, the
    /// attributes, the link's target).
    #[error("refused: {0}")]
    Refused(Errno),
}

impl FlightError {
    /// The errno to give whoever asked.
    pub fn errno(&self) -> Errno {
        match self {
            FlightError::Walk(e) => e.errno,
            FlightError::Refused(errno) => *errno,
        }
    }
}

/// How many bytes of a file a flight reads: what a request carries, at most 128 KiB
/// (Linux's first readahead window), so that opening a big file to read a little of
/// it does not make the server read much more.
pub fn first_read(session: &Session) -> First {
    First::Read((session.msize() - wasm9p_proto::consts::IOHDRSZ).min(128 << 10))
}

/// The most directory entries a flight reads: what one Treaddir carries.
pub fn first_entries(session: &Session) -> First {
    First::Entries(session.msize() - READDIRHDRSZ)
}

impl Session {
    /// Whether the server says it handles this connection's requests in order (see
    /// the module docs); asked once, on `root`.
    pub async fn handles_requests_in_order(&self, root: &Fid) -> bool {
        self.promises(root).await.ordered
    }

    /// Whether the server promised, when asked at the first flight, that its listings
    /// are filled ([`LISTINGS_FILL_XATTR`]); false until then and with flights off.
    pub fn fills_listings(&self) -> bool {
        self.learned()
            .promises_known()
            .is_some_and(|p| p.listings_fill)
    }

    /// What the server promises (asked once, on `root`): a Txattrwalk of each
    /// promise's attribute, both on `root` and sent together, one round trip.
    async fn promises(&self, root: &Fid) -> Promises {
        self.learned()
            .promises(|| async {
                let Some(ordered) = self.start_promise(root, ORDERED_XATTR, true).await else {
                    return Promises::default();
                };
                // Behind it if a slot is free (waiting for one while holding a call could
                // deadlock); else not asked, so not believed.
                let fill = self.start_promise(root, LISTINGS_FILL_XATTR, false).await;
                let ordered = promised(ordered.0, ordered.1.wait().await);
                let listings_fill = match fill {
                    Some((probe, call)) => promised(probe, call.wait().await),
                    None => false,
                };
                Promises {
                    ordered,
                    listings_fill,
                }
            })
            .await
    }

    /// Sends a Txattrwalk of `name` on `root` to a new fid (waiting for a free slot if
    /// `may_wait`): the fid and the call, or `None` if it was not sent.
    async fn start_promise(&self, root: &Fid, name: &str, may_wait: bool) -> Option<(Fid, Call)> {
        let newfid = self.alloc_fid().ok()?;
        let probe = Fid::new(self.clone(), newfid, root.qid);
        let msg = Message::from(Txattrwalk {
            fid: root.id,
            newfid,
            name: name.into(),
        });
        let started = match may_wait {
            true => Some(self.start(msg).await),
            false => self.try_start(msg),
        };
        match started {
            Some(Ok(call)) => Some((probe, call)),
            _ => {
                probe.forget(); // never sent: nothing bound
                None
            }
        }
    }

    /// Sends no flight from now on (a mount's `pipeline=off`): every request of a walk
    /// and what follows it waits for the reply before it, and the server is not asked
    /// for its promises.
    pub fn without_flights(&self) {
        self.learned().turn_flights_off();
    }

    /// Flights sent (opens, listings, stats and link reads that went with their
    /// walk), and requests of flights sent again because the server refused them while
    /// their walk succeeded.
    pub fn flights(&self) -> (u64, u64) {
        self.learned().flights()
    }
}

/// Whether a probe's Txattrwalk was answered (the server makes the promise); its fid
/// is clunked when it was bound or may have been, given back otherwise.
fn promised(probe: Fid, reply: Result<Message, Errno>) -> bool {
    match reply {
        // Bound to the (empty) value: dropping it clunks it.
        Ok(Message::Rxattrwalk(_)) => true,
        Ok(_) | Err(Errno::ETIMEDOUT | Errno::EIO) => {
            drop(probe);
            false
        }
        Err(_) => {
            probe.forget();
            false
        }
    }
}

/// Waits for a call of a flight, if it was sent.
async fn reply(call: Option<Result<Call, Errno>>) -> Option<Result<Message, Errno>> {
    Some(match call? {
        Ok(call) => call.wait().await,
        Err(errno) => Err(errno),
    })
}

impl Fid {
    /// Whether `names` can go as a flight from this fid: 1 to 16 names, flights not
    /// turned off, and a server that handles requests in order.
    async fn can_fly(&self, names: &[String]) -> bool {
        (1..=wasm9p_proto::consts::MAXWELEM).contains(&names.len())
            && self.session.learned().flights_on()
            && self.session.handles_requests_in_order(self).await
    }

    /// Sends a Twalk of `names` to a new fid and the requests `behind` makes for that
    /// fid after it, without waiting; then waits for every reply. The first request
    /// behind goes in a free slot or not at all, the others only if it went (waiting
    /// for a slot while holding the walk's could deadlock every caller doing the same).
    /// Returns the walk as [`Fid::walk`] does (the new fid given back or clunked on
    /// failure, once every reply is in), and the replies of the requests behind it
    /// (`None`: not sent).
    async fn fly(
        &self,
        names: &[String],
        behind: impl FnOnce(u32) -> Vec<Message>,
    ) -> Result<(Walk, Vec<Option<Result<Message, Errno>>>), WalkError> {
        let fail = |errno| WalkError {
            index: 0,
            errno,
            qids: Vec::new(),
        };
        let newfid = self.session.alloc_fid().map_err(fail)?;
        // Made before anything is sent: if this future is dropped mid-flight, the
        // server may have bound newfid, and dropping `new` clunks it.
        let new = Fid::new(self.session.clone(), newfid, self.qid);
        let walk = Twalk {
            fid: self.id,
            newfid,
            wnames: names.to_vec(),
        };
        let walk = match self.session.start(walk.into()).await {
            Ok(call) => call,
            Err(errno) => {
                new.forget();
                return Err(fail(errno));
            }
        };
        let mut calls: Vec<Option<Result<Call, Errno>>> = Vec::new();
        for msg in behind(newfid) {
            let sent = calls.is_empty() || calls[0].is_some();
            calls.push(sent.then(|| self.session.try_start(msg)).flatten());
        }
        if calls.first().is_some_and(Option::is_some) {
            self.session.learned().flight_sent();
        }
        // Every reply is in before the walk's outcome frees newfid (see the module docs).
        let walked = walk.wait().await;
        let mut replies = Vec::with_capacity(calls.len());
        for call in calls {
            replies.push(reply(call).await);
        }
        let qids = match walked {
            Ok(Message::Rwalk(r)) if r.wqids.len() == names.len() => r.wqids,
            Ok(Message::Rwalk(r)) if r.wqids.len() < names.len() => {
                new.forget(); // a partial walk binds nothing
                return Err(WalkError {
                    index: r.wqids.len(),
                    errno: Errno::ENOENT,
                    qids: r.wqids,
                });
            }
            Ok(_) => {
                drop(new); // more qids than names: a broken server; clunk to be safe
                return Err(fail(Errno::EIO));
            }
            Err(errno @ (Errno::ETIMEDOUT | Errno::EIO)) => {
                drop(new); // no answer: newfid may be bound
                return Err(fail(errno));
            }
            Err(errno) => {
                new.forget();
                return Err(fail(errno));
            }
        };
        let qid: Qid = qids.last().copied().unwrap_or(self.qid);
        let walk = Walk {
            fid: new.with_qid(qid),
            qids,
        };
        Ok((walk, replies))
    }

    /// A request of a flight was refused while its walk succeeded: it is sent again.
    fn count_retry(&self) {
        self.session.learned().flight_request_retried();
    }

    /// Walks `names` to a new fid and opens it with `flags`; with `attrs`, asks its
    /// attributes beside the open; and what `first` says after it (only in a flight:
    /// see the module docs). One round trip on a server that handles requests in
    /// order and a path of 1 to 16 names; otherwise the walk, then the open beside the
    /// attributes (and not `first`).
    pub async fn walk_open<S: AsRef<str>>(
        &self,
        names: &[S],
        flags: u32,
        attrs: bool,
        first: First,
    ) -> Result<OpenedWalk, FlightError> {
        let names: Vec<String> = names.iter().map(|n| n.as_ref().to_owned()).collect();
        if !self.can_fly(&names).await {
            let walk = self.walk(&names).await?;
            return open_walked(walk, flags, attrs, None).await;
        }
        let (walk, replies) = self
            .fly(&names, |fid| {
                let mut behind: Vec<Message> = vec![Tlopen { fid, flags }.into()];
                if attrs {
                    let mask = getattr::BASIC;
                    behind.push(
                        Tgetattr {
                            fid,
                            request_mask: mask,
                        }
                        .into(),
                    );
                }
                match first {
                    First::Nothing => {}
                    First::Read(count) => behind.push(
                        Tread {
                            fid,
                            offset: 0,
                            count,
                        }
                        .into(),
                    ),
                    First::Entries(count) => behind.push(
                        Treaddir {
                            fid,
                            offset: 0,
                            count,
                        }
                        .into(),
                    ),
                }
                behind
            })
            .await?;
        let mut replies = replies.into_iter();
        let open = replies.next().flatten();
        let attr = match attrs {
            true => replies.next().flatten(),
            false => None,
        };
        let attr = attr.and_then(|r| match r {
            Ok(Message::Rgetattr(a)) => Some(a),
            _ => None,
        });
        let (mut data, mut entries) = (None, None);
        match (first, replies.next().flatten()) {
            (First::Read(count), Some(Ok(Message::Rread(r))))
                if r.data.0.len() <= count as usize =>
            {
                data = Some(r.data.0);
            }
            (First::Entries(count), Some(Ok(Message::Rreaddir(r)))) => {
                let fills = self.session.fills_listings();
                entries = Entries::decode(r.data.0, count, fills).ok();
            }
            _ => {}
        }
        match open {
            Some(Ok(Message::Rlopen(_))) => Ok(OpenedWalk {
                walk,
                attr,
                data,
                entries,
            }),
            // Refused: asked again now that the walk is answered.
            Some(_) => {
                self.count_retry();
                open_walked(walk, flags, attrs, attr).await
            }
            // No slot was free for it: sent now.
            None => open_walked(walk, flags, attrs, None).await,
        }
    }

    /// Walks `names` to a new fid and asks its attributes: one round trip on a server
    /// that handles requests in order (a path of 1 to 16 names), else two. A `stat`
    /// of a file the cache does not know.
    pub async fn walk_getattr<S: AsRef<str>>(
        &self,
        names: &[S],
    ) -> Result<(Walk, Rgetattr), FlightError> {
        let ask = |fid| {
            let mask = getattr::BASIC;
            Tgetattr {
                fid,
                request_mask: mask,
            }
            .into()
        };
        self.walk_ask(names, ask, |reply| match reply {
            Message::Rgetattr(a) => Some(a),
            _ => None,
        })
        .await
    }

    /// Walks `names` to a new fid and reads the symbolic link there: one round trip
    /// on a server that handles requests in order (a path of 1 to 16 names), else two.
    pub async fn walk_readlink<S: AsRef<str>>(
        &self,
        names: &[S],
    ) -> Result<(Walk, String), FlightError> {
        let ask = |fid| Treadlink { fid }.into();
        self.walk_ask(names, ask, |reply| match reply {
            Message::Rreadlink(r) => Some(r.target),
            _ => None,
        })
        .await
    }

    /// Walks `names` to a new fid and sends the one request `ask` makes for it, in the
    /// walk's flight where it can go (else after the walk); `answer` takes its reply
    /// (`None`: a reply of the wrong type, EIO). A request refused in the flight is
    /// sent again after the walk, and its error then is the answer.
    async fn walk_ask<S: AsRef<str>, T>(
        &self,
        names: &[S],
        ask: impl Fn(u32) -> Message,
        answer: impl Fn(Message) -> Option<T>,
    ) -> Result<(Walk, T), FlightError> {
        let names: Vec<String> = names.iter().map(|n| n.as_ref().to_owned()).collect();
        let (walk, flown) = match self.can_fly(&names).await {
            true => {
                let (walk, mut replies) = self.fly(&names, |fid| vec![ask(fid)]).await?;
                (walk, replies.pop().flatten())
            }
            false => (self.walk(&names).await?, None),
        };
        match flown.map(|reply| reply.map(&answer)) {
            Some(Ok(Some(answered))) => return Ok((walk, answered)),
            Some(_) => self.count_retry(),
            None => {}
        }
        let reply = self
            .session
            .call(ask(walk.fid.id))
            .await
            .map_err(FlightError::Refused)?;
        let answered = answer(reply).ok_or(FlightError::Refused(Errno::EIO))?;
        Ok((walk, answered))
    }
}

/// Opens a walked fid, its attributes asked beside the open unless known.
async fn open_walked(
    walk: Walk,
    flags: u32,
    attrs: bool,
    attr: Option<Rgetattr>,
) -> Result<OpenedWalk, FlightError> {
    let (opened, attr) = match (attrs, attr) {
        (true, None) => {
            let (opened, attr) = tokio::join!(walk.fid.lopen(flags), walk.fid.getattr());
            (opened, attr.ok())
        }
        (_, attr) => (walk.fid.lopen(flags).await, attr),
    };
    opened.map_err(FlightError::Refused)?;
    Ok(OpenedWalk {
        walk,
        attr,
        data: None,
        entries: None,
    })
}
