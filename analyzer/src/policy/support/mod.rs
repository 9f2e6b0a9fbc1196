//! What several policies build on: option parsing, the coalescing free list, the slot table.

pub mod free_ranges;
pub mod options;
pub mod slots;
