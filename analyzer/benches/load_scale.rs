//! The scale targets of issue 18, whole commands as a user runs them: `info --json`,
//! `replay --policy pytorch` and `replay --policy all` on a synthetic trace of 10-50 M events,
//! wall time, CPU time and peak RSS of each run (`wait4`'s resource usage), events per second
//! and bytes of memory per event.
//!
//! `cargo bench -p vramtrace --bench load_scale [-- STEPS [RUNS]]` (defaults: 125,000 steps =
//! 10,000,006 events, 5 runs). The trace is written once to a temporary directory
//! (`synthetic::pytorch_like`, 80 calls per step). Runs alternate between the commands, and,
//! with `LOAD_SCALE_BASELINE=/path/to/an/older/vramtrace`, between that binary and this one, so
//! a before/after comparison shares the machine's load; figures are medians with the range.
//! Results and the machine's load go in `analyzer/BENCHMARKS.md` and `docs/reliability.md`.
//!
//! With `LOAD_SCALE_RANKS=N` it times the job view instead (issue 26): a directory of N rank
//! traces of STEPS steps each (seeds 7, 8, ...), and `summary`, `replay --policy pytorch`, `fit
//! --policy pytorch` and `tune` of the directory.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;
use vramtrace_format::{TraceWriter, WriterOptions, synthetic};

/// One run's resources.
struct Usage {
    wall_s: f64,
    cpu_s: f64,
    peak_rss_bytes: u64,
}

fn run(binary: &Path, args: &[&str]) -> Result<Usage, Box<dyn std::error::Error>> {
    let start = Instant::now();
    let child = Command::new(binary)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = libc::pid_t::try_from(child.id())?;
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of that plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet waited for (`child` is never waited on or killed);
    // `status` and `usage` are valid for writes for the duration of the call.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall_s = start.elapsed().as_secs_f64();
    if waited != pid {
        return Err(std::io::Error::last_os_error().into());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!("{} {args:?} failed ({status:#x})", binary.display()).into());
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Usage {
        wall_s,
        cpu_s: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        // Linux reports the peak resident set in KiB.
        peak_rss_bytes: u64::try_from(usage.ru_maxrss)? * 1024,
    })
}

/// Median and range of `v`, formatted.
fn spread(mut v: Vec<f64>, digits: usize) -> String {
    v.sort_by(f64::total_cmp);
    format!(
        "{:.digits$} ({:.digits$}-{:.digits$})",
        v[v.len() / 2],
        v[0],
        v[v.len() - 1]
    )
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Set in the child that writes the trace: the path to write.
const WRITE: &str = "LOAD_SCALE_WRITE";

/// Set with [`WRITE`] for a job: the number of rank traces to write into that directory.
const RANKS: &str = "LOAD_SCALE_RANKS";

/// Writes the synthetic trace of `steps` steps to `path`; returns its number of events.
fn write_trace(path: &Path, steps: usize, seed: u64) -> Result<usize, Box<dyn std::error::Error>> {
    let s = synthetic::pytorch_like(steps, seed);
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut w = TraceWriter::new(file, &s.metadata, WriterOptions::default())?;
    *w.tables_mut() = s.tables;
    for e in &s.events {
        w.push(e)?;
    }
    w.finish()?;
    Ok(s.events.len())
}

/// What the child writes: one trace at `out`, or with `ranks` that many rank traces in the
/// directory `out`; prints the number of events written.
fn write(out: &Path, steps: usize, ranks: Option<usize>) -> Result<(), Box<dyn std::error::Error>> {
    let events = match ranks {
        None => write_trace(out, steps, 7)?,
        Some(n) => {
            std::fs::create_dir_all(out)?;
            let mut events = 0;
            for r in 0..n {
                let path = out.join(format!("rank{r:03}.vramtrace"));
                events += write_trace(&path, steps, 7 + r as u64)?;
            }
            events
        }
    };
    println!("{events}");
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo bench` passes `--bench`; the numbers are ours.
    let numbers: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let steps = numbers.first().copied().unwrap_or(125_000);
    let runs = numbers.get(1).copied().unwrap_or(5).max(1);
    let ranks: Option<usize> = match std::env::var(RANKS) {
        Ok(n) => Some(n.parse()?),
        Err(_) => None,
    };
    if let Some(out) = std::env::var_os(WRITE) {
        return write(Path::new(&out), steps, ranks);
    }
    let dir = tempfile::tempdir()?;
    let trace = match ranks {
        None => dir.path().join("synthetic.vramtrace"),
        Some(_) => dir.path().join("job"),
    };
    // The trace is generated in a child process: a child's peak RSS (`wait4`) counts what its
    // parent held when it was spawned, and the generated events take about 1 GiB.
    let child = Command::new(std::env::current_exe()?)
        .arg(steps.to_string())
        .env(WRITE, &trace)
        .envs(ranks.map(|n| (RANKS, n.to_string())))
        .stderr(Stdio::inherit())
        .output()?;
    if !child.status.success() {
        return Err(format!("writing the trace failed ({})", child.status).into());
    }
    let events: f64 = String::from_utf8(child.stdout)?.trim().parse()?;
    let file_bytes: u64 = match ranks {
        None => std::fs::metadata(&trace)?.len(),
        Some(_) => std::fs::read_dir(&trace)?
            .map(|e| Ok(e?.metadata()?.len()))
            .sum::<std::io::Result<u64>>()?,
    };
    let path = trace.to_str().ok_or("temporary path is not UTF-8")?;
    let this = Path::new(env!("CARGO_BIN_EXE_vramtrace")).to_path_buf();
    let mut binaries = vec![("this", this)];
    if let Ok(base) = std::env::var("LOAD_SCALE_BASELINE") {
        binaries.insert(0, ("baseline", base.into()));
    }
    let commands: Vec<(&str, Vec<&str>)> = match ranks {
        None => vec![
            ("info --json", vec!["info", "--json", path]),
            (
                "replay --policy pytorch",
                vec!["replay", "--policy", "pytorch", "--json", path],
            ),
            (
                "replay --policy all",
                vec!["replay", "--policy", "all", "--json", path],
            ),
        ],
        Some(_) => vec![
            ("summary DIR", vec!["summary", "--json", path]),
            (
                "replay DIR --policy pytorch",
                vec!["replay", "--policy", "pytorch", "--json", path],
            ),
            (
                "fit DIR --policy pytorch",
                vec!["fit", "--policy", "pytorch", "--json", path],
            ),
            ("tune DIR", vec!["tune", "--json", path]),
        ],
    };
    println!(
        "{} events, {file_bytes} bytes; {runs} alternating runs; load average before: {}",
        events as u64,
        load_average()
    );
    let mut results: Vec<Vec<Usage>> = (0..binaries.len() * commands.len())
        .map(|_| Vec::new())
        .collect();
    for _ in 0..runs {
        for (c, (_, args)) in commands.iter().enumerate() {
            for (b, (_, binary)) in binaries.iter().enumerate() {
                results[c * binaries.len() + b].push(run(binary, args)?);
            }
        }
    }
    println!("load average after: {}", load_average());
    println!(
        "command                      binary    wall s          CPU s           M events/s (wall)  peak RSS MiB    bytes/event"
    );
    for (c, (name, _)) in commands.iter().enumerate() {
        for (b, (which, _)) in binaries.iter().enumerate() {
            let r = &results[c * binaries.len() + b];
            let wall: Vec<f64> = r.iter().map(|u| u.wall_s).collect();
            let rate: Vec<f64> = wall.iter().map(|s| events / s / 1e6).collect();
            let rss = |u: &Usage| u.peak_rss_bytes as f64;
            println!(
                "{name:<28} {which:<9} {:<15} {:<15} {:<18} {:<15} {}",
                spread(wall, 2),
                spread(r.iter().map(|u| u.cpu_s).collect(), 2),
                spread(rate, 1),
                spread(r.iter().map(|u| rss(u) / (1 << 20) as f64).collect(), 0),
                spread(r.iter().map(|u| rss(u) / events).collect(), 1),
            );
        }
    }
    Ok(())
}
