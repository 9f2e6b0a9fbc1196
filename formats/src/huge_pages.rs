//! Transparent huge pages for the large, short-lived buffers of a snapshot's import.
//!
//! Reading a PyTorch snapshot fills arenas of tens of megabytes once, front to back
//! (`pickle::Document`, the import's entries and events). With 4 KiB pages each of them costs
//! a page fault per page touched: 30,000 faults, about a quarter of `vramtrace import`'s CPU on
//! a 215,000-entry snapshot (analyzer/BENCHMARKS.md, "Snapshot import and report"). Where the
//! kernel hands out huge pages only on request (`/sys/kernel/mm/transparent_hugepage/enabled`
//! set to `madvise`, the default of most distributions), `MADV_HUGEPAGE` makes that one fault
//! per 2 MiB (the kernel's `Documentation/admin-guide/mm/transhuge.rst`).

/// The size of an x86-64 or arm64 (4 KiB granule) transparent huge page.
const HUGE_PAGE: usize = 2 << 20;

/// Asks the kernel to back `v`'s allocation with transparent huge pages where it spans whole
/// ones. Only a hint: contents are unchanged, and where the kernel refuses (or on other
/// systems) nothing happens.
pub fn advise_huge_pages<T>(v: &mut Vec<T>) {
    #[cfg(target_os = "linux")]
    {
        let start = v.as_mut_ptr() as usize;
        let end = start + v.capacity() * std::mem::size_of::<T>();
        let (lo, hi) = (
            start.next_multiple_of(HUGE_PAGE),
            end / HUGE_PAGE * HUGE_PAGE,
        );
        if hi > lo {
            // SAFETY: `[lo, hi)` lies inside the allocation `v` owns, which this function
            // borrows mutably; MADV_HUGEPAGE changes how the kernel backs those pages, never
            // what they hold, and its result is ignored because a refusal changes nothing.
            unsafe {
                libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (v, HUGE_PAGE);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advising_keeps_the_contents_and_any_capacity() {
        let mut big: Vec<u64> = (0..(3 * HUGE_PAGE / 8) as u64).collect();
        advise_huge_pages(&mut big);
        assert!(big.iter().enumerate().all(|(i, &v)| v == i as u64));
        big.extend(0..10);
        assert_eq!(big[3 * HUGE_PAGE / 8 + 9], 9);
        for mut small in [Vec::<u8>::new(), vec![1u8; 100]] {
            let before = small.clone();
            advise_huge_pages(&mut small);
            assert_eq!(small, before);
        }
    }
}
