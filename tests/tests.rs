//! The end-to-end tests, one binary: the recorder against the fake driver, its fault matrix,
//! its stacks, its PyTorch tracker, Python frames, the wheel installed with pip, and the traces
//! recorded on a real H200. Shared helpers are in `src/lib.rs`.

mod driver_count;
mod faults;
mod layers;
mod ordering;
mod pyframes;
mod real_traces;
mod recorder;
mod stacks;
mod torch_tracker;
mod wheel;
