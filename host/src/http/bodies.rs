//! Bounds on request and response bodies, as bodies that stop past their bound.
//!
//! A request body longer than its bound ends, for the guest, in an error
//! (`HTTP-request-body-size`) and marks the request, so that the server answers 413
//! whatever the guest made of it. A response body is streamed as the guest writes it;
//! past its bound the stream ends in an error and hyper cuts the connection (a
//! response that says its length up front is refused before its head is sent, see
//! `super::proxy`).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use wasmtime_wasi_http::Error;

/// The body type of every response: the guest's, or one of ours.
pub type ResponseBody = UnsyncBoxBody<Bytes, Error>;

/// A whole response body of `text` (for an embedder's own responses beside the
/// handler's).
pub fn text_body(text: impl Into<Bytes>) -> ResponseBody {
    http_body_util::Full::new(text.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// What became of a request body, for the answer when the guest gives none.
#[derive(Debug, Default)]
pub(crate) struct BodyState {
    /// It went past its bound.
    over: AtomicBool,
    /// Its reader waits for bytes that have not come: the last poll was pending.
    waiting: AtomicBool,
}

impl BodyState {
    /// Whether it went past its bound.
    pub(crate) fn went_over(&self) -> bool {
        self.over.load(Ordering::Relaxed)
    }

    /// Whether the guest was left waiting for more of it (a client sending it slowly,
    /// or not at all).
    pub(crate) fn stalled(&self) -> bool {
        self.waiting.load(Ordering::Relaxed)
    }
}

/// `inner`, ending in an error once more than `limit` bytes came through; its `state`
/// says so, and whether its reader is waiting.
pub(crate) struct Bounded<B> {
    inner: B,
    left: u64,
    limit: u64,
    state: Arc<BodyState>,
    request: bool,
}

impl<B> Bounded<B> {
    /// A request body of at most `limit` bytes.
    pub(crate) fn request(inner: B, limit: u64, state: Arc<BodyState>) -> Bounded<B> {
        Bounded {
            inner,
            left: limit,
            limit,
            state,
            request: true,
        }
    }

    /// A response body of at most `limit` bytes.
    pub(crate) fn response(inner: B, limit: u64) -> Bounded<B> {
        Bounded {
            inner,
            left: limit,
            limit,
            state: Arc::default(),
            request: false,
        }
    }

    fn too_long(&self) -> Error {
        self.state.over.store(true, Ordering::Relaxed);
        if self.request {
            Error::HttpRequestBodySize(Some(self.limit))
        } else {
            Error::HttpResponseBodySize(Some(self.limit))
        }
    }
}

impl<B> Body for Bounded<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Error>,
{
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        if self.state.went_over() {
            return Poll::Ready(None);
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        self.state
            .waiting
            .store(polled.is_pending(), Ordering::Relaxed);
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                if len > self.left {
                    let error = self.too_long();
                    return Poll::Ready(Some(Err(error)));
                }
                self.left -= len;
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            other => other.map(|o| o.map(|r| r.map_err(Into::into))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// How far a response body got against the length its head declared: hyper stops
/// polling a body once the declared length went out (it never sees its end), and cuts
/// one that gives more, so a body is whole when its bytes reach the length, or when it
/// ends having given exactly that many (or any number, with no length declared).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tally {
    declared: Option<u64>,
    passed: u64,
}

/// What a frame made of a body, by its [`Tally`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tallied {
    /// More is to come.
    Going,
    /// The declared length went out: hyper wants no more.
    Whole,
    /// Past the declared length: the body is not what its head said.
    Over,
}

impl Tally {
    /// A tally for a body whose head declared `declared` bytes.
    pub(crate) fn new(declared: Option<u64>) -> Tally {
        Tally {
            declared,
            passed: 0,
        }
    }

    /// `frame` went by.
    pub(crate) fn frame(&mut self, frame: &Frame<Bytes>) -> Tallied {
        self.passed += frame.data_ref().map_or(0, |d| d.len() as u64);
        match self.declared {
            Some(d) if self.passed > d => Tallied::Over,
            Some(d) if self.passed == d => Tallied::Whole,
            _ => Tallied::Going,
        }
    }

    /// Whether a body that ended here (its stream over) was whole.
    pub(crate) fn ended_whole(&self) -> bool {
        self.declared.is_none_or(|d| d == self.passed)
    }

    /// What a poll of the body made of it: `Some(whole)` when the body is over with
    /// it (its stream ended, its declared length reached or passed, or an error), else
    /// `None`.
    pub(crate) fn polled<E>(
        &mut self,
        polled: &Poll<Option<Result<Frame<Bytes>, E>>>,
    ) -> Option<bool> {
        match polled {
            Poll::Ready(None) => Some(self.ended_whole()),
            Poll::Ready(Some(Ok(frame))) => match self.frame(frame) {
                Tallied::Going => None,
                Tallied::Whole => Some(true),
                Tallied::Over => Some(false),
            },
            Poll::Ready(Some(Err(_))) => Some(false),
            Poll::Pending => None,
        }
    }
}

/// A response body holding `guard` until hyper is done with it: sent whole, or dropped
/// because the client went away. A WASI 0.3 guest writes its body while its store
/// runs, and the store runs until then (the guard a oneshot sender, whose receiver
/// hears it go); a connection counts a request in flight until then (the guard its
/// `Busy`).
pub(crate) struct Holding<G> {
    inner: ResponseBody,
    _guard: G,
}

impl<G: Send + Unpin + 'static> Holding<G> {
    /// `inner`, holding `guard`, as a response body.
    pub(crate) fn body(inner: ResponseBody, guard: G) -> ResponseBody {
        Holding {
            inner,
            _guard: guard,
        }
        .boxed_unsync()
    }
}

impl<G: Unpin> Body for Holding<G> {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn collect(body: Bounded<http_body_util::Full<Bytes>>) -> Result<Bytes, Error> {
        body.collect().await.map(|c| c.to_bytes())
    }

    #[tokio::test]
    async fn a_body_within_its_bound_passes_whole_and_one_past_it_errs_and_says_so() {
        let state = Arc::new(BodyState::default());
        let within = Bounded::request(
            http_body_util::Full::new(Bytes::from_static(b"12345")),
            5,
            Arc::clone(&state),
        );
        assert_eq!(collect(within).await.unwrap(), Bytes::from_static(b"12345"));
        assert!(!state.went_over() && !state.stalled());

        let past = Bounded::request(
            http_body_util::Full::new(Bytes::from_static(b"123456")),
            5,
            Arc::clone(&state),
        );
        assert!(matches!(
            collect(past).await,
            Err(Error::HttpRequestBodySize(Some(5)))
        ));
        assert!(state.went_over());

        let response = Bounded::response(http_body_util::Full::new(Bytes::from(vec![0; 10])), 9);
        assert!(matches!(
            collect(response).await,
            Err(Error::HttpResponseBodySize(Some(9)))
        ));
    }

    #[tokio::test]
    async fn a_body_whose_bytes_do_not_come_says_its_reader_waits() {
        /// A body whose frames come from a channel.
        struct Trickle(tokio::sync::mpsc::Receiver<Bytes>);
        impl Body for Trickle {
            type Data = Bytes;
            type Error = Error;
            fn poll_frame(
                mut self: Pin<&mut Self>,
                cx: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
                self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
            }
        }
        let (sender, incoming) = tokio::sync::mpsc::channel(1);
        let state = Arc::new(BodyState::default());
        let mut body = Bounded::request(Trickle(incoming), 100, Arc::clone(&state));
        sender.send(Bytes::from_static(b"abc")).await.unwrap();
        assert_eq!(
            body.frame().await.unwrap().unwrap().into_data().unwrap(),
            Bytes::from_static(b"abc")
        );
        assert!(!state.stalled());
        let more = tokio::time::timeout(std::time::Duration::from_millis(20), body.frame()).await;
        assert!(
            more.is_err() && state.stalled(),
            "waiting for bytes that do not come"
        );
        drop(sender);
        assert!(body.frame().await.is_none());
        assert!(!state.stalled());
    }

    #[test]
    fn a_body_is_whole_at_its_declared_length_and_not_past_it() {
        let data = |n: usize| Frame::data(Bytes::from(vec![0u8; n]));
        let mut tally = Tally::new(Some(10));
        assert_eq!(tally.frame(&data(4)), Tallied::Going);
        assert!(!tally.ended_whole(), "short");
        assert_eq!(tally.frame(&data(6)), Tallied::Whole);
        assert!(tally.ended_whole());
        let mut over = Tally::new(Some(5));
        assert_eq!(over.frame(&data(10)), Tallied::Over);
        assert!(!over.ended_whole());
        let mut open = Tally::new(None);
        assert_eq!(open.frame(&data(1 << 20)), Tallied::Going);
        assert!(open.ended_whole(), "any length, none declared");
        let trailers = Frame::<Bytes>::trailers(hyper::HeaderMap::new());
        assert_eq!(Tally::new(Some(0)).frame(&trailers), Tallied::Whole);
    }

    #[test]
    fn a_poll_says_when_the_body_is_over_and_whether_whole() {
        type Polled = Poll<Option<Result<Frame<Bytes>, ()>>>;
        let data =
            |n: usize| -> Polled { Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![0u8; n]))))) };
        let mut tally = Tally::new(Some(10));
        assert_eq!(tally.polled::<()>(&Poll::Pending), None);
        assert_eq!(tally.polled(&data(4)), None);
        assert_eq!(tally.polled(&data(6)), Some(true));
        let mut short = Tally::new(Some(10));
        assert_eq!(short.polled(&data(4)), None);
        assert_eq!(
            short.polled::<()>(&Poll::Ready(None)),
            Some(false),
            "ended short"
        );
        assert_eq!(
            Tally::new(Some(3)).polled(&data(4)),
            Some(false),
            "past its length"
        );
        assert_eq!(
            Tally::new(None).polled::<()>(&Poll::Ready(None)),
            Some(true)
        );
        assert_eq!(
            Tally::new(None).polled::<()>(&Poll::Ready(Some(Err(())))),
            Some(false)
        );
    }

    #[tokio::test]
    async fn a_held_guard_goes_with_its_body_and_not_before() {
        let (sent, mut gone) = tokio::sync::oneshot::channel::<()>();
        let body = Holding::body(text_body("abc"), sent);
        assert!(gone
            .try_recv()
            .is_err_and(|e| e == tokio::sync::oneshot::error::TryRecvError::Empty));
        assert_eq!(
            body.collect().await.unwrap().to_bytes(),
            Bytes::from_static(b"abc")
        );
        assert!(gone.await.is_err(), "the sender went with the body");
    }
}
