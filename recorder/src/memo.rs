//! The unwind rules framehop evaluates afresh at every capture, remembered per return address.
//!
//! framehop caches a frame's rule only when it fits one of its compact forms (`UnwindRuleX86_64`:
//! the canonical frame address as `rsp` plus an offset, or the standard `rbp` frame). Any other
//! rule is evaluated through gimli on every unwind: a search of `.eh_frame_hdr`, the CIE's and
//! FDE's instructions run up to the address, about 100 ns a frame or more. libffi's
//! `ffi_call_unix64`, which every ctypes call passes through, is such a frame (`CFA = rbp + 32`,
//! `rbp` saved at `CFA − 16`: framehop's own comment in `x86_64/dwarf.rs`,
//! `translate_into_unwind_rule`); hand-written assembly and some JIT trampolines are others.
//!
//! [`Memo`] keeps, per thread and per return address, which rule applies: [`Rule::Framehop`]
//! (framehop caches it itself) or [`Rule::FromBp`] (the `rbp`-based frame framehop does not
//! take, executed here). It learns an address the first time framehop finds no rule for it in
//! its cache, by reading the same CFI row with gimli ([`Tables::rule_at`]), so gimli runs once
//! per address and thread, not once per capture. Nothing here allocates on the hook path: the
//! memo and gimli's unwind context are made with the thread's block.

use crate::modules::Loaded;
use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, EndianSlice, LittleEndian, ParsedEhFrameHdr,
    Register, RegisterRule, UnwindContext, UnwindContextStorage, UnwindSection, UnwindTableRow,
    X86_64,
};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

type Bytes = EndianSlice<'static, LittleEndian>;

/// gimli's row storage in fixed arrays (the sizes framehop's `MustNotAllocateDuringUnwind`
/// uses): evaluating a row allocates nothing.
pub struct Fixed;

impl UnwindContextStorage<usize> for Fixed {
    type Rules = [(Register, RegisterRule<usize>); 192];
    type Stack = [UnwindTableRow<usize, Self>; 4];
}

/// What unwinds a frame whose return address was seen before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// framehop's own (cached) rule.
    Framehop,
    /// `CFA = rbp + cfa`, the return address at `CFA − 8`, the caller's `rbp` at `CFA + bp`.
    FromBp { cfa: i32, bp: i32 },
}

impl Rule {
    /// Unwinds one frame of `(sp, bp)`: the caller's `(return address, sp, bp)`, or `None` when
    /// a read fails or the frame does not move up the stack.
    #[inline]
    pub fn exec(
        self,
        sp: u64,
        bp: u64,
        read: &mut impl FnMut(u64) -> Result<u64, ()>,
    ) -> Option<(u64, u64, u64)> {
        let Rule::FromBp { cfa, bp: saved } = self else {
            return None;
        };
        let cfa = bp.checked_add_signed(i64::from(cfa))?;
        if cfa <= sp {
            return None;
        }
        let ra = read(cfa.checked_sub(8)?).ok()?;
        let caller_bp = read(cfa.checked_add_signed(i64::from(saved))?).ok()?;
        Some((ra, cfa, caller_bp))
    }
}

/// Slots of a thread's memo (a power of two), in pairs: 24 bytes each, 96 KiB a thread, beside
/// gimli's fixed-size unwind context. Read only when framehop misses its cache or the filter
/// says an address may take [`Rule::FromBp`].
const SLOTS: usize = 1 << 12;
/// Objects whose `FromBp` rules a thread remembers at most (libffi is usually the only one);
/// addresses of further objects keep framehop's evaluation.
const HOT_OBJECTS: usize = 4;

/// A thread's rules by return address, two slots an address (an address evicting another only
/// costs learning it again, but each relearning is a gimli evaluation: with one slot an address,
/// the 400 return addresses of `bench/many_stacks.py` collided often enough to double gimli's
/// share of a capture).
///
/// Every frame of every capture asks whether its return address takes a [`Rule::FromBp`]; a
/// probe of the slots for each cost about 5% of a 40-frame native capture. The address ranges
/// of the objects where a `FromBp` rule was learnt answer first: only addresses inside them
/// (libffi's, in a ctypes program) read a slot.
pub struct Memo {
    slots: Box<[(u64, Rule)]>,
    hot: [Range<u64>; HOT_OBJECTS],
    context: Box<UnwindContext<usize, Fixed>>,
    /// The [`Tables::generation`] the slots were learnt from.
    generation: u64,
}

impl Default for Memo {
    fn default() -> Memo {
        Memo {
            slots: vec![(0, Rule::Framehop); SLOTS].into_boxed_slice(),
            hot: [const { 0..0 }; HOT_OBJECTS],
            context: Box::new(UnwindContext::new_in()),
            generation: 0,
        }
    }
}

impl Memo {
    /// The first slot of `address`: a Fibonacci hash (return addresses of one library differ
    /// in their low bits).
    #[inline]
    fn place(address: u64) -> usize {
        (address.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros())) as usize
    }

    /// Forgets every rule when they were learnt from other tables than `tables` (the module
    /// list changed: an address may now belong to another object).
    #[inline]
    pub fn follow(&mut self, tables: &Tables) {
        if self.generation != tables.generation {
            self.slots.fill((0, Rule::Framehop));
            self.hot = [const { 0..0 }; HOT_OBJECTS];
            self.generation = tables.generation;
        }
    }

    /// The slot holding `address`, if one does (of its two: `slot` and its neighbour).
    #[inline]
    fn find(&self, slot: usize, address: u64) -> Option<&(u64, Rule)> {
        [slot, slot ^ 1]
            .into_iter()
            .filter_map(|i| self.slots.get(i))
            .find(|&&(a, _)| a == address && a != 0)
    }

    /// The [`Rule::FromBp`] remembered for `address`, if one is.
    #[inline]
    pub fn bp_rule(&self, address: u64) -> Option<Rule> {
        if !self.hot.iter().any(|r| r.contains(&address)) {
            return None;
        }
        match self.find(Self::place(address), address) {
            Some(&(_, rule @ Rule::FromBp { .. })) => Some(rule),
            _ => None,
        }
    }

    /// Whether a rule of either kind is remembered for `address`.
    pub fn knows(&self, address: u64) -> bool {
        self.find(Self::place(address), address).is_some()
    }

    /// Reads the rule of `address` from `tables` and remembers it, in the empty one of its two
    /// slots or else the first.
    pub fn learn(&mut self, tables: &Tables, address: u64) -> Rule {
        let (rule, object) = tables.rule_at(&mut self.context, address);
        let slot = Self::place(address);
        let free = [slot, slot ^ 1]
            .into_iter()
            .find(|&i| self.slots.get(i).is_some_and(|&(a, _)| a == 0));
        if let Some(entry) = self.slots.get_mut(free.unwrap_or(slot)) {
            *entry = (address, rule);
        }
        if let (Rule::FromBp { .. }, Some(object)) = (rule, object)
            && !self.hot.contains(&object)
            && let Some(free) = self.hot.iter_mut().find(|r| r.is_empty())
        {
            *free = object;
        }
        rule
    }
}

/// One object's call frame information, parsed for lookups.
struct Object {
    range: Range<u64>,
    bias: u64,
    bases: BaseAddresses,
    hdr: ParsedEhFrameHdr<Bytes>,
    eh_frame: EhFrame<Bytes>,
}

/// The call frame information of every loaded object, sorted by address (part of an unwinder
/// snapshot: built on the writer thread, read by the hooks).
pub struct Tables {
    objects: Vec<Object>,
    /// Distinct for every value made (from 1).
    generation: u64,
}

impl Tables {
    pub fn new(modules: &[Loaded]) -> Tables {
        let mut objects: Vec<Object> = modules
            .iter()
            .filter_map(|m| {
                let ((hdr_at, hdr), (eh_at, eh)) = (m.eh_frame_hdr?, m.eh_frame?);
                let bases = BaseAddresses::default()
                    .set_eh_frame_hdr(hdr_at)
                    .set_eh_frame(eh_at);
                let hdr = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8).ok()?;
                Some(Object {
                    range: m.range.clone(),
                    bias: m.bias,
                    bases,
                    hdr,
                    eh_frame: EhFrame::new(eh, LittleEndian),
                })
            })
            .collect();
        objects.sort_by_key(|o| o.range.start);
        static MADE: AtomicU64 = AtomicU64::new(1);
        Tables {
            objects,
            generation: MADE.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The rule of the frame whose lookup address is `address` (a return address minus one),
    /// and the address range of the object that holds it. Allocation-free with the [`Fixed`]
    /// context.
    fn rule_at(
        &self,
        context: &mut UnwindContext<usize, Fixed>,
        address: u64,
    ) -> (Rule, Option<Range<u64>>) {
        let i = self.objects.partition_point(|o| o.range.start <= address);
        let Some(o) = i.checked_sub(1).and_then(|i| self.objects.get(i)) else {
            return (Rule::Framehop, None);
        };
        if !o.range.contains(&address) {
            return (Rule::Framehop, None);
        }
        let object = Some(o.range.clone());
        let Some(table) = o.hdr.table() else {
            return (Rule::Framehop, object);
        };
        let stated = address.wrapping_sub(o.bias);
        let Ok(row) = table.unwind_info_for_address(
            &o.eh_frame,
            &o.bases,
            context,
            stated,
            EhFrame::cie_from_offset,
        ) else {
            return (Rule::Framehop, object);
        };
        let rule = from_row(
            row.cfa(),
            row.register(X86_64::RBP),
            row.register(X86_64::RA),
        );
        (rule, object)
    }
}

/// The rule of one CFI row, when it is the `rbp`-based form framehop does not cache.
fn from_row(
    cfa: &CfaRule<usize>,
    bp: Option<RegisterRule<usize>>,
    ra: Option<RegisterRule<usize>>,
) -> Rule {
    let (CfaRule::RegisterAndOffset { register, offset }, Some(RegisterRule::Offset(saved))) =
        (cfa, bp)
    else {
        return Rule::Framehop;
    };
    if *register != X86_64::RBP
        || ra != Some(RegisterRule::Offset(-8))
        || (*offset == 16 && saved == -16)
    {
        // Not rbp-based, an unusual return address, or the standard frame framehop caches.
        return Rule::Framehop;
    }
    match (i32::try_from(*offset), i32::try_from(saved)) {
        (Ok(cfa), Ok(bp)) => Rule::FromBp { cfa, bp },
        _ => Rule::Framehop,
    }
}
