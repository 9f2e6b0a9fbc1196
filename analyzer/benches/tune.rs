//! `tune` against its target (issue 14): the full PyTorch grid on a 100,000-request trace in at
//! most 5 s on the 2-core development machine.
//!
//! `cargo bench -p vramtrace --bench tune [-- RUNS]` (default 5). The stream: the real H200
//! trace `samples/traces/h200-torch/transformer_varlen.native.vramtrace` (51,173 requests, 469
//! objects live at most) twice in a row, the second copy on fresh slots (the first copy's three
//! objects that are never freed stay live): 102,346 requests. Each run is the whole search
//! (every candidate of the grid and the two bounds, rayon over all cores), timed by wall clock
//! and by the process's CPU time. Results and the machine go in `analyzer/BENCHMARKS.md`.

use std::path::Path;
use std::time::Instant;
use vramtrace::model::{LevelReport, RequestStream};
use vramtrace::tune::{TuneOptions, model_and_recorded, tune};
use vramtrace_format::{ReadOptions, Trace};

/// User + system CPU seconds of this process so far (`/proc/self/stat`, 1/100 s ticks).
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
    (ticks(11) + ticks(12)) / 100.0
}

fn doubled(s: &RequestStream) -> RequestStream {
    let mut requests = s.requests.clone();
    requests.extend(s.requests.iter().map(|r| {
        let mut r = *r;
        r.slot += s.slots;
        r
    }));
    RequestStream {
        requests,
        slots: 2 * s.slots,
        ..s.clone()
    }
}

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../samples/traces/h200-torch/transformer_varlen.native.vramtrace");
    let trace = Trace::open(&path, ReadOptions::default()).expect("the bundled trace");
    let (model, recorded) = model_and_recorded(&trace);
    let stream = doubled(&model.streams[0]);
    let options = TuneOptions {
        capacities: vec![150_109_880_320],
        gpu_bytes: None,
        context_bytes: vramtrace::model::device::CUDA_CONTEXT_BYTES,
        grid: vramtrace::tune::Grid::Full,
    };
    let streams = [stream];
    println!(
        "stream: {} requests; {} threads",
        streams[0].requests.len(),
        rayon::current_num_threads()
    );
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let (t, c) = (Instant::now(), cpu_seconds());
        let result = tune(&streams, &LevelReport::default(), &recorded, &options).unwrap();
        wall.push(t.elapsed().as_secs_f64());
        cpu.push(cpu_seconds() - c);
        println!(
            "run {}: {} candidates, {:.2} s wall, {:.2} s CPU; best {}",
            run + 1,
            result.tried,
            wall[run],
            cpu[run],
            result.best().map_or("-", |r| r.select.as_str())
        );
    }
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let (w, wmin, wmax) = stats(&mut wall);
    let (c, cmin, cmax) = stats(&mut cpu);
    println!("median {w:.2} s wall ({wmin:.2}-{wmax:.2}), {c:.2} s CPU ({cmin:.2}-{cmax:.2})");
}
