//! The replay engine: a deterministic single-replay loop that drives one
//! [`crate::policy::Policy`] over the simulated [`crate::policy::Driver`], with an [`Observer`]
//! hook for timelines and the state at the peak, and parallel runs over policies × request
//! streams. Builds on `crate::policy`, which never imports this module.
//!
//! Sans-IO: takes request streams, returns figures, timelines and address maps as data.

mod beside;
mod engine;
mod input;
mod parallel;
mod pool_range;
mod prepare;
mod table;

pub use beside::Beside;
pub use engine::{
    Costs, LiveObject, OOM_LIVE_SHOWN, Observer, Oom, Outcome, ReplayOptions, Timeline, Usage,
    address_map_at, replay, replay_on,
};
pub use input::{CapacitySource, ReplayInput};
pub use parallel::{
    FitResult, Progress, RunResult, fit_all, fit_one, replay_all, replay_all_with, run,
    run_caching, run_with,
};
pub use pool_range::{PoolRange, pool_note, pool_range};
pub use prepare::{Limits, capacity, driver, prepare};
pub use table::{
    FitReport, FitRow, PolicyRow, ReplayReport, StreamFit, StreamReport, recorded_refusals_note,
};
