//! The replay engine: one [`Policy`] trait over a shared [`Driver`] model, a deterministic
//! single-replay loop, and parallel runs over policies × request streams.
//!
//! Sans-IO: takes request streams, returns figures, timelines and address maps as data.

pub mod driver;
mod engine;
mod parallel;
mod policy;

pub use driver::{Driver, DriverCall, DriverModel};
pub use engine::{
    Costs, LiveObject, OOM_LIVE_SHOWN, Observer, Oom, Outcome, ReplayOptions, Timeline, Usage,
    address_map_at, replay, replay_on,
};
pub use parallel::{
    Detailed, FitResult, RunResult, fit_all, fit_one, replay_all, run, run_detailed,
};
pub use policy::{AddressMap, BlockSpan, Policy, Refused, Span};
