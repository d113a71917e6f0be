//! The load: open-loop arrivals (calls started on a fixed schedule whether or not earlier
//! ones answered, so a slow answer cannot slow the load and hide itself), evenly spaced or
//! in bursts, and a closed loop of N connections each calling as fast as answers come.

use std::time::{Duration, Instant};

/// How calls arrive.
#[derive(Clone, Copy)]
pub enum Load {
    /// `rate` calls/s in bursts of `burst` started together (`burst = 1`: evenly spaced).
    Open { rate: u32, burst: u32 },
    /// `conns` connections, each starting its next call when the last answered.
    Closed { conns: u32 },
}

/// What one phase measured.
#[derive(Default)]
pub struct Sample {
    pub latencies: Vec<Duration>,
    pub errors: usize,
    /// Calls per second reached.
    pub rate: f64,
}

/// One call: sends, reads the answer to its last byte; its latency, or `None` on an error.
pub async fn one(
    client: &reqwest::Client,
    url: &str,
    key: &str,
    body: &'static str,
) -> Option<Duration> {
    let started = Instant::now();
    let response = client
        .post(url)
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    response.bytes().await.ok()?;
    Some(started.elapsed())
}

/// Runs `load` against `url` for `seconds`.
pub async fn run(
    client: &reqwest::Client,
    url: &str,
    key: &'static str,
    body: &'static str,
    load: Load,
    seconds: f64,
) -> Sample {
    match load {
        Load::Open { rate, burst } => open(client, url, key, body, rate, burst, seconds).await,
        Load::Closed { conns } => closed(client, url, key, body, conns, seconds).await,
    }
}

async fn open(
    client: &reqwest::Client,
    url: &str,
    key: &'static str,
    body: &'static str,
    rate: u32,
    burst: u32,
    seconds: f64,
) -> Sample {
    let burst = burst.max(1);
    let bursts = ((f64::from(rate) * seconds) as u32 / burst).max(1);
    let every = Duration::from_secs_f64(f64::from(burst) / f64::from(rate));
    let start = tokio::time::Instant::now() + Duration::from_millis(20);
    let mut tasks = Vec::with_capacity((bursts * burst) as usize);
    for b in 0..bursts {
        tokio::time::sleep_until(start + every * b).await;
        for _ in 0..burst {
            let (client, url) = (client.clone(), url.to_string());
            tasks.push(tokio::spawn(
                async move { one(&client, &url, key, body).await },
            ));
        }
    }
    let sent_for = start.elapsed().as_secs_f64() + every.as_secs_f64();
    let mut out = Sample::default();
    let total = tasks.len();
    for t in tasks {
        match t.await.ok().flatten() {
            Some(d) => out.latencies.push(d),
            None => out.errors += 1,
        }
    }
    out.rate = total as f64 / sent_for.max(1e-9);
    out
}

async fn closed(
    client: &reqwest::Client,
    url: &str,
    key: &'static str,
    body: &'static str,
    conns: u32,
    seconds: f64,
) -> Sample {
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..conns)
        .map(|_| {
            let (client, url) = (client.clone(), url.to_string());
            tokio::spawn(async move {
                let mut got = (Vec::new(), 0usize);
                while Instant::now() < until {
                    match one(&client, &url, key, body).await {
                        Some(d) => got.0.push(d),
                        None => got.1 += 1,
                    }
                }
                got
            })
        })
        .collect();
    let mut out = Sample::default();
    for t in tasks {
        if let Ok((lat, errors)) = t.await {
            out.latencies.extend(lat);
            out.errors += errors;
        }
    }
    let calls = out.latencies.len() + out.errors;
    out.rate = calls as f64 / started.elapsed().as_secs_f64();
    out
}
