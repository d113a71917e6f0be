//! The gateway's parsers of caller (and upstream) bytes are total (issue 31, item 7): a
//! request body of any bytes is JSON or an error, a stream of any chunks is cut into events
//! or refused as too large, any header value presents a key or none. Never a panic. Bounded
//! like `tests/it/parsers_fuzz.rs` (`UG_FUZZ_CASES`); found cases are kept in
//! `proptest-regressions/gateway_fuzz.txt`.

use axum::http::{HeaderMap, HeaderValue};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

use super::body;
use super::framing::Framer;
use super::keys;
use super::shape::Framing;

fn config() -> ProptestConfig {
    let cases = std::env::var("UG_FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1024);
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/gateway_fuzz.txt",
        ))),
        ..ProptestConfig::default()
    }
}

/// Bytes that are often almost JSON: fragments of it, glued.
fn jsonish() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        prop::sample::select(vec![
            "{",
            "}",
            "[",
            "]",
            ":",
            ",",
            "\"a\"",
            "\"model\"",
            "1e400",
            "-0",
            "null",
            "\"\\u00",
            "\\ud800",
            "true",
            " ",
            "\"",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 0..4),
    ];
    prop::collection::vec(piece, 0..24).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_body_of_any_bytes_is_json_or_an_error(bytes in jsonish()) {
        if let Ok(value) = body::parse(&bytes) {
            // What the strict parser accepts, serde accepts too, as the same value.
            let plain: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            prop_assert_eq!(value, plain);
        }
    }

    #[test]
    fn a_stream_of_any_chunks_is_cut_into_events(
        chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..12),
        ndjson in any::<bool>(),
        max_event in 1usize..64,
    ) {
        let framing = if ndjson { Framing::Ndjson } else { Framing::Sse };
        let mut framer = Framer::new(framing, max_event);
        let total: usize = chunks.iter().map(Vec::len).sum();
        let mut seen = 0;
        'chunks: for chunk in &chunks {
            framer.push(chunk);
            loop {
                match framer.next_event() {
                    Ok(Some(event)) => seen += event.len(),
                    Ok(None) => break,
                    Err(_) => break 'chunks,
                }
            }
        }
        seen += framer.take_rest().len();
        prop_assert!(seen <= total);
    }

    #[test]
    fn any_header_value_presents_a_key_or_none(
        authorization in prop::collection::vec(any::<u8>(), 0..40),
        api_key in prop::collection::vec(any::<u8>(), 0..40),
    ) {
        let mut headers = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_bytes(&authorization) {
            headers.insert("authorization", v);
        }
        if let Ok(v) = HeaderValue::from_bytes(&api_key) {
            headers.insert("x-api-key", v);
        }
        if let Some(key) = keys::presented(&headers) {
            prop_assert!(!key.is_empty());
        }
    }
}
