//! Trace and span ids: random ones, and the caller's from a W3C `traceparent` header.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::HeaderMap;

use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch.
pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Random bytes for trace and span ids (a randomly keyed SipHash of a counter and the time).
pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let state = std::collections::hash_map::RandomState::new();
    let mut out = [0u8; N];
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut h = state.build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_u64(now_ns());
        h.write_usize(i);
        chunk.copy_from_slice(&h.finish().to_le_bytes()[..chunk.len()]);
    }
    out
}

/// The caller's span from a W3C `traceparent` header (`00-<trace id>-<span id>-<flags>`).
pub(crate) fn trace_parent(headers: &HeaderMap) -> Option<([u8; 16], [u8; 8])> {
    let text = headers.get("traceparent")?.to_str().ok()?;
    let mut parts = text.trim().split('-');
    let (_version, trace, span) = (parts.next()?, parts.next()?, parts.next()?);
    let trace: [u8; 16] = hex(trace)?.try_into().ok()?;
    let span: [u8; 8] = hex(span)?.try_into().ok()?;
    (trace != [0; 16] && span != [0; 8]).then_some((trace, span))
}

fn hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}
