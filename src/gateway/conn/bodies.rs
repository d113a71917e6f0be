//! The bodies of a connection's requests and answers: a request's held to the body deadline
//! (then the call runs untimed), an answer's tracked until it is written whole (then the
//! connection idles).

use super::*;

/// A request body that did not arrive within `gateway.body_timeout_seconds`.
#[derive(Debug)]
pub(crate) struct BodyTimeout(pub(crate) u64);

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body did not arrive within {} s (gateway.body_timeout_seconds)",
            self.0
        )
    }
}

impl std::error::Error for BodyTimeout {}

/// Whether `error` (or what caused it) is a [`BodyTimeout`].
pub(crate) fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut at = Some(error);
    while let Some(e) = at {
        if e.is::<BodyTimeout>() {
            return true;
        }
        at = e.source();
    }
    false
}

/// A request's body, held to the body deadline; read to its end (or dropped), the call
/// runs untimed.
pub(in crate::gateway) struct TimedBody {
    inner: Incoming,
    conn: Arc<Conn>,
    deadline: Instant,
    timer: Option<Pin<Box<Sleep>>>,
}

impl TimedBody {
    pub(in crate::gateway) fn new(inner: Incoming, conn: Arc<Conn>) -> Self {
        let deadline = Instant::now() + conn.timeouts.body;
        TimedBody {
            inner,
            conn,
            deadline,
            timer: None,
        }
    }

    fn arrived(&self) {
        self.conn.change(Phase::Body, Phase::Busy);
    }
}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(None) => {
                this.arrived();
                Poll::Ready(None)
            }
            Poll::Ready(Some(frame)) => {
                if this.inner.is_end_stream() {
                    this.arrived();
                }
                Poll::Ready(Some(frame.map_err(Into::into)))
            }
            Poll::Pending if passed(&mut this.timer, this.deadline, cx) => {
                let seconds = this.conn.timeouts.body.as_secs();
                Poll::Ready(Some(Err(Box::new(BodyTimeout(seconds)))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for TimedBody {
    fn drop(&mut self) {
        self.arrived();
    }
}

/// An answer's body; once written whole (or given up), the connection idles.
pub(in crate::gateway) struct Tracked {
    inner: axum::body::Body,
    request: Option<InProgress>,
}

impl Tracked {
    pub(in crate::gateway) fn new(inner: axum::body::Body, request: InProgress) -> Self {
        Tracked {
            inner,
            request: Some(request),
        }
    }
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(frame, Poll::Ready(None)) {
            this.request = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
