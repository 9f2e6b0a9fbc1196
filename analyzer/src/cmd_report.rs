//! `vramtrace report`: writes `DIR/index.html` and each chart as its own `.svg`.

use crate::load::load_trace;
use anyhow::{Context, Result};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;
use vramtrace::policy::PolicySpec;
use vramtrace::report::generate::{Options as ReportOptions, generate};
use vramtrace::units::bytes;
use vramtrace_format::replace::write_replacing;

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
    write_replacing(&probe, |_| std::io::Result::Ok(()))
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
    // Each file is written whole or not at all (a full disk leaves no truncated chart), and a
    // link at its name is replaced, never written through.
    let files = report
        .charts
        .iter()
        .map(|c| (out.join(&c.file), c.svg.as_bytes()))
        .chain([(out.join("index.html"), report.html.as_bytes())]);
    for (path, bytes) in files {
        write_replacing(&path, |f| f.write_all(bytes))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let index = out.join("index.html");
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
