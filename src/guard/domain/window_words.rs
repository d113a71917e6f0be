//! The one window syntax, read the same wherever a window is written (the limit kinds' rules,
//! generic rules, stored quota policies, the CLI): words (`minute`, `day`, `10 minutes`,
//! `30 days`) and short forms (`60s`, `10m`, `24h`, `30d`, `2w`).
//!
//! The meaning of every form is fixed: a bare `day`, `week`, `month` or `year` is the calendar
//! period (UTC unless a window table gives a zone); any form with a number is a sliding
//! window of that length, so `"1d"` and `"1 day"` are a sliding 24 hours, never the calendar
//! day. A sliding window never resets: a calendar day lets an amount through just before
//! midnight and another just after, where a sliding window (its bucket plus the previous
//! bucket weighted by the share still inside it) lets use through again only as earlier use
//! slides out (at worst just under twice the amount within its length, after a burst at a
//! bucket's end; docs/policy.md). `minute` and `hour` are sliding: they have no calendar
//! meaning here.

use super::calendar::CalendarUnit;
use super::suggest::nearest;
use super::window::Window;

/// What the window words are, as an error lists them.
pub(crate) const ACCEPTED: &str = "day, week, month, year (calendar, UTC); minute, hour, or a \
     number and a unit: \"10 minutes\", \"24 hours\", \"30 days\", \"2 weeks\", or \
     short: \"60s\", \"10m\", \"24h\", \"30d\", \"2w\" (sliding)";

const CALENDAR: [&str; 4] = ["day", "week", "month", "year"];
/// `second` alone is refused: a window of one second is written with its number.
const BARE_SLIDING: [&str; 2] = ["minute", "hour"];
/// The units a number may take, singular and plural, with their seconds.
const UNITS: [(&str, &str, u32); 5] = [
    ("second", "seconds", 1),
    ("minute", "minutes", 60),
    ("hour", "hours", 3600),
    ("day", "days", 86_400),
    ("week", "weeks", 604_800),
];
/// The short units: `s`, `m` (minutes, never months), `h`, `d`, `w`.
const SHORT: [(char, u32); 5] = [
    ('s', 1),
    ('m', 60),
    ('h', 3600),
    ('d', 86_400),
    ('w', 604_800),
];
/// Abbreviations people write that the syntax does not take, with the unit they mean.
const ABBREVIATIONS: [(&str, &str); 9] = [
    ("sec", "seconds"),
    ("secs", "seconds"),
    ("min", "minutes"),
    ("mins", "minutes"),
    ("hr", "hours"),
    ("hrs", "hours"),
    ("wk", "weeks"),
    ("wks", "weeks"),
    ("mo", "months"),
];

/// The window `text` means, or why it means none (the reason first, then what is accepted
/// is the caller's to add: see [`ACCEPTED`]).
pub(crate) fn read(text: &str) -> Result<Window, String> {
    read_exact(text).map_err(|why| {
        let lower = text.trim().to_lowercase();
        if lower != text && read_exact(&lower).is_ok() {
            format!(
                "is not a window (did you mean \"{lower}\"? window words are lower case, with \
                 no spaces around them)"
            )
        } else {
            why
        }
    })
}

fn read_exact(text: &str) -> Result<Window, String> {
    if let Some(i) = CALENDAR.iter().position(|w| *w == text) {
        return Ok(Window::Calendar(CalendarUnit::ALL[i]));
    }
    if let Some(i) = BARE_SLIDING.iter().position(|w| *w == text) {
        return Ok(Window::Sliding {
            seconds: UNITS[i + 1].2,
        });
    }
    let (number, unit) = split_number(text).ok_or_else(|| not_a_window(text))?;
    let count: u32 = number.parse().map_err(|_| too_long())?;
    let unit_seconds = unit_seconds(unit).ok_or_else(|| bad_unit(text, number, unit))?;
    if count == 0 {
        return Err(
            "is not a window: a window of 0 counts nothing (the least is \"1 second\")".into(),
        );
    }
    let seconds = count.checked_mul(unit_seconds).ok_or_else(too_long)?;
    Ok(Window::Sliding { seconds })
}

/// What a form that reads as a calendar period to some means here, for `check` to say:
/// the numbered day and week forms (`"1d"`, `"1 day"`, `"7 days"`, `"2w"`), which are sliding.
pub(crate) fn note(text: &str, window: Window) -> Option<String> {
    let Window::Sliding { seconds } = window else {
        return None;
    };
    let (_, unit) = split_number(text)?;
    let calendar = match unit_seconds(unit)? {
        86_400 => "day",
        604_800 => "week",
        _ => return None,
    };
    let length = if seconds % 604_800 == 0 && calendar == "week" {
        plural(seconds / 604_800, "week")
    } else if seconds % 86_400 == 0 {
        plural(seconds / 86_400, "day")
    } else {
        plural(seconds / 3600, "hour")
    };
    let from = if calendar == "day" { "" } else { "Monday " };
    Some(format!(
        "is a sliding window of {length} (the last {length} at each call), not the calendar \
         {calendar}: write \"{calendar}\" for the calendar {calendar} (from {from}00:00 UTC)"
    ))
}

fn plural(n: u32, unit: &str) -> String {
    if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

/// `"10 minutes"` → (`10`, `minutes`), `"10m"` → (`10`, `m`), `"10 m"` → (`10`, `m`).
fn split_number(text: &str) -> Option<(&str, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let (number, rest) = text.split_at(digits);
    let unit = rest.strip_prefix(' ').unwrap_or(rest);
    (!unit.is_empty() && !unit.starts_with(' ')).then_some((number, unit))
}

fn unit_seconds(unit: &str) -> Option<u32> {
    if let Some((_, _, s)) = UNITS
        .iter()
        .find(|(one, many, _)| unit == *one || unit == *many)
    {
        return Some(*s);
    }
    let mut chars = unit.chars();
    let (Some(c), None) = (chars.next(), chars.next()) else {
        return None;
    };
    SHORT.iter().find(|(u, _)| *u == c).map(|(_, s)| *s)
}

fn too_long() -> String {
    "is too long a window (the longest sliding window is about 136 years; use \"year\")".into()
}

/// Why `number unit` is no window: a month or year has no fixed length, or the unit is
/// unknown (with the one meant, when it is close).
fn bad_unit(text: &str, number: &str, unit: &str) -> String {
    let lower = unit.to_lowercase();
    if ["month", "months", "mo", "year", "years", "y"].contains(&lower.as_str()) {
        let (word, days) = if lower.starts_with('y') {
            ("year", 365)
        } else {
            ("month", 30)
        };
        return format!(
            "is not a window: a {word} has no fixed length, so it cannot slide; write \
             \"{word}\" for the calendar {word} (UTC), or \"{days} days\" for a sliding \
             {days} days"
        );
    }
    let meant = ABBREVIATIONS
        .iter()
        .find(|(a, _)| *a == lower)
        .map(|(_, u)| *u)
        .or_else(|| {
            let one = number == "1";
            let words: Vec<&str> = UNITS
                .iter()
                .map(|(a, b, _)| if one { *a } else { *b })
                .collect();
            nearest(&lower, &words)
        });
    match meant {
        Some(u) => format!("is not a window (did you mean \"{number} {u}\"?)"),
        None => not_a_window(text),
    }
}

/// A text with no number: a word in the wrong case, a synonym (`daily`), a plural unit with
/// no number (`minutes`), or nothing near.
fn not_a_window(text: &str) -> String {
    let lower = text.trim().to_lowercase();
    if lower == "second" {
        return "is not a window (write \"1 second\" or \"1s\")".into();
    }
    if let Some((_, many, _)) = UNITS.iter().find(|(_, many, _)| *many == lower) {
        return format!("is not a window (it needs a number: \"10 {many}\")");
    }
    let words: Vec<&str> = CALENDAR.iter().chain(&BARE_SLIDING).copied().collect();
    match nearest(text, &words) {
        Some(w) => format!("is not a window (did you mean \"{w}\"?)"),
        None => "is not a window".into(),
    }
}

/// A window in the one syntax (module doc); anything else is an error saying why, in the words
/// of `read`.
impl std::str::FromStr for Window {
    type Err = String;

    fn from_str(text: &str) -> Result<Window, String> {
        read(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sliding(seconds: u32) -> Result<Window, String> {
        Ok(Window::Sliding { seconds })
    }

    #[test]
    fn every_form_reads() {
        assert_eq!(read("day"), Ok(Window::Calendar(CalendarUnit::Day)));
        assert_eq!(read("month"), Ok(Window::Calendar(CalendarUnit::Month)));
        assert_eq!(read("minute"), sliding(60));
        assert_eq!(read("hour"), sliding(3600));
        assert!(read("second").unwrap_err().contains("\"1 second\""));
        for (text, seconds) in [
            ("10 minutes", 600),
            ("1 minute", 60),
            ("1 minutes", 60),
            ("24 hours", 86_400),
            ("1 day", 86_400),
            ("30 days", 2_592_000),
            ("2 weeks", 1_209_600),
            ("60s", 60),
            ("10m", 600),
            ("24h", 86_400),
            ("1d", 86_400),
            ("30d", 2_592_000),
            ("2w", 1_209_600),
            ("60 s", 60),
        ] {
            assert_eq!(read(text), sliding(seconds), "{text}");
        }
    }

    #[test]
    fn what_is_refused_says_why() {
        let err = |t: &str| read(t).unwrap_err();
        assert!(err("1 month").contains("a month has no fixed length"));
        assert!(err("2 years").contains("\"365 days\""));
        assert!(err("0s").contains("a window of 0"));
        assert!(err("Day").contains("did you mean \"day\"? window words are lower case"));
        assert!(err("10 Minutes").contains("did you mean \"10 minutes\"? window words"));
        assert!(err("daily").contains("did you mean \"day\"?"));
        assert!(err("minutes").contains("it needs a number"));
        assert!(err("10 mins").contains("did you mean \"10 minutes\"?"));
        assert!(err("10 minuts").contains("did you mean \"10 minutes\"?"));
        assert!(err("99999999999 seconds").contains("too long"));
        assert!(err("5000000000s").contains("too long"));
        assert_eq!(err("fortnight"), "is not a window");
        for bad in ["", "10", "10  minutes", " day", "m", "1.5h", "-1h"] {
            assert!(read(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_day_and_week_numbers_are_noted_as_sliding() {
        let n = |t: &str| note(t, read(t).unwrap());
        assert!(n("1d").unwrap().starts_with("is a sliding window of 1 day"));
        assert!(n("1 day")
            .unwrap()
            .contains("write \"day\" for the calendar day"));
        assert!(n("30d").unwrap().contains("30 days"));
        assert!(n("2w").unwrap().contains("2 weeks"));
        assert_eq!(n("day"), None);
        assert_eq!(n("24h"), None);
        assert_eq!(n("10 minutes"), None);
    }
}
