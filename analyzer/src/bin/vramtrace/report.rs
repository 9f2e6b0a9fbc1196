//! `vramtrace report`: writes `DIR/index.html` and, with `--svg`, each chart as its own `.svg`.
//!
//! The input is a `.vramtrace` trace, a PyTorch memory snapshot pickle (imported in memory), or
//! a directory of per-rank traces of one job (one page, a rank selector); `--compare` puts a
//! second trace beside the first.

use crate::args::{PolicyList, policies};
use crate::elf_files::ElfFiles;
use crate::listing::job_files;
use crate::load::{load_trace_or_snapshot, report_input};
use anyhow::{Context, Result};
use rayon::prelude::*;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;
use vramtrace::job::{rank_of, ranks};
use vramtrace::model::live::recorded_device_peak;
use vramtrace::report::generate::{
    Options as ReportOptions, Report, generate_loaded, job_page, page,
};
use vramtrace::report::job::{JobRank, detailed};
use vramtrace::report::page::Mode;
use vramtrace::symbolize::{ModuleFiles, NoFiles};
use vramtrace::units::{bytes, parse_size_arg};
use vramtrace_format::replace::write_replacing;

/// Write one self-contained interactive HTML page: memory over time per allocation and per
/// policy, what is live when and from where, each policy's allocator state, sites, failures
/// (and, with --svg, the charts as SVG files).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  vramtrace report run.vramtrace
  vramtrace report run.vramtrace -o report/ --capacity 80GiB
  vramtrace report run.vramtrace --policy pytorch,pytorch-expandable
  vramtrace report run.vramtrace --policy all    # greedy-by-size's offline plan too
  vramtrace report run.vramtrace --no-symbolize
  vramtrace report snapshot.pickle              # a PyTorch memory snapshot, read directly
  vramtrace report before.vramtrace --compare after.vramtrace
  vramtrace report job-traces/                  # one page, a rank selector
  vramtrace report run.vramtrace --svg          # the charts as .svg files too
  vramtrace report snapshot.pickle --timings    # when each stage starts, in milliseconds")]
pub struct Args {
    /// A .vramtrace trace, a PyTorch memory snapshot pickle, or a directory of per-rank
    /// traces of one job.
    trace: PathBuf,
    /// Directory for index.html (and the .svg files) (created if missing); default
    /// TRACE-NAME-report in the current directory.
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    out: Option<PathBuf>,
    /// Policies to replay and compare: `online` (every policy but the offline planner
    /// greedy-by-size, whose plan alone can take seconds on a large trace), `all`, or
    /// NAME[:KEY=VALUE,...] separated by commas.
    #[arg(long, default_value = "online", value_parser = policies)]
    policy: PolicyList,
    /// Device capacity for the replays, drawn as a line (default: the traced device's
    /// memory, else unlimited).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    capacity: Option<u64>,
    /// Show frames as module+0xoffset without reading the traced program's files.
    #[arg(long)]
    no_symbolize: bool,
    /// A second trace (or snapshot) to put beside the first on the same page.
    #[arg(long, value_name = "TRACE")]
    compare: Option<PathBuf>,
    /// Also write each chart as an .svg file beside the page.
    #[arg(long)]
    svg: bool,
    /// Print each stage on stderr as it starts, with the milliseconds since the command
    /// started, even when stderr is not a terminal: unpickling and importing a snapshot,
    /// reading the events, the header's search (which runs beside the rest: when it starts
    /// and ends), the sections, the replays, the OOM stories, the page and its writing.
    #[arg(long)]
    timings: bool,
}

impl Args {
    pub fn run(self) -> Result<()> {
        write_report(&self)
    }

    /// The library's options for the report of `path`.
    fn options(&self, path: &Path, svg: bool) -> ReportOptions {
        ReportOptions {
            file: path.display().to_string(),
            policies: self.policy.0.clone(),
            capacity: self.capacity,
            symbolize: !self.no_symbolize,
            svg,
        }
    }
}

/// Checks the output directory, makes the report and writes its files.
fn write_report(o: &Args) -> Result<()> {
    // Stage messages on stderr, only when a person is watching it or timings are asked for.
    let tty = std::io::stderr().is_terminal();
    let start = Instant::now();
    let progress = |what: &str| {
        // The time is read with stderr held, so lines from the search's thread and this one
        // come out in the order of their times.
        let mut err = std::io::stderr().lock();
        let at = start.elapsed().as_secs_f64();
        let _ = if o.timings {
            writeln!(err, "vramtrace: [{:8.1} ms] {what}", at * 1e3)
        } else if tty {
            writeln!(err, "vramtrace: [{at:5.1} s] {what}")
        } else {
            Ok(())
        };
    };
    let out = o.out.clone().unwrap_or_else(|| default_dir(&o.trace));
    // Fail on an unusable output directory before the long work, not after it.
    std::fs::create_dir_all(&out)
        .with_context(|| format!("cannot create the output directory {}", out.display()))?;
    let probe = out.join(".vramtrace-write-test");
    write_replacing(&probe, |_| std::io::Result::Ok(()))
        .with_context(|| format!("cannot write in the output directory {}", out.display()))?;
    let _ = std::fs::remove_file(&probe);

    let (inputs, mode) = inputs(o)?;
    let job = if mode == Mode::Ranks {
        progress(&format!("reading {} ranks", inputs.len()));
        job_ranks(&inputs)?
    } else {
        Vec::new()
    };
    let detailed: Vec<&PathBuf> = if mode == Mode::Ranks {
        job.iter()
            .filter(|r| r.row.detailed)
            .map(|r| &inputs[r.input])
            .collect()
    } else {
        inputs.iter().collect()
    };
    let mut reports: Vec<Report> = Vec::with_capacity(detailed.len());
    let mut elf = ElfFiles::new();
    for (k, path) in detailed.into_iter().enumerate() {
        progress(&format!("opening {}", path.display()));
        let input = report_input(path, &progress)?;
        // The SVG charts are of the first trace.
        let options = o.options(path, o.svg && k == 0);
        let files: &mut dyn ModuleFiles = if o.no_symbolize {
            &mut NoFiles
        } else {
            &mut elf
        };
        let report = generate_loaded(input, &options, files, &progress)
            .with_context(|| path.display().to_string())?;
        reports.push(report);
    }
    progress("writing files");
    let html = if mode == Mode::Ranks {
        let rows: Vec<JobRank> = job.into_iter().map(|r| r.row).collect();
        job_page(&reports, &rows)
    } else {
        page(&reports, mode)
    };
    let charts = &reports[0].charts;
    // Each file is written whole or not at all (a full disk leaves no truncated chart), and a
    // link at its name is replaced, never written through.
    let files = charts
        .iter()
        .map(|c| (out.join(&c.file), c.svg.as_bytes()))
        .chain([(out.join("index.html"), html.as_bytes())]);
    for (path, bytes) in files {
        write_replacing(&path, |f| f.write_all(bytes))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let index = out.join("index.html");
    progress("done");
    let peak = reports[0]
        .data
        .sections
        .iter()
        .map(|s| s.lower_bound())
        .max()
        .unwrap_or(0);
    let svgs = if charts.is_empty() {
        String::new()
    } else {
        format!(" and {} SVG charts", charts.len())
    };
    crate::output::print(&format!(
        "wrote {} ({}){svgs} from {} trace{} (peak requested {})\n",
        index.display(),
        bytes(html.len() as u64),
        inputs.len(),
        if inputs.len() == 1 { "" } else { "s" },
        bytes(peak)
    ))
}

/// The traces to read and how they relate: a directory is the ranks of one job (its traces
/// and snapshots in rank order); `--compare` adds a second trace.
fn inputs(o: &Args) -> Result<(Vec<PathBuf>, Mode)> {
    if o.trace.is_dir() {
        if o.compare.is_some() {
            anyhow::bail!("--compare takes two traces, not a directory of ranks");
        }
        let found = job_files(&o.trace, &["vramtrace", "pickle", "pkl"])?;
        return Ok((found, Mode::Ranks));
    }
    Ok(match &o.compare {
        Some(b) => (vec![o.trace.clone(), b.clone()], Mode::Compare),
        None => (vec![o.trace.clone()], Mode::Single),
    })
}

/// One rank of a job directory: its row on the page and which input it is.
struct JobInput {
    row: JobRank,
    input: usize,
}

/// Every rank of the job in `inputs` (listing order) read once, one trace in memory per core,
/// kept as one row each; the ranks [`vramtrace::report::job::detailed`] picks are marked for a
/// full report.
fn job_ranks(inputs: &[PathBuf]) -> Result<Vec<JobInput>> {
    let loaded = inputs
        .par_iter()
        .enumerate()
        .map(|(input, path)| {
            let trace = load_trace_or_snapshot(path, &|_| {})?;
            let facts = (input, trace.event_count(), recorded_device_peak(&trace));
            Ok((path.clone(), facts, rank_of(&trace.metadata)))
        })
        .collect::<Result<Vec<_>>>()?;
    let ranks = ranks(loaded);
    let peaks: Vec<u64> = ranks.iter().map(|r| r.value.2).collect();
    let chosen = detailed(&peaks);
    Ok(ranks
        .into_iter()
        .enumerate()
        .map(|(k, r)| JobInput {
            input: r.value.0,
            row: JobRank {
                rank: r.rank,
                rank_known: r.rank_known,
                file: r.path.display().to_string(),
                events: r.value.1,
                peak: r.value.2,
                detailed: chosen.binary_search(&k).is_ok(),
            },
        })
        .collect())
}

/// `run.vramtrace` → `run-report/` in the current directory.
fn default_dir(trace: &Path) -> PathBuf {
    let stem = trace
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "vramtrace".into());
    PathBuf::from(format!("{stem}-report"))
}
