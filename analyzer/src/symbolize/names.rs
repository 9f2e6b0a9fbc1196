//! Stack frames as the views that work on text name them (summary, failures, diff, the
//! exporters): the [`Symbolizer`]'s names, so every view names a frame the same way.

use super::{ModuleFiles, NamedFrame, Symbolizer};
use std::borrow::Cow;
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
/// `site-packages/` or `dist-packages/` (`--json` keeps the full path); a backward marker
/// ("backward of <frame>") keeps its words and shortens the frame it names.
pub fn short_frame(frame: &str) -> Cow<'_, str> {
    const BACKWARD_OF: &str = "backward of ";
    let (prefix, path) = match frame.strip_prefix(BACKWARD_OF) {
        Some(rest) => (BACKWARD_OF, rest),
        None => ("", frame),
    };
    let short = ["site-packages/", "dist-packages/"]
        .iter()
        .filter_map(|m| path.rfind(m).map(|i| &path[i + m.len()..]))
        .min_by_key(|s| s.len())
        .unwrap_or(path);
    match prefix.is_empty() {
        true => Cow::Borrowed(short),
        false => Cow::Owned(format!("{prefix}{short}")),
    }
}

/// Why an allocation has no stack, and which recording flag names it: the recorder's default
/// (`--stacks python`) captures Python frames, and threads without any (PyTorch's autograd
/// engine threads, which allocate the gradients; a library's worker threads) give none. An
/// engine thread's allocation is named "backward of <line>" when the trace shows the
/// `backward()` call it ran for ([`crate::backward`]); these were not.
pub const NO_STACK_WHY: &str = "allocated where no Python frame was running (a library's worker \
                            thread, or PyTorch's autograd thread in a backward pass whose \
                            backward() call the trace does not show), or recorded with --stacks \
                            none: record with the defaults to name backward passes, or with \
                            --stacks mixed for the native frames";

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
