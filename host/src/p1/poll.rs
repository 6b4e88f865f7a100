//! `poll_oneoff`: clocks, reads of an inherited stdin (the one input that can make a
//! guest wait), and everything else, which is ready at once (files, as in POSIX, and
//! output streams). A guest that can be cancelled is stopped in its sleep too.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wiggle::{GuestMemory, GuestPtr};

use super::fds::Desc;
use super::types::{self, Errno, Error};
use super::WasiP1Ctx;

/// How often a sleeping guest that can be cancelled looks at its flag.
const CANCEL_CHECK: Duration = Duration::from_millis(50);

impl WasiP1Ctx {
    /// Waits for the first of `subs` to be ready (at most until the earliest clock)
    /// and writes an event for each that is into `events` (as long as `subs`); their
    /// count.
    pub(super) fn poll(
        &mut self,
        memory: &mut GuestMemory<'_>,
        subs: GuestPtr<[types::Subscription]>,
        events: GuestPtr<[types::Event]>,
    ) -> Result<types::Size, Error> {
        if subs.len() == 0 {
            return Err(Errno::Inval.into());
        }
        let started = std::time::Instant::now();
        let mut ready = Vec::new();
        // Each clock subscription as (how long from now, userdata).
        let mut clocks: Vec<(Duration, u64)> = Vec::new();
        // Reads of an inherited stdin wait for input; everything else is ready now.
        let mut stdin_reads = Vec::new();
        for sub in subs.iter() {
            let sub: types::Subscription = memory.read(sub?)?;
            match sub.u {
                types::SubscriptionU::Clock(clock) => {
                    let now = match clock.id {
                        types::Clockid::Realtime => SystemTime::now()
                            .duration_since(UNIX_EPOCH)
                            .unwrap_or_default()
                            .as_nanos() as u64,
                        _ => self.started.elapsed().as_nanos() as u64,
                    };
                    let wait = if clock
                        .flags
                        .contains(types::Subclockflags::SUBSCRIPTION_CLOCK_ABSTIME)
                    {
                        clock.timeout.saturating_sub(now)
                    } else {
                        clock.timeout
                    };
                    clocks.push((Duration::from_nanos(wait), sub.userdata));
                }
                types::SubscriptionU::FdRead(rw)
                    if matches!(self.stdin, super::Input::Inherit)
                        && matches!(self.fds.get(rw.file_descriptor.into()), Ok(Desc::Stdin)) =>
                {
                    stdin_reads.push(sub.userdata);
                }
                // Files (as in POSIX) and output streams are always ready.
                types::SubscriptionU::FdRead(rw) => ready.push(self.fd_event(
                    sub.userdata,
                    rw.file_descriptor,
                    types::Eventtype::FdRead,
                )),
                types::SubscriptionU::FdWrite(rw) => ready.push(self.fd_event(
                    sub.userdata,
                    rw.file_descriptor,
                    types::Eventtype::FdWrite,
                )),
            }
        }
        let earliest = clocks.iter().map(|(wait, _)| *wait).min();
        // Wait only if nothing is ready yet, and at most until the earliest clock
        // (forever with stdin and no clock).
        let wait = if ready.is_empty() {
            earliest
        } else {
            Some(Duration::ZERO)
        };
        if !stdin_reads.is_empty() {
            if stdin_readable(wait)? {
                for userdata in stdin_reads {
                    ready.push(self.fd_event(userdata, 0.into(), types::Eventtype::FdRead));
                }
            }
        } else if let Some(wait) = wait {
            self.sleep_unless_cancelled(wait)?;
        }
        // Every clock that has expired by now is reported, not only the first.
        let elapsed = started.elapsed();
        for (wait, userdata) in clocks {
            if wait <= elapsed || ready.is_empty() && Some(wait) == earliest {
                ready.push(types::Event {
                    userdata,
                    error: Errno::Success,
                    type_: types::Eventtype::Clock,
                    fd_readwrite: types::EventFdReadwrite {
                        nbytes: 0,
                        flags: types::Eventrwflags::empty(),
                    },
                });
            }
        }
        for (i, event) in ready.iter().enumerate() {
            memory.write(
                events.get(i as u32).ok_or(Error::from(Errno::Fault))?,
                event.clone(),
            )?;
        }
        Ok(ready.len() as u32)
    }

    /// Sleeps `wait`; a guest that can be cancelled wakes every [`CANCEL_CHECK`] to
    /// stop at once when it is (a guest asleep in one long call past its timeout).
    fn sleep_unless_cancelled(&self, wait: Duration) -> Result<(), Error> {
        if self.cancel.is_none() {
            std::thread::sleep(wait);
            return Ok(());
        }
        let until = std::time::Instant::now() + wait;
        loop {
            self.check_cancelled()?;
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            std::thread::sleep(left.min(CANCEL_CHECK));
        }
    }
}

/// Whether the host's stdin has input (or its end) within `wait` (`None`: no limit).
fn stdin_readable(wait: Option<Duration>) -> Result<bool, Error> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let stdin = rustix::stdio::stdin();
    let mut fds = [PollFd::new(&stdin, PollFlags::IN)];
    let timeout = wait.map(|d| Timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: i64::from(d.subsec_nanos()),
    });
    loop {
        match poll(&mut fds, timeout.as_ref()) {
            Ok(n) => return Ok(n > 0),
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return Err(Errno::Io.into()),
        }
    }
}
