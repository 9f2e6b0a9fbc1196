//! The search's replays: every candidate over every stream, with the candidates of one
//! [`ReplayClass`] on a stream (provably the same replay there) replayed once and the outcome
//! given to each of them. A class with PyTorch's garbage collection whose class without it
//! (without its memory fraction too, else) is replayed too waits for that replay, and takes its
//! outcome when it peaked low enough for neither ever to decide a branch ([`crate::policy::pytorch::Effective::without_collection`]).
//! Classes of PyTorch's allocator that differ only in the two size thresholds
//! ([`crate::policy::pytorch::Effective::without_thresholds`]) replay one at a time: the first
//! replayed, each other whose thresholds take every branch that replay took
//! ([`crate::policy::pytorch::Thresholds`]) takes its outcome; the rest wait for the next round.
//! A round with fewer replays than the pool has threads also replays waiting siblings beside
//! the first of their group: on many cores the rounds of one group, each waiting for the one
//! before, were the search's wall time, and a sibling replayed gives what taking the outcome
//! would.

use crate::model::RequestStream;
use crate::policy::equivalence::{ReplayClass, StreamFacts, caching_config, replay_class};
use crate::policy::pytorch::{Config, Effective, Thresholds};
use crate::policy::{AddressOrder, BuildContext, PolicyError, PolicySpec};
use crate::replay::{Outcome, RunResult, run_caching, run_with};
use rayon::prelude::*;

/// One class of candidates on one stream.
struct Class {
    stream: usize,
    /// The candidate replayed for the class.
    spec: usize,
    /// The class without garbage collection (an index into the same list) and the peak up to
    /// which its outcome is this one's.
    uncollected: Option<(usize, u64)>,
    /// PyTorch's allocator: the configuration `spec` builds, and the class with the size
    /// thresholds set aside.
    caching: Option<(Config, Effective)>,
}

impl Class {
    /// Whether `self` and `other` are classes of one stream that differ in the size thresholds
    /// alone.
    fn sibling(&self, other: &Class) -> bool {
        match (&self.caching, &other.caching) {
            (Some((_, a)), Some((_, b))) => self.stream == other.stream && a == b,
            _ => false,
        }
    }
}

/// What [`crate::replay::replay_all_with`] returns for the same arguments, results in
/// (stream, policy) order; also how many replays it ran. Each round replays at least `width`
/// classes while that many wait (the pool's threads; `1` replays a sibling only when no
/// replayed one admits it).
pub fn replay_distinct(
    streams: &[RequestStream],
    specs: &[PolicySpec],
    capacities: &[u64],
    order: AddressOrder,
    width: usize,
) -> Result<(Vec<RunResult>, usize), PolicyError> {
    let mut all: Vec<Class> = Vec::new();
    // Per stream, the class (an index into `all`) of each spec.
    let mut class_of: Vec<Vec<usize>> = Vec::with_capacity(streams.len());
    for (s, stream) in streams.iter().enumerate() {
        let facts = StreamFacts::of(stream);
        let ctx = BuildContext {
            stream,
            capacity: capacities[s],
        };
        let first = all.len();
        let mut seen: Vec<ReplayClass> = Vec::new();
        let mut of = Vec::with_capacity(specs.len());
        for (p, spec) in specs.iter().enumerate() {
            let class = replay_class(spec, &ctx, &facts)?;
            let at = match seen.iter().position(|c| *c == class) {
                Some(at) => at,
                None => {
                    let caching = match &class {
                        ReplayClass::PyTorch(e) => {
                            caching_config(spec, &ctx)?.map(|cfg| (cfg, e.without_thresholds()))
                        }
                        ReplayClass::Spec(_) => None,
                    };
                    seen.push(class);
                    all.push(Class {
                        stream: s,
                        spec: p,
                        uncollected: None,
                        caching,
                    });
                    seen.len() - 1
                }
            };
            of.push(first + at);
        }
        for (at, class) in seen.iter().enumerate() {
            let ReplayClass::PyTorch(e) = class else {
                continue;
            };
            all[first + at].uncollected = e.without_collection().into_iter().find_map(|u| {
                let base = ReplayClass::PyTorch(u.base);
                let b = seen.iter().position(|c| *c == base)?;
                Some((first + b, u.peak_at_most))
            });
        }
        class_of.push(of);
    }
    let run = |c: &Class| -> Result<(Outcome, Option<Thresholds>), PolicyError> {
        let (stream, capacity) = (&streams[c.stream], capacities[c.stream]);
        Ok(match &c.caching {
            Some((cfg, _)) => {
                let (o, t) = run_caching(stream, cfg.clone(), capacity, order);
                (o, Some(t))
            }
            None => (run_with(stream, &specs[c.spec], capacity, order)?, None),
        })
    };
    let replay = |which: &[usize]| {
        which
            .par_iter()
            .map(|&i| run(&all[i]))
            .collect::<Result<Vec<_>, _>>()
    };
    let mut outcomes: Vec<Option<Outcome>> = vec![None; all.len()];
    let mut replays = 0;
    let mut waiting: Vec<usize> = (0..all.len())
        .filter(|&i| all[i].uncollected.is_none())
        .collect();
    while !waiting.is_empty() {
        // The first waiting class of each group of siblings, and every other class.
        let mut first: Vec<usize> = Vec::new();
        for &i in &waiting {
            if !first.iter().any(|&f| all[f].sibling(&all[i])) {
                first.push(i);
            }
        }
        // Then siblings, in order, for the threads the round would leave idle.
        for &i in &waiting {
            if first.len() >= width {
                break;
            }
            if !first.contains(&i) {
                first.push(i);
            }
        }
        for (&f, (o, thresholds)) in first.iter().zip(replay(&first)?) {
            if let Some(t) = thresholds {
                for &i in &waiting {
                    if !first.contains(&i)
                        && all[f].sibling(&all[i])
                        && all[i].caching.as_ref().is_some_and(|(cfg, _)| t.admit(cfg))
                    {
                        outcomes[i] = Some(o.clone());
                    }
                }
            }
            outcomes[f] = Some(o);
        }
        replays += first.len();
        waiting.retain(|&i| outcomes[i].is_none());
    }
    let mut again = Vec::new();
    for (i, c) in all.iter().enumerate() {
        if let Some((base, peak_at_most)) = c.uncollected {
            let low = outcomes[base]
                .as_ref()
                .filter(|o| o.peak_reserved <= peak_at_most)
                .cloned();
            match low {
                Some(o) => outcomes[i] = Some(o),
                None => again.push(i),
            }
        }
    }
    for (&i, (o, _)) in again.iter().zip(replay(&again)?) {
        outcomes[i] = Some(o);
    }
    let results = class_of
        .iter()
        .enumerate()
        .flat_map(|(s, of)| {
            let outcomes = &outcomes;
            of.iter().enumerate().map(move |(p, &c)| RunResult {
                stream: s,
                policy: p,
                outcome: outcomes[c].clone().expect("every class was replayed"),
            })
        })
        .collect();
    Ok((results, replays + again.len()))
}
