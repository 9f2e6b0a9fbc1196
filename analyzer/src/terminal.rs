//! Text from a trace made safe to print on a terminal.
//!
//! Frame names, module paths, command lines and environment values come from the traced
//! program, or from a crafted trace or snapshot. Printed raw, an ESC sequence can clear the
//! screen or set the window title, a carriage return can overwrite what a line said, and a bidi
//! override can make a line read differently from what it holds. Every such character is shown
//! instead as a `\u{..}` escape, as the HTML report escapes markup. Line breaks and tabs stay:
//! the commands' own output is made of them.
//!
//! JSON output is not passed through [`escape`] (its `\u{..}` is no JSON escape, and a
//! backslash it adds would break the document): [`json_pretty`] writes those characters as
//! JSON's own `\uXXXX` escapes, so the document parses to exactly the strings of the trace and
//! still prints safely.

use serde::Serialize;
use serde_json::ser::{Formatter, PrettyFormatter};
use std::borrow::Cow;
use std::io;

/// Whether `c` controls the terminal rather than printing: C0 and C1 controls but line feed
/// and tab, DEL, and the Unicode bidi embedding, override, isolate and mark characters
/// (Unicode Standard Annex #9, <https://www.unicode.org/reports/tr9/>).
pub fn controls_the_terminal(c: char) -> bool {
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

/// serde_json's pretty printing, with every character that controls the terminal and that
/// serde_json writes as it is (DEL, C1 controls, bidi marks; it escapes C0 controls itself) written
/// as a `\uXXXX` escape. Each such character is in the Basic Multilingual Plane, so one escape
/// holds it.
struct TerminalSafe(PrettyFormatter<'static>);

impl Formatter for TerminalSafe {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut rest = fragment;
        while let Some((at, c)) = rest.char_indices().find(|&(_, c)| controls_the_terminal(c)) {
            writer.write_all(&rest.as_bytes()[..at])?;
            write!(writer, "\\u{:04x}", c as u32)?;
            rest = &rest[at + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }

    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object_value(w)
    }
}

/// `value` as pretty JSON that is safe to print on a terminal: valid JSON whose strings parse
/// back to exactly the value's, with no character that controls the terminal written raw.
pub fn json_pretty<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let mut out = Vec::with_capacity(4096);
    let mut ser =
        serde_json::Serializer::with_formatter(&mut out, TerminalSafe(PrettyFormatter::new()));
    value.serialize(&mut ser)?;
    // Only UTF-8 was written: serde_json's own output and whole characters of the value's
    // strings, with ASCII escapes between them.
    String::from_utf8(out).map_err(serde::ser::Error::custom)
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

    #[test]
    fn json_escapes_terminal_controls_as_json_and_parses_back_to_the_same_string() {
        let hostile =
            "del\u{7f} c1\u{9b}31m bidi\u{202e}x\u{2066} quote\" back\\ nul\0 esc\u{1b}[2J é名";
        let json = json_pretty(&[hostile]).unwrap();
        assert!(!json.chars().any(controls_the_terminal), "{json:?}");
        assert!(json.contains("\\u007f") && json.contains("\\u009b") && json.contains("\\u202e"));
        let back: Vec<String> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, [hostile]);
    }
}
