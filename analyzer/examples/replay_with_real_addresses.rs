//! Diagnosis aid for docs/validation.md: replays a PyTorch-recorded request stream through the
//! `pytorch` policy twice, once with the driver model's own addresses and once with the
//! addresses the real `cudaMalloc` returned (the `segment_alloc` entries of the same CSV, in
//! order), and prints both results. If only the second matches the real allocator, what differs
//! is the tie-breaking between equal-size cached blocks by address.
//!
//! `cargo run --release -p vramtrace --example replay_with_real_addresses -- IN.csv TRACE POLICY`

use std::io::BufRead;
use vramtrace::model::Model;
use vramtrace::policy::{BuildContext, build, parse_specs};
use vramtrace::policy::{Driver, DriverModel};
use vramtrace::replay::replay_on;
use vramtrace_format::{ReadOptions, Trace};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [csv, trace, policy] = args.as_slice() else {
        return Err("usage: replay_with_real_addresses IN.csv TRACE POLICY".into());
    };
    let mut segments = Vec::new();
    for line in std::io::BufReader::new(std::fs::File::open(csv)?).lines() {
        let line = line?;
        if let Some(rest) = line.strip_prefix("segment_alloc,") {
            let mut f = rest.split(',');
            let address = f.next().unwrap_or("0").parse::<u64>()?;
            let size = f.next().unwrap_or("0").parse::<u64>()?;
            segments.push((address, size));
        }
    }
    let trace = Trace::open(std::path::Path::new(trace), ReadOptions::default())?;
    let model = Model::from_events(trace.events(), &trace.metadata);
    let stream = &model.streams[0];
    let capacity = trace
        .tables
        .devices
        .first()
        .map_or(u64::MAX, |d| d.total_memory);
    let spec = &parse_specs(policy)?[0];
    for scripted in [false, true] {
        let mut p = build(spec, &BuildContext { stream, capacity })?;
        let mut d = Driver::new(DriverModel { capacity });
        if scripted {
            d.script_segments(segments.iter().copied());
        }
        let (o, d) = replay_on(
            p.as_mut(),
            stream.requests.iter().copied(),
            d,
            None,
            &mut (),
        );
        println!(
            "{} addresses: peak reserved {} device allocs {} frees {}",
            if scripted { "real" } else { "model" },
            o.peak_reserved,
            d.device_allocs(),
            d.device_frees()
        );
    }
    Ok(())
}
