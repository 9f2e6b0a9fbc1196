//! Diagnosis aid for docs/allocators.md ("Driver addresses"): replays a trace's request stream
//! through one policy with the driver model's addresses rising, falling and, when the trace
//! recorded them (a tracker trace, an imported snapshot) or a CSV of `address,bytes` lines
//! gives them, the real driver's; prints peak reserved and device calls of each. Where the
//! rows differ, the prediction depends on how the driver orders its addresses.
//!
//! `cargo run --release -p vramtrace --example address_orders -- TRACE POLICY|STATS.json [SEGMENTS.csv]`
//!
//! With a `STATS.json` of `samples/traces/h200-*` the policy is the run's own configuration
//! (`alloc_conf`, `memory_fraction`), the capacity its `total_memory`, and its
//! `max_memory_reserved` is printed beside.

use vramtrace::model::Model;
use vramtrace::policy::alloc_conf::spec_from_alloc_conf;
use vramtrace::policy::{AddressOrder, BuildContext, Driver, DriverModel, build, parse_specs};
use vramtrace::replay::replay_on;
use vramtrace_format::{ReadOptions, Trace};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (trace, policy, csv) = match args.as_slice() {
        [t, p] => (t, p, None),
        [t, p, c] => (t, p, Some(c)),
        _ => return Err("usage: address_orders TRACE POLICY|STATS.json [SEGMENTS.csv]".into()),
    };
    let trace = Trace::open(std::path::Path::new(trace), ReadOptions::default())?;
    let model = Model::from_events(trace.events(), &trace.metadata);
    let stream = model.streams.first().ok_or("no request stream")?;
    let mut capacity = trace
        .tables
        .devices
        .first()
        .map_or(u64::MAX, |d| d.total_memory);
    let (spec, real) = if policy.ends_with(".json") {
        let stats: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(policy)?)?;
        if let Some(c) = stats["total_memory"].as_u64() {
            capacity = c;
        }
        let conf = stats["alloc_conf"].as_str().unwrap_or("");
        let spec = spec_from_alloc_conf(conf, stats["memory_fraction"].as_str())?;
        (spec, stats["max_memory_reserved"].as_u64())
    } else {
        (
            parse_specs(policy)?.remove(0),
            stream.recorded_peak_reserved,
        )
    };
    let recorded = match csv {
        Some(path) => std::fs::read_to_string(path)?
            .lines()
            .filter_map(|l| l.split_once(','))
            .map(|(a, s)| Ok((a.trim().parse()?, s.trim().parse()?)))
            .collect::<Result<Vec<(u64, u64)>, std::num::ParseIntError>>()?,
        None => stream.recorded_segments.clone(),
    };
    let mut rows = vec![("rising", AddressOrder::Rising, None)];
    rows.push(("falling", AddressOrder::Falling, None));
    if !recorded.is_empty() {
        rows.push(("recorded", AddressOrder::Rising, Some(recorded)));
    }
    print!("{spec}");
    for (name, order, script) in rows {
        let mut p = build(&spec, &BuildContext { stream, capacity })?;
        let mut d = Driver::new(DriverModel { capacity });
        d.set_address_order(order);
        if let Some(s) = script {
            d.script_segments(s);
        }
        let (o, d) = replay_on(
            p.as_mut(),
            stream.requests.iter().copied(),
            d,
            None,
            &mut (),
        );
        let oom = if o.oom.is_some() { " OOM" } else { "" };
        print!(
            "  {name} {} ({}/{}){oom}",
            o.peak_reserved,
            d.device_allocs(),
            d.device_frees()
        );
    }
    match real {
        Some(r) => println!("  real {r}"),
        None => println!(),
    }
    Ok(())
}
