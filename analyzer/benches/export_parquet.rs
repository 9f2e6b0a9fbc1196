//! `vramtrace export --to parquet` over many traces: events per second, peak memory (the
//! process's `VmHWM`), and the size of the tables against the traces'.
//!
//! `cargo bench -p vramtrace --bench export_parquet -- [TRACES] [EVENTS_PER_TRACE] [RUNS]
//! [POLICIES;POLICIES...]` (default 100 traces of 1,000,000 events, 5 runs of each
//! configuration, alternating, configurations `none;pytorch,pytorch-expandable`). The
//! traces are `vramtrace_format::synthetic::pytorch_like` streams with different seeds, written
//! once into `target/bench-export-parquet/` and reused. Configurations: the event tables alone
//! (`--policy none`) and with two policies replayed (`--policy pytorch,pytorch-expandable`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use vramtrace_format::{TraceWriter, WriterOptions, synthetic};

/// The generator makes about 80 calls per step.
const EVENTS_PER_STEP: usize = 80;

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .nth(i)
        .map_or(default, |a| a.parse().expect("a number"))
}

fn inputs(dir: &Path, traces: usize, events: usize) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).expect("bench directory");
    (0..traces)
        .map(|i| {
            let path = dir.join(format!("rank{i:04}-{events}.vramtrace"));
            if !path.exists() {
                let s = synthetic::pytorch_like(events / EVENTS_PER_STEP, i as u64 + 1);
                let tmp = path.with_extension("partial");
                let file = std::io::BufWriter::new(std::fs::File::create(&tmp).unwrap());
                let mut w = TraceWriter::new(file, &s.metadata, WriterOptions::default()).unwrap();
                *w.tables_mut() = s.tables;
                for e in &s.events {
                    w.push(e).unwrap();
                }
                w.finish().unwrap();
                std::fs::rename(&tmp, &path).unwrap();
            }
            path
        })
        .collect()
}

fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let m = e.metadata().unwrap();
        total += if m.is_dir() {
            bytes_under(&e.path())
        } else {
            m.len()
        };
    }
    total
}

/// Runs the export; returns the wall time and the peak resident memory in bytes, read from
/// `/proc/PID/status` (`VmHWM` is a high-water mark, so the last reading is the peak up to
/// within the polling interval).
fn export(inputs: &[PathBuf], out: &Path, policy: &str) -> (Duration, u64) {
    let _ = std::fs::remove_dir_all(out);
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_vramtrace"))
        .arg("export")
        .args(inputs)
        .args(["--to", "parquet", "--policy", policy, "-o"])
        .arg(out)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run vramtrace export");
    let status_file = format!("/proc/{}/status", child.id());
    let mut hwm = 0;
    loop {
        if let Ok(s) = std::fs::read_to_string(&status_file)
            && let Some(kb) = s
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        {
            hwm = hwm.max(kb * 1024);
        }
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "vramtrace export failed");
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    (started.elapsed(), hwm)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let traces = arg(0, 100);
    let events = arg(1, 1_000_000);
    let runs = arg(2, 5);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-export-parquet");
    let files = inputs(&root.join("in"), traces, events);
    let input_bytes: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    let total_events = (traces * (events / EVENTS_PER_STEP) * EVENTS_PER_STEP) as f64;
    println!(
        "{traces} traces of about {events} events, {:.1} MB of .vramtrace ({:.2} bytes/event)",
        input_bytes as f64 / 1e6,
        input_bytes as f64 / total_events
    );
    let configs: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .nth(3)
        .unwrap_or_else(|| "none;pytorch,pytorch-expandable".into())
        .split(';')
        .map(String::from)
        .collect();
    let mut rates = vec![Vec::new(); configs.len()];
    let mut memory = vec![Vec::new(); configs.len()];
    let mut sizes = vec![0u64; configs.len()];
    for run in 0..runs {
        for (c, policy) in configs.iter().enumerate() {
            let out = root.join("out");
            let (time, hwm) = export(&files, &out, policy);
            let rate = total_events / time.as_secs_f64() / 1e6;
            sizes[c] = bytes_under(&out);
            println!(
                "run {run} --policy {policy}: {:.2} s, {rate:.1} M events/s, peak RSS {:.0} MiB",
                time.as_secs_f64(),
                hwm as f64 / (1 << 20) as f64
            );
            rates[c].push(rate);
            memory[c].push(hwm as f64 / (1 << 20) as f64);
        }
    }
    for (c, policy) in configs.iter().enumerate() {
        let (lo, hi) = rates[c]
            .iter()
            .fold((f64::MAX, 0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
        println!(
            "--policy {policy}: median {:.1} M events/s (range {lo:.1}-{hi:.1}), median peak RSS \
             {:.0} MiB, tables {:.1} MB = {:.2}x the traces ({:.2} bytes/event)",
            median(&mut rates[c]),
            median(&mut memory[c]),
            sizes[c] as f64 / 1e6,
            sizes[c] as f64 / input_bytes as f64,
            sizes[c] as f64 / total_events
        );
    }
}
