//! `vramtrace tune`: the allocator setting to run with, against the recorded one.

use crate::incomplete::Flagged;
use crate::job;
use crate::load::{load_job, load_trace};
use anyhow::{Result, anyhow};
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Instant;
use vramtrace::job::imbalance_text;
use vramtrace::model::device::CUDA_CONTEXT_BYTES;
use vramtrace::policy::validated::capture_line;
use vramtrace::tune::job::JobTune;
use vramtrace::tune::{Grid, Row, Tune, model_and_recorded, tune_model, tune_trace};
use vramtrace::units::{bytes, count, parse_gpu_size, parse_size_arg};

/// The allocator setting to run with: every selectable setting of the trace's framework
/// replayed, ranked by process peak beyond the error each model showed on real runs, against
/// the configuration the trace was recorded with.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  vramtrace tune run.vramtrace
  vramtrace tune run.vramtrace --gpu 24GB
  vramtrace tune run.vramtrace --capacity 20GiB --json | jq -r '.ranked[0].select'
  vramtrace tune traces/job-42/ --gpu 80GB   # the setting every rank of the job fits with

Sizes need a unit, for every flag alike (a bare number is refused): --gpu 24GB means a board
sold as 24 GB (taken as 24 GiB); --capacity and --context are exact (123B, 512MiB, 20GiB,
21GB). docs/definitions.md defines every figure.")]
pub struct Args {
    /// The .vramtrace file, or a directory of one job's per-rank traces (every rank searched,
    /// each setting judged by its largest rank).
    trace: PathBuf,
    /// The GPU to fit (board size: 16GB, 24GB, 80GB, ...): replays run at its memory less the
    /// CUDA context and the memory outside the pool, and a column says what fits.
    #[arg(long, value_name = "SIZE", value_parser = parse_gpu_size, conflicts_with = "capacity")]
    gpu: Option<u64>,
    /// Exact device memory the allocator may take in the replays (default: the traced device's,
    /// less the CUDA context and the memory outside the pool).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    capacity: Option<u64>,
    /// The CUDA context's share of the device (default: the estimate in docs/definitions.md).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    context: Option<u64>,
    /// Ranked settings shown (all in --json).
    #[arg(long, value_name = "N", default_value_t = 8)]
    top: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl Args {
    pub fn run(self) -> Result<()> {
        if self.trace.is_dir() {
            return self.run_job();
        }
        let path = &self.trace;
        let trace = load_trace(path, false)?;
        let context = self.context.unwrap_or(CUDA_CONTEXT_BYTES);
        let started = Instant::now();
        let (model, recorded) = model_and_recorded(&trace);
        if std::io::stderr().is_terminal() && !self.json {
            eprintln!(
                "vramtrace: replaying {} events under every {} setting...",
                count(trace.event_count()),
                recorded.framework.name()
            );
        }
        let t = tune_model(
            &trace.tables.devices,
            &model,
            &recorded,
            self.capacity,
            self.gpu,
            context,
            Grid::Full,
        )?
        .ok_or_else(|| anyhow!("{}: no device-memory allocation to replay", path.display()))?;
        let took = started.elapsed().as_secs_f64();
        let flagged = Flagged::new(&t, &[(path.as_path(), &trace.layout)]);
        if self.json {
            return crate::output::print_json(&flagged);
        }
        crate::output::print(&render(path, &t, self.top, took))
    }
}

impl Args {
    /// Every rank searched on its own (in parallel, one trace in memory per core), then each
    /// setting judged by its largest rank ([`JobTune`]).
    fn run_job(&self) -> Result<()> {
        let context = self.context.unwrap_or(CUDA_CONTEXT_BYTES);
        let ranks = load_job(&self.trace, false, |path, trace| {
            tune_trace(&trace, self.capacity, self.gpu, context)?
                .ok_or_else(|| anyhow!("{}: no device-memory allocation to replay", path.display()))
        })?;
        let tunes: Vec<(u32, &Tune)> = ranks.iter().map(|r| (r.rank, &r.value)).collect();
        let t = JobTune::of(&tunes);
        let peak_rank = match t.best() {
            Some(best) => {
                let figure = job::Figure {
                    name: format!("process peak under {}", best.setting),
                    spread: Some(best.process_peak.clone()),
                    missing_ranks: Vec::new(),
                };
                job::peak_rank(&figure, &ranks, false)?
            }
            None => None,
        };
        if self.json {
            return crate::output::print_json(&job::output(&self.trace, ranks, t, peak_rank));
        }
        let recorded = |r: &Tune| Some(r.recorded.process_peak);
        let best = t.best().map(|b| b.setting.as_str());
        let under_best = |r: &Tune| {
            r.ranked
                .iter()
                .find(|row| {
                    Some(row.setting.as_str()) == best
                        || row.equivalent.iter().any(|e| Some(e.as_str()) == best)
                })
                .map(|row| row.process_peak)
        };
        let columns: [job::Column<Tune>; 2] = [
            ("recorded".into(), &recorded),
            ("best setting".into(), &under_best),
        ];
        let mut text = job::render(
            &self.trace,
            "each rank's process peak, recorded and under the job's best setting (`vramtrace \
             tune TRACE` for one rank's search)",
            &ranks,
            &columns,
        );
        render_job(&mut text, &t, self.top);
        if let Some(p) = &peak_rank {
            job::render_peak_rank(&mut text, p);
        }
        if let Some(b) = t.best() {
            let _ = writeln!(
                text,
                "\nto apply the best setting on every rank:\n  {}",
                b.select
            );
        }
        crate::output::print(&text)
    }
}

/// The settings of a job, by their largest rank.
fn render_job(s: &mut String, t: &JobTune, top: usize) {
    let _ = writeln!(
        s,
        "\nsettings by their largest rank ({} judged on every rank, {} rows of equal figures{}):\n",
        count(t.ranked.iter().map(|r| 1 + r.equivalent.len() as u64).sum()),
        count(t.ranked.len() as u64),
        match t.not_on_every_rank {
            0 => String::new(),
            n => format!("; {} on some ranks only, left out", count(n as u64)),
        }
    );
    if t.ranked.is_empty() {
        let _ = writeln!(s, "no setting was judged on every rank");
        return;
    }
    let _ = writeln!(
        s,
        "{:>3}  {:>12}  {:>6}  {:>12}  {:>9}  {:>20}  {:>8}  setting",
        "#", "job peak", "rank", "median", "imbalance", "vs recorded", "fits GPU"
    );
    let recorded = t.recorded.as_ref().map_or(0, |r| r.max);
    for (i, r) in t
        .ranked
        .iter()
        .enumerate()
        .filter(|(i, r)| *i < top || r.recorded)
    {
        let p = &r.process_peak;
        let vs = if r.recorded {
            "(recorded)".to_string()
        } else {
            signed(recorded as i64 - p.max as i64)
        };
        let fits = r.fits_gpu.map_or("-", |f| if f { "yes" } else { "no" });
        let mut tags = Vec::new();
        if !r.oom_ranks.is_empty() {
            let ranks: Vec<String> = r.oom_ranks.iter().map(u32::to_string).collect();
            tags.push(format!("runs out of memory on rank {}", ranks.join(", ")));
        }
        if !r.equivalent.is_empty() {
            tags.push(format!(
                "same as {} other(s) on every rank",
                r.equivalent.len()
            ));
        }
        let tags = bracketed(&tags);
        let _ = writeln!(
            s,
            "{:>3}  {:>12}  {:>6}  {:>12}  {:>9}  {vs:>20}  {fits:>8}  {}{tags}",
            i + 1,
            bytes(p.max),
            p.max_rank,
            bytes(p.median),
            imbalance_text(p.imbalance),
            r.select
        );
    }
}

/// A row's tags as the text shows them after it: `  [a; b]`, nothing for none.
fn bracketed(tags: &[String]) -> String {
    if tags.is_empty() {
        String::new()
    } else {
        format!("  [{}]", tags.join("; "))
    }
}

fn signed(n: i64) -> String {
    if n < 0 {
        format!("+{}", bytes(n.unsigned_abs()))
    } else if n == 0 {
        "0".into()
    } else {
        format!("-{}", bytes(n as u64))
    }
}

fn saving(r: &Row) -> String {
    if r.recorded {
        "(recorded)".into()
    } else {
        format!(
            "{} ({:+.1}%)",
            signed(r.saving_bytes),
            -100.0 * r.saving_fraction
        )
    }
}

fn render(path: &Path, t: &Tune, top: usize, took: f64) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "trace      {} ({} level)",
        path.display(),
        t.capture_level.name()
    );
    let _ = writeln!(s, "framework  {} ({})", t.framework.name(), t.evidence);
    let _ = writeln!(s, "capture    {}", capture_line(t.capture));
    let r = &t.recorded;
    let _ = writeln!(
        s,
        "recorded   {}\n           process peak {} = pool {} + outside the pool {} + CUDA context {}",
        r.select,
        bytes(r.process_peak),
        bytes(r.pool_peak_reserved),
        bytes(t.outside_bytes),
        bytes(t.context_bytes),
    );
    for n in &t.notes {
        let _ = writeln!(s, "note       {n}");
    }
    if let Some(l) = &t.limit {
        let _ = writeln!(
            s,
            "limit      the program capped PyTorch at {} (set_per_process_memory_fraction({})): \
             every setting is replayed under it",
            bytes(l.cap_bytes),
            l.fraction
        );
        match l.completing.first() {
            Some((select, headroom)) => {
                let _ = writeln!(
                    s,
                    "           {} of the settings run to the end under it; the best keeps {} \
                     free: {select}",
                    count(l.completing.len() as u64),
                    bytes(*headroom)
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "           no setting runs to the end under it: `vramtrace fit` gives the \
                     smallest limit each needs"
                );
            }
        }
    }
    if !t.judged {
        let _ = writeln!(s, "\nno setting ranked:");
        for u in &t.not_judged {
            let _ = writeln!(s, "  {}: {}", u.setting, u.why);
        }
        return s;
    }
    let _ = writeln!(
        s,
        "tried      {} settings (and {} bounds) in {took:.2} s\n",
        count(t.tried as u64),
        t.bounds.len()
    );
    let fits = t.gpu_bytes.map(|g| format!("fits {}", bytes(g)));
    let _ = writeln!(
        s,
        "{:>3}  {:>12}  {:>20}  {:>26}  {:>10}  {:>7}  {:>12}{}  setting",
        "#",
        "process peak",
        "vs recorded",
        "model error on real runs",
        "sync frees",
        "retries",
        "driver calls",
        fits.as_ref()
            .map_or(String::new(), |f| format!("  {f:>12}"))
    );
    let shown: Vec<(usize, &Row)> = t
        .ranked
        .iter()
        .enumerate()
        .filter(|(i, r)| *i < top || r.recorded)
        .collect();
    for (i, r) in shown {
        let fit = r.fits_gpu.map_or(String::new(), |f| {
            format!("  {:>12}", if f { "yes" } else { "no" })
        });
        let mut tags = Vec::new();
        if r.oom {
            tags.push("runs out of memory".to_string());
        }
        if r.preallocates {
            tags.push("preallocates".into());
        }
        if !r.equivalent.is_empty() {
            tags.push(format!("same as {} other(s)", r.equivalent.len()));
        }
        if r.within_noise {
            tags.push("within the noise".into());
        }
        if let Some(a) = &r.address_sensitive {
            let oom = if a.falling_oom {
                ", or out of memory"
            } else {
                ""
            };
            let (low, high) = (bytes(a.low), bytes(a.high));
            let range = if low == high {
                // Closer than the printed precision: say by how much.
                format!("{low}, up to {} more", bytes(a.high.saturating_sub(a.low)))
            } else {
                format!("{low}-{high}")
            };
            tags.push(format!("address-sensitive: {range}{oom}"));
        }
        let tags = bracketed(&tags);
        let _ = writeln!(
            s,
            "{:>3}  {:>12}  {:>20}  {:>26}  {:>10}  {:>7}  {:>12}{fit}  {}{tags}",
            i + 1,
            bytes(r.process_peak),
            saving(r),
            r.validated.map_or("unvalidated".to_string(), |b| b.label()),
            count(r.sync_frees),
            count(r.retries),
            count(r.device_allocs + r.device_frees),
            r.select,
        );
    }
    let noise = t.ranked.iter().filter(|r| r.within_noise).count();
    if noise > 1 {
        let _ = writeln!(
            s,
            "\n#1 to #{noise} are within the noise: their real peaks, as far as their models' \
             errors on real runs allow, overlap the best one's, so the recorded setting (no \
             change advised), then cost (synchronizing frees, retries), the smaller peak at worst \
             and simplicity rank them; the rest are ranked by process peak. Unvalidated models \
             rank after validated ones."
        );
    }
    let _ = writeln!(s, "\nthe best any allocator could do (not selectable):");
    for b in &t.bounds {
        let _ = writeln!(
            s,
            "     {:>12}  {:>20}  {}",
            bytes(b.process_peak),
            saving(b),
            b.setting
        );
    }
    if !t.not_judged.is_empty() {
        let _ = writeln!(s, "\nnot judged from this trace:");
        for u in &t.not_judged {
            let _ = writeln!(s, "  {}: {}", u.setting, u.why);
        }
    }
    if let Some(best) = t.best() {
        if best.recorded {
            let _ = writeln!(
                s,
                "\nthe recorded setting is already the best of those tried"
            );
        } else {
            let how = best.validated.map_or(
                "its model is unvalidated: no real run of this capture checked it".to_string(),
                |b| {
                    format!(
                        "its model's error on real runs of {} captures: {}",
                        b.capture.name(),
                        b.label()
                    )
                },
            );
            let _ = writeln!(s, "\nto apply the best setting ({how}):\n  {}", best.select);
        }
    }
    s
}
