//! Stack frames as the views that work on text name them (summary, failures, diff, the
//! exporters): the [`Symbolizer`]'s names, so every view names a frame the same way.

use super::{ModuleFiles, NamedFrame, Symbolizer};
use std::cell::RefCell;
use vramtrace_format::{NO_STACK, Tables};

/// Readable stack frames for the views that work on text (summary, diff, the exporters): the
/// [`Symbolizer`]'s names, so every view names a frame the same way.
pub struct StackNames<'a, 'f> {
    symbolizer: RefCell<Symbolizer<'a, 'f>>,
}

impl<'a, 'f> StackNames<'a, 'f> {
    /// Names the frames of `tables`, reading native modules' files through `files`.
    pub fn new(tables: &'a Tables, files: &'f mut dyn ModuleFiles) -> StackNames<'a, 'f> {
        StackNames {
            symbolizer: RefCell::new(Symbolizer::new(tables, files)),
        }
    }

    /// A stack's frames, named, innermost first; empty for [`NO_STACK`] or an unknown id.
    pub fn named(&self, stack: u32) -> Vec<NamedFrame> {
        if stack == NO_STACK {
            return Vec::new();
        }
        self.symbolizer.borrow_mut().frames(stack)
    }

    /// A stack as text frames, innermost first; empty for [`NO_STACK`] or an unknown id.
    pub fn frames(&self, stack: u32) -> Vec<String> {
        self.named(stack).iter().map(NamedFrame::text).collect()
    }
}

/// A frame shortened for text output: Python package paths lose everything up to
/// `site-packages/` or `dist-packages/` (`--json` keeps the full path).
pub fn short_frame(frame: &str) -> &str {
    ["site-packages/", "dist-packages/"]
        .iter()
        .filter_map(|m| frame.rfind(m).map(|i| &frame[i + m.len()..]))
        .min_by_key(|s| s.len())
        .unwrap_or(frame)
}

/// Why an allocation has no stack, and which recording flag names it: the recorder's default
/// (`--stacks python`) captures Python frames, and threads without any (PyTorch's autograd
/// thread, which allocates the gradients; a library's worker threads) give none.
pub const NO_STACK_WHY: &str = "allocated where no Python frame was running, such as PyTorch's \
                            autograd thread, or recorded with --stacks none: record with \
                            --stacks mixed to name the native frames";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_paths_are_shortened_for_text() {
        assert_eq!(
            short_frame("/opt/venv/lib/python3.12/site-packages/torch/nn/linear.py:134 forward"),
            "torch/nn/linear.py:134 forward"
        );
        assert_eq!(
            short_frame("/work/train.py:5 step"),
            "/work/train.py:5 step"
        );
        assert_eq!(short_frame("libc10_cuda.so+0x10"), "libc10_cuda.so+0x10");
    }
}
