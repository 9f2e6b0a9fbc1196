//! The histograms of request sizes and lifetimes (`charts::histogram` draws them).

use crate::report::data::{Bin, Histogram};
use crate::report::trace::{Instance, NEVER};

/// Sizes in bins of ×4: `≤ 1 KiB`, `1–4 KiB`, ..., trimmed to the bins the requests use.
pub fn sizes<'a, 'm: 'a>(instances: impl IntoIterator<Item = &'a Instance<'m>>) -> Histogram {
    // Upper bounds 1 KiB · 4^k, k = 0..=15 (up to 1 PiB), then everything larger.
    let bounds: Vec<u64> = (0..16).map(|k| 1024u64 << (2 * k)).collect();
    let mut bins: Vec<Bin> = (0..=bounds.len())
        .map(|k| Bin {
            label: match k {
                0 => format!("≤ {}", short_bytes(bounds[0])),
                k if k == bounds.len() => format!("> {}", short_bytes(bounds[k - 1])),
                k => format!("{}–{}", short_bytes(bounds[k - 1]), short_bytes(bounds[k])),
            },
            ..Bin::default()
        })
        .collect();
    for inst in instances {
        for a in inst.steps().filter(|s| !s.is_free) {
            let k = bounds.partition_point(|&b| b < a.size);
            bins[k].count += 1;
            bins[k].bytes = bins[k].bytes.saturating_add(a.size);
        }
    }
    Histogram {
        bins: trim(bins, 0),
    }
}

/// Lifetimes in decades from 1 µs to 1,000 s, then the requests never freed.
pub fn lifetimes<'a, 'm: 'a>(instances: impl IntoIterator<Item = &'a Instance<'m>>) -> Histogram {
    const LABELS: [&str; 11] = [
        "< 1 µs",
        "1–10 µs",
        "10–100 µs",
        "0.1–1 ms",
        "1–10 ms",
        "10–100 ms",
        "0.1–1 s",
        "1–10 s",
        "10–100 s",
        "100–1000 s",
        "≥ 1000 s",
    ];
    let mut bins: Vec<Bin> = LABELS
        .iter()
        .chain(&["never freed"])
        .map(|l| Bin {
            label: l.to_string(),
            ..Bin::default()
        })
        .collect();
    for inst in instances {
        for a in inst.allocations() {
            let k = if a.death_ns == NEVER {
                LABELS.len()
            } else {
                let mut life = a.death_ns.saturating_sub(a.birth_ns);
                let mut k = 0;
                life /= 1000;
                while life > 0 && k < LABELS.len() - 1 {
                    life /= 10;
                    k += 1;
                }
                k
            };
            bins[k].count += 1;
            bins[k].bytes = bins[k].bytes.saturating_add(a.size);
        }
    }
    Histogram {
        bins: trim(bins, 1),
    }
}

/// Drops empty bins at both ends, keeping the last `keep_tail` bins whatever they hold.
fn trim(mut bins: Vec<Bin>, keep_tail: usize) -> Vec<Bin> {
    let tail = bins.split_off(bins.len() - keep_tail);
    let first = bins.iter().position(|b| b.count > 0);
    let last = bins.iter().rposition(|b| b.count > 0);
    let mut out = match (first, last) {
        (Some(f), Some(l)) => bins[f..=l].to_vec(),
        _ => Vec::new(),
    };
    out.extend(tail.into_iter().filter(|b| b.count > 0));
    out
}

/// `1 KiB`, `4 MiB`: bin bounds are exact powers, so no decimals.
fn short_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1024 && v.is_multiple_of(1024) && u < UNITS.len() - 1 {
        v /= 1024;
        u += 1;
    }
    format!("{v} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::trace::tests::{ev, load};
    use vramtrace_format::{Api, Event};

    /// Allocations at time 0 of `sizes`, each freed at its `deaths` entry ([`NEVER`]: never).
    fn allocations(sizes: &[u64], deaths: &[u64]) -> Vec<Event> {
        let mut events: Vec<Event> = (0..sizes.len() as u64)
            .map(|i| ev(Api::CuMemAlloc_v2, 0, 0x1000 * (i + 1), sizes[i as usize]))
            .collect();
        let mut frees: Vec<(u64, u64)> = (0..sizes.len() as u64)
            .filter(|&i| deaths[i as usize] != NEVER)
            .map(|i| (deaths[i as usize], 0x1000 * (i + 1)))
            .collect();
        frees.sort_unstable();
        events.extend(frees.iter().map(|&(t, a)| ev(Api::CuMemFree_v2, t, a, 0)));
        events
    }

    #[test]
    fn sizes_fall_in_bins_of_four_and_empty_ends_are_dropped() {
        let loaded = load(&allocations(&[512, 1024, 3000], &[1, 1, 1]));
        let h = sizes(&loaded.pass().instances);
        let got: Vec<(&str, u64, u64)> = h
            .bins
            .iter()
            .map(|b| (b.label.as_str(), b.count, b.bytes))
            .collect();
        assert_eq!(got, vec![("≤ 1 KiB", 2, 1536), ("1 KiB–4 KiB", 1, 3000)]);
    }

    #[test]
    fn lifetimes_fall_in_decades_and_survivors_are_counted_apart() {
        let loaded = load(&allocations(
            &[10, 10, 10, 99],
            &[500, 5_000, 2_000_000, NEVER],
        ));
        let h = lifetimes(&loaded.pass().instances);
        let got: Vec<(&str, u64)> = h.bins.iter().map(|b| (b.label.as_str(), b.count)).collect();
        assert_eq!(
            got,
            vec![
                ("< 1 µs", 1),
                ("1–10 µs", 1),
                ("10–100 µs", 0),
                ("0.1–1 ms", 0),
                ("1–10 ms", 1),
                ("never freed", 1)
            ]
        );
    }
}
