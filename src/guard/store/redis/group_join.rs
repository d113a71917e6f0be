//! A slot group's place in the store's list of groups and its copy of the epoch
//! (docs/redis.md, "Slot groups"): a group new to the guard's generation is given a copy and
//! then listed (`join_group`); the entry and the copy last only as long as the group's calls
//! need, so a churning user base does not grow the list and the copies for ever.
//!
//! An entry (`<generation>@<until>`) counts until its time is over; the group's copy keeps
//! `h` = that time and lasts `COPY_GRACE` longer. Each reservation tells the copy what it
//! needs (`horizon_need`), and while the copy's `h` is short of it the reserve answers -8:
//! the guard extends the entry first and the copy after (`renew_group`), and reserves again.
//! The order keeps the fence's promise: an entry never ends before a counter it protects (so
//! a copy lost while its counters matter is a loss, never a new group), and a copy never
//! ends before its entry (so a copy that expired is never read as lost). An entry whose time
//! is over is not brought back by a renewal (its copy may be gone): the group joins again.
//! A join writes the copy with the time its entry is about to get, so a crash before the
//! listing leaves no copy without an expiry. A crash between a renewal's two steps leaves an
//! entry longer than its copy: the copy is extended by the first reservation that needs more
//! than its time (if none comes before the copy expires, the next one while the entry lasts
//! reads the copy as lost: one recovery more, the safe side;
//! `a_guard_killed_between_the_steps_of_a_renewal_or_a_join_leaves_nothing_stuck`).
//!
//! The need moves with `now`, so a group in use renews about every `RENEW_EVERY` from its own
//! last renewal (groups renew at different moments, not all at a bucket's start); each renewal
//! costs two small scripts and a second sending of the reservation. A group no call needs any
//! more disappears (a group of daily counters about ten days after its last reservation): its
//! copy expires, and its entry is dropped by a later listing (`groups.lua` prunes a few
//! entries each time).

use redis::RedisResult;

use super::args::Args;
use super::connection::Conn;
use super::groups::{groups_key, protocol_error};
use super::keys::write_epoch_key;
use super::scripts::invoke;
use super::RedisStore;
use crate::guard::domain::clock::Millis;
use crate::guard::store::ReserveItem;

const DAY_MS: Millis = 24 * 60 * 60 * 1000;

/// How far past the retention of the bucket a reservation touches a bill of it may land:
/// the next bucket, up to three days longer than this one (a month after February), and a
/// bill up to a day after its reservation (a call open that long). A ticket billed later,
/// two buckets on, may add to a counter its group's entry no longer covers (docs/redis.md).
const BILL_SLACK: Millis = 4 * DAY_MS;

/// How far past a reservation's need a renewal extends a group's entry: the next renewal
/// comes when the need (which moves with `now`) passes it.
const RENEW_EVERY: Millis = 2 * DAY_MS;

/// How much longer than its entry a group's copy of the epoch lasts: a guard's clock behind
/// Redis's by less than this never sees a copy expire before its entry.
const COPY_GRACE: Millis = DAY_MS / 2;

/// Until when the entry of a group must last for a reservation of `items` at `now`: past the
/// retention of the bucket after each item's (bucket start + twice the span from a bucket's
/// start to its retain-until, counted from `now` so the need moves smoothly), and
/// `BILL_SLACK` more.
pub(super) fn horizon_need(items: &[ReserveItem], now: Millis) -> Millis {
    need_of(items.iter().map(|i| (i.key.bucket, i.retain_until)), now)
}

/// `horizon_need` over (bucket start, retain-until) pairs.
fn need_of(buckets: impl Iterator<Item = (Millis, Millis)>, now: Millis) -> Millis {
    let span = buckets
        .filter(|&(_, retain_until)| retain_until > now)
        .map(|(bucket, retain_until)| retain_until.saturating_sub(bucket))
        .max()
        .unwrap_or(0);
    now.saturating_add(span.saturating_mul(2))
        .saturating_add(BILL_SLACK)
}

/// How long Redis keeps a copy whose entry lasts until `until` (at most ten years: Redis
/// refuses an expiry past its clock's range).
fn copy_ttl(until: Millis, now: Millis) -> Millis {
    let ttl = until.saturating_add(COPY_GRACE).saturating_sub(now);
    ttl.clamp(1, 3_650 * DAY_MS)
}

/// What a listing did (`keep_listed`).
enum Listing {
    /// The entry and the copy last as asked (or the copy was not there to extend: the
    /// reservation sent again tells which).
    Kept,
    /// The store's epoch is no longer of the generation.
    Stale,
    /// (A renewal) the entry was gone or its time over: nothing was written.
    Lapsed,
}

impl RedisStore {
    /// The keys of `groups.lua`: the store's epoch, the list of groups, where its pruning left
    /// off.
    fn list_keys(&self) -> Args {
        let list = groups_key(&self.inner.home);
        Args::of([&self.inner.epoch_key, &list, &format!("{list}:pruned")])
    }

    /// Brings group `tag`, whose reserve answered `code` (-2 or -3), up to the guard's
    /// `generation` (see the module), its entry lasting past `need`. `None` when it did
    /// (reserve again), else the fence's code to answer: -3 when the store's epoch is not the
    /// guard's, -2 when the group was listed under it (its master lost it).
    ///
    /// The copy is written before the group is listed, so a group listed under `generation`
    /// had its copy then: a `lost` answer is confirmed by reading the copy again, since the
    /// reserve's look may have come before another guard's join of the same new group (then
    /// the copy is there, of `generation` and this master's process: reserve again).
    pub(super) async fn join_group(
        &self,
        conn: &Conn,
        tag: &str,
        generation: &str,
        code: i64,
        need: Millis,
        now: Millis,
    ) -> RedisResult<Option<i64>> {
        let mut args = Args::of(["check", tag, generation]);
        args.push_num(code);
        args.push_num(now);
        let scripts = &self.inner.scripts;
        let answer: Vec<String> =
            invoke(&scripts.groups, &self.list_keys(), &args, &mut conn.clone()).await?;
        let hold_again_until = match answer.first().map(String::as_str) {
            Some("join") => answer.get(1).cloned().unwrap_or_else(|| "0".into()),
            Some("lost") => {
                let (copy, trusted): (String, i64) = invoke(
                    &scripts.epoch,
                    &copy_keys(tag),
                    &Args::of(["read"]),
                    &mut conn.clone(),
                )
                .await?;
                if copy != generation || trusted != 1 {
                    return Ok(Some(-2));
                }
                let kept = self.keep_listed(conn, tag, generation, need, now, false);
                return Ok(code_of(kept.await?));
            }
            Some("stale") => return Ok(Some(-3)),
            other => return Err(protocol_error("groups", format!("an answer {other:?}"))),
        };
        // The group's copy, written as the store's epoch is (`epoch.lua`, no lock) and kept
        // as long as its entry is about to be, unless another guard's join wrote it meanwhile.
        let mut args = Args::of(["write", generation]);
        args.push_num(now);
        for arg in ["", "join", ""] {
            args.push(arg);
        }
        args.push(&hold_again_until);
        args.push_num(copy_ttl(need.saturating_add(RENEW_EVERY), now));
        let written: String =
            invoke(&scripts.epoch, &copy_keys(tag), &args, &mut conn.clone()).await?;
        if written != "ok" {
            let why = format!("a copy answered {written:?}");
            return Err(protocol_error("groups", why));
        }
        // Listed once the copy is there (not when the store's epoch moved on meanwhile: the
        // copy is then behind, and the next reserve joins again).
        let kept = self.keep_listed(conn, tag, generation, need, now, false);
        Ok(code_of(kept.await?))
    }

    /// Renews group `tag`, whose copy (of `generation`) lasts less than `need` (-8): as
    /// `join_group` answers. An entry whose time is over is not renewed: the group joins.
    pub(super) async fn renew_group(
        &self,
        conn: &Conn,
        tag: &str,
        generation: &str,
        need: Millis,
        now: Millis,
    ) -> RedisResult<Option<i64>> {
        match self
            .keep_listed(conn, tag, generation, need, now, true)
            .await?
        {
            Listing::Lapsed => self.join_group(conn, tag, generation, -2, need, now).await,
            kept => Ok(code_of(kept)),
        }
    }

    /// Makes group `tag`'s entry, then its copy of the epoch (of `generation`), last past
    /// `need` by `RENEW_EVERY` (see the module). A `renewal` writes nothing where the entry is
    /// gone or its time is over.
    async fn keep_listed(
        &self,
        conn: &Conn,
        tag: &str,
        generation: &str,
        need: Millis,
        now: Millis,
        renewal: bool,
    ) -> RedisResult<Listing> {
        let scripts = &self.inner.scripts;
        let mut args = Args::of(["list", tag, generation]);
        args.push_num(now);
        args.push_num(need.saturating_add(RENEW_EVERY));
        args.push(if renewal { "renew" } else { "join" });
        let listed: i64 =
            invoke(&scripts.groups, &self.list_keys(), &args, &mut conn.clone()).await?;
        match listed {
            0 => return Ok(Listing::Stale),
            -1 => return Ok(Listing::Lapsed),
            _ => {}
        }
        let mut args = Args::of(["horizon", generation]);
        args.push_num(listed);
        args.push_num(copy_ttl(listed, now));
        // A copy gone or of another generation is not written (0): the reservation sent again
        // answers what the fence makes of it.
        let _: i64 = invoke(&scripts.epoch, &copy_keys(tag), &args, &mut conn.clone()).await?;
        Ok(Listing::Kept)
    }
}

/// The code `join_group` answers for a listing.
fn code_of(listing: Listing) -> Option<i64> {
    match listing {
        Listing::Stale => Some(-3),
        Listing::Kept | Listing::Lapsed => None,
    }
}

/// The keys of `epoch.lua` on group `tag`'s copy of the epoch: the copy, then its lock.
pub(super) fn copy_keys(tag: &str) -> Args {
    let mut keys = Args::default();
    keys.push_with(|out| write_epoch_key(tag, out));
    keys.push_with(|out| {
        write_epoch_key(tag, out);
        out.push_str(":lock");
    });
    keys
}

#[cfg(test)]
mod tests {
    use super::need_of;
    use crate::guard::domain::calendar::CalendarUnit::{Day, Month, Week, Year};
    use crate::guard::domain::clock::Millis;
    use crate::guard::domain::window::Window;

    const DAY: Millis = 86_400_000;
    /// 2026-01-31T12:00:00Z, 2026-02-01T00:00:00Z, 2026-02-28T23:59:59.999Z,
    /// 2026-12-31T23:59:59.999Z: months whose next is shorter and longer, a year's end.
    const INSTANTS: [Millis; 4] = [
        1_769_860_800_000,
        1_769_904_000_000,
        1_772_323_199_999,
        1_798_761_599_999,
    ];

    /// Wherever in its bucket a reservation falls, a bill up to a day later lands in a
    /// bucket kept no longer than the reservation's need: the group's entry covers every
    /// bucket the fence may list for the calls it admits.
    #[test]
    fn a_reservations_need_covers_every_bucket_a_bill_a_day_later_may_land_in() {
        let windows = [
            Window::Calendar(Day),
            Window::Calendar(Week),
            Window::Calendar(Month),
            Window::Calendar(Year),
            Window::Sliding { seconds: 1 },
            Window::Sliding { seconds: 3_600 },
            Window::Sliding {
                seconds: 30 * 86_400,
            },
        ];
        for window in windows {
            for instant in INSTANTS {
                let bucket = window.bucket_start(instant);
                let end = window.bucket_end(bucket);
                for now in [bucket, (bucket + end) / 2, end - 1, instant] {
                    let start = window.bucket_start(now);
                    let need = need_of([(start, window.retain_until(start))].into_iter(), now);
                    let later = (0..=96).map(|k| now + k * DAY / 96);
                    for at in later {
                        let kept = window.retain_until(window.bucket_start(at));
                        assert!(
                            kept <= need,
                            "{window:?} at {now}: a bill at {at} is kept until {kept}, past {need}"
                        );
                    }
                }
            }
        }
    }

    /// A counter whose time is over (a concurrency counter, or a bucket past its retention)
    /// asks for nothing but the slack.
    #[test]
    fn a_counter_kept_no_longer_asks_for_nothing_but_the_slack() {
        let now = INSTANTS[0];
        let slack = need_of(std::iter::empty(), now) - now;
        assert_eq!(slack, 4 * DAY);
        assert_eq!(need_of([(0, Millis::MIN)].into_iter(), now), now + slack);
    }
}
