//! The analyzer's modules import only down the layer order docs/architecture.md declares
//! ("Layers of the analyzer library", the same table as `src/lib.rs`'s), and no files import
//! each other in a circle (`vramtrace_tests::layers` reads the graph).

use std::path::Path;
use vramtrace_tests::layers::{declared, read, violations};

const HEADING: &str = "Layers of the analyzer library";

fn crate_file(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn the_library_imports_only_down_its_declared_layers_and_in_no_circle() {
    let layers = declared(&crate_file("../docs/architecture.md"), HEADING);
    assert_eq!(
        declared(&crate_file("src/lib.rs"), HEADING),
        layers,
        "src/lib.rs and docs/architecture.md declare different layers"
    );
    let graph = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let problems = violations(&graph, &layers);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every `.rs` file under `dir`, with its path relative to `src/`.
fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
            let name = p.strip_prefix(&src).unwrap().display().to_string();
            out.push((name, std::fs::read_to_string(&p).unwrap()));
        }
    }
}

#[test]
fn frees_are_matched_in_one_place_and_the_views_read_the_table_not_the_events() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    // The one per-event match, and the passes that go through it: the table's builder, the
    // request model's and the streaming device peak.
    let mut matching: Vec<&str> = files
        .iter()
        .filter(|(_, text)| text.contains("ObjectKey::of(") || text.contains("Matcher<"))
        .map(|(name, _)| name.as_str())
        .collect();
    matching.sort_unstable();
    assert_eq!(
        matching,
        ["model/lifetimes.rs", "model/live.rs", "model/table.rs"]
    );
    // The views take the table's rows and steps; none walks the events for live memory.
    for view in [
        "summary.rs",
        "failures.rs",
        "diff.rs",
        "interop/export_perfetto.rs",
    ] {
        let (_, text) = files.iter().find(|(name, _)| name == view).unwrap();
        assert!(!text.contains(".events()"), "{view} reads the events");
    }
}
