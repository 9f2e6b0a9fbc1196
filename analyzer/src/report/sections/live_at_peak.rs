//! What is live at the peak, summed by stack (the icicle of `charts::live_at_peak` draws it).

use crate::report::data::{LiveAtPeak, LiveStack, Peak};
use crate::report::trace::Instance;
use crate::sums::SaturatingSum;
use std::collections::HashMap;

/// Stacks kept by name; smaller ones are summed into one "other stacks" entry.
pub const MAX_STACKS: usize = 400;
/// The allocations live right after step `peak_step`, summed by stack, largest first.
/// `frames` names a stack's frames, outermost first.
pub fn collect(
    instance: &Instance,
    peak: Peak,
    peak_step: Option<usize>,
    frames: &mut dyn FnMut(u32) -> Vec<String>,
) -> LiveAtPeak {
    let Some(p) = peak_step else {
        return LiveAtPeak::default();
    };
    let mut by_stack: HashMap<u32, u64> = HashMap::new();
    for (stack, size) in instance.live_after(p) {
        let e = by_stack.entry(stack).or_default();
        *e = e.saturating_add(size);
    }
    let mut sums: Vec<(u32, u64)> = by_stack.into_iter().collect();
    sums.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut stacks: Vec<LiveStack> = sums
        .iter()
        .take(MAX_STACKS)
        .map(|&(stack, bytes)| LiveStack {
            frames: frames(stack),
            bytes,
        })
        .collect();
    if sums.len() > MAX_STACKS {
        let rest = &sums[MAX_STACKS..];
        stacks.push(LiveStack {
            frames: vec![format!("({} smaller stacks)", rest.len())],
            bytes: rest.iter().map(|r| r.1).saturating_sum(),
        });
    }
    LiveAtPeak { peak, stacks }
}
