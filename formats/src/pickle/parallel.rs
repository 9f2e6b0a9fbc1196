//! Reading a large pickle in parts on rayon's threads, to the same result as in one piece.
//!
//! [`super::split`] finds the batches of items a part can read alone; each is read on a
//! thread of its own ([`super::reader::read_part`]) while one reader runs the opcodes between
//! them and appends each part where its bytes are ([`super::reader::read_joined`]). Whatever
//! that cannot do as one piece would (a shape the split does not understand, an error, a
//! limit), the pickle is read again in one piece, which gives its real result or error: a
//! damaged pickle costs a second reading, a snapshot none.

use super::reader::{Limits, read_joined, read_part, read_serial};
use super::{Document, Result, split};
use rayon::prelude::*;

/// Pickles shorter than this are read in one piece: their parts would be too few to pay for
/// the walk and the joining.
pub(super) const MIN_LEN: usize = 1 << 20;

/// Fewer threads than this read in one piece. Reading in parts takes about twice the CPU of
/// one piece (the walk costs about three quarters of a reading, the parts together a little
/// more than one, the joining a fifth, on the GPT-2 snapshot of analyzer/BENCHMARKS.md,
/// "punpick"), so it pays only where the threads outnumber that: not on two.
pub(super) const MIN_THREADS: usize = 4;

/// The smallest batch read as a part: a snapshot's trace batches are 80 to 110 KB (1,000
/// entries each), which keeps the parts few and the joining short.
pub(super) const MIN_PART: usize = 16 << 10;

/// Reads `bytes` in parts of at least `min_part` bytes where it can, else in one piece.
pub(super) fn read(bytes: &[u8], limits: Limits, min_part: usize) -> Result<Document<'_>> {
    match read_in_parts(bytes, limits, min_part) {
        Some(doc) => Ok(doc),
        None => read_serial(bytes, limits),
    }
}

/// `bytes` read in parts, or `None` where reading it in one piece is needed. The parts are
/// read on rayon's threads while this thread joins them in order, each as soon as it and
/// those before it are read.
pub(super) fn read_in_parts(bytes: &[u8], limits: Limits, min_part: usize) -> Option<Document<'_>> {
    let plan = split::plan(bytes, min_part).filter(|p| p.parts.len() >= 2)?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            plan.parts
                .par_iter()
                .enumerate()
                .for_each_with(tx, |tx, (i, &part)| {
                    // The joining stopped early when nothing receives.
                    let _ = tx.send((i, read_part(bytes, part, &plan.made_at, limits).ok()));
                });
        });
        let mut read: Vec<Option<Option<_>>> = plan.parts.iter().map(|_| None).collect();
        let mut next = 0;
        let in_order = std::iter::from_fn(|| {
            while next < read.len() && read[next].is_none() {
                let (i, part) = rx.recv().ok()?;
                read[i] = Some(part);
            }
            next += 1;
            read.get_mut(next - 1)?.take()
        });
        read_joined(bytes, limits, in_order).ok()
    })
}
