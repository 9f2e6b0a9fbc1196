//! One row of `tune`'s answer: a setting's figures measured on the trace, against the
//! recorded setting, with the validated band of its model.

use super::framework::Framework;
use super::grid::Role;
use crate::policy::validated::Band;
use serde::Serialize;

/// One setting's figures (all bytes; the largest over streams where there are several).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub framework: Framework,
    /// The policy spec (`--policy` syntax).
    pub setting: String,
    /// The line to paste, or the code, that selects it.
    pub select: String,
    pub role: Role,
    /// True for the configuration the trace was recorded with.
    pub recorded: bool,
    pub preallocates: bool,
    /// Peak reserved of the allocator (pool peak).
    pub pool_peak_reserved: u64,
    /// Pool peak + memory outside the pool + the CUDA context (process peak).
    pub process_peak: u64,
    /// Recorded process peak minus this one (positive: this needs less).
    pub saving_bytes: i64,
    /// `saving_bytes` over the recorded process peak.
    pub saving_fraction: f64,
    pub device_allocs: u64,
    pub device_frees: u64,
    pub sync_frees: u64,
    pub refusals: u64,
    pub retries: u64,
    pub est_alloc_time_us: f64,
    /// Ran out of memory at the replay's capacity.
    pub oom: bool,
    /// The validated error band of the setting's model (docs/validation.md); `null` when no
    /// real run checked it (unvalidated).
    pub validated: Option<&'static Band>,
    /// The process peaks of real runs the prediction stands for, from `validated`: the
    /// smallest and largest whose error would have been inside the band. `null` unvalidated.
    pub real_range: Option<(u64, u64)>,
    /// Ranked among the settings whose real range reaches the best setting's: which of them is
    /// smaller is within the noise of the models, and cost and simplicity decide.
    pub within_noise: bool,
    /// Whether it fits `--gpu`; `null` without one.
    pub fits_gpu: Option<bool>,
    /// Other settings that gave exactly the same figures.
    pub equivalent: Vec<String>,
    /// Set when the prediction depends on the order of the driver's addresses: replayed with
    /// falling instead of rising addresses, the process peak (or running out of memory)
    /// differs. PyTorch breaks ties between equal-size free blocks by address, and the real
    /// driver's order follows no rule a trace of another configuration could know
    /// (docs/allocators.md, "Driver addresses").
    pub address_sensitive: Option<AddressSpread>,
}

/// The process peaks of one setting under the two address orders tried.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct AddressSpread {
    /// The smaller and the larger process peak of the two replays.
    pub low: u64,
    pub high: u64,
    /// Whether the replay with falling addresses ran out of memory.
    pub falling_oom: bool,
}
