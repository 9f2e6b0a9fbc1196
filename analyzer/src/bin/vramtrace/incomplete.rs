//! Every command's word on an incomplete trace ([`Incomplete`]): a warning on stderr, and an
//! `incomplete` object in `--json` (left out for complete traces, whose JSON is unchanged).

use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use vramtrace::completeness::Incomplete;
use vramtrace_format::Layout;

/// A command's JSON with what is incomplete about its traces, keyed by file.
#[derive(Serialize)]
pub struct Flagged<'a, T> {
    #[serde(flatten)]
    pub report: &'a T,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub incomplete: BTreeMap<String, Incomplete>,
}

impl<'a, T> Flagged<'a, T> {
    /// `report` of the traces at `files` with these layouts; warns on stderr of each
    /// incomplete one.
    pub fn new(report: &'a T, files: &[(&Path, &Layout)]) -> Flagged<'a, T> {
        let incomplete = files
            .iter()
            .filter_map(|(path, layout)| {
                let name = path.display().to_string();
                let i = Incomplete::of(layout)?;
                eprintln!("vramtrace: warning: {}", i.warning(&name));
                Some((name, i))
            })
            .collect();
        Flagged { report, incomplete }
    }
}
