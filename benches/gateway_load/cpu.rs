//! Whose CPU a phase used: the process's CPU time (`CLOCK_PROCESS_CPUTIME_ID`, threads
//! that ended included) less the bench's own threads (the load generator on the main
//! thread, any thread named `bench-…`), each read from `/proc/self/task/TID/schedstat` (nanoseconds
//! on a CPU).

/// The process's CPU time so far, in ns.
pub fn process_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The live threads of this process: (tid, name, ns on a CPU).
pub fn threads() -> Vec<(u32, String, u64)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let base = entry.path();
        let name = std::fs::read_to_string(base.join("comm")).unwrap_or_default();
        let ns = std::fs::read_to_string(base.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        out.push((tid, name.trim().to_string(), ns));
    }
    out
}

/// The CPU (ns) of the bench's own threads: the main thread and those named `bench-…`.
fn excluded_ns() -> u64 {
    let main = std::process::id();
    threads()
        .into_iter()
        .filter(|(tid, name, _)| *tid == main || name.starts_with("bench-"))
        .map(|t| t.2)
        .sum()
}

/// The CPU (ns) charged to the gateway so far (the difference of two readings is what it
/// used between them).
pub fn gateway_ns() -> u64 {
    // Read the exclusions first: the process total read after them covers them.
    let excluded = excluded_ns();
    process_ns().saturating_sub(excluded)
}

/// The CPU (ns) of the ledger's writer threads (`usage-guard-ledger-…`, cut to 15 bytes).
pub fn writer_ns() -> u64 {
    threads()
        .into_iter()
        .filter(|(_, name, _)| name.starts_with("usage-guard-led"))
        .map(|t| t.2)
        .sum()
}

/// The ids of the live threads named `usage-guard-gateway-…` (cut to `usage-guard-gat`).
pub fn serving_tids() -> Vec<u32> {
    threads()
        .into_iter()
        .filter(|(_, name, _)| name.starts_with("usage-guard-gat"))
        .map(|t| t.0)
        .collect()
}

/// The CPU (ns) of each of `tids` so far (0 for one that ended).
pub fn each_ns(tids: &[u32]) -> Vec<u64> {
    let all = threads();
    tids.iter()
        .map(|tid| all.iter().find(|t| t.0 == *tid).map_or(0, |t| t.2))
        .collect()
}
