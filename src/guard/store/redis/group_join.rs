//! A slot group's place in the store's list of groups and its copy of the epoch
//! (docs/redis.md, "Slot groups"): a group new to the guard's generation is given a copy and
//! then listed (`join_group`); the entry and the copy last only as long as the group's calls
//! need, so a churning user base does not grow the list and the copies for ever.
//!
//! An entry (`<generation>@<until>`) counts until its time is over; the group's copy keeps
//! `h` = that time and lasts `COPY_GRACE` longer. Each reservation tells the copy what it
//! needs (`horizon_need`: past the retain-until of the bucket after the one it touches, and
//! `HORIZON_SLACK / 2` more), and while the copy's `h` is short of it the reserve answers -8:
//! the guard extends the entry first and the copy after (`extend_group`), and reserves again.
//! The order keeps the fence's promise: an entry never ends before a counter it protects (so
//! a copy lost while its counters matter is a loss, never a new group), and a copy never
//! ends before its entry (so a copy that expired is never read as lost). A crash between
//! the two leaves an entry longer than its copy's `h`: the copy is extended at its next
//! reservation (if none comes before the copy expires, the next one while the entry lasts
//! reads the copy as lost: one recovery more, the safe side).
//!
//! Renewals cost two small scripts and a second sending of the reservation when what a group's
//! calls need passes its `h` (every second day for a group of daily counters). A group no
//! call needs any more disappears (a group of daily counters about six days after its last
//! reservation): its copy expires, and its entry is dropped by a later listing (`groups.lua`
//! prunes a few entries each time).

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

/// How far past what a reservation needs a renewal extends a group's entry (half of it), and
/// how early it renews (the other half): a group in use is renewed about once per day.
/// A ticket billed more than `HORIZON_SLACK / 2` after its reservation, into a bucket past the
/// next, may add to a counter its group's entry no longer covers (docs/redis.md).
pub(super) const HORIZON_SLACK: Millis = 2 * DAY_MS;

/// How much longer than its entry a group's copy of the epoch lasts: a guard's clock behind
/// Redis's by less than this never sees a copy expire before its entry.
const COPY_GRACE: Millis = DAY_MS / 2;

/// Until when the entry of a group must last for a reservation of `items` at `now`: past the
/// retain-until of the bucket after each item's (a bill may land there: at most twice the
/// span from the bucket's start to its retain-until), and `HORIZON_SLACK / 2` more.
pub(super) fn horizon_need(items: &[ReserveItem], now: Millis) -> Millis {
    need_of(items.iter().map(|i| (i.key.bucket, i.retain_until)), now)
}

/// `horizon_need` over (bucket start, retain-until) pairs.
fn need_of(buckets: impl Iterator<Item = (Millis, Millis)>, now: Millis) -> Millis {
    let next = buckets
        .filter(|&(_, retain_until)| retain_until > now)
        .map(|(bucket, retain_until)| {
            let span = retain_until.saturating_sub(bucket);
            retain_until.saturating_add(span)
        })
        .fold(now, Millis::max);
    next.saturating_add(HORIZON_SLACK / 2)
}

impl RedisStore {
    /// The keys of `groups.lua`: the store's epoch, the list of groups, where its pruning left
    /// off.
    fn list_keys(&self) -> Args {
        let list = groups_key(&self.inner.home);
        Args::of([&self.inner.epoch_key, &list, &format!("{list}:pruned")])
    }

    /// Brings group `tag`, whose reserve answered `code` (-2 or -3), up to the guard's
    /// `generation` (see the module), its entry lasting until `need` at least. `None` when it
    /// did (reserve again), else the fence's code to answer: -3 when the store's epoch is not
    /// the guard's, -2 when the group was listed under it (its master lost it).
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
        let list_keys = self.list_keys();
        let mut args = Args::of(["check", tag, generation]);
        args.push_num(code);
        args.push_num(now);
        let scripts = &self.inner.scripts;
        let answer: Vec<String> =
            invoke(&scripts.groups, &list_keys, &args, &mut conn.clone()).await?;
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
                return self.extend_group(conn, tag, generation, need, now).await;
            }
            Some("stale") => return Ok(Some(-3)),
            other => return Err(protocol_error("groups", format!("an answer {other:?}"))),
        };
        // The group's copy, written as the store's epoch is (`epoch.lua`, no lock), unless
        // another guard's join wrote it meanwhile.
        let mut args = Args::of(["write", generation]);
        args.push_num(now);
        for arg in ["", "join", ""] {
            args.push(arg);
        }
        args.push(&hold_again_until);
        let written: String =
            invoke(&scripts.epoch, &copy_keys(tag), &args, &mut conn.clone()).await?;
        if written != "ok" {
            let why = format!("a copy answered {written:?}");
            return Err(protocol_error("groups", why));
        }
        // Listed once the copy is there (not when the store's epoch moved on meanwhile: the
        // copy is then behind, and the next reserve joins again).
        self.extend_group(conn, tag, generation, need, now).await
    }

    /// Makes group `tag`'s entry, then its copy of the epoch (of `generation`), last until
    /// `need` and `HORIZON_SLACK / 2` more (see the module). `None` when done (reserve again),
    /// else -3: the store's epoch or the copy is no longer of `generation` (the guard reads the
    /// epoch again).
    pub(super) async fn extend_group(
        &self,
        conn: &Conn,
        tag: &str,
        generation: &str,
        need: Millis,
        now: Millis,
    ) -> RedisResult<Option<i64>> {
        let scripts = &self.inner.scripts;
        let mut args = Args::of(["list", tag, generation]);
        args.push_num(now);
        args.push_num(need.saturating_add(HORIZON_SLACK / 2));
        let listed: i64 =
            invoke(&scripts.groups, &self.list_keys(), &args, &mut conn.clone()).await?;
        if listed == 0 {
            return Ok(Some(-3));
        }
        let mut args = Args::of(["horizon", generation]);
        args.push_num(listed);
        args.push_num(listed.saturating_add(COPY_GRACE).saturating_sub(now).max(1));
        let kept: i64 = invoke(&scripts.epoch, &copy_keys(tag), &args, &mut conn.clone()).await?;
        Ok((kept == 0).then_some(-3))
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
    use super::{need_of, HORIZON_SLACK};
    use crate::guard::domain::calendar::CalendarUnit::{Day, Month, Week, Year};
    use crate::guard::domain::clock::Millis;
    use crate::guard::domain::window::Window;

    /// 2026-01-31T12:00:00Z: a month whose next is shorter, in a year.
    const NOON: Millis = 1_769_860_800_000;

    /// Wherever in its bucket a reservation falls, a bill up to `HORIZON_SLACK / 2` later
    /// lands in a bucket kept no longer than the reservation's need: the group's entry
    /// covers every bucket the fence may list for the calls it admits.
    #[test]
    fn a_reservations_need_covers_every_bucket_a_bill_soon_after_may_land_in() {
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
            let bucket = window.bucket_start(NOON);
            let end = window.bucket_end(bucket);
            for now in [bucket, (bucket + end) / 2, end - 1] {
                let start = window.bucket_start(now);
                let need = need_of([(start, window.retain_until(start))].into_iter(), now);
                let step = (HORIZON_SLACK / 2 / 97).max(1);
                let later = (0..=97)
                    .map(|k| now + k * step)
                    .chain([now + HORIZON_SLACK / 2]);
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

    /// A counter whose time is over (a concurrency counter, or a bucket past its retention)
    /// asks nothing past `now`.
    #[test]
    fn a_counter_kept_no_longer_asks_for_nothing_but_the_slack() {
        let now = NOON;
        assert_eq!(
            need_of([(0, Millis::MIN)].into_iter(), now),
            now + HORIZON_SLACK / 2
        );
        assert_eq!(need_of(std::iter::empty(), now), now + HORIZON_SLACK / 2);
    }
}
