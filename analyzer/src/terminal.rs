//! Text from a trace made safe to print on a terminal.
//!
//! Frame names, module paths, command lines and environment values come from the traced
//! program, or from a crafted trace or snapshot. Printed raw, an ESC sequence can clear the
//! screen or set the window title, a carriage return can overwrite what a line said, and a bidi
//! override can make a line read differently from what it holds. Every such character is shown
//! instead as a `\u{..}` escape, as the HTML report escapes markup. Line breaks and tabs stay:
//! the commands' own output is made of them.

use std::borrow::Cow;

/// Whether `c` controls the terminal rather than printing: C0 and C1 controls but line feed
/// and tab, DEL, and the Unicode bidi embedding, override, isolate and mark characters
/// (Unicode Standard Annex #9, <https://www.unicode.org/reports/tr9/>).
fn controls_the_terminal(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
            true
        }
        _ => false,
    }
}

/// `text` with every character that controls the terminal written as `\u{XX}`; borrowed when
/// there is none (the usual case).
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(controls_the_terminal) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if controls_the_terminal(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_and_its_line_breaks_pass_unchanged() {
        let text = "step (train.py:57)\n\tlibc10_cuda.so+0x2f4ca  ünïcode 名前\n";
        assert!(matches!(escape(text), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn escapes_carriage_returns_bidi_overrides_and_c1_controls_are_shown_not_obeyed() {
        assert_eq!(
            escape("a\u{1b}]0;pwned\u{7}b\u{1b}[2J"),
            "a\\u{1b}]0;pwned\\u{7}b\\u{1b}[2J"
        );
        assert_eq!(escape("ok\rfake"), "ok\\u{d}fake");
        assert_eq!(escape("nul\0"), "nul\\u{0}");
        assert_eq!(escape("abc\u{202e}fdp.exe"), "abc\\u{202e}fdp.exe");
        assert_eq!(escape("\u{9b}31m"), "\\u{9b}31m");
        assert_eq!(escape("\u{2066}x\u{2069}"), "\\u{2066}x\\u{2069}");
    }
}
