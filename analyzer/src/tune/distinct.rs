//! The search's replays: every candidate over every stream, with the candidates of one
//! [`ReplayClass`] on a stream (provably the same replay there) replayed once and the outcome
//! given to each of them.

use crate::model::RequestStream;
use crate::policy::equivalence::{ReplayClass, replay_class, request_sizes};
use crate::policy::{AddressOrder, BuildContext, PolicyError, PolicySpec};
use crate::replay::{RunResult, run_with};
use rayon::prelude::*;

/// What [`crate::replay::replay_all_with`] returns for the same arguments, results in
/// (stream, policy) order; also how many replays it ran.
pub fn replay_distinct(
    streams: &[RequestStream],
    specs: &[PolicySpec],
    capacities: &[u64],
    order: AddressOrder,
) -> Result<(Vec<RunResult>, usize), PolicyError> {
    // Per stream, the job (index into `jobs`) whose outcome each spec takes.
    let mut jobs: Vec<(usize, usize)> = Vec::new();
    let mut job_of: Vec<Vec<usize>> = Vec::with_capacity(streams.len());
    for (s, stream) in streams.iter().enumerate() {
        let sizes = request_sizes(stream);
        let ctx = BuildContext {
            stream,
            capacity: capacities[s],
        };
        let mut classes: Vec<(ReplayClass, usize)> = Vec::new();
        let mut of = Vec::with_capacity(specs.len());
        for (p, spec) in specs.iter().enumerate() {
            let class = replay_class(spec, &ctx, &sizes)?;
            let job = match classes.iter().find(|(c, _)| *c == class) {
                Some(&(_, job)) => job,
                None => {
                    jobs.push((s, p));
                    classes.push((class, jobs.len() - 1));
                    jobs.len() - 1
                }
            };
            of.push(job);
        }
        job_of.push(of);
    }
    let outcomes = jobs
        .par_iter()
        .map(|&(s, p)| run_with(&streams[s], &specs[p], capacities[s], order))
        .collect::<Result<Vec<_>, _>>()?;
    let results = job_of
        .iter()
        .enumerate()
        .flat_map(|(s, of)| {
            let outcomes = &outcomes;
            of.iter().enumerate().map(move |(p, &job)| RunResult {
                stream: s,
                policy: p,
                outcome: outcomes[job].clone(),
            })
        })
        .collect();
    Ok((results, jobs.len()))
}
