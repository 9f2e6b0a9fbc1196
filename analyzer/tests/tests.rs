//! The analyzer's integration tests, one binary (the layout of ripgrep's `tests/tests.rs`): each
//! module is one area, `util` holds what they share and `streams` the random request streams of
//! the property suites.

mod util;

mod agreement;
mod backward;
mod cli;
mod device_oracles;
mod fleet_spark;
mod fleet_sql;
mod interop;
mod job_cli;
mod job_dirs;
mod json_output;
mod layers;
mod parquet_readers;
mod placement_properties;
mod pool_h200;
mod pressure;
mod recorded_validation;
mod replay_cli;
mod replay_properties;
mod replay_snapshots;
mod replay_validation;
mod report;
mod streams;
mod tune;
mod tune_replays;
mod validation_h200;
mod wide_sums;
