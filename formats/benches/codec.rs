//! The format's three targets, measured: bytes per event, encoding and decoding speed.
//!
//! `cargo bench -p vramtrace-format --bench codec` (add `-- STEPS RUNS` to change the stream
//! length, default 50,000 steps ≈ 4 M events, and the repetitions, default 7). The stream is
//! `vramtrace_format::synthetic::pytorch_like`, whose doc comment says how it is made. Figures are
//! medians; compare them as ratios within one run on a noisy machine.

use std::time::Instant;
use vramtrace_format::{Metadata, ReadOptions, Trace, TraceWriter, WriterOptions, synthetic};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let steps: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(50_000);
    let runs: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(7);
    let s = synthetic::pytorch_like(steps, 1);
    let n = s.events.len() as f64;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    println!(
        "stream: synthetic::pytorch_like({steps} steps) = {} events; {cores} cores; median of {runs}",
        s.events.len()
    );

    let write = |metadata: &Metadata| {
        let mut w = TraceWriter::new(Vec::new(), metadata, WriterOptions::default()).unwrap();
        *w.tables_mut() = s.tables.clone();
        for e in &s.events {
            w.push(e).unwrap();
        }
        w.finish().unwrap()
    };
    let file = write(&s.metadata);
    let tables_only = {
        let mut w = TraceWriter::new(Vec::new(), &s.metadata, WriterOptions::default()).unwrap();
        *w.tables_mut() = s.tables.clone();
        w.finish().unwrap().len()
    };
    println!(
        "size:   {:.3} bytes/event for the whole file ({} bytes), {:.3} bytes/event for the events alone",
        file.len() as f64 / n,
        file.len(),
        (file.len() - tables_only) as f64 / n
    );

    let encode = median(runs, || {
        let t = Instant::now();
        std::hint::black_box(write(&s.metadata));
        t.elapsed().as_secs_f64()
    });
    println!(
        "encode: {:.1} M events/s on one core (writer thread: columns + zstd + checksums)",
        n / encode / 1e6
    );

    let decode_with = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        median(runs, || {
            let t = Instant::now();
            let trace = pool.install(|| Trace::from_bytes(&file, ReadOptions::default()).unwrap());
            std::hint::black_box(&trace);
            t.elapsed().as_secs_f64()
        })
    };
    let one = decode_with(1);
    let all = decode_with(cores);
    println!(
        "decode: {:.1} M events/s on 1 core, {:.1} M events/s on {cores} cores (parallel chunks)",
        n / one / 1e6,
        n / all / 1e6
    );

    let trace = Trace::from_bytes(&file, ReadOptions::default()).unwrap();
    let iterate = median(runs, || {
        let t = Instant::now();
        let sum: u64 = trace.events().map(|e| e.size).sum();
        std::hint::black_box(sum);
        t.elapsed().as_secs_f64()
    });
    println!(
        "iterate: {:.1} M events/s materializing `Event`s in order from decoded chunks (1 core)",
        n / iterate / 1e6
    );
}

fn median(runs: usize, mut f: impl FnMut() -> f64) -> f64 {
    let mut t: Vec<f64> = (0..runs.max(1)).map(|_| f()).collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}
