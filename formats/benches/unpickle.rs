//! The unpickler against a large PyTorch memory snapshot.
//!
//! `cargo bench -p vramtrace-format --bench unpickle -- SNAPSHOT.pickle [RUNS]` maps the file
//! and unpickles it RUNS times (default 5), printing each run's seconds (reading the file
//! included, as `pickle.load` of an open file includes it: the file is mapped as `vramtrace
//! report` and `import` map it, and its pages are read while it is unpickled) and the median. A snapshot to use is written by
//! `python3 analyzer/benches/make_snapshot.py`; `analyzer/benches/snapshot_page.py` runs this
//! alternately with CPython's `pickle.load` (see analyzer/BENCHMARKS.md).

use std::time::Instant;
use vramtrace_format::{MappedFile, pickle};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo bench` passes `--bench`.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let Some(path) = args.first() else {
        eprintln!(
            "usage: cargo bench -p vramtrace-format --bench unpickle -- SNAPSHOT.pickle [RUNS]"
        );
        std::process::exit(2);
    };
    let runs: usize = args.get(1).and_then(|r| r.parse().ok()).unwrap_or(5).max(1);
    let mut times = Vec::with_capacity(runs);
    let mut containers = 0;
    for _ in 0..runs {
        let start = Instant::now();
        let file = MappedFile::open(std::path::Path::new(path))?;
        let doc = pickle::read(file.bytes())?;
        let dt = start.elapsed().as_secs_f64();
        containers = doc.containers();
        drop(doc);
        println!("unpickle {dt:.3} s");
        times.push(dt);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "median {:.3} s over {runs} runs (min {:.3}, max {:.3}); {containers} containers",
        times[runs / 2],
        times[0],
        times[runs - 1]
    );
    Ok(())
}
