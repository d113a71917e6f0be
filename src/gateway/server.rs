//! The server: routes, start, and a graceful stop (new calls answered 503 while running calls
//! and streams finish, up to `gateway.drain_seconds`; bill what they delivered, flush the
//! ledger).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::Uri;
use axum::http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

use super::admin;
use super::dashboard;
use super::descriptors;
use super::fallback::model_call;
use super::health;
use super::keys;
use super::listen::{self, Listening};
use super::metrics::Metrics;
use super::otel_export;
use super::proxy::App;
use super::shape::{json_response, Endpoint, Problem};
use super::threads;
use super::upstream;
use crate::ceiling::HttpShape;
use crate::error::{Error, Result};
use crate::guard::engine::guard::Guard;
use crate::guard::store::StoreCheck;

/// How to run a gateway.
#[derive(Debug, Clone, Default)]
pub struct GatewayOptions {
    /// `HOST:PORT` to listen on (port 0: any free port).
    pub listen: String,
    /// Serve only the dashboard, the admin API and the health checks (no model endpoints,
    /// so no provider keys needed): `usage-guard dashboard` for a library deployment.
    pub dashboard_only: bool,
}

/// Set once the server has stopped. A thread may wait here for the gateway's whole life:
/// `std`'s condvar, like every lock of the crate, leaves nothing behind in a forked child
/// (`crate::lock`).
#[derive(Default)]
struct Stopped {
    done: crate::lock::Mutex<bool>,
    changed: crate::lock::Condvar,
}

/// A running gateway. Dropping it does not stop it: call [`Gateway::shutdown`].
pub struct Gateway {
    address: SocketAddr,
    app: Arc<App>,
    stop: tokio::sync::watch::Sender<bool>,
    stopped: Arc<Stopped>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("address", &self.address)
            .finish()
    }
}

fn routes(app: Arc<App>, dashboard_only: bool) -> Router {
    let mut router = Router::new();
    if !dashboard_only {
        for endpoint in Endpoint::ALL {
            router = router.route(
                endpoint.path,
                post(
                    move |State(app): State<Arc<App>>, headers: HeaderMap, body: Body| async move {
                        model_call(app, endpoint, headers, body).await
                    },
                ),
            );
        }
        router = router.route("/v1/models", get(models));
    }
    router
        .route("/healthz", get(healthz))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .route("/admin/control/effective", get(admin::effective))
        .route("/admin/usage", get(admin::usage))
        .route(
            "/admin/policy",
            get(admin::get_policy).put(admin::put_policy),
        )
        .route("/admin/recover", post(admin::recover))
        .merge(dashboard::routes())
        .route("/admin/providers/{id}/probe", post(health::probe))
        .route("/admin/keys", get(admin::list_keys))
        .route(
            "/admin/keys/{label}",
            axum::routing::put(admin::put_key).delete(admin::delete_key),
        )
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            admin::gate,
        ))
        .with_state(app)
}

/// The routes of a connection accepted past `gateway.max_connections`: the health checks
/// answer; every other path is 503 in its endpoint's shape (OpenAI's elsewhere).
fn health_routes(app: Arc<App>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(ready))
        .fallback(|uri: Uri| async move {
            let shape = Endpoint::ALL
                .iter()
                .find(|e| e.path == uri.path())
                .map_or(HttpShape::OpenAi, |e| e.shape);
            let message = "The gateway is at its connection limit (gateway.max_connections); \
                           retry shortly";
            Problem::Busy.response(shape, message)
        })
        .with_state(app)
}

/// `GET /healthz`: 200 while the process runs.
async fn healthz() -> Response<Body> {
    json_response(StatusCode::OK, &json!({"status": "ok"}))
}

impl Gateway {
    /// Starts serving `guard` (its policy's `[providers.*]` and `[gateway]`) on
    /// `gateway.threads` threads of its own (one per core by default). Fails when the address
    /// cannot be bound or a provider's `api_key_env` is not set.
    pub fn start(guard: Guard, options: GatewayOptions) -> Result<Gateway> {
        if options.dashboard_only {
            check_admin_token(&guard)?;
        } else {
            upstream::check_keys(&guard.policy())?;
        }
        let listener = std::net::TcpListener::bind(&options.listen)
            .and_then(|l| l.set_nonblocking(true).map(|_| l))
            .map_err(|e| {
                Error::invalid("listen", &options.listen, format!("cannot listen: {e}"))
            })?;
        let address = listener
            .local_addr()
            .map_err(|e| Error::invalid("listen", &options.listen, e.to_string()))?;
        let descriptors = descriptors::raise_limit();
        let configured = guard.policy().gateway.bounds.max_connections;
        let cap = descriptors::connection_cap(configured, descriptors)?;
        let metrics = Arc::new(Metrics::default());
        let otel = otel_export::start(&guard.policy().gateway.otel, guard.clone(), metrics.clone());
        let app = Arc::new(App {
            upstreams: guard.policy().providers.clone(),
            guard,
            client: upstream::client()?,
            metrics,
            otel,
            draining: AtomicBool::new(false),
            calls: AtomicUsize::new(0),
        });
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let stopped = Arc::new(Stopped::default());
        let router = routes(app.clone(), options.dashboard_only);
        let listening = Arc::new(Listening::new(
            router,
            health_routes(app.clone()),
            app.clone(),
            cap as usize,
        ));
        let threads = app.guard.policy().gateway.threads.map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            |n| n as usize,
        );
        let finish = {
            let (app, done) = (app.clone(), stopped.clone());
            move || finish(&app, &done)
        };
        let serving = app.clone();
        threads::spawn(listener, threads, finish, move |seat| {
            serve(seat, listening.clone(), serving.clone(), stopping.clone())
        })
        .map_err(|e| Error::invalid("listen", &options.listen, e.to_string()))?;
        if options.dashboard_only {
            log::info!("usage-guard dashboard on http://{address}/dashboard");
        } else {
            log::info!(
                "usage-guard gateway listening on http://{address} ({} keys, at most {cap} \
                 connections, upstreams: {})",
                app.guard.policy().gateway.keys.len(),
                app.guard
                    .policy()
                    .providers
                    .iter()
                    .map(|u| u.provider.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Ok(Gateway {
            address,
            app,
            stop,
            stopped,
        })
    }

    /// The address the gateway listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The Prometheus text of `GET /metrics`.
    pub fn metrics_text(&self) -> String {
        self.app.metrics.render(&self.app.guard) + &health::metrics_text(&self.app.guard)
    }

    /// Stops taking calls (new ones are answered 503 in their provider's shape, the port
    /// kept open) and lets running ones finish (up to `gateway.drain_seconds`);
    /// returns at once. [`Gateway::wait`] tells when it has stopped.
    pub fn shutdown(&self) {
        self.app.draining.store(true, Ordering::Relaxed);
        let _ = self.stop.send(true);
    }

    /// Waits up to `timeout` (forever when `None`) for the gateway to stop; true once it
    /// has.
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
        let done = self.stopped.done.lock();
        let (done, _) = self
            .stopped
            .changed
            .wait_while(done, timeout, |done| !*done);
        *done
    }
}

/// A dashboard nobody can sign in to is refused: the policy must name the admin token's
/// variable (`gateway.admin_token_env`) and the variable must be set.
fn check_admin_token(guard: &Guard) -> Result<()> {
    let policy = guard.policy();
    if admin::admin_token(&policy).is_some() {
        return Ok(());
    }
    let var = policy.gateway.admin_token_env.clone();
    let message = match &var {
        Some(v) => format!("${v} is not set: it is the dashboard's sign-in token"),
        None => "the policy names no admin token: set [gateway] admin_token_env".to_string(),
    };
    Err(Error::invalid(
        "gateway.admin_token_env",
        var.as_deref().unwrap_or(""),
        message,
    ))
}

/// Serves on one thread until a stop is asked, then drains (up to `gateway.drain_seconds`).
async fn serve(
    seat: threads::Seat,
    listening: Arc<Listening>,
    server_app: Arc<App>,
    stopping: tokio::sync::watch::Receiver<bool>,
) {
    let deadline = listen::serve(seat, listening, stopping).await;
    // Calls whose client went away still run while their provider works: they are billed
    // when it answers (this thread's runtime must live until then).
    while server_app.calls.load(Ordering::Acquire) > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// After the last serving thread ended: lets the streams cut off bill, flushes the ledger
/// and marks the gateway stopped.
fn finish(app: &App, done: &Stopped) {
    // Streams cut off bill in the background: give them a moment to land.
    std::thread::sleep(Duration::from_millis(50));
    if let Some(otel) = &app.otel {
        otel.stop();
    }
    let _ = app.guard.close();
    *done.done.lock() = true;
    done.changed.notify_all();
}

/// `GET /v1/models`: the policy's models the key may call, in OpenAI's list shape.
async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> Response<Body> {
    let policy = app.guard.policy();
    let key = match keys::authenticate(&policy, &headers) {
        Ok(k) => k,
        Err(message) => return Problem::Unauthorized.response(HttpShape::OpenAi, message),
    };
    let data: Vec<Value> = policy
        .models
        .iter()
        .filter(|m| key.models.as_ref().is_none_or(|ms| ms.iter().any(|id| **id == *m.id)))
        .map(|m| {
            json!({"id": &*m.id, "object": "model", "created": 0, "owned_by": m.provider.as_str()})
        })
        .collect();
    json_response(StatusCode::OK, &json!({"object": "list", "data": data}))
}

/// `GET /readyz`: 200 when the counter store answers and its state is trusted.
async fn ready(State(app): State<Arc<App>>) -> Response<Body> {
    let store = app.guard.store();
    let epoch = store.epoch().await;
    let check = store.store_check(false).await;
    // The epoch this guard trusts ("" before its first fenced reserve): a store that lost
    // it (restart, failover, flush) is not ready until an operator recovers.
    let trusted = app.guard.shared.epoch.generation();
    let lost = |e: &crate::guard::store::EpochRead| {
        (e.generation.is_some() && !e.trusted)
            || (!trusted.is_empty() && e.generation.as_deref() != Some(trusted.as_str()))
    };
    let (ok, why) = match (&epoch, &check) {
        (Err(e), _) => (false, format!("the counter store does not answer: {e}")),
        (Ok(e), _) if lost(e) => (
            false,
            "the counter store lost its state (epoch fence): recover it".to_string(),
        ),
        (_, Ok(StoreCheck::Failed)) => (false, "a store check failed".to_string()),
        (_, Err(e)) => (false, format!("the store checks do not answer: {e}")),
        _ => (true, "ready".to_string()),
    };
    let draining = app.draining.load(Ordering::Relaxed);
    let status = if ok && !draining {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let why = if draining {
        "shutting down".to_string()
    } else {
        why
    };
    json_response(
        status,
        &json!({"ready": status == StatusCode::OK, "status": why}),
    )
}

/// `GET /metrics`: Prometheus text.
async fn metrics(State(app): State<Arc<App>>) -> Response<Body> {
    let text = app.metrics.render(&app.guard) + &health::metrics_text(&app.guard);
    let mut response = Response::new(Body::from(text));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}
