//! Billing and finishing a batch's parts. Each part `<batch id>/<result id>` settles in one
//! atomic store step (`CounterStore::settle_parts`) whose record is its mark: a bill gives
//! back the part's share (unless the finish did) and adds its use, once; a finish gives back
//! the share of every part not yet given back, many parts per step. A crash between steps
//! leaves only parts not yet settled, which a repeated `finish` (on any guard, after
//! `resume_batch`) settles; nothing is given back or billed twice.

use crate::error::{Error, Result};
use crate::guard::engine::batch::batch_ticket::{unavailable, BatchTicket};
use crate::guard::engine::settle::billing::{
    check_usage, record, usage_adds, BillInfo, Billed, Recorded, Usage,
};
use crate::guard::engine::settle::retry::{retry_until_answered, Followers};
use crate::guard::engine::settle::settling::SETTLED_KEEP_MS;
use crate::guard::store::{PartSettle, PartsSettle, SettleOutcome};
use std::sync::atomic::Ordering::Relaxed;

/// How many parts one `finish` step settles: 4,000 parts take 8 round trips, each a short
/// script.
const FINISH_CHUNK: usize = 500;

impl BatchTicket {
    fn parts(&self, parts: Vec<PartSettle>) -> PartsSettle {
        PartsSettle {
            ticket: self.id.clone(),
            expiry_minute: self.expiry_minute,
            settled_until: self.marks_until(),
            parts,
        }
    }

    /// Bills one result: the first bill of `result_id` on any server adds `usage` and gives
    /// back the result's share of the reservation (unless `finish` gave it back already), in
    /// one store step; later bills return `None`. Cost comes from the model's prices unless
    /// given. When the store does not answer, the bill is retried in the background by part
    /// id (`recorded` is `Pending`); it counts once if it lands at all.
    pub async fn bill_part(
        &self,
        result_id: &str,
        usage: Usage,
        info: BillInfo,
    ) -> Result<Option<Billed>> {
        check_usage(&usage)?;
        info.check()?;
        let index = self
            .request_ids
            .iter()
            .position(|r| r == result_id)
            .ok_or_else(|| {
                Error::invalid("result_id", result_id, "is not a request of the batch")
            })?;
        let now = self.shared.clock.now_ms();
        let mut billed = Billed::of(&self.path, &usage, 0);
        let part = format!("{}/{result_id}", self.id);
        let settle = self.parts(vec![PartSettle {
            id: part.clone(),
            holds: self.share(index),
            bill: true,
            adds: usage_adds(&self.adds, &billed, now),
        }]);
        billed.recorded = match self.shared.store.settle_parts(&settle, now).await {
            Ok(outcomes) => {
                self.shared.store.as_ref().outage().answered();
                if outcomes.first() != Some(&SettleOutcome::Settled) {
                    return Ok(None);
                }
                Recorded::Yes
            }
            Err(e) => {
                self.shared.stats.settle_failures.fetch_add(1, Relaxed);
                self.shared.stats.store_errors.fetch_add(1, Relaxed);
                self.shared
                    .store
                    .as_ref()
                    .outage()
                    .log_failed("bill_part", &e);
                let what = format!("the bill of batch part {}/{result_id}", self.id);
                // The part's record lives far longer than the retries: never billed twice.
                retry_until_answered(
                    self.shared.clone(),
                    what,
                    now + SETTLED_KEEP_MS,
                    settle,
                    Followers {
                        waiting: None,
                        place: Some(self.shared.queue.retry_place()),
                    },
                    |store, settle, now| store.settle_parts(settle, now),
                );
                Recorded::Pending
            }
        };
        self.shared.stats.billed.fetch_add(1, Relaxed);
        if let Some(ledger) = self.shared.ledger.get() {
            record(
                ledger.as_ref(),
                &self.path,
                &self.source,
                part,
                now,
                &billed,
                info,
            );
        }
        Ok(Some(billed))
    }

    /// Ends the batch: gives back the share of every result neither billed nor given back
    /// (on any server), 500 parts per atomic store step. Returns how many shares this call
    /// gave back. Idempotent and resumable: after a crash or a store error part way, a
    /// repeated `finish` gives back exactly the shares still held.
    pub async fn finish(&self) -> Result<usize> {
        let now = self.shared.clock.now_ms();
        let mut given = 0;
        let ids: Vec<usize> = (0..self.request_ids.len()).collect();
        for chunk in ids.chunks(FINISH_CHUNK) {
            let parts = chunk
                .iter()
                .map(|&i| PartSettle {
                    id: format!("{}/{}", self.id, self.request_ids[i]),
                    holds: self.share(i),
                    bill: false,
                    adds: Vec::new(),
                })
                .collect();
            let settle = self.parts(parts);
            let outcomes = self
                .shared
                .store
                .settle_parts(&settle, now)
                .await
                .map_err(|e| {
                    self.shared.stats.store_errors.fetch_add(1, Relaxed);
                    self.shared
                        .store
                        .as_ref()
                        .outage()
                        .failed("batch finish", &e);
                    unavailable()
                })?;
            self.shared.store.as_ref().outage().answered();
            given += outcomes
                .iter()
                .filter(|o| **o == SettleOutcome::Settled)
                .count();
        }
        self.shared.stats.released.fetch_add(1, Relaxed);
        Ok(given)
    }
}
