//! One request run in its own instance, on a task of its own: a WASI 0.2 proxy's
//! `incoming-handler.handle`, or a WASI 0.3 service's `handler.handle`.
//!
//! Either way the caller gets two things: the answer, as soon as the guest gives its
//! response (or an error code), and the task, whose result says why there is none
//! when the guest ended without one. The task holds the instance's place
//! (`Admitted`) until the instance is gone (its store dropped, its pool slot given
//! back), and ends by the deadline.
//!
//! The two differ in when an instance is done:
//! - a 0.2 proxy writes its body through `wasi:io` streams within its call; the
//!   instance is done when `handle` returns;
//! - a 0.3 service returns its response with a body stream it goes on writing after
//!   it returned, which only happens while the store's event loop runs. So the loop
//!   runs until hyper has sent the body (or dropped it: the client went away), then
//!   the instance is dropped, whatever tasks the guest still has.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use hyper::body::Body;
use hyper::{Request, Response};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use wasmtime::Store;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::WasiHttpView;

use super::admission::Admitted;
use super::bodies::{Holding, ResponseBody};
use super::proxy::{Linked, RequestState, TimedOut};

/// What the instances did, for `--stats`.
#[derive(Default)]
pub(crate) struct InstanceCounts {
    /// Instances made.
    pub(crate) made: AtomicU64,
    /// The time their instantiation took, summed, in nanoseconds.
    pub(crate) making_ns: AtomicU64,
    /// Responses whose head was sent and whose body the deadline cut.
    pub(crate) bodies_cut: AtomicU64,
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

    /// The task's result; a timeout after the guest answered is a body cut.
    fn ended(&self, answered: &AtomicBool, result: &wasmtime::Result<()>) {
        let timed_out = result
            .as_ref()
            .is_err_and(|e| e.downcast_ref::<TimedOut>().is_some());
        if timed_out && answered.load(Ordering::Relaxed) {
            self.bodies_cut.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The guest's response, or the error code it answered with instead (as a line).
pub(crate) type Answer = Result<Response<ResponseBody>, String>;

/// The answer to come: an error when the guest ended without one.
pub(crate) type Answering =
    Pin<Box<dyn Future<Output = Result<Answer, oneshot::error::RecvError>> + Send>>;

/// A request started on its instance.
pub(crate) struct Started {
    pub(crate) answer: Answering,
    pub(crate) task: JoinHandle<wasmtime::Result<()>>,
}

/// Starts `request` on a fresh instance of `linked` in `store`, on a task of its own
/// that ends by `deadline`. Fails, before anything runs, only on a request the
/// guest's types cannot carry (the line says why).
pub(crate) fn start<B>(
    linked: Linked,
    mut store: Store<RequestState>,
    request: Request<B>,
    deadline: Instant,
    timeout: std::time::Duration,
    admitted: Admitted,
    counts: Arc<InstanceCounts>,
) -> Result<Started, String>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<wasmtime_wasi_http::Error>,
{
    let answered = Arc::new(AtomicBool::new(false));
    let ended = {
        let answered = Arc::clone(&answered);
        let counts = Arc::clone(&counts);
        move |result: Option<wasmtime::Result<()>>| {
            let result = result.unwrap_or_else(|| Err(wasmtime::Error::new(TimedOut(timeout))));
            counts.ended(&answered, &result);
            result
        }
    };
    match linked {
        Linked::P2(pre) => {
            let (sender, receiver) = oneshot::channel();
            let set = Arc::clone(&answered);
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
                    let _ = sender.send(response);
                })
                .map_err(|e| format!("{e:#}"))?;
            let task = tokio::spawn(async move {
                let run = async {
                    let proxy = counts
                        .instantiated(pre.instantiate_async(&mut store))
                        .await?;
                    proxy
                        .wasi_http_incoming_handler()
                        .call_handle(&mut store, request, out)
                        .await
                };
                let result = tokio::time::timeout_at(deadline.into(), run).await.ok();
                gone(store, admitted).await;
                ended(result)
            });
            let answer = Box::pin(async move {
                let answer = receiver.await?;
                Ok(answer.map_err(|code| format!("{code:?}")))
            });
            Ok(Started { answer, task })
        }
        Linked::P3(pre) => {
            let (sender, receiver) = oneshot::channel();
            let request = with_scheme_and_authority(request);
            let hooks = store.data_mut().http().hooks;
            let (request, request_io) = wasmtime_wasi_http::p3::Request::from_http(hooks, request);
            let task = tokio::spawn(async move {
                let run = async {
                    let service = counts
                        .instantiated(pre.instantiate_async(&mut store))
                        .await?;
                    store
                        .run_concurrent(async move |accessor| {
                            let response = match service.handle(accessor, request).await? {
                                Ok(response) => response,
                                Err(code) => {
                                    let _ = sender.send(Err(format!("{code:?}")));
                                    return Ok(());
                                }
                            };
                            let response = accessor
                                .with(|mut store| response.into_http(&mut store, request_io))?;
                            let (sent, body_gone) = oneshot::channel::<()>();
                            let response = response.map(|body| Holding::body(body, sent));
                            answered.store(true, Ordering::Relaxed);
                            if sender.send(Ok(response)).is_ok() {
                                // The guest writes its body while the loop runs.
                                let _ = body_gone.await;
                            }
                            wasmtime::Result::<()>::Ok(())
                        })
                        .await?
                };
                let result = tokio::time::timeout_at(deadline.into(), run).await.ok();
                gone(store, admitted).await;
                ended(result)
            });
            Ok(Started {
                answer: Box::pin(receiver),
                task,
            })
        }
    }
}

/// The end of an instance: its files closed, its store dropped (the pooling
/// allocator's slot given back), and only then its admission: a request admitted next
/// always finds a slot, so that past `max_instances` and the queue the answer is the
/// admission's 503, never the allocator's "limit reached" trap.
async fn gone(store: Store<RequestState>, admitted: Admitted) {
    store.data().wasi.fs.close_all().await;
    drop(store);
    drop(admitted);
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
