//! `vramtrace report`: one self-contained interactive HTML page, and SVG charts.
//!
//! Sans-IO in layers: [`trace::TracePass`] walks the allocations of the replay model's
//! request streams; [`sections`] computes from it, from the policies' replays ([`from_replay`])
//! and from the summary every data section of [`data::ReportData`], once, small and already
//! downsampled. Both outputs read those sections and compute nothing of their own:
//! [`page_data`] encodes them as the page's embedded JSON and [`page::html_page`] writes the
//! page, and each chart of [`charts::REGISTRY`] draws one as an SVG. [`generate::generate`] runs
//! it all from what [`input::ReportInput`] holds of a trace (never its events); the `vramtrace
//! report` command only reads the inputs and writes the files.

pub mod charts;
pub mod data;
pub mod escape;
pub mod from_replay;
pub mod generate;
pub mod input;
pub mod job;
pub mod largest;
pub mod page;
pub mod page_data;
pub mod sections;
pub mod trace;
