//! What a replay of a trace runs on: its request streams, each with the device capacity it
//! replays under ([`super::prepare`] makes it).

use crate::model::Model;
use crate::policy::PolicySpec;

/// Where a stream's capacity came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacitySource {
    /// Given by the caller for every stream.
    Given,
    /// The traced device's memory.
    Device,
    /// Neither: no limit (`u64::MAX`).
    Unlimited,
    /// The limit the recorded process ran under, as its metadata states it (a memory fraction
    /// of the traced device).
    Recorded,
}

/// A trace's request streams with the capacity each replays under.
pub struct ReplayInput {
    pub model: Model,
    /// Per stream: the capacity, and where it came from.
    pub capacities: Vec<(u64, CapacitySource)>,
    /// The policy of the allocator as it ran, when the trace holds that allocator's own
    /// segments (PyTorch's tracker): the row a replay is checked against.
    pub recorded_policy: Option<PolicySpec>,
}
