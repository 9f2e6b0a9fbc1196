//! A generated, request-level, PyTorch-like event stream: the benchmark input for the format and
//! the stand-in sample until real recorded traces exist.
//!
//! How the stream is made (so the size figures can be judged): one training step is a fixed
//! program of tensor lifetimes, replayed every step as an eager training loop does:
//!
//! - at start, parameters and optimizer state (six allocations of 4 to 300 MiB, never freed);
//! - per step, a forward pass that allocates one activation per layer (kept until its backward)
//!   and two short-lived temporaries per layer, a backward pass that frees the activations in
//!   reverse with one gradient temporary each, and an optimizer update with eight small
//!   temporaries: 40 allocations and 40 frees per step, the 2,400 events per 30 steps PyTorch's
//!   MLP made under `backend:cudaMallocAsync` on the H200 (`docs/h200-measurements.md`);
//! - the sizes of activations and temporaries scale with a per-step sequence length drawn from
//!   four buckets (×1, ×1.25, ×1.5, ×2), as in variable-length training; sizes span 512 B to
//!   hundreds of MiB, rounded to 512 B;
//! - addresses come from a size-keyed LIFO free list over a bump pointer, so memory is reused as
//!   a stream-ordered pool reuses it;
//! - two threads (forward on the main thread, backward on the autograd thread), two streams
//!   (compute, and a side stream for a tenth of the temporaries), 600 distinct stacks
//!   (300 allocation sites, 300 free sites);
//! - each call starts a fixed per-position gap of 20 to 60 µs after the previous one, plus 0 to
//!   4 µs of uniform jitter at nanosecond resolution (12 random bits per event), and lasts 750
//!   to 1050 ns (8 random bits): timing noise is most of what cannot be compressed.

use crate::api::Api;
use crate::event::Event;
use crate::metadata::Metadata;
use crate::tables::{Device, Frame, Module, Process, Stack, Stream, Tables, Thread};
use std::collections::HashMap;

/// The process id the generated stream uses.
pub const PID: u32 = 4242;
const MAIN_TID: u32 = 4242;
const BACKWARD_TID: u32 = 4250;
const COMPUTE_STREAM: u64 = 0x5555_0000_1000;
const SIDE_STREAM: u64 = 0x5555_0000_2000;
const STACKS: u32 = 300;
const MIB: u64 = 1 << 20;

/// A small deterministic PRNG (SplitMix64), so the stream is identical everywhere.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo).max(1)
    }
}

/// One tensor of the step program.
#[derive(Debug, Clone, Copy)]
struct Tensor {
    size: u64,
    /// Whether the size follows the step's sequence length.
    scales: bool,
    backward: bool,
    side_stream: bool,
    stack: u32,
}

/// One call of the step program: allocate or free tensor `slot`, `gap` ns after the last call.
#[derive(Debug, Clone, Copy)]
enum Call {
    Alloc(usize, Tensor),
    Free(usize),
}

/// The generated stream: metadata, tables and events in call order.
pub struct Synthetic {
    pub metadata: Metadata,
    pub tables: Tables,
    pub events: Vec<Event>,
}

/// Generates `steps` training steps (80 events each, plus the parameters) from `seed`.
pub fn pytorch_like(steps: usize, seed: u64) -> Synthetic {
    let mut rng = SplitMix::new(seed);
    let program = step_program(&mut rng);
    let gaps: Vec<u64> = program.iter().map(|_| rng.range(20_000, 60_000)).collect();
    let mut g = Generator::new(&mut rng);
    for slot in 0..6 {
        let size = round(g.rng.range(4 * MIB, 300 * MIB));
        let t = Tensor {
            size,
            scales: false,
            backward: false,
            side_stream: false,
            stack: 1 + slot as u32,
        };
        g.alloc(usize::MAX - slot, t, 1, 30_000);
    }
    for _ in 0..steps {
        // Sequence-length bucket, in quarters: ×1, ×1.25, ×1.5, ×2.
        let quarters = [4, 5, 6, 8][g.rng.range(0, 4) as usize];
        for (call, &gap) in program.iter().zip(&gaps) {
            match *call {
                Call::Alloc(slot, t) => g.alloc(slot, t, quarters, gap),
                Call::Free(slot) => g.free(slot, gap),
            }
        }
    }
    let events = g.events;
    Synthetic {
        metadata: metadata(),
        tables: tables(),
        events,
    }
}

/// The calls of one training step, with sizes and call sites fixed once.
fn step_program(rng: &mut SplitMix) -> Vec<Call> {
    const LAYERS: usize = 8;
    let mut calls = Vec::new();
    let mut site = 10u32;
    let mut tensor = |rng: &mut SplitMix, lo: u64, hi: u64, scales: bool, backward: bool| {
        site += 1;
        let side_stream = !backward && rng.range(0, 10) == 0;
        Tensor {
            size: round(rng.range(lo, hi)),
            scales,
            backward,
            side_stream,
            stack: site,
        }
    };
    // Forward: one activation per layer, kept; two temporaries each, freed at once.
    for layer in 0..LAYERS {
        calls.push(Call::Alloc(layer, tensor(rng, MIB, 64 * MIB, true, false)));
        for k in 0..2 {
            let slot = 100 + 2 * layer + k;
            calls.push(Call::Alloc(slot, tensor(rng, 512, 4 * MIB, true, false)));
            calls.push(Call::Free(slot));
        }
    }
    // Backward: a gradient temporary per layer, then the layer's activation is freed.
    for layer in (0..LAYERS).rev() {
        let slot = 200 + layer;
        calls.push(Call::Alloc(slot, tensor(rng, MIB, 64 * MIB, true, true)));
        calls.push(Call::Free(layer));
        calls.push(Call::Free(slot));
    }
    // Optimizer: small temporaries of fixed size.
    for k in 0..8 {
        let slot = 300 + k;
        calls.push(Call::Alloc(slot, tensor(rng, 512, 64 * 1024, false, false)));
        calls.push(Call::Free(slot));
    }
    calls
}

fn round(size: u64) -> u64 {
    size.div_ceil(512).max(1) * 512
}

struct Generator<'r> {
    rng: &'r mut SplitMix,
    events: Vec<Event>,
    time: u64,
    next_address: u64,
    free_lists: HashMap<u64, Vec<u64>>,
    live: HashMap<usize, (u64, u64, Tensor)>,
}

impl<'r> Generator<'r> {
    fn new(rng: &'r mut SplitMix) -> Self {
        Generator {
            rng,
            events: Vec::new(),
            time: 1_000_000_000,
            next_address: 0x7f00_0000_0000,
            free_lists: HashMap::new(),
            live: HashMap::new(),
        }
    }

    fn alloc(&mut self, slot: usize, t: Tensor, quarters: u64, gap: u64) {
        let size = if t.scales {
            round(t.size * quarters / 4)
        } else {
            t.size
        };
        let address = match self.free_lists.get_mut(&size).and_then(Vec::pop) {
            Some(a) => a,
            None => {
                let a = self.next_address;
                self.next_address += size;
                a
            }
        };
        self.live.insert(slot, (address, size, t));
        self.emit(Api::CuMemAllocAsync, address, size, t, gap);
    }

    fn free(&mut self, slot: usize, gap: u64) {
        let (address, size, t) = self
            .live
            .remove(&slot)
            .expect("the program frees live tensors");
        self.free_lists.entry(size).or_default().push(address);
        self.emit(Api::CuMemFreeAsync, address, 0, t, gap);
    }

    fn emit(&mut self, api: Api, address: u64, size: u64, t: Tensor, gap: u64) {
        self.time += gap + self.rng.range(0, 4_000);
        let e = Event {
            seq: self.events.len() as u64 + 1,
            time_ns: self.time,
            duration_ns: self.rng.range(750, 1_050),
            pid: PID,
            tid: if t.backward { BACKWARD_TID } else { MAIN_TID },
            device: 0,
            address,
            size,
            stream: if t.side_stream {
                SIDE_STREAM
            } else {
                COMPUTE_STREAM
            },
            stack: t.stack + u32::from(api == Api::CuMemFreeAsync) * STACKS,
            ..Event::new(api)
        };
        self.events.push(e);
    }
}

fn metadata() -> Metadata {
    Metadata {
        writer: format!(
            "vramtrace-format {} (synthetic generator)",
            env!("CARGO_PKG_VERSION")
        ),
        host: "synthetic".into(),
        driver_version: 13000,
        environment: vec![(
            "PYTORCH_CUDA_ALLOC_CONF".into(),
            "backend:cudaMallocAsync".into(),
        )],
        capture_level: "request".into(),
    }
}

fn tables() -> Tables {
    let module = |id: u32, path: &str, load_address: u64| Module {
        id,
        pid: PID,
        path: path.into(),
        build_id: vec![id as u8; 20],
        load_address,
        size: 64 * MIB,
        loaded_ns: 0,
        unloaded_ns: None,
    };
    let modules = vec![
        module(1, "/usr/bin/python3.12", 0x5555_5555_0000),
        module(
            2,
            "/usr/lib/python3/dist-packages/torch/lib/libtorch_cuda.so",
            0x7fff_0000_0000,
        ),
        module(
            3,
            "/usr/lib/python3/dist-packages/torch/lib/libc10_cuda.so",
            0x7fff_8000_0000,
        ),
    ];
    // Each stack: a few frames shared by all (interpreter), a few specific to it.
    let mut frames = Vec::new();
    let mut stacks = Vec::new();
    let frame_id = |address: u64, frames: &mut Vec<Frame>| {
        let id = frames.len() as u32 + 1;
        frames.push(Frame { id, address });
        id
    };
    let shared: Vec<u32> = (0..4)
        .map(|i| frame_id(0x5555_5555_1000 + i * 0x40, &mut frames))
        .collect();
    for s in 1..=2 * STACKS {
        let mut ids = vec![
            frame_id(0x7fff_8000_1000 + u64::from(s) * 0x10, &mut frames),
            frame_id(0x7fff_0000_2000 + u64::from(s % 37) * 0x80, &mut frames),
        ];
        ids.extend(&shared);
        stacks.push(Stack { id: s, frames: ids });
    }
    Tables {
        processes: vec![Process {
            pid: PID,
            parent_pid: 1,
            command_line: vec!["python3".into(), "train.py".into(), "--synthetic".into()],
            start_unix_ns: 1_764_000_000_000_000_000,
            start_monotonic_ns: 999_000_000,
        }],
        threads: vec![
            Thread {
                tid: MAIN_TID,
                pid: PID,
                name: "python3".into(),
            },
            Thread {
                tid: BACKWARD_TID,
                pid: PID,
                name: "pt_autograd_0".into(),
            },
        ],
        devices: vec![Device {
            ordinal: 0,
            name: "NVIDIA H200".into(),
            uuid: [0x42; 16],
            total_memory: 150_754_820_096,
            compute_capability: (9, 0),
        }],
        streams: vec![
            Stream {
                handle: COMPUTE_STREAM,
                device: 0,
                per_thread_default: false,
            },
            Stream {
                handle: SIDE_STREAM,
                device: 0,
                per_thread_default: false,
            },
        ],
        pools: Vec::new(),
        stacks,
        frames,
        modules,
        python_frames: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirty_steps_make_about_2400_balanced_events() {
        let s = pytorch_like(30, 1);
        let allocs = s
            .events
            .iter()
            .filter(|e| e.api == Api::CuMemAllocAsync)
            .count();
        let frees = s.events.len() - allocs;
        assert_eq!(allocs, 6 + 30 * 40);
        assert_eq!(frees, 30 * 40);
        let max = s.events.iter().map(|e| e.size).max().unwrap();
        let min = s
            .events
            .iter()
            .filter(|e| e.size > 0)
            .map(|e| e.size)
            .min()
            .unwrap();
        assert!(max > 100 * MIB && min <= 64 * 1024, "sizes {min}..{max}");
    }

    #[test]
    fn the_same_seed_gives_the_same_stream() {
        assert_eq!(pytorch_like(5, 7).events, pytorch_like(5, 7).events);
        assert_ne!(pytorch_like(5, 7).events, pytorch_like(5, 8).events);
    }
}
