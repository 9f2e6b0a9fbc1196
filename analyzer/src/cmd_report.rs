//! `vramtrace report`: writes `DIR/index.html` and each chart as its own `.svg`.

use crate::load::load_trace;
use anyhow::{Context, Result};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;
use vramtrace::policy::PolicySpec;
use vramtrace::report::generate::{Options as ReportOptions, generate};
use vramtrace::units::bytes;

pub struct Options {
    pub trace: PathBuf,
    pub out: Option<PathBuf>,
    pub policies: Vec<PolicySpec>,
    pub capacity: Option<u64>,
    pub symbolize: bool,
}

pub fn run(o: &Options) -> Result<()> {
    // Stage messages on stderr, only when a person is watching it.
    let tty = std::io::stderr().is_terminal();
    let start = Instant::now();
    let mut progress = |what: &str| {
        if tty {
            eprintln!(
                "vramtrace: [{:5.1} s] {what}",
                start.elapsed().as_secs_f64()
            );
        }
    };
    let out = o.out.clone().unwrap_or_else(|| default_dir(&o.trace));
    // Fail on an unusable output directory before the long work, not after it.
    std::fs::create_dir_all(&out)
        .with_context(|| format!("cannot create the output directory {}", out.display()))?;
    let probe = out.join(".vramtrace-write-test");
    std::fs::write(&probe, b"")
        .with_context(|| format!("cannot write in the output directory {}", out.display()))?;
    let _ = std::fs::remove_file(&probe);

    progress(&format!("opening {}", o.trace.display()));
    let trace = load_trace(&o.trace, false)?;
    let options = ReportOptions {
        file: o.trace.display().to_string(),
        policies: o.policies.clone(),
        capacity: o.capacity,
        symbolize: o.symbolize,
    };
    let report = generate(&trace, &options, &mut progress)
        .map_err(anyhow::Error::msg)
        .with_context(|| o.trace.display().to_string())?;
    progress("writing files");
    for c in &report.charts {
        let path = out.join(&c.file);
        std::fs::write(&path, &c.svg).with_context(|| format!("writing {}", path.display()))?;
    }
    let index = out.join("index.html");
    std::fs::write(&index, &report.html).with_context(|| format!("writing {}", index.display()))?;
    progress("done");
    let peak = report
        .data
        .sections
        .iter()
        .map(|s| s.lower_bound())
        .max()
        .unwrap_or(0);
    crate::output::print(&format!(
        "wrote {} and {} charts (peak requested {})\n",
        index.display(),
        report.charts.len(),
        bytes(peak)
    ))
}

/// `run.vramtrace` → `run-report/` in the current directory.
fn default_dir(trace: &Path) -> PathBuf {
    let stem = trace
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "vramtrace".into());
    PathBuf::from(format!("{stem}-report"))
}
