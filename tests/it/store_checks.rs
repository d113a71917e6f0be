//! The Redis store's checks coalesce: while one runs, any number of requests ask for exactly
//! one follow-up. The server is stopped (SIGSTOP) so the first check cannot finish while the
//! requests arrive.
#![cfg(feature = "redis")]

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::redis_server::RedisServer;
use usage_guard::RedisStore;

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([name, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

#[test]
fn checks_run_one_at_a_time_with_one_follow_up() {
    let server = RedisServer::start();
    let pid = server.pid().expect("running");
    let store = RedisStore::connect(&server.url(), "coalesce").unwrap();
    signal(pid, "-STOP");
    store.request_checks(); // hangs on the stopped server until its timeout
    for _ in 0..100 {
        store.request_checks();
    }
    signal(pid, "-CONT");
    let deadline = Instant::now() + Duration::from_secs(15);
    while store.check_runs() < 2 {
        assert!(Instant::now() < deadline, "the follow-up never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Nothing asks for more: no third run may come.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(store.check_runs(), 2);
}
