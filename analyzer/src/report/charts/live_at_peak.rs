//! What is live at the peak, by allocating stack: an icicle chart (the outermost frame
//! on top, each row splitting its bytes among the frames it called), widest first. It answers
//! "what do I shrink?".

use super::style;
use super::{Svg, svg};
use crate::report::data::{LiveAtPeak, Section};
use crate::report::escape::clean;
use crate::units::bytes;
use plotters::prelude::*;

/// Rows of the icicle below the common outer frames.
const MAX_DEPTH: usize = 14;
const ROW: i32 = 24;

/// A node of the icicle: a frame reached through the frames above it.
#[derive(Debug)]
struct Node {
    name: String,
    bytes: u64,
    children: Vec<usize>,
}

/// The call tree of the live stacks; node 0 is the root. Stacks without frames hang under
/// "(no stack recorded)".
fn tree(live: &LiveAtPeak) -> Vec<Node> {
    let mut nodes = vec![Node {
        name: String::new(),
        bytes: 0,
        children: Vec::new(),
    }];
    let no_stack = ["(no stack recorded)".to_string()];
    for s in &live.stacks {
        nodes[0].bytes = nodes[0].bytes.saturating_add(s.bytes);
        let mut at = 0;
        let frames = if s.frames.is_empty() {
            &no_stack[..]
        } else {
            &s.frames[..]
        };
        for f in frames {
            let found = nodes[at]
                .children
                .iter()
                .copied()
                .find(|&c| nodes[c].name == *f);
            at = match found {
                Some(c) => c,
                None => {
                    nodes.push(Node {
                        name: f.clone(),
                        bytes: 0,
                        children: Vec::new(),
                    });
                    let c = nodes.len() - 1;
                    nodes[at].children.push(c);
                    c
                }
            };
            nodes[at].bytes = nodes[at].bytes.saturating_add(s.bytes);
        }
    }
    let sizes: Vec<u64> = nodes.iter().map(|n| n.bytes).collect();
    for n in &mut nodes {
        n.children
            .sort_by(|&a, &b| sizes[b].cmp(&sizes[a]).then(a.cmp(&b)));
    }
    nodes
}

/// Frames every live stack shares, which the chart skips: (their count, the node below them).
fn common_prefix(nodes: &[Node]) -> (usize, usize) {
    let (mut skipped, mut at) = (0, 0);
    while nodes[at].children.len() == 1 && !nodes[nodes[at].children[0]].children.is_empty() {
        at = nodes[at].children[0];
        skipped += 1;
    }
    (skipped, at)
}

/// Rows below and including `node`.
fn depth(nodes: &[Node], node: usize) -> usize {
    1 + nodes[node]
        .children
        .iter()
        .map(|&c| depth(nodes, c))
        .max()
        .unwrap_or(0)
}

fn frame_color(name: &str) -> RGBColor {
    // A warm palette, the colour fixed by the name so a frame looks the same everywhere.
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let r = 205 + (h % 50) as u8;
    let g = 90 + ((h >> 8) % 130) as u8;
    let b = 40 + ((h >> 16) % 50) as u8;
    RGBColor(r, g, b)
}

pub struct LiveAtPeakChart;

impl super::Chart for LiveAtPeakChart {
    fn name(&self) -> &'static str {
        "live-at-peak"
    }
    fn caption(&self) -> &'static str {
        "What was live at the moment of the peak, by the call stack that allocated it: the \
         widest boxes are what to shrink first."
    }
    fn scope(&self) -> super::Scope {
        super::Scope::Section
    }
    fn render(&self, at: &super::Target) -> Svg {
        render(at.section(), at.buckets().start_ns)
    }
}

pub fn render(section: &Section, start_ns: u64) -> Svg {
    let live = &section.live_at_peak;
    let nodes = tree(live);
    let (skipped, top) = common_prefix(&nodes);
    let rows = depth(&nodes, top).min(MAX_DEPTH + 1);
    let height = 70 + ROW as u32 * rows.max(1) as u32;
    let title = format!(
        "Live at the peak ({} at {} since the first event), by stack: {}",
        bytes(live.peak.bytes),
        crate::units::duration(live.peak.time_ns.saturating_sub(start_ns)),
        section.label()
    );
    svg((style::WIDTH, height), |root| {
        let root = root.titled(&title, (style::FONT, style::TITLE_SIZE))?;
        let (w, _) = root.dim_in_pixel();
        let (x0, width) = (12i32, f64::from(w) - 24.0);
        let note = if skipped > 0 {
            format!(
                "Each box is a frame, as wide as the live bytes allocated through it; callers above callees. {skipped} outer frames shared by every stack are not shown."
            )
        } else {
            "Each box is a frame, as wide as the live bytes allocated through it; callers above callees.".to_string()
        };
        root.draw(&Text::new(
            note,
            (x0, 6),
            (style::FONT, 13.0).into_font().color(&RGBColor(80, 80, 80)),
        ))?;
        if nodes[0].bytes == 0 {
            root.draw(&Text::new(
                "Nothing was live.",
                (x0, 40),
                (style::FONT, 14.0).into_font().color(&BLACK),
            ))?;
            return Ok(());
        }
        let total = nodes[top].bytes.max(1) as f64;
        // Row 0: everything; then breadth-first, each node placed inside its parent.
        let mut level: Vec<(usize, f64)> = vec![(top, 0.0)];
        for depth in 0..=MAX_DEPTH {
            let y = 30 + depth as i32 * ROW;
            let mut next = Vec::new();
            for &(id, left) in &level {
                let n = &nodes[id];
                let w = n.bytes as f64 / total * width;
                if w < 1.0 {
                    continue;
                }
                let (a, b) = (x0 + left as i32, x0 + (left + w) as i32);
                let color = if depth == 0 {
                    RGBColor(150, 150, 150)
                } else {
                    frame_color(&n.name)
                };
                root.draw(&Rectangle::new(
                    [(a, y), (b.max(a + 1), y + ROW - 2)],
                    color.filled(),
                ))?;
                let label = if depth == 0 {
                    format!("all live memory: {}", bytes(n.bytes))
                } else {
                    format!("{} ({})", clean(&n.name), bytes(n.bytes))
                };
                let chars = style::fit_chars(w - 6.0, 12.0);
                if chars >= 4 {
                    root.draw(&Text::new(
                        style::truncate(&label, chars),
                        (a + 3, y + 5),
                        (style::FONT, 12.0).into_font().color(&BLACK),
                    ))?;
                }
                let mut child_left = left;
                for &c in &n.children {
                    next.push((c, child_left));
                    child_left += nodes[c].bytes as f64 / total * width;
                }
            }
            level = next;
            if level.is_empty() {
                break;
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::data::{LiveStack, Peak};

    fn stack(frames: &[&str], bytes: u64) -> LiveStack {
        LiveStack {
            frames: frames.iter().map(|s| s.to_string()).collect(),
            bytes,
        }
    }

    #[test]
    fn the_tree_sums_bytes_through_shared_callers() {
        let live = LiveAtPeak {
            peak: Peak::default(),
            stacks: vec![
                stack(&["main", "train", "forward"], 300),
                stack(&["main", "train", "backward"], 500),
                stack(&[], 7),
            ],
        };
        let nodes = tree(&live);
        assert_eq!(nodes[0].bytes, 807);
        let main = nodes[0].children[0];
        assert_eq!(
            (nodes[main].name.as_str(), nodes[main].bytes),
            ("main", 800)
        );
        let train = nodes[main].children[0];
        let first = nodes[train].children[0];
        assert_eq!(nodes[first].name, "backward");
        // Two roots ("main" and the no-stack node): nothing common to skip.
        assert_eq!(common_prefix(&nodes), (0, 0));
    }
}
