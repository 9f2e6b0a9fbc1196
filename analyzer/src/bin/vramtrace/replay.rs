//! `vramtrace replay`: every request stream of a trace through every chosen policy.

use crate::args::{PolicyList, policies};
use crate::elf_files::ElfFiles;
use crate::incomplete::Flagged;
use crate::job;
use crate::load::{load_job, replay_input_and_one_replay, streams_of};
use anyhow::{Result, anyhow};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use vramtrace::policy::REGISTRY;
use vramtrace::policy::validated::capture_line;
use vramtrace::replay::{
    CapacitySource, PolicyRow, ReplayInput, ReplayReport, recorded_refusals_note,
};
use vramtrace::symbolize::{StackNames, short_frame, top_stacks};
use vramtrace::units::{bytes, count, duration, parse_size_arg};
use vramtrace_format::Tables;

/// Replay a trace's requests against allocator policies: peak reserved, fragmentation,
/// driver calls, OOM.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  vramtrace replay run.vramtrace
  vramtrace replay run.vramtrace --policy pytorch,pytorch-expandable --capacity 80GiB
  vramtrace replay run.vramtrace --policy 'pytorch:max_split_size_mb=128,garbage_collection_threshold=0.6,memory_fraction=0.9'
  vramtrace replay traces/job-42/ --policy pytorch,pytorch-expandable   # per rank and job
  vramtrace replay --list-policies")]
pub struct Args {
    /// The .vramtrace file, or a directory of one job's per-rank traces.
    #[arg(required_unless_present = "list_policies")]
    trace: Option<PathBuf>,
    /// Policies: `online` (every policy but the offline planner greedy-by-size, whose plan grows with the pairs of overlapping lifetimes: 80,000 allocations live at once take it a minute), `all`, or NAME[:KEY=VALUE,...] separated by commas.
    #[arg(long, default_value = "online", value_parser = policies)]
    policy: PolicyList,
    /// Device capacity, with its unit (80GiB, 80GB, 1000B; a bare number is refused) (default:
    /// the traced device's memory under the limit the process recorded, else unlimited).
    #[arg(long, value_parser = parse_size_arg)]
    capacity: Option<u64>,
    /// Print JSON instead of text.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print CSV instead of text.
    #[arg(long)]
    csv: bool,
    /// List every policy with its options and their defaults.
    #[arg(long)]
    list_policies: bool,
    /// Replay on GPU 0 with real cuMemAllocAsync/cuMemFreeAsync and cuMemAlloc/cuMemFree
    /// instead of the policies: the pool's reserved peak and per-call latency (needs a
    /// build with `--features device`).
    #[arg(long, conflicts_with_all = ["csv", "list_policies", "capacity"])]
    on_device: bool,
}

impl Args {
    pub fn run(self) -> Result<()> {
        if self.on_device {
            return crate::on_device::run(self.trace.as_deref(), self.json);
        }
        if self.list_policies {
            return crate::output::print(&render_policy_list());
        }
        let path = self
            .trace
            .as_deref()
            .expect("clap requires TRACE unless --list-policies");
        if path.is_dir() {
            return self.run_job(path);
        }
        // One pass over the events: the decoded trace is never held whole.
        // A single policy is replayed beside the load ([`vramtrace::replay::Beside`]).
        let one = match &self.policy.0[..] {
            [spec] => Some(spec),
            _ => None,
        };
        let ((input, recorded, tables, layout), beside) =
            replay_input_and_one_replay(path, self.capacity, one)?;
        let input = input
            .ok_or_else(|| anyhow!("{}: no device-memory allocation to replay", path.display()))?;
        let limit = recorded.memory_fraction;
        // The configuration the program ran under leads, whatever else was asked for.
        let mut specs = self.policy.0.clone();
        if let Some(r) = &input.recorded_policy
            && !specs.iter().any(|s| s.to_string() == r.to_string())
        {
            specs.insert(0, r.clone());
        }
        let name = path.display().to_string();
        let report = match beside {
            Some(run) => ReplayReport::of_results(&name, &specs, &input, &[run])?,
            None => ReplayReport::build(&name, &specs, &input)?,
        };
        if let Some(w) = &report.warning
            && !self.json
        {
            eprintln!("vramtrace: warning: {w}");
        }
        let flagged = Flagged::new(&report, &[(path, &layout)]);
        if self.json {
            return crate::output::print_json(&flagged);
        }
        let out = if self.csv {
            render_csv(&report)
        } else {
            render_text(&report, &input, limit, &peak_sites(&input, &tables))
        };
        crate::output::print(&out)
    }
}

/// A job's figures for one policy over its ranks.
#[derive(Debug, Serialize)]
struct JobPolicy {
    name: String,
    /// Peak reserved: the largest rank is the device the job needs under this policy.
    peak_reserved: job::Figure,
    peak_allocated: job::Figure,
    /// Ranks that ran out of memory.
    oom_ranks: Vec<u32>,
    /// Driver calls of all ranks together.
    driver_calls: u64,
}

impl Args {
    fn run_job(&self, dir: &Path) -> Result<()> {
        let specs = &self.policy.0;
        let ranks = load_job(dir, false, |path, trace| {
            // Each rank under the limit it recorded, as a single trace is replayed.
            let input = streams_of(path, &trace, self.capacity)?;
            ReplayReport::build(&path.display().to_string(), specs, &input)
                .map_err(anyhow::Error::from)
        })?;
        let reserved: Vec<_> = (0..specs.len())
            .map(|p| move |r: &ReplayReport| Some(r.policies[p].peak_reserved))
            .collect();
        let columns: Vec<job::Column<ReplayReport>> = reserved
            .iter()
            .enumerate()
            .map(|(p, f)| {
                (
                    specs[p].to_string(),
                    f as &dyn Fn(&ReplayReport) -> Option<u64>,
                )
            })
            .collect();
        if self.json {
            let policies: Vec<JobPolicy> = specs
                .iter()
                .enumerate()
                .map(|(p, spec)| JobPolicy {
                    name: spec.to_string(),
                    peak_reserved: job::Figure::of(spec.to_string(), &ranks, &|r| {
                        Some(r.policies[p].peak_reserved)
                    }),
                    peak_allocated: job::Figure::of(spec.to_string(), &ranks, &|r| {
                        Some(r.policies[p].peak_allocated)
                    }),
                    oom_ranks: ranks
                        .iter()
                        .filter(|r| r.value.policies[p].oom.is_some())
                        .map(|r| r.rank)
                        .collect(),
                    driver_calls: ranks
                        .iter()
                        .map(|r| {
                            r.value.policies[p].device_allocs + r.value.policies[p].device_frees
                        })
                        .sum(),
                })
                .collect();
            return crate::output::print_json(&job::output(dir, ranks, policies, None));
        }
        let mut text = job::render(dir, "peak reserved per policy", &ranks, &columns);
        for (p, spec) in specs.iter().enumerate() {
            let oom: Vec<String> = ranks
                .iter()
                .filter(|r| r.value.policies[p].oom.is_some())
                .map(|r| r.rank.to_string())
                .collect();
            if !oom.is_empty() {
                let _ = writeln!(text, "OOM under {spec} on ranks {}", oom.join(", "));
            }
        }
        crate::output::print(&text)
    }
}

/// `--list-policies`: each policy, what it models, its keys and their defaults.
fn render_policy_list() -> String {
    let mut s = String::new();
    for p in REGISTRY {
        let _ = writeln!(s, "{}\n    {}", p.name, p.summary);
        for k in p.keys {
            let _ = writeln!(s, "    {}={}  {}", k.key, k.default, k.about);
        }
    }
    s.push_str("\nSyntax: --policy NAME[:KEY=VALUE,...][,NAME...] or --policy all\n");
    s
}

/// Per stream, the sites (the user's frame of each stack, [`StackBytes::site`]) holding the
/// most requested bytes at the peak (the lower bound's moment), with their bytes, most first;
/// native frames are named from the modules' files as `summary` names them.
fn peak_sites(input: &ReplayInput, tables: &Tables) -> Vec<Vec<(String, u64)>> {
    let mut files = ElfFiles::new();
    let names = StackNames::new(tables, &mut files);
    input
        .model
        .streams
        .iter()
        .map(|s| {
            let mut sites: Vec<(String, u64)> = Vec::new();
            for b in top_stacks(s.live_at_peak().into_iter(), &names, usize::MAX) {
                match sites.iter_mut().find(|(site, _)| *site == b.site) {
                    Some((_, bytes)) => *bytes += b.bytes,
                    None => sites.push((b.site, b.bytes)),
                }
            }
            sites.sort_by_key(|s| std::cmp::Reverse(s.1));
            sites
        })
        .collect()
}

/// Sites named on the `at the peak` line.
const PEAK_SITES: usize = 3;

fn render_text(
    r: &ReplayReport,
    input: &ReplayInput,
    limit: Option<f64>,
    sites: &[Vec<(String, u64)>],
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "trace        {}", r.trace);
    let _ = writeln!(s, "level        {}", input.model.level.shown());
    let _ = writeln!(s, "capture      {}", capture_line(r.capture));
    if let Some(w) = &r.warning {
        let _ = writeln!(s, "WARNING      {w}");
    }
    for (i, st) in r.streams.iter().enumerate() {
        let (cap, source) = input.capacities[i];
        let source = match source {
            CapacitySource::Given => "--capacity",
            CapacitySource::Device => "device",
            CapacitySource::Unlimited => "unlimited",
            CapacitySource::Recorded => "the recorded memory fraction of the device",
        };
        let cap = if cap == u64::MAX {
            "unlimited".to_string()
        } else {
            format!("{} ({source})", bytes(cap))
        };
        let _ = writeln!(
            s,
            "\nprocess {} device {}: {} requests ({} allocations, CUDA streams: {}), capacity {cap}",
            st.pid,
            st.device,
            count(st.requests as u64),
            count(st.allocations as u64),
            st.cuda_streams
        );
        let _ = writeln!(
            s,
            "lower bound  {} (peak of live requested bytes)",
            bytes(st.lower_bound_bytes)
        );
        let named: Vec<String> = sites
            .get(i)
            .into_iter()
            .flatten()
            .filter(|(site, _)| !site.is_empty())
            .take(PEAK_SITES)
            .map(|(site, b)| {
                let share = 100.0 * *b as f64 / st.lower_bound_bytes.max(1) as f64;
                format!("{share:.0}% {}", short_frame(site))
            })
            .collect();
        if !named.is_empty() {
            let _ = writeln!(
                s,
                "at the peak  {} (`vramtrace summary` has every site and stack)",
                named.join(", ")
            );
        }
        if st.outside_allocator.allocations > 0 {
            let _ = writeln!(
                s,
                "outside      {} plain cuMemAlloc calls ({} at most) beside the pool requests: \
                 libraries bypassing the allocator; held under any policy, not replayed",
                count(st.outside_allocator.allocations),
                bytes(st.outside_allocator.peak_bytes)
            );
        }
        if let Some(f) = st.recorded_memory_fraction {
            let total = st.recorded_device_total;
            let cap = total.map_or(String::new(), |t| {
                format!(
                    ": a cap of {} of the device's {}",
                    bytes((f * t as f64) as u64),
                    bytes(t)
                )
            });
            let _ = writeln!(
                s,
                "limit        the program set a memory fraction of {f}{cap} (set_per_process_memory_fraction, recorded; replayed where it was set)"
            );
        }
        if st.recorded_oom_failures > 0 {
            let how = match (limit, source) {
                _ if st.recorded_memory_fraction.is_some() => {
                    "replayed under the memory fraction the program set".to_string()
                }
                (Some(f), _) => format!("replayed under the limit it recorded ({f} of the device)"),
                (None, "--capacity") => "replayed under --capacity".to_string(),
                _ => "the trace does not record the limit it ran under: pass --capacity SIZE \
                      (the memory it had), or --policy 'pytorch:memory_fraction=F' for \
                      torch.cuda.set_per_process_memory_fraction(F)"
                    .to_string(),
            };
            let _ = writeln!(
                s,
                "recorded     {} allocations failed with CUDA_ERROR_OUT_OF_MEMORY in the \
                 recorded run (replayed as refused again); {how}",
                count(st.recorded_oom_failures)
            );
        }
        let _ = writeln!(
            s,
            "(requested, allocated, reserved: peaks; frag: 1 - allocated / reserved when reserved \
             peaked)\n"
        );
        render_table(&mut s, &st.policies, st.recorded_oom_failures);
        render_pool_ranges(&mut s, &st.policies);
        if let Some(t) = st.recorded_peak_reserved {
            let real_frees = st.recorded_device_frees.unwrap_or(0);
            for p in st.policies.iter().filter(|p| p.error_vs_recorded.is_some()) {
                let _ = writeln!(
                    s,
                    "recorded     {}: predicted {}, this run reserved {} ({:+.2}%)",
                    p.name,
                    bytes(p.peak_reserved),
                    bytes(t),
                    100.0 * p.error_vs_recorded.unwrap_or(0.0)
                );
                if st.recorded_oom_failures > 0 {
                    let reproduced = p.refused_as_recorded;
                    let _ = writeln!(
                        s,
                        "recorded     {}: {} of the {} out-of-memory errors of this run refused again{}",
                        p.name,
                        count(reproduced),
                        count(st.recorded_oom_failures),
                        if reproduced < st.recorded_oom_failures {
                            " (the others served: the replay had room the run did not)"
                        } else {
                            ""
                        }
                    );
                }
                // A run that gave segments back under a limit the trace does not record (a
                // memory fraction, a smaller device) is not reproduced without that limit.
                if real_frees > 0
                    && p.device_frees == 0
                    && limit.is_none()
                    && source != "--capacity"
                {
                    let _ = writeln!(
                        s,
                        "             this run gave {} segments back to the driver and the \
                         replay none: it ran under a limit (a memory fraction, a smaller device) \
                         or called empty_cache; replay its limit with --capacity SIZE or \
                         --policy '{}:memory_fraction=F'",
                        count(real_frees),
                        p.name
                    );
                }
            }
        }
    }
    if r.streams.len() > 1 {
        let _ = writeln!(
            s,
            "\nall streams (peaks summed): lower bound {}\n",
            bytes(r.lower_bound_bytes)
        );
        let failures = r.streams.iter().map(|st| st.recorded_oom_failures).sum();
        render_table(&mut s, &r.policies, failures);
        render_pool_ranges(&mut s, &r.policies);
    }
    s
}

/// The range GPU progress leaves a `cuda-async` prediction, and a word when the trace lacks the
/// synchronizations the model follows.
fn render_pool_ranges(s: &mut String, rows: &[PolicyRow]) {
    for (p, r) in rows.iter().filter_map(|p| p.pool_range.map(|r| (p, r))) {
        if r.earliest_completion != r.latest_completion {
            let _ = writeln!(
                s,
                "range        {}: {} to {} ({:.1}% wide): GPU progress decides when another \
                 stream reuses a free (every free complete at once / none before an ordering)",
                p.name,
                bytes(r.earliest_completion),
                bytes(r.latest_completion),
                100.0 * r.width()
            );
        }
        if !r.synchronizations {
            let _ = writeln!(
                s,
                "note         {}: the trace records no synchronizations (recorded before the \
                 recorder logged them): the prediction lacks what orders the pool's reuse",
                p.name
            );
        }
    }
}

/// Requested, allocated and reserved are peaks, as in the CSV, the JSON and the report; frag is
/// taken at the moment reserved peaked (docs/definitions.md, "fragmentation at peak"). The OOM
/// column says of the `recorded_failures` (allocations the recorded run's driver refused) how
/// many the policy refused too, or that it served them all.
fn render_table(s: &mut String, rows: &[PolicyRow], recorded_failures: u64) {
    let width = rows.iter().map(|p| p.name.len()).max().unwrap_or(6).max(6);
    let _ = writeln!(
        s,
        "{:<width$}  {:>12}  {:>12}  {:>12}  {:>26}  {:>6}  {:>6}  {:>15}  {:>10}  OOM",
        "policy",
        "requested",
        "allocated",
        "reserved",
        "model error on real runs",
        "frag",
        "xLB",
        "driver calls",
        "est. time"
    );
    for p in rows {
        let oom = match &p.oom {
            // The recorded run's own out-of-memory errors, which the program survived.
            None => match recorded_refusals_note(p.refused_as_recorded, recorded_failures) {
                Some(n) if p.refused_as_recorded > 0 => n,
                Some(n) => format!("- ({n})"),
                None => "-".to_string(),
            },
            Some(o) => format!(
                "at request #{} ({}): {} with {} reserved, {} live objects",
                o.request_index,
                duration(o.time_ns),
                bytes(o.size),
                bytes(o.reserved),
                count(o.live_objects)
            ),
        };
        let _ = writeln!(
            s,
            "{:<width$}  {:>12}  {:>12}  {:>12}  {:>26}  {:>5.1}%  {:>6.3}  {:>15}  {:>10}  {oom}",
            p.name,
            bytes(p.peak_requested),
            bytes(p.peak_allocated),
            bytes(p.peak_reserved),
            p.validated.map_or("unvalidated".to_string(), |b| b.label()),
            100.0 * p.fragmentation_at_peak,
            p.ratio_to_lower_bound,
            format!("{}/{}", count(p.device_allocs), count(p.device_frees)),
            duration((p.est_alloc_time_us * 1000.0) as u64),
        );
    }
}

fn render_csv(r: &ReplayReport) -> String {
    let mut s = String::from(
        "pid,device,policy,lower_bound_bytes,peak_requested,peak_allocated,peak_reserved,\
fragmentation_at_peak,ratio_to_lower_bound,device_allocs,device_frees,est_alloc_time_us,\
oom_time_ns,oom_size,oom_reserved\n",
    );
    for st in &r.streams {
        for p in &st.policies {
            let (t, z, res) =
                p.oom
                    .as_ref()
                    .map_or((String::new(), String::new(), String::new()), |o| {
                        (
                            o.time_ns.to_string(),
                            o.size.to_string(),
                            o.reserved.to_string(),
                        )
                    });
            let _ = writeln!(
                s,
                "{},{},\"{}\",{},{},{},{},{:.6},{:.6},{},{},{:.3},{t},{z},{res}",
                st.pid,
                st.device,
                p.name.replace('"', "\"\""),
                st.lower_bound_bytes,
                p.peak_requested,
                p.peak_allocated,
                p.peak_reserved,
                p.fragmentation_at_peak,
                p.ratio_to_lower_bound,
                p.device_allocs,
                p.device_frees,
                p.est_alloc_time_us
            );
        }
    }
    s
}
