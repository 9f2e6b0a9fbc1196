//! The walk of a trace's changes ([`super::table::AllocationTable::walk`]) from a pass that
//! keeps no row: the events, in file order once more, through a [`TableBuilder`] whose follower
//! makes of each change the [`Step`] the rows give, so that a [`Stepper`] reads the same walk
//! from either and a caller that streams the file never holds the rows.
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
/// to a [`Stepper`] as [`super::table::AllocationTable::walk`] would, holding only the objects
/// live at once.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::table::AllocationTable;
    use vramtrace_format::Api;

    /// Every step and count it was told of, with the totals and live bytes of process 1 on
    /// device 0 just after it.
    #[derive(Default)]
    struct Record(Vec<(String, Totals, u64)>);

    impl Record {
        /// `live`: whether the live set is read (not at a replaced object's end, which its
        /// event's allocation follows: [`Moment::live`]).
        fn note(&mut self, what: String, index: u64, now: &dyn Moment, live: bool) {
            let mut bytes = 0;
            if live {
                now.live(index, &mut |o| bytes += o.size);
            }
            self.0.push((what, now.totals(1, 0), bytes));
        }
    }

    impl Stepper for Record {
        fn step(&mut self, step: Step<'_>, now: &dyn Moment) {
            let what = match step {
                Step::Alloc { object, .. } => format!("alloc {}", object.size),
                Step::Free {
                    object, time_ns, ..
                } => format!("free {} at {time_ns}", object.size),
                Step::Replaced {
                    object, time_ns, ..
                } => {
                    format!("replaced {} at {time_ns}", object.size)
                }
                Step::Failed(f) => format!("failed {}", f.event.size),
            };
            let live = !matches!(step, Step::Replaced { .. });
            let what = format!("{what} (event {})", step.index());
            self.note(what, step.index(), now, live);
        }

        fn counted(&mut self, c: &DriverCountEvent, now: &dyn Moment) {
            let what = format!("count {} (event {})", c.event.size, c.index);
            self.note(what, c.index, now, true);
        }
    }

    fn ev(api: Api, time_ns: u64, address: u64, size: u64, result: u32) -> Event {
        Event {
            pid: 1,
            time_ns,
            device: 0,
            address,
            handle: address,
            size,
            result,
            ..Event::new(api)
        }
    }

    #[test]
    fn a_pass_without_rows_hands_a_stepper_the_steps_and_counts_of_the_rows() {
        let events = [
            ev(Api::CuMemAlloc_v2, 1, 0x1000, 100, 0),
            ev(Api::DriverProcessMemory, 2, 0, 900, 0),
            ev(Api::CuMemAlloc_v2, 3, 0, 1 << 40, 2),
            ev(Api::CuMemCreate, 4, 0x1000, 7, 0),
            ev(Api::CuMemAlloc_v2, 5, 0x1000, 30, 0),
            ev(Api::CuMemFree_v2, 6, 0x9000, 0, 0),
            ev(Api::CuMemRelease, 7, 0x1000, 0, 0),
            ev(Api::DriverProcessMemory, 8, 0, 950, 0),
        ];
        let mut table = crate::model::table::TableBuilder::default();
        events.iter().for_each(|e| table.push(e));
        let table: AllocationTable = table.finish().0;
        let mut rows = Record::default();
        table.walk(&mut rows);
        let mut pass = StepPass::new(table.shape, Record::default());
        events.iter().for_each(|e| pass.push(e));
        let (streamed, live) = pass.finish();
        assert_eq!(rows.0, streamed.0);
        let t = |bytes| Totals {
            requested: bytes,
            reserved: bytes,
        };
        let seen: Vec<(&str, Totals, u64)> = rows
            .0
            .iter()
            .map(|(w, t, l)| (w.as_str(), *t, *l))
            .collect();
        assert_eq!(
            seen,
            [
                ("alloc 100 (event 0)", t(100), 100),
                ("count 900 (event 1)", t(100), 100),
                ("failed 1099511627776 (event 2)", t(100), 100),
                ("alloc 7 (event 3)", t(107), 107),
                ("replaced 100 at 5 (event 4)", t(7), 0),
                ("alloc 30 (event 4)", t(37), 37),
                ("free 7 at 7 (event 6)", t(30), 30),
                ("count 950 (event 7)", t(30), 30),
            ]
        );
        assert_eq!(live.iter().map(|o| o.size).collect::<Vec<_>>(), [30]);
    }
}
