//! Writes the generated PyTorch-like stream (see `vramtrace_format::synthetic`) as a trace.
//!
//! `cargo run -p vramtrace-format --example synthetic_trace -- OUT.vramtrace [STEPS] [SEED]`

use vramtrace_format::{TraceWriter, WriterOptions, synthetic};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: synthetic_trace OUT.vramtrace [STEPS] [SEED]")?;
    let steps = args.next().map(|s| s.parse()).transpose()?.unwrap_or(30);
    let seed = args.next().map(|s| s.parse()).transpose()?.unwrap_or(1);
    let s = synthetic::pytorch_like(steps, seed);
    let file = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let mut w = TraceWriter::new(file, &s.metadata, WriterOptions::default())?;
    *w.tables_mut() = s.tables;
    for e in &s.events {
        w.push(e)?;
    }
    w.finish()?;
    let bytes = std::fs::metadata(&path)?.len();
    eprintln!("{path}: {} events, {bytes} bytes", s.events.len());
    Ok(())
}
