//! The walk of a trace's changes ([`super::table::AllocationTable::walk`]) from a pass that keeps no row: the
//! events, in file order once more, through a [`TableBuilder`] whose follower makes of each
//! change the [`Step`] the rows give, so that a [`Stepper`] reads the same walk from either and
//! a caller that streams the file never holds the rows.
//!
//! The objects are classified under the trace's [`Shape`], which only the whole trace shows: a
//! first pass finds it (the one that built the caller's table or request model).

use super::lifetimes::is_birth;
use super::table::{
    DriverCountEvent, Failure, Follow, Moment, Object, Shape, Step, Stepper, TableBuilder, Totals,
};
use std::collections::HashMap;
use vramtrace_format::Event;

/// The hasher of the running totals, as the rows' walk's.
type Hasher = foldhash::fast::RandomState;

/// A pass over a trace's events, in file order, that hands each change and each driver's count
/// to a [`Stepper`] as [`super::table::AllocationTable::walk`] would, holding only the objects live at once.
pub struct StepPass<S: Stepper> {
    builder: TableBuilder<Changes<S>>,
}

impl<S: Stepper> StepPass<S> {
    /// A pass whose objects are classified under `shape`, the trace's, read by `reader`.
    pub fn new(shape: Shape, reader: S) -> StepPass<S> {
        let changes = Changes {
            shape,
            index: 0,
            now: Now::default(),
            reader,
        };
        StepPass {
            builder: TableBuilder::new(changes, false),
        }
    }

    /// Takes the next event in file order.
    pub fn push(&mut self, e: &Event) {
        let index = self.builder.pushed().events;
        let counts = self.builder.pushed().driver_counts.len();
        self.builder.follower_mut().index = index;
        self.builder.push(e);
        // The builder keeps the driver's counts: a count it took is this event.
        if self.builder.pushed().driver_counts.len() > counts {
            let c = DriverCountEvent { index, event: *e };
            let Changes { now, reader, .. } = self.builder.follower_mut();
            reader.counted(&c, now);
        }
    }

    /// The reader, and the objects live when the trace ends (in no particular order).
    pub fn finish(self) -> (S, Vec<Object>) {
        let changes = self.builder.finish().1;
        let live = changes.now.live.into_iter().flatten().collect();
        (changes.reader, live)
    }
}

/// The pass's follower: each change made a [`Step`] for the reader.
struct Changes<S> {
    shape: Shape,
    /// The index of the event being pushed.
    index: u64,
    now: Now,
    reader: S,
}

/// What is live after the last change: the totals and the objects, each in a slot that its
/// handle in the builder names.
#[derive(Default)]
struct Now {
    totals: HashMap<(u32, i32), Totals, Hasher>,
    live: Vec<Option<Object>>,
    /// Slots left empty by an end, taken again first.
    empty: Vec<u32>,
}

impl Now {
    fn born(&mut self, o: Object) -> u32 {
        self.account(&o, true);
        match self.empty.pop() {
            Some(slot) => {
                self.live[slot as usize] = Some(o);
                slot
            }
            None => {
                self.live.push(Some(o));
                (self.live.len() - 1) as u32
            }
        }
    }

    fn ended(&mut self, slot: u32) -> Object {
        let o = self.live[slot as usize]
            .take()
            .expect("the builder ends each object it was handed once");
        self.empty.push(slot);
        self.account(&o, false);
        o
    }

    fn account(&mut self, o: &Object, add: bool) {
        self.totals
            .entry((o.pid, o.device))
            .or_default()
            .account(o, add);
    }
}

impl Moment for Now {
    fn totals(&self, pid: u32, device: i32) -> Totals {
        self.totals.get(&(pid, device)).copied().unwrap_or_default()
    }

    fn live(&self, _: u64, each: &mut dyn FnMut(Object)) {
        self.live.iter().flatten().copied().for_each(each);
    }
}

impl<S: Stepper> Follow for Changes<S> {
    type Live = u32;

    fn born(&mut self, e: &Event) -> u32 {
        let object = Object::born_at(e, self.shape);
        let slot = self.now.born(object);
        let step = Step::Alloc {
            object,
            index: self.index,
        };
        self.reader.step(step, &self.now);
        slot
    }

    fn ended(&mut self, slot: u32, e: &Event) {
        let object = self.now.ended(slot);
        let (time_ns, index) = (e.time_ns, self.index);
        // An object ends at an allocation only when that allocation took its address.
        let step = if is_birth(e) {
            Step::Replaced {
                object,
                time_ns,
                index,
            }
        } else {
            Step::Free {
                object,
                time_ns,
                index,
            }
        };
        self.reader.step(step, &self.now);
    }

    fn failed(&mut self, e: &Event) {
        let f = Failure {
            index: self.index,
            event: *e,
        };
        self.reader.step(Step::Failed(&f), &self.now);
    }

    fn marked(&mut self, _: &Event) {}
}
