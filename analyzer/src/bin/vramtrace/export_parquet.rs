//! `vramtrace export --to parquet`: many traces into one directory of Parquet tables, in
//! parallel (one trace per core at a time), each trace's events streamed chunk by chunk.
//!
//! Every file is written beside its final name and renamed when complete, so a reader of the
//! directory (or an export that fails half way) never sees a partial file.

use crate::load::trace_files;
use anyhow::{Context, Result, bail};
use rayon::prelude::*;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::Instant;
use vramtrace::interop::parquet::{self, PolicyResult, Sinks, TraceRow, schema};
use vramtrace::policy::PolicySpec;
use vramtrace::replay::{FitReport, ReplayReport};
use vramtrace::units::{bytes, count};
use vramtrace_format::MappedFile;

pub fn run(
    inputs: &[PathBuf],
    dir: &Path,
    salvage: bool,
    specs: &[PolicySpec],
    fit: bool,
) -> Result<()> {
    if fit && specs.is_empty() {
        bail!("--fit needs policies to bisect (--policy none was given)");
    }
    let mut paths = Vec::new();
    for input in inputs {
        if input.is_dir() {
            paths.extend(trace_files(input)?);
        } else {
            paths.push(input.clone());
        }
    }
    for p in &paths {
        std::fs::File::open(p).with_context(|| p.display().to_string())?;
    }
    let existed = dir.exists();
    for table in schema::all() {
        let sub = dir.join(table.name);
        std::fs::create_dir_all(&sub).with_context(|| format!("creating {}", sub.display()))?;
    }
    let started = Instant::now();
    let rows: Vec<TraceRow> = match paths
        .par_iter()
        .map(|p| export_one(p, dir, salvage, specs, fit))
        .collect::<Result<_>>()
    {
        Ok(rows) => rows,
        Err(e) => {
            // Leave no trace of a failed export: only directories it made and left empty go
            // (`remove_dir` refuses any that holds a file, such as an earlier export's tables).
            for table in schema::all() {
                let _ = std::fs::remove_dir(dir.join(table.name));
            }
            if !existed {
                let _ = std::fs::remove_dir(dir);
            }
            return Err(e);
        }
    };
    let events: u64 = rows.iter().map(|r| r.events).sum();
    let input_bytes: u64 = rows.iter().map(|r| r.file_bytes).sum();
    let output_bytes = dir_bytes(dir);
    let seconds = started.elapsed().as_secs_f64();
    let damaged = rows.iter().filter(|r| !r.complete).count();
    let note = if damaged > 0 {
        format!(" ({damaged} incomplete: see traces.damage)")
    } else {
        String::new()
    };
    crate::output::print(&format!(
        "wrote {}: {} traces{note}, {} events, {} policy results ({} of traces -> {} of tables \
         in the directory, {:.1} M events/s)\n",
        dir.display(),
        rows.len(),
        count(events),
        count((rows.len() * specs.len()) as u64),
        bytes(input_bytes),
        bytes(output_bytes),
        events as f64 / seconds.max(1e-9) / 1e6,
    ))
}

/// A file of one table, created under a temporary name and renamed by [`Pending::commit`].
struct Pending {
    tmp: PathBuf,
    path: PathBuf,
}

impl Pending {
    fn create(dir: &Path, table: &str, id: &str) -> Result<(Pending, BufWriter<File>)> {
        let path = dir.join(table).join(format!("{id}.parquet"));
        let tmp = dir.join(table).join(format!(".{id}.parquet.partial"));
        let file = File::create(&tmp).with_context(|| tmp.display().to_string())?;
        Ok((
            Pending { tmp, path },
            BufWriter::with_capacity(1 << 20, file),
        ))
    }

    fn commit(self) -> Result<()> {
        std::fs::rename(&self.tmp, &self.path).with_context(|| self.path.display().to_string())
    }
}

fn export_one(
    path: &Path,
    dir: &Path,
    salvage: bool,
    specs: &[PolicySpec],
    fit: bool,
) -> Result<TraceRow> {
    let name = path.display().to_string();
    let file = MappedFile::open(path).with_context(|| name.clone())?;
    crate::budget::check(path, file.bytes(), salvage)?;
    let id = parquet::trace_id(file.bytes());
    let mut pending = Vec::new();
    let mut sink = |table: &str| -> Result<BufWriter<File>> {
        let (p, w) = Pending::create(dir, table, &id)?;
        pending.push(p);
        Ok(w)
    };
    let sinks = Sinks {
        events: sink("events")?,
        stacks: sink("stacks")?,
        frames: sink("frames")?,
        modules: sink("modules")?,
    };
    let traces = sink("traces")?;
    let results = sink("policy_results")?;
    let written = (|| -> Result<TraceRow> {
        let row = parquet::export_trace(file.bytes(), &name, salvage, sinks)
            .with_context(|| name.clone())?;
        let policy_rows = if specs.is_empty() || row.events == 0 {
            Vec::new()
        } else {
            policy_results(path, specs, fit).with_context(|| name.clone())?
        };
        parquet::write_policy_results(results, &row.trace_id, &policy_rows)?;
        parquet::write_traces(traces, std::slice::from_ref(&row))?;
        Ok(row)
    })();
    match written {
        Ok(row) => {
            for p in pending {
                p.commit()?;
            }
            Ok(row)
        }
        Err(e) => {
            for p in pending {
                let _ = std::fs::remove_file(&p.tmp);
            }
            Err(e)
        }
    }
}

/// The `replay --json` figures of every policy (summed over the trace's request streams), and
/// with `fit` the `fit --json` capacity; none for a trace without device allocations.
fn policy_results(path: &Path, specs: &[PolicySpec], fit: bool) -> Result<Vec<PolicyResult>> {
    let Some(input) = crate::load::replay_input(path, None)? else {
        return Ok(Vec::new());
    };
    let name = path.display().to_string();
    let report = ReplayReport::build(&name, specs, &input)?;
    let fits = if fit {
        Some(FitReport::build(
            &name,
            specs,
            &input,
            vramtrace::model::device::CUDA_CONTEXT_BYTES,
            &|_, _| {},
        )?)
    } else {
        None
    };
    let capacity = input.capacities.iter().map(|c| c.0).max();
    Ok(report
        .policies
        .iter()
        .enumerate()
        .map(|(i, p)| PolicyResult {
            policy: p.name.clone(),
            policy_name: specs[i].name.clone(),
            capacity_bytes: capacity.filter(|&c| c != u64::MAX),
            lower_bound_bytes: report.lower_bound_bytes,
            peak_requested: p.peak_requested,
            peak_allocated: p.peak_allocated,
            peak_reserved: p.peak_reserved,
            fragmentation_at_peak: p.fragmentation_at_peak,
            ratio_to_lower_bound: p.ratio_to_lower_bound,
            device_allocs: p.device_allocs,
            device_frees: p.device_frees,
            est_alloc_time_us: p.est_alloc_time_us,
            oom_ts: p.oom.as_ref().map(|o| o.time_ns),
            fit_bytes: fits.as_ref().and_then(|f| f.policies[i].min_capacity_bytes),
        })
        .collect())
}

fn dir_bytes(dir: &Path) -> u64 {
    schema::all()
        .iter()
        .flat_map(|t| {
            std::fs::read_dir(dir.join(t.name))
                .into_iter()
                .flatten()
                .flatten()
        })
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}
