//! The search: every candidate over every request stream in parallel, then one ranked list of
//! selectable settings measured against the recorded one.
//!
//! Ranking (docs/definitions.md, "tune"): settings that run without running out of memory
//! first, and among them those whose model is validated ([`crate::policy::validated`]) before
//! those whose model is not. A setting ranks above another by its figure only when it is better
//! beyond both models' validated bands: the settings whose band of real figures reaches the best
//! one's, and that are no larger at worst than any setting outside them, are *within the noise*
//! of it and ranked the recorded setting first (no change is advised for a difference the models
//! cannot vouch for), then by cost (synchronizing frees, retries), the smaller real peak at
//! worst, simplicity (fewer options) and driver calls; the rest by process peak.
//! Settings whose replays give the same figures are one row, named by the simplest.

use super::distinct::replay_distinct;
use super::framework::{Framework, Recorded};
use super::grid::{Candidate, GridContext, Role, bounds, candidate, settings};
use super::row::{AddressSpread, Row};
use crate::model::device::process_peak;
use crate::model::{Capture, CaptureLevel, LevelReport, RequestKind, RequestStream};
use crate::policy::greedy_by_size::{PLAN_WORK_MAX, plan_work};
use crate::policy::validated::band;
use crate::policy::{AddressOrder, PolicyError, PolicySpec};
use crate::replay::{Outcome, pool_note};
use serde::Serialize;
use std::collections::HashMap;

/// What the search is given besides the streams.
#[derive(Debug, Clone)]
pub struct TuneOptions {
    /// Per stream: the device memory its allocator may take in the replays.
    pub capacities: Vec<u64>,
    /// The board the user asks about (`--gpu`): a row fits it when it runs without running
    /// out of memory and its process peak is at most this.
    pub gpu_bytes: Option<u64>,
    /// The CUDA context's share of the device, per process (docs/definitions.md).
    pub context_bytes: u64,
    /// How much of the grid to try.
    pub grid: Grid,
}

/// How much of a framework's grid a search tries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Grid {
    /// Every setting, and the bounds (`vramtrace tune`).
    #[default]
    Full,
    /// Every setting, without the bounds (an offline plan of a long trace costs more than all
    /// the settings together) and without the second replay with falling driver addresses
    /// (`address_sensitive` stays unset): neither changes the ranking the answers read.
    Settings,
    /// The recorded setting and each backend at its defaults (no option but the recorded
    /// memory fraction), as [`Grid::Settings`] otherwise: a few replays, what a report affords
    /// on any trace.
    Backends,
}

impl Grid {
    /// Whether the search tries `c`.
    fn keeps(self, c: &Candidate) -> bool {
        match self {
            Grid::Full => true,
            Grid::Settings => c.role == Role::Setting,
            Grid::Backends => {
                c.role == Role::Setting
                    && c.spec.options.iter().all(|(k, _)| k == "memory_fraction")
            }
        }
    }
}

/// A setting the trace cannot judge, and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Unjudged {
    pub setting: String,
    pub why: String,
}

/// Everything `tune` answers.
#[derive(Debug, Clone, Serialize)]
pub struct Tune {
    pub framework: Framework,
    /// How the framework and its configuration were known.
    pub evidence: String,
    pub notes: Vec<String>,
    /// The trace's capture level (docs/definitions.md).
    pub capture_level: CaptureLevel,
    /// How the trace's requests were seen, which picks each model's validated band; `null`
    /// when unknown.
    pub capture: Option<Capture>,
    /// False when the trace cannot rank settings at all (a segment-level trace).
    pub judged: bool,
    pub recorded: Row,
    /// Selectable settings, best first (the recorded one among them, marked).
    pub ranked: Vec<Row>,
    /// What no selectable setting can beat.
    pub bounds: Vec<Row>,
    pub not_judged: Vec<Unjudged>,
    /// Selectable settings replayed (each over every stream), the recorded one among them; the
    /// bounds are not counted.
    pub tried: usize,
    /// How much of the grid they were.
    pub grid: Grid,
    pub gpu_bytes: Option<u64>,
    pub context_bytes: u64,
    /// The most bytes outside the pool any stream held.
    pub outside_bytes: u64,
    /// The memory fraction the program set, and the settings that run to the end under it.
    pub limit: Option<super::pressure::Limit>,
}

impl Tune {
    /// The best selectable setting: the first ranked row.
    pub fn best(&self) -> Option<&Row> {
        self.ranked.first()
    }
}

/// Options sorted by key, so that two spellings of one setting compare equal.
fn canonical(spec: &PolicySpec) -> (String, Vec<(String, String)>) {
    let mut o = spec.options.clone();
    o.sort();
    (spec.name.clone(), o)
}

struct Figures {
    pool: u64,
    process: u64,
    allocs: u64,
    frees: u64,
    sync: u64,
    refusals: u64,
    retries: u64,
    time: f64,
    oom: bool,
}

fn figures(outs: &[&Outcome], streams: &[RequestStream], o: &TuneOptions) -> Figures {
    let process = outs
        .iter()
        .zip(streams)
        .map(|(out, s)| process_peak(out.peak_reserved, s.outside.peak_bytes, o.context_bytes))
        .max()
        .unwrap_or(0);
    Figures {
        pool: outs.iter().map(|x| x.peak_reserved).max().unwrap_or(0),
        process,
        allocs: outs.iter().map(|x| x.device_allocs).sum(),
        frees: outs.iter().map(|x| x.device_frees).sum(),
        sync: outs.iter().map(|x| x.costs.sync_frees).sum(),
        refusals: outs.iter().map(|x| x.costs.refusals).sum(),
        retries: outs.iter().map(|x| x.costs.retries).sum(),
        time: outs.iter().map(|x| x.est_alloc_time_us).sum(),
        oom: outs.iter().any(|x| x.oom.is_some()),
    }
}

/// The row of candidate `c`; `capture` (the trace's) picks its model's validated band.
fn row(
    c: &Candidate,
    f: &Figures,
    base: u64,
    gpu: Option<u64>,
    recorded: bool,
    capture: Option<Capture>,
) -> Row {
    let saving = base as i64 - f.process as i64;
    let validated = band(&c.spec.name, capture);
    Row {
        validated,
        real_range: validated.map(|b| b.real_range(f.process)),
        within_noise: false,
        framework: c.framework,
        setting: c.spec.to_string(),
        select: c.select.clone(),
        role: c.role,
        recorded,
        preallocates: c.preallocates,
        pool_peak_reserved: f.pool,
        process_peak: f.process,
        saving_bytes: saving,
        saving_fraction: if base == 0 {
            0.0
        } else {
            saving as f64 / base as f64
        },
        device_allocs: f.allocs,
        device_frees: f.frees,
        sync_frees: f.sync,
        refusals: f.refusals,
        retries: f.retries,
        est_alloc_time_us: f.time,
        oom: f.oom,
        fits_gpu: gpu.map(|g| !f.oom && f.process <= g),
        equivalent: Vec::new(),
        address_sensitive: None,
    }
}

/// What [`tune`] replays: the recorded setting first, then (when the trace can rank settings
/// at all, `judged`) the rest of `grid`.
pub fn candidates(
    streams: &[RequestStream],
    judged: bool,
    recorded: &Recorded,
    grid: Grid,
) -> Vec<Candidate> {
    let lower_bound = streams.iter().map(|s| s.lower_bound()).max().unwrap_or(0);
    let ctx = GridContext {
        memory_fraction: recorded.memory_fraction,
        lower_bound,
    };
    let mut candidates = vec![candidate(recorded.framework, recorded.spec.clone())];
    if judged {
        let base = canonical(&recorded.spec);
        let planned = greedy_plan_affordable(streams);
        candidates.extend(
            settings(recorded.framework, &ctx)
                .into_iter()
                .chain(bounds())
                .filter(|c| planned || c.spec.name != "greedy-by-size")
                .filter(|c| canonical(&c.spec) != base && grid.keeps(c)),
        );
    }
    candidates
}

/// Whether the offline planner's bound fits a search's time on every stream: its plan is
/// quadratic in the allocations live at once ([`plan_work`]), and on a trace of 50,000 all live
/// it alone took `tune` 22 s of one core (docs/reliability.md, "Bounded on any input").
fn greedy_plan_affordable(streams: &[RequestStream]) -> bool {
    streams.iter().all(|s| plan_work(s) <= PLAN_WORK_MAX)
}

/// The note of a search that left the planner's bound out.
const GREEDY_LEFT_OUT: &str = "the greedy-by-size bound is left out: this trace holds too many \
allocations live at once for its offline plan, which grows with their square (`vramtrace replay \
--policy greedy-by-size` computes it, slowly)";

/// Searches the settings of the recorded framework over `streams`.
pub fn tune(
    streams: &[RequestStream],
    level: &LevelReport,
    recorded: &Recorded,
    options: &TuneOptions,
) -> Result<Tune, PolicyError> {
    let judged = level.level != CaptureLevel::Segment;
    let candidates = candidates(streams, judged, recorded, options.grid);
    let specs: Vec<PolicySpec> = candidates.iter().map(|c| c.spec.clone()).collect();
    let (results, _) = replay_distinct(
        streams,
        &specs,
        &options.capacities,
        AddressOrder::Rising,
        rayon::current_num_threads(),
    )?;
    let mut per: Vec<Vec<&Outcome>> = vec![Vec::new(); candidates.len()];
    for r in &results {
        per[r.policy].push(&r.outcome);
    }
    let figs: Vec<Figures> = per.iter().map(|o| figures(o, streams, options)).collect();
    let base = figs[0].process;
    let gpu = options.gpu_bytes;
    let mut recorded_row = row(&candidates[0], &figs[0], base, gpu, true, level.capture);

    // Merge settings with identical figures into the simplest one.
    let mut rows: Vec<(usize, Row)> = Vec::new();
    let mut by_figures: HashMap<(u64, u64, u64, u64, u64, bool), usize> = HashMap::new();
    for (i, c) in candidates.iter().enumerate() {
        if c.role != Role::Setting {
            continue;
        }
        let f = &figs[i];
        let key = (f.pool, f.allocs, f.frees, f.sync, f.retries, f.oom);
        let r = row(c, f, base, gpu, i == 0, level.capture);
        match by_figures.get(&key) {
            Some(&at) => {
                let simpler = c.spec.options.len() < candidates[rows[at].0].spec.options.len();
                let kept = &mut rows[at].1;
                if simpler && !kept.recorded {
                    let old = std::mem::replace(kept, r);
                    kept.equivalent.push(old.setting);
                    kept.equivalent.extend(old.equivalent);
                    rows[at].0 = i;
                } else {
                    kept.equivalent.push(r.setting);
                }
            }
            None => {
                by_figures.insert(key, rows.len());
                rows.push((i, r));
            }
        }
    }
    // Each distinct setting once more with the driver's addresses falling (the full search
    // only: the flag does not change the ranking).
    let kept: Vec<usize> = rows.iter().map(|(i, _)| *i).collect();
    let spreads = if options.grid == Grid::Full {
        address_spreads(streams, &kept, &specs, &figs, options)?
    } else {
        vec![None; kept.len()]
    };
    for ((i, r), spread) in rows.iter_mut().zip(&spreads) {
        r.address_sensitive = *spread;
        if *i == 0 {
            recorded_row.address_sensitive = *spread;
        }
    }
    // A setting ranks above another by its figure only beyond both validated bands: those whose
    // real range reaches the best one's (the validated setting whose real peak is smallest at
    // worst) are within the noise of it, and cost and simplicity order them.
    let best_high = rows
        .iter()
        .filter(|(_, r)| !r.oom)
        .filter_map(|(_, r)| r.real_range)
        .map(|(_, high)| high)
        .min();
    for (_, r) in &mut rows {
        r.within_noise = !r.oom
            && matches!((r.real_range, best_high), (Some((low, _)), Some(best)) if low <= best);
    }
    let worst = |r: &Row| r.real_range.map_or(u64::MAX, |(_, high)| high);
    // A wide band reaches the best one's, but it does not rank its setting above one that is
    // smaller at worst: a row leaves the noise while a row outside it is surely smaller, until
    // none is.
    loop {
        let outside = rows
            .iter()
            .filter(|(_, r)| !r.oom && !r.within_noise)
            .map(|(_, r)| worst(r))
            .min();
        let mut left = false;
        for (_, r) in &mut rows {
            if r.within_noise && outside.is_some_and(|w| worst(r) > w) {
                r.within_noise = false;
                left = true;
            }
        }
        if !left {
            break;
        }
    }
    let n_options = |i: usize| candidates[i].spec.options.len();
    let mut ranked: Vec<(usize, Row)> = rows;
    ranked.sort_by(|(ia, a), (ib, b)| {
        let by_peak = a.process_peak.cmp(&b.process_peak);
        // Within the noise a wide band does not win on its figure: the smaller real peak at
        // worst goes first.
        let by_cost = a
            .sync_frees
            .cmp(&b.sync_frees)
            .then(a.retries.cmp(&b.retries))
            .then(worst(a).cmp(&worst(b)))
            .then(n_options(*ia).cmp(&n_options(*ib)))
            .then(a.device_allocs.cmp(&b.device_allocs));
        a.oom
            .cmp(&b.oom)
            .then(a.validated.is_none().cmp(&b.validated.is_none()))
            .then(b.within_noise.cmp(&a.within_noise))
            .then(if a.within_noise && b.within_noise {
                // The recorded setting within the noise of the best is as good as any: no
                // change is advised.
                b.recorded.cmp(&a.recorded).then(by_cost).then(by_peak)
            } else {
                by_peak.then(by_cost)
            })
            .then(ia.cmp(ib))
    });
    let bounds_rows = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.role == Role::Bound)
        .map(|(i, c)| row(c, &figs[i], base, gpu, false, level.capture))
        .collect();
    let not_judged = unjudged(streams, level, recorded, &candidates, &figs);
    let mut notes = recorded.notes.clone();
    notes.extend(super::pressure::contradiction(streams, &recorded_row));
    if judged && !greedy_plan_affordable(streams) {
        notes.push(GREEDY_LEFT_OUT.to_string());
    }
    // The note's prediction is the candidate's own replays: replaying it again after the
    // search (the slowest policy of the grid, on one thread) was the search's longest step.
    if let Some(i) = candidates.iter().position(|c| c.spec.name == "cuda-async") {
        let peaks: Vec<u64> = per[i].iter().map(|o| o.peak_reserved).collect();
        notes.extend(pool_note(
            streams,
            &candidates[i].spec,
            &options.capacities,
            &peaks,
        )?);
    }
    let ranked: Vec<Row> = ranked.into_iter().map(|(_, r)| r).collect();
    let limit = super::pressure::limit_of(streams, &ranked);
    Ok(Tune {
        framework: recorded.framework,
        evidence: recorded.evidence.clone(),
        notes,
        capture_level: level.level,
        capture: level.capture,
        judged,
        recorded: recorded_row,
        ranked: if judged { ranked } else { Vec::new() },
        bounds: bounds_rows,
        not_judged,
        tried: candidates
            .iter()
            .filter(|c| c.role == Role::Setting)
            .count(),
        grid: options.grid,
        gpu_bytes: gpu,
        context_bytes: options.context_bytes,
        outside_bytes: streams
            .iter()
            .map(|s| s.outside.peak_bytes)
            .max()
            .unwrap_or(0),
        limit,
    })
}

/// For each candidate of `kept`, its [`AddressSpread`] when a replay with falling driver
/// addresses gives another process peak or OOM than `figs` (the rising replays).
fn address_spreads(
    streams: &[RequestStream],
    kept: &[usize],
    specs: &[PolicySpec],
    figs: &[Figures],
    options: &TuneOptions,
) -> Result<Vec<Option<AddressSpread>>, PolicyError> {
    let again: Vec<PolicySpec> = kept.iter().map(|&i| specs[i].clone()).collect();
    let (results, _) = replay_distinct(
        streams,
        &again,
        &options.capacities,
        AddressOrder::Falling,
        rayon::current_num_threads(),
    )?;
    let mut per: Vec<Vec<&Outcome>> = vec![Vec::new(); kept.len()];
    for r in &results {
        per[r.policy].push(&r.outcome);
    }
    Ok(kept
        .iter()
        .zip(&per)
        .map(|(&i, outs)| {
            let (rising, falling) = (&figs[i], figures(outs, streams, options));
            (rising.process != falling.process || rising.oom != falling.oom).then(|| {
                AddressSpread {
                    low: rising.process.min(falling.process),
                    high: rising.process.max(falling.process),
                    falling_oom: falling.oom,
                }
            })
        })
        .collect())
}

/// The requests of `kind` in all `streams`.
fn requests_of(streams: &[RequestStream], kind: RequestKind) -> usize {
    streams
        .iter()
        .map(|s| s.requests.iter().filter(|r| r.kind == kind).count())
        .sum()
}

/// What the trace holds of the program's graph pools and `empty_cache` calls: both are replayed
/// where they happened under every setting, but no option about them is searched.
fn graphs_and_empty_cache(streams: &[RequestStream]) -> String {
    let empty_cache = requests_of(streams, RequestKind::EmptyCache);
    // A private pool's blocks are served on a stream of their own, marked by the top bit
    // (`model::from_events::stream_of`).
    let pools: usize = streams
        .iter()
        .map(|s| s.cuda_streams.iter().filter(|&&h| h >> 63 == 1).count())
        .sum();
    if empty_cache == 0 && pools == 0 {
        return "the trace records no graph captures and no empty_cache calls".into();
    }
    format!(
        "the trace records {} empty_cache call(s) and {} private pool(s) (graph captures, \
         MemPools): they are replayed where they happened under every setting, but no option \
         about them is searched",
        crate::units::count(empty_cache as u64),
        crate::units::count(pools as u64)
    )
}

fn unjudged(
    streams: &[RequestStream],
    level: &LevelReport,
    recorded: &Recorded,
    candidates: &[Candidate],
    figs: &[Figures],
) -> Vec<Unjudged> {
    let mut out = Vec::new();
    let mut say = |setting: &str, why: String| {
        out.push(Unjudged {
            setting: setting.into(),
            why,
        })
    };
    if level.level == CaptureLevel::Segment {
        say(
            "every setting",
            "this trace holds a caching allocator's segments, not the program's requests: \
             replaying them through another allocator stacks one cache on another. Record \
             with `vramtrace record --requests` to tune"
                .into(),
        );
        return out;
    }
    let failed = requests_of(streams, RequestKind::Attempt);
    if failed > 0 {
        say(
            "the recorded failures",
            format!(
                "the recording had {failed} refused allocation(s); every setting is replayed \
                 with them refused again, so what the program did after a failure is the \
                 recorded run's, not the setting's"
            ),
        );
    }
    if streams.iter().any(|s| s.cuda_streams.len() > 1) {
        say(
            "cross-stream reuse (backend:cudaMallocAsync, record_stream)",
            "the trace has no kernel timing, so every free is taken as complete at once: \
             reuse across CUDA streams may be more than the real run allows"
                .into(),
        );
    }
    match recorded.framework {
        Framework::PyTorch => {
            // GC candidates that changed nothing: the capacity never pressed them.
            let gc_idle = candidates
                .iter()
                .zip(figs)
                .filter(|(c, _)| {
                    c.spec
                        .options
                        .iter()
                        .any(|(k, _)| k == "garbage_collection_threshold")
                })
                .all(|(_, f)| f.retries == 0 && f.sync == 0);
            if gc_idle {
                say(
                    "garbage_collection_threshold",
                    "frees cached blocks only under a memory fraction below 1 (PyTorch 2.11), \
                     when reserved memory nears it; in this run it never did. Replay it with \
                     --policy 'pytorch:garbage_collection_threshold=T,memory_fraction=F' for \
                     the fraction you would set"
                        .into(),
                );
            }
            say(
                "large_segment_size_mb",
                "read by recent PyTorch versions only: replay it with --policy \
                 pytorch:large_segment_size_mb=N, not searched"
                    .into(),
            );
            say(
                "graph_capture_record_stream_reuse, CUDA graph pools, empty_cache",
                graphs_and_empty_cache(streams),
            );
            say(
                "release_lock_on_cudamalloc, pinned_*",
                "do not change device memory".into(),
            );
        }
        Framework::Jax => say(
            "XLA buffer assignment",
            "XLA packs each executable's temporaries itself before the allocator sees them; \
             the figures are for the buffers the trace holds"
                .into(),
        ),
        Framework::Cuda | Framework::TensorFlow => say(
            "release_threshold (CUDA's pool)",
            "the pool gives memory back at synchronizations, which traces do not record: \
             judged only where the pool fails to grow"
                .into(),
        ),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Request;

    fn all_live(n: u32) -> RequestStream {
        RequestStream::from_requests((0..n).map(|slot| Request::alloc(slot, 512, 0)).collect())
    }

    #[test]
    fn the_pool_note_from_the_searchs_replays_is_the_one_a_replay_of_its_own_gives() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../samples/traces/synthetic-mlp.vramtrace"
        );
        let trace = vramtrace_format::Trace::open(
            std::path::Path::new(path),
            vramtrace_format::ReadOptions::default(),
        )
        .unwrap();
        let context = crate::model::device::CUDA_CONTEXT_BYTES;
        let tune = crate::tune::tune_trace(&trace, None, None, context)
            .unwrap()
            .unwrap();
        let (model, recorded) = crate::tune::model_and_recorded(&trace);
        let devices = &trace.tables.devices;
        let capacities = crate::tune::capacities(devices, &model, None, None, context);
        let spec = candidates(&model.streams, true, &recorded, Grid::Full)
            .into_iter()
            .find(|c| c.spec.name == "cuda-async")
            .expect("the grid tries cuda-async")
            .spec;
        let peaks: Vec<u64> = (model.streams.iter().zip(&capacities))
            .map(|(s, &c)| crate::replay::run(s, &spec, c).unwrap().peak_reserved)
            .collect();
        let note = pool_note(&model.streams, &spec, &capacities, &peaks)
            .unwrap()
            .expect("the trace records no synchronizations");
        // Two CUDA streams: the note gives the peak (the range's top, above the peak with
        // opportunistic reuse), so another peak would give another note.
        let top = peaks.iter().max().unwrap().to_string();
        assert!(note.contains(&format!("to {top} bytes")), "{note}");
        assert_eq!(tune.notes.iter().filter(|n| **n == note).count(), 1);
    }

    #[test]
    fn the_planners_bound_is_searched_only_where_its_quadratic_plan_stays_small() {
        // 32,768 allocations all live: 2^30 pairs, the most allowed; one more is too many.
        assert!(greedy_plan_affordable(&[all_live(32_768)]));
        assert!(!greedy_plan_affordable(&[all_live(32_769)]));
        assert!(!greedy_plan_affordable(&[all_live(10), all_live(40_000)]));
    }
}
