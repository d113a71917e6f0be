//! Accepting on one serving thread. Each connection is served by hyper's HTTP/1 server on
//! this thread, its socket held to the header and idle deadlines and its request bodies to
//! the body deadline (`conn`). The accept loop never waits on a connection: past
//! `gateway.max_connections`, a few more are accepted for `/healthz` and `/readyz` only
//! (every other path answers 503 at once), and past those a new connection is closed as
//! soon as it is accepted. On a stop the listener stays open through the drain: new calls
//! are answered 503 in their provider's shape with `Retry-After`, not refused by the
//! kernel, until the running calls and streams are done (or `gateway.drain_seconds`).

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

/// The longest a connection kept for `/healthz` past the cap may take to send its
/// headers: it holds one of only a few places.
const HEALTH_HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a drain looks whether the calls are done.
const DRAIN_TICK: Duration = Duration::from_millis(10);
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

    /// Serves `stream` on this thread, as far as the cap allows; `stop` is the shutdown
    /// signal (`draining`: it was given already).
    fn take(&self, stream: TcpStream, stop: &watch::Receiver<bool>, draining: bool) {
        let open = self.counts.open.load(Ordering::Acquire);
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
        tokio::spawn(connection(stream, conn, router, app, keep_alive, stop));
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
    router: Router,
    app: Arc<App>,
    keep_alive: bool,
    stop: Option<watch::Receiver<bool>>,
) {
    let on = conn.clone();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let in_progress = on.request_started(!hyper::body::Body::is_end_stream(request.body()));
        let request = request.map(|body| TimedBody::new(body, on.clone()));
        let answer = router.clone().call(request);
        let draining = app.draining.load(Ordering::Relaxed);
        async move {
            let Ok(mut response) = answer.await;
            // A body that came too slowly is not read on: nothing more is taken from it.
            if draining || response.status() == StatusCode::REQUEST_TIMEOUT {
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
        _ = stop.wait_for(|s| *s) => served.as_mut().graceful_shutdown(),
    }
    let _ = served.await;
}

/// Accepts on `listener` until a stop is asked, then through the drain: until no request
/// is in progress and no call runs, or `gateway.drain_seconds`. Returns the drain's end.
pub(super) async fn serve(
    listener: TcpListener,
    listening: Arc<Listening>,
    mut stopping: watch::Receiver<bool>,
) -> tokio::time::Instant {
    let signal = stopping.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => accept(&listening, accepted, &signal, false).await,
            _ = stopping.wait_for(|s| *s) => break,
        }
    }
    listening.app.draining.store(true, Ordering::Relaxed);
    let drain = listening.app.guard.policy().gateway.drain_seconds;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(drain);
    let mut tick = tokio::time::interval(DRAIN_TICK);
    loop {
        tokio::select! {
            accepted = listener.accept() => accept(&listening, accepted, &signal, true).await,
            _ = tick.tick() => {
                if listening.drained() {
                    return deadline;
                }
                if tokio::time::Instant::now() >= deadline {
                    log::warn!(
                        "gateway: calls still running after {drain} s of draining are cut \
                         off (and billed for what they delivered)"
                    );
                    return deadline;
                }
            }
        }
    }
}

async fn accept(
    listening: &Listening,
    accepted: std::io::Result<(TcpStream, std::net::SocketAddr)>,
    stop: &watch::Receiver<bool>,
    draining: bool,
) {
    match accepted {
        Ok((stream, _)) => listening.take(stream, stop, draining),
        Err(e) => {
            // Out of descriptors (or memory) for a moment: accept again shortly rather
            // than spin.
            log::warn!("gateway: accepting a connection failed: {e}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
