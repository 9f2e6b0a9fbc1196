//! What the stream-ordered pool's prediction depends on that a trace cannot see: whether GPU
//! progress completed a free before another stream asked for memory (the pool's opportunistic
//! reuse, `analyzer/src/policy/ordered_pool.rs`). `cuda-async` rows carry the range between the
//! two extremes, and say whether the trace recorded the synchronizations the model follows.

use super::parallel::run;
use crate::model::RequestStream;
use crate::policy::cuda_async::ordered;
use crate::policy::{PolicyError, PolicySpec};
use serde::Serialize;

/// The option that switches the model between the two extremes.
const OPPORTUNISTIC: &str = "reuse_allow_opportunistic";

/// The range of a `cuda-async` prediction (docs/definitions.md, "pool range").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PoolRange {
    /// Whether the trace records synchronizations, event records and stream waits
    /// (formats/SPEC.md §4.4); without them the prediction lacks what orders reuse.
    pub synchronizations: bool,
    /// Peak reserved bytes if every free was complete on the GPU at once (another stream
    /// reuses it as soon as it is freed).
    pub earliest_completion: u64,
    /// Peak reserved bytes if no free completed before an ordering the trace records (another
    /// stream reuses it only after one, or when the pool cannot grow).
    pub latest_completion: u64,
}

impl PoolRange {
    /// The two extremes summed over streams.
    pub fn sum(ranges: impl Iterator<Item = PoolRange>) -> Option<PoolRange> {
        ranges.reduce(|a, b| PoolRange {
            synchronizations: a.synchronizations && b.synchronizations,
            earliest_completion: a.earliest_completion + b.earliest_completion,
            latest_completion: a.latest_completion + b.latest_completion,
        })
    }

    /// `(latest - earliest) / latest`: 0 where GPU progress decides nothing.
    pub fn width(&self) -> f64 {
        if self.latest_completion == 0 {
            return 0.0;
        }
        self.latest_completion.abs_diff(self.earliest_completion) as f64
            / self.latest_completion as f64
    }
}

/// The range of `spec`'s prediction `peak` on `stream`, for `cuda-async` without an explicit
/// choice of opportunistic reuse; `None` for other policies.
pub fn pool_range(
    stream: &RequestStream,
    spec: &PolicySpec,
    capacity: u64,
    peak: u64,
) -> Result<Option<PoolRange>, PolicyError> {
    if spec.name != "cuda-async" || spec.options.iter().any(|(k, _)| k == OPPORTUNISTIC) {
        return Ok(None);
    }
    // One stream: no free of another stream to reuse early, the range is the point.
    let earliest = if stream.cuda_streams.len() > 1 {
        let mut other = spec.clone();
        other.options.push((OPPORTUNISTIC.into(), "true".into()));
        run(stream, &other, capacity)?.peak_reserved
    } else {
        peak
    };
    Ok(Some(PoolRange {
        synchronizations: ordered(stream),
        earliest_completion: earliest.min(peak),
        latest_completion: earliest.max(peak),
    }))
}

/// For `tune`'s notes: what the `cuda-async` prediction of `streams` lacks or leaves to GPU
/// progress, in one sentence; `None` when neither applies. `peaks` are the prediction: each
/// stream's peak reserved bytes in the replay of `spec` at its capacity ([`run`]), which the
/// caller has made already (the search has, among its own replays), so none is made again.
pub fn pool_note(
    streams: &[RequestStream],
    spec: &PolicySpec,
    capacities: &[u64],
    peaks: &[u64],
) -> Result<Option<String>, PolicyError> {
    let mut ranges = Vec::new();
    for ((s, c), &peak) in streams.iter().zip(capacities).zip(peaks) {
        ranges.extend(pool_range(s, spec, *c, peak)?);
    }
    let Some(r) = PoolRange::sum(ranges.into_iter()) else {
        return Ok(None);
    };
    let mut note = Vec::new();
    if !r.synchronizations {
        note.push(
            "the trace records no synchronizations (recorded before the recorder logged them): \
             its prediction lacks what orders the pool's reuse"
                .to_string(),
        );
    }
    if r.earliest_completion != r.latest_completion {
        note.push(format!(
            "GPU progress decides when another stream reuses a free: peak reserved {} to {} \
             bytes ({:.1}% wide), ranked by the latter",
            r.earliest_completion,
            r.latest_completion,
            100.0 * r.width()
        ));
    }
    Ok((!note.is_empty()).then(|| format!("{}: {}", spec, note.join("; "))))
}
