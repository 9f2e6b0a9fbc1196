//! What several policies build on: option parsing, the coalescing free list, the ordered map of
//! the free-block indexes, the slot table.

pub mod chunked_map;
pub mod free_ranges;
pub mod options;
pub mod slots;
