//! Replay throughput and memory, against the targets of issue 5:
//!
//! - `pytorch` policy: at least 10 million requests per second per core;
//! - memory proportional to the live set, not to the trace length;
//! - a 10-million-request stream through every policy of the issue in under 10 s (2 cores);
//! - and of issue 6: every policy of both parts on that stream in under 20 s (2 cores).
//!
//! `cargo bench -p vramtrace --bench replay [-- REQUESTS [RUNS]]` (defaults: 10,000,000 and 5).
//! Figures are medians of RUNS runs; results and the machine go in `analyzer/BENCHMARKS.md`.
//!
//! The stream: the format crate's PyTorch-like generator (40 allocations and 40 frees per
//! training step, 512 B to hundreds of MiB, two CUDA streams) for 1,000 steps, turned into
//! requests by the model, then its steps repeated until the wanted length (every step frees
//! what it allocates, so repeating it is a valid stream).

use std::time::Instant;
use vramtrace::model::{Model, Request, RequestKind, RequestStream};
use vramtrace::policy::{BuildContext, PolicySpec, REGISTRY, build};
use vramtrace::replay::{ReplayOptions, replay, replay_all};
use vramtrace_format::synthetic::pytorch_like;

fn base() -> (Vec<Request>, Vec<Request>, u32) {
    let s = pytorch_like(1000, 1);
    let model = Model::from_events(s.events, &s.metadata);
    let stream = &model.streams[0];
    // The first 6 allocations are parameters, live to the end; every step after them frees
    // what it allocates, so the steps can be repeated. Checked, not assumed:
    let prologue = stream.requests[..6].to_vec();
    let steps = stream.requests[6..].to_vec();
    let mut live = std::collections::BTreeSet::new();
    for r in &stream.requests {
        match r.kind {
            RequestKind::Alloc => assert!(live.insert(r.slot)),
            RequestKind::Free => assert!(live.remove(&r.slot)),
            RequestKind::Attempt
            | RequestKind::EmptyCache
            | RequestKind::MemoryFraction
            | RequestKind::Order(_) => {}
        }
    }
    let params: std::collections::BTreeSet<u32> = prologue
        .iter()
        .filter(|r| r.kind == RequestKind::Alloc)
        .map(|r| r.slot)
        .collect();
    assert_eq!(
        live, params,
        "the generator's steps must free what they allocate"
    );
    (prologue, steps, stream.slots)
}

fn tiled(prologue: &[Request], steps: &[Request], n: usize) -> impl Iterator<Item = Request> {
    prologue
        .iter()
        .copied()
        .chain(steps.iter().copied().cycle())
        .take(n)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// User + system CPU seconds of this process so far (`/proc/self/stat`, clock ticks of 1/100 s).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // After the command name: state is field 3, utime 14 and stime 15 (1-based).
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU seconds of the calling thread, at nanosecond resolution (`/proc/thread-self/schedstat`).
fn thread_cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |ns| ns / 1e9)
}

fn max_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let n: usize = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let runs: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let (prologue, steps, slots) = base();
    println!(
        "stream: {n} requests ({} per repeated step block, {slots} slots)",
        steps.len()
    );
    let empty = RequestStream::default();
    let ctx = BuildContext {
        stream: &empty,
        capacity: u64::MAX,
    };

    // 1. Each online policy alone, one thread, streamed: no stream in memory at all.
    let rss_before = max_rss_kib();
    // Every online policy of the registry (greedy-by-size plans from the whole stream).
    let online: Vec<&str> = REGISTRY
        .iter()
        .map(|p| p.name)
        .filter(|&n| n != "greedy-by-size")
        .collect();
    for &name in &online {
        let spec = PolicySpec {
            name: name.into(),
            options: Vec::new(),
        };
        let (mut rates, mut cpu_rates) = (Vec::new(), Vec::new());
        let mut peak = 0;
        for _ in 0..runs {
            let mut policy = build(&spec, &ctx).unwrap();
            let (t, c) = (Instant::now(), thread_cpu_seconds());
            let (o, _) = replay(
                policy.as_mut(),
                tiled(&prologue, &steps, n),
                &ReplayOptions::default(),
                &mut (),
            );
            rates.push(n as f64 / t.elapsed().as_secs_f64());
            cpu_rates.push(n as f64 / (thread_cpu_seconds() - c));
            peak = o.peak_reserved;
        }
        // One thread: CPU seconds are core seconds, so requests per CPU second is the rate
        // per core even when other processes share the machine; wall-clock rate beside it.
        println!(
            "{name:<20} {:>8.2} M requests per CPU second, {:>8.2} M/s wall (medians of {runs}, 1 thread, streamed)  peak reserved {} MiB",
            median(cpu_rates) / 1e6,
            median(rates) / 1e6,
            peak >> 20
        );
    }
    println!(
        "max RSS growth while streaming {n} requests through {} policies {runs}x: {} KiB",
        online.len(),
        max_rss_kib().saturating_sub(rss_before)
    );

    // 2. Every policy of the issue on the materialized stream, rayon over the policies.
    let stream = RequestStream::from_requests(tiled(&prologue, &steps, n).collect());
    let specs: Vec<PolicySpec> = REGISTRY
        .iter()
        .map(|p| PolicySpec {
            name: p.name.into(),
            options: Vec::new(),
        })
        .collect();
    let (mut times, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..runs.min(3) {
        let (t, c) = (Instant::now(), cpu_seconds());
        let r = replay_all(std::slice::from_ref(&stream), &specs, &[u64::MAX]).unwrap();
        times.push(t.elapsed().as_secs_f64());
        cpu.push(cpu_seconds() - c);
        assert_eq!(r.len(), specs.len());
    }
    println!(
        "all {} policies, {n} requests, {} threads: {:.2} s wall, {:.2} s CPU (medians of {})",
        specs.len(),
        rayon::current_num_threads(),
        median(times),
        median(cpu),
        runs.min(3)
    );
    // One policy at a time, to see where the time goes.
    for spec in &specs {
        let (t, c) = (Instant::now(), cpu_seconds());
        replay_all(
            std::slice::from_ref(&stream),
            std::slice::from_ref(spec),
            &[u64::MAX],
        )
        .unwrap();
        println!(
            "  {:<20} {:.2} s wall, {:.2} s CPU",
            spec.name,
            t.elapsed().as_secs_f64(),
            cpu_seconds() - c
        );
    }

    // 3. Real request streams (the H200 traces of samples/traces/h200-torch): larger live sets
    // than the generator's. Each is replayed until 2 M requests have gone through.
    for name in ["mlp", "resnet", "transformer_varlen", "gpt_ckpt_varlen"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
            "../samples/traces/h200-torch/{name}.native.vramtrace"
        ));
        let Ok(trace) = vramtrace_format::Trace::open(&path, Default::default()) else {
            continue;
        };
        let model = Model::from_events(trace.events(), &trace.metadata);
        let stream = &model.streams[0];
        let repeats = (2_000_000 / stream.requests.len()).max(1);
        for &policy_name in &online {
            let spec = PolicySpec {
                name: policy_name.into(),
                options: Vec::new(),
            };
            let mut cpu_rates = Vec::new();
            for _ in 0..runs.min(3) {
                let c = thread_cpu_seconds();
                for _ in 0..repeats {
                    let mut policy = build(&spec, &ctx).unwrap();
                    replay(
                        policy.as_mut(),
                        stream.requests.iter().copied(),
                        &ReplayOptions::default(),
                        &mut (),
                    );
                }
                let n = (repeats * stream.requests.len()) as f64;
                cpu_rates.push(n / (thread_cpu_seconds() - c));
            }
            println!(
                "{name:<20} {policy_name:<20} {:>6.2} M requests per CPU second ({} requests, at most {} live)",
                median(cpu_rates) / 1e6,
                stream.requests.len(),
                stream.slots
            );
        }
    }
}
