//! The page of a job directory, bounded whatever the number of ranks: full detail (facts,
//! views, policy tables) for at most [`DETAILED_RANKS`] ranks, the ones that say most about the
//! job (the rank that sets its peak, the smallest, the median, then those farthest from the
//! median), and one table row for every rank.
//!
//! A full report costs about 0.7 MB of page and 3 MB of memory per rank whatever the rank holds
//! (its embedded views and replays), so a page of every rank in detail grew without bound with
//! the ranks (10,000 tiny ranks: 23.9 GB of memory, killed). Past the budget a rank costs one
//! row (about 200 bytes of page; docs/reliability.md has the measured figures).

use super::escape::html;
use crate::job::{Spread, imbalance_text};
use crate::units::{bytes, count};
use std::fmt::Write as _;

/// Ranks given a full report on a job's page.
pub const DETAILED_RANKS: usize = 8;

/// One rank of the job as its table row shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRank {
    pub rank: u32,
    /// False when the trace named no rank of its own ([`crate::job::ranks`]).
    pub rank_known: bool,
    pub file: String,
    pub events: u64,
    /// The recorded device peak ([`crate::model::live::recorded_device_peak`]).
    pub peak: u64,
    /// Whether the page holds this rank's full report.
    pub detailed: bool,
}

/// Which of the ranks (by index into `peaks`, a peak per rank in rank order) get a full report:
/// all when there are at most [`DETAILED_RANKS`]; else the largest peak, the smallest, the
/// median, then the farthest from the median (ties to the lower rank), in rank order.
pub fn detailed(peaks: &[u64]) -> Vec<usize> {
    if peaks.len() <= DETAILED_RANKS {
        return (0..peaks.len()).collect();
    }
    let mut by_peak: Vec<usize> = (0..peaks.len()).collect();
    by_peak.sort_by_key(|&i| (peaks[i], i));
    let ranked: Vec<(u32, u64)> = (0u32..).zip(peaks.iter().copied()).collect();
    let median = crate::job::median(&ranked)
        .expect("more ranks than the budget")
        .0 as usize;
    let largest = *by_peak
        .iter()
        .max_by_key(|&&i| (peaks[i], std::cmp::Reverse(i)))
        .expect("more ranks than the budget");
    let mut chosen = vec![largest, by_peak[0], median];
    let mut rest: Vec<usize> = (0..peaks.len()).filter(|i| !chosen.contains(i)).collect();
    rest.sort_by_key(|&i| (std::cmp::Reverse(peaks[i].abs_diff(peaks[median])), i));
    chosen.extend(rest.into_iter().take(DETAILED_RANKS - 3));
    chosen.sort_unstable();
    chosen.dedup();
    chosen
}

/// The table of every rank: its number, trace, events and peak, and whether its report is on
/// the page.
pub fn ranks_table(s: &mut String, ranks: &[JobRank]) {
    let shown = ranks.iter().filter(|r| r.detailed).count();
    let _ = writeln!(
        s,
        "<h2>Ranks</h2>\n<p class=\"hint\">{} ranks; {} in detail below{}.</p>\n\
         <table class=\"sortable\"><thead><tr><th>rank</th><th>trace</th><th>events</th>\
         <th>recorded peak</th><th>detail</th></tr></thead><tbody>",
        count(ranks.len() as u64),
        shown,
        if shown < ranks.len() {
            " (the rank with the largest peak, the smallest, the median and those farthest from \
             the median)"
        } else {
            ""
        }
    );
    for r in ranks {
        let _ = writeln!(
            s,
            "<tr><td>{}{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r.rank,
            if r.rank_known { "" } else { "*" },
            html(&r.file),
            count(r.events),
            bytes(r.peak),
            if r.detailed { "below" } else { "" }
        );
    }
    s.push_str("</tbody></table>\n");
    let peaks: Vec<(u32, u64)> = ranks.iter().map(|r| (r.rank, r.peak)).collect();
    if let Some(sp) = Spread::of(&peaks) {
        let _ = writeln!(
            s,
            "<p>Rank {} sets the job's recorded peak ({}): imbalance {}, the largest rank over \
             the median rank, rank {} ({}). <code>vramtrace fit DIR</code> and <code>vramtrace \
             tune DIR</code> name the sites that differ between the two.</p>",
            sp.max_rank,
            bytes(sp.max),
            imbalance_text(sp.imbalance),
            sp.median_rank,
            bytes(sp.median)
        );
    }
    if ranks.iter().any(|r| !r.rank_known) {
        s.push_str(
            "<p class=\"hint\">* the trace names no rank of its own: numbered after the named \
             ranks in file-name order.</p>\n",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_the_rank_that_sets_the_peak_and_the_imbalance() {
        let rank = |rank, peak| JobRank {
            rank,
            rank_known: true,
            file: format!("rank-{rank}.vramtrace"),
            events: 1,
            peak,
            detailed: true,
        };
        let mut s = String::new();
        ranks_table(&mut s, &[rank(0, 100), rank(1, 300), rank(2, 200)]);
        assert!(
            s.contains("Rank 1 sets the job's recorded peak (300 B): imbalance 1.50x"),
            "{s}"
        );
        assert!(s.contains("the median rank, rank 2 (200 B)"), "{s}");
    }

    #[test]
    fn a_small_job_is_all_in_detail() {
        assert_eq!(detailed(&[5, 1, 3]), [0, 1, 2]);
    }

    #[test]
    fn a_large_job_details_the_peak_the_smallest_the_median_and_the_outliers() {
        // 20 ranks at 100 bytes, rank 7 at 900 (the peak), rank 12 at 10 (the smallest),
        // ranks 3 and 15 at 300 and 250 (the next farthest from the median, 100).
        let mut peaks = vec![100u64; 20];
        peaks[7] = 900;
        peaks[12] = 10;
        peaks[3] = 300;
        peaks[15] = 250;
        let got = detailed(&peaks);
        assert_eq!(got.len(), DETAILED_RANKS);
        for must in [7, 12, 3, 15] {
            assert!(got.contains(&must), "{must} in {got:?}");
        }
        assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
    }
}
