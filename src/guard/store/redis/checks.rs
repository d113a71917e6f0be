//! The store checks (docs/redis.md, "Store checks"): Redis must keep every counter
//! (`maxmemory-policy noeviction`), and the connection's ACL user, when it has one, must not
//! be able to `FLUSHALL` or `RESTORE`. Checked at first use and after each reconnect, one
//! check at a time with at most one follow-up; a failure is logged as a warning. An answer
//! that cannot be read is "unverified", never a pass.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::{RedisError, Value};

use super::connection::Conn;
use super::Inner;
use crate::guard::store::StoreCheck;

const PASSED: u8 = 1;
const FAILED: u8 = 2;

/// How long `wait` waits for a check to finish.
const WAIT_FOR: Duration = Duration::from_millis(3_000);
/// After a failed check, asking again (`wait`) runs a new check at most this often.
const RECHECK_AFTER: Duration = Duration::from_secs(2);

// 0: no check finished yet (pending).
/// The checks' state: one running at a time, at most one follow-up asked for.
#[derive(Debug, Default)]
pub(super) struct Checks {
    running: AtomicBool,
    again: AtomicBool,
    outcome: AtomicU8,
    /// Set by a failed operation: the next success (a reconnect) checks again.
    due: AtomicBool,
    started: AtomicBool,
    /// Checks run so far (for tests).
    pub(super) runs: AtomicU64,
    /// When the latest check finished.
    finished: crate::lock::Mutex<Option<std::time::Instant>>,
    /// The problems last logged: the same ones are not logged again until a check passes.
    logged: crate::lock::Mutex<Vec<String>>,
}

impl Checks {
    /// A forked child's checks: none run yet on its own connection (the first operation
    /// asks for one), the parent's last outcome in force until then.
    pub(super) fn after_fork(parent: Option<&Checks>) -> Checks {
        let outcome = parent.map_or(0, |p| p.outcome.load(Ordering::Acquire));
        Checks {
            outcome: AtomicU8::new(outcome),
            ..Checks::default()
        }
    }

    pub(super) fn outcome(&self) -> StoreCheck {
        match self.outcome.load(Ordering::Acquire) {
            PASSED => StoreCheck::Passed,
            FAILED => StoreCheck::Failed,
            _ => StoreCheck::Pending,
        }
    }

    /// Notes an operation's end: the first one, and the first success after a failure
    /// (the connection was made again), ask for a check.
    pub(super) fn after_operation(inner: &Arc<Inner>, ok: bool) {
        let checks = inner.checks();
        if !ok {
            checks.due.store(true, Ordering::Release);
            return;
        }
        let first =
            !checks.started.load(Ordering::Acquire) && !checks.started.swap(true, Ordering::AcqRel);
        let reconnected =
            checks.due.load(Ordering::Acquire) && checks.due.swap(false, Ordering::AcqRel);
        if first || reconnected {
            Self::request(inner);
        }
    }

    /// Asks for a check: starts one, or (while one runs) asks for one follow-up.
    pub(super) fn request(inner: &Arc<Inner>) {
        let checks = inner.checks();
        checks.started.store(true, Ordering::Release);
        if checks.running.swap(true, Ordering::AcqRel) {
            checks.again.store(true, Ordering::Release);
            return;
        }
        let inner = inner.clone();
        crate::runtime::shared().spawn(async move {
            loop {
                let outcome = run(&inner).await;
                let checks = inner.checks();
                checks.runs.fetch_add(1, Ordering::AcqRel);
                checks.outcome.store(outcome, Ordering::Release);
                *checks.finished.lock() = Some(std::time::Instant::now());
                if checks.again.swap(false, Ordering::AcqRel) {
                    continue;
                }
                checks.running.store(false, Ordering::Release);
                // A request that came between the swap and the store saw `running`.
                if checks.again.load(Ordering::Acquire)
                    && !checks.running.swap(true, Ordering::AcqRel)
                {
                    checks.again.store(false, Ordering::Release);
                    continue;
                }
                break;
            }
        });
    }

    /// The latest outcome; when none has finished, runs one and waits for it (up to 3 s;
    /// then still pending). After a failure, asks for a new check (at most every 2 s) so a
    /// store that was fixed is trusted again.
    pub(super) async fn wait(inner: &Arc<Inner>) -> StoreCheck {
        let checks = inner.checks();
        match checks.outcome() {
            StoreCheck::Passed => return StoreCheck::Passed,
            StoreCheck::Failed => {
                let stale = checks
                    .finished
                    .lock()
                    .is_none_or(|at| at.elapsed() >= RECHECK_AFTER);
                if stale && !checks.running.load(Ordering::Acquire) {
                    Self::request(inner);
                }
                return StoreCheck::Failed;
            }
            StoreCheck::Pending => {}
        }
        Self::request(inner);
        let deadline = std::time::Instant::now() + WAIT_FOR;
        while inner.checks().outcome() == StoreCheck::Pending
            && std::time::Instant::now() < deadline
        {
            let nap = crate::runtime::shared()
                .spawn(async { tokio::time::sleep(Duration::from_millis(20)).await });
            let _ = nap.await;
        }
        inner.checks().outcome()
    }
}

/// Runs every check once; logs each problem as a warning.
async fn run(inner: &Arc<Inner>) -> u8 {
    let problems = match inner.target.connection().await {
        Ok(mut conn) => problems(inner, &mut conn).await,
        Err(e) => vec![format!("cannot connect to check the store: {e}")],
    };
    let mut logged = inner.checks().logged.lock();
    if problems.is_empty() {
        logged.clear();
        return PASSED;
    }
    if *logged == problems {
        return FAILED;
    }
    *logged = problems.clone();
    drop(logged);
    for problem in &problems {
        log::warn!(
            "counter store check ({}): {problem}; lost or evicted counters would read as \
             unspent (settings.store_checks = \"enforce\" refuses fenced rules until this passes)",
            inner.description
        );
    }
    FAILED
}

async fn problems(inner: &Inner, conn: &mut Conn) -> Vec<String> {
    let mut out = Vec::new();
    let policy: Result<Vec<String>, RedisError> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    match policy.as_deref() {
        Ok([_, value]) if value == "noeviction" => {}
        Ok([_, value]) => out.push(format!(
            "maxmemory-policy is {value:?}; the counter store needs \"noeviction\""
        )),
        Ok(other) => out.push(format!(
            "maxmemory-policy unverified: unreadable answer {other:?}"
        )),
        Err(e) => out.push(format!("maxmemory-policy unverified: {e}")),
    }
    if let Some(user) = &inner.acl_user {
        let probe = format!("{}probe", inner.key_head);
        for command in [vec!["FLUSHALL"], vec!["RESTORE", probe.as_str(), "0", "x"]] {
            let answer: Result<Value, RedisError> = redis::cmd("ACL")
                .arg("DRYRUN")
                .arg(user)
                .arg(&command)
                .query_async(conn)
                .await;
            if let Some(problem) = dryrun_problem(user, command[0], answer) {
                out.push(problem);
            }
        }
    }
    out
}

/// What `ACL DRYRUN <user> <command>` says about the command: `None` when it is denied.
fn dryrun_problem(user: &str, command: &str, answer: Result<Value, RedisError>) -> Option<String> {
    let text = match answer {
        Ok(Value::Okay) => "OK".to_string(),
        Ok(Value::SimpleString(s)) => s,
        Ok(Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
        Ok(other) => {
            return Some(format!(
                "{command} denial unverified: unreadable answer {other:?}"
            ))
        }
        Err(e) => {
            return Some(format!(
                "{command} denial unverified (ACL DRYRUN failed: {e})"
            ))
        }
    };
    if text == "OK" {
        return Some(format!("the ACL user {user:?} may run {command}"));
    }
    if text.contains("no permissions") {
        return None;
    }
    Some(format!(
        "{command} denial unverified: unreadable answer {text:?}"
    ))
}

impl super::Inner {
    /// This process's store checks.
    pub(super) fn checks(&self) -> &Checks {
        self.checks.get_with(Checks::after_fork)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_denial_passes() {
        let denied = Value::BulkString(
            b"This user has no permissions to run the 'flushall' command".to_vec(),
        );
        assert_eq!(dryrun_problem("g", "FLUSHALL", Ok(denied)), None);
        assert!(dryrun_problem("g", "FLUSHALL", Ok(Value::Okay))
            .unwrap()
            .contains("may run"));
        let odd = Value::Int(1);
        assert!(dryrun_problem("g", "FLUSHALL", Ok(odd))
            .unwrap()
            .contains("unverified"));
        let error = RedisError::from((redis::ErrorKind::Io, "gone"));
        assert!(dryrun_problem("g", "RESTORE", Err(error))
            .unwrap()
            .contains("unverified"));
    }
}
