//! The gateway's serving threads. Each runs its own one-thread tokio runtime accepting on
//! the one listening socket, so a call (its request, admission, the upstream connection and
//! the answer relayed back, event by event) stays on the thread that accepted it. On a small
//! machine every hand-off between threads is a wake-up that may wait for a core: at 500
//! calls/s on 2 cores those hand-offs were most of what the gateway added at p99
//! (docs/performance.md, "The gateway's added latency"). Store round trips still run on the
//! crate's shared runtime, where the store's connections live.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Starts `threads` threads, each serving `serve(listener)` on its own runtime with a clone
/// of `listener`; the last one to end runs `finish` (on its own thread, after its runtime is
/// gone). Fails when the socket cannot be cloned or no thread can be started; a thread that
/// started is never left without its share of `finish`.
pub(super) fn spawn<S, F, Fut>(
    listener: std::net::TcpListener,
    threads: usize,
    finish: F,
    serve: S,
) -> std::io::Result<()>
where
    S: Fn(tokio::net::TcpListener) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()>,
    F: FnOnce() + Send + 'static,
{
    let threads = threads.max(1);
    let listeners = (0..threads)
        .map(|_| listener.try_clone())
        .collect::<std::io::Result<Vec<_>>>()?;
    let serve = Arc::new(serve);
    let running = Arc::new(AtomicUsize::new(threads));
    let finish = Arc::new(crate::lock::Mutex::new(Some(finish)));
    for (i, listener) in listeners.into_iter().enumerate() {
        let (serve, left, finish) = (serve.clone(), running.clone(), finish.clone());
        let body = move || {
            crate::runtime::leave_signals_to_other_threads();
            serve_one(listener, &*serve);
            if left.fetch_sub(1, Ordering::AcqRel) == 1 {
                if let Some(finish) = finish.lock().take() {
                    finish();
                }
            }
        };
        let started = std::thread::Builder::new()
            .name(format!("usage-guard-gateway-{i}"))
            .spawn(body);
        if let Err(e) = started {
            // The threads that did start serve; this one's share is counted as ended.
            log::error!("gateway: serving thread {i} could not start: {e}");
            if running.fetch_sub(1, Ordering::AcqRel) == 1 {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Serves on this thread until `serve` returns.
fn serve_one<S, Fut>(listener: std::net::TcpListener, serve: &S)
where
    S: Fn(tokio::net::TcpListener) -> Fut,
    Fut: Future<Output = ()>,
{
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            log::error!("gateway: a serving thread's runtime did not start: {e}");
            return;
        }
    };
    runtime.block_on(async {
        match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => serve(listener).await,
            Err(e) => log::error!("gateway: a serving thread cannot accept: {e}"),
        }
    });
}
