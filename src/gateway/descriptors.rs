//! The process's file descriptors and the connection cap they allow. Every client
//! connection is a descriptor and a model call holds a second one (its upstream
//! connection); Redis, the ledger, the listening socket and the log need some too. A
//! gateway that runs out accepts nothing more, `/healthz` included, so the cap is set
//! below what the descriptors allow, and the soft limit is raised to the hard one first.

use crate::error::{Error, Result};

/// Descriptors left for everything but client connections and their upstream calls.
pub(super) const RESERVED_DESCRIPTORS: u64 = 256;
/// Connections accepted past the cap to answer `/healthz` and `/readyz` (every other path
/// answers 503): a full gateway still tells its orchestrator it is alive.
pub(super) const HEALTH_CONNECTIONS: u64 = 32;
/// The derived cap's ceiling: past it, memory (each connection's buffers and task) rather
/// than descriptors is what runs out.
pub(super) const MAX_DERIVED_CONNECTIONS: u64 = 32_768;

/// Raises the soft descriptor limit to the hard one; returns the soft limit in force
/// (`None` where it cannot be read).
pub(super) fn raise_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit for getrlimit/setrlimit to read and write.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: as above; raising the soft limit up to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            log::info!(
                "gateway: file descriptor limit raised from {} to {}",
                limit.rlim_cur,
                limit.rlim_max
            );
            limit.rlim_cur = limit.rlim_max;
        } else {
            log::warn!(
                "gateway: cannot raise the file descriptor limit from {} to {}",
                limit.rlim_cur,
                limit.rlim_max
            );
        }
    }
    // `rlim_t` is narrower than u64 on some targets.
    #[allow(clippy::unnecessary_cast)]
    Some(limit.rlim_cur as u64)
}

/// The connection cap for `descriptors` (the soft limit): each call may hold two (its own
/// and its upstream's) once [`RESERVED_DESCRIPTORS`] and the health connections are set
/// aside; at least 1, at most [`MAX_DERIVED_CONNECTIONS`].
pub(super) fn derived_cap(descriptors: u64) -> u64 {
    let room = descriptors.saturating_sub(RESERVED_DESCRIPTORS + HEALTH_CONNECTIONS);
    (room / 2).clamp(1, MAX_DERIVED_CONNECTIONS)
}

/// The cap in force: `configured` (`gateway.max_connections`) when the descriptors allow
/// it, else an error saying what they allow; derived from them when not configured.
pub(super) fn connection_cap(configured: Option<u64>, descriptors: Option<u64>) -> Result<u64> {
    let Some(descriptors) = descriptors else {
        return Ok(configured.unwrap_or(MAX_DERIVED_CONNECTIONS.min(1024)));
    };
    let Some(cap) = configured else {
        return Ok(derived_cap(descriptors));
    };
    let needed = cap * 2 + RESERVED_DESCRIPTORS + HEALTH_CONNECTIONS;
    if needed > descriptors {
        return Err(Error::invalid(
            "gateway.max_connections",
            cap.to_string(),
            format!(
                "needs about {needed} file descriptors (two a call, {} for the rest) and \
                 this process may open {descriptors}: lower it to at most {} or raise the \
                 limit (ulimit -n)",
                RESERVED_DESCRIPTORS + HEALTH_CONNECTIONS,
                derived_cap(descriptors)
            ),
        ));
    }
    Ok(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_descriptors_for_upstreams_and_the_rest() {
        assert_eq!(derived_cap(1024), (1024 - 288) / 2);
        assert_eq!(derived_cap(100), 1);
        assert_eq!(derived_cap(1 << 20), MAX_DERIVED_CONNECTIONS);
        assert_eq!(connection_cap(None, Some(1024)).unwrap(), 368);
        assert_eq!(connection_cap(Some(300), Some(1024)).unwrap(), 300);
        let e = connection_cap(Some(400), Some(1024))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gateway.max_connections") && e.contains("at most 368"),
            "{e}"
        );
    }
}
