//! Accepting on one serving thread. Each connection is served by hyper's HTTP/1 server on
//! this thread, its socket held to the header and idle deadlines and its request bodies to
//! the body deadline (`conn`). The accept loop never waits on a connection: past
//! `gateway.max_connections`, a few more are accepted for `/healthz` and `/readyz` only
//! (every other path answers 503 at once), and past those a new connection is closed as
//! soon as it is accepted. On a stop the listener stays open through the drain: new calls
//! are answered 503 in their provider's shape with `Retry-After`, not refused by the
//! kernel, until the running calls and streams are done (or `gateway.drain_seconds`).
//! Then, on every thread at once, the kernel stops completing new connections (their
//! clients are refused a moment later, by a closed port), and the listener still takes and
//! answers those it had queued or was completing until none is left: closing a listener
//! resets the connections queued on it, so a client is either answered or refused before
//! it was ever accepted.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderValue, Request, StatusCode};
use axum::Router;
use hyper::body::Incoming;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower_service::Service;

use super::conn::{Conn, Counts, TimedBody, Timeouts, Tracked, Watched};
use super::descriptors::HEALTH_CONNECTIONS;
use super::proxy::App;
use super::threads::{Load, Seat};

/// The longest a connection kept for `/healthz` past the cap may take to send its
/// headers: it holds one of only a few places.
const HEALTH_HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a drain looks whether the calls are done.
const DRAIN_TICK: Duration = Duration::from_millis(10);
/// Once the drain is over, how long the listener still waits for handshakes under way (a
/// round trip on a slow network); at most [`HEALTH_HEADER_TIMEOUT`] after that for the
/// calls of the connections it took then.
const HANDSHAKE_GRACE: Duration = Duration::from_millis(100);
/// At most one warning this often that the cap was reached.
const WARN_EVERY_MS: u64 = 10_000;

/// What every serving thread's accept loop shares.
pub(super) struct Listening {
    /// Every route.
    pub(super) router: Router,
    /// The routes of a connection past the cap: `/healthz`, `/readyz`; 503 for the rest.
    pub(super) health: Router,
    pub(super) app: Arc<App>,
    pub(super) counts: Arc<Counts>,
    /// `gateway.max_connections` in force (read at start).
    pub(super) cap: usize,
    /// Set by the first thread to see the drain over: every thread then stops taking new
    /// connections at once.
    over: watch::Sender<bool>,
    started: Instant,
    warned_ms: AtomicU64,
}

impl Listening {
    pub(super) fn new(router: Router, health: Router, app: Arc<App>, cap: usize) -> Self {
        Listening {
            router,
            health,
            app,
            counts: Arc::new(Counts::default()),
            cap,
            over: watch::channel(false).0,
            started: Instant::now(),
            warned_ms: AtomicU64::new(0),
        }
    }

    /// Whether no request is in progress and no model call runs.
    fn drained(&self) -> bool {
        self.counts.busy.load(Ordering::Acquire) == 0 && self.app.calls.load(Ordering::Acquire) == 0
    }

    fn timeouts(&self) -> Timeouts {
        let policy = self.app.guard.policy();
        let b = &policy.gateway.bounds;
        Timeouts {
            header: Duration::from_secs(b.header_timeout_seconds),
            body: Duration::from_secs(b.body_timeout_seconds),
            idle: Duration::from_secs(b.idle_timeout_seconds),
        }
    }

    /// Serves `stream` on this thread (counted by `load` while open), as far as the cap
    /// allows; `stop` is the shutdown signal (`draining`: it was given already).
    fn take(&self, stream: TcpStream, load: Load, stop: &watch::Receiver<bool>, draining: bool) {
        // Connections accepted earlier and still on their way to another thread count too:
        // a burst accepted faster than that thread takes them is not let past the cap.
        let open = self.counts.open.load(Ordering::Acquire)
            + load.peers.in_transit.load(Ordering::Acquire);
        let mut timeouts = self.timeouts();
        let router = if open < self.cap {
            self.router.clone()
        } else if open < self.cap + HEALTH_CONNECTIONS as usize {
            self.refused("health_only");
            timeouts.header = timeouts.header.min(HEALTH_HEADER_TIMEOUT);
            self.health.clone()
        } else {
            self.refused("closed");
            return;
        };
        let _ = stream.set_nodelay(true);
        let conn = Conn::new(timeouts, self.counts.clone());
        let keep_alive = !draining && open < self.cap;
        let stop = (!draining).then(|| stop.clone());
        let app = self.app.clone();
        tokio::spawn(connection(
            stream, conn, load, router, app, keep_alive, stop,
        ));
    }

    /// Counts a connection past the cap, and warns (now and then) that the cap is reached.
    fn refused(&self, how: &'static str) {
        let metrics = &self.app.metrics;
        metrics.count("usage_guard_gateway_connections_refused", &[("how", how)]);
        // 0: never warned (the clock starts at 1 ms).
        let now = self.started.elapsed().as_millis() as u64 + 1;
        let last = self.warned_ms.load(Ordering::Relaxed);
        let due = last == 0 || now >= last + WARN_EVERY_MS;
        if due
            && self
                .warned_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            log::warn!(
                "gateway: {} connections open, the cap (gateway.max_connections); new \
                 ones are refused",
                self.cap
            );
        }
    }
}

/// Serves one connection until it ends. `stop`: asks an open connection to finish its
/// request and close when the gateway stops (`None` for one accepted while draining).
async fn connection(
    stream: TcpStream,
    conn: Arc<Conn>,
    load: Load,
    router: Router,
    app: Arc<App>,
    keep_alive: bool,
    stop: Option<watch::Receiver<bool>>,
) {
    let (on, state, load) = (conn.clone(), conn.clone(), Arc::new(load));
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let has_body = !hyper::body::Body::is_end_stream(request.body());
        let in_progress = on.request_started(has_body, load.started());
        let request = request.map(|body| TimedBody::new(body, on.clone()));
        let answer = router.clone().call(request);
        let draining = app.draining.load(Ordering::Relaxed);
        let (load, app) = (load.clone(), app.clone());
        async move {
            let Ok(mut response) = answer.await;
            // A body that came too slowly is not read on: nothing more is taken from it. A
            // thread crowded by its connections' calls lets one go (spread.rs).
            let spread = load.crowded();
            if spread {
                app.metrics
                    .count("usage_guard_gateway_connections_spread", &[]);
            }
            if draining || spread || response.status() == StatusCode::REQUEST_TIMEOUT {
                let close = HeaderValue::from_static("close");
                response.headers_mut().insert("connection", close);
            }
            Ok::<_, Infallible>(response.map(|body| Tracked::new(body, in_progress)))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.keep_alive(keep_alive);
    let served = builder.serve_connection(Watched::new(stream, conn), service);
    tokio::pin!(served);
    let Some(mut stop) = stop else {
        let _ = served.await;
        return;
    };
    tokio::select! {
        _ = served.as_mut() => return,
        _ = stop.wait_for(|s| *s) => {}
    }
    // An idle kept-alive connection closes now; one whose request may be on its way is
    // answered first (503, closing the connection: the drain has begun), not cut before
    // its request is read.
    if !state.awaits_request() {
        served.as_mut().graceful_shutdown();
    }
    let _ = served.await;
}

/// Accepts on `seat`'s listener (and takes the connections handed to it) until a stop is
/// asked, then through the drain: until no request is in progress and no call runs, or
/// `gateway.drain_seconds`. Then it takes what the kernel had queued or was completing (no
/// new connection is completed) until every thread's connections have ended. Returns the
/// drain's end.
pub(super) async fn serve(
    mut seat: Seat,
    listening: Arc<Listening>,
    mut stopping: watch::Receiver<bool>,
) -> tokio::time::Instant {
    let signal = stopping.clone();
    loop {
        tokio::select! {
            accepted = seat.listener.accept() => accept(&listening, &seat, accepted, &signal, false).await,
            Some(stream) = seat.inbox.recv() => handed(&listening, &seat, stream, &signal, false),
            _ = stopping.wait_for(|s| *s) => break,
        }
    }
    listening.app.draining.store(true, Ordering::Relaxed);
    let drain = listening.app.guard.policy().gateway.drain_seconds;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(drain);
    let mut tick = tokio::time::interval(DRAIN_TICK);
    let mut over = listening.over.subscribe();
    loop {
        tokio::select! {
            accepted = seat.listener.accept() => accept(&listening, &seat, accepted, &signal, true).await,
            Some(stream) = seat.inbox.recv() => handed(&listening, &seat, stream, &signal, true),
            _ = over.wait_for(|o| *o) => break,
            _ = tick.tick() => {
                let late = tokio::time::Instant::now() >= deadline;
                // The thread that ends the drain says so (once) when it was cut off.
                let first = (listening.drained() || late) && !listening.over.send_replace(true);
                if first && late {
                    log::warn!(
                        "gateway: calls still running after {drain} s of draining are cut \
                         off (and billed for what they delivered)"
                    );
                }
            }
        }
    }
    refuse_new_connections(&seat.listener);
    let now = tokio::time::Instant::now();
    let (grace, end) = (
        now + HANDSHAKE_GRACE,
        deadline.max(now + HEALTH_HEADER_TIMEOUT),
    );
    loop {
        tokio::select! {
            accepted = seat.listener.accept() => accept(&listening, &seat, accepted, &signal, true).await,
            Some(stream) = seat.inbox.recv() => handed(&listening, &seat, stream, &signal, true),
            _ = tick.tick() => {
                let now = tokio::time::Instant::now();
                let open = listening.counts.open.load(Ordering::Acquire)
                    + seat.peers.in_transit.load(Ordering::Acquire);
                if (now >= grace && open == 0) || now >= end {
                    return deadline;
                }
            }
        }
    }
}

/// Has the kernel drop the SYN of every new connection to `listener` while the handshakes
/// under way still complete, so that nothing is queued on it that its close would reset:
/// the client's stack sends its SYN again a second later and is refused by then (a closed
/// port). Linux only; elsewhere the listener closes as it is.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn refuse_new_connections(listener: &TcpListener) {
    use std::os::fd::AsRawFd;
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    // Classic BPF over the segment from its TCP header: byte 13 holds the flags; a SYN
    // without ACK is dropped (kept length 0), every other segment kept whole.
    let mut program = [
        op(0x30, 0, 0, 13),       // ld  byte [13]
        op(0x54, 0, 0, 0x12),     // and #(SYN | ACK)
        op(0x15, 0, 1, 0x02),     // jeq #SYN → drop, else → keep
        op(0x06, 0, 0, 0),        // ret #0
        op(0x06, 0, 0, u32::MAX), // ret #all
    ];
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: `fprog` and the program it points at outlive the call (the kernel copies
    // them); the descriptor is the listener's, open while it is borrowed.
    let set = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if set != 0 {
        let e = std::io::Error::last_os_error();
        log::warn!("gateway: new connections cannot be stopped before the listener closes: {e}");
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) fn refuse_new_connections(_listener: &TcpListener) {}

/// Serves a connection `seat` accepted, here or on the thread with the fewest open
/// connections (while draining, here: it is answered at once).
async fn accept(
    listening: &Listening,
    seat: &Seat,
    accepted: std::io::Result<(TcpStream, std::net::SocketAddr)>,
    stop: &watch::Receiver<bool>,
    draining: bool,
) {
    match accepted {
        Ok((stream, _)) => {
            let placed = if draining {
                Ok((stream, seat.count()))
            } else {
                seat.place(stream)
            };
            if let Ok((stream, load)) = placed {
                listening.take(stream, load, stop, draining);
            }
        }
        Err(e) => {
            // Out of descriptors (or memory) for a moment: accept again shortly rather
            // than spin.
            log::warn!("gateway: accepting a connection failed: {e}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Serves a connection another thread handed to this one.
fn handed(
    listening: &Listening,
    seat: &Seat,
    stream: std::net::TcpStream,
    stop: &watch::Receiver<bool>,
    draining: bool,
) {
    if let Some((stream, load)) = seat.handed(stream) {
        listening.take(stream, load, stop, draining);
    }
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use std::io::{Read, Write};
    use std::time::Duration;

    use tokio::io::AsyncReadExt;

    /// After `refuse_new_connections` a connect is not completed (its SYN is dropped, so
    /// it is still waiting when given up), while a connection queued before it is taken
    /// whole, its bytes passing both ways.
    #[tokio::test]
    async fn a_listener_refusing_new_connections_completes_none_and_keeps_its_queue() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut queued = std::net::TcpStream::connect(address).unwrap();
        super::refuse_new_connections(&listener);
        let late = std::net::TcpStream::connect_timeout(&address, Duration::from_millis(300));
        assert_eq!(late.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
        let (mut taken, _) = listener.accept().await.unwrap();
        queued.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        taken.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        tokio::io::AsyncWriteExt::write_all(&mut taken, b"pong")
            .await
            .unwrap();
        queued.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"pong");
    }
}
