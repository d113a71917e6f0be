//! Settling by ticket id, so that nothing outlives its caller: a settle the store did not
//! answer (it may still land) is retried in the background until the store answers, and a
//! reservation its caller gave up on (timeout, cancel, dropped future, failed round trip) is
//! given back the same way. Settles are idempotent by id in every store, so a retry whose
//! first attempt landed after all does nothing.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use crate::guard::domain::clock::Millis;
use crate::guard::engine::settle::retry::{retry, Waiting, WAIT_FOR_RETRY};
use crate::guard::engine::settle::settle_queue::Job;
use crate::guard::engine::shared::Shared;
use crate::guard::store::{
    Fence, HoldRef, KnownAnswer, KnownReserve, Settle, SettleOutcome, StoreError, UsageAdd,
};

/// How long a call's holds live if it never settles.
pub(crate) const CALL_HOLD_MS: i64 = 15 * 60_000;
/// How long a settled mark is kept, and so how long a bill the store did not answer is
/// retried: a retry sent within it finds the mark of an attempt that landed, so it never
/// counts twice. (A ticket whose reservation never landed keeps its mark at least until its
/// holds would have expired, so a late reservation places nothing.)
pub(crate) const SETTLED_KEEP_MS: i64 = 5 * 60_000;
/// How long a queued bill waits for the next reservation to carry it before the drain sends
/// it alone (a steady stream then costs one round trip per call, not two).
const LINGER: Duration = Duration::from_millis(2);
/// The most queued bills one reservation carries (the drain sends the rest).
const CARRY_MAX: usize = 16;

/// A settle of ticket `id` (a call or a whole batch) giving back `holds` (placed under
/// `expiry_minute`) and adding `adds`, its settled mark kept `SETTLED_KEEP_MS` from `now`.
pub(crate) fn whole(
    id: &str,
    holds: Vec<HoldRef>,
    expiry_minute: i64,
    adds: Vec<UsageAdd>,
    now: Millis,
) -> Settle {
    Settle {
        id: id.to_string(),
        ticket: id.to_string(),
        holds,
        expiry_minute,
        adds,
        settled_until: settled_until(now),
    }
}

/// `settle`, a ticket's bill or release (`whole`, by the ticket's id), under an id of its own,
/// `<id>/unheld`, when it gives back no holds (a ticket admitted from the ledger after its
/// reservation's round trip failed): the failed reservation is given back by the ticket's id
/// (`InFlight`), and that settled mark would otherwise make the bill read as settled
/// already, its use never reaching the counters the next admissions read.
pub(crate) fn of_ticket(mut settle: Settle) -> Settle {
    if settle.holds.is_empty() {
        settle.id.push_str("/unheld");
    }
    settle
}

/// How long a settled mark made at `now` is kept.
pub(crate) fn settled_until(now: Millis) -> Millis {
    now + SETTLED_KEEP_MS
}

/// Settles once at `now`. A store error is counted and logged, and the settle is handed to
/// the background retry (it may have landed, or may still land: the retry is idempotent).
/// Returns `None` when the store did not answer.
pub(crate) async fn settle(
    shared: &Arc<Shared>,
    settle: Settle,
    operation: &'static str,
    now: Millis,
) -> Option<SettleOutcome> {
    match shared.store.settle(&settle, now).await {
        Ok(outcome) => {
            shared.store.as_ref().outage().answered();
            Some(outcome)
        }
        Err(e) => {
            shared.stats.settle_failures.fetch_add(1, Relaxed);
            failed(shared, operation, &e);
            retry(shared.clone(), settle, operation, None);
            None
        }
    }
}

/// Queues `settle` (a bill) on the guard's settle queue, starting its drain when none runs;
/// `reply` gets the store's answer, the background retry's when the first attempt failed
/// (`None`: not answered within `WAIT_FOR_RETRY` of that failure; retried on).
pub(crate) fn queue(shared: &Arc<Shared>, settle: Settle, reply: Option<Reply>) {
    if shared.queue.push(Job { settle, reply }) {
        crate::runtime::shared().spawn(drain(shared.clone()));
    }
}

/// The guard's one drain task: gives the next reservation `LINGER` to carry what is queued
/// (unless someone waits for it), then sends what is left in one store step, answers each
/// job, and goes on while more was queued meanwhile. A settle the store did not answer is
/// counted, logged and retried in the background like any other.
async fn drain(shared: Arc<Shared>) {
    loop {
        if !shared.queue.awaited() {
            tokio::time::sleep(LINGER).await;
        }
        let jobs = shared.queue.take();
        if jobs.is_empty() {
            return;
        }
        let (settles, replies): (Vec<Settle>, Vec<_>) =
            jobs.into_iter().map(|j| (j.settle, j.reply)).unzip();
        let now = shared.clock.now_ms();
        let answers = shared.store.settle_many(&settles, now).await;
        answer_jobs(&shared, settles, replies, answers);
    }
}

/// `reserve_known`, carrying up to `CARRY_MAX` bills queued on the guard's settle queue in
/// the same store step (Redis: one script); their jobs are answered as the drain answers
/// them. If the caller stops waiting meanwhile, the bills it took go back on the queue (by
/// ticket id: one that landed after all does nothing the second time).
pub(crate) async fn reserve_known(
    shared: &Arc<Shared>,
    reserve: KnownReserve,
    now: Millis,
    fence: Fence,
) -> Result<KnownAnswer, StoreError> {
    let Some(store) = shared.store.reserve_from_known() else {
        return Err(StoreError(
            "this counter store does not reserve from known values".into(),
        ));
    };
    let jobs = shared.queue.take_some(CARRY_MAX);
    if jobs.is_empty() {
        return store.reserve_known(reserve, now, fence).await;
    }
    let carried = Carried::new(shared, jobs);
    let step = store
        .reserve_known_carrying(reserve, &carried.settles, now, fence)
        .await;
    let (answer, settled) = match step {
        Ok((answer, settled)) => (Ok(answer), Ok(settled)),
        Err(e) => (Err(e.clone()), Err(e)),
    };
    carried.answer(settled);
    answer
}

/// Where a caller waits for a settle's answer (`None`: not known).
pub(crate) type Reply = tokio::sync::oneshot::Sender<Option<SettleOutcome>>;

/// Bills a reservation took off the queue to carry, until the store answers them.
struct Carried<'a> {
    shared: &'a Arc<Shared>,
    settles: Vec<Settle>,
    replies: Vec<Option<Reply>>,
}

impl<'a> Carried<'a> {
    fn new(shared: &'a Arc<Shared>, jobs: Vec<Job>) -> Self {
        let (settles, replies) = jobs.into_iter().map(|j| (j.settle, j.reply)).unzip();
        Carried {
            shared,
            settles,
            replies,
        }
    }

    fn answer(mut self, answers: Result<Vec<Result<SettleOutcome, StoreError>>, StoreError>) {
        let settles = std::mem::take(&mut self.settles);
        if answers.is_ok() {
            // Counted once the step answered: a bill given back (a cancelled admission) and
            // carried again rode once.
            self.shared
                .stats
                .settles_carried
                .fetch_add(settles.len() as u64, Relaxed);
        }
        let replies = std::mem::take(&mut self.replies);
        answer_jobs(self.shared, settles, replies, answers);
    }
}

/// The caller gave up while the step was in flight (a cancelled or dropped admission): the
/// bills go back on the queue, still unanswered, and the drain sends them (by ticket id: one
/// the step landed after all does nothing the second time). So a `bill(wait=True)` behind
/// one gets the store's answer, and a flush, `close()` or read of the guard's views waits for
/// it, as for any queued bill; handing them to the background retry instead answered them
/// "not known" with the store up, and let a flush end before they were sent.
impl Drop for Carried<'_> {
    fn drop(&mut self) {
        if self.settles.is_empty() {
            return;
        }
        let settles = std::mem::take(&mut self.settles);
        let replies = std::mem::take(&mut self.replies);
        let jobs = settles
            .into_iter()
            .zip(replies)
            .map(|(settle, reply)| Job { settle, reply })
            .collect();
        if self.shared.queue.requeue(jobs) {
            crate::runtime::shared().spawn(drain(self.shared.clone()));
        }
    }
}

/// Answers the jobs of `settles` (and their `replies`) with the store's `answers`: a settle
/// the store did not answer is counted, logged and handed to the background retry, with its
/// reply (a caller waiting for it hears the retry's answer, for up to `WAIT_FOR_RETRY`).
fn answer_jobs(
    shared: &Arc<Shared>,
    settles: Vec<Settle>,
    replies: Vec<Option<Reply>>,
    answers: Result<Vec<Result<SettleOutcome, StoreError>>, StoreError>,
) {
    let n = settles.len();
    let answers = match answers {
        Ok(answers) if answers.len() == n => answers,
        Ok(answers) => {
            let why = format!("{} answers for {n} settles", answers.len());
            vec![Err(StoreError(why)); n]
        }
        Err(e) => vec![Err(e); n],
    };
    for ((settle, reply), answer) in settles.into_iter().zip(replies).zip(answers) {
        match answer {
            Ok(outcome) => {
                shared.store.as_ref().outage().answered();
                if let Some(reply) = reply {
                    let _ = reply.send(Some(outcome));
                }
            }
            Err(e) => {
                shared.stats.settle_failures.fetch_add(1, Relaxed);
                failed(shared, "bill", &e);
                let waiting = reply.map(|reply| Waiting {
                    reply,
                    until: tokio::time::Instant::now() + WAIT_FOR_RETRY,
                });
                retry(shared.clone(), settle, "bill", waiting);
            }
        }
    }
    shared.queue.finished(n);
}

/// Settles in the background (from `Drop`, or for a reservation given up on): at once when
/// the store answers at once (in-memory stores), else on the shared runtime, retried until the
/// store answers or the settle no longer matters. `release` counts a failed first attempt as
/// a settle failure (a dropped ticket's release; not a give-back of a reservation whose
/// admission already failed and was counted).
pub(crate) fn in_background(
    shared: Arc<Shared>,
    settle: Settle,
    operation: &'static str,
    release: bool,
) {
    crate::runtime::run_or_spawn(async move {
        let now = shared.clock.now_ms();
        match shared.store.settle(&settle, now).await {
            Ok(_) => shared.store.as_ref().outage().answered(),
            Err(e) => {
                if release {
                    shared.stats.settle_failures.fetch_add(1, Relaxed);
                }
                failed(&shared, operation, &e);
                retry(shared, settle, operation, None);
            }
        }
    });
}

fn failed(shared: &Shared, operation: &str, error: &StoreError) {
    shared.stats.store_errors.fetch_add(1, Relaxed);
    shared.store.as_ref().outage().log_failed(operation, error);
}
