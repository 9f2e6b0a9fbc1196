//! The module graph of a crate, read from its sources, checked against the layer order its
//! documentation declares (docs/architecture.md, "Layers").
//!
//! A file is one node, named by its module path (`model::live` for `src/model/live.rs`, the
//! crate root is `crate`). An edge is a path a file names that leads into another file:
//! `use crate::...`, `use super::...`, a relative `use child::...`, and the same paths written
//! inline in code or macros (`crate::units::bytes(n)`, `$crate::ring::push`). A path that
//! reaches an item a module re-exports (`pub use engine::replay;` in `replay/mod.rs`) leads to
//! the file that defines it, so a re-export hides no edge; a module's `pub use` of its own
//! descendants and its `mod` declarations are no edges themselves. Comments, strings and character
//! literals are left out, so a doc link to `crate::summary::Summary` is no import.
//!
//! Two rules follow: a file imports no file of a later layer (the top-level module decides a
//! file's layer; files of one layer may import each other), and no files import each other
//! in a circle, inside one module or across.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The files of a crate and the imports between them.
#[derive(Debug, Default)]
pub struct Graph {
    /// Module path → file.
    pub files: BTreeMap<String, PathBuf>,
    /// (importing module, imported module).
    pub edges: BTreeSet<(String, String)>,
}

/// One parsed `use` or inline path: absolute module segments (the crate root is none).
struct Named {
    segments: Vec<String>,
    /// From a `pub use`: another file naming the item through this module is led on to it.
    public: bool,
    /// A `pub use` of the module's own descendant (`pub use engine::replay;` in
    /// `replay/mod.rs`): a re-export, no edge.
    reexport: bool,
}

/// Reads every `.rs` file under `src` (leaving out `src/bin/`, the binaries' own crates).
pub fn read(src: &Path) -> Graph {
    let mut sources = BTreeMap::new();
    collect(src, src, &mut sources);
    let files: BTreeMap<String, PathBuf> = sources
        .iter()
        .map(|(m, (p, _))| (m.clone(), p.clone()))
        .collect();
    let modules: BTreeSet<Vec<String>> = files.keys().map(|m| segments_of(m)).collect();
    let mut named: BTreeMap<Vec<String>, Vec<Named>> = BTreeMap::new();
    for (m, (_, text)) in &sources {
        let here = segments_of(m);
        named.insert(here.clone(), paths_in(&strip(text), &here, &modules));
    }
    let mut edges = BTreeSet::new();
    for (here, list) in &named {
        for n in list.iter().filter(|n| !n.reexport) {
            let to = resolve(&n.segments, &modules, &named, 0);
            if &to != here {
                edges.insert((name_of(here), name_of(&to)));
            }
        }
    }
    Graph { files, edges }
}

fn collect(root: &Path, dir: &Path, out: &mut BTreeMap<String, (PathBuf, String)>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p != root.join("bin") {
                collect(root, &p, out);
            }
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p.strip_prefix(root).expect("under the root");
            let mut segs: Vec<String> = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                segs.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                segs.pop();
            }
            let text = fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            out.insert(name_of(&segs), (p, text));
        }
    }
}

fn name_of(segments: &[String]) -> String {
    if segments.is_empty() {
        "crate".to_string()
    } else {
        segments.join("::")
    }
}

fn segments_of(name: &str) -> Vec<String> {
    if name == "crate" {
        Vec::new()
    } else {
        name.split("::").map(str::to_string).collect()
    }
}

/// `text` without comments, string and character literals (each replaced by a space).
pub fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            // Block comments nest in Rust.
            let (mut depth, mut j) = (0usize, 0usize);
            while j < rest.len() {
                if rest[j..].starts_with("/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with("*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += rest[j..].chars().next().map_or(1, char::len_utf8);
                }
            }
            i += j;
            out.push(' ');
        } else if let Some(len) = raw_string(rest) {
            i += len;
            out.push(' ');
        } else if b[i] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest.as_bytes()[j] != b'"' {
                j += if rest.as_bytes()[j] == b'\\' { 2 } else { 1 };
            }
            i += (j + 1).min(rest.len());
            out.push(' ');
        } else if let Some(len) = char_literal(rest) {
            i += len;
            out.push(' ');
        } else {
            let c = rest.chars().next().expect("not at the end");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The length of a raw string literal (`r"..."`, `r#"..."#`, `br"..."`) at the start of `s`.
fn raw_string(s: &str) -> Option<usize> {
    let after_prefix = s.strip_prefix("br").or_else(|| s.strip_prefix('r'))?;
    let hashes = after_prefix.bytes().take_while(|&c| c == b'#').count();
    let body = after_prefix[hashes..].strip_prefix('"')?;
    let close = format!("\"{}", "#".repeat(hashes));
    let end = body.find(&close)?;
    Some(s.len() - body.len() + end + close.len())
}

/// The length of a character literal (`'a'`, `'\n'`, `'\u{1b}'`, `b'{'`) at the start of `s`,
/// not a lifetime (`'a`).
fn char_literal(s: &str) -> Option<usize> {
    let body = s.strip_prefix("b'").or_else(|| s.strip_prefix('\''))?;
    let prefix = s.len() - body.len();
    let inner = if let Some(esc) = body.strip_prefix('\\') {
        if esc.starts_with("u{") {
            esc.find('}')? + 2
        } else {
            1 + esc.chars().next()?.len_utf8()
        }
    } else {
        body.chars().next()?.len_utf8()
    };
    body[inner..]
        .starts_with('\'')
        .then_some(prefix + inner + 1)
}

/// The module paths a file (at `here`) names, made absolute. Inline `mod name { ... }` blocks
/// shift what `super` and `self` mean inside them.
fn paths_in(code: &str, here: &[String], modules: &BTreeSet<Vec<String>>) -> Vec<Named> {
    let tokens = tokens(code);
    let mut out = Vec::new();
    // Inline modules entered: (name, brace depth at which it closes).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].as_str();
        let current: Vec<String> = here
            .iter()
            .cloned()
            .chain(inline.iter().map(|(n, _)| n.clone()))
            .collect();
        match t {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            "mod" if tokens.get(i + 2).is_some_and(|t| t == "{") => {
                inline.push((tokens[i + 1].clone(), depth));
                depth += 1;
                i += 3;
                continue;
            }
            "use" => {
                let public = i > 0 && is_visibility_end(&tokens, i);
                let end = tokens[i..]
                    .iter()
                    .position(|t| t == ";")
                    .map_or(tokens.len(), |p| i + p);
                for tree in expand(&tokens[i + 1..end]) {
                    if let Some(segments) = absolute(&tree, &current, modules) {
                        let reexport = public
                            && segments.len() > here.len()
                            && segments[..here.len()] == *here;
                        out.push(Named {
                            segments,
                            public,
                            reexport,
                        });
                    }
                }
                i = end + 1;
                continue;
            }
            "crate" | "super" | "$crate"
                if tokens.get(i + 1).is_some_and(|t| t == "::")
                    && !(i > 0 && tokens[i - 1] == "::") =>
            {
                let mut path = vec![t.to_string()];
                let mut j = i + 1;
                while tokens.get(j).is_some_and(|t| t == "::")
                    && tokens.get(j + 1).is_some_and(|t| is_ident(t))
                {
                    path.push(tokens[j + 1].clone());
                    j += 2;
                }
                if let Some(segments) = absolute(&path, &current, modules) {
                    out.push(Named {
                        segments,
                        public: false,
                        reexport: false,
                    });
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Whether the `use` at `tokens[i]` follows a visibility (`pub`, `pub(crate)`, `pub(super)`).
fn is_visibility_end(tokens: &[String], i: usize) -> bool {
    match tokens[i - 1].as_str() {
        "pub" => true,
        ")" => i >= 4 && tokens[i - 4] == "pub",
        _ => false,
    }
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && t.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// Identifiers (with `$crate`), `::`, and single punctuation characters.
fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' || (c == '$' && i + 1 < chars.len()) {
            let start = i;
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push("::".to_string());
            i += 2;
        } else {
            out.push(c.to_string());
            i += 1;
        }
    }
    out
}

/// A use tree's paths, braces expanded (`a::{b, c::d}` → `a::b`, `a::c::d`; `self` in a group
/// is its prefix; `as` renames and `*` globs end a path).
fn expand(tree: &[String]) -> Vec<Vec<String>> {
    fn walk(tree: &[String], prefix: &[String], out: &mut Vec<Vec<String>>) {
        // Split the group at top-level commas.
        let mut depth = 0usize;
        let mut start = 0;
        for (k, t) in tree.iter().enumerate() {
            match t.as_str() {
                "{" => depth += 1,
                "}" => depth -= 1,
                "," if depth == 0 => {
                    one(&tree[start..k], prefix, out);
                    start = k + 1;
                }
                _ => {}
            }
        }
        one(&tree[start..], prefix, out);
    }
    fn one(item: &[String], prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        for (k, t) in item.iter().enumerate() {
            match t.as_str() {
                "::" => {}
                "{" => {
                    let close =
                        item.len() - 1 - item.iter().rev().position(|t| t == "}").unwrap_or(0);
                    walk(&item[k + 1..close], &path, out);
                    return;
                }
                "as" | "*" => break,
                "self" if k > 0 => {}
                _ => path.push(t.clone()),
            }
        }
        if !path.is_empty() {
            out.push(path);
        }
    }
    let mut out = Vec::new();
    walk(tree, &[], &mut out);
    out
}

/// `path` as absolute module segments, from the module `current`: `crate::` and `$crate::`
/// from the root, `super::` from the parent, `self::` or a child module's name from `current`.
/// `None` for paths into other crates or to local items.
fn absolute(
    path: &[String],
    current: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> Option<Vec<String>> {
    let first = path.first()?;
    let (mut base, rest): (Vec<String>, &[String]) = match first.as_str() {
        "crate" | "$crate" => (Vec::new(), &path[1..]),
        "self" => (current.to_vec(), &path[1..]),
        "super" => {
            let mut base = current.to_vec();
            let mut k = 0;
            while path.get(k).is_some_and(|t| t == "super") {
                base.pop()?;
                k += 1;
            }
            (base, &path[k..])
        }
        _ => {
            let mut child = current.to_vec();
            child.push(first.clone());
            if !modules.contains(&child) {
                return None;
            }
            (current.to_vec(), path)
        }
    };
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The file a path leads to: its longest prefix that is a file, followed through the
/// re-exports of that file when the rest names an item it re-exports.
fn resolve(
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
    named: &BTreeMap<Vec<String>, Vec<Named>>,
    hops: usize,
) -> Vec<String> {
    let mut k = path.len();
    while !modules.contains(&path[..k]) {
        k -= 1;
    }
    let module = path[..k].to_vec();
    let (Some(item), true) = (path.get(k), hops < 8) else {
        return module;
    };
    let reexported = named.get(&module).into_iter().flatten().find(|n| {
        n.public
            && n.segments.last() == Some(item)
            && n.segments[..n.segments.len() - 1] != module[..]
    });
    match reexported {
        Some(n) => resolve(&n.segments, modules, named, hops + 1),
        None => module,
    }
}

/// The layers a markdown table declares under the heading `heading` (any level): the rows
/// whose first cell is a number, each with the backquoted names of its second cell. `text`
/// may be a Rust file's `//!` documentation.
pub fn declared(text: &str, heading: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = text
        .lines()
        .map(|l| {
            let l = l.trim_start();
            l.strip_prefix("//!")
                .map_or(l, |d| d.strip_prefix(' ').unwrap_or(d))
        })
        .collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with('#') && l.trim_start_matches('#').trim() == heading)
        .unwrap_or_else(|| panic!("no heading {heading:?}"));
    let mut layers = Vec::new();
    for l in &lines[start + 1..] {
        if l.starts_with('#') {
            break;
        }
        let cells: Vec<&str> = l.split('|').map(str::trim).collect();
        if cells.len() > 3 && cells[0].is_empty() && cells[1].parse::<u32>().is_ok() {
            layers.push(
                cells[2]
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_string)
                    .collect(),
            );
        }
    }
    assert!(!layers.is_empty(), "no layer table under {heading:?}");
    layers
}

/// What breaks the rules, one line each: a top-level module no layer names (or two do), an
/// import into a later layer, and every circle of files with the edges that close it.
pub fn violations(graph: &Graph, layers: &[Vec<String>]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut layer_of: BTreeMap<&str, usize> = BTreeMap::new();
    for (k, layer) in layers.iter().enumerate() {
        for m in layer {
            if layer_of.insert(m, k).is_some() {
                problems.push(format!("`{m}` is in two layers"));
            }
        }
    }
    let top = |m: &str| m.split("::").next().unwrap_or(m).to_string();
    let tops: BTreeSet<String> = graph
        .files
        .keys()
        .filter(|m| *m != "crate")
        .map(|m| top(m))
        .collect();
    for t in &tops {
        if !layer_of.contains_key(t.as_str()) {
            problems.push(format!("`{t}` is in no layer"));
        }
    }
    for m in layer_of.keys() {
        if !tops.contains(*m) {
            problems.push(format!("layer module `{m}` is no module of the crate"));
        }
    }
    for (from, to) in &graph.edges {
        let (Some(a), Some(b)) = (
            layer_of.get(top(from).as_str()),
            layer_of.get(top(to).as_str()),
        ) else {
            continue;
        };
        if b > a {
            problems.push(format!(
                "upward import: {from} (layer {}) -> {to} (layer {})",
                a + 1,
                b + 1
            ));
        }
    }
    for circle in circles(&graph.edges) {
        let inside: Vec<String> = graph
            .edges
            .iter()
            .filter(|(a, b)| circle.contains(a) && circle.contains(b))
            .map(|(a, b)| format!("{a} -> {b}"))
            .collect();
        problems.push(format!(
            "circle of {} files: {}",
            circle.len(),
            inside.join(", ")
        ));
    }
    problems
}

/// The strongly connected components of more than one node (Tarjan's algorithm).
pub fn circles(edges: &BTreeSet<(String, String)>) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        next: BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.next.get(v).cloned().unwrap_or_default() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        next: BTreeMap::new(),
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for (a, b) in edges {
        s.next.entry(a).or_default().push(b);
    }
    let nodes: Vec<&str> = s.next.keys().copied().collect();
    for v in nodes {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.found
}
