//! `vramtrace summary`.

use crate::args::TraceView;
use crate::elf_files::ElfFiles;
use crate::incomplete::Flagged;
use crate::job;
use crate::load::{load_job, load_trace};
use anyhow::Result;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;
use vramtrace::failures::FailureSite;
use vramtrace::limits::{ProcessLimit, ProcessLimits};
use vramtrace::oom_story::{self, OomStory};
use vramtrace::summary::{GroupSummary, Summary};
use vramtrace::symbolize::{
    NO_STACK_WHY, StackBytes, StackNames, TOP_STACKS, short_frame, shown_rows,
};
use vramtrace::tune::loaded;
use vramtrace::units::{bytes, count, duration};

/// Peaks, counts, size classes, the stacks holding memory at the peak, leaks and failed
/// allocations, per process, device, stream and memory kind.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  vramtrace summary run.vramtrace
  vramtrace summary --depth 20 run.vramtrace      # each stack's 20 innermost frames
  vramtrace summary --top 50 run.vramtrace        # the 50 largest stacks at the peak
  vramtrace summary --json run.vramtrace | jq '.groups[0].leaks'

Each stack is named by the user's frame: the innermost one outside the allocator plumbing
(CUDA libraries, libtorch and torch/ internals, ctypes, the interpreter).
  vramtrace summary traces/job-42/        # per rank, and the rank that sets the job's peak

TRACE may be a directory of one job's per-rank traces.")]
pub struct Args {
    #[command(flatten)]
    view: TraceView,
    /// Show each stack's N innermost frames, plumbing included, instead of the user's frame
    /// and its two callers.
    #[arg(long, value_name = "N")]
    depth: Option<usize>,
    /// How many stacks to list at each peak and among the leaks (stacks that name the same
    /// frames are one).
    #[arg(long, value_name = "N", default_value_t = TOP_STACKS)]
    top: usize,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let v = &self.view;
        if v.trace.is_dir() {
            return self.run_job();
        }
        let trace = load_trace(&v.trace, v.salvage)?;
        let (model, table, recorded) = loaded(&trace);
        // Native frames named from the modules' files, as `report` names them.
        let mut files = ElfFiles::new();
        let summary = Summary::with_table(&trace.tables, &table, &model, self.top, &mut files);
        drop(table);
        let names = StackNames::new(&trace.tables, &mut files);
        let limits = vramtrace::limits::limits(trace.events());
        let (metadata, devices) = (&trace.metadata, &trace.tables.devices);
        let stories = oom_story::stories(metadata, devices, &limits, &model, &recorded, &names)?;
        drop(names);
        let first = trace.events().next().map_or(0, |e| e.time_ns);
        let depth = self.depth;
        let out = SummaryOutput {
            summary: &summary,
            limits: limits
                .iter()
                .map(|(&(pid, device), limit)| LimitOutput { pid, device, limit })
                .collect(),
            oom_stories: &stories,
        };
        let flagged = Flagged::new(&out, &[(v.trace.as_path(), &trace.layout)]);
        crate::output::json_or_text(v.json, &flagged, |f| {
            let mut text = render(&v.trace, f.report.summary, first, depth, &limits);
            for s in f.report.oom_stories {
                text.push_str(&oom_story::render(s));
            }
            text
        })
    }
}

/// What `summary --json` prints: the summary, each process's recorded limits (every memory
/// fraction it set) and the story of each recorded out-of-memory error.
#[derive(Serialize)]
struct SummaryOutput<'a> {
    #[serde(flatten)]
    summary: &'a Summary,
    limits: Vec<LimitOutput<'a>>,
    oom_stories: &'a [OomStory],
}

#[derive(Serialize)]
struct LimitOutput<'a> {
    pid: u32,
    device: i32,
    #[serde(flatten)]
    limit: &'a ProcessLimit,
}

/// The largest device peak of a rank's processes.
fn device_peak(s: &Summary, of: fn(&GroupSummary) -> u64) -> Option<u64> {
    s.groups.iter().filter(|g| g.device >= 0).map(of).max()
}

impl Args {
    fn run_job(self) -> Result<()> {
        let v = &self.view;
        let ranks = load_job(&v.trace, v.salvage, |_, trace| Ok(Summary::of(&trace)))?;
        let requested = |s: &Summary| device_peak(s, |g| g.peak_requested);
        let reserved = |s: &Summary| device_peak(s, |g| g.peak_reserved);
        let columns: [job::Column<Summary>; 2] = [
            ("peak requested".into(), &requested),
            ("peak reserved".into(), &reserved),
        ];
        if v.json {
            let figures = job::figures(&ranks, &columns);
            return crate::output::print_json(&job::output(&v.trace, ranks, figures, None));
        }
        crate::output::print(&job::render(
            &v.trace,
            "each rank's largest device peak (`vramtrace summary TRACE` for one rank's detail)",
            &ranks,
            &columns,
        ))
    }
}

/// Frames shown of a failed allocation's stack in text output; `--json` has them all.
const FRAMES_SHOWN: usize = 4;

/// The text summary; `depth`: show each stack's innermost frames instead of its user frame.
pub fn render(
    path: &Path,
    s: &Summary,
    t0: u64,
    depth: Option<usize>,
    limits: &ProcessLimits,
) -> String {
    let mut o = String::new();
    let level = if s.has_allocator_segments {
        format!(
            "{}, with the allocator's own segments",
            s.capture_level_shown
        )
    } else {
        s.capture_level_shown.clone()
    };
    let _ = writeln!(o, "trace    {}", path.display());
    let _ = writeln!(
        o,
        "level    {level}; {} events, {} failed allocations, {} frees of unknown memory",
        count(s.events),
        count(s.failed_allocations),
        count(s.unmatched_frees)
    );
    if s.capture_level == "segment" {
        let _ = writeln!(
            o,
            "note     segment level: a caching allocator hid the program's requests, so \
             requested = reserved here"
        );
    }
    for g in &s.groups {
        group(&mut o, g, t0, depth, limits.get(&(g.pid, g.device)));
    }
    o
}

fn group(
    o: &mut String,
    g: &GroupSummary,
    t0: u64,
    depth: Option<usize>,
    limit: Option<&ProcessLimit>,
) {
    let place = if g.device < 0 {
        "host memory".to_string()
    } else {
        format!("device {}", g.device)
    };
    let _ = writeln!(o, "\nprocess {} · {place}", g.pid);
    let at = |t: u64| duration(t.saturating_sub(t0));
    let _ = writeln!(
        o,
        "  peak requested  {:>12}  at {}",
        bytes(g.peak_requested),
        at(g.peak_requested_time_ns)
    );
    if let Some(pool) = g.pool_peak_requested {
        let _ = writeln!(
            o,
            "  pool peak req.  {:>12}  (the allocator's requests alone: the lower bound replay, fit \
             and tune use; the rest is outside the pool)",
            bytes(pool)
        );
    }
    if !g.outside_by_library.is_empty() {
        let list: Vec<String> = g
            .outside_by_library
            .iter()
            .map(|m| {
                let from = m.site.as_deref().map_or(String::new(), |s| {
                    format!(", the largest at {}", short_frame(s))
                });
                format!(
                    "{} {} ({} allocations{from})",
                    m.library,
                    bytes(m.peak_bytes),
                    count(m.allocations)
                )
            })
            .collect();
        let _ = writeln!(
            o,
            "  outside pool    {}  (most held at once, by the library that called the driver)",
            list.join(", ")
        );
    }
    if let Some(d) = &g.driver_count {
        let context = d
            .context_bytes
            .map_or("no context made while recorded".to_string(), |c| {
                format!("the CUDA context {}", bytes(c))
            });
        let _ = writeln!(
            o,
            "  driver's count  {:>12}  at {}   (the trace names {} of it, {:.1}%: {context} and the \
             memory held then)",
            bytes(d.driver_bytes),
            at(d.time_ns),
            bytes(d.named_bytes),
            d.named_fraction * 100.0
        );
    }
    let _ = writeln!(
        o,
        "  peak reserved   {:>12}  at {}   (the recorded process peak, as the driver saw it; \
         without the CUDA context, which the process peaks of fit and tune add)",
        bytes(g.peak_reserved),
        at(g.peak_reserved_time_ns)
    );
    let _ = writeln!(
        o,
        "  calls           {} allocations, {} frees, {} failed",
        count(g.allocations),
        count(g.frees),
        count(g.failed)
    );
    let _ = writeln!(
        o,
        "  {:<26} {:>12} {:>10} {:>10} {:>7}",
        "memory kind", "peak live", "allocs", "frees", "failed"
    );
    for k in &g.by_kind {
        let name = format!(
            "{:?}{}",
            k.kind,
            if k.allocator_segments {
                " (allocator segments)"
            } else {
                ""
            }
        )
        .to_lowercase();
        let _ = writeln!(
            o,
            "  {name:<26} {:>12} {:>10} {:>10} {:>7}",
            bytes(k.peak_live),
            count(k.allocations),
            count(k.frees),
            count(k.failed)
        );
        for c in &k.size_classes {
            let _ = writeln!(
                o,
                "      {:<22} {:>10} allocations {:>12}",
                c.class,
                count(c.count),
                bytes(c.bytes)
            );
        }
    }
    if g.by_stream.len() > 1 || g.by_stream.first().is_some_and(|s| s.stream != 0) {
        let _ = writeln!(o, "  {:<26} {:>12} {:>10}", "stream", "peak live", "allocs");
        for st in &g.by_stream {
            let _ = writeln!(
                o,
                "  {:<26} {:>12} {:>10}",
                format!("{:#x}", st.stream),
                bytes(st.peak_live),
                count(st.allocations)
            );
        }
    }
    if !g.top_stacks_at_peak.is_empty() {
        let _ = writeln!(o, "  top stacks at the requested peak");
        stacks(o, &g.top_stacks_at_peak, depth);
    }
    if g.leaks.count > 0 {
        let _ = writeln!(
            o,
            "  live at the end: {} in {} allocations",
            bytes(g.leaks.bytes),
            count(g.leaks.count)
        );
        stacks(o, &g.leaks.stacks, depth);
    } else {
        let _ = writeln!(o, "  live at the end: nothing");
    }
    for f in &g.failures {
        failure(o, f, depth, limit);
    }
}

/// One failure site: `FAILED` (an out-of-memory error says so), how often, which sizes, when.
fn failure(o: &mut String, f: &FailureSite, depth: Option<usize>, limit: Option<&ProcessLimit>) {
    let what = if f.out_of_memory {
        "OUT OF MEMORY"
    } else {
        "FAILED"
    };
    let sizes = if f.min_size == f.max_size {
        bytes(f.min_size)
    } else {
        format!("{} to {}", bytes(f.min_size), bytes(f.max_size))
    };
    let (times, when, live) = if f.count == 1 {
        (
            String::new(),
            format!("at {}", duration(f.first_time_ns)),
            "then",
        )
    } else {
        (
            format!("{}× ", count(f.count)),
            format!(
                "{} to {}",
                duration(f.first_time_ns),
                duration(f.last_time_ns)
            ),
            "at the first",
        )
    };
    let _ = writeln!(
        o,
        "  {what}: {times}{} of {sizes} {when}, {}; live {live}: {} requested, {} reserved",
        f.api,
        f.result_name,
        bytes(f.live_requested),
        bytes(f.live_reserved)
    );
    for fr in f.frames.iter().take(FRAMES_SHOWN) {
        let _ = writeln!(o, "      at {}", short_frame(fr));
    }
    if f.out_of_memory
        && let Some(l) = limit
    {
        if let (Some(cap), Some(fraction)) = (l.cap(), l.fraction) {
            let _ = writeln!(
                o,
                "    limit: PyTorch may reserve {} (the program's set_per_process_memory_fraction({fraction}) of {})",
                bytes(cap),
                bytes(l.device_total.unwrap_or(0))
            );
        }
        if l.fraction_changes.len() > 1 {
            let changes: Vec<String> = l
                .fraction_changes
                .iter()
                .map(|c| format!("{} at {}", c.fraction, duration(c.time_ns)))
                .collect();
            let _ = writeln!(
                o,
                "    the program set the fraction {} times: {}",
                l.fraction_changes.len(),
                changes.join(", ")
            );
        }
        if let (Some(free), Some(why)) = (l.free_at_first_oom, l.verdict(f.min_size)) {
            let _ = writeln!(o, "    the device had {} free then: {why}", bytes(free));
        }
    }
    if !f.top_live_stacks.is_empty() {
        let _ = writeln!(o, "    largest live then:");
        stacks(o, &f.top_live_stacks, depth);
    }
}

fn stacks(o: &mut String, list: &[StackBytes], depth: Option<usize>) {
    for row in shown_rows(list, depth) {
        let first = row.frames.first().map_or("<no stack>", String::as_str);
        let _ = writeln!(
            o,
            "    {:>12} {:>8}×  {first}",
            bytes(row.bytes),
            count(row.count)
        );
        for fr in row.frames.iter().skip(1) {
            let _ = writeln!(o, "    {:>12} {:>8}   {fr}", "", "");
        }
        if row.frames.is_empty() {
            let _ = writeln!(o, "    {:>12} {:>8}   ({NO_STACK_WHY})", "", "");
        }
    }
}
