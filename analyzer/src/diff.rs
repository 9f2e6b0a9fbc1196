//! What `vramtrace diff` reports: two runs side by side.
//!
//! Processes are matched by their order (the first pid of A with the first pid of B) and
//! devices by ordinal, since pids differ between runs. Stacks are matched by their user frames:
//! the text of the site ([`crate::symbolize::Symbolizer::site_index`]) and its callers
//! (function names, `module+offset`, or `file:line name` for Python), which stay the same across
//! runs of the same code, unlike addresses, and ignore differences in the plumbing below.

use crate::summary::{GroupSummary, Summary};
use crate::symbolize::StackBytes;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Stacks listed per direction (grew, shrank).
pub const TOP_DELTAS: usize = 10;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Diff {
    pub a: Side,
    pub b: Side,
    pub groups: Vec<GroupDiff>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Side {
    pub capture_level: String,
    pub events: u64,
    pub failed_allocations: u64,
}

/// One process (by order) and device in both runs; a side without it has zeros.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GroupDiff {
    /// 0 for the first process of each trace, 1 for the second, ...
    pub process_index: usize,
    pub pid_a: Option<u32>,
    pub pid_b: Option<u32>,
    pub device: i32,
    pub peak_requested: Pair,
    pub peak_reserved: Pair,
    pub allocations: Pair,
    pub failed: Pair,
    pub leaked_bytes: Pair,
    /// Stacks whose bytes live at the requested peak grew most from A to B.
    pub grew: Vec<StackDelta>,
    /// ... and shrank most.
    pub shrank: Vec<StackDelta>,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Pair {
    pub a: u64,
    pub b: u64,
    pub delta: i128,
}

impl Pair {
    fn new(a: u64, b: u64) -> Pair {
        Pair {
            a,
            b,
            delta: i128::from(b) - i128::from(a),
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StackDelta {
    pub bytes_a: u64,
    pub bytes_b: u64,
    pub delta: i128,
    /// The user frames: the site first, then its callers.
    pub frames: Vec<String>,
}

impl Diff {
    /// Compares two summaries made with every stack at the peak ([`Summary::with_top`] with
    /// `usize::MAX`), so that a stack missing from one side really held nothing there.
    pub fn of(a: &Summary, b: &Summary) -> Diff {
        let index = |s: &Summary| -> BTreeMap<(usize, i32), GroupSummary> {
            let mut pids: Vec<u32> = s.groups.iter().map(|g| g.pid).collect();
            pids.sort_unstable();
            pids.dedup();
            s.groups
                .iter()
                .map(|g| {
                    let i = pids.binary_search(&g.pid).expect("pid listed");
                    ((i, g.device), g.clone())
                })
                .collect()
        };
        let (ga, gb) = (index(a), index(b));
        let mut keys: Vec<(usize, i32)> = ga.keys().chain(gb.keys()).copied().collect();
        keys.sort_unstable();
        keys.dedup();
        let groups = keys
            .into_iter()
            .map(|k| group(k, ga.get(&k), gb.get(&k)))
            .collect();
        let side = |s: &Summary| Side {
            capture_level: s.capture_level.clone(),
            events: s.events,
            failed_allocations: s.failed_allocations,
        };
        Diff {
            a: side(a),
            b: side(b),
            groups,
        }
    }
}

fn group(
    (process_index, device): (usize, i32),
    a: Option<&GroupSummary>,
    b: Option<&GroupSummary>,
) -> GroupDiff {
    let pair = |f: fn(&GroupSummary) -> u64| Pair::new(a.map_or(0, f), b.map_or(0, f));
    // Stacks are compared by their user frames (the site and its callers): two stacks that
    // differ only in the allocator plumbing below the site are one site.
    fn user(s: &StackBytes) -> &[String] {
        s.frames.get(s.site_index..).unwrap_or(&[])
    }
    let mut stacks: HashMap<&[String], (u64, u64)> = HashMap::new();
    for s in a.iter().flat_map(|g| &g.top_stacks_at_peak) {
        stacks.entry(user(s)).or_default().0 += s.bytes;
    }
    for s in b.iter().flat_map(|g| &g.top_stacks_at_peak) {
        stacks.entry(user(s)).or_default().1 += s.bytes;
    }
    let mut deltas: Vec<StackDelta> = stacks
        .into_iter()
        .filter(|(_, (x, y))| x != y)
        .map(|(frames, (x, y))| StackDelta {
            bytes_a: x,
            bytes_b: y,
            delta: i128::from(y) - i128::from(x),
            frames: frames.to_vec(),
        })
        .collect();
    deltas.sort_by(|x, y| y.delta.cmp(&x.delta).then(x.frames.cmp(&y.frames)));
    let grew = deltas
        .iter()
        .filter(|d| d.delta > 0)
        .take(TOP_DELTAS)
        .cloned()
        .collect();
    let shrank = deltas
        .iter()
        .rev()
        .filter(|d| d.delta < 0)
        .take(TOP_DELTAS)
        .cloned()
        .collect();
    GroupDiff {
        process_index,
        pid_a: a.map(|g| g.pid),
        pid_b: b.map(|g| g.pid),
        device,
        peak_requested: pair(|g| g.peak_requested),
        peak_reserved: pair(|g| g.peak_reserved),
        allocations: pair(|g| g.allocations),
        failed: pair(|g| g.failed),
        leaked_bytes: pair(|g| g.leaks.bytes),
        grew,
        shrank,
    }
}

/// How a predicted sequence of segment allocations (a policy's replay) agrees with the one a
/// real allocator recorded (`import_snapshot::recorded_segment_allocs`). The criterion
/// for the `pytorch` policy is [`SegmentComparison::exact`]: the same number of segments with
/// the same size at every position.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct SegmentComparison {
    pub recorded: usize,
    pub predicted: usize,
    pub recorded_bytes: u64,
    pub predicted_bytes: u64,
    /// Same count and the same size at every position.
    pub exact: bool,
    /// The same sizes, in any order.
    pub same_sizes: bool,
    /// The first position whose sizes differ, or where one sequence ends; `None` when exact.
    pub first_difference: Option<usize>,
}

/// Compares segment sizes position by position and as multisets.
pub fn compare_segments(recorded: &[u64], predicted: &[u64]) -> SegmentComparison {
    let first_difference = recorded
        .iter()
        .zip(predicted)
        .position(|(a, b)| a != b)
        .or((recorded.len() != predicted.len()).then(|| recorded.len().min(predicted.len())));
    let sorted = |v: &[u64]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v
    };
    SegmentComparison {
        recorded: recorded.len(),
        predicted: predicted.len(),
        recorded_bytes: recorded.iter().sum(),
        predicted_bytes: predicted.iter().sum(),
        exact: first_difference.is_none(),
        same_sizes: sorted(recorded) == sorted(predicted),
        first_difference,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_sequences_compare_by_position_and_by_size() {
        let c = compare_segments(&[2 << 20, 20 << 20], &[2 << 20, 20 << 20]);
        assert!(c.exact && c.same_sizes);
        assert_eq!(c.first_difference, None);
        let swapped = compare_segments(&[2 << 20, 20 << 20], &[20 << 20, 2 << 20]);
        assert!(!swapped.exact && swapped.same_sizes);
        assert_eq!(swapped.first_difference, Some(0));
        let short = compare_segments(&[2 << 20, 20 << 20], &[2 << 20]);
        assert_eq!(short.first_difference, Some(1));
        assert_eq!(short.predicted_bytes, 2 << 20);
    }
}
