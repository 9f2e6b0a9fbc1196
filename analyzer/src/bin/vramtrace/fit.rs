//! `vramtrace fit`: per policy, the smallest device with no OOM, by bisection in parallel, and
//! which common GPUs that is.

use crate::args::{PolicyList, policies};
use crate::incomplete::Flagged;
use crate::job;
use crate::load::{load_job, load_streams_and_layout, streams_of};
use anyhow::Result;
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use vramtrace::model::device::{CUDA_CONTEXT_BYTES, GPU_SIZES_GB};
use vramtrace::policy::PolicyRole;
use vramtrace::policy::validated::capture_line;
use vramtrace::replay::{FitReport, FitRow};
use vramtrace::units::{bytes, count, parse_size_arg};

/// The smallest device each policy runs the trace on without running out of memory: the
/// allocator's pool, the memory outside it and the CUDA context, and which common GPUs hold it.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  vramtrace fit run.vramtrace
  vramtrace fit run.vramtrace --policy pytorch,pytorch-expandable,lower-bound --json
  vramtrace fit traces/job-42/ --policy pytorch   # the device every rank of the job fits on
  vramtrace fit run.vramtrace --policy 'expandable_segments:True' --context 500MiB

A GPU of N GB is taken as N GiB (docs/definitions.md).")]
pub struct Args {
    /// The .vramtrace file, or a directory of one job's per-rank traces.
    trace: PathBuf,
    /// Policies: `online` (every policy but the offline planner greedy-by-size, whose plan grows with the pairs of overlapping lifetimes: 80,000 allocations live at once take it a minute), `all`, NAME[:KEY=VALUE,...] separated by commas, or a
    /// PYTORCH_CUDA_ALLOC_CONF.
    #[arg(long, default_value = "online", value_parser = policies)]
    policy: PolicyList,
    /// The CUDA context's share of the device (default: the estimate in docs/definitions.md).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    context: Option<u64>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let specs = &self.policy.0;
        if self.trace.is_dir() {
            return self.run_job(specs);
        }
        let (input, layout) = load_streams_and_layout(&self.trace, None)?;
        let context = self.context.unwrap_or(CUDA_CONTEXT_BYTES);
        let terminal = std::io::stderr().is_terminal();
        if terminal {
            let requests: usize = input.model.streams.iter().map(|s| s.requests.len()).sum();
            eprintln!(
                "vramtrace: bisecting the capacity of {} policies over {} requests...",
                specs.len(),
                count(requests as u64)
            );
        }
        let progress = |done: usize, all: usize| {
            if terminal {
                eprint!("\rvramtrace: {done}/{all} fits found");
                if done == all {
                    eprintln!();
                }
            }
        };
        let report = FitReport::build(
            &self.trace.display().to_string(),
            specs,
            &input,
            context,
            &progress,
        )?;
        if let Some(w) = &report.warning
            && !self.json
        {
            eprintln!("vramtrace: warning: {w}");
        }
        let flagged = Flagged::new(&report, &[(&self.trace, &layout)]);
        crate::output::json_or_text(self.json, &flagged, |f| render(f.report))
    }
}

impl Args {
    /// Every rank bisected on its own (`fit`'s own work); the job needs the largest.
    fn run_job(&self, specs: &[vramtrace::policy::PolicySpec]) -> Result<()> {
        let ranks = load_job(&self.trace, false, |path, trace| {
            let input = streams_of(path, &trace, None)?;
            let context = self.context.unwrap_or(CUDA_CONTEXT_BYTES);
            FitReport::build(
                &path.display().to_string(),
                specs,
                &input,
                context,
                &|_, _| {},
            )
            .map_err(anyhow::Error::from)
        })?;
        type Need = Box<dyn Fn(&FitReport) -> Option<u64>>;
        let need: Vec<(String, Need)> = (0..specs.len())
            .map(|p| {
                let pool: Need = Box::new(move |r| r.policies[p].min_capacity_bytes);
                (format!("{} min pool", specs[p]), pool)
            })
            .chain((0..specs.len()).map(|p| {
                let gpu: Need = Box::new(move |r| r.policies[p].min_gpu_bytes);
                (format!("{} min GPU", specs[p]), gpu)
            }))
            .collect();
        let columns: Vec<job::Column<FitReport>> = need
            .iter()
            .map(|(name, f)| (name.clone(), f.as_ref()))
            .collect();
        let figures = job::figures(&ranks, &columns);
        // The first policy's GPU: the device the job asks for.
        let peak_rank = job::peak_rank(&figures[specs.len()], &ranks, false)?;
        if self.json {
            return crate::output::print_json(&job::output(&self.trace, ranks, figures, peak_rank));
        }
        let mut text = job::render(
            &self.trace,
            "the smallest pool and device each rank fits on, per policy (the job needs the \
             largest: the device that fits every rank; - when none fits)",
            &ranks,
            &columns,
        );
        if let Some(p) = &peak_rank {
            job::render_peak_rank(&mut text, p);
        }
        crate::output::print(&text)
    }
}

fn note(p: &FitRow) -> String {
    let mut notes = Vec::new();
    match p.role {
        PolicyRole::Bound => notes.push("bound, not selectable".to_string()),
        PolicyRole::Model => notes.push("research model".to_string()),
        PolicyRole::Setting => {}
    }
    if p.preallocates {
        notes.push("preallocates a share of the device".into());
    }
    if let Some(f) = p.memory_fraction {
        notes.push(format!("as a cap: set_per_process_memory_fraction({f})"));
    }
    if p.below_uncapped
        && !p.preallocates
        && let Some(c) = &p.at_min
    {
        notes.push(format!(
            "fits below its uncapped peak of {}; at the fit: {} retries, {} synchronizing frees, {} driver calls",
            bytes(p.uncapped_peak_reserved),
            count(c.retries),
            count(c.sync_frees),
            count(c.device_allocs + c.device_frees)
        ));
    }
    notes.join("; ")
}

fn render(r: &FitReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "trace        {}", r.trace);
    let _ = writeln!(s, "capture      {}", capture_line(r.capture));
    let _ = writeln!(
        s,
        "lower bound  {} (no allocator fits in less)",
        bytes(r.lower_bound_bytes)
    );
    let outside = r
        .streams
        .iter()
        .map(|st| st.outside_allocator.peak_bytes)
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        s,
        "min GPU      = min pool + outside the pool ({}) + CUDA context ({}, --context)\n",
        bytes(outside),
        bytes(r.context_bytes)
    );
    let width = r
        .policies
        .iter()
        .map(|p| p.name.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let gpus: String = GPU_SIZES_GB.iter().map(|g| format!(" {g:>4}")).collect();
    let _ = writeln!(
        s,
        "{:<width$}  {:>12}  {:>12}  {:>26} {gpus}  (GB: fits?)",
        "policy", "min pool", "min GPU", "model error on real runs"
    );
    for p in &r.policies {
        let (Some(c), Some(g)) = (p.min_capacity_bytes, p.min_gpu_bytes) else {
            let _ = writeln!(
                s,
                "{:<width$}  never fits: a request no device can serve",
                p.name
            );
            continue;
        };
        let fits: String = p
            .gpus
            .iter()
            .map(|f| format!(" {:>4}", if f.fits { "yes" } else { "-" }))
            .collect();
        let note = note(p);
        let _ = writeln!(
            s,
            "{:<width$}  {:>12}  {:>12}  {:>26} {fits}{}",
            p.name,
            bytes(c),
            bytes(g),
            p.validated.map_or("unvalidated".to_string(), |b| b.label()),
            if note.is_empty() {
                String::new()
            } else {
                format!("  {note}")
            }
        );
    }
    s
}
