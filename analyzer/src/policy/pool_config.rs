//! The stream-ordered pool's settings (docs/allocators.md §6, the pool's attributes), shared by the
//! `cuda-async` policy that parses them and the ordered pool that follows the recorded synchronizations.

const MIB: u64 = 1 << 20;

/// Which free range serves a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    Best,
    First,
    Worst,
    Last,
}

#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub chunk: u64,
    pub alignment: u64,
    pub release_threshold: u64,
    pub opportunistic: bool,
    pub internal_dependencies: bool,
    pub fit: Fit,
    pub large_alignment: u64,
    pub small_max: u64,
    pub pending_fit: Fit,
    pub coalesce_pending: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            chunk: 32 * MIB,
            alignment: 512,
            release_threshold: u64::MAX,
            opportunistic: false,
            internal_dependencies: true,
            fit: Fit::First,
            large_alignment: 512,
            small_max: MIB,
            pending_fit: Fit::Best,
            coalesce_pending: true,
        }
    }
}
