//! The stacks that allocated most often in a trace, frame by frame with the module and the
//! module-relative address that `addr2line -f -C -e MODULE ADDRESS` takes, so that a recorded
//! trace can be checked by hand on the machine that recorded it (`samples/workloads/h200/
//! stacks_overhead.sh` does that on the GPU machine).
//!
//!     cargo run -p vramtrace-tests --example top_stacks -- TRACE [N]
//!
//! Prints, for each of the N (default 5) stacks carried by the most events:
//! `stack ID events COUNT bytes BYTES`, then one `frame ADDRESS MODULE 0xOFFSET` line per
//! frame, innermost first (`MODULE` is `-` when no module holds the address).

use std::collections::HashMap;
use std::path::PathBuf;
use vramtrace_format::{NO_STACK, ReadOptions, Trace};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next().map(PathBuf::from) else {
        eprintln!("usage: top_stacks TRACE [N]");
        std::process::exit(2);
    };
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let trace = match Trace::open(&path, ReadOptions { salvage: true }) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            std::process::exit(1);
        }
    };
    let mut by_stack: HashMap<u32, (u64, u64)> = HashMap::new();
    for e in trace.events().filter(|e| e.stack != NO_STACK) {
        let s = by_stack.entry(e.stack).or_default();
        s.0 += 1;
        s.1 += e.size;
    }
    let mut top: Vec<(u32, (u64, u64))> = by_stack.into_iter().collect();
    top.sort_by_key(|&(id, (count, _))| (std::cmp::Reverse(count), id));
    let modules = &trace.tables.modules;
    for (id, (count, bytes)) in top.into_iter().take(n) {
        println!("stack {id} events {count} bytes {bytes}");
        for address in trace.tables.stack_addresses(id).unwrap_or_default() {
            let module = modules
                .iter()
                .find(|m| m.load_address <= address && address - m.load_address < m.size);
            match module {
                Some(m) => println!(
                    "frame {address:#x} {} {:#x}",
                    m.path,
                    address - m.load_address
                ),
                None => println!("frame {address:#x} - 0x0"),
            }
        }
    }
}
