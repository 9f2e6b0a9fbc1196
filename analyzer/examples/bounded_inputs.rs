//! Writes the generated inputs of the bounds measured in analyzer/BENCHMARKS.md and
//! docs/reliability.md:
//!
//! - `live N OUT.vramtrace`: N device allocations of distinct sizes, all live at once, then
//!   freed (the input that makes an offline planner's cost grow with the pairs of overlapping
//!   lifetimes);
//! - `ranks N DIR`: a job directory of N tiny ranks (`RANK` 0..N, four allocations each).
//!
//! `cargo run --release -p vramtrace --example bounded_inputs -- live 80000 live.vramtrace`

use std::path::Path;
use vramtrace_format::{Api, Event, Metadata, TraceWriter, WriterOptions};

fn write(path: &Path, rank: Option<u32>, events: &[(Api, u64, u64)]) -> std::io::Result<()> {
    let metadata = Metadata {
        capture_level: "request".into(),
        environment: rank
            .map(|r| vec![("RANK".to_string(), r.to_string())])
            .unwrap_or_default(),
        ..Metadata::default()
    };
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut w = TraceWriter::new(file, &metadata, WriterOptions::default())
        .map_err(std::io::Error::other)?;
    for (seq, &(api, address, size)) in (1..).zip(events) {
        let event = Event {
            seq,
            time_ns: seq * 1_000,
            pid: 1,
            address,
            size,
            ..Event::new(api)
        };
        w.push(&event).map_err(std::io::Error::other)?;
    }
    w.finish().map_err(std::io::Error::other)?;
    Ok(())
}

/// `n` allocations of 4 KiB + 512·i bytes at distinct addresses, then their frees.
fn live(n: u64) -> Vec<(Api, u64, u64)> {
    let address = |i: u64| 0x1_0000_0000 + i * (1 << 24);
    (0..n)
        .map(|i| (Api::CuMemAlloc_v2, address(i), 4096 + 512 * i))
        .chain((0..n).map(|i| (Api::CuMemFree_v2, address(i), 0)))
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: bounded_inputs live N OUT.vramtrace | ranks N DIR";
    let [what, n, out] = &args[..] else {
        return Err(usage.into());
    };
    let n: u64 = n.parse()?;
    match what.as_str() {
        "live" => write(Path::new(out), None, &live(n))?,
        "ranks" => {
            std::fs::create_dir_all(out)?;
            for rank in 0..n {
                let path = Path::new(out).join(format!("rank-{rank}.vramtrace"));
                write(&path, Some(rank as u32), &live(2))?;
            }
        }
        _ => return Err(usage.into()),
    }
    Ok(())
}
