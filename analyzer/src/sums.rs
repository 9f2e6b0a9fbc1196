//! Sums of byte counts that cannot wrap.
//!
//! Sizes come from the trace, and a crafted or damaged trace can hold sizes whose sum passes
//! `u64::MAX` (four live allocations of 2^63 bytes). A plain `+` would then panic in a build
//! with overflow checks and wrap to a small number in a release build; every sum of sizes is
//! made here instead, saturating at `u64::MAX` (shown as such), and a running total that also
//! goes down is kept in `u128`, which no trace can fill (at most 2^64 events of 2^64 bytes).

/// `sum()` of byte counts, saturating at `u64::MAX`.
pub trait SaturatingSum: Iterator<Item = u64> + Sized {
    fn saturating_sum(self) -> u64 {
        self.fold(0, u64::saturating_add)
    }
}

impl<I: Iterator<Item = u64>> SaturatingSum for I {}

/// A running total of live bytes (allocations add, frees take away) that is exact whatever
/// the sizes, read as `u64` saturated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Live(u128);

impl Live {
    pub fn add(&mut self, bytes: u64) {
        self.0 += u128::from(bytes);
    }

    /// Takes away `bytes`, stopping at 0 (a free the total never saw).
    pub fn sub(&mut self, bytes: u64) {
        self.0 = self.0.saturating_sub(u128::from(bytes));
    }

    /// The total, `u64::MAX` when it is more.
    pub fn bytes(self) -> u64 {
        u64::try_from(self.0).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_past_u64_max_saturate_and_a_live_total_comes_back_exactly() {
        let half = u64::MAX / 2 + 1;
        assert_eq!([half, half, half].into_iter().saturating_sum(), u64::MAX);
        assert_eq!([1, 2, 3].into_iter().saturating_sum(), 6);
        let mut live = Live::default();
        for _ in 0..3 {
            live.add(half);
        }
        assert_eq!(live.bytes(), u64::MAX);
        live.sub(half);
        live.sub(half);
        assert_eq!(live.bytes(), half, "exact once it fits again");
        live.sub(u64::MAX);
        assert_eq!(live.bytes(), 0);
    }
}
