//! Converts the request stream that PyTorch's own memory recorder saw
//! (`torch.cuda.memory._record_memory_history` + `_snapshot()["device_traces"]`, flattened to
//! CSV by `samples/workloads/programs/replay_validate.py`) into a request-level `.vramtrace`.
//!
//! `cargo run --release -p vramtrace --example import_torch_trace -- IN.csv OUT.vramtrace [STATS.json]`
//!
//! Each `alloc` entry becomes a `cuMemAllocAsync` of the program's raw request size on its
//! stream, each `free_requested` a `cuMemFreeAsync`, each `oom` a `cuMemAllocAsync` that
//! failed with `CUDA_ERROR_OUT_OF_MEMORY`; the allocator's own `segment_*` and
//! `free_completed` entries are left out (they are what the replay predicts). With the
//! script's `STATS.json`, the device (name, total memory) and the allocator configuration of
//! the recorded run go into the trace's tables and metadata.

use std::error::Error;
use std::io::BufRead;
use vramtrace_format::{Api, Device, Event, Metadata, TraceWriter, WriterOptions};

const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output, rest @ ..] = args.as_slice() else {
        return Err("usage: import_torch_trace IN.csv OUT.vramtrace [STATS.json]".into());
    };
    let stats: Option<serde_json::Value> = rest
        .first()
        .map(|p| std::fs::read_to_string(p).map(|t| serde_json::from_str(&t)))
        .transpose()?
        .transpose()?;
    let conf = stats
        .as_ref()
        .and_then(|s| s["alloc_conf"].as_str())
        .unwrap_or("");
    let metadata = Metadata {
        writer: format!(
            "vramtrace {} import_torch_trace (torch.cuda.memory._snapshot device_traces)",
            env!("CARGO_PKG_VERSION")
        ),
        host: String::new(),
        driver_version: 0,
        environment: vec![("PYTORCH_CUDA_ALLOC_CONF".into(), conf.into())],
        capture_level: "request".into(),
    };
    let file = std::io::BufWriter::new(std::fs::File::create(output)?);
    let mut w = TraceWriter::new(file, &metadata, WriterOptions::default())?;
    if let Some(s) = &stats {
        w.tables_mut().devices.push(Device {
            ordinal: 0,
            name: s["device"].as_str().unwrap_or("").into(),
            uuid: [0; 16],
            total_memory: s["total_memory"].as_u64().unwrap_or(0),
            compute_capability: (0, 0),
        });
    }
    let reader = std::io::BufReader::new(std::fs::File::open(input)?);
    let (mut seq, mut first_us) = (0u64, None);
    for (n, line) in reader.lines().enumerate() {
        let line = line?;
        if n == 0 && line.starts_with("action") {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        let [action, addr, size, stream, time_us] = f[..] else {
            return Err(format!("{input}:{}: expected 5 fields", n + 1).into());
        };
        // An `oom` entry is a request the allocator refused (its size is already rounded,
        // which rounds to itself); the program may have survived it.
        let (api, result) = match action {
            "alloc" => (Api::CuMemAllocAsync, 0),
            "free_requested" => (Api::CuMemFreeAsync, 0),
            "oom" => (Api::CuMemAllocAsync, CUDA_ERROR_OUT_OF_MEMORY),
            _ => continue,
        };
        let time_us: u64 = time_us.parse()?;
        let t0 = *first_us.get_or_insert(time_us);
        seq += 1;
        w.push(&Event {
            seq,
            time_ns: time_us.saturating_sub(t0) * 1000,
            pid: 1,
            tid: 1,
            device: 0,
            result,
            address: if result == 0 { addr.parse()? } else { 0 },
            size: if api == Api::CuMemAllocAsync {
                size.parse()?
            } else {
                0
            },
            stream: stream.parse::<i64>()? as u64,
            ..Event::new(api)
        })?;
    }
    w.finish()?;
    eprintln!("{output}: {seq} requests");
    Ok(())
}
