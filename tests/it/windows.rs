//! Window math against the shared conformance vectors, plus edges the vectors do not cover.

use std::path::PathBuf;

use proptest::prelude::*;
use serde_json::Value;
use usage_guard::{iso8601, parse_iso8601};
use usage_guard::{CalendarUnit, Window};

/// The vectors: `../shared/conformance/windows.json` when the shared folder sits beside the
/// checkout (the project's source of truth), else the copy vendored in `tests/conformance`.
fn vectors() -> Value {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let shared = root.join("../shared/conformance/windows.json");
    let vendored = root.join("tests/conformance/windows.json");
    let path = if shared.exists() { shared } else { vendored };
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn at(text: &str) -> i64 {
    parse_iso8601(text).unwrap_or_else(|| panic!("bad instant {text}"))
}

fn unit(word: &str) -> CalendarUnit {
    match word {
        "day" => CalendarUnit::Day,
        "week" => CalendarUnit::Week,
        "month" => CalendarUnit::Month,
        "year" => CalendarUnit::Year,
        other => panic!("unknown unit {other}"),
    }
}

#[test]
fn every_conformance_case_passes() {
    let doc = vectors();
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 16, "the vectors shrank: {}", cases.len());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let now = at(case["now"].as_str().unwrap());
        let window = match case["kind"].as_str().unwrap() {
            "sliding" => Window::Sliding {
                seconds: case["window_seconds"].as_u64().unwrap() as u32,
            },
            _ => Window::Calendar(unit(case["unit"].as_str().unwrap())),
        };
        let start = window.bucket_start(now);
        assert_eq!(
            iso8601(start),
            case["bucket_start"].as_str().unwrap(),
            "{name}: bucket_start"
        );
        let expected_reset = case["resets_at"].as_str().map(str::to_string);
        if let Window::Sliding { .. } = window {
            let amount = case["amount"].as_u64().unwrap();
            let current = case["current_used"].as_u64().unwrap();
            let previous = case["previous_used"].as_u64().unwrap();
            let counted = window.counted(current, previous, now);
            assert_eq!(
                counted,
                case["counted"].as_u64().unwrap(),
                "{name}: counted"
            );
            assert_eq!(
                amount.saturating_sub(counted),
                case["left"].as_u64().unwrap(),
                "{name}: left"
            );
            let reset = window
                .resets_at(amount, current, previous, now)
                .map(iso8601);
            assert_eq!(reset, expected_reset, "{name}: resets_at");
        } else {
            let reset = window.resets_at(1, 0, 0, now).map(iso8601);
            assert_eq!(reset, expected_reset, "{name}: resets_at");
        }
    }
}

#[test]
fn seed_example_two_thousand_tokens_an_hour() {
    let hour = Window::Sliding { seconds: 3600 };
    let now = at("2026-11-30T14:20:00Z");
    assert_eq!(hour.carried(1200, now), 800);
    assert_eq!(hour.counted(500, 1200, now), 1300);
}

#[test]
fn month_ends_leap_years_and_the_turn_of_the_year() {
    let month = Window::Calendar(CalendarUnit::Month);
    for (now, start, end) in [
        (
            "2026-01-31T23:59:59Z",
            "2026-01-01T00:00:00Z",
            "2026-02-01T00:00:00Z",
        ),
        (
            "2026-02-28T12:00:00Z",
            "2026-02-01T00:00:00Z",
            "2026-03-01T00:00:00Z",
        ),
        (
            "2028-02-29T23:59:59Z",
            "2028-02-01T00:00:00Z",
            "2028-03-01T00:00:00Z",
        ),
        (
            "2026-04-30T23:59:59Z",
            "2026-04-01T00:00:00Z",
            "2026-05-01T00:00:00Z",
        ),
        (
            "2026-12-31T23:59:59Z",
            "2026-12-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
        ),
        (
            "2027-01-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
            "2027-02-01T00:00:00Z",
        ),
    ] {
        let s = month.bucket_start(at(now));
        assert_eq!(iso8601(s), start, "{now}");
        assert_eq!(iso8601(month.bucket_end(s)), end, "{now}");
    }
    let day = Window::Calendar(CalendarUnit::Day);
    assert_eq!(
        iso8601(day.bucket_start(at("2028-02-29T00:00:00Z"))),
        "2028-02-29T00:00:00Z"
    );
    assert_eq!(
        iso8601(day.bucket_start(at("2028-03-01T00:00:00Z") - 1)),
        "2028-02-29T00:00:00Z"
    );
    let year = Window::Calendar(CalendarUnit::Year);
    assert_eq!(
        iso8601(year.bucket_start(at("2028-12-31T23:59:59Z"))),
        "2028-01-01T00:00:00Z"
    );
    // A week that spans the turn of the year starts on its Monday in December.
    let week = Window::Calendar(CalendarUnit::Week);
    assert_eq!(
        iso8601(week.bucket_start(at("2027-01-01T10:00:00Z"))),
        "2026-12-28T00:00:00Z"
    );
    assert_eq!(
        iso8601(week.bucket_end(at("2026-12-28T00:00:00Z"))),
        "2027-01-04T00:00:00Z"
    );
}

#[test]
fn sliding_edges_at_the_bucket_boundary() {
    let ten = Window::Sliding { seconds: 600 };
    let edge = at("2026-11-30T14:30:00Z");
    // One millisecond before the edge the old bucket is current; at the edge it is previous
    // and counts in full.
    assert_eq!(ten.bucket_start(edge - 1), at("2026-11-30T14:20:00Z"));
    assert_eq!(ten.bucket_start(edge), edge);
    assert_eq!(ten.counted(0, 59, edge), 59);
    assert_eq!(ten.counted(59, 0, edge - 1), 59);
    // Rounded up: a single token of the previous bucket counts until the very end.
    assert_eq!(ten.carried(1, edge - 1), 1);
    assert_eq!(ten.carried(1, edge + 599_999), 1);
    assert_eq!(ten.carried(0, edge + 1), 0);
    // Buckets line up with the epoch, also before 1970.
    assert_eq!(ten.bucket_start(-1), -600_000);
}

#[test]
fn an_amount_of_zero_never_resets_and_room_left_has_no_sliding_reset() {
    let hour = Window::Sliding { seconds: 3600 };
    let now = at("2026-11-30T14:20:00Z");
    assert_eq!(hour.resets_at(0, 0, 0, now), None);
    assert_eq!(hour.resets_at(10, 5, 0, now), None);
    assert_eq!(Window::WhileRunning.resets_at(1, 1, 0, now), None);
}

proptest! {
    /// For any sliding state with nothing left, `resets_at` is the first whole second at
    /// which something is left, with no new use.
    #[test]
    fn sliding_resets_at_is_the_first_second_with_room(
        seconds in prop::sample::select(vec![60u32, 600, 3600, 7200]),
        amount in 1u64..5_000,
        current in 0u64..10_000,
        previous in 0u64..10_000,
        offset_ms in 0i64..7_200_000,
    ) {
        let w = Window::Sliding { seconds };
        let now = at("2026-11-30T00:00:00Z") + offset_ms % (i64::from(seconds) * 1000);
        let counted_at = |t: i64| {
            let start = w.bucket_start(now);
            if t < w.bucket_end(start) {
                w.counted(current, previous, t)
            } else if t < w.bucket_end(start) + i64::from(seconds) * 1000 {
                w.counted(0, current, t)
            } else {
                0
            }
        };
        match w.resets_at(amount, current, previous, now) {
            None => prop_assert!(w.counted(current, previous, now) < amount),
            Some(reset) => {
                prop_assert!(w.counted(current, previous, now) >= amount);
                prop_assert_eq!(reset % 1000, 0);
                prop_assert!(reset >= now);
                prop_assert!(counted_at(reset) < amount, "no room at the reset");
                let before = reset - 1000;
                if before >= now {
                    prop_assert!(counted_at(before) >= amount, "room a second earlier");
                }
            }
        }
    }

    /// Every instant lies in its bucket, and buckets tile time without gaps.
    #[test]
    fn buckets_hold_their_instants(ms in 0i64..4_102_444_800_000, which in 0usize..6) {
        let w = [
            Window::Calendar(CalendarUnit::Day),
            Window::Calendar(CalendarUnit::Week),
            Window::Calendar(CalendarUnit::Month),
            Window::Calendar(CalendarUnit::Year),
            Window::Sliding { seconds: 600 },
            Window::Sliding { seconds: 3600 },
        ][which];
        let start = w.bucket_start(ms);
        let end = w.bucket_end(start);
        prop_assert!(start <= ms && ms < end);
        prop_assert_eq!(w.bucket_start(end), end);
        prop_assert_eq!(w.bucket_start(end - 1), start);
    }
}

proptest! {
    /// Calendar buckets agree with chrono's calendar for any instant from 1900 to 2100.
    #[test]
    fn calendar_buckets_match_chrono(ms in -2_208_988_800_000i64..4_102_444_800_000) {
        use chrono::{Datelike, NaiveDate};
        let date = chrono::DateTime::from_timestamp_millis(ms).unwrap().date_naive();
        let midnight = |d: NaiveDate| d.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp_millis();
        let monday = date - chrono::Duration::days(i64::from(date.weekday().num_days_from_monday()));
        let first = NaiveDate::from_ymd_opt(date.year(), date.month(), 1).unwrap();
        let jan1 = NaiveDate::from_ymd_opt(date.year(), 1, 1).unwrap();
        prop_assert_eq!(Window::Calendar(CalendarUnit::Day).bucket_start(ms), midnight(date));
        prop_assert_eq!(Window::Calendar(CalendarUnit::Week).bucket_start(ms), midnight(monday));
        prop_assert_eq!(Window::Calendar(CalendarUnit::Month).bucket_start(ms), midnight(first));
        prop_assert_eq!(Window::Calendar(CalendarUnit::Year).bucket_start(ms), midnight(jan1));
        let next_month = first.checked_add_months(chrono::Months::new(1)).unwrap();
        prop_assert_eq!(Window::Calendar(CalendarUnit::Month).bucket_end(midnight(first)), midnight(next_month));
    }
}

proptest! {
    /// For any sliding state, `room_at(need)` is the first whole second (or `now`) at which
    /// `counted + need <= amount` with no new use, and `None` exactly when `need` is over
    /// the amount.
    #[test]
    fn sliding_room_at_is_the_first_second_the_need_fits(
        seconds in prop::sample::select(vec![60u32, 600, 3600]),
        amount in 1u64..5_000,
        current in 0u64..6_000,
        previous in 0u64..6_000,
        need in 0u64..6_000,
        offset_ms in 0i64..7_200_000,
    ) {
        let w = Window::Sliding { seconds };
        let now = at("2026-11-30T00:00:00Z") + offset_ms % (i64::from(seconds) * 1000);
        let end = w.bucket_end(w.bucket_start(now));
        let counted_at = |t: i64| {
            if t < end {
                w.counted(current, previous, t)
            } else if t < end + i64::from(seconds) * 1000 {
                w.counted(0, current, t)
            } else {
                0
            }
        };
        match w.room_at(amount, current, previous, need, now) {
            None => prop_assert!(need > amount),
            Some(t) if t == now => prop_assert!(counted_at(now) + need <= amount),
            Some(t) => {
                prop_assert!(counted_at(now) + need > amount);
                prop_assert_eq!(t % 1000, 0);
                prop_assert!(t > now);
                prop_assert!(counted_at(t) + need <= amount, "the need does not fit then");
                let before = t - 1000;
                if before >= now {
                    prop_assert!(counted_at(before) + need > amount, "it fit a second earlier");
                }
            }
        }
    }
}

#[test]
fn room_at_bucket_edges() {
    let hour = Window::Sliding { seconds: 3600 };
    // 14:20: 500 in this bucket, 1,200 in the previous: 800 carried, 1,300 counted of 2,000.
    let now = at("2026-11-30T14:20:00Z");
    assert_eq!(hour.counted(500, 1200, now), 1300);
    // 700 fits now; 1,000 fits once the previous bucket carries 500: 25 minutes left of
    // the bucket (ceil(1,200 × 1,500 s / 3,600 s) = 500), at 14:35.
    assert_eq!(hour.room_at(2000, 500, 1200, 700, now), Some(now));
    assert_eq!(
        hour.room_at(2000, 500, 1200, 1000, now).map(iso8601),
        Some("2026-11-30T14:35:00Z".into())
    );
    // 1,500 needs the previous bucket gone: exactly the bucket's end.
    assert_eq!(
        hour.room_at(2000, 500, 1200, 1500, now).map(iso8601),
        Some("2026-11-30T15:00:00Z".into())
    );
    // 1,900 needs this bucket (then the previous) to carry at most 100: ceil(500 × r / 3600)
    // ≤ 100 from r = 720 s before 16:00, at 15:48.
    assert_eq!(
        hour.room_at(2000, 500, 1200, 1900, now).map(iso8601),
        Some("2026-11-30T15:48:00Z".into())
    );
    // The whole amount: when nothing counts any more, the end of the next bucket.
    assert_eq!(
        hour.room_at(2000, 500, 1200, 2000, now).map(iso8601),
        Some("2026-11-30T16:00:00Z".into())
    );
    // More than the amount: never.
    assert_eq!(hour.room_at(2000, 0, 0, 2001, now), None);
    // At the very last millisecond of a bucket and at the first of the next.
    let last = at("2026-11-30T14:59:59Z") + 999;
    assert_eq!(
        hour.room_at(100, 100, 0, 1, last),
        Some(at("2026-11-30T15:00:36Z"))
    );
    let first = at("2026-11-30T15:00:00Z");
    assert_eq!(
        hour.room_at(100, 0, 100, 1, first),
        Some(at("2026-11-30T15:00:36Z"))
    );
    // Calendar windows: the end of the bucket, or now when it fits already.
    let day = Window::Calendar(CalendarUnit::Day);
    assert_eq!(day.room_at(10, 5, 0, 5, now), Some(now));
    assert_eq!(
        day.room_at(10, 6, 0, 5, now),
        Some(at("2026-12-01T00:00:00Z"))
    );
    assert_eq!(day.room_at(10, 0, 0, 11, now), None);
}

/// The zone vectors: `../shared/conformance/calendar_zones.json` beside the checkout, else
/// the copy vendored in `tests/conformance`.
fn zone_vectors() -> Value {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let shared = root.join("../shared/conformance/calendar_zones.json");
    let vendored = root.join("tests/conformance/calendar_zones.json");
    let path = if shared.exists() { shared } else { vendored };
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// A calendar window table as a policy writes it, through the policy parser.
fn calendar_window(case: &Value) -> Window {
    let mut table = serde_json::Map::new();
    for key in [
        "kind",
        "count",
        "unit",
        "anchor_zone",
        "anchor_reset_time",
        "anchor_day",
    ] {
        if let Some(v) = case.get(key) {
            table.insert(key.into(), v.clone());
        }
    }
    let doc = serde_json::json!({
        "rules": [{"name": "r", "amount": "requests", "budget": 1, "window": table}]
    });
    let policy = usage_guard::Policy::from_value(&doc).unwrap_or_else(|e| panic!("{e}"));
    policy.rules[0].spec.window
}

#[test]
fn every_calendar_zone_case_passes() {
    let doc = zone_vectors();
    let cases = doc["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 24, "the zone vectors changed size");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let now = at(case["now"].as_str().unwrap());
        let window = calendar_window(case);
        let start = window.bucket_start(now);
        assert_eq!(
            iso8601(start),
            case["bucket_start"].as_str().unwrap(),
            "{name}: bucket_start"
        );
        let reset = window.resets_at(1, 0, 0, now).map(iso8601);
        assert_eq!(
            reset.as_deref(),
            case["resets_at"].as_str(),
            "{name}: resets_at"
        );
        assert_eq!(
            window.bucket_end(start),
            window.resets_at(1, 0, 0, now).unwrap()
        );
        // The previous bucket ends where this one starts.
        let previous = window.previous_bucket_start(start).unwrap();
        assert_eq!(
            window.bucket_end(previous),
            start,
            "{name}: previous bucket"
        );
        // The key token names the window, and reads back as it.
        assert_eq!(
            Window::from_key_token(&window.key_token()),
            Some(window),
            "{name}"
        );
    }
}

#[test]
fn a_zoned_calendar_window_is_a_different_counter_from_utc() {
    let utc = Window::Calendar(CalendarUnit::Month);
    let plain = calendar_window(&serde_json::json!({
        "kind": "calendar", "unit": "month", "anchor_zone": "UTC",
        "anchor_reset_time": "00:00", "anchor_day": 1
    }));
    assert_eq!(plain, utc, "the plain UTC anchor is the shorthand's window");
    let paris = calendar_window(&serde_json::json!({
        "kind": "calendar", "unit": "month", "anchor_zone": "Europe/Paris"
    }));
    assert_ne!(paris, utc);
    assert_ne!(paris.key_token(), utc.key_token());
    assert_eq!(paris.key_token(), "c1mo.Europe%2FParis.0000.1");
    assert_eq!(
        paris.phrase(),
        "a calendar month from the 1st 00:00 Europe/Paris"
    );
}

#[test]
fn counted_calendar_windows_align_on_units_since_1970() {
    let two_days = calendar_window(&serde_json::json!({
        "kind": "calendar", "count": 2, "unit": "day"
    }));
    // 1970-01-01 is day 0: buckets start on even days.
    let start = two_days.bucket_start(at("2026-12-02T10:00:00Z"));
    let day = start / 86_400_000;
    assert_eq!(day % 2, 0);
    assert_eq!(two_days.bucket_end(start) - start, 2 * 86_400_000);
    assert!(start <= at("2026-12-02T10:00:00Z"));
}

#[test]
fn rolling_windows_are_sliding_windows() {
    let rolling = |count: u64, unit: &str| {
        calendar_window(&serde_json::json!({"kind": "rolling", "count": count, "unit": unit}))
    };
    assert_eq!(rolling(10, "minutes"), Window::Sliding { seconds: 600 });
    assert_eq!(rolling(2, "days"), Window::Sliding { seconds: 172_800 });
    assert_eq!(rolling(30, "seconds"), Window::Sliding { seconds: 30 });
}

#[test]
fn parses_window_words() {
    assert_eq!(
        "minute".parse::<Window>().ok(),
        Some(Window::Sliding { seconds: 60 })
    );
    assert_eq!(
        "10 minutes".parse::<Window>().ok(),
        Some(Window::Sliding { seconds: 600 })
    );
    assert_eq!(
        "2 hours".parse::<Window>().ok(),
        Some(Window::Sliding { seconds: 7200 })
    );
    assert_eq!(
        "week".parse::<Window>().ok(),
        Some(Window::Calendar(CalendarUnit::Week))
    );
    for bad in [
        "0 minutes",
        "fortnight",
        "ten minutes",
        "minutes",
        "second",
        "Day",
        "10  minutes",
    ] {
        assert_eq!(bad.parse::<Window>().ok(), None, "{bad}");
    }
    assert_eq!(
        "1 minute".parse::<Window>().ok(),
        Some(Window::Sliding { seconds: 60 })
    );
}

#[test]
fn phrases_read_naturally() {
    assert_eq!(
        Window::Sliding { seconds: 600 }.phrase(),
        "every 10 minutes"
    );
    assert_eq!(Window::Sliding { seconds: 3600 }.phrase(), "an hour");
    assert_eq!(Window::Calendar(CalendarUnit::Day).phrase(), "a day");
}

#[test]
fn sliding_retention_is_one_window_and_a_minute_after_the_end() {
    let w = Window::Sliding { seconds: 3600 };
    let start = at("2026-11-30T14:00:00Z");
    assert_eq!(w.retain_until(start), at("2026-11-30T16:01:00Z"));
    let d = Window::Calendar(CalendarUnit::Day);
    assert_eq!(
        d.retain_until(at("2026-11-30T00:00:00Z")),
        at("2026-12-02T00:00:00Z")
    );
}
