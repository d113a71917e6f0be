//! The gateway's serving threads. Each runs its own one-thread tokio runtime; every thread
//! accepts on the one listening socket, and a connection is served by the thread with the
//! fewest open connections: the thread that accepted it keeps it when none has fewer, else
//! hands it over (the socket moves to that thread's runtime before its first byte is read).
//! A connection then stays on its thread: its requests, admission, the upstream connection
//! and the answer relayed back, event by event. On a small machine every hand-off between
//! threads is a wake-up that may wait for a core: at 500 calls/s on 2 cores those hand-offs
//! were most of what the gateway added at p99 (docs/performance.md, "The gateway's added
//! latency"), so there is one per connection, none per call. Without the hand-over the
//! thread that woke first took every connection of a burst, and a burst of calls on them
//! was served one after another (issue 36). Store round trips still run on the crate's
//! shared runtime, where the store's connections live.
//!
//! Calls are spread too, not only connections (`spread.rs`).
//!
//! One socket, not one per thread (`SO_REUSEPORT`): the kernel spreads connections over
//! such sockets by a hash (uneven for a few dozen connections), a second gateway started
//! on the same port would silently share it, and a socket closed while others still serve
//! resets the connections queued on it.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

/// What the serving threads share: each one's open connections and the way to hand it one.
pub(super) struct Peers {
    /// Open connections per thread (counted from the moment one is handed over).
    pub(super) loads: Vec<AtomicUsize>,
    /// Calls each thread started lately (halved as they add up: `Load::started`).
    pub(super) recent: Vec<AtomicUsize>,
    /// Calls in progress on each thread.
    pub(super) busy: Vec<AtomicUsize>,
    /// Calls each thread answered since it last closed a connection to spread them.
    pub(super) since_spread: Vec<AtomicUsize>,
    inboxes: Vec<mpsc::UnboundedSender<std::net::TcpStream>>,
    /// Connections handed over and not yet taken by their thread.
    pub(super) in_transit: AtomicUsize,
}

impl Peers {
    /// Peers of one thread per inbox, every count at zero.
    pub(super) fn new(inboxes: Vec<mpsc::UnboundedSender<std::net::TcpStream>>) -> Self {
        let threads = inboxes.len();
        let counters = || (0..threads).map(|_| AtomicUsize::new(0)).collect();
        Peers {
            loads: counters(),
            recent: counters(),
            busy: counters(),
            since_spread: counters(),
            inboxes,
            in_transit: AtomicUsize::new(0),
        }
    }
}

/// One serving thread's place: the shared listener, the connections handed to it, and the
/// other threads.
pub(super) struct Seat {
    pub(super) index: usize,
    pub(super) listener: tokio::net::TcpListener,
    pub(super) inbox: mpsc::UnboundedReceiver<std::net::TcpStream>,
    pub(super) peers: Arc<Peers>,
}

/// Counts a connection on its thread until dropped (it is moved into the connection's task),
/// and its calls on that thread.
pub(super) struct Load {
    pub(super) peers: Arc<Peers>,
    pub(super) index: usize,
}

impl Drop for Load {
    fn drop(&mut self) {
        self.peers.loads[self.index].fetch_sub(1, Ordering::AcqRel);
    }
}

impl Seat {
    /// Where `stream`, just accepted here, is served: `Ok` with its count on this thread,
    /// or `Err(())` once handed to a thread with fewer open connections.
    pub(super) fn place(
        &self,
        stream: tokio::net::TcpStream,
    ) -> Result<(tokio::net::TcpStream, Load), ()> {
        let peers = &*self.peers;
        let mine = peers.loads[self.index].load(Ordering::Acquire);
        let least = (0..peers.loads.len())
            .map(|i| (peers.loads[i].load(Ordering::Acquire), i))
            .min();
        let Some((_, to)) = least.filter(|(n, _)| *n < mine) else {
            return Ok((stream, self.count()));
        };
        let std = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                log::warn!("gateway: a connection could not be handed over: {e}");
                return Err(());
            }
        };
        peers.loads[to].fetch_add(1, Ordering::AcqRel);
        peers.in_transit.fetch_add(1, Ordering::AcqRel);
        if let Err(back) = peers.inboxes[to].send(std) {
            // That thread has ended (it never does while another serves): serve it here.
            peers.loads[to].fetch_sub(1, Ordering::AcqRel);
            peers.in_transit.fetch_sub(1, Ordering::AcqRel);
            return match tokio::net::TcpStream::from_std(back.0) {
                Ok(s) => Ok((s, self.count())),
                Err(_) => Err(()),
            };
        }
        Err(())
    }

    /// A connection counted on this thread.
    pub(super) fn count(&self) -> Load {
        self.peers.loads[self.index].fetch_add(1, Ordering::AcqRel);
        self.load()
    }

    /// This thread's `Load` for a connection already counted on it.
    fn load(&self) -> Load {
        Load {
            peers: self.peers.clone(),
            index: self.index,
        }
    }

    /// A connection handed to this thread (already counted on it), on this thread's
    /// runtime; `None` when it cannot be registered (it is closed).
    pub(super) fn handed(
        &self,
        stream: std::net::TcpStream,
    ) -> Option<(tokio::net::TcpStream, Load)> {
        self.peers.in_transit.fetch_sub(1, Ordering::AcqRel);
        let load = self.load();
        match tokio::net::TcpStream::from_std(stream) {
            Ok(s) => Some((s, load)),
            Err(e) => {
                log::warn!("gateway: a connection handed over could not be served: {e}");
                None
            }
        }
    }
}

/// Starts `threads` threads, each serving `serve(seat)` on its own runtime with a clone
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
    S: Fn(Seat) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()>,
    F: FnOnce() + Send + 'static,
{
    let threads = threads.max(1);
    let listeners = (0..threads)
        .map(|_| listener.try_clone())
        .collect::<std::io::Result<Vec<_>>>()?;
    let (inboxes, receivers): (Vec<_>, Vec<_>) =
        (0..threads).map(|_| mpsc::unbounded_channel()).unzip();
    let peers = Arc::new(Peers::new(inboxes));
    let serve = Arc::new(serve);
    let running = Arc::new(AtomicUsize::new(threads));
    let finish = Arc::new(crate::lock::Mutex::new(Some(finish)));
    for (i, (listener, inbox)) in listeners.into_iter().zip(receivers).enumerate() {
        let (serve, left, finish) = (serve.clone(), running.clone(), finish.clone());
        let seated = peers.clone();
        let body = move || {
            crate::prefer_mimalloc();
            serve_one(i, listener, inbox, seated, &*serve);
            if left.fetch_sub(1, Ordering::AcqRel) == 1 {
                if let Some(finish) = finish.lock().take() {
                    finish();
                }
            }
        };
        let started = crate::runtime::spawn_thread(format!("usage-guard-gateway-{i}"), body);
        if let Err(e) = started {
            // The threads that did start serve; this one's share is counted as ended (and,
            // its inbox gone, nothing is handed to it).
            log::error!("gateway: serving thread {i} could not start: {e}");
            peers.loads[i].store(usize::MAX / 2, Ordering::Release);
            if running.fetch_sub(1, Ordering::AcqRel) == 1 {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Serves on this thread until `serve` returns.
fn serve_one<S, Fut>(
    index: usize,
    listener: std::net::TcpListener,
    inbox: mpsc::UnboundedReceiver<std::net::TcpStream>,
    peers: Arc<Peers>,
    serve: &S,
) where
    S: Fn(Seat) -> Fut,
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
            Ok(listener) => {
                let seat = Seat {
                    index,
                    listener,
                    inbox,
                    peers,
                };
                serve(seat).await
            }
            Err(e) => log::error!("gateway: a serving thread cannot accept: {e}"),
        }
    });
}
