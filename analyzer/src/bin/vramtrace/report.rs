//! `vramtrace report`: writes `DIR/index.html` and each chart as its own `.svg`.

use crate::args::{PolicyList, policies};
use crate::elf_files::ElfFiles;
use crate::load::load_trace;
use anyhow::{Context, Result};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;
use vramtrace::report::generate::{Options as ReportOptions, generate};
use vramtrace::symbolize::{ModuleFiles, NoFiles};
use vramtrace::units::{bytes, parse_size};
use vramtrace_format::replace::write_replacing;

/// Write SVG charts and one self-contained HTML page: memory over time per policy, what is
/// live at the peak and from where, fragmentation, address maps, histograms, a timeline.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  vramtrace report run.vramtrace
  vramtrace report run.vramtrace -o report/ --capacity 80GiB
  vramtrace report run.vramtrace --policy pytorch,pytorch-expandable
  vramtrace report run.vramtrace --no-symbolize")]
pub struct Args {
    /// The .vramtrace file.
    trace: PathBuf,
    /// Directory for index.html and the .svg files (created if missing); default
    /// TRACE-NAME-report in the current directory.
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    out: Option<PathBuf>,
    /// Policies to replay and compare: `all`, or NAME[:KEY=VALUE,...] separated by commas.
    #[arg(long, default_value = "all", value_parser = policies)]
    policy: PolicyList,
    /// Device capacity for the replays, drawn as a line (default: the traced device's
    /// memory, else unlimited).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    capacity: Option<u64>,
    /// Show frames as module+0xoffset without reading the traced program's files.
    #[arg(long)]
    no_symbolize: bool,
}

impl From<&Args> for ReportOptions {
    fn from(a: &Args) -> ReportOptions {
        ReportOptions {
            file: a.trace.display().to_string(),
            policies: a.policy.0.clone(),
            capacity: a.capacity,
            symbolize: !a.no_symbolize,
        }
    }
}

impl Args {
    pub fn run(self) -> Result<()> {
        write_report(&self)
    }
}

/// Checks the output directory, makes the report and writes its files.
fn write_report(o: &Args) -> Result<()> {
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
    let options = ReportOptions::from(o);
    let mut elf = ElfFiles::new();
    let files: &mut dyn ModuleFiles = if o.no_symbolize {
        &mut NoFiles
    } else {
        &mut elf
    };
    let report = generate(&trace, &options, files, &mut progress)
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
