//! `throttle` rules wait in fair FIFO queues in the store (docs/quotas.md, "Queues"): a call
//! that a throttle rule refuses, or that finds another call already waiting in one of its
//! queues, joins every throttle queue of its call and is admitted only as the head of all of
//! them, so nobody jumps the queue. The head tries admission when room may have come back
//! (a ticket of this process settled, its refusal's `resets_at`, or every 20 ms for room
//! freed elsewhere); the others poll their place every 50 ms (and when a waiter of this
//! process leaves), which keeps them alive. A waiter that gives up, times out or is
//! cancelled leaves at once; a killed one lapses after 2 s.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::guard::domain::counter::CounterKey;
use crate::guard::domain::generic::{Action, GenericRule};
use crate::guard::domain::refusal::{Reason, Refusal};
use crate::guard::domain::rule::LimitType;
use crate::guard::engine::admit::admission::AdmitRequest;
use crate::guard::engine::handle::Guard;
use crate::guard::engine::settle::ticket::Ticket;
use crate::guard::engine::settle::wake::{self, seen, LEAVES, ROOMS};
use crate::guard::engine::shared::Shared;
use crate::guard::store::{CounterStore, QueueJoin, QueueSpot};

/// How long a waiter stays in a queue without polling.
const LAPSE_MS: i64 = 2_000;
const HEAD_POLL: Duration = Duration::from_millis(20);
const WAITER_POLL: Duration = Duration::from_millis(50);

/// A throttle rule of a call, with its counter and queue.
pub(super) struct QueueRule {
    pub(super) rule: Arc<GenericRule>,
    pub(super) key: CounterKey,
    name: String,
}

/// A waiter's place in its queues; leaves them when dropped (a cancelled call).
struct Place {
    shared: Arc<Shared>,
    queues: Vec<String>,
    ticket: u64,
    left: bool,
}

impl Place {
    fn new(shared: &Arc<Shared>, queues: Vec<String>, ticket: u64) -> Place {
        shared.stats.waiting.fetch_add(1, Ordering::Relaxed);
        Place {
            shared: shared.clone(),
            queues,
            ticket,
            left: false,
        }
    }

    async fn leave(mut self) {
        self.left = true;
        self.shared.stats.waiting.fetch_sub(1, Ordering::Relaxed);
        let store = self.shared.store.clone();
        leave(store, std::mem::take(&mut self.queues), self.ticket).await;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if !self.left {
            self.shared.stats.waiting.fetch_sub(1, Ordering::Relaxed);
            let queues = std::mem::take(&mut self.queues);
            let store = self.shared.store.clone();
            crate::runtime::run_or_spawn(leave(store, queues, self.ticket));
        }
    }
}

async fn leave(store: Arc<dyn CounterStore>, queues: Vec<String>, ticket: u64) {
    if let Some(q) = store.queues() {
        if let Err(e) = q.leave(queues, ticket).await {
            store.as_ref().outage().log_failed("queue leave", &e);
        }
    }
    wake::left();
}

/// Why a waiter found its place gone from its queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gone {
    /// It did not poll for `LAPSE_MS` (a stalled process): it lapsed.
    Stalled,
    /// It polled in time: the store lost the queue (a Redis restarted empty, keys deleted).
    Lost,
}

impl Gone {
    /// Why a place last kept alive at `renewed` is gone now.
    fn of(renewed: Instant) -> Gone {
        if renewed.elapsed() >= Duration::from_millis(LAPSE_MS as u64) {
            Gone::Stalled
        } else {
            Gone::Lost
        }
    }
}

/// A refusal of `rule` saying `message`.
fn queue_refusal(rule: &GenericRule, last: Option<&Refusal>, message: String) -> Refusal {
    Refusal {
        reason: Reason::LimitReached,
        limit_type: Some(LimitType::Rule),
        metric: Some(rule.spec.metric),
        amount: Some(rule.spec.amount),
        window: Some(rule.spec.window),
        resets_at: last.and_then(|r| r.resets_at),
        retry_after_seconds: last.and_then(|r| r.retry_after_seconds),
        message,
    }
}

/// Sleeps `length` on the shared runtime (the caller may be on any executor), or until
/// `wake`, or not at all when `done()` holds already.
async fn pause(length: Duration, wake: &tokio::sync::Notify, done: impl Fn() -> bool) {
    let mut notified = std::pin::pin!(wake.notified());
    // Registered before `done` is checked, so no notification falls between the two.
    notified.as_mut().enable();
    if done() {
        return;
    }
    // The sleep is made on the runtime: making it needs the runtime's timer.
    let timer = crate::runtime::shared().spawn(async move { tokio::time::sleep(length).await });
    let abort = timer.abort_handle();
    futures::future::select(notified, timer).await;
    abort.abort();
}

impl Guard {
    /// The call's throttle rules, each with its queue; none when the store has no queues.
    pub(super) fn queue_rules(&self, request: &AdmitRequest) -> Vec<QueueRule> {
        if !self.shared.ways.queues {
            return Vec::new();
        }
        let (user, model) = (request.user.as_deref(), &request.model);
        let Ok(resolved) = self.shared.resolve_with(user, model, &request.attributes) else {
            return Vec::new();
        };
        let now = self.shared.clock.now_ms();
        let path = &resolved.path;
        path.ceilings
            .iter()
            .filter_map(|r| {
                let rule = r
                    .generic
                    .as_ref()
                    .filter(|g| g.action == Action::Throttle)?;
                let id = path.counters[r.slot].clone();
                let bucket = id.window.bucket_start(now);
                Some(QueueRule {
                    rule: rule.clone(),
                    name: id.render(),
                    key: CounterKey { id, bucket },
                })
            })
            .collect()
    }

    /// Admits a call with throttle rules through their queues (see the module). Answers the
    /// outcome and whether the call waited in the queue.
    pub(super) async fn admit_queued(
        &self,
        request: AdmitRequest,
        queues: &[QueueRule],
    ) -> (Result<Ticket>, bool) {
        let started = Instant::now();
        let max_wait = queues.iter().map(|q| q.rule.throttle_max_wait_ms).min();
        let max_wait = max_wait.unwrap_or(0);
        let deadline = started + Duration::from_millis(max_wait);
        let deadline_ms = self.shared.clock.now_ms() + max_wait as i64;
        let spots: Vec<QueueSpot> = queues
            .iter()
            .map(|q| QueueSpot {
                queue: q.name.clone(),
                max_len: q.rule.throttle_max_queue,
            })
            .collect();
        let mut last = None;
        let ticket = match self.join(&spots, true).await {
            Some(QueueJoin::Joined(ticket)) => ticket,
            Some(QueueJoin::Full(i)) => return (Err(self.queue_full(&queues[i].rule)), false),
            found => {
                let first = self.admit_one(request.clone()).await;
                let refusal = match first {
                    Err(Error::Refused(r)) if found.is_some() && throttled(queues, &r) => r,
                    other => return (other, false),
                };
                if beyond(&refusal, deadline_ms) {
                    return (Err(Error::Refused(refusal)), false);
                }
                self.unrefuse();
                last = Some(refusal);
                match self.join(&spots, false).await {
                    Some(QueueJoin::Joined(ticket)) => ticket,
                    Some(QueueJoin::Full(i)) => {
                        return (Err(self.queue_full(&queues[i].rule)), false)
                    }
                    _ => return (Err(self.refuse(*last.take().expect("set above"))), false),
                }
            }
        };
        let names = spots.into_iter().map(|s| s.queue).collect();
        let place = Place::new(&self.shared, names, ticket);
        let deadlines = (deadline, deadline_ms);
        let out = self
            .wait_in_queue(request, queues, place, deadlines, last)
            .await;
        (out, true)
    }

    /// Joins the queues; `None` when the store failed (logged: the call then goes through
    /// admission unqueued, still never past a limit).
    async fn join(&self, spots: &[QueueSpot], only_if_busy: bool) -> Option<QueueJoin> {
        let q = self.shared.store.queues()?;
        let now = self.shared.clock.now_ms();
        let joined = q.join(spots.to_vec(), only_if_busy, now + LAPSE_MS, now);
        joined
            .await
            .map_err(|e| {
                self.shared
                    .store
                    .as_ref()
                    .outage()
                    .log_failed("queue join", &e)
            })
            .ok()
    }

    async fn wait_in_queue(
        &self,
        request: AdmitRequest,
        queues: &[QueueRule],
        place: Place,
        (deadline, deadline_ms): (Instant, i64),
        mut last: Option<Box<Refusal>>,
    ) -> Result<Ticket> {
        let store = self.shared.store.clone();
        let q = store
            .queues()
            .expect("queue_rules checked the store has queues");
        // Waiters ahead at the last poll, and the leaves of this process seen then: between
        // polls each leave counts as one fewer ahead (a guess the next poll corrects).
        let (mut ahead, mut leaves) = (0, 0);
        let mut polled_at: Option<Instant> = None;
        // When the store last kept the place alive (the join, then each poll that found it).
        let (mut renewed, mut gone_place) = (Instant::now(), None);
        loop {
            let now = self.shared.clock.now_ms();
            let gone = seen(&LEAVES).wrapping_sub(leaves);
            if gone >= ahead || polled_at.is_none_or(|at| at.elapsed() >= WAITER_POLL) {
                (leaves, polled_at) = (seen(&LEAVES), Some(Instant::now()));
                let names = place.queues.clone();
                ahead = match q.ahead(names, place.ticket, now + LAPSE_MS, now).await {
                    Ok(Some(ahead)) => {
                        renewed = Instant::now();
                        ahead
                    }
                    Ok(None) => {
                        gone_place = Some(Gone::of(renewed));
                        break;
                    }
                    Err(e) => {
                        self.shared
                            .store
                            .as_ref()
                            .outage()
                            .log_failed("queue poll", &e);
                        0
                    }
                };
            }
            let rooms = seen(&ROOMS);
            if ahead == 0 {
                match self.admit_one(request.clone()).await {
                    Err(Error::Refused(r)) if throttled(queues, &r) => {
                        self.unrefuse();
                        if beyond(&r, deadline_ms) {
                            place.leave().await;
                            return Err(self.refuse(*r));
                        }
                        last = Some(r);
                    }
                    other => {
                        place.leave().await;
                        return other;
                    }
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let since = polled_at.map_or(WAITER_POLL, |at| at.elapsed());
            let wait = match (ahead, last.as_ref().and_then(|r| r.resets_at)) {
                (0, Some(at)) => Duration::from_millis((at - now).max(1) as u64),
                (0, None) => HEAD_POLL,
                _ => WAITER_POLL.saturating_sub(since),
            };
            if ahead == 0 {
                pause(wait.min(left), wake::room(), || seen(&ROOMS) != rooms).await;
            } else {
                let moved_up = || seen(&LEAVES).wrapping_sub(leaves) >= ahead;
                pause(wait.min(left), wake::moved_up(), moved_up).await;
            }
        }
        place.leave().await;
        Err(self.timed_out(queues, deadline, last.as_deref(), gone_place))
    }

    /// The refusal of a call that waited its whole `throttle_max_wait` (or, `gone` set, found
    /// its place gone from the store).
    fn timed_out(
        &self,
        queues: &[QueueRule],
        deadline: Instant,
        last: Option<&Refusal>,
        gone: Option<Gone>,
    ) -> Error {
        let rule = &queues
            .iter()
            .min_by_key(|q| q.rule.throttle_max_wait_ms)
            .expect("a queued call has queues")
            .rule;
        let waited = (deadline - Duration::from_millis(rule.throttle_max_wait_ms)).elapsed();
        let message = if let Some(gone) = gone {
            let why = match gone {
                Gone::Stalled => "it stopped polling for 2 s (a stalled process)",
                Gone::Lost => "the store no longer had it (restarted empty, or its keys removed)",
            };
            format!(
                "Rule \"{}\" dropped the call from its queue after {:.1} s: {why}; try again.",
                rule.name,
                waited.as_secs_f64()
            )
        } else {
            format!(
                "Rule \"{}\" kept the call waiting in its queue for {:.1} s, its \
                 throttle_max_wait, and had no room for it; try again later.",
                rule.name,
                waited.as_secs_f64()
            )
        };
        self.refuse(queue_refusal(rule, last, message))
    }

    fn queue_full(&self, rule: &GenericRule) -> Error {
        let message = format!(
            "Rule \"{}\" has {} calls waiting in its queue already, its throttle_max_queue; \
             try again later.",
            rule.name, rule.throttle_max_queue
        );
        self.refuse(queue_refusal(rule, None, message))
    }

    /// The work of [`Guard::waiting`].
    pub(crate) fn waiting_count(&self) -> u64 {
        self.shared.stats.waiting.load(Ordering::Relaxed)
    }

    /// Takes back the refusal count of an admission the queue retries.
    fn unrefuse(&self) {
        self.shared.stats.refused.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether one of the queue rules gave `refusal`.
fn throttled(queues: &[QueueRule], refusal: &Refusal) -> bool {
    refusal.limit_type == Some(LimitType::Rule)
        && queues.iter().any(|q| {
            refusal.metric == Some(q.rule.spec.metric)
                && refusal.amount == Some(q.rule.spec.amount)
                && refusal.window == Some(q.rule.spec.window)
        })
}

/// Whether the refusal's rule has room again only after the deadline (guard clock; a window
/// that rolls too late): waiting would not help.
fn beyond(refusal: &Refusal, deadline_ms: i64) -> bool {
    refusal.resets_at.is_some_and(|at| at > deadline_ms)
}
