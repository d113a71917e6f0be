//! One client connection's clock: what it is waiting for and since when, and the deadline
//! that follows. A new connection, or a kept-alive one whose next request has begun, must
//! send its headers within the header timeout; a request's body must arrive within the
//! body timeout; a kept-alive connection may wait for its next request for the idle
//! timeout. While a call runs (the provider works, a stream is relayed) its reads are not
//! timed here: the upstream timeout bounds that. The socket's reads enforce the header and
//! idle deadlines (a read past one fails, and the connection is closed); the request body's
//! own reads enforce the body deadline (the call answers 408). Writes are held to the idle
//! timeout too, whatever the phase: a write the client takes nothing of for that long (it
//! stopped reading, its buffers are full) fails, and the connection is closed (a stream
//! it was relaying is billed as dropped).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::task::AtomicWaker;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Sleep;

use super::spread::Busy;

mod bodies;
pub(crate) use bodies::is_body_timeout;
pub(super) use bodies::{TimedBody, Tracked};

/// What a connection is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A request's line and headers.
    Head = 0,
    /// The next request on a kept-alive connection.
    Idle = 1,
    /// A request's body.
    Body = 2,
    /// A call's answer (its reads untimed; its writes, as every write, held to the idle
    /// timeout while they make no progress).
    Busy = 3,
}

/// The gateway's connections: open ones, and those whose request is in progress (a
/// shutdown drains until none is).
#[derive(Debug, Default)]
pub(super) struct Counts {
    pub(super) open: AtomicUsize,
    pub(super) busy: AtomicUsize,
}

/// The timeouts a connection is held to (read from the policy when it is accepted).
#[derive(Debug, Clone, Copy)]
pub(super) struct Timeouts {
    pub(super) header: Duration,
    pub(super) body: Duration,
    pub(super) idle: Duration,
}

/// One connection's phase and when it began, packed in one word (milliseconds since the
/// connection opened, shifted, and the phase) so a reader never pairs one phase with
/// another's start.
pub(super) struct Conn {
    opened: Instant,
    state: AtomicU64,
    timeouts: Timeouts,
    counts: Arc<Counts>,
    /// The socket's reader while nothing is timed: woken when the connection idles, so
    /// that it arms the idle deadline.
    reader: AtomicWaker,
}

impl Conn {
    /// A connection just accepted: waiting for its first request's headers. Counted open
    /// until dropped.
    pub(super) fn new(timeouts: Timeouts, counts: Arc<Counts>) -> Arc<Conn> {
        counts.open.fetch_add(1, Ordering::AcqRel);
        Arc::new(Conn {
            opened: Instant::now(),
            state: AtomicU64::new(Phase::Head as u64),
            timeouts,
            counts,
            reader: AtomicWaker::new(),
        })
    }

    fn now(&self) -> u64 {
        self.opened.elapsed().as_millis() as u64
    }

    fn load(&self) -> (Phase, u64) {
        let word = self.state.load(Ordering::Acquire);
        let phase = match word & 3 {
            0 => Phase::Head,
            1 => Phase::Idle,
            2 => Phase::Body,
            _ => Phase::Busy,
        };
        (phase, word >> 2)
    }

    fn set(&self, phase: Phase) {
        self.state
            .store((self.now() << 2) | phase as u64, Ordering::Release);
    }

    /// Moves from `from` to `to` (now); false when the connection was not in `from`.
    fn change(&self, from: Phase, to: Phase) -> bool {
        let word = self.state.load(Ordering::Acquire);
        if word & 3 != from as u64 {
            return false;
        }
        let next = (self.now() << 2) | to as u64;
        self.state
            .compare_exchange(word, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// When the socket must next have sent something, if it must.
    fn deadline(&self) -> Option<Instant> {
        let (phase, since) = self.load();
        let limit = match phase {
            Phase::Head => self.timeouts.header,
            Phase::Idle => self.timeouts.idle,
            Phase::Body | Phase::Busy => return None,
        };
        Some(self.opened + Duration::from_millis(since) + limit)
    }

    /// Whether a request is awaited that its client may have sent already: the first one,
    /// or the next one once its first bytes came (not an idle kept-alive connection).
    pub(super) fn awaits_request(&self) -> bool {
        self.load().0 == Phase::Head
    }

    /// A request's headers arrived: its body is timed next (not when it has none). The
    /// request is in progress (here, and on its thread: `busy`) until what this returns is
    /// dropped (with its answer's body, or before: the connection ended first).
    pub(super) fn request_started(self: &Arc<Self>, has_body: bool, busy: Busy) -> InProgress {
        self.counts.busy.fetch_add(1, Ordering::AcqRel);
        self.set(if has_body { Phase::Body } else { Phase::Busy });
        InProgress {
            conn: self.clone(),
            _busy: busy,
        }
    }
}

/// A request in progress on its connection; dropped, the connection idles.
pub(super) struct InProgress {
    conn: Arc<Conn>,
    _busy: Busy, // kept for its drop: the call ends on its thread too
}

impl Drop for InProgress {
    fn drop(&mut self) {
        let conn = &self.conn;
        conn.counts.busy.fetch_sub(1, Ordering::AcqRel);
        conn.set(Phase::Idle);
        conn.reader.wake();
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.counts.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `deadline` armed on `timer` (made on first use); whether it has passed.
fn passed(timer: &mut Option<Pin<Box<Sleep>>>, deadline: Instant, cx: &mut Context<'_>) -> bool {
    let deadline = tokio::time::Instant::from_std(deadline);
    let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
    if timer.deadline() != deadline {
        timer.as_mut().reset(deadline);
    }
    timer.as_mut().poll(cx).is_ready()
}

/// The client's socket, its reads held to the connection's header and idle deadlines, its
/// writes to the idle timeout while they make no progress.
pub(super) struct Watched {
    stream: TcpStream,
    conn: Arc<Conn>,
    timer: Option<Pin<Box<Sleep>>>,
    /// Since when a write has been waiting for the client to take something (none waits).
    stalled: Option<Instant>,
    write_timer: Option<Pin<Box<Sleep>>>,
}

impl Watched {
    pub(super) fn new(stream: TcpStream, conn: Arc<Conn>) -> Self {
        Watched {
            stream,
            conn,
            timer: None,
            stalled: None,
            write_timer: None,
        }
    }

    /// A write's outcome, held to the idle timeout: a write that has waited that long
    /// without the client taking a byte fails (the connection is closed).
    fn timed_write(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match written {
            Poll::Pending => {
                let since = *self.stalled.get_or_insert_with(Instant::now);
                let deadline = since + self.conn.timeouts.idle;
                if passed(&mut self.write_timer, deadline, cx) {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client took none of its answer in time",
                    )));
                }
                Poll::Pending
            }
            done => {
                self.stalled = None;
                done
            }
        }
    }
}

impl hyper::rt::Read for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // SAFETY: as hyper-util's `TokioIo`: tokio's `ReadBuf` only writes initialized
        // bytes into the cursor's spare room, and `advance` counts exactly those.
        let n = unsafe {
            let mut read = tokio::io::ReadBuf::uninit(buf.as_mut());
            match Pin::new(&mut this.stream).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => read.filled().len(),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    // Registered before the phase is read: an idling after it wakes us.
                    this.conn.reader.register(cx.waker());
                    let late = this
                        .conn
                        .deadline()
                        .is_some_and(|d| passed(&mut this.timer, d, cx));
                    if late {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "the client sent nothing in time",
                        )));
                    }
                    return Poll::Pending;
                }
            }
        };
        if n > 0 {
            // The next request has begun: its headers are timed from here.
            this.conn.change(Phase::Idle, Phase::Head);
        }
        // SAFETY: the `n` bytes were written by the read above.
        unsafe { buf.advance(n) };
        Poll::Ready(Ok(()))
    }
}

impl hyper::rt::Write for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.timed_write(cx, written)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.timed_write(cx, written)
    }
}
