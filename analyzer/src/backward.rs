//! Backward attribution: the allocations PyTorch's autograd engine makes on its own threads,
//! named by the `backward()` call that ran them.
//!
//! PyTorch runs a CUDA backward pass on one engine thread per device (pytorch/pytorch
//! `torch/csrc/autograd/engine.cpp`, `Engine::thread_init` and `execute`): the thread that
//! called `backward()` blocks in the engine until the pass is done, and the gradients are
//! allocated on the device thread, which runs no Python (unless a custom `Function` written in
//! Python runs there), so the recorder's default Python stacks give those allocations none.
//!
//! The trace shows the call itself: `torch.autograd.backward` first makes the gradient of a
//! scalar loss (`_make_grads`, a `torch.ones_like`), an allocation on the calling thread whose
//! Python stack holds the user's `loss.backward()` line; PyTorch's tracker records it even when
//! the block comes from the cache. From there until that thread allocates again, the engine
//! does the work. So a stackless allocation (an event that brings memory in with no stack) is
//! named after the most recent stack-bearing allocation of another thread of its process when
//! that stack is inside a `backward()` or `torch.autograd.grad()` call (a frame of
//! `torch.autograd`'s `backward`, `grad` or `_engine_run_backward`, or `Tensor.backward`): it
//! gets a stack of its own, a marker frame the [`crate::symbolize::Symbolizer`] names
//! "backward of <line>" followed by the caller's frames from the user's line outward.
//!
//! Only threads that may be an engine's are named so: those named as PyTorch names them
//! (`pt_autograd_<device>`), and those the trace has no name for; a thread of another name (a
//! library's worker) is not.
//!
//! What cannot be named: an allocation whose latest stack-bearing allocation elsewhere is not in
//! a backward call (a trace without PyTorch's tracker, where the gradient of the loss comes
//! from the allocator's cache with no event; a Python thread, such as a pin-memory thread,
//! that allocated after the backward started). On an engine thread it is named "backward" with
//! the reason and the flag that helps (the marker alone); elsewhere it stays `<no stack>`
//! ([`crate::symbolize::NO_STACK_WHY`]), as does every allocation of a trace recorded with
//! `--stacks none`. Where one thread
//! calls `backward()` twice with no allocation of its own in between (a `backward(gradient=...)`
//! after another backward), the second pass is named after the first call.
//!
//! The recorder adds one thing the trace alone cannot say: on an engine thread, the autograd
//! node the engine was evaluating, as a stack of one frame ([`AUTOGRAD_NODE_FILE`],
//! `recorder/src/autograd.rs`). Such an allocation is named as a stackless one is, with the
//! node after the line: "backward of <line> (MmBackward0)", one stack per pass and node (one
//! marker frame per node name, the name its `function`); where no line can be given, the
//! node's frame stays its site ("autograd node MmBackward0"). Traces recorded before have no
//! such frames and are named as before.
//!
//! [`BackwardNamer`] works on one event at a time in trace order, so streamed traces are named
//! as whole ones are.

use crate::symbolize::{BACKWARD_FILE, NoFiles, Symbolizer};
use std::collections::{BTreeMap, HashMap, HashSet};
use vramtrace_format::conventions::AUTOGRAD_NODE_FILE;
use vramtrace_format::{Event, EventBatch, NO_STACK, PythonFrame, Stack, Tables, Trace};

/// The hasher of the namer's maps, which it reads for every allocation of a trace: a fast one
/// (SipHash was most of the namer's time), seeded at random as the model's are.
type Hasher = foldhash::fast::RandomState;

/// The functions of `torch.autograd` (and its submodules) that run a backward pass.
const ENTRY_FUNCTIONS: [&str; 3] = ["backward", "grad", "_engine_run_backward"];

/// How PyTorch names its autograd engine threads, one per device (`pt_autograd_0`: engine.cpp,
/// `Engine::thread_init`), as the trace's thread table records them.
const AUTOGRAD_THREAD: &str = "pt_autograd_";

/// Names the stackless allocations of backward passes, event by event.
pub struct BackwardNamer {
    /// Threads (pid, tid) named as PyTorch names its engine threads.
    autograd: HashSet<(u32, u32), Hasher>,
    /// Threads with another name: not an engine's, never named after a backward call.
    others: HashSet<(u32, u32), Hasher>,
    /// Stacks of the recorder's autograd-node frames alone ([`AUTOGRAD_NODE_FILE`]) → the
    /// node's name: an engine thread's allocation with no Python frame, named by its node.
    nodes: HashMap<u32, String>,
    /// Node name ("" for none) → the stack of an engine thread's allocations whose
    /// `backward()` call the trace does not show, once one was met.
    unseen: BTreeMap<String, u32>,
    /// Stacks inside a backward call → their frames from the caller's line outward.
    entries: HashMap<u32, Vec<u32>, Hasher>,
    /// Per process: its latest stack-bearing allocation (tid, stack), and the latest of a
    /// thread other than that one's: between them, the latest of any thread but a given one.
    latest: HashMap<u32, [Option<(u32, u32)>; 2], Hasher>,
    /// (entry stack, node name or "") → the stack given to those allocations of its backward
    /// pass.
    given: BTreeMap<(u32, String), u32>,
    next_stack: u32,
    /// The first frame id free for the markers (one per node name).
    marker: u32,
}

impl BackwardNamer {
    /// A namer for the events of a trace whose tables are `tables` (all of them: the stacks of
    /// every event to come).
    pub fn new(tables: &Tables) -> BackwardNamer {
        let mut files = NoFiles;
        let mut symbolizer = Symbolizer::new(tables, &mut files);
        let entries = tables
            .stacks
            .iter()
            .filter_map(|s| {
                let named = symbolizer.frames(s.id);
                let outermost = named
                    .iter()
                    .rposition(|f| is_entry(&f.module, &f.function))?;
                let site = (outermost + 1..named.len())
                    .find(|&i| !named[i].plumbing)
                    .or_else(|| Symbolizer::site_index(&named))?;
                Some((s.id, s.frames.get(site..).unwrap_or_default().to_vec()))
            })
            .collect();
        let max_frame = tables
            .frames
            .iter()
            .map(|f| f.id)
            .chain(tables.python_frames.iter().map(|f| f.id))
            .max()
            .unwrap_or(0);
        let max_stack = tables.stacks.iter().map(|s| s.id).max().unwrap_or(0);
        // A trace without stacks (`--stacks none`) is left as it is: nothing was captured.
        let (autograd, others) = tables
            .threads
            .iter()
            .filter(|t| !t.name.is_empty() && !tables.stacks.is_empty())
            .map(|t| (t.name.starts_with(AUTOGRAD_THREAD), (t.pid, t.tid)))
            .partition::<Vec<_>, _>(|t| t.0);
        let node_frames: HashMap<u32, &str> = tables
            .python_frames
            .iter()
            .filter(|f| f.file == AUTOGRAD_NODE_FILE)
            .map(|f| (f.id, f.function.as_str()))
            .collect();
        let nodes = tables
            .stacks
            .iter()
            .filter_map(|s| {
                let mut names = s.frames.iter().map(|id| node_frames.get(id));
                let first = names.next()??;
                names
                    .all(|n| n.is_some())
                    .then(|| (s.id, first.to_string()))
            })
            .collect();
        BackwardNamer {
            autograd: autograd.into_iter().map(|t| t.1).collect(),
            others: others.into_iter().map(|t| t.1).collect(),
            nodes,
            unseen: BTreeMap::new(),
            entries,
            latest: HashMap::default(),
            given: BTreeMap::new(),
            next_stack: max_stack.saturating_add(1),
            marker: max_frame.saturating_add(1),
        }
    }

    /// True when no event can be renamed: with no stack inside a backward call (no donor) and
    /// no thread named as an engine's, [`BackwardNamer::stack_of`] gives every event its own
    /// stack and [`BackwardNamer::finish`] adds nothing, so a caller may skip the namer.
    pub fn names_nothing(&self) -> bool {
        self.entries.is_empty() && self.autograd.is_empty()
    }

    /// The stack event `e` is attributed to: its own, or for a stackless allocation (or one
    /// named by its autograd node alone) during a backward pass, the backward stack of that
    /// pass (and node).
    #[inline]
    pub fn stack_of(&mut self, e: &Event) -> u32 {
        // Inlined into the caller's loop: half of a trace's events are frees, which keep their
        // stack, and need no call.
        if !e.api.op().brings_in() {
            return e.stack;
        }
        self.stack_of_allocation(e)
    }

    /// [`BackwardNamer::stack_of`] of an event that brings memory in.
    fn stack_of_allocation(&mut self, e: &Event) -> u32 {
        let node = self.nodes.get(&e.stack);
        let [last, other] = self.latest.entry(e.pid).or_default();
        if e.stack != NO_STACK && node.is_none() {
            if last.is_some_and(|(tid, _)| tid != e.tid) {
                *other = *last;
            }
            *last = Some((e.tid, e.stack));
            return e.stack;
        }
        let donor = [*last, *other]
            .into_iter()
            .flatten()
            .find(|&(tid, _)| tid != e.tid)
            .map(|(_, stack)| stack)
            .filter(|d| self.entries.contains_key(d));
        let thread = (e.pid, e.tid);
        if self.others.contains(&thread) {
            return e.stack;
        }
        let node = node.cloned().unwrap_or_default();
        let next = &mut self.next_stack;
        let new_id = || {
            let id = *next;
            *next = next.saturating_add(1);
            id
        };
        match donor {
            Some(donor) => *self.given.entry((donor, node)).or_insert_with(new_id),
            None if self.autograd.contains(&thread) => {
                *self.unseen.entry(node).or_insert_with(new_id)
            }
            None => e.stack,
        }
    }

    /// Adds the backward stacks given out, and their marker frames (one per node name, the
    /// name its `function`), to `tables`.
    pub fn finish(self, tables: &mut Tables) {
        let mut markers: BTreeMap<String, u32> = BTreeMap::new();
        let mut marker = |node: &String, tables: &mut Tables| {
            let next = self.marker.saturating_add(markers.len() as u32);
            *markers.entry(node.clone()).or_insert_with(|| {
                tables.python_frames.push(PythonFrame {
                    id: next,
                    file: BACKWARD_FILE.to_string(),
                    function: node.to_string(),
                    line: 0,
                    module: String::new(),
                });
                next
            })
        };
        for ((donor, node), id) in &self.given {
            let mut frames = vec![marker(node, tables)];
            frames.extend(self.entries.get(donor).into_iter().flatten());
            tables.stacks.push(Stack { id: *id, frames });
        }
        for (node, id) in &self.unseen {
            let frames = vec![marker(node, tables)];
            tables.stacks.push(Stack { id: *id, frames });
        }
    }
}

/// Whether a Python frame of `module` running `function` runs a backward pass.
fn is_entry(module: &str, function: &str) -> bool {
    let autograd = module == "torch.autograd" || module.starts_with("torch.autograd.");
    (autograd && ENTRY_FUNCTIONS.contains(&function))
        || (module == "torch._tensor" && function == "Tensor.backward")
}

/// Names the backward passes of `events` (a whole trace's, in file order) in place, the new
/// stacks added to `tables`: what [`name_backward`] does to the trace made of them, without
/// its batches' round trip.
pub fn name_backward_events(events: &mut [Event], tables: &mut Tables) {
    let mut namer = BackwardNamer::new(tables);
    if namer.names_nothing() {
        return;
    }
    events.iter_mut().for_each(|e| e.stack = namer.stack_of(e));
    namer.finish(tables);
}

/// Names the backward passes of a whole trace in place ([`BackwardNamer`]): the batches whose
/// events change are rebuilt, the new stacks added to its tables.
pub fn name_backward(trace: &mut Trace) {
    let mut namer = BackwardNamer::new(&trace.tables);
    if namer.names_nothing() {
        return;
    }
    for batch in &mut trace.batches {
        let mut changed = false;
        let events: Vec<Event> = batch
            .iter()
            .map(|mut e| {
                let stack = namer.stack_of(&e);
                changed |= stack != e.stack;
                e.stack = stack;
                e
            })
            .collect();
        if changed {
            *batch = EventBatch::from_events(&events);
        }
    }
    namer.finish(&mut trace.tables);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::{StackNames, top_stacks};
    use vramtrace_format::{Api, Metadata, Thread};

    const MAIN: u32 = 10;
    const ENGINE: u32 = 11;
    const PIN: u32 = 12;

    fn frame(id: u32, file: &str, function: &str, line: u32) -> PythonFrame {
        PythonFrame {
            id,
            file: file.into(),
            function: function.into(),
            line,
            module: vramtrace_format::conventions::module_of_file(file),
        }
    }

    /// Stack 1: `loss.backward()` at train.py:48 through `_make_grads`; stack 2: the forward at
    /// train.py:47; `engine` names the engine thread ("" leaves it unnamed).
    fn tables(engine: &str) -> Tables {
        let torch = "/venv/lib/python3.12/site-packages/torch";
        Tables {
            python_frames: vec![
                frame(
                    1,
                    &format!("{torch}/autograd/__init__.py"),
                    "_make_grads",
                    231,
                ),
                frame(2, &format!("{torch}/autograd/__init__.py"), "backward", 374),
                frame(3, &format!("{torch}/_tensor.py"), "Tensor.backward", 631),
                frame(4, "/work/train.py", "step", 48),
                frame(5, "/work/train.py", "main", 60),
                frame(6, "/work/train.py", "step", 47),
            ],
            stacks: vec![
                Stack {
                    id: 1,
                    frames: vec![1, 2, 3, 4, 5],
                },
                Stack {
                    id: 2,
                    frames: vec![6, 5],
                },
            ],
            threads: [(MAIN, "python3"), (ENGINE, engine)]
                .iter()
                .map(|&(tid, name)| Thread {
                    tid,
                    pid: 1,
                    name: name.into(),
                })
                .collect(),
            ..Tables::default()
        }
    }

    fn alloc(seq: u64, tid: u32, stack: u32, address: u64, size: u64) -> Event {
        Event {
            seq,
            time_ns: seq * 10,
            duration_ns: 1,
            pid: 1,
            tid,
            device: 0,
            api: Api::TorchAlloc,
            result: 0,
            address,
            size,
            handle: 0,
            aux: 0,
            stream: 0,
            pool: 0,
            flags: 0,
            stack,
        }
    }

    /// A forward, a backward (its `_make_grads` allocation on the main thread, two on the
    /// engine thread), the optimizer on the main thread, then one more engine allocation.
    fn step() -> Vec<Event> {
        vec![
            alloc(0, MAIN, 2, 0x1000, 100),
            alloc(1, MAIN, 1, 0x2000, 4),
            alloc(2, ENGINE, NO_STACK, 0x3000, 1000),
            alloc(3, ENGINE, NO_STACK, 0x4000, 2000),
            alloc(4, MAIN, 2, 0x5000, 10),
            alloc(5, ENGINE, NO_STACK, 0x6000, 50),
        ]
    }

    fn named(engine: &str, events: &[Event]) -> Trace {
        let mut t = Trace::in_memory(Metadata::default(), tables(engine), events);
        name_backward(&mut t);
        t
    }

    fn site_rows(t: &Trace) -> Vec<(String, u64)> {
        let mut files = NoFiles;
        let names = StackNames::new(&t.tables, &mut files);
        let live = t.events().map(|e| (e.stack, e.size));
        top_stacks(live, &names, 10)
            .into_iter()
            .map(|s| (s.site, s.bytes))
            .collect()
    }

    #[test]
    fn naming_the_events_names_them_as_naming_their_trace_does() {
        for engine in ["pt_autograd_0", ""] {
            let trace = named(engine, &step());
            let mut events = step();
            let mut tables = tables(engine);
            name_backward_events(&mut events, &mut tables);
            assert_eq!(trace.events().collect::<Vec<_>>(), events);
            assert_eq!(trace.tables, tables);
        }
    }

    #[test]
    fn a_namer_with_no_backward_call_and_no_engine_thread_names_nothing() {
        // The engine thread unnamed, and no stack inside a backward call.
        let mut t = tables("");
        t.stacks.retain(|s| s.id != 1);
        let mut namer = BackwardNamer::new(&t);
        assert!(namer.names_nothing());
        for e in step() {
            assert_eq!(namer.stack_of(&e), e.stack);
        }
        let before = t.clone();
        namer.finish(&mut t);
        assert_eq!(t, before);
        // A backward call's stack is enough to name the engine thread's allocations.
        assert!(!BackwardNamer::new(&tables("")).names_nothing());
    }

    #[test]
    fn engine_allocations_during_a_backward_take_the_line_that_called_it() {
        let t = named("pt_autograd_0", &step());
        let stacks: Vec<u32> = t.events().map(|e| e.stack).collect();
        // Two engine allocations of the pass share one new stack; the one after the main
        // thread allocated again is the engine's with no call seen.
        assert_eq!(stacks[..2], [2, 1]);
        assert_eq!(stacks[2], stacks[3]);
        assert!(stacks[2] > 2 && stacks[5] > 2 && stacks[5] != stacks[2]);
        let rows = site_rows(&t);
        assert_eq!(
            rows[0],
            ("backward of /work/train.py:48 step".to_string(), 3000)
        );
        assert!(rows.contains(&(crate::symbolize::BACKWARD_UNSEEN.to_string(), 50)));
        // The backward stack: the marker, then the caller's frames from its line outward.
        let mut files = NoFiles;
        let names = StackNames::new(&t.tables, &mut files);
        assert_eq!(
            names.frames(stacks[2]),
            [
                "backward of /work/train.py:48 step",
                "/work/train.py:48 step",
                "/work/train.py:60 main"
            ]
        );
    }

    #[test]
    fn an_allocation_named_by_its_autograd_node_takes_the_line_and_keeps_the_node() {
        // The recorder named two engine allocations by their node (stack 3: MmBackward0);
        // one has no node (no stack).
        let mut tables = tables("pt_autograd_0");
        tables.python_frames.push(PythonFrame {
            id: 7,
            file: AUTOGRAD_NODE_FILE.into(),
            function: "MmBackward0".into(),
            line: 0,
            module: String::new(),
        });
        tables.stacks.push(Stack {
            id: 3,
            frames: vec![7],
        });
        let events = [
            alloc(0, MAIN, 1, 0x2000, 4),
            alloc(1, ENGINE, 3, 0x3000, 1000),
            alloc(2, ENGINE, NO_STACK, 0x4000, 2000),
            alloc(3, ENGINE, 3, 0x5000, 500),
            alloc(4, MAIN, 2, 0x6000, 10),
            alloc(5, ENGINE, 3, 0x7000, 50),
        ];
        let mut t = Trace::in_memory(Metadata::default(), tables, &events);
        name_backward(&mut t);
        let stacks: Vec<u32> = t.events().map(|e| e.stack).collect();
        assert_eq!(stacks[1], stacks[3]);
        assert!(stacks[1] > 3 && stacks[2] > 3 && stacks[1] != stacks[2]);
        let rows = site_rows(&t);
        assert_eq!(
            rows[..2],
            [
                ("backward of /work/train.py:48 step".to_string(), 2000),
                (
                    "backward of /work/train.py:48 step (MmBackward0)".to_string(),
                    1500
                ),
            ]
        );
        let unseen = crate::symbolize::BACKWARD_UNSEEN.replacen("(", "(MmBackward0; ", 1);
        assert!(rows.contains(&(unseen, 50)), "{rows:?}");
        // On a thread of another name the node's frame is the site.
        let mut tables = t.tables.clone();
        tables.threads[1].name = "worker".into();
        let mut other = Trace::in_memory(Metadata::default(), tables, &events);
        name_backward(&mut other);
        let rows = site_rows(&other);
        assert!(
            rows.contains(&("autograd node MmBackward0".to_string(), 1550)),
            "{rows:?}"
        );
    }

    #[test]
    fn a_python_function_on_the_engine_thread_leaves_the_pass_named() {
        // A custom autograd Function written in Python runs on the engine thread: its own
        // allocation has a stack (2); the engine's next stackless one is still the pass's.
        let events = [
            alloc(0, MAIN, 1, 0x2000, 4),
            alloc(1, ENGINE, 2, 0x3000, 8),
            alloc(2, ENGINE, NO_STACK, 0x4000, 16),
            alloc(3, PIN, 2, 0x5000, 32),
            alloc(4, ENGINE, NO_STACK, 0x6000, 64),
        ];
        let t = named("pt_autograd_0", &events);
        let stacks: Vec<u32> = t.events().map(|e| e.stack).collect();
        let rows = site_rows(&t);
        assert!(rows.contains(&("backward of /work/train.py:48 step".to_string(), 16)));
        // A Python thread (a pin-memory thread) allocated after the pass began: what follows
        // is not named after a line.
        assert!(rows.contains(&(crate::symbolize::BACKWARD_UNSEEN.to_string(), 64)));
        assert_ne!(stacks[2], stacks[4]);
    }

    #[test]
    fn a_thread_of_another_name_is_not_an_engine_thread() {
        let t = named("nccl_worker", &step());
        let stacks: Vec<u32> = t.events().map(|e| e.stack).collect();
        assert_eq!(stacks, [2, 1, NO_STACK, NO_STACK, 2, NO_STACK]);
    }

    #[test]
    fn an_unnamed_thread_is_named_only_inside_a_backward_call() {
        let t = named("", &step());
        let stacks: Vec<u32> = t.events().map(|e| e.stack).collect();
        assert!(stacks[2] > 2 && stacks[3] == stacks[2]);
        assert_eq!(stacks[5], NO_STACK);
    }

    #[test]
    fn a_trace_without_stacks_is_left_as_it_is() {
        let events: Vec<Event> = step()
            .into_iter()
            .map(|e| Event {
                stack: NO_STACK,
                ..e
            })
            .collect();
        let tables = Tables {
            stacks: Vec::new(),
            python_frames: Vec::new(),
            ..tables("pt_autograd_0")
        };
        let mut t = Trace::in_memory(Metadata::default(), tables.clone(), &events);
        name_backward(&mut t);
        assert!(t.events().all(|e| e.stack == NO_STACK));
        assert_eq!(t.tables, tables);
    }
}
