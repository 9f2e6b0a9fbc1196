//! How far each allocator model's predictions have been checked against real runs, per kind of
//! capture: its validated error band, read from the validation tables of `docs/validation.md`
//! (every table with a `policy` and an `error` column: one row per real run, the error being
//! (predicted − real) / real peak reserved), so the band is the data the tests pin, never a
//! figure typed in twice. Each row's capture ([`Capture`]) is its table's `from` (or `request
//! stream`) cell when the table has one, else the `Capture:` line of its section; the same model
//! is exact on one capture and misses on another, so a trace is judged by the rows of its own
//! capture. A model without a row of that capture is *unvalidated* there. A row whose error cell
//! holds words beside the figure (a superseded measurement, `−4.51% (first run)`) is not counted.

use crate::model::Capture;
use serde::Serialize;
use std::sync::OnceLock;

/// The validation document, compiled in.
const VALIDATION: &str = include_str!("../../../docs/validation.md");

/// The errors one model showed on the real runs of one capture it was checked on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Band {
    /// The policy (registry name) the runs replayed, whatever its options.
    pub policy: String,
    /// How the replayed traces were captured.
    pub capture: Capture,
    /// The most negative and the most positive error seen, as fractions (−0.045 is 4.5% low).
    pub low: f64,
    pub high: f64,
    /// The real runs checked.
    pub runs: usize,
    /// The workloads they ran, in the order first seen.
    pub workloads: Vec<String>,
}

impl Band {
    /// The real figure a prediction `predicted` stands for, from the band: the smallest and
    /// largest real value whose error would have been in it (`predicted = real × (1 + error)`).
    pub fn real_range(&self, predicted: u64) -> (u64, u64) {
        let p = predicted as f64;
        (
            (p / (1.0 + self.high)) as u64,
            (p / (1.0 + self.low)).ceil() as u64,
        )
    }

    /// `exact (22 runs)`, `-4.5% to +0.0% (8 runs)`: the runs are of the band's capture, which
    /// [`capture_line`] names once per output.
    pub fn label(&self) -> String {
        if self.low == 0.0 && self.high == 0.0 {
            format!("exact ({} runs)", self.runs)
        } else {
            format!(
                "{:+.1}% to {:+.1}% ({} runs)",
                100.0 * self.low,
                100.0 * self.high,
                self.runs
            )
        }
    }
}

/// The label of a prediction by `policy` on a trace of `capture`: its [`Band::label`], or
/// `unvalidated`.
pub fn label(policy: &str, capture: Option<Capture>) -> String {
    band(policy, capture).map_or_else(|| "unvalidated".to_string(), Band::label)
}

/// The line every output that shows bands prints once: which runs they come from.
pub fn capture_line(capture: Option<Capture>) -> String {
    match capture {
        Some(c) => format!(
            "model errors are those of real runs replayed from {} captures (docs/validation.md); \
             a model with no such run is unvalidated here",
            c.name()
        ),
        None => "model errors: none apply, the trace's capture is unknown (every model is \
                 unvalidated here)"
            .to_string(),
    }
}

/// The validated band of the model `policy` (a registry name, or a spec whose name is taken)
/// on traces of `capture`, `None` when no real run of that capture checked it.
pub fn band(policy: &str, capture: Option<Capture>) -> Option<&'static Band> {
    let name = policy.split(':').next().unwrap_or(policy).trim();
    let capture = capture?;
    bands()
        .iter()
        .find(|b| b.policy == name && b.capture == capture)
}

/// Every validated band, in the order the document first names each (policy, capture).
pub fn bands() -> &'static [Band] {
    static BANDS: OnceLock<Vec<Band>> = OnceLock::new();
    BANDS.get_or_init(|| parse(VALIDATION).0)
}

/// The columns of a validation table: workload, policy, error, and the row's capture when the
/// table names it per row.
struct Columns {
    policy: usize,
    error: usize,
    from: Option<usize>,
}

/// The bands of a document's tables: the rows of every table whose header starts with
/// `workload` and names a `policy` column (the first whose name starts so) and an `error`
/// column; and the line numbers (1-based) of rows left out because no capture is named.
pub fn parse(document: &str) -> (Vec<Band>, Vec<usize>) {
    let mut out: Vec<Band> = Vec::new();
    let mut uncaptured = Vec::new();
    let mut columns: Option<Columns> = None;
    let mut section: Option<Capture> = None;
    for (n, line) in document.lines().enumerate() {
        if line.starts_with('#') {
            section = None;
        }
        if let Some(rest) = line.strip_prefix("Capture: ") {
            section = capture_named(rest);
        }
        let Some(cells) = cells(line) else {
            columns = None;
            continue;
        };
        if cells.iter().all(|c| c.chars().all(|x| "-: ".contains(x))) {
            continue;
        }
        let find = |p: &dyn Fn(&str) -> bool| cells.iter().position(|c| p(c));
        if cells.first().is_some_and(|c| c.starts_with("workload")) {
            columns = find(&|c| c.starts_with("policy"))
                .zip(find(&|c| c == "error"))
                .map(|(policy, error)| Columns {
                    policy,
                    error,
                    from: find(&|c| c == "from" || c == "request stream"),
                });
            continue;
        }
        let Some(cols) = &columns else { continue };
        let (Some(policy), Some(error)) = (
            cells.get(cols.policy).and_then(|c| policy_of(c)),
            cells.get(cols.error).and_then(|c| error_of(c)),
        ) else {
            continue;
        };
        let capture = match cols.from {
            Some(f) => cells.get(f).and_then(|c| capture_of_source(c)),
            None => section,
        };
        let Some(capture) = capture else {
            uncaptured.push(n + 1);
            continue;
        };
        let workload = cells[0]
            .split(' ')
            .next()
            .unwrap_or("")
            .trim_end_matches(',')
            .to_string();
        match out
            .iter_mut()
            .find(|b| b.policy == policy && b.capture == capture)
        {
            Some(b) => {
                b.low = b.low.min(error);
                b.high = b.high.max(error);
                b.runs += 1;
                if !b.workloads.contains(&workload) {
                    b.workloads.push(workload);
                }
            }
            None => out.push(Band {
                policy,
                capture,
                low: error.min(0.0),
                high: error.max(0.0),
                runs: 1,
                workloads: vec![workload],
            }),
        }
    }
    (out, uncaptured)
}

/// The capture a `Capture:` line names first, in backticks: `` `tracker` (…) ``.
fn capture_named(text: &str) -> Option<Capture> {
    let start = text.find('`')? + 1;
    let end = start + text[start..].find('`')?;
    Capture::from_name(&text[start..end])
}

/// The capture a table's `from` cell describes: PyTorch's tracker, a `record --requests`
/// (request-level hooks) trace, or an allocator's own record (a memory history or snapshot,
/// an XLA or RMM log).
fn capture_of_source(cell: &str) -> Option<Capture> {
    if cell.contains("tracker") {
        Some(Capture::Tracker)
    } else if cell.contains("--requests") {
        Some(Capture::Requests)
    } else if ["memory history", "snapshot", "log"]
        .iter()
        .any(|w| cell.contains(w))
    {
        Some(Capture::Snapshot)
    } else {
        None
    }
}

/// The cells of a Markdown table row, trimmed; `None` for a line that is not one.
fn cells(line: &str) -> Option<Vec<&str>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    Some(inner.split('|').map(str::trim).collect())
}

/// The registry name of the first policy in backticks in a cell (`pytorch:max_split_size_mb=64`
/// is `pytorch`); a `PYTORCH_CUDA_ALLOC_CONF` value (`expandable_segments:True`) is the policy
/// it selects.
fn policy_of(cell: &str) -> Option<String> {
    let start = cell.find('`')? + 1;
    let end = start + cell[start..].find('`')?;
    let text = &cell[start..end];
    let name = text.split(':').next()?.trim();
    match super::find(name) {
        Some(p) => Some(p.name.to_string()),
        None => super::alloc_conf::spec_from_alloc_conf(text, None)
            .ok()
            .map(|s| s.name),
    }
}

/// `+0.00%`, `−4.5%` (either minus sign), or `0`: the error as a fraction.
fn error_of(cell: &str) -> Option<f64> {
    let t = cell.replace('−', "-").replace('*', "");
    let t = t.trim();
    if t == "0" {
        return Some(0.0);
    }
    t.strip_suffix('%')?
        .trim()
        .parse::<f64>()
        .ok()
        .map(|v| v / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "\
## Runs

Capture: `requests` (the recorder's request-level hooks).

| workload | policy | predicted | real | error |
|---|---|---:|---:|---:|
| mlp | `pytorch` (native) | 1 | 1 | 0 |
| transformer (varying lengths) | `pytorch:max_split_size_mb=64` | 1 | 1 | −4.5% |
| mlp | `cuda-async` | 1 | 1 | +2.00% |

| workload | cuda-malloc | error |
|---|---:|---:|
| mlp | `cuda-malloc` | +9.0% |

| workload | policy | from | error |
|---|---|---|---:|
| mlp | `pytorch` | PyTorch's trace tracker | 0 |
| mlp | `pytorch` | PyTorch's memory history | +1.0% |
| mlp | `max_split_size_mb:512` | PyTorch's memory history | −1.0% |
| mlp | `expandable_segments:True` | the tracker | −7.0% (first run) |

## Elsewhere

| workload | policy | error |
|---|---|---:|
| mlp | `pytorch` | 0 |
";

    #[test]
    fn the_bands_are_the_error_range_of_every_validation_row_of_each_policy_and_capture() {
        let (b, uncaptured) = parse(DOC);
        assert_eq!(b.len(), 4, "{b:?}");
        assert_eq!(
            (
                b[0].policy.as_str(),
                b[0].capture,
                b[0].low,
                b[0].high,
                b[0].runs
            ),
            ("pytorch", Capture::Requests, -0.045, 0.0, 2)
        );
        assert_eq!(b[0].workloads, ["mlp", "transformer"]);
        assert_eq!(
            (b[1].policy.as_str(), b[1].low, b[1].high),
            ("cuda-async", 0.0, 0.02)
        );
        assert_eq!(b[0].label(), "-4.5% to +0.0% (2 runs)");
        // The `from` column names each row's capture; an alloc-conf value names its policy.
        assert_eq!(
            (b[2].policy.as_str(), b[2].capture, b[2].runs),
            ("pytorch", Capture::Tracker, 1)
        );
        assert_eq!(b[2].label(), "exact (1 runs)");
        assert_eq!(
            (
                b[3].policy.as_str(),
                b[3].capture,
                b[3].low,
                b[3].high,
                b[3].runs
            ),
            ("pytorch", Capture::Snapshot, -0.01, 0.01, 2)
        );
        // A heading ends the section's capture: that row names none and is left out, loudly.
        assert_eq!(uncaptured, [26]);
    }

    #[test]
    fn a_prediction_stands_for_the_real_figures_its_band_allows() {
        let b = &parse(DOC).0[0];
        // 4.5% low at worst: a prediction of 955 stands for a real figure up to 1,000.
        assert_eq!(b.real_range(955), (955, 1000));
    }

    #[test]
    fn every_validation_row_names_its_capture() {
        assert_eq!(
            parse(VALIDATION).1,
            Vec::<usize>::new(),
            "docs/validation.md lines"
        );
    }

    #[test]
    fn a_model_is_judged_by_the_runs_of_the_traces_capture() {
        let async_requests = band("cuda-async", Some(Capture::Requests))
            .expect("docs/validation.md checks cuda-async on --requests traces");
        assert!(async_requests.low < -0.05, "{async_requests:?}");
        assert!(async_requests.runs >= 5, "{async_requests:?}");
        // PyTorch's tracker carries the real segment addresses: its traces replay exactly,
        // while a request-level trace misses by the driver's address order.
        let tracker = band("pytorch", Some(Capture::Tracker)).expect("tracker runs");
        assert_eq!((tracker.low, tracker.high), (0.0, 0.0), "{tracker:?}");
        assert!(tracker.runs >= 20, "{tracker:?}");
        let requests = band("pytorch", Some(Capture::Requests)).expect("--requests runs");
        assert!(requests.low < -0.04, "{requests:?}");
        assert_eq!(
            band("pytorch:max_split_size_mb=64", Some(Capture::Tracker)),
            Some(tracker)
        );
        assert_eq!(band("pytorch", None), None);
        assert_eq!(band("pytorch", Some(Capture::Segments)), None);
        assert_eq!(label("pytorch", Some(Capture::Segments)), "unvalidated");
        assert_eq!(
            label("gmlake-unknown-model", Some(Capture::Tracker)),
            "unvalidated"
        );
        assert!(capture_line(Some(Capture::Tracker)).contains("from tracker captures"));
    }
}
