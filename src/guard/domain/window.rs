//! Window math: which bucket holds an instant, what a rule counts in it, when it resets,
//! and how long a bucket's counter is kept. Pure functions of (window, now).

use std::fmt::Write as _;

use super::calendar::{civil_from_days, days_from_civil};
pub use super::calendar::{Anchored, CalendarUnit};
use super::clock::Millis;

const SECOND_MS: i64 = 1_000;
const MINUTE_MS: i64 = 60 * SECOND_MS;
const DAY_MS: i64 = 24 * 60 * MINUTE_MS;

/// How a rule's counter is bucketed in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Window {
    /// A fixed calendar bucket in UTC (one unit from midnight, the 1st, Monday) that resets
    /// when it ends.
    Calendar(CalendarUnit),
    /// A calendar window with a zone, a reset time and day, or a count of units.
    Anchored(Anchored),
    /// A sliding window of this many seconds: epoch-aligned buckets of that length, counting
    /// the current bucket plus the weighted share of the previous one.
    Sliding { seconds: u32 },
    /// No time window: counts what is running now (concurrency).
    WhileRunning,
}

impl Window {
    /// True for minute/hour (sliding) windows: refusals are rate limits with a Retry-After.
    pub fn is_rate_limit(self) -> bool {
        matches!(self, Window::Sliding { .. })
    }

    /// Whether the previous bucket carries into what the rule counts.
    pub fn is_sliding(self) -> bool {
        matches!(self, Window::Sliding { .. })
    }

    fn sliding_ms(seconds: u32) -> i64 {
        i64::from(seconds) * SECOND_MS
    }

    /// The start of the bucket that holds `now`.
    pub fn bucket_start(self, now: Millis) -> Millis {
        match self {
            Window::Sliding { seconds } => {
                let w = Self::sliding_ms(seconds);
                now.div_euclid(w) * w
            }
            Window::Calendar(unit) => {
                let day = now.div_euclid(DAY_MS);
                let start_day = match unit {
                    CalendarUnit::Day => day,
                    // 1970-01-01 was a Thursday: Monday is 3 days before it.
                    CalendarUnit::Week => day - (day + 3).rem_euclid(7),
                    CalendarUnit::Month => {
                        let (y, m, _) = civil_from_days(day);
                        days_from_civil(y, m, 1)
                    }
                    CalendarUnit::Year => days_from_civil(civil_from_days(day).0, 1, 1),
                };
                start_day * DAY_MS
            }
            Window::Anchored(a) => a.bucket_start(now),
            Window::WhileRunning => 0,
        }
    }

    /// The end (exclusive) of the bucket starting at `start`: where the next bucket begins.
    pub fn bucket_end(self, start: Millis) -> Millis {
        match self {
            Window::Sliding { seconds } => start + Self::sliding_ms(seconds),
            Window::Calendar(unit) => {
                let day = start.div_euclid(DAY_MS);
                let next_day = match unit {
                    CalendarUnit::Day => day + 1,
                    CalendarUnit::Week => day + 7,
                    CalendarUnit::Month => {
                        let (y, m, _) = civil_from_days(day);
                        if m == 12 {
                            days_from_civil(y + 1, 1, 1)
                        } else {
                            days_from_civil(y, m + 1, 1)
                        }
                    }
                    CalendarUnit::Year => days_from_civil(civil_from_days(day).0 + 1, 1, 1),
                };
                next_day * DAY_MS
            }
            Window::Anchored(a) => a.bucket_end(start),
            Window::WhileRunning => Millis::MAX,
        }
    }

    /// The start of the bucket before the one starting at `start`: sliding windows carry
    /// part of its use; for every window its live holds still count (those calls bill into
    /// the current bucket). `None` for concurrency.
    pub fn previous_bucket_start(self, start: Millis) -> Option<Millis> {
        match self {
            Window::Sliding { seconds } => Some(start - Self::sliding_ms(seconds)),
            Window::Calendar(_) | Window::Anchored(_) => Some(self.bucket_start(start - 1)),
            Window::WhileRunning => None,
        }
    }

    /// How much of the previous bucket still counts at `now`:
    /// `ceil(previous × (bucket_end − now) / window)`, exact in integers.
    pub fn carried(self, previous: u64, now: Millis) -> u64 {
        let Window::Sliding { seconds } = self else {
            return 0;
        };
        if previous == 0 {
            return 0;
        }
        let w = Self::sliding_ms(seconds);
        let end = self.bucket_end(self.bucket_start(now));
        ceil_weighted(previous, (end - now) as u64, w as u64)
    }

    /// What a rule counts at `now` given its current bucket (used + holds) and, for sliding
    /// windows, the previous bucket.
    pub fn counted(self, current: u64, previous: u64, now: Millis) -> u64 {
        current.saturating_add(self.carried(previous, now))
    }

    /// When the rule next has room, with no new use: for calendar windows the end of the
    /// current bucket; for sliding windows, only when nothing is left, the first whole
    /// second at which `counted < amount`. `None` when a sliding rule still has room, for
    /// concurrency, and for an amount of 0 (never resets).
    pub fn resets_at(
        self,
        amount: u64,
        current: u64,
        previous: u64,
        now: Millis,
    ) -> Option<Millis> {
        match self {
            Window::Calendar(_) | Window::Anchored(_) => {
                Some(self.bucket_end(self.bucket_start(now)))
            }
            Window::WhileRunning => None,
            Window::Sliding { .. } if self.counted(current, previous, now) < amount => None,
            Window::Sliding { .. } => self.room_at(amount, current, previous, 1, now),
        }
    }

    /// When `need` more fits, with no new use: the first instant at or after `now` at which
    /// `counted + need <= amount` (for sliding windows the first whole second, as the
    /// weighted previous bucket decays and the current one becomes the previous; for
    /// calendar windows the end of the current bucket, or `now` when it fits already).
    /// `None` when it never will (`need` is over the amount) and for concurrency.
    pub fn room_at(
        self,
        amount: u64,
        current: u64,
        previous: u64,
        need: u64,
        now: Millis,
    ) -> Option<Millis> {
        if need > amount {
            return None;
        }
        let fits_now = self.counted(current, previous, now).saturating_add(need) <= amount;
        match self {
            Window::WhileRunning => None,
            Window::Calendar(_) | Window::Anchored(_) if fits_now => Some(now),
            Window::Calendar(_) | Window::Anchored(_) => {
                Some(self.bucket_end(self.bucket_start(now)))
            }
            Window::Sliding { .. } if fits_now => Some(now),
            Window::Sliding { seconds } => Some(sliding_room_at(
                seconds,
                amount - need,
                current,
                previous,
                now,
                self,
            )),
        }
    }

    /// Until when a bucket's counter must be kept: a day after a fixed bucket ends; one
    /// window and a minute after a sliding bucket ends (it is then still the previous bucket).
    pub fn retain_until(self, bucket_start: Millis) -> Millis {
        match self {
            Window::Calendar(_) | Window::Anchored(_) => self.bucket_end(bucket_start) + DAY_MS,
            Window::Sliding { seconds } => {
                self.bucket_end(bucket_start) + Self::sliding_ms(seconds) + MINUTE_MS
            }
            Window::WhileRunning => Millis::MIN,
        }
    }

    /// The window in words, as a refusal message says it: "a day", "an hour",
    /// "every 10 minutes".
    pub fn phrase(self) -> String {
        match self {
            Window::Calendar(CalendarUnit::Day) => "a day".into(),
            Window::Calendar(CalendarUnit::Week) => "a week".into(),
            Window::Calendar(CalendarUnit::Month) => "a month".into(),
            Window::Calendar(CalendarUnit::Year) => "a year".into(),
            Window::Anchored(a) => a.phrase(),
            Window::WhileRunning => "at once".into(),
            Window::Sliding { seconds } => match seconds {
                1 => "a second".into(),
                60 => "a minute".into(),
                3600 => "an hour".into(),
                s if s % 3600 == 0 => format!("every {} hours", s / 3600),
                s if s % 60 == 0 => format!("every {} minutes", s / 60),
                s => format!("every {s} seconds"),
            },
        }
    }

    /// A short stable token used in counter keys ("d", "w", "mo", "y", "s600", "run").
    pub fn key_token(self) -> String {
        let mut out = String::new();
        self.write_key_token(&mut out);
        out
    }

    /// Appends [`Window::key_token`] to `out`.
    pub fn write_key_token(self, out: &mut String) {
        match self {
            Window::Calendar(CalendarUnit::Day) => out.push('d'),
            Window::Calendar(CalendarUnit::Week) => out.push('w'),
            Window::Calendar(CalendarUnit::Month) => out.push_str("mo"),
            Window::Calendar(CalendarUnit::Year) => out.push('y'),
            Window::Anchored(a) => out.push_str(&a.key_token()),
            Window::Sliding { seconds } => {
                let _ = write!(out, "s{seconds}");
            }
            Window::WhileRunning => out.push_str("run"),
        }
    }

    /// The window of a counter key's token ([`Window::key_token`]).
    pub fn from_key_token(token: &str) -> Option<Window> {
        Some(match token {
            "d" => Window::Calendar(CalendarUnit::Day),
            "w" => Window::Calendar(CalendarUnit::Week),
            "mo" => Window::Calendar(CalendarUnit::Month),
            "y" => Window::Calendar(CalendarUnit::Year),
            "run" => Window::WhileRunning,
            s if s.starts_with('c') => Window::Anchored(Anchored::from_key_token(s)?),
            s => Window::Sliding {
                seconds: s.strip_prefix('s')?.parse().ok()?,
            },
        })
    }

    /// A calendar window: the UTC shorthand when the anchor is the plain one (so both share
    /// a counter), else the anchored window.
    pub fn calendar(anchored: Anchored) -> Window {
        if anchored.is_plain() {
            Window::Calendar(anchored.unit)
        } else {
            Window::Anchored(anchored)
        }
    }
}

/// `ceil(value × numerator / denominator)` without overflow.
fn ceil_weighted(value: u64, numerator: u64, denominator: u64) -> u64 {
    let product = value as u128 * numerator as u128;
    let d = denominator as u128;
    product.div_ceil(d).min(u64::MAX as u128) as u64
}

/// The first whole second at or after `now` at which a sliding rule counts at most `room`:
/// `current + ceil(previous × r / w) <= room` in this bucket (`r` = its end − t), else
/// `ceil(current × r / w) <= room` in the next one (this bucket is then the previous), else
/// the end of the next bucket, when nothing of `current` counts any more.
fn sliding_room_at(
    seconds: u32,
    room: u64,
    current: u64,
    previous: u64,
    now: Millis,
    window: Window,
) -> Millis {
    let w = Window::sliding_ms(seconds);
    let end = window.bucket_end(window.bucket_start(now));
    if current <= room {
        // previous > 0 here: otherwise it would fit now.
        let r_max = (u128::from(room - current) * w as u128 / u128::from(previous.max(1))) as i64;
        let t = ceil_to_second((end - r_max.min(w)).max(now));
        if t <= end {
            return t;
        }
    }
    let r_max = (u128::from(room) * w as u128 / u128::from(current.max(1))) as i64;
    ceil_to_second((end + w - r_max.min(w)).max(end).max(now))
}

fn ceil_to_second(ms: Millis) -> Millis {
    ms.div_euclid(SECOND_MS) * SECOND_MS
        + if ms.rem_euclid(SECOND_MS) > 0 {
            SECOND_MS
        } else {
            0
        }
}

/// The window as policy documents write it ("day", "10 minutes", "hour"); `FromStr` reads
/// it back (window_words.rs).
impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let word: String = match *self {
            Window::Calendar(CalendarUnit::Day) => "day".into(),
            Window::Calendar(CalendarUnit::Week) => "week".into(),
            Window::Calendar(CalendarUnit::Month) => "month".into(),
            Window::Calendar(CalendarUnit::Year) => "year".into(),
            Window::Anchored(a) => a.to_string(),
            Window::WhileRunning => "running".into(),
            Window::Sliding { seconds } => match seconds {
                60 => "minute".into(),
                3600 => "hour".into(),
                s if s % 3600 == 0 => format!("{} hours", s / 3600),
                s if s % 60 == 0 => format!("{} minutes", s / 60),
                s => format!("{s} seconds"),
            },
        };
        f.write_str(&word)
    }
}
