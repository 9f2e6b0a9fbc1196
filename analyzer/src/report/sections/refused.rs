//! The allocations the driver refused and the program survived, listed one by one up to a
//! bound.

use crate::report::data::Refused;
use crate::report::trace::Instance;

/// Refused requests listed one by one.
pub const MAX_REFUSED: usize = 2_000;

/// The first [`MAX_REFUSED`] refusals, and how many there were.
pub fn refused(instance: &Instance) -> (Vec<Refused>, u64) {
    let v = instance
        .refused
        .iter()
        .take(MAX_REFUSED)
        .map(|r| Refused {
            time_ns: r.time_ns,
            size: r.size,
            stack: r.stack,
        })
        .collect();
    (v, instance.refused.len() as u64)
}
