//! Retries of store steps the store did not answer (settles, batch part bills), on the
//! shared runtime until the store answers or the step no longer matters: every retried step
//! is idempotent by id, so an earlier attempt that landed after all makes a retry a no-op.
//! A caller waiting for the answer (`bill(wait=True)`) hears the retry's, for a while; a bill's
//! retry keeps a place in its guard's queue, so `close()` and exit wait for it.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use crate::guard::domain::clock::Millis;
use crate::guard::engine::settle::settle_queue::RetryPlace;
use crate::guard::engine::shared::Shared;
use crate::guard::store::{CounterStore, Settle, SettleOutcome, StoreFuture};

/// The first pause between retries; it doubles up to `RETRY_MAX`.
const RETRY_FIRST: Duration = Duration::from_millis(50);
/// The longest pause between retries: a store that answers again takes the retry within it.
const RETRY_MAX: Duration = Duration::from_millis(250);
/// How long a bill that waits for its answer (`bill(wait=True)`) also waits for the background
/// retry when the first attempt failed (a pooled connection the server dropped is remade
/// within it, and a restarting server is back): past it, the bill answers "not known".
pub(crate) const WAIT_FOR_RETRY: Duration = Duration::from_secs(2);

/// Until when a failed settle is retried: one that only gives holds back, while they could
/// still count (giving back is harmless once the mark is gone: nothing is recorded then); one
/// that adds use, only while its settled mark lives (so a retry never counts twice).
fn give_up_at(settle: &Settle) -> Millis {
    if settle.adds.is_empty() {
        settle.expiry_minute * 60_000
    } else {
        settle.settled_until
    }
}

/// Retries `settle` on the shared runtime until the store answers, pausing at most
/// `RETRY_MAX` between attempts, and gives up once the settle no longer matters; `waiting`
/// hears the answer.
pub(crate) fn retry(
    shared: Arc<Shared>,
    settle: Settle,
    operation: &'static str,
    waiting: Option<Waiting<SettleOutcome>>,
) {
    let give_up = give_up_at(&settle);
    let what = format!("{operation} of {}", settle.id);
    let followers = Followers {
        waiting,
        // A bill (use to add) keeps `close()` and exit waiting; a give-back does not.
        place: (!settle.adds.is_empty()).then(|| shared.queue.retry_place()),
    };
    retry_until_answered(
        shared,
        what,
        give_up,
        settle,
        followers,
        |store, settle, now| store.settle(settle, now),
    );
}

/// Who follows a retried step.
pub(crate) struct Followers<R> {
    /// A caller waiting for its answer.
    pub(crate) waiting: Option<Waiting<R>>,
    /// Its place in the guard's queue (a bill's retry): `close()` and exit wait for it.
    pub(crate) place: Option<RetryPlace>,
}

/// A caller waiting for a retried step's answer, until `until`: then, even mid-attempt, it
/// hears `None` (not known) and the retries go on without it.
pub(crate) struct Waiting<R> {
    pub(crate) reply: tokio::sync::oneshot::Sender<Option<R>>,
    pub(crate) until: tokio::time::Instant,
}

/// A store step to retry: the store, what is retried, the time.
pub(crate) type Attempt<W, R> =
    for<'a> fn(&'a dyn CounterStore, &'a W, Millis) -> StoreFuture<'a, R>;

/// Retries `attempt` of `work` on the shared runtime until the store answers (every retried
/// step is idempotent by id, so an earlier attempt that landed after all makes it a no-op),
/// pausing from `RETRY_FIRST` doubling to `RETRY_MAX`; once `give_up` has passed, logs `what`
/// and stops. Its `followers` learn how it ends: a waiting caller hears the answer, or `None`
/// once its time is up; its queue place is left when it ends.
pub(crate) fn retry_until_answered<W, R>(
    shared: Arc<Shared>,
    what: String,
    give_up: Millis,
    work: W,
    followers: Followers<R>,
    attempt: Attempt<W, R>,
) where
    W: Send + Sync + 'static,
    R: Send + 'static,
{
    let Followers { mut waiting, place } = followers;
    crate::runtime::shared().spawn(async move {
        let _place = place;
        let mut pause = RETRY_FIRST;
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_MAX);
            let now = shared.clock.now_ms();
            let step = attempt(shared.store.as_ref(), &work, now);
            let outcome = match waiting.as_ref().map(|w| w.until) {
                None => step.await,
                Some(until) => {
                    tokio::pin!(step);
                    tokio::select! {
                        outcome = &mut step => outcome,
                        () = tokio::time::sleep_until(until) => {
                            // The caller's time is up, even mid-attempt (a hung store takes
                            // its whole timeout): it hears "not known"; the attempt goes on.
                            if let Some(late) = waiting.take() {
                                let _ = late.reply.send(None);
                            }
                            step.await
                        }
                    }
                }
            };
            match outcome {
                Ok(answer) => {
                    shared.store.as_ref().outage().answered();
                    shared.stats.settles_retried.fetch_add(1, Relaxed);
                    if let Some(waiting) = waiting {
                        let _ = waiting.reply.send(Some(answer));
                    }
                    return;
                }
                Err(e) if now >= give_up => {
                    log::error!(
                        "usage_guard: gave up retrying {what} after the store stayed \
                         unreachable: {e}"
                    );
                    return;
                }
                Err(_) => {}
            }
        }
    });
}
