//! A worker's leases and the moves between their states, apart from the gRPC that
//! carries them (see [`crate::bots`]).
//!
//! As the Remote Workers API has it, and BuildGrid keeps it:
//! - the scheduler **offers** a lease in its answer to an update (PENDING, or ACTIVE
//!   when it already counts it as taken), with the `Action` (or its digest) as its
//!   payload; the worker **takes** it if it has room and is not draining, and reports
//!   it ACTIVE in every update while it runs (the scheduler's keepalive);
//! - the worker **completes** it, with an `ActionResult` or a `google.rpc.Status`
//!   saying what went wrong, and reports it COMPLETED until the scheduler's answer no
//!   longer lists it (acknowledged: forgotten);
//! - the scheduler **takes it back** by listing it CANCELLED, or by no longer listing a
//!   lease the worker runs: the worker stops the guest and forgets the lease (a worker
//!   never sets CANCELLED itself);
//! - a lease offered to a worker that cannot run it (draining for SIGTERM, or full)
//!   is completed at once with UNAVAILABLE, which the scheduler retries elsewhere.

use std::collections::BTreeMap;

use crate::apis::workers::{self, rpc, LeaseState};

/// How a lease ended on this worker.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The result (an `ActionResult`, packed), when there is one.
    pub result: Option<prost_types::Any>,
    /// OK, or what went wrong.
    pub status: rpc::Status,
}

impl Outcome {
    /// An error of `code` (a `google.rpc.Code`) saying `message`.
    pub fn error(code: i32, message: impl Into<String>) -> Outcome {
        Outcome {
            result: None,
            status: rpc::Status {
                code,
                message: message.into(),
                details: Vec::new(),
            },
        }
    }
}

/// The `google.rpc.Code` values a worker reports, as the generated `google.rpc`
/// bindings number them (not written out here).
pub mod code {
    use crate::apis::workers::rpc::Code;

    /// Success.
    pub const OK: i32 = Code::Ok as i32;
    /// Stopped (cancelled).
    pub const CANCELLED: i32 = Code::Cancelled as i32;
    /// A bad request.
    pub const INVALID_ARGUMENT: i32 = Code::InvalidArgument as i32;
    /// Past its timeout.
    pub const DEADLINE_EXCEEDED: i32 = Code::DeadlineExceeded as i32;
    /// Inputs missing from the CAS.
    pub const FAILED_PRECONDITION: i32 = Code::FailedPrecondition as i32;
    /// Over a limit (memory, outputs).
    pub const RESOURCE_EXHAUSTED: i32 = Code::ResourceExhausted as i32;
    /// The worker failed.
    pub const INTERNAL: i32 = Code::Internal as i32;
    /// The worker cannot take it now (retried elsewhere).
    pub const UNAVAILABLE: i32 = Code::Unavailable as i32;
}

#[derive(Clone, Debug, PartialEq)]
enum State {
    Running,
    Completed(Outcome),
}

/// What the scheduler's answer asks of the worker.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Run this lease.
    Start {
        /// Its id.
        id: String,
        /// Its payload (an `Action` or its digest, packed).
        payload: Option<prost_types::Any>,
    },
    /// Stop running this lease: the scheduler took it back.
    Stop {
        /// Its id.
        id: String,
    },
}

/// The leases a worker holds.
#[derive(Debug)]
pub struct Leases {
    leases: BTreeMap<String, State>,
    capacity: usize,
    draining: bool,
}

impl Leases {
    /// No lease yet, room for `capacity` at once.
    pub fn new(capacity: usize) -> Leases {
        Leases {
            leases: BTreeMap::new(),
            capacity: capacity.max(1),
            draining: false,
        }
    }

    /// Takes no new lease from now on (SIGTERM).
    pub fn drain(&mut self) {
        self.draining = true;
    }

    /// Whether it takes no new lease.
    pub fn draining(&self) -> bool {
        self.draining
    }

    /// Leases running now.
    pub fn running(&self) -> usize {
        self.leases
            .values()
            .filter(|s| matches!(s, State::Running))
            .count()
    }

    /// Whether nothing is left to run or to report.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// The leases to report in the next update.
    pub fn report(&self) -> Vec<workers::Lease> {
        self.leases
            .iter()
            .map(|(id, state)| match state {
                State::Running => workers::Lease {
                    id: id.clone(),
                    state: LeaseState::Active as i32,
                    ..Default::default()
                },
                State::Completed(outcome) => workers::Lease {
                    id: id.clone(),
                    state: LeaseState::Completed as i32,
                    result: outcome.result.clone(),
                    status: Some(outcome.status.clone()),
                    ..Default::default()
                },
            })
            .collect()
    }

    /// Takes in the scheduler's answer: what to start and what to stop.
    pub fn sync(&mut self, answer: &[workers::Lease]) -> Vec<Event> {
        let mut events = Vec::new();
        let listed: std::collections::HashSet<&str> =
            answer.iter().map(|l| l.id.as_str()).collect();
        // Held and no longer listed: taken back (running) or acknowledged (completed).
        let gone: Vec<String> = self
            .leases
            .keys()
            .filter(|id| !listed.contains(id.as_str()))
            .cloned()
            .collect();
        for id in gone {
            if self.leases.remove(&id) == Some(State::Running) {
                events.push(Event::Stop { id });
            }
        }
        for lease in answer {
            let state = LeaseState::try_from(lease.state).unwrap_or(LeaseState::Unspecified);
            match (self.leases.get(&lease.id), state) {
                (Some(State::Running), LeaseState::Cancelled) => {
                    self.leases.remove(&lease.id);
                    events.push(Event::Stop {
                        id: lease.id.clone(),
                    });
                }
                (Some(State::Completed(_)), LeaseState::Cancelled) => {
                    self.leases.remove(&lease.id);
                }
                (Some(_), _) => {}
                (None, LeaseState::Pending | LeaseState::Active) => {
                    if self.draining || self.running() >= self.capacity {
                        let why = match self.draining {
                            true => "the worker is shutting down",
                            false => "the worker is full",
                        };
                        self.leases.insert(
                            lease.id.clone(),
                            State::Completed(Outcome::error(code::UNAVAILABLE, why)),
                        );
                    } else {
                        self.leases.insert(lease.id.clone(), State::Running);
                        events.push(Event::Start {
                            id: lease.id.clone(),
                            payload: lease.payload.clone(),
                        });
                    }
                }
                (None, _) => {}
            }
        }
        events
    }

    /// The lease `id` ended so (nothing if it was taken back meanwhile).
    pub fn complete(&mut self, id: &str, outcome: Outcome) {
        if let Some(state) = self.leases.get_mut(id) {
            *state = State::Completed(outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(id: &str, state: LeaseState) -> workers::Lease {
        workers::Lease {
            id: id.into(),
            state: state as i32,
            ..Default::default()
        }
    }

    fn ok() -> Outcome {
        Outcome {
            result: None,
            status: rpc::Status::default(),
        }
    }

    #[test]
    fn a_lease_is_taken_reported_active_completed_and_forgotten_once_acknowledged() {
        let mut leases = Leases::new(1);
        let events = leases.sync(&[offered("a", LeaseState::Active)]);
        assert!(matches!(&events[..], [Event::Start { id, .. }] if id == "a"));
        assert_eq!(leases.report()[0].state, LeaseState::Active as i32);
        // The keepalive: the same answer changes nothing.
        assert!(leases.sync(&[offered("a", LeaseState::Active)]).is_empty());
        leases.complete("a", ok());
        let report = leases.report();
        assert_eq!(report[0].state, LeaseState::Completed as i32);
        assert_eq!(report[0].status.as_ref().map(|s| s.code), Some(code::OK));
        // Still listed: reported again; not listed: acknowledged, forgotten, no event.
        assert!(leases.sync(&[offered("a", LeaseState::Active)]).is_empty());
        assert_eq!(leases.report().len(), 1);
        assert!(leases.sync(&[]).is_empty());
        assert!(leases.is_empty());
    }

    #[test]
    fn a_lease_taken_back_is_stopped_by_cancelled_or_by_silence() {
        let mut leases = Leases::new(2);
        leases.sync(&[
            offered("a", LeaseState::Pending),
            offered("b", LeaseState::Active),
        ]);
        assert_eq!(leases.running(), 2);
        let events = leases.sync(&[
            offered("a", LeaseState::Cancelled),
            offered("b", LeaseState::Active),
        ]);
        assert_eq!(events, [Event::Stop { id: "a".into() }]);
        let events = leases.sync(&[]);
        assert_eq!(events, [Event::Stop { id: "b".into() }]);
        assert!(leases.is_empty());
        // A lease that ends after it was taken back is not reported.
        leases.complete("b", ok());
        assert!(leases.report().is_empty());
    }

    #[test]
    fn a_worker_that_is_full_or_draining_hands_leases_back_to_be_retried() {
        let mut leases = Leases::new(1);
        leases.sync(&[offered("a", LeaseState::Active)]);
        let events = leases.sync(&[
            offered("a", LeaseState::Active),
            offered("b", LeaseState::Active),
        ]);
        assert!(events.is_empty(), "no room for b");
        let b = leases.report().into_iter().find(|l| l.id == "b").unwrap();
        assert_eq!(b.state, LeaseState::Completed as i32);
        assert_eq!(b.status.unwrap().code, code::UNAVAILABLE);
        leases.drain();
        leases.complete("a", ok());
        leases.sync(&[]);
        let events = leases.sync(&[offered("c", LeaseState::Active)]);
        assert!(events.is_empty(), "draining: nothing new starts");
        assert_eq!(
            leases.report()[0].status.as_ref().unwrap().code,
            code::UNAVAILABLE
        );
    }
}
