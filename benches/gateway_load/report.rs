//! The table: per scenario and target, the pooled percentiles, the rate reached, the
//! errors and the gateway's CPU per call; then what the gateway adds (median over rounds).

use std::time::Duration;

use crate::load::{Load, Sample};

/// One row of the table.
pub struct Scenario {
    pub name: &'static str,
    pub load: Load,
    pub stream: bool,
    pub ledger: bool,
}

/// One target called for one round.
pub struct Phase {
    target: String,
    round: u32,
    sample: Sample,
    /// The gateway's CPU over the phase, and its ledger writer's (ns).
    cpu_ns: (u64, u64),
    seconds: f64,
    /// Each serving thread's CPU over the phase (ns).
    pub spread: Vec<u64>,
}

impl Phase {
    pub fn new(
        target: String,
        round: u32,
        mut sample: Sample,
        cpu_ns: (u64, u64),
        seconds: f64,
    ) -> Phase {
        sample.latencies.sort();
        Phase {
            target,
            round,
            sample,
            cpu_ns,
            seconds,
            spread: Vec::new(),
        }
    }
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * sorted.len() as f64) as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e3
}

/// The busiest serving thread's share of the serving threads' CPU, per phase, worst
/// first ("-" for the direct target): 50% on two threads is an even spread.
fn busiest(phases: &[&Phase]) -> String {
    let mut shares: Vec<f64> = phases
        .iter()
        .filter_map(|p| {
            let total: u64 = p.spread.iter().sum();
            let max = p.spread.iter().max()?;
            Some(*max as f64 * 100.0 / total.max(1) as f64)
        })
        .collect();
    shares.sort_by(|a, b| b.total_cmp(a));
    match shares.first() {
        Some(worst) => format!("{worst:.0}%"),
        None => "-".to_string(),
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_default()
}

pub fn header(seconds: f64, rounds: u32, upstream: &str) {
    println!(
        "gateway_load: {rounds} rounds of {seconds} s per target (alternating), upstream: \
         {upstream}; latency from send to last byte, in ms; CPU in µs"
    );
    println!(
        "{:22} {:12} {:>6} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7} {:>4} {:>8} {:>6} {:>7} {:>5}",
        "scenario",
        "target",
        "calls",
        "rate",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "max",
        "err",
        "cpu/call",
        "writer",
        "busiest",
        "load"
    );
}

/// Prints a scenario's rows and what the gateway adds.
pub fn scenario(sc: &Scenario, targets: &[String], phases: &mut [Phase]) {
    let load = load_average();
    for target in targets {
        let mine: Vec<&Phase> = phases.iter().filter(|p| p.target == *target).collect();
        let mut lat: Vec<Duration> = mine
            .iter()
            .flat_map(|p| p.sample.latencies.iter().copied())
            .collect();
        lat.sort();
        let errors: usize = mine.iter().map(|p| p.sample.errors).sum();
        let rate = mine
            .iter()
            .map(|p| p.sample.rate)
            .fold(f64::INFINITY, f64::min);
        let calls = lat.len() + errors;
        let (cpu, writer): (u64, u64) = mine
            .iter()
            .fold((0, 0), |(a, b), p| (a + p.cpu_ns.0, b + p.cpu_ns.1));
        let (cpu, writer) = if target != "direct" {
            let per = |ns: u64| format!("{:.0}", ns as f64 / 1e3 / calls.max(1) as f64);
            (per(cpu), per(writer))
        } else {
            // While only the direct target is called: the gateway's cost per second idle.
            let secs: f64 = mine.iter().map(|p| p.seconds).sum();
            (format!("{:.0}/s", cpu as f64 / 1e3 / secs), "-".to_string())
        };
        println!(
            "{:22} {:12} {:>6} {:>6.0} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>4} {:>8} {:>6} {:>7} {:>5}",
            sc.name,
            target,
            calls,
            rate,
            pct(&lat, 50.0),
            pct(&lat, 90.0),
            pct(&lat, 99.0),
            pct(&lat, 99.9),
            lat.last().map_or(f64::NAN, |d| d.as_secs_f64() * 1e3),
            errors,
            cpu,
            writer,
            busiest(&mine),
            load
        );
    }
    for target in targets.iter().filter(|t| *t != "direct") {
        let pairs: Vec<(&Phase, &Phase)> = phases
            .iter()
            .filter(|p| p.target == *target)
            .filter_map(|g| {
                let d = phases
                    .iter()
                    .find(|p| p.target == "direct" && p.round == g.round)?;
                Some((d, g))
            })
            .collect();
        let added = |p: f64| {
            let mut d: Vec<f64> = pairs
                .iter()
                .map(|(a, b)| pct(&b.sample.latencies, p) - pct(&a.sample.latencies, p))
                .collect();
            d.sort_by(f64::total_cmp);
            d.get(d.len() / 2).copied().unwrap_or(f64::NAN)
        };
        println!(
            "{:22} {target} adds p50 {:+.3} / p90 {:+.3} / p99 {:+.3} ms (median of {} rounds)",
            sc.name,
            added(50.0),
            added(90.0),
            added(99.0),
            pairs.len()
        );
    }
}
