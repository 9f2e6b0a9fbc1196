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
