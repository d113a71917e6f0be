//! The gateway's added latency and CPU per call under the issue-36 arrivals, each beside
//! the upstream called directly in the same run:
//!
//! | scenario | arrivals |
//! |---|---|
//! | `500/s even` | one call every 2 ms (issue 15's goal: p99 added ≤ 1 ms) |
//! | `500/s even, stream` | the same, streamed (SSE from the bench's own upstream) |
//! | `500/s bursts` | bursts of 10 calls every 20 ms |
//! | `500/s bursts, ledger` | the same with a SQLite ledger (WAL, the default durability) |
//! | `100/s bursts` | bursts of 10 every 100 ms |
//! | `closed 32` | 32 connections calling as fast as answers come (the ceiling) |
//! | `closed 32, ledger` | the same with the SQLite ledger |
//!
//! Open loop: calls start on a fixed schedule whether or not earlier ones answered.
//! In one process: the upstream (nginx answering a canned chat completion when installed,
//! else the bench's own axum upstream on one thread; streams always the latter), the
//! gateway (`Gateway::start`, the in-memory store, a Direct Limit that never binds; a new
//! gateway for each scenario) and the load generator (reqwest, one pooled client, on the
//! main thread's one-thread runtime). Rounds alternate direct and gateway so the machine's
//! other load falls on both alike. Latency is from send to last byte; "adds" is the median
//! over rounds of (gateway − direct) at each percentile. CPU per call is the gateway's:
//! the process's CPU less the bench's own threads over the gateway's phases (serving
//! threads, the crate's runtime, the ledger's writer), divided by calls; "idle µs/s" is what
//! it spent per second while only the direct target was called.
//!
//! Run: `cargo bench --bench gateway_load --no-default-features --features
//! gateway,bpe-openai,sqlite,thread-mimalloc -- [--seconds 3] [--rounds 3] [--only SUBSTRING] [--threads N]
//! [--upstream rust|nginx]` (`make bench` runs it).

use std::sync::Arc;
use std::time::Duration;

use usage_guard::{Gateway, GatewayOptions, Guard, MemoryStore, Policy, SystemClock};

#[path = "gateway_load/cpu.rs"]
mod cpu;
#[path = "gateway_load/load.rs"]
mod load;
#[path = "gateway_load/report.rs"]
mod report;
#[path = "gateway_load/upstream.rs"]
mod upstream;

use load::Load;
use report::{Phase, Scenario};

const KEY: &str = "sk-load";
const BODY: &str = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"Say hello."}]}"#;
const STREAM_BODY: &str =
    r#"{"model":"gpt-4o","messages":[{"role":"user","content":"Say hello."}],"stream":true}"#;

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

struct Args {
    seconds: f64,
    rounds: u32,
    only: Option<String>,
    threads: Option<u32>,
    upstream: Option<String>,
    /// Gateways compared in the same run (one, unnamed: "gateway").
    variants: Vec<String>,
}

const USAGE: &str = "usage: cargo bench --bench gateway_load --no-default-features --features \
gateway,bpe-openai,sqlite,thread-mimalloc -- [--seconds 3] [--rounds 3] [--only SUBSTRING] [--threads N] \
[--upstream rust|nginx]";

fn args() -> Args {
    let mut out = Args {
        seconds: 3.0,
        rounds: 3,
        only: None,
        threads: None,
        upstream: None,
        variants: vec![String::new()],
    };
    let given: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < given.len() {
        let flag = given[i].as_str();
        // `cargo bench` passes `--bench` to a bench without the default harness.
        if flag == "--bench" {
            i += 1;
            continue;
        }
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let Some(value) = given.get(i + 1) else {
            eprintln!("gateway_load: {flag} needs a value, or is not an option\n{USAGE}");
            std::process::exit(2);
        };
        match flag {
            "--seconds" => out.seconds = value.parse().expect("--seconds S"),
            "--rounds" => out.rounds = value.parse().expect("--rounds N"),
            "--only" => out.only = Some(value.clone()),
            "--threads" => out.threads = Some(value.parse().expect("--threads N")),
            "--upstream" => out.upstream = Some(value.clone()),
            _ => {
                eprintln!("gateway_load: unknown option {flag}\n{USAGE}");
                std::process::exit(2);
            }
        }
        i += 2;
    }
    out
}

fn scenarios() -> Vec<Scenario> {
    let bursts = |rate| Load::Open { rate, burst: 10 };
    let even = Load::Open {
        rate: 500,
        burst: 1,
    };
    let closed = Load::Closed { conns: 32 };
    let s = |name, load, stream, ledger| Scenario {
        name,
        load,
        stream,
        ledger,
    };
    vec![
        s("500/s even", even, false, false),
        s("500/s even, stream", even, true, false),
        s("500/s bursts", bursts(500), false, false),
        s("500/s bursts, ledger", bursts(500), false, true),
        s("100/s bursts", bursts(100), false, false),
        s("closed 32", closed, false, false),
        s("closed 32, ledger", closed, false, true),
    ]
}

/// A gateway for one scenario, and its ledger's file.
struct Under {
    gateway: Gateway,
    /// Its serving threads.
    serving: Vec<u32>,
    ledger_file: Option<std::path::PathBuf>,
}

fn start_gateway(
    upstream: &str,
    threads: Option<u32>,
    ledger: bool,
    n: usize,
    variant: &str,
) -> Under {
    let before = cpu::serving_tids();
    let mut guard = Guard::new(
        policy(upstream, threads),
        Arc::new(MemoryStore::new()),
        Arc::new(SystemClock),
    );
    let mut ledger_file = None;
    if ledger {
        let name = format!("gateway-load-{}-{n}{variant}.sqlite", std::process::id());
        let file = std::env::temp_dir().join(name);
        let ledger =
            usage_guard::SqliteLedger::open(&file.display().to_string()).expect("the ledger opens");
        guard = guard.with_ledger(Arc::new(ledger));
        ledger_file = Some(file);
    }
    let gateway = Gateway::start(
        guard,
        GatewayOptions {
            listen: "127.0.0.1:0".into(),
            dashboard_only: false,
        },
    )
    .expect("the gateway starts");
    std::thread::sleep(Duration::from_millis(50));
    let serving = cpu::serving_tids()
        .into_iter()
        .filter(|t| !before.contains(t))
        .collect();
    Under {
        gateway,
        serving,
        ledger_file,
    }
}

fn stop(under: Under) {
    under.gateway.shutdown();
    under.gateway.wait(Some(Duration::from_secs(10)));
    if let Some(file) = under.ledger_file {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
        }
    }
}

fn main() {
    let a = args();
    let own = upstream::start_rust();
    let nginx = match a.upstream.as_deref() {
        Some("rust") => None,
        _ => upstream::start_nginx(),
    };
    let plain_upstream = nginx.as_ref().map_or(own.clone(), |n| n.url.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("bench-client-io")
        .build()
        .expect("a runtime");
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(256)
        .build()
        .expect("a client");
    let which = if nginx.is_some() {
        "nginx"
    } else {
        "the bench's own"
    };
    report::header(a.seconds, a.rounds, which);
    for (n, sc) in scenarios().into_iter().enumerate() {
        if a.only.as_deref().is_some_and(|o| !sc.name.contains(o)) {
            continue;
        }
        let base = if sc.stream { &own } else { &plain_upstream };
        let unders: Vec<(String, Under)> = a
            .variants
            .iter()
            .map(|v| {
                let label = if v.is_empty() {
                    "gateway".to_string()
                } else {
                    format!("gw-{v}")
                };
                (label, start_gateway(base, a.threads, sc.ledger, n, v))
            })
            .collect();
        let mut targets = vec![(
            "direct".to_string(),
            format!("{base}/v1/chat/completions"),
            Vec::new(),
        )];
        for (label, under) in &unders {
            let url = format!("http://{}/v1/chat/completions", under.gateway.address());
            targets.push((label.clone(), url, under.serving.clone()));
        }
        let body = if sc.stream { STREAM_BODY } else { BODY };
        let mut phases: Vec<Phase> = Vec::new();
        runtime.block_on(async {
            for (_, url, _) in &targets {
                // Warm: connections, the tokenizer, the path cache.
                let warm = Load::Open {
                    rate: 200,
                    burst: 10,
                };
                load::run(&client, url, KEY, body, warm, 0.5).await;
            }
            for round in 0..a.rounds {
                for (target, url, serving) in &targets {
                    let (before, writer) = (cpu::gateway_ns(), cpu::writer_ns());
                    let each = cpu::each_ns(serving);
                    let sample = load::run(&client, url, KEY, body, sc.load, a.seconds).await;
                    let used = (
                        cpu::gateway_ns().saturating_sub(before),
                        cpu::writer_ns().saturating_sub(writer),
                    );
                    let spread: Vec<u64> = cpu::each_ns(serving)
                        .iter()
                        .zip(&each)
                        .map(|(a, b)| a.saturating_sub(*b))
                        .collect();
                    let mut phase = Phase::new(target.clone(), round, sample, used, a.seconds);
                    phase.spread = spread;
                    phases.push(phase);
                }
            }
        });
        for (_, under) in unders {
            stop(under);
        }
        let names: Vec<String> = targets.into_iter().map(|t| t.0).collect();
        report::scenario(&sc, &names, &mut phases);
    }
    drop(nginx);
}
