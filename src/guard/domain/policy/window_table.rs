//! A window written as a table: `{ kind = "rolling", count, unit }` or
//! `{ kind = "calendar", count, unit, anchor_zone, anchor_reset_time, anchor_day }`.

use serde_json::{Map, Value};

use super::values::{key_path, Parser};
use crate::guard::domain::calendar::{Anchored, CalendarUnit};
use crate::guard::domain::window::Window;

const ROLLING_UNITS: [&str; 5] = ["seconds", "minutes", "hours", "days", "weeks"];
const KEYS: [&str; 6] = [
    "kind",
    "count",
    "unit",
    "anchor_zone",
    "anchor_reset_time",
    "anchor_day",
];

impl Parser {
    /// A window table (the word shorthands are read by the caller).
    pub(super) fn window_table(&mut self, path: &str, value: &Value) -> Option<Window> {
        let fields = self.table(path, value, &KEYS)?;
        let kind_path = key_path(path, "kind");
        let kind = self.required(path, fields, "kind")?;
        match self.word(&kind_path, kind, &["rolling", "calendar"], "window kind")? {
            0 => self.rolling(path, fields),
            _ => self.anchored(path, fields),
        }
    }

    fn count(&mut self, path: &str, fields: &Map<String, Value>) -> Option<u32> {
        match fields.get("count") {
            None => Some(1),
            Some(v) => self
                .whole(&key_path(path, "count"), v, 1)
                .and_then(|n| u32::try_from(n).ok()),
        }
    }

    fn rolling(&mut self, path: &str, fields: &Map<String, Value>) -> Option<Window> {
        for key in ["anchor_zone", "anchor_reset_time", "anchor_day"] {
            if let Some(v) = fields.get(key) {
                self.error(
                    &key_path(path, key),
                    Some(v),
                    "a rolling window has no anchor; remove it (or use kind = \"calendar\")",
                );
            }
        }
        let count = self.count(path, fields);
        let unit_path = key_path(path, "unit");
        let unit = self.required(path, fields, "unit").and_then(|v| {
            self.word(&unit_path, v, &ROLLING_UNITS, "rolling unit")
                .map(|i| [1u32, 60, 3600, 86_400, 604_800][i])
        });
        let seconds = count?.checked_mul(unit?);
        if seconds.is_none() {
            self.error(
                &key_path(path, "count"),
                fields.get("count"),
                "is too long a window",
            );
        }
        Some(Window::Sliding { seconds: seconds? })
    }

    fn anchored(&mut self, path: &str, fields: &Map<String, Value>) -> Option<Window> {
        let count = self.count(path, fields);
        let unit_path = key_path(path, "unit");
        let units = CalendarUnit::ALL.map(CalendarUnit::as_str);
        let unit = self.required(path, fields, "unit").and_then(|v| {
            self.word(&unit_path, v, &units, "calendar unit")
                .map(|i| CalendarUnit::ALL[i])
        });
        let zone = match fields.get("anchor_zone") {
            None => Some(chrono_tz::Tz::UTC),
            Some(v) => self.zone(&key_path(path, "anchor_zone"), v),
        };
        let reset_minute = match fields.get("anchor_reset_time") {
            None => Some(0),
            Some(v) => self.reset_time(&key_path(path, "anchor_reset_time"), v),
        };
        let day = self.anchor_day(path, unit, fields.get("anchor_day"));
        Some(Window::calendar(Anchored {
            unit: unit?,
            count: count?,
            zone: zone?,
            reset_minute: reset_minute?,
            day: day?,
        }))
    }

    fn zone(&mut self, path: &str, value: &Value) -> Option<chrono_tz::Tz> {
        let zone = value.as_str().and_then(|s| s.parse::<chrono_tz::Tz>().ok());
        if zone.is_none() {
            self.error(
                path,
                Some(value),
                "is not an IANA time zone; accepted: a zone name such as \"UTC\", \
                 \"Europe/Paris\", \"America/New_York\"",
            );
        }
        zone
    }

    fn reset_time(&mut self, path: &str, value: &Value) -> Option<u16> {
        let minute = value.as_str().and_then(|s| {
            let (h, m) = s.split_once(':')?;
            let ok = h.len() == 2 && m.len() == 2;
            let (h, m) = (h.parse::<u16>().ok()?, m.parse::<u16>().ok()?);
            (ok && h < 24 && m < 60).then_some(h * 60 + m)
        });
        if minute.is_none() {
            self.error(
                path,
                Some(value),
                "is not a reset time; accepted: \"HH:MM\" in 24-hour local time, 00:00 to 23:59",
            );
        }
        minute
    }

    /// The anchor day: an ISO weekday (1 = Monday .. 7) for weeks, a day of the month
    /// (1..31, clamped to the month's last) for months; none for days and years.
    fn anchor_day(
        &mut self,
        path: &str,
        unit: Option<CalendarUnit>,
        value: Option<&Value>,
    ) -> Option<u8> {
        let day_path = key_path(path, "anchor_day");
        let max = match unit {
            Some(CalendarUnit::Week) => 7,
            Some(CalendarUnit::Month) => 31,
            Some(_) => {
                if let Some(v) = value {
                    self.error(
                        &day_path,
                        Some(v),
                        "is only for week (ISO weekday 1-7) and month (day 1-31) windows; remove it",
                    );
                    return None;
                }
                return Some(1);
            }
            None => return None,
        };
        let Some(v) = value else { return Some(1) };
        let day = self.whole(&day_path, v, 1)?;
        if day > max {
            let what = if max == 7 {
                "an ISO weekday: 1 (Monday) to 7 (Sunday)"
            } else {
                "a day of the month: 1 to 31 (clamped to the month's last day)"
            };
            self.error(&day_path, Some(v), format!("must be {what}"));
            return None;
        }
        Some(day as u8)
    }
}
