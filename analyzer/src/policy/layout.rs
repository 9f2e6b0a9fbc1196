//! What a policy's memory looks like at one moment: the ranges it holds from the driver and
//! the blocks inside them (for the address-space map at the peak).

use serde::Serialize;

/// A contiguous range of virtual addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Span {
    pub address: u64,
    pub size: u64,
}

/// A block inside a segment: handed out to `slot`, or free (cached) when `slot` is `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BlockSpan {
    pub address: u64,
    pub size: u64,
    pub slot: Option<u32>,
}

/// A policy's layout at one moment (for the address-space map at peak and the report's state
/// log), in no particular order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AddressMap {
    /// Physically backed ranges held from the driver.
    pub segments: Vec<Span>,
    /// Blocks, allocated or cached: at most one handed out to each slot.
    pub blocks: Vec<BlockSpan>,
}
