//! `tune` for a run at its limit: the memory fraction the program set (formats/SPEC.md §4.3) is
//! a request of its stream, so every setting is replayed under it; this says which settings run
//! the trace to its end there and with how much room, and whether the recorded setting's replay
//! agrees with what the trace's own segment events say the run reserved.

use super::row::Row;
use crate::model::RequestStream;
use serde::Serialize;

/// How far the recorded setting's replay may be from the run's own reserved peak before `tune`
/// says so: the self-check's accuracy on the H200 (docs/validation.md, "Under pressure").
pub const RECORDED_TOLERANCE: f64 = 0.005;

/// The limit the program ran under, and the settings that fit in it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Limit {
    /// The last fraction the program set (of the stream with the smallest cap).
    pub fraction: f64,
    /// `fraction × totalGlobalMem`: the most the allocator may reserve.
    pub cap_bytes: u64,
    /// Selectable settings that serve every request the run served under the cap, best first,
    /// with their headroom (`cap_bytes` − pool peak).
    pub completing: Vec<(String, u64)>,
}

/// The recorded limit of `streams` (`None` when no program set a fraction below 1) and which of
/// `ranked` run to the end under it.
pub fn limit_of(streams: &[RequestStream], ranked: &[Row]) -> Option<Limit> {
    let (fraction, cap_bytes) = streams
        .iter()
        .filter_map(|s| {
            let f = s.memory_fraction().filter(|&f| f < 1.0)?;
            Some((f, (f * s.device_total? as f64) as u64))
        })
        .min_by_key(|&(_, cap)| cap)?;
    let completing = ranked
        .iter()
        .filter(|r| !r.oom && r.pool_peak_reserved <= cap_bytes)
        .map(|r| (r.select.clone(), cap_bytes - r.pool_peak_reserved))
        .collect();
    Some(Limit {
        fraction,
        cap_bytes,
        completing,
    })
}

/// A note when the recorded setting's replayed pool peak is more than [`RECORDED_TOLERANCE`]
/// from what the trace's own `torch.segment_*` events say the run reserved: the figure labelled
/// "recorded" is then the replay's, and the trace's is given beside it.
pub fn contradiction(streams: &[RequestStream], recorded: &Row) -> Option<String> {
    let real = streams
        .iter()
        .filter_map(|s| s.recorded_peak_reserved)
        .max()?;
    let predicted = recorded.pool_peak_reserved;
    let off = (predicted as f64 - real as f64) / real.max(1) as f64;
    (off.abs() > RECORDED_TOLERANCE).then(|| {
        format!(
            "the recorded setting's replay reserves {} B at its peak, where the trace's own \
             segment events say the run reserved {} B ({:+.1}%): the rows compare against the \
             replay, not the run",
            predicted,
            real,
            100.0 * off
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Request, RequestKind};

    fn stream(fraction: f64, total: u64, recorded_peak: Option<u64>) -> RequestStream {
        let mut s = RequestStream::from_requests(vec![Request {
            size: fraction.to_bits(),
            kind: RequestKind::MemoryFraction,
            ..Request::alloc(0, 0, 0)
        }]);
        s.device_total = Some(total);
        s.recorded_peak_reserved = recorded_peak;
        s
    }

    fn row(select: &str, pool: u64, oom: bool) -> Row {
        Row {
            framework: crate::tune::Framework::PyTorch,
            setting: select.into(),
            select: select.into(),
            role: crate::tune::Role::Setting,
            recorded: false,
            preallocates: false,
            pool_peak_reserved: pool,
            process_peak: pool,
            saving_bytes: 0,
            saving_fraction: 0.0,
            device_allocs: 0,
            device_frees: 0,
            sync_frees: 0,
            refusals: 0,
            retries: 0,
            est_alloc_time_us: 0.0,
            oom,
            fits_gpu: None,
            equivalent: Vec::new(),
            address_sensitive: None,
            validated: None,
            real_range: None,
            within_noise: false,
        }
    }

    #[test]
    fn the_settings_that_fit_under_the_programs_cap_are_listed_with_their_headroom() {
        let s = [stream(0.25, 1000, None)];
        let rows = [
            row("a", 200, false),
            row("b", 240, true),
            row("c", 251, false),
        ];
        let l = limit_of(&s, &rows).unwrap();
        assert_eq!((l.fraction, l.cap_bytes), (0.25, 250));
        assert_eq!(l.completing, [("a".to_string(), 50)]);
        assert_eq!(limit_of(&[stream(1.0, 1000, None)], &rows), None);
    }

    #[test]
    fn a_recorded_figure_the_trace_contradicts_is_said_so() {
        let s = [stream(0.25, 1000, Some(1000))];
        assert_eq!(contradiction(&s, &row("r", 1004, false)), None);
        let note = contradiction(&s, &row("r", 1100, false)).unwrap();
        assert!(note.contains("(+10.0%)"), "{note}");
    }
}
