//! The one tokio runtime of the process, built lazily: stores that talk over the network
//! drive their connections on it, and the Python layer runs its coroutines on it.

use std::sync::OnceLock;

/// The shared multi-threaded runtime (2 worker threads are plenty: the work is I/O).
pub fn shared() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("usage-guard")
            .enable_all()
            .build()
            .expect("the tokio runtime starts")
    })
}
