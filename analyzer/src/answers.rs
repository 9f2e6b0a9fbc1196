//! The answers a user wants from a trace, in one struct for the report's headline and any other
//! view: how much the process held at most and where that comes from, the best setting it can
//! select and what it saves against the recorded one, and the smallest common GPU it fits
//! (docs/definitions.md names every figure).
//!
//! Sans-IO: built from a [`Summary`] and a [`Tune`] the caller made.

use crate::model::device::GPU_SIZES_GB;
use crate::summary::Summary;
use crate::symbolize::StackBytes;
use crate::tune::Tune;
use crate::units::gpu_bytes;
use serde::Serialize;

/// The best selectable setting and what it saves.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BestSetting {
    /// The policy spec (`--policy` syntax).
    pub setting: String,
    /// The line to paste.
    pub select: String,
    pub process_peak: u64,
    /// Against the recorded setting's process peak; positive: it needs less.
    pub saving_bytes: i64,
    pub saving_fraction: f64,
    /// How far the prediction is validated ([`crate::policy::validated::label`]), on the
    /// real runs of `capture`.
    pub validated: String,
    /// The trace's capture, whose runs the band comes from.
    pub capture: Option<crate::model::Capture>,
}

/// What the headline says.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Answers {
    /// The recorded process peak of the busiest device (as the driver saw it) and when (the
    /// event's clock, as [`Summary`] gives it: subtract the first event's time for "after the
    /// start").
    pub peak_bytes: u64,
    pub peak_time_ns: u64,
    /// The user's frame ([`StackBytes::site`]) of the stack holding the most bytes at the
    /// requested peak; `None` when the trace has no stacks.
    pub peak_frame: Option<String>,
    /// The line that selects the recorded setting.
    pub recorded_select: String,
    /// The recorded setting's predicted process peak (pool + outside + context).
    pub recorded_process_peak: u64,
    /// The best selectable setting whose model is validated; `None` when that is the recorded
    /// setting, or nothing validated could be ranked.
    pub best: Option<BestSetting>,
    /// The smallest common GPU (GB as sold) the best setting (else the recorded one) runs on
    /// without the allocator freeing its cache: its process peak fits.
    pub smallest_gpu_gb: Option<u64>,
    /// Settings among those compared that reserve a fixed share of the device up front: their
    /// peak is that share, not the program's need, and they are not ranked as "the most".
    pub preallocating: Vec<String>,
}

fn peak_frame(stacks: &[StackBytes]) -> Option<String> {
    stacks
        .first()
        .map(|top| top.site.clone())
        .filter(|site| !site.is_empty())
}

impl Answers {
    pub fn of(summary: &Summary, tune: &Tune) -> Answers {
        let busiest = summary
            .groups
            .iter()
            .filter(|g| g.device >= 0)
            .max_by_key(|g| g.peak_reserved);
        // The best setting whose prediction is validated (the ranking puts those first).
        let best = tune
            .ranked
            .iter()
            .find(|r| r.validated.is_some())
            .filter(|b| !b.recorded)
            .map(|b| BestSetting {
                setting: b.setting.clone(),
                select: b.select.clone(),
                process_peak: b.process_peak,
                saving_bytes: b.saving_bytes,
                saving_fraction: b.saving_fraction,
                validated: crate::policy::validated::label(&b.setting, tune.capture),
                capture: tune.capture,
            });
        let need = best
            .as_ref()
            .map_or(tune.recorded.process_peak, |b| b.process_peak);
        Answers {
            peak_bytes: busiest.map_or(0, |g| g.peak_reserved),
            peak_time_ns: busiest.map_or(0, |g| g.peak_reserved_time_ns),
            peak_frame: busiest.and_then(|g| peak_frame(&g.top_stacks_at_peak)),
            recorded_select: tune.recorded.select.clone(),
            recorded_process_peak: tune.recorded.process_peak,
            best,
            smallest_gpu_gb: GPU_SIZES_GB
                .iter()
                .copied()
                .find(|&gb| need <= gpu_bytes(gb)),
            preallocating: tune
                .ranked
                .iter()
                .filter(|r| r.preallocates)
                .map(|r| r.setting.clone())
                .collect(),
        }
    }
}
