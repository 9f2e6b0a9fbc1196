//! What `summary` and `tune`'s search say of the trace, for the page: per section the memory
//! outside the pool by library and the driver's own count, and the headline's answers.

use crate::answers::Answers;
use crate::report::data::{Headline, ReportData};
use crate::summary::Summary;
use crate::tune::{Grid, Tune};

/// Fills each section's `outside_by_library` and `driver_count` from its group of `summary`.
pub fn groups(data: &mut ReportData, summary: &Summary) {
    for section in &mut data.sections {
        if let Some(g) = summary
            .groups
            .iter()
            .find(|g| (g.pid, g.device) == (section.pid, section.device))
        {
            section.outside_by_library = g.outside_by_library.clone();
            section.driver_count = g.driver_count.clone();
        }
    }
}

/// The headline's answers from `summary` and the search `tune` over `grid`.
pub fn headline(summary: &Summary, tune: &Tune, grid: Grid) -> Headline {
    Headline {
        answers: Answers::of(summary, tune),
        tried: tune.tried,
        grid,
    }
}
