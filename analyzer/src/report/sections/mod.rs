//! The sections' data that comes from the trace pass alone (no allocator): live requested
//! bytes over time and their peak, the allocation timelines, what is live at the peak, and the
//! histograms of sizes and lifetimes. [`super::build`] collects them into
//! [`super::data::ReportData`]; the charts of [`super::charts`] only draw what is there.

pub mod histogram;
pub mod live_at_peak;
pub mod memory;
pub mod timeline;
