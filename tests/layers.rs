//! The recorder's layers (docs/architecture.md, "The recorder's modules"), and the layer tests'
//! reader (`vramtrace_tests::layers`) on small made-up crates: it must see an
//! import that runs up and a circle, and must not take a comment, a string or a re-export for
//! an import.

use std::fs;
use std::path::Path;
use vramtrace_tests::layers::{declared, read, violations};
use vramtrace_tests::scratch;

fn write(root: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let p = root.join(path);
        fs::create_dir_all(p.parent().expect("a parent")).expect("create folder");
        fs::write(p, text).expect("write source");
    }
}

const LAYERS: &str = "\
## Layers

| layer | modules | what |
|---|---|---|
| 1 | `low`, `util` | the bottom |
| 2 | `high` | the top |
";

#[test]
fn an_import_up_the_layers_and_a_circle_are_reported_with_their_edges() {
    let root = scratch("layers-upward");
    write(
        &root,
        &[
            ("lib.rs", "mod low; mod util; mod high;"),
            ("low.rs", "use crate::high::Top;\npub struct Low;"),
            ("util/mod.rs", "mod a; mod b;"),
            ("util/a.rs", "pub fn f() { super::b::g() }"),
            ("util/b.rs", "use super::a;\npub fn g() { a::f() }"),
            ("high.rs", "pub struct Top(crate::low::Low);"),
        ],
    );
    let problems = violations(&read(&root), &declared(LAYERS, "Layers"));
    assert!(
        problems.contains(&"upward import: low (layer 1) -> high (layer 2)".to_string()),
        "{problems:?}"
    );
    assert!(
        problems.contains(&"circle of 2 files: util::a -> util::b, util::b -> util::a".to_string()),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("circle of 2 files: high -> low")),
        "{problems:?}"
    );
}

#[test]
fn comments_strings_and_reexports_of_descendants_are_no_imports() {
    let root = scratch("layers-clean");
    write(
        &root,
        &[
            ("lib.rs", "mod low; mod util; mod high;"),
            (
                "low.rs",
                "//! Read by [`crate::high::Top`].\n\
                 /* crate::high */\n\
                 pub const S: &str = \"crate::high::Top\";\n\
                 pub const C: char = '{';\n\
                 pub struct Low;",
            ),
            // `util` re-exports its child; `util::a` uses an item `util` itself defines.
            ("util/mod.rs", "mod a;\npub use a::f;\npub struct Shared;"),
            ("util/a.rs", "pub fn f() -> super::Shared { super::Shared }"),
            // Through the re-export, `high` imports `util::a`, and `util` stays clean.
            (
                "high.rs",
                "use crate::util::f;\npub struct Top(crate::low::Low);",
            ),
        ],
    );
    let graph = read(&root);
    assert!(graph.edges.contains(&("high".into(), "util::a".into())));
    assert!(!graph.edges.contains(&("util".into(), "util::a".into())));
    let problems = violations(&graph, &declared(LAYERS, "Layers"));
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn a_module_no_layer_names_is_reported() {
    let root = scratch("layers-undeclared");
    write(
        &root,
        &[
            ("lib.rs", "mod low; mod util; mod high; mod stray;"),
            ("low.rs", ""),
            ("util.rs", ""),
            ("high.rs", ""),
            ("stray.rs", ""),
        ],
    );
    let problems = violations(&read(&root), &declared(LAYERS, "Layers"));
    assert_eq!(problems, ["`stray` is in no layer"]);
}

#[test]
fn the_recorder_imports_only_down_its_declared_layers_and_in_no_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = fs::read_to_string(root.join("docs/architecture.md")).expect("docs/architecture.md");
    let layers = declared(&doc, "The recorder's modules");
    let problems = violations(&read(&root.join("recorder/src")), &layers);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
