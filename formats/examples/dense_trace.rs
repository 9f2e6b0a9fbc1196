//! Writes the densest trace the writer makes (`vramtrace_format::dense`): the input of the
//! memory and time bounds measured in docs/reliability.md.
//!
//! `cargo run -p vramtrace-format --example dense_trace -- OUT.vramtrace EVENTS`

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: dense_trace OUT.vramtrace EVENTS";
    let path = args.next().ok_or(usage)?;
    let events: u64 = args.next().ok_or(usage)?.parse()?;
    let bytes = vramtrace_format::dense::trace(events);
    std::fs::write(&path, &bytes)?;
    eprintln!("{path}: {events} events, {} bytes", bytes.len());
    Ok(())
}
