//! The gateway's added latency at a fixed arrival rate (issue 15's goal: p99 added ≤ 1 ms at
//! 500 requests/s), measured open loop: requests start on a fixed schedule whether or not
//! earlier ones have answered, so a slow answer cannot slow the load down and hide itself.
//!
//! In one process: a fake upstream (axum, answering a canned chat completion, plain or SSE,
//! on its own one-thread runtime), the gateway in front of it (`Gateway::start`, the crate's
//! runtime, the in-memory store, a Direct Limit with a tokens and a requests rule, no
//! ledger), and the load generator (reqwest, one pooled client, on its own one-thread
//! runtime). Each round sends `rate × seconds` calls straight to the fake upstream, then the
//! same through the gateway, plain then streamed; rounds alternate so that the machine's
//! other load falls on both alike. Latency is from the moment a call is sent to its last
//! byte. Prints p50/p90/p99/p99.9/max of each, the rate reached, and what the gateway adds.
//!
//! Run: `cargo bench --bench gateway_load --no-default-features --features gateway,bpe-openai
//! -- [--rate 500] [--seconds 3] [--rounds 3] [--threads N]` (`make bench` runs it; benches/gateway.py
//! prints the Python-client figures beside LiteLLM's).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{header, Response};
use axum::routing::post;
use axum::Router;
use usage_guard::{Gateway, GatewayOptions, Guard, MemoryStore, Policy, SystemClock};

const KEY: &str = "sk-load";
const BODY: &str = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"Say hello."}]}"#;
const STREAM_BODY: &str =
    r#"{"model":"gpt-4o","messages":[{"role":"user","content":"Say hello."}],"stream":true}"#;
const PLAIN: &str = r#"{"id":"chatcmpl-load","object":"chat.completion","created":0,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":" hello hello hello hello hello"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16}}"#;
const CHUNK: &str = r#"{"id":"chatcmpl-load","object":"chat.completion.chunk","created":0,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":" hello"},"logprobs":null,"finish_reason":null}]}"#;
const LAST: &str = r#"{"id":"chatcmpl-load","object":"chat.completion.chunk","created":0,"model":"gpt-4o","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}"#;
const USAGE: &str = r#"{"id":"chatcmpl-load","object":"chat.completion.chunk","created":0,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16}}"#;

fn policy(upstream: &str, threads: Option<u32>) -> Policy {
    let threads = threads.map_or(String::new(), |n| format!("threads = {n}"));
    Policy::from_toml(&format!(
        r#"
[models.gpt-4o]
provider = "openai"
max_output_tokens = 16384
prices = {{ input = 2.5, output = 10.0 }}

[[limits.direct]]
user = "alice"
model = "gpt-4o"
rules = [
  {{ metric = "tokens", amount = 1000000000000, window = "day" }},
  {{ metric = "requests", amount = 1000000000000, window = "10 minutes" }},
]

[settings]
anonymous = "refuse"

[providers.openai]
base_url = "{upstream}"

[gateway]
{threads}

[gateway.keys.load]
key = "{KEY}"
principal = "alice"
"#
    ))
    .expect("the bench policy is valid")
}

/// The fake upstream's answer: the canned completion, or its stream (five content chunks,
/// the finish, the usage chunk when asked for, `[DONE]`), each event its own write.
async fn answer(body: Bytes) -> Response<Body> {
    let text = std::str::from_utf8(&body).unwrap_or("");
    let stream = text.contains(r#""stream":true"#);
    if !stream {
        return Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(PLAIN))
            .expect("a valid response");
    }
    let mut events: Vec<String> = (0..5).map(|_| format!("data: {CHUNK}\n\n")).collect();
    events.push(format!("data: {LAST}\n\n"));
    if text.contains(r#""include_usage":true"#) {
        events.push(format!("data: {USAGE}\n\n"));
    }
    events.push("data: [DONE]\n\n".to_string());
    let pieces = futures::stream::iter(events.into_iter().map(Ok::<_, Infallible>));
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(pieces))
        .expect("a valid response")
}

/// Starts the fake upstream on its own thread and runtime; its base URL.
fn start_upstream() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.set_nonblocking(true).expect("non-blocking");
    let address = listener.local_addr().expect("an address");
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("a listener");
            let app = Router::new().route("/v1/chat/completions", post(answer));
            axum::serve(listener, app)
                .await
                .expect("the upstream serves");
        });
    });
    format!("http://{address}")
}

/// One call: sends, reads the answer to its last byte; its latency, or `None` on an error.
async fn one(client: &reqwest::Client, url: &str, body: &'static str) -> Option<Duration> {
    let started = Instant::now();
    let response = client
        .post(url)
        .header("authorization", format!("Bearer {KEY}"))
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

/// Calls started every `1/rate` s for `seconds`, each in its own task (open loop): their
/// latencies, the errors, and the rate reached.
async fn paced(
    client: &reqwest::Client,
    url: &str,
    body: &'static str,
    rate: u32,
    seconds: f64,
) -> (Vec<Duration>, usize, f64) {
    let total = (f64::from(rate) * seconds) as usize;
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    let start = tokio::time::Instant::now() + Duration::from_millis(20);
    let mut tasks = Vec::with_capacity(total);
    for i in 0..total {
        tokio::time::sleep_until(start + interval * i as u32).await;
        let (client, url) = (client.clone(), url.to_string());
        tasks.push(tokio::spawn(async move { one(&client, &url, body).await }));
    }
    let sent_for = start.elapsed().as_secs_f64();
    let mut latencies = Vec::with_capacity(total);
    let mut errors = 0;
    for t in tasks {
        match t.await.ok().flatten() {
            Some(d) => latencies.push(d),
            None => errors += 1,
        }
    }
    (latencies, errors, total as f64 / sent_for.max(1e-9))
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * sorted.len() as f64) as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e3
}

struct Args {
    rate: u32,
    seconds: f64,
    rounds: u32,
    /// The gateway's serving threads (`None`: its default, one per core).
    threads: Option<u32>,
}

fn args() -> Args {
    let mut out = Args {
        rate: 500,
        seconds: 3.0,
        rounds: 3,
        threads: None,
    };
    let given: Vec<String> = std::env::args().collect();
    for pair in given.windows(2) {
        match pair[0].as_str() {
            "--rate" => out.rate = pair[1].parse().expect("--rate N"),
            "--seconds" => out.seconds = pair[1].parse().expect("--seconds S"),
            "--rounds" => out.rounds = pair[1].parse().expect("--rounds N"),
            "--threads" => out.threads = Some(pair[1].parse().expect("--threads N")),
            _ => {}
        }
    }
    out
}

fn main() {
    let Args {
        rate,
        seconds,
        rounds,
        threads,
    } = args();
    let upstream = start_upstream();
    let guard = Guard::new(
        policy(&upstream, threads),
        Arc::new(MemoryStore::new()),
        Arc::new(SystemClock),
    );
    let gateway = Gateway::start(
        guard,
        GatewayOptions {
            listen: "127.0.0.1:0".into(),
            dashboard_only: false,
        },
    )
    .expect("the gateway starts");
    let targets = [
        ("direct", format!("{upstream}/v1/chat/completions")),
        (
            "gateway",
            format!("http://{}/v1/chat/completions", gateway.address()),
        ),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(256)
        .build()
        .expect("a client");
    // (mode, target) → latencies, errors, rates reached
    let mut got: Vec<Row<'_>> = Vec::new();
    runtime.block_on(async {
        for (_, url) in &targets {
            // Warm: connections, the tokenizer, the path cache.
            for body in [BODY, STREAM_BODY] {
                paced(&client, url, body, 200, 0.5).await;
            }
        }
        for round in 0..rounds {
            for (mode, body) in [("plain", BODY), ("stream", STREAM_BODY)] {
                for (name, url) in &targets {
                    let (lat, errors, reached) = paced(&client, url, body, rate, seconds).await;
                    let at = got.iter().position(|g| g.0 == (mode, *name));
                    let i = at.unwrap_or_else(|| {
                        got.push(((mode, *name), Vec::new(), 0, Vec::new()));
                        got.len() - 1
                    });
                    got[i].1.extend(lat);
                    got[i].2 += errors;
                    got[i].3.push(reached);
                }
            }
            eprintln!("round {} of {rounds} done", round + 1);
        }
    });
    let metrics = gateway.metrics_text();
    gateway.shutdown();
    gateway.wait(Some(Duration::from_secs(10)));
    report(&mut got, rate, seconds, rounds);
    for family in [
        "usage_guard_admission_seconds",
        "usage_guard_gateway_upstream_seconds",
    ] {
        let read = |suffix: &str| {
            metrics
                .lines()
                .find(|l| l.starts_with(&format!("{family}_{suffix} ")))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        };
        if let (Some(sum), Some(count)) = (read("sum"), read("count")) {
            let mean = sum / count.max(1.0) * 1e3;
            println!("inside the gateway: {family} mean {mean:.3} ms over {count} calls");
        }
    }
}

type Row<'a> = ((&'a str, &'a str), Vec<Duration>, usize, Vec<f64>);

fn report(got: &mut [Row<'_>], rate: u32, seconds: f64, rounds: u32) {
    println!(
        "gateway_load: open loop at {rate} calls/s, {rounds} rounds of {seconds} s per target \
         and mode (alternating), latency from send to last byte"
    );
    println!(
        "{:7} {:8} {:>7} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6}",
        "mode",
        "target",
        "calls",
        "rate",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms",
        "errors"
    );
    for row in got.iter_mut() {
        row.1.sort();
    }
    for ((mode, name), lat, errors, reached) in got.iter() {
        let slowest = reached.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "{:7} {:8} {:>7} {:>7.0} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>6}",
            mode,
            name,
            lat.len(),
            slowest,
            pct(lat, 50.0),
            pct(lat, 90.0),
            pct(lat, 99.0),
            pct(lat, 99.9),
            lat.last().map_or(f64::NAN, |d| d.as_secs_f64() * 1e3),
            errors
        );
    }
    for mode in ["plain", "stream"] {
        let find = |n: &str| got.iter().find(|g| g.0 == (mode, n)).map(|g| &g.1[..]);
        if let (Some(d), Some(g)) = (find("direct"), find("gateway")) {
            let (a50, a99) = (pct(g, 50.0) - pct(d, 50.0), pct(g, 99.0) - pct(d, 99.0));
            let verdict = if a99 <= 1.0 { "met" } else { "NOT met" };
            println!(
                "{mode:7} gateway adds p50 {a50:.3} ms, p99 {a99:.3} ms \
                 (goal p99 added <= 1 ms at {rate}/s: {verdict})"
            );
        }
    }
}
