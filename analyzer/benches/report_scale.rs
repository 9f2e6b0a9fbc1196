//! The scale target of `vramtrace report`: a 10-million-event trace gives the page (every
//! policy) in at most 10 s on a 2-core machine, at most 20 MB; with `REPORT_SCALE_SVG=1` the SVG
//! charts too, each under 2 MB.
//!
//! `cargo bench -p vramtrace --bench report_scale` generates the synthetic PyTorch-like trace
//! (125,000 steps, 10,000,006 events; `REPORT_SCALE_STEPS` changes it), encodes and decodes it in
//! memory, then makes the report `REPORT_SCALE_RUNS` times (default 3) and prints the median time
//! of each stage and of the whole, the page's size and the largest SVG. `REPORT_SCALE_PAGE=FILE`
//! writes the last page there (for the browser measurements of analyzer/BENCHMARKS.md); nothing
//! else is written.
//!
//! Figures below this line are of the SVG-only report before the interactive page (issue 7);
//! the page's are in analyzer/BENCHMARKS.md.
//!
//! Measured 2026-11-29 on the 2-core build machine (shared with other builds), all 13 policies
//! registered then: median 9.03 s over 5 runs at load average 1.8 to 3.3 (decode 0.18, model
//! 1.23, chart data 0.16, replays 7.44, charts and page < 0.01), largest SVG 94,597 bytes. End
//! to end, `vramtrace report` on the same trace on disk (32.4 MiB): 5.44 / 5.50 / 5.66 s wall,
//! 7.9 s user + 1.3 s system, 1.7 GB peak RSS, index.html 500 KB. With the first five policies
//! only, the median was 5.27 s at load 4, and 12.2 s under a load average of 8. The replays
//! dominate; of them, greedy-by-size's offline plan was about 40 % of all CPU samples in `perf`.

use std::time::Instant;
use vramtrace::policy::resolve;
use vramtrace::report::generate::{Options, generate, page};
use vramtrace::report::page::Mode;
use vramtrace::symbolize::NoFiles;
use vramtrace_format::{ReadOptions, Trace, TraceWriter, WriterOptions, synthetic};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo bench` passes `--bench`; nothing to configure from it.
    let steps = env("REPORT_SCALE_STEPS", 125_000);
    let runs = env("REPORT_SCALE_RUNS", 3).max(1);
    let s = synthetic::pytorch_like(steps, 7);
    let mut w = TraceWriter::new(Vec::new(), &s.metadata, WriterOptions::default())?;
    *w.tables_mut() = s.tables;
    for e in &s.events {
        w.push(e)?;
    }
    let bytes = w.finish()?;
    let events = s.events.len();
    drop(s.events);
    let options = Options {
        file: "synthetic.vramtrace".into(),
        policies: resolve("all")?,
        capacity: None,
        // The synthetic modules are not files on this machine: no frame could be named anyway.
        symbolize: false,
        svg: env("REPORT_SCALE_SVG", 0) == 1,
    };
    let mut page_bytes = 0;
    let mut totals = Vec::new();
    let mut stages: Vec<(String, Vec<f64>)> = Vec::new();
    let mut largest = 0;
    for _ in 0..runs {
        let start = Instant::now();
        let trace = Trace::from_bytes(&bytes, ReadOptions::default())?;
        let read = trace.event_count();
        let marks = std::sync::Mutex::new(vec![("decode".to_string(), 0.0)]);
        let here = std::thread::current().id();
        let report = generate(trace, &options, &mut NoFiles, &|what: &str| {
            // The stages of this thread, one after another (the search's lines, from its own
            // thread, overlap them); by the first word of their message; the message after
            // reading starts with the event count, and the work after it is the trace-side
            // chart data.
            if std::thread::current().id() != here {
                return;
            }
            let first = what.split_whitespace().next().unwrap_or(what);
            let name = if first.starts_with(|c: char| c.is_ascii_digit()) {
                "chart-data".to_string()
            } else {
                first.to_string()
            };
            let at = start.elapsed().as_secs_f64();
            marks.lock().expect("no panic while held").push((name, at));
        })?;
        let mut marks = marks.into_inner().expect("no panic while held");
        marks.push(("page".into(), start.elapsed().as_secs_f64()));
        let reports = [report];
        let html = page(&reports, Mode::Single);
        let [report] = reports;
        page_bytes = html.len();
        if let Ok(path) = std::env::var("REPORT_SCALE_PAGE") {
            std::fs::write(path, &html)?;
        }
        marks.push(("end".into(), start.elapsed().as_secs_f64()));
        totals.push(start.elapsed().as_secs_f64());
        for pair in marks.windows(2) {
            let (name, t0) = &pair[0];
            let dt = pair[1].1 - t0;
            match stages.iter_mut().find(|(n, _)| n == name) {
                Some((_, v)) => v.push(dt),
                None => stages.push((name.clone(), vec![dt])),
            }
        }
        largest = largest.max(report.charts.iter().map(|c| c.svg.len()).max().unwrap_or(0));
        eprintln!(
            "run: {:.2} s, {} events, {} charts",
            totals.last().unwrap(),
            read,
            report.charts.len()
        );
    }
    for (name, v) in stages {
        println!("stage {name:<12} median {:6.2} s", median(v));
    }
    println!(
        "report of {events} events ({} trace bytes): median {:.2} s over {runs} runs; page {page_bytes} bytes; largest SVG {} bytes",
        bytes.len(),
        median(totals),
        largest
    );
    Ok(())
}
