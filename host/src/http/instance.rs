//! One request run in its own instance, on the caller's own task: a WASI 0.2 proxy's
//! `incoming-handler.handle`, or a WASI 0.3 service's `handler.handle`.
//!
//! [`start`] makes the instance's [`Run`] (the guest's call, then its teardown) and
//! polls nothing; [`Started::first`] drives it until the guest answers or ends, on the
//! task that awaits it (hyper's connection task, for [`super::serve`]), so that a
//! request never hops to another thread to be run: a wakeup across threads costs more
//! than a small request, and more in a virtual machine than on bare metal. What is
//! left of the run once the guest answered (writing its body, for most) goes with the
//! response body ([`Driving`]): hyper, polling the body on the connection's task,
//! drives the guest that writes it. Only a run that outlives its body (the client went
//! away, or hyper needed no body) is finished on a task of its own.
//!
//! The run holds the instance's place (`Admitted`) until the instance is gone (its
//! store dropped, its pool slot given back), and ends by the deadline. The two kinds
//! of guest differ in when an instance is done:
//! - a 0.2 proxy writes its body through `wasi:io` streams within its call; the
//!   instance is done when `handle` returns;
//! - a 0.3 service returns its response with a body stream it goes on writing after
//!   it returned, which only happens while the store's event loop runs. So the loop
//!   runs until hyper has sent the body (or dropped it: the client went away), then
//!   the instance is dropped, whatever tasks the guest still has.
//!
//! A panic in the run (a bug of ours or of a library's, never the guest's: its traps
//! are errors) ends that request with a 500, as a trap does; the connection and the
//! server go on.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use futures_util::FutureExt;
use hyper::body::{Body, Frame, SizeHint};
use hyper::{Request, Response};
use tokio::sync::oneshot;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::WasiHttpView;

use super::bodies::{ResponseBody, Tally};
use super::proxy::{Linked, TimedOut};
use super::reuse::{Instantiated, Lease};

/// What the instances did, for `--stats`.
#[derive(Default)]
pub(crate) struct InstanceCounts {
    /// Instances made.
    pub(crate) made: AtomicU64,
    /// The time their instantiation took, summed, in nanoseconds.
    pub(crate) making_ns: AtomicU64,
    /// Responses whose head was sent and whose body the deadline cut.
    pub(crate) bodies_cut: AtomicU64,
    /// Runs that outlived their response body and were finished on a task of their
    /// own.
    pub(crate) finished_apart: AtomicU64,
    /// Guests that trapped after they answered (their body cut where the trap came).
    pub(crate) trapped_after_answer: AtomicU64,
}

impl InstanceCounts {
    async fn instantiated<F: Future>(&self, instantiate: F) -> F::Output {
        let started = Instant::now();
        let made = instantiate.await;
        let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.made.fetch_add(1, Ordering::Relaxed);
        self.making_ns.fetch_add(ns, Ordering::Relaxed);
        made
    }

    /// The run's result; after the guest answered, a timeout is a body cut, and
    /// another error a trap after the answer.
    fn ended(&self, answered: &AtomicBool, result: &wasmtime::Result<()>) {
        let Err(e) = result else { return };
        if !answered.load(Ordering::Relaxed) {
            return;
        }
        if e.downcast_ref::<TimedOut>().is_some() {
            self.bodies_cut.fetch_add(1, Ordering::Relaxed);
        } else {
            self.trapped_after_answer.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The guest's response, or the error code it answered with instead (as a line).
pub(crate) type Answer = Result<Response<ResponseBody>, String>;

/// How an instance's run ended: its result (why the guest gave no answer, when it gave
/// none), and its lease while it may still be kept: a run that was not clean (see
/// `super::reuse`) has dropped its instance already, so that nothing of its store (a
/// body's writer the guest left open) keeps the response from ending.
pub(crate) struct Ran {
    pub(crate) result: wasmtime::Result<()>,
    lease: Option<Lease>,
}

impl Ran {
    /// The end of the request: the instance kept when the body was `sent_whole` (and
    /// reuse allows it), else dropped (see [`Lease::end`]).
    pub(crate) fn end(self, sent_whole: bool) {
        if let Some(lease) = self.lease {
            lease.end(sent_whole);
        }
    }
}

/// An instance's run: the guest's call, its files written back, and its lease back.
pub(crate) type Run = Pin<Box<dyn Future<Output = Ran> + Send>>;

/// A request started on its instance, nothing of it run yet.
pub(crate) struct Started {
    run: Run,
    answer: oneshot::Receiver<Answer>,
}

/// What is left of a run once its guest answered.
pub(crate) enum Rest {
    /// It goes on (writing the body, for most).
    Running(Run),
    /// It ended as it answered.
    Ran(Ran),
}

/// How a run first came to a point the caller can act on.
pub(crate) enum First {
    /// The guest answered; the rest of its run goes with the response ([`Driving`]).
    Answered(Answer, Rest),
    /// The run ended without an answer.
    Ended(Ran),
}

impl Started {
    /// Runs the instance on this task until the guest answers or its run ends.
    pub(crate) async fn first(self) -> First {
        let Started {
            mut run,
            mut answer,
        } = self;
        // The run first: a guest answers from within it, and an answer sent while the
        // receiver's waker is registered wakes this very task (which `super::own_wakes`
        // then polls once more, and tokio alone would reschedule, waking an idle
        // worker to steal it). Polled after the run, the answer is read as it is, with
        // no wakeup and no second poll.
        tokio::select! {
            biased;
            ran = &mut run => match answer.try_recv() {
                // Answered and done within the same poll (a small response).
                Ok(answer) => First::Answered(answer, Rest::Ran(ran)),
                Err(_) => First::Ended(ran),
            },
            answered = &mut answer => match answered {
                Ok(answer) => First::Answered(answer, Rest::Running(run)),
                // The guest let its way of answering go without answering.
                Err(_) => First::Ended(run.await),
            },
        }
    }
}

/// `run`, a panic in it an error (a 500 for its request, never a lost connection; its
/// instance dropped as the panic unwinds).
fn caught<F>(run: F) -> Run
where
    F: Future<Output = Ran> + Send + 'static,
{
    Box::pin(AssertUnwindSafe(run).catch_unwind().map(|ran| {
        ran.unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Ran {
                result: Err(wasmtime::Error::msg(format!(
                    "the request's run failed: {what}"
                ))),
                lease: None,
            }
        })
    }))
}

/// Starts `request` on the instance of `lease` (made from `linked` first, when the
/// lease has none): its run, which ends by `deadline`, polled by nobody yet. Fails,
/// before anything runs, only on a request the guest's types cannot carry (the line
/// says why).
pub(crate) fn start<B>(
    linked: &Linked,
    mut lease: Lease,
    request: Request<B>,
    deadline: Instant,
    timeout: std::time::Duration,
    counts: Arc<InstanceCounts>,
) -> Result<Started, String>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<wasmtime_wasi_http::Error>,
{
    let answered = Arc::new(AtomicBool::new(false));
    let (sender, answer) = oneshot::channel();
    let run = match linked.clone() {
        Linked::P2(pre) => {
            let set = Arc::clone(&answered);
            let store = &mut lease.store;
            let request = store
                .data_mut()
                .http()
                .new_incoming_request(Scheme::Http, request)
                .map_err(|e| format!("{e:#}"))?;
            let out = store
                .data_mut()
                .http()
                .new_response_outparam_from_callback(move |response| {
                    set.store(true, Ordering::Relaxed);
                    let _ = sender.send(response.map_err(|code| format!("{code:?}")));
                })
                .map_err(|e| format!("{e:#}"))?;
            caught(async move {
                let run = async {
                    let proxy = match lease.instance.take() {
                        Some(Instantiated::P2(proxy)) => proxy,
                        _ => {
                            counts
                                .instantiated(pre.instantiate_async(&mut lease.store))
                                .await?
                        }
                    };
                    let handled = proxy
                        .wasi_http_incoming_handler()
                        .call_handle(&mut lease.store, request, out)
                        .await;
                    lease.instance = Some(Instantiated::P2(proxy));
                    handled
                };
                let result = tokio::time::timeout_at(deadline.into(), run).await.ok();
                ended(lease, result, &answered, timeout, &counts, true).await
            })
        }
        Linked::P3(pre) => {
            let request = with_scheme_and_authority(request);
            let hooks = lease.store.data_mut().http().hooks;
            let (request, request_io) = wasmtime_wasi_http::p3::Request::from_http(hooks, request);
            caught(async move {
                let mut sent_whole = false;
                let run = async {
                    let service = match lease.instance.take() {
                        Some(Instantiated::P3(service)) => service,
                        _ => {
                            counts
                                .instantiated(pre.instantiate_async(&mut lease.store))
                                .await?
                        }
                    };
                    let answered = &answered;
                    let handled = lease
                        .store
                        .run_concurrent(async |accessor| {
                            let response = match service.handle(accessor, request).await? {
                                Ok(response) => response,
                                Err(code) => {
                                    let _ = sender.send(Err(format!("{code:?}")));
                                    return Ok(false);
                                }
                            };
                            let response = accessor
                                .with(|mut store| response.into_http(&mut store, request_io))?;
                            let (sent, body_end) = oneshot::channel::<()>();
                            let declared = super::declared_length(response.headers());
                            let response = response.map(|body| EndSaid::body(body, declared, sent));
                            answered.store(true, Ordering::Relaxed);
                            if sender.send(Ok(response)).is_err() {
                                return Ok(false);
                            }
                            // The guest writes its body while the loop runs; the
                            // body says whether it went out whole.
                            wasmtime::Result::<bool>::Ok(body_end.await.is_ok())
                        })
                        .await
                        .and_then(|inner| inner);
                    lease.instance = Some(Instantiated::P3(service));
                    handled.map(|whole| sent_whole = whole)
                };
                let result = tokio::time::timeout_at(deadline.into(), run).await.ok();
                ended(lease, result, &answered, timeout, &counts, sent_whole).await
            })
        }
    };
    Ok(Started { run, answer })
}

/// The end of a run: the files the guest wrote back, and how it went (`result`:
/// `None` at the deadline). The request is clean so far when the guest answered and
/// returned, `done` (a 0.3 body's stream whole), and left no file open.
async fn ended(
    mut lease: Lease,
    result: Option<wasmtime::Result<()>>,
    answered: &AtomicBool,
    timeout: std::time::Duration,
    counts: &InstanceCounts,
    done: bool,
) -> Ran {
    let result = result.unwrap_or_else(|| Err(wasmtime::Error::new(TimedOut(timeout))));
    counts.ended(answered, &result);
    let fs = &lease.store.data().wasi.fs;
    let left_open = fs.close_all().await;
    let clean = result.is_ok()
        && answered.load(Ordering::Relaxed)
        && done
        && left_open == 0
        && !unfinished_body(&mut lease.store);
    if !clean {
        lease.end(false);
        return Ran {
            result,
            lease: None,
        };
    }
    Ran {
        result,
        lease: Some(lease),
    }
}

/// Whether a 0.2 guest left an outgoing body it neither finished nor dropped: its
/// writer, still in the store, would keep the response's body open.
fn unfinished_body(store: &mut wasmtime::Store<super::proxy::RequestState>) -> bool {
    store
        .data_mut()
        .wasi
        .table
        .iter_mut()
        .any(|entry| entry.is::<wasmtime_wasi_http::p2::body::HostOutgoingBody>())
}

/// A 0.3 guest's response body, saying on `sent` whether it went out whole: the
/// sender is used when the body is whole (see [`Tally`]), and dropped unused when the
/// body goes before (the client went away), fails or overruns its length.
struct EndSaid {
    inner: ResponseBody,
    sent: Option<oneshot::Sender<()>>,
    tally: Tally,
}

impl EndSaid {
    fn body(inner: ResponseBody, declared: Option<u64>, sent: oneshot::Sender<()>) -> ResponseBody {
        use http_body_util::BodyExt;
        EndSaid {
            inner,
            sent: Some(sent),
            tally: Tally::new(declared),
        }
        .boxed_unsync()
    }

    fn say(&mut self, whole: bool) {
        if let Some(sent) = self.sent.take() {
            if whole {
                let _ = sent.send(());
            }
        }
    }
}

impl Body for EndSaid {
    type Data = Bytes;
    type Error = wasmtime_wasi_http::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Some(whole) = self.tally.polled(&polled) {
            self.say(whole);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that drives the rest of its instance's run each time hyper polls
/// it: the guest writes its body on the connection's task, as hyper takes it. When
/// the body ends, the instance's lease ends: kept if the body went out whole and the
/// run was clean (`super::reuse`), else dropped. A run still going when the body goes
/// (the client went away; hyper needed no body, for a `HEAD`) is polled once more, and
/// finished on a task of its own only if that does not end it.
pub(crate) struct Driving {
    inner: Option<ResponseBody>,
    rest: Option<Rest>,
    tally: Tally,
    /// The response is the guest's.
    guests: bool,
    /// The body went out whole (see [`Tally`]).
    whole: bool,
    counts: Arc<InstanceCounts>,
}

impl Driving {
    /// The body of `response`, driving `rest` as it is polled, and ending its lease
    /// with it; `guests`: the response is the guest's (an instance whose answer was
    /// replaced by one of ours is never kept).
    pub(crate) fn response(
        response: Response<ResponseBody>,
        rest: Rest,
        guests: bool,
        counts: &Arc<InstanceCounts>,
    ) -> Response<ResponseBody> {
        use http_body_util::BodyExt;
        let declared = super::declared_length(response.headers());
        response.map(|inner| {
            Driving {
                inner: Some(inner),
                rest: Some(rest),
                tally: Tally::new(declared),
                guests,
                whole: false,
                counts: Arc::clone(counts),
            }
            .boxed_unsync()
        })
    }

    /// The body is over (`whole` or not): it goes (a 0.3 run waits for that), and the
    /// run is taken as far as it goes now.
    fn over(&mut self, whole: bool, cx: &mut Context<'_>) {
        self.inner = None;
        self.whole = whole;
        self.drive(cx);
    }

    /// Polls the run, if it goes on.
    fn drive(&mut self, cx: &mut Context<'_>) {
        if let Some(Rest::Running(run)) = self.rest.as_mut() {
            if let Poll::Ready(ran) = run.as_mut().poll(cx) {
                self.rest = Some(Rest::Ran(ran));
            }
        }
    }
}

impl Body for Driving {
    type Data = Bytes;
    type Error = wasmtime_wasi_http::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        this.drive(cx);
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if let Some(whole) = this.tally.polled(&polled) {
            this.over(whole, cx);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for Driving {
    fn drop(&mut self) {
        // The body first: a guest still writing it hears that it is gone.
        drop(self.inner.take());
        let whole = self.whole && self.guests;
        match self.rest.take() {
            None => {}
            Some(Rest::Ran(ran)) => ran.end(whole),
            Some(Rest::Running(mut run)) => {
                let mut cx = Context::from_waker(std::task::Waker::noop());
                if let Poll::Ready(ran) = run.as_mut().poll(&mut cx) {
                    return ran.end(whole);
                }
                self.counts.finished_apart.fetch_add(1, Ordering::Relaxed);
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => {
                        runtime.spawn(async move { run.await.end(false) });
                    }
                    // No runtime to finish it on (a body dropped outside one): the
                    // instance goes with the run, its files unflushed.
                    Err(_) => drop(run),
                }
            }
        }
    }
}

/// `request` with the scheme `http` and, from its Host header, an authority, when its
/// target gives neither (a server's requests carry a path only), as a 0.2 proxy's
/// incoming request has them.
fn with_scheme_and_authority<B>(request: Request<B>) -> Request<B> {
    if request.uri().scheme().is_some() {
        return request;
    }
    let (mut parts, body) = request.into_parts();
    let host = parts
        .headers
        .get(hyper::header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.parse::<http::uri::Authority>().ok());
    let Some(authority) = host.or_else(|| parts.uri.authority().cloned()) else {
        // Without an authority a scheme makes no valid URI: the target as it came.
        return Request::from_parts(parts, body);
    };
    let path = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    if let Ok(uri) = http::Uri::builder()
        .scheme(http::uri::Scheme::HTTP)
        .authority(authority)
        .path_and_query(path)
        .build()
    {
        parts.uri = uri;
    }
    Request::from_parts(parts, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(uri: &str, host: Option<&str>) -> String {
        let mut request = Request::builder().uri(uri);
        if let Some(host) = host {
            request = request.header("host", host);
        }
        with_scheme_and_authority(request.body(()).unwrap())
            .uri()
            .to_string()
    }

    #[test]
    fn a_servers_request_gets_the_scheme_and_its_host_as_authority() {
        assert_eq!(
            target("/a?b=c", Some("example.org:8080")),
            "http://example.org:8080/a?b=c"
        );
        assert_eq!(target("http://x.org/p", Some("y.org")), "http://x.org/p");
        // No Host (HTTP/1.0) or a bad one: the path as it came.
        assert_eq!(target("/a", None), "/a");
        assert_eq!(target("/a", Some("bad host")), "/a");
    }
}
