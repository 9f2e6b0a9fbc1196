//! Each section's policies: the replay of its request stream through every asked policy
//! ([`crate::report::from_replay`]), sampled into the report's buckets and the section's focus,
//! with the requests whose states the page shows one by one, and the stack of each replay's
//! out-of-memory request named. The replays read only the sections' heads
//! ([`super::Head`]), so they run beside the building of the rest ([`super::build`]).

use super::Heads;
use crate::model::Model;
use crate::policy::{PolicyError, PolicySpec};
use crate::report::data::{EventWindow, PolicyResult, ReportData};
use crate::report::from_replay;

/// The replays of one section: the requests whose states the page shows one by one, and each
/// policy's result, in the order asked.
#[derive(Debug)]
pub struct Replayed {
    windows: Vec<EventWindow>,
    policies: Vec<PolicyResult>,
}

/// Replays the request stream of each section of `heads` through every policy of `specs`:
/// per section, in order, `None` for one without a stream in `model` (or a trace without
/// events).
pub fn replay(
    heads: &Heads,
    model: &Model,
    specs: &[PolicySpec],
) -> Result<Vec<Option<Replayed>>, PolicyError> {
    let Some(buckets) = heads.buckets else {
        return Ok(Vec::new());
    };
    heads
        .sections
        .iter()
        .map(|head| {
            let Some(stream) = model.streams.iter().find(|s| {
                s.key
                    .is_some_and(|k| k.pid == head.pid && k.device == head.device)
            }) else {
                return Ok(None);
            };
            let capacity = head.capacity.unwrap_or(u64::MAX);
            // However many policies, the page's logs stay within STATE_CHANGES in all.
            let events = from_replay::WINDOW_EVENTS
                .min(from_replay::STATE_CHANGES / specs.len().max(1))
                .max(1);
            let windows = from_replay::windows(stream, head.focus, head.peak.time_ns, events);
            let policies = from_replay::replay_policies(
                stream,
                specs,
                capacity,
                (buckets, head.focus),
                &windows,
            )?;
            Ok(Some(Replayed { windows, policies }))
        })
        .collect()
}

/// Puts each section's replays (`replayed`, of the heads `data`'s sections were built from)
/// into `data`, the names of `specs` with them; `stack` names the stack of each replay's
/// out-of-memory request, its frames outermost first.
pub fn fill(
    data: &mut ReportData,
    specs: &[PolicySpec],
    replayed: Vec<Option<Replayed>>,
    stack: &mut dyn FnMut(u32) -> Vec<String>,
) {
    data.policy_names = specs.iter().map(ToString::to_string).collect();
    for (section, replayed) in data.sections.iter_mut().zip(replayed) {
        let Some(Replayed { windows, policies }) = replayed else {
            continue;
        };
        section.windows = windows;
        section.policies = policies;
        for p in &mut section.policies {
            if let Some(oom) = &mut p.oom {
                oom.stack = stack(oom.stack_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::parse_specs;
    use crate::report::data::TraceFacts;
    use crate::report::trace::TracePass;
    use vramtrace_format::{ReadOptions, Trace};

    #[test]
    fn the_replays_from_the_heads_are_those_of_the_built_sections() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../samples/traces/torch-mlp-requests.vramtrace"
        );
        let trace = Trace::open(std::path::Path::new(path), ReadOptions::default()).unwrap();
        let (model, table) = crate::model::load(&trace);
        let pass = TracePass::new(&trace.layout, &model, &table);
        let specs = parse_specs("pytorch,cuda-malloc,best-fit").unwrap();
        let capacity = |_: u32, _: i32| Some(8u64 << 30);
        let heads = super::super::heads(&pass, &capacity);
        let replayed = replay(&heads, &model, &specs).unwrap();
        let mut data =
            super::super::build(&pass, &heads, TraceFacts::default(), &mut |_| Vec::new());
        fill(&mut data, &specs, replayed, &mut |id| {
            vec![format!("stack {id}")]
        });
        assert!(!data.sections.is_empty());
        let buckets = data.buckets.expect("a trace with events has buckets");
        for section in &data.sections {
            let stream = model
                .streams
                .iter()
                .find(|s| {
                    s.key
                        .is_some_and(|k| (k.pid, k.device) == (section.pid, section.device))
                })
                .unwrap();
            let events = from_replay::WINDOW_EVENTS.min(from_replay::STATE_CHANGES / specs.len());
            let windows = from_replay::windows(stream, section.focus, section.peak.time_ns, events);
            let capacity = section.capacity.unwrap();
            let results = from_replay::replay_policies(
                stream,
                &specs,
                capacity,
                (buckets, section.focus),
                &windows,
            )
            .unwrap();
            assert_eq!(section.windows, windows);
            assert_eq!(format!("{:?}", section.policies), format!("{results:?}"));
            assert_eq!(section.policies.len(), specs.len());
        }
        assert_eq!(data.policy_names, ["pytorch", "cuda-malloc", "best-fit"]);
    }
}
