//! `vramtrace replay --on-device`: the trace's request stream on a real GPU
//! ([`vramtrace::device_replay`]), or a clear error in a build without the `device` feature.

use anyhow::Result;
use std::path::Path;

#[cfg(not(feature = "device"))]
pub fn run(_: Option<&Path>, _: bool) -> Result<()> {
    Err(anyhow::anyhow!(
        "--on-device: this vramtrace was built without GPU support; rebuild with `cargo build --release --features device`"
    ))
}

#[cfg(feature = "device")]
pub fn run(trace: Option<&Path>, json: bool) -> Result<()> {
    use crate::load::load_streams_and_layout;
    use anyhow::{Context, anyhow};
    use vramtrace::device_replay::replay_on_device;
    use vramtrace::units::bytes;

    let path = trace.ok_or_else(|| anyhow!("--on-device needs a trace"))?;
    let (loaded, _) = load_streams_and_layout(path, None)?;
    let mut reports = Vec::new();
    for stream in &loaded.model.streams {
        let report = replay_on_device(stream)
            .with_context(|| format!("{}: replay on the GPU", path.display()))?;
        reports.push(report);
    }
    if json {
        return crate::output::print_json(&reports);
    }
    for r in &reports {
        println!(
            "{} (driver {}): {} requests on {} streams, peak requested {}",
            r.device,
            r.driver_version,
            r.requests,
            r.cuda_streams,
            bytes(r.peak_requested)
        );
        println!(
            "  cuMemAllocAsync pool: reserved high {}, used high {}; alloc median {:.2} us (p99 {:.2}), free median {:.2} us",
            bytes(r.pool.reserved_high),
            bytes(r.pool.used_high),
            r.pool.alloc.median_us,
            r.pool.alloc.p99_us,
            r.pool.free.median_us
        );
        println!(
            "  cuMemAlloc: peak taken {}; alloc median {:.2} us (p99 {:.2}), free median {:.2} us",
            bytes(r.plain.peak_taken),
            r.plain.alloc.median_us,
            r.plain.alloc.p99_us,
            r.plain.free.median_us
        );
    }
    Ok(())
}
