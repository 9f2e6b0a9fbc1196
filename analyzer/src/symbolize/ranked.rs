//! Stacks ranked by the bytes they hold, and the rows text shows of them: stacks told apart by
//! their named frames ([`StackNames`]), each with the user's frame ([`Symbolizer::site_index`]).

use super::names::{StackNames, short_frame};
use super::{NamedFrame, Symbolizer};
use serde::Serialize;
use std::collections::HashMap;

/// How many stacks a ranked list keeps.
pub const TOP_STACKS: usize = 10;

/// Bytes held by one stack.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StackBytes {
    pub bytes: u64,
    pub count: u64,
    /// The user's frame: the innermost outside the allocator plumbing
    /// ([`Symbolizer::site_index`]); empty when the events carried no stack.
    pub site: String,
    /// Index of `site` in `frames`.
    pub site_index: usize,
    /// Every frame, innermost first; empty when the events carried no stack.
    pub frames: Vec<String>,
}

/// The `n` stacks holding the most bytes among `objects` (each a stack id and its bytes).
/// Stacks are told apart by their named
/// frames, not by their ids: two recorded stacks that differ only where naming cannot see (two
/// instruction offsets on one Python line, two return addresses in one native function) are one
/// stack to the user and are counted as one.
pub fn top_stacks(
    objects: impl Iterator<Item = (u32, u64)>,
    names: &StackNames,
    n: usize,
) -> Vec<StackBytes> {
    let mut by_id: HashMap<u32, (u64, u64)> = HashMap::new();
    for (stack, size) in objects {
        let e = by_id.entry(stack).or_default();
        e.0 = e.0.saturating_add(size);
        e.1 += 1;
    }
    top_counted_stacks(by_id, names, n)
}

/// [`top_stacks`] of objects already counted by stack id: each id's bytes (summed, saturating)
/// and how many objects it holds them in.
pub fn top_counted_stacks(
    by_id: impl IntoIterator<Item = (u32, (u64, u64))>,
    names: &StackNames,
    n: usize,
) -> Vec<StackBytes> {
    // Keyed by the frames' text: what the user reads is what tells two stacks apart.
    let mut by_frames: HashMap<Vec<String>, (u64, u64, u32, Vec<NamedFrame>)> = HashMap::new();
    for (stack, (bytes, count)) in by_id {
        let named = names.named(stack);
        let e = by_frames
            .entry(named.iter().map(NamedFrame::text).collect())
            .or_insert_with(|| (0, 0, u32::MAX, named));
        e.0 = e.0.saturating_add(bytes);
        e.1 += count;
        e.2 = e.2.min(stack);
    }
    let mut v: Vec<_> = by_frames.into_iter().collect();
    // Ties by the smallest stack id among the merged ones: the order is the trace's, not the map's.
    v.sort_unstable_by(|a, b| b.1.0.cmp(&a.1.0).then(a.1.2.cmp(&b.1.2)));
    v.into_iter()
        .take(n)
        .map(|(frames, (bytes, count, _, named))| {
            let site_index = Symbolizer::site_index(&named).unwrap_or(0);
            StackBytes {
                bytes,
                count,
                site: frames.get(site_index).cloned().unwrap_or_default(),
                site_index,
                frames,
            }
        })
        .collect()
}

/// Callers shown after a stack's user frame in text, without a depth.
pub const CALLERS_SHOWN: usize = 2;

/// One row of stacks as text shows them: the frames shown ([`short_frame`]), and the bytes and
/// allocations of every stack that shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownRow {
    /// Empty for allocations without a stack ([`NO_STACK_WHY`]).
    pub frames: Vec<String>,
    pub bytes: u64,
    pub count: u64,
}

/// `list` as the rows text shows: each stack's user frame and its [`CALLERS_SHOWN`] callers, or
/// with `depth` its innermost frames; stacks that differ only in frames not shown are one row,
/// their bytes and counts summed, largest first (equal ones in `list`'s order).
pub fn shown_rows(list: &[StackBytes], depth: Option<usize>) -> Vec<ShownRow> {
    let mut rows: Vec<ShownRow> = Vec::new();
    for s in list {
        let (from, n) = match depth {
            Some(d) => (0, d.max(1)),
            None => (s.site_index, 1 + CALLERS_SHOWN),
        };
        let frames: Vec<String> = s
            .frames
            .iter()
            .skip(from)
            .take(n)
            .map(|f| short_frame(f).to_string())
            .collect();
        match rows.iter_mut().find(|r| r.frames == frames) {
            Some(r) => {
                r.bytes = r.bytes.saturating_add(s.bytes);
                r.count += s.count;
            }
            None => rows.push(ShownRow {
                frames,
                bytes: s.bytes,
                count: s.count,
            }),
        }
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.bytes));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(bytes: u64, frames: &[&str]) -> StackBytes {
        StackBytes {
            bytes,
            count: 1,
            site: frames.first().map_or(String::new(), |f| f.to_string()),
            site_index: 0,
            frames: frames.iter().map(|f| f.to_string()).collect(),
        }
    }

    #[test]
    fn stacks_that_show_the_same_lines_are_one_row() {
        let train = "train.py:47 step";
        let list = [
            stack(
                10,
                &[
                    train,
                    "train.py:90 main",
                    "train.py:99 <module>",
                    "a.py:1 x",
                ],
            ),
            stack(30, &["model.py:12 forward"]),
            stack(
                25,
                &[
                    train,
                    "train.py:90 main",
                    "train.py:99 <module>",
                    "b.py:2 y",
                ],
            ),
            stack(1, &[]),
        ];
        let rows = shown_rows(&list, None);
        assert_eq!(
            rows.iter()
                .map(|r| (r.frames.first().cloned(), r.bytes, r.count))
                .collect::<Vec<_>>(),
            [
                (Some(train.to_string()), 35, 2),
                (Some("model.py:12 forward".into()), 30, 1),
                (None, 1, 1)
            ]
        );
        // With a depth that shows the frames they differ in, they are two rows again.
        assert_eq!(shown_rows(&list, Some(4)).len(), 4);
    }
}
