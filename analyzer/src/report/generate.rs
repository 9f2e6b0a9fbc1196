//! The whole report from a decoded trace: the trace pass and the replay model side by side,
//! symbolization of what is shown, the replays, the charts and the page. No file is written
//! here (symbolization reads the traced program's binaries, nothing else is touched).

use super::charts::{REGISTRY, Rendered, render_all};
use super::data::ReportData;
use super::input::{ReportInput, SummaryFrom};
use super::job::JobRank;
use super::page::{self, Mode, PageRun};
use super::page_data::{self, Run};
use super::sections::{self, facts, from_summary, policies};
use super::trace::TracePass;
use crate::model::Model;
use crate::model::device::CUDA_CONTEXT_BYTES;
use crate::model::load;
use crate::model::table::AllocationTable;
use crate::policy::{PolicyError, PolicySpec};
use crate::replay::{CapacitySource, Limits, capacity};
use crate::summary::Summary;
use crate::symbolize::TOP_STACKS;
use crate::symbolize::{ModuleFiles, NoFiles, Symbolizer};
use crate::tune::{Grid, Recorded, Tune, recorded, tune_model};
use crate::units::count;
use vramtrace_format::{Trace, TraceHead};

/// What `vramtrace report` was asked for.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The trace's name as shown on the page.
    pub file: String,
    pub policies: Vec<PolicySpec>,
    /// Replay capacity; `None` for each device's memory, else unlimited.
    pub capacity: Option<u64>,
    /// Whether the caller's files name the frames (shown on the page; `false` with
    /// [`crate::symbolize::NoFiles`]).
    pub symbolize: bool,
    /// Draw each chart of [`REGISTRY`] as SVG too.
    pub svg: bool,
}

/// A finished report of one trace, ready to be put on a page ([`page`]).
#[derive(Debug)]
pub struct Report {
    pub data: ReportData,
    /// What the page's script draws from.
    pub run: Run,
    /// The SVG charts, when asked for.
    pub charts: Vec<Rendered>,
}

/// `index.html` for one report, two compared, or the ranks of one job; with the SVG charts of
/// the first listed.
pub fn page(reports: &[Report], mode: Mode) -> String {
    page::html_page(&runs_of(reports), mode, charts_of(reports), &[])
}

/// `index.html` for a job directory: a row for every rank of `job`, and the reports of those it
/// marks detailed ([`super::job`]), in the same order; with the SVG charts of the first.
pub fn job_page(reports: &[Report], job: &[JobRank]) -> String {
    page::html_page(&runs_of(reports), Mode::Ranks, charts_of(reports), job)
}

fn runs_of(reports: &[Report]) -> Vec<PageRun<'_>> {
    reports
        .iter()
        .map(|r| PageRun {
            data: &r.data,
            run: &r.run,
        })
        .collect()
}

fn charts_of(reports: &[Report]) -> &[Rendered] {
    reports.first().map_or(&[][..], |r| &r.charts[..])
}

/// Why no report could be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// A chart that plotters could not draw: which, and why.
    #[error("{0}")]
    Chart(String),
    /// The trace's events could not be read again for the summary ([`SummaryFrom::Events`]).
    #[error("{0}")]
    Events(String),
}

/// Makes the report of a decoded trace; stacks are named from the traced program's `files`;
/// `progress` hears each stage as it starts, from the thread that runs it: the header's search,
/// which runs beside the rest, says when it starts and when it ends.
pub fn generate(
    trace: Trace,
    o: &Options,
    files: &mut dyn ModuleFiles,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Report, ReportError> {
    progress("reading events");
    let loaded = load(&trace);
    generate_loaded(ReportInput::of(trace, loaded), o, files, progress)
}

/// [`generate`] from what the report reads of a trace, already made: a caller that streamed
/// the file into it never holds the decoded trace, one that built it beside the trace (a
/// snapshot's import) starts the search sooner.
pub fn generate_loaded(
    input: ReportInput,
    o: &Options,
    files: &mut dyn ModuleFiles,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Report, ReportError> {
    let ReportInput {
        head,
        model,
        table,
        limits: process_limits,
        summary_from,
    } = input;
    let head = &head;
    let recorded = recorded(&head.metadata, &head.tables, table.calls);
    progress("ranking the selectable settings");
    // The headline's search needs the model only, so it starts here and runs beside all the
    // rest: the trace pass, the summary, the policies' replays, the OOM stories and the page's
    // data. It runs on a pool of its own: its many replays would otherwise hold every thread
    // of the global pool, and the parallel parts of the rest would wait for them. On many
    // cores the page then waits for the longer of the two, not for their sum.
    let search_pool = rayon::ThreadPoolBuilder::new().build().ok();
    let ((mut data, summary, stories, run), tuned) = std::thread::scope(|scope| {
        let searching = scope.spawn(|| {
            progress("the header's search: started");
            let tuned = match &search_pool {
                Some(pool) => pool.install(|| search(head, &model, &recorded, o.capacity)),
                None => search(head, &model, &recorded, o.capacity),
            };
            progress("the header's search: done");
            tuned
        });
        let limits = Limits {
            given: o.capacity,
            memory_fraction: recorded.memory_fraction,
        };
        // Nothing but the headline's answers reads the search, so the OOM stories and the
        // page's data are made beside it too.
        let rest = trace_side(
            head,
            (&model, &table, summary_from),
            o,
            limits,
            files,
            progress,
        )
        .map(|(mut data, summary, mut symbolizer)| {
            from_summary::groups(&mut data, &summary);
            // The symbolizer holds the program's files for the page; the story names
            // Python lines, and native frames as module+offset.
            progress("telling the OOM stories");
            let mut no_files = NoFiles;
            let names = crate::symbolize::StackNames::new(&head.tables, &mut no_files);
            let stories = crate::oom_story::stories(
                &head.metadata,
                &head.tables.devices,
                &process_limits,
                &model,
                &recorded,
                &names,
            );
            drop(names);
            progress("aggregating the page");
            let run = page_data::run(&o.file, &data, &mut |stack| symbolizer.frames(stack));
            (data, summary, stories, run)
        });
        progress("waiting for the header's search");
        let tuned = join(searching);
        rest.map(|rest| (rest, tuned))
    })?;
    drop(table);

    data.answers = tuned?.map(|(tune, grid)| from_summary::headline(&summary, &tune, grid));
    data.oom_stories = stories?;
    drop(model);
    let charts = if o.svg {
        progress("drawing charts");
        render_all(&data, REGISTRY).map_err(ReportError::Chart)?
    } else {
        Vec::new()
    };
    Ok(Report { data, run, charts })
}

/// Request replays (requests × settings) the report's own search may cost before it tries each
/// backend at its defaults instead of `vramtrace tune`'s whole grid (about 5 s on two cores).
pub const TUNE_WORK: usize = 40_000_000;

/// The report's own data of the trace: the trace pass, the summary that the headline's
/// answers read, the page's sections with each policy's replay of them, and the symbolizer
/// that named their stacks (for the rest of the page).
fn trace_side<'t, 'f>(
    trace: &'t TraceHead,
    (model, table, summary_from): (&Model, &AllocationTable, SummaryFrom),
    o: &Options,
    limits: Limits,
    files: &'f mut dyn ModuleFiles,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<(ReportData, Summary, Symbolizer<'t, 'f>), ReportError> {
    let pass = TracePass::new(&trace.layout, model, table);
    progress(&format!(
        "{} events, {} device allocations",
        count(pass.events),
        count(pass.allocations())
    ));
    let facts = facts::of(&o.file, o.symbolize, trace, &pass, model);
    // As `vramtrace replay` prepares it: the given capacity, else the traced device's memory
    // under the recorded limit, else none.
    let capacity = |_pid: u32, device: i32| match capacity(&trace.tables.devices, device, limits) {
        (_, CapacitySource::Unlimited) => None,
        (c, _) => Some(c),
    };
    // The policies' replays read only the sections' heads, so they start at once, on a thread
    // of their own, beside the building of the sections.
    let heads = &sections::heads(&pass, &capacity);
    // Native frames are named from the program's files, which stay on this thread. A trace
    // without native modules (a snapshot's) has no frame that reads them, so its summary is
    // made on a thread of its own, beside the page's data and the replays.
    std::thread::scope(move |scope| {
        let replaying = scope.spawn(move || {
            if !o.policies.is_empty() {
                progress(&format!(
                    "replaying {}",
                    o.policies
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            policies::replay(heads, model, &o.policies)
        });
        let mut summary_from = Some(summary_from);
        let mut from = || summary_from.take().expect("one summary is made");
        let beside = trace.tables.modules.is_empty().then(|| {
            let from = from();
            scope.spawn(move || {
                let summary = summary(trace, (model, table, from), &mut NoFiles);
                progress("the summary: done");
                summary
            })
        });
        let here = beside
            .is_none()
            .then(|| summary(trace, (model, table, from()), &mut *files));
        let mut symbolizer = Symbolizer::new(&trace.tables, files);
        progress("building the sections");
        let mut data = sections::build(&pass, heads, facts, &mut |stack| symbolizer.stack(stack));
        drop(pass);
        let replayed = join(replaying);
        let summary = here.unwrap_or_else(|| join(beside.expect("made beside when not here")))?;
        policies::fill(&mut data, &o.policies, replayed?, &mut |stack| {
            symbolizer.stack(stack)
        });
        Ok((data, summary, symbolizer))
    })
}

/// The summary that the headline's answers read, from the table's rows or a pass over the
/// events ([`SummaryFrom`]); native frames named from `files`.
fn summary(
    trace: &TraceHead,
    (model, table, from): (&Model, &AllocationTable, SummaryFrom),
    files: &mut dyn ModuleFiles,
) -> Result<Summary, ReportError> {
    let tables = &trace.tables;
    match from {
        SummaryFrom::Rows => Ok(Summary::with_table(tables, table, model, TOP_STACKS, files)),
        SummaryFrom::Events(events) => {
            Summary::streamed(tables, table, model, TOP_STACKS, files, events)
                .map_err(ReportError::Events)
        }
    }
}

/// What a scoped thread returned; its panic goes on on this thread.
fn join<T>(thread: std::thread::ScopedJoinHandle<'_, T>) -> T {
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The library's search ([`tune_model`]) for the headline's answers, as `vramtrace tune`
/// makes it: over all its settings when that is affordable ([`TUNE_WORK`]; the bounds, which
/// the answers do not use, are left out), else each backend at its defaults.
fn search(
    trace: &TraceHead,
    model: &Model,
    recorded: &Recorded,
    capacity: Option<u64>,
) -> Result<Option<(Tune, Grid)>, PolicyError> {
    let requests: usize = model.streams.iter().map(|s| s.requests.len()).sum();
    let lower_bound = model
        .streams
        .iter()
        .map(|s| s.lower_bound())
        .max()
        .unwrap_or(0);
    let full = crate::tune::grid::settings(
        recorded.framework,
        &crate::tune::grid::GridContext {
            memory_fraction: recorded.memory_fraction,
            lower_bound,
        },
    )
    .len();
    let grid = if requests.saturating_mul(full) <= TUNE_WORK {
        Grid::Settings
    } else {
        Grid::Backends
    };
    let tune = tune_model(
        &trace.tables.devices,
        model,
        recorded,
        capacity,
        None,
        CUDA_CONTEXT_BYTES,
        grid,
    )?;
    Ok(tune.map(|t| (t, grid)))
}
