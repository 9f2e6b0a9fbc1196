//! The allocations the driver refused and the program survived, listed one by one up to a
//! bound.

use crate::report::data::Refused;
use crate::report::trace::Instance;

/// Refused requests listed one by one.
pub const MAX_REFUSED: usize = 2_000;

/// The first [`MAX_REFUSED`] refusals, and how many there were.
pub fn refused(instance: &Instance) -> (Vec<Refused>, u64) {
    let mut refusals = instance.refused();
    let v = refusals
        .by_ref()
        .take(MAX_REFUSED)
        .map(|r| Refused {
            time_ns: r.time_ns,
            size: r.size,
            stack: r.stack,
        })
        .collect::<Vec<_>>();
    let total = v.len() as u64 + refusals.count() as u64;
    (v, total)
}
