//! The search's replays: every candidate over every stream, with the candidates of one
//! [`ReplayClass`] on a stream (provably the same replay there) replayed once and the outcome
//! given to each of them. A class with PyTorch's garbage collection whose class without it
//! (without its memory fraction too, else) is replayed too waits for that replay, and takes its
//! outcome when it peaked low enough for neither ever to decide a branch ([`crate::policy::pytorch::Effective::without_collection`]).
//! Classes of PyTorch's allocator that differ only in the two size thresholds
//! ([`crate::policy::pytorch::Effective::without_thresholds`]) replay one at a time: the first
//! replayed, each other whose thresholds take every branch that replay took
//! ([`crate::policy::pytorch::Thresholds`]) takes its outcome; the rest wait for the next round.
//! The others do not wait in rounds: each thread takes the next class as it frees up, first
//! one whose group has no replay under way, else a waiting sibling beside it, one of a split
//! size no replay under way has first. On many cores the rounds, each as long as its longest
//! replay, were the search's wall time, and a sibling replayed gives what taking the outcome
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
/// (stream, policy) order; also how many replays it ran. Up to `width` replays run at once
/// (the pool's threads; `1` replays a sibling only when no replayed one admits it).
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
    let run = |c: &Class| -> Replayed {
        let (stream, capacity) = (&streams[c.stream], capacities[c.stream]);
        Ok(match &c.caching {
            Some((cfg, _)) => {
                let (o, t) = run_caching(stream, cfg.clone(), capacity, order);
                (o, Some(t))
            }
            None => (run_with(stream, &specs[c.spec], capacity, order)?, None),
        })
    };
    let waiting: Vec<usize> = (0..all.len())
        .filter(|&i| all[i].uncollected.is_none())
        .collect();
    let (mut outcomes, replays) = replay_waiting(&all, &waiting, width, &run)?;
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
    let replayed = again
        .par_iter()
        .map(|&i| run(&all[i]))
        .collect::<Result<Vec<_>, _>>()?;
    for (&i, (o, _)) in again.iter().zip(replayed) {
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

/// One class's replay: its outcome, and for PyTorch's allocator what its branches say of the
/// size thresholds.
type Replayed = Result<(Outcome, Option<Thresholds>), PolicyError>;

/// Where a class stands in [`replay_waiting`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    Running,
    Done,
}

/// What the threads of [`replay_waiting`] share.
struct Shared {
    state: Vec<State>,
    outcomes: Vec<Option<Outcome>>,
    /// Per group of siblings, its replays under way.
    running: Vec<usize>,
    replays: usize,
    error: Option<PolicyError>,
}

impl Shared {
    /// The next class to replay: the first waiting one whose group has no replay under way;
    /// else the first waiting one whose split size no replay under way in its group has (a
    /// replay can admit a sibling of another split size only when no block it compared lies
    /// between the two, and the split size's other read admits its own value alone: such a
    /// sibling is the least likely to be admitted, so replaying it beside is the least likely
    /// to be wasted); else the first waiting one.
    fn next(&self, all: &[Class], group: &[usize]) -> Option<usize> {
        let waiting = || (0..self.state.len()).filter(|&i| self.state[i] == State::Waiting);
        let split = |i: usize| all[i].caching.as_ref().map(|(cfg, _)| cfg.max_split_size);
        let split_under_way = |i: usize| {
            (0..all.len()).any(|j| {
                self.state[j] == State::Running && group[j] == group[i] && split(j) == split(i)
            })
        };
        let first = waiting().next()?;
        Some(
            waiting()
                .find(|&i| self.running[group[i]] == 0)
                .or_else(|| waiting().find(|&i| !split_under_way(i)))
                .unwrap_or(first),
        )
    }
}

/// Replays the classes of `waiting` (indices into `all`), up to `width` at once, each started
/// as a thread frees up: a waiting sibling that a finished replay admits
/// ([`Thresholds::admit`]) takes its outcome instead. Returns the outcome of every class of
/// `waiting` (`None` for the rest of `all`) and how many replays ran.
fn replay_waiting(
    all: &[Class],
    waiting: &[usize],
    width: usize,
    run: &(dyn Fn(&Class) -> Replayed + Sync),
) -> Result<(Vec<Option<Outcome>>, usize), PolicyError> {
    // Each class's group of siblings, by the first class of it.
    let group: Vec<usize> = (0..all.len())
        .map(|i| (0..i).find(|&j| all[j].sibling(&all[i])).unwrap_or(i))
        .collect();
    let mut state = vec![State::Done; all.len()];
    for &i in waiting {
        state[i] = State::Waiting;
    }
    let shared = std::sync::Mutex::new(Shared {
        state,
        outcomes: vec![None; all.len()],
        running: vec![0; all.len()],
        replays: 0,
        error: None,
    });
    let lock = || shared.lock().unwrap_or_else(|poison| poison.into_inner());
    let work = || {
        loop {
            let i = {
                let mut s = lock();
                let next = s.error.is_none().then(|| s.next(all, &group)).flatten();
                let Some(i) = next else { return };
                s.state[i] = State::Running;
                s.running[group[i]] += 1;
                i
            };
            let result = run(&all[i]);
            let mut s = lock();
            s.running[group[i]] -= 1;
            s.state[i] = State::Done;
            let (o, thresholds) = match result {
                Ok(r) => r,
                Err(e) => {
                    s.error.get_or_insert(e);
                    return;
                }
            };
            s.replays += 1;
            if let Some(t) = thresholds {
                for j in 0..all.len() {
                    if s.state[j] == State::Waiting
                        && group[j] == group[i]
                        && all[j].caching.as_ref().is_some_and(|(cfg, _)| t.admit(cfg))
                    {
                        s.state[j] = State::Done;
                        s.outcomes[j] = Some(o.clone());
                    }
                }
            }
            s.outcomes[i] = Some(o);
        }
    };
    rayon::scope(|scope| {
        for _ in 0..width.clamp(1, waiting.len().max(1)) {
            scope.spawn(|_| work());
        }
    });
    let s = shared
        .into_inner()
        .unwrap_or_else(|poison| poison.into_inner());
    match s.error {
        Some(e) => Err(e),
        None => Ok((s.outcomes, s.replays)),
    }
}
