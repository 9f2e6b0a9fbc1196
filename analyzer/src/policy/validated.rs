//! How far each allocator model's predictions have been checked against real runs: its
//! validated error band, read from the validation tables of `docs/validation.md` (every table
//! with a `policy` and an `error` column: one row per real run, the error being
//! (predicted − real) / real peak reserved), so the band is the data the tests pin, never a
//! figure typed in twice. A model without a row there is *unvalidated*.

use serde::Serialize;
use std::sync::OnceLock;

/// The validation document, compiled in.
const VALIDATION: &str = include_str!("../../../docs/validation.md");

/// The errors one model showed on the real runs it was checked on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Band {
    /// The policy (registry name) the runs replayed, whatever its options.
    pub policy: String,
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

    /// `exact (22 runs)`, `-4.5% to +0.0% (8 runs)`.
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

/// The label of a prediction by `policy`: its [`Band::label`], or `unvalidated`.
pub fn label(policy: &str) -> String {
    band(policy).map_or_else(|| "unvalidated".to_string(), Band::label)
}

/// The validated band of the model `policy` (a registry name, or a spec whose name is taken),
/// `None` when no real run checked it.
pub fn band(policy: &str) -> Option<&'static Band> {
    let name = policy.split(':').next().unwrap_or(policy).trim();
    bands().iter().find(|b| b.policy == name)
}

/// Every validated band, in the order the document first names each policy.
pub fn bands() -> &'static [Band] {
    static BANDS: OnceLock<Vec<Band>> = OnceLock::new();
    BANDS.get_or_init(|| parse(VALIDATION))
}

/// The bands of a document's tables: the rows of every table whose header names a `policy`
/// column (the first whose name starts so) and an `error` column.
pub fn parse(document: &str) -> Vec<Band> {
    let mut out: Vec<Band> = Vec::new();
    let mut columns: Option<(usize, usize, usize)> = None;
    for line in document.lines() {
        let Some(cells) = cells(line) else {
            columns = None;
            continue;
        };
        if cells.iter().all(|c| c.chars().all(|x| "-: ".contains(x))) {
            continue;
        }
        let find = |p: &dyn Fn(&str) -> bool| cells.iter().position(|c| p(c));
        if cells.first() == Some(&"workload") {
            columns = find(&|c| c.starts_with("policy"))
                .zip(find(&|c| c == "error"))
                .map(|(p, e)| (0, p, e));
            continue;
        }
        let Some((w, p, e)) = columns else { continue };
        let (Some(policy), Some(error)) = (
            cells.get(p).and_then(|c| policy_of(c)),
            cells.get(e).and_then(|c| error_of(c)),
        ) else {
            continue;
        };
        let workload = cells[w].split(' ').next().unwrap_or("").to_string();
        match out.iter_mut().find(|b| b.policy == policy) {
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
                low: error.min(0.0),
                high: error.max(0.0),
                runs: 1,
                workloads: vec![workload],
            }),
        }
    }
    out
}

/// The cells of a Markdown table row, trimmed; `None` for a line that is not one.
fn cells(line: &str) -> Option<Vec<&str>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    Some(inner.split('|').map(str::trim).collect())
}

/// The registry name of the first policy in backticks in a cell (`pytorch:max_split_size_mb=64`
/// is `pytorch`).
fn policy_of(cell: &str) -> Option<String> {
    let start = cell.find('`')? + 1;
    let end = start + cell[start..].find('`')?;
    let name = cell[start..end].split(':').next()?.trim();
    super::find(name).map(|p| p.name.to_string())
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
| workload | policy | predicted | real | error |
|---|---|---:|---:|---:|
| mlp | `pytorch` (native) | 1 | 1 | 0 |
| transformer (varying lengths) | `pytorch:max_split_size_mb=64` | 1 | 1 | −4.5% |
| mlp | `cuda-async` | 1 | 1 | +2.00% |

| workload | cuda-malloc | error |
|---|---:|---:|
| mlp | `cuda-malloc` | +9.0% |
";

    #[test]
    fn the_bands_are_the_error_range_of_every_validation_row_of_each_policy() {
        let b = parse(DOC);
        assert_eq!(b.len(), 2, "{b:?}");
        assert_eq!(
            (b[0].policy.as_str(), b[0].low, b[0].high, b[0].runs),
            ("pytorch", -0.045, 0.0, 2)
        );
        assert_eq!(b[0].workloads, ["mlp", "transformer"]);
        assert_eq!(
            (b[1].policy.as_str(), b[1].low, b[1].high),
            ("cuda-async", 0.0, 0.02)
        );
        assert_eq!(b[0].label(), "-4.5% to +0.0% (2 runs)");
    }

    #[test]
    fn a_prediction_stands_for_the_real_figures_its_band_allows() {
        let b = &parse(DOC)[0];
        // 4.5% low at worst: a prediction of 955 stands for a real figure up to 1,000.
        assert_eq!(b.real_range(955), (955, 1000));
    }

    #[test]
    fn the_stream_ordered_pool_model_is_validated_as_low_on_real_runs() {
        let b = band("cuda-async").expect("docs/validation.md checks cuda-async");
        assert!(b.low < -0.05, "{b:?}");
        assert!(b.runs >= 5, "{b:?}");
        assert_eq!(band("pytorch:max_split_size_mb=64"), band("pytorch"));
        assert_eq!(label("gmlake-unknown-model"), "unvalidated");
    }
}
