//! The summary made from the rows and from a pass that keeps none ([`Summary::streamed`], fed
//! here the events of an in-memory trace) are the same.

use super::Summary;
use crate::model::load;
use crate::symbolize::NoFiles;
use proptest::prelude::*;
use vramtrace_format::conventions::ALLOCATOR_SEGMENT;
use vramtrace_format::{Api, Event, Metadata, PythonFrame, Stack, Tables, Trace};

/// Stacks 1 to 4, each of one Python line of its own.
fn tables() -> Tables {
    let frame = |id: u32| PythonFrame {
        id,
        file: "train.py".into(),
        function: "step".into(),
        line: id,
        module: String::new(),
    };
    Tables {
        python_frames: (1..=4).map(frame).collect(),
        stacks: (1..=4)
            .map(|id| Stack {
                id,
                frames: vec![id],
            })
            .collect(),
        ..Tables::default()
    }
}

fn trace(events: &[Event]) -> Trace {
    Trace::in_memory(Metadata::default(), tables(), events)
}

/// The summary from the rows, and the one from a pass that keeps none.
fn both(events: &[Event]) -> (Summary, Summary) {
    let trace = trace(events);
    let (model, table) = load(&trace);
    let rows = Summary::with_table(&trace.tables, &table, &model, 10, &mut NoFiles);
    let streamed = Summary::streamed(&trace.tables, &table, &model, 10, &mut NoFiles, |each| {
        trace.events().for_each(|e| each(&e));
        Ok::<_, ()>(())
    });
    (rows, streamed.unwrap())
}

fn alloc(t: u64, address: u64, size: u64, stack: u32) -> Event {
    Event {
        pid: 1,
        time_ns: t,
        address,
        size,
        stack,
        ..Event::new(Api::CuMemAlloc_v2)
    }
}

fn free(t: u64, address: u64) -> Event {
    Event {
        pid: 1,
        time_ns: t,
        address,
        ..Event::new(Api::CuMemFree_v2)
    }
}

#[test]
fn the_stacks_at_the_peak_are_those_live_then_not_those_live_at_the_end() {
    let events = [
        alloc(1, 0x1000, 100, 1),
        alloc(2, 0x2000, 50, 2),
        // The peak, 250 bytes: stack 1 holds 100, stack 2 50, stack 3 100.
        alloc(3, 0x3000, 100, 3),
        free(4, 0x3000),
        free(5, 0x1000),
        alloc(6, 0x4000, 40, 4),
        // 0x2000 taken again without a free: stack 2's 50 bytes end here.
        alloc(7, 0x2000, 60, 4),
    ];
    let (rows, streamed) = both(&events);
    assert_eq!(rows, streamed);
    let g = &streamed.groups[0];
    assert_eq!((g.peak_requested, g.peak_requested_time_ns), (250, 3));
    let at_peak: Vec<(u64, u64)> = g
        .top_stacks_at_peak
        .iter()
        .map(|s| (s.bytes, s.count))
        .collect();
    assert_eq!(at_peak, [(100, 1), (100, 1), (50, 1)]);
    assert_eq!(g.top_stacks_at_peak[2].site, "train.py:2 step");
    assert_eq!((g.leaks.bytes, g.leaks.count), (100, 2));
}

/// One event of a small trace: allocations and frees on a few addresses and handles (so
/// that some are taken again without a free and some frees match nothing), failed calls,
/// host memory, the driver's counts, an imported snapshot's segments and PyTorch's tracker
/// blocks, in two processes.
fn event() -> impl Strategy<Value = Event> {
    let apis = prop_oneof![
        4 => Just(Api::CuMemAlloc_v2),
        4 => Just(Api::CuMemFree_v2),
        1 => Just(Api::CuMemHostAlloc),
        1 => Just(Api::CuMemCreate),
        1 => Just(Api::CuMemRelease),
        1 => Just(Api::DriverProcessMemory),
        1 => Just(Api::TorchAlloc),
        1 => Just(Api::TorchFreeCompleted),
    ];
    (
        apis,
        1u32..=2,
        0u64..6,
        0u64..5,
        0u32..=4,
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.05),
    )
        .prop_map(|(api, pid, slot, size, stack, failed, segment)| Event {
            pid,
            address: 0x1000 * (slot + 1),
            handle: slot + 1,
            size: size << 20,
            stack,
            result: if failed { 2 } else { 0 },
            flags: if segment { ALLOCATOR_SEGMENT } else { 0 },
            ..Event::new(api)
        })
}

proptest! {
    #[test]
    fn a_pass_without_rows_summarises_as_the_rows_do(
        mut events in prop::collection::vec(event(), 0..120)
    ) {
        for (t, e) in (1..).zip(events.iter_mut()) {
            e.time_ns = t;
        }
        let (rows, streamed) = both(&events);
        prop_assert_eq!(rows, streamed);
    }
}
