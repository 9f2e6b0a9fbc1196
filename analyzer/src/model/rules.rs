//! The pass's rules, answered per function: every test the allocation table's pass
//! ([`super::table::TableBuilder::push`]) and the device peak ([`super::live::DevicePeak`]) make
//! of an event that its function and whether it succeeded decide (its lifetime and key, whether
//! it is a mark, which level fact or failed call it counts, what it shows of the allocator), in
//! one table indexed by api id, so that an event's answers come in one load rather than from
//! five files' rules tested one after another.
//!
//! Each rule is stated once: the lifetime and the key in `lifetimes.rs`, the level's facts and
//! the allocator's calls in `level.rs`, the mark and the failed calls here. The table is built
//! by asking each of them about an event of each function, succeeded and failed, so it cannot
//! disagree with them. What else of an event a rule reads is left to the caller: the mark's
//! test of `aux` (a pool trimmed to nothing, [`Outcome::mark`]) and the [`ALLOCATOR_SEGMENT`]
//! flag.

use super::level::{Calls, LevelFacts, LevelStats};
use super::lifetimes::{KeyKind, Lifetime};
use super::ordering::order_of;
use std::sync::LazyLock;
use vramtrace_format::conventions::ALLOCATOR_SEGMENT;
use vramtrace_format::{Api, Event, MemoryKind, Op};

/// Whether the replay's requests follow `e`, an event of no [`ALLOCATOR_SEGMENT`] flag that
/// changes no row: a §4.3 limit (formats/SPEC.md: a device's total, a memory fraction, an
/// `empty_cache`, a pool trimmed to nothing), an ordering call that orders something (§4.4), or
/// PyTorch's word on its segments (`torch.segment_*`). These are a follower's marks
/// ([`super::table::Follow::marked`]).
fn is_mark(e: &Event) -> bool {
    match e.api.kind() {
        MemoryKind::Limits => e.api != Api::DriverProcessMemory,
        MemoryKind::Ordering => order_of(e).is_some(),
        MemoryKind::TorchSegment => true,
        _ => e.api == Api::CuMemPoolTrimTo && e.aux == 0 && e.succeeded(),
    }
}

/// Whether `e`, a failed call of the program's that is no mark, counts among
/// `AllocationTable::failed_calls`: limits, ordering calls and PyTorch's word on its segments
/// do not, nor a request to free (an error there frees nothing).
fn counts_as_failed_call(e: &Event) -> bool {
    e.api.op() != Op::FreeRequested
        && !matches!(
            e.api.kind(),
            MemoryKind::Limits | MemoryKind::Ordering | MemoryKind::TorchSegment
        )
}

/// What the rules say of an event of one function that succeeded, or failed, and carries no
/// [`ALLOCATOR_SEGMENT`] flag. Aligned to 16 bytes, so that its index is a shift.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(align(16))]
pub(super) struct Outcome {
    pub op: Op,
    pub kind: MemoryKind,
    pub lifetime: Lifetime,
    pub key: KeyKind,
    /// What it shows of the allocator the program ran under ([`Calls::see`]).
    pub calls: Calls,
    /// Whether it is the driver's count of a process's memory.
    pub driver_count: bool,
    /// Whether it is a mark ([`is_mark`]) when its `aux` is 0, and when it is not.
    pub mark: [bool; 2],
    /// Whether [`LevelStats::see_call`] counts anything of it (of a 2 MiB call, which every
    /// fact counts), when it is a successful call and no mark.
    pub level: bool,
    /// Whether it counts among the failed calls (a failed call that is no mark).
    pub failed_call: bool,
}

impl Outcome {
    /// The rules' answers for a call of `api` that succeeded or not.
    fn of(api: Api, succeeded: bool) -> Outcome {
        let probe = |aux: u64| Event {
            result: if succeeded { 0 } else { 1 },
            aux,
            ..Event::new(api)
        };
        let e = probe(0);
        let mut calls = Calls::default();
        calls.see(&e);
        let mut level = LevelStats::default();
        level.see_call(api.op(), api.kind(), 2 << 20);
        Outcome {
            op: api.op(),
            kind: api.kind(),
            lifetime: Lifetime::of(&e),
            key: KeyKind::of(api),
            calls,
            driver_count: api == Api::DriverProcessMemory,
            mark: [is_mark(&e), is_mark(&probe(1))],
            level: succeeded && level.into_facts() != LevelFacts::default(),
            failed_call: !succeeded && counts_as_failed_call(&e),
        }
    }

    /// Whether `e`, an event this outcome's, is a mark.
    #[inline]
    pub fn is_mark(&self, e: &Event) -> bool {
        self.mark[usize::from(e.aux != 0)] && e.flags & ALLOCATOR_SEGMENT == 0
    }
}

/// The answers of every function, by api id, succeeded (index 1) and failed (index 0).
#[derive(Debug)]
pub(super) struct Rules(Box<[[Outcome; 2]; Api::IDS]>);

static RULES: LazyLock<Rules> = LazyLock::new(|| {
    // An id of no function holds the answers of the first one: no event has it.
    let mut t = Box::new(
        [[
            Outcome::of(Api::ALL[0], false),
            Outcome::of(Api::ALL[0], true),
        ]; Api::IDS],
    );
    for &api in Api::ALL {
        t[api as usize] = [Outcome::of(api, false), Outcome::of(api, true)];
    }
    Rules(t)
});

impl Rules {
    /// The table, built at its first use.
    pub fn get() -> &'static Rules {
        &RULES
    }

    /// The answers for `e`.
    #[inline]
    pub fn of(&self, e: &Event) -> &Outcome {
        &self.0[e.api as usize][usize::from(e.succeeded())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Checks that the table answers for `e` what the rule functions answer.
    fn agrees(e: &Event) {
        let o = Rules::get().of(e);
        let program = e.flags & ALLOCATOR_SEGMENT == 0;
        assert_eq!((o.op, o.kind), (e.api.op(), e.api.kind()), "{e:?}");
        assert_eq!(o.lifetime, Lifetime::of(e), "{e:?}");
        assert_eq!(o.key, KeyKind::of(e.api), "{e:?}");
        let (mut seen, mut answered) = (Calls::default(), Calls::default());
        seen.see(e);
        answered.add(o.calls);
        assert_eq!(answered, seen, "{e:?}");
        assert_eq!(o.driver_count, e.api == Api::DriverProcessMemory, "{e:?}");
        assert_eq!(o.is_mark(e), program && is_mark(e), "{e:?}");
        let (mut counted, mut gated) = (LevelStats::default(), LevelStats::default());
        if e.succeeded() {
            counted.see_call(e.api.op(), e.api.kind(), e.size);
        }
        if o.level {
            gated.see_call(o.op, o.kind, e.size);
        }
        assert_eq!(gated.into_facts(), counted.into_facts(), "{e:?}");
        let failed = !e.succeeded() && counts_as_failed_call(e);
        assert_eq!(o.failed_call, failed, "{e:?}");
    }

    #[test]
    fn every_function_succeeded_or_failed_is_answered_as_its_rules_say() {
        for &api in Api::ALL {
            for (result, aux, size) in [(0, 0, 0), (0, 1, 2 << 20), (2, 0, 64), (600, 7, 3 << 20)] {
                agrees(&Event {
                    result,
                    aux,
                    size,
                    ..Event::new(api)
                });
            }
        }
    }

    #[test]
    fn a_pool_trimmed_to_nothing_is_a_mark_and_one_trimmed_to_a_size_is_not() {
        let mut trim = Event::new(Api::CuMemPoolTrimTo);
        assert!(Rules::get().of(&trim).is_mark(&trim));
        trim.aux = 1 << 20;
        assert!(!Rules::get().of(&trim).is_mark(&trim));
    }

    proptest! {
        #[test]
        fn any_event_is_answered_as_its_rules_say(
            api in proptest::sample::select(Api::ALL),
            result in prop_oneof![Just(0u32), Just(1), Just(2), Just(600), any::<u32>()],
            aux in prop_oneof![Just(0u64), any::<u64>()],
            size in prop_oneof![Just(2u64 << 20), any::<u64>()],
            flags in prop_oneof![Just(0u64), Just(ALLOCATOR_SEGMENT), any::<u64>()],
            (address, handle, pid) in (any::<u64>(), any::<u64>(), any::<u32>()),
        ) {
            agrees(&Event { result, aux, size, flags, address, handle, pid, ..Event::new(api) });
        }
    }
}
