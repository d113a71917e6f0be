//! Calendar math: civil dates, and anchored calendar windows (a count of days, weeks, months
//! or years that reset at a local time, on a day, in an IANA zone).
//!
//! DST: a reset time that does not exist on its day (a gap) happens at the first instant
//! after it, when the local clock has jumped past it; one that happens twice (an overlap)
//! happens at the earlier.

use chrono::{LocalResult, NaiveDate, NaiveDateTime, TimeZone};
use chrono_tz::Tz;

use super::clock::Millis;

/// A fixed calendar period. Weeks start Monday 00:00 unless anchored elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum CalendarUnit {
    Day,
    Week,
    Month,
    Year,
}

impl CalendarUnit {
    /// Every unit, as policy documents list them.
    pub const ALL: [CalendarUnit; 4] = [
        CalendarUnit::Day,
        CalendarUnit::Week,
        CalendarUnit::Month,
        CalendarUnit::Year,
    ];

    /// The policy word ("day", "week", "month", "year"); `Display` and `FromStr` use it.
    pub fn as_str(self) -> &'static str {
        match self {
            CalendarUnit::Day => "day",
            CalendarUnit::Week => "week",
            CalendarUnit::Month => "month",
            CalendarUnit::Year => "year",
        }
    }

    /// The short token of counter keys ("d", "w", "mo", "y").
    pub(crate) fn key_token(self) -> &'static str {
        match self {
            CalendarUnit::Day => "d",
            CalendarUnit::Week => "w",
            CalendarUnit::Month => "mo",
            CalendarUnit::Year => "y",
        }
    }
}

/// A calendar window with an anchor: `count` units, resetting at `reset_minute` (minutes
/// after local midnight) in `zone`, on `day` (ISO weekday 1..7 for weeks, day of month 1..31
/// for months, clamped to the month's last day; unused for days and years). Periods of more
/// than one unit are aligned on the count of units since 1970 (local calendar).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Anchored {
    pub unit: CalendarUnit,
    pub count: u32,
    pub zone: Tz,
    pub reset_minute: u16,
    pub day: u8,
}

impl Anchored {
    /// Whether this is the plain UTC unit (one unit, midnight, the 1st or Monday): the same
    /// window, and counter, as the word shorthand.
    pub fn is_plain(&self) -> bool {
        self.count == 1
            && self.zone == Tz::UTC
            && self.reset_minute == 0
            && (self.day == 1 || matches!(self.unit, CalendarUnit::Day | CalendarUnit::Year))
    }

    /// The window in words: "a calendar month from the 1st 00:00 Europe/Paris",
    /// "every 2 calendar weeks from Sunday 18:00 Asia/Tokyo".
    pub fn phrase(&self) -> String {
        let unit = self.unit.as_str();
        let period = if self.count == 1 {
            format!("a calendar {unit}")
        } else {
            format!("every {} calendar {unit}s", self.count)
        };
        format!("{period} from {}", self.anchor_words())
    }

    /// The anchor in words: "the 1st 00:00 Europe/Paris", "Sunday 18:00 UTC", "09:00 UTC".
    pub fn anchor_words(&self) -> String {
        let time = format!(
            "{:02}:{:02}",
            self.reset_minute / 60,
            self.reset_minute % 60
        );
        let zone = self.zone.name();
        match self.unit {
            CalendarUnit::Day => format!("{time} {zone}"),
            CalendarUnit::Year => format!("Jan 1 {time} {zone}"),
            CalendarUnit::Week => {
                let days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"];
                let name = match self.day {
                    6 => "Saturday",
                    7 => "Sunday",
                    d => days[usize::from(d.clamp(1, 5)) - 1],
                };
                format!("{name} {time} {zone}")
            }
            CalendarUnit::Month => format!("the {} {time} {zone}", ordinal(self.day)),
        }
    }

    /// The counter key token: `c<count><unit>.<zone>.<HHMM>.<day>`, the zone's `/` and `+`
    /// escaped (`c1mo.Europe%2FParis.0000.1`). It differs from every UTC shorthand's.
    pub fn key_token(&self) -> String {
        let zone = self.zone.name().replace('/', "%2F").replace('+', "%2B");
        format!(
            "c{}{}.{zone}.{:02}{:02}.{}",
            self.count,
            self.unit.key_token(),
            self.reset_minute / 60,
            self.reset_minute % 60,
            self.day
        )
    }

    /// Parses [`Anchored::key_token`].
    pub fn from_key_token(token: &str) -> Option<Anchored> {
        let mut parts = token.strip_prefix('c')?.split('.');
        let head = parts.next()?;
        let digits = head.bytes().take_while(u8::is_ascii_digit).count();
        let count: u32 = head[..digits].parse().ok()?;
        let unit = CalendarUnit::ALL
            .into_iter()
            .find(|u| u.key_token() == &head[digits..])?;
        let zone: Tz = parts
            .next()?
            .replace("%2F", "/")
            .replace("%2B", "+")
            .parse()
            .ok()?;
        let time: u16 = parts.next()?.parse().ok()?;
        let day: u8 = parts.next()?.parse().ok()?;
        Some(Anchored {
            unit,
            count,
            zone,
            reset_minute: (time / 100) * 60 + time % 100,
            day,
        })
    }

    /// The start of the bucket that holds `now`.
    pub fn bucket_start(&self, now: Millis) -> Millis {
        self.reset(self.period(now))
    }

    /// The start of the bucket after the one starting at `start`.
    pub fn bucket_end(&self, start: Millis) -> Millis {
        self.reset(self.period(start) + i64::from(self.count))
    }

    /// The index of the (aligned) period that holds `now`: the last reset at or before it.
    fn period(&self, now: Millis) -> i64 {
        let Some(local) = self.zone.timestamp_millis_opt(now).single() else {
            return 0; // out of chrono's range: no calendar there
        };
        let mut p = self.unit_index(local.naive_local().date());
        // A reset later in the local day, or a day-of-month anchor, can put `now` before its
        // unit's reset (one unit back at most); a DST gap cannot move a reset past the next.
        for _ in 0..2 {
            if self.reset(p) > now {
                p -= 1;
            } else if self.reset(p + 1) <= now {
                p += 1;
            }
        }
        p.div_euclid(i64::from(self.count)) * i64::from(self.count)
    }

    /// Which unit (days, weeks, months or years since 1970) a local date belongs to.
    fn unit_index(&self, date: NaiveDate) -> i64 {
        let days = days_from_civil(
            i64::from(chrono::Datelike::year(&date)),
            i64::from(chrono::Datelike::month(&date)),
            i64::from(chrono::Datelike::day(&date)),
        );
        match self.unit {
            CalendarUnit::Day => days,
            // 1970-01-01 was a Thursday: week 0 starts Monday 1969-12-29.
            CalendarUnit::Week => (days + 3).div_euclid(7),
            CalendarUnit::Month => {
                let (y, m, _) = civil_from_days(days);
                (y - 1970) * 12 + (m - 1)
            }
            CalendarUnit::Year => civil_from_days(days).0 - 1970,
        }
    }

    /// The instant unit `p` resets at.
    fn reset(&self, p: i64) -> Millis {
        let day = match self.unit {
            CalendarUnit::Day => p,
            CalendarUnit::Week => 7 * p - 3 + i64::from(self.day.clamp(1, 7)) - 1,
            CalendarUnit::Month => {
                let (y, m) = (1970 + p.div_euclid(12), p.rem_euclid(12) + 1);
                let last = days_in_month(y, m);
                days_from_civil(y, m, i64::from(self.day).clamp(1, last))
            }
            CalendarUnit::Year => days_from_civil(1970 + p, 1, 1),
        };
        let (y, m, d) = civil_from_days(day);
        let date = NaiveDate::from_ymd_opt(y as i32, m as u32, d as u32).unwrap_or_default();
        let minute = u32::from(self.reset_minute);
        let time = chrono::NaiveTime::from_hms_opt(minute / 60, minute % 60, 0).unwrap_or_default();
        local_instant(self.zone, date.and_time(time))
    }
}

/// The instant of a local time: the earlier of two in an overlap; in a gap, the first
/// instant whose local time is past it (the end of the gap).
fn local_instant(zone: Tz, local: NaiveDateTime) -> Millis {
    match zone.from_local_datetime(&local) {
        LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => t.timestamp_millis(),
        LocalResult::None => {
            // Zones change offset on whole minutes; a gap is at most a day.
            for step in 1..=24 * 60 {
                let later = local + chrono::Duration::minutes(step);
                if let LocalResult::Single(t) | LocalResult::Ambiguous(t, _) =
                    zone.from_local_datetime(&later)
                {
                    // Nothing between the missing time and `later` exists: `t` is the end
                    // of the gap.
                    return t.timestamp_millis();
                }
            }
            local.and_utc().timestamp_millis()
        }
    }
}

/// `1` → "1st", `22` → "22nd", `13` → "13th".
fn ordinal(n: u8) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The number of days in a month.
pub(crate) fn days_in_month(year: i64, month: i64) -> i64 {
    let next = if month == 12 {
        days_from_civil(year + 1, 1, 1)
    } else {
        days_from_civil(year, month + 1, 1)
    };
    next - days_from_civil(year, month, 1)
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
pub(crate) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// (year, month, day) → days since 1970-01-01.
pub(crate) fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The window as a policy word with its anchor ("month from the 15th 09:00 Europe/Paris").
impl std::fmt::Display for Anchored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = self.unit.as_str();
        let period = if self.count == 1 {
            unit.to_string()
        } else {
            format!("{} {unit}s", self.count)
        };
        write!(f, "{period} from {}", self.anchor_words())
    }
}

super::words::words!(CalendarUnit);
