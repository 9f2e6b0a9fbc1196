//! Making trace strings safe for SVG and HTML.
//!
//! Every string that comes from a trace (command lines, module paths, function names) passes
//! through here before it reaches a page: [`clean`] removes what XML cannot hold at all
//! (control characters; invalid UTF-8 was already replaced by U+FFFD when the trace was
//! decoded), and [`html`] escapes markup. Chart text goes through [`clean`] only, because the SVG
//! backend escapes `<`, `>`, `&` and quotes itself (plotters-svg `escape_and_push`).

/// `text` without the characters XML 1.0 forbids even escaped (C0 controls other than tab,
/// newline and carriage return, U+FFFE, U+FFFF) and without bidirectional overrides, which could
/// make a name display as another; each becomes U+FFFD.
pub fn clean(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => ' ',
            '\u{0}'..='\u{1f}' | '\u{7f}' | '\u{fffe}' | '\u{ffff}' => '\u{fffd}',
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => '\u{fffd}',
            c => c,
        })
        .collect()
}

/// `text` cleaned and escaped for HTML text and double- or single-quoted attribute values.
pub fn html(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in clean(text).chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A file-name-safe form of `text` (a policy name with options): letters, digits, `-`, `_`, `.`.
pub fn file_stem(text: &str) -> String {
    let s: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(60)
        .collect();
    if s.is_empty() { "_".to_string() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_names_is_escaped() {
        assert_eq!(
            html("<script>alert('x&y')</script>\""),
            "&lt;script&gt;alert(&#39;x&amp;y&#39;)&lt;/script&gt;&quot;"
        );
    }

    #[test]
    fn characters_xml_cannot_hold_are_replaced() {
        assert_eq!(
            clean("a\u{0}b\u{1b}[31m\u{202e}"),
            "a\u{fffd}b\u{fffd}[31m\u{fffd}"
        );
        let lossy = String::from_utf8_lossy(b"lib\xff\xfe.so").into_owned();
        assert_eq!(html(&lossy), "lib\u{fffd}\u{fffd}.so");
    }

    #[test]
    fn file_stems_have_no_path_characters() {
        assert_eq!(
            file_stem("pytorch:max_split_size_mb=128"),
            "pytorch_max_split_size_mb_128"
        );
        assert_eq!(file_stem("../../etc"), "______etc");
    }
}
