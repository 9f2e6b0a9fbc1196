//! Each section's policies: the replay of its request stream through every asked policy
//! ([`crate::report::from_replay`]), sampled into the report's buckets and the section's focus,
//! with the requests whose states the page shows one by one, and the stack of each replay's
//! out-of-memory request named.

use crate::model::Model;
use crate::policy::{PolicyError, PolicySpec};
use crate::report::data::ReportData;
use crate::report::from_replay;

/// Fills each section's windows and policy results from the replay of its request stream;
/// `stack` names a trace stack's frames, outermost first.
pub fn replay(
    data: &mut ReportData,
    model: &Model,
    specs: &[PolicySpec],
    stack: &mut dyn FnMut(u32) -> Vec<String>,
) -> Result<(), PolicyError> {
    data.policy_names = specs.iter().map(ToString::to_string).collect();
    let Some(buckets) = data.buckets else {
        return Ok(());
    };
    for section in &mut data.sections {
        let Some(stream) = model.streams.iter().find(|s| {
            s.key
                .is_some_and(|k| k.pid == section.pid && k.device == section.device)
        }) else {
            continue;
        };
        let capacity = section.capacity.unwrap_or(u64::MAX);
        // However many policies, the page's logs stay within STATE_CHANGES in all.
        let events = from_replay::WINDOW_EVENTS
            .min(from_replay::STATE_CHANGES / specs.len().max(1))
            .max(1);
        section.windows = from_replay::windows(stream, section.focus, section.peak.time_ns, events);
        section.policies = from_replay::replay_policies(
            stream,
            specs,
            capacity,
            (buckets, section.focus),
            &section.windows,
        )?;
        for p in &mut section.policies {
            if let Some(oom) = &mut p.oom {
                oom.stack = stack(oom.stack_id);
            }
        }
    }
    Ok(())
}
