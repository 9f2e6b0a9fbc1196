//! Naming Python frames while their code objects are certainly alive.
//!
//! A code object can be freed soon after its frame returns (a script's `<module>` code when the
//! script ends, a function made by `exec`), and its address reused, long before the writer
//! thread drains the event. So the names are copied on the hook path, once per new stack (the
//! rare path: a stack seen before costs nothing more): for each Python frame, the line of its
//! instruction (from the code object's location table, [`linetable`]) and the bytes of its
//! `co_filename` and `co_qualname`, into the stack's arena entry right after its words. The
//! frame being on the calling thread's live stack holds a reference to its code object, which
//! holds its names and table: every read is of live, immutable objects. The writer then only
//! parses those bytes ([`Names`]).
//!
//! Record per Python frame: line (u32 LE), file length (u16), name length (u16), the file's
//! bytes, the name's bytes. Strings are kept up to [`MAX_STRING`] bytes (a longer path keeps
//! its end); non-ASCII names are copied from the UTF-8 form CPython caches, when it has one.

use super::layout::Layout;
use super::{TAG, interpreter, linetable, split};

/// Longest string kept.
const MAX_STRING: usize = 255;
/// Longest location table read for a line.
const MAX_TABLE: u64 = 1 << 20;

/// Bytes the names of the Python frames among `words` take (see the module documentation).
pub fn names_len(words: &[u64]) -> usize {
    let Some(py) = interpreter() else {
        return 0;
    };
    let mut n = 0;
    each_frame(words, |code, _| {
        // SAFETY: a live frame's code object (module documentation).
        let (file, name) = unsafe { names(&py.layout, code) };
        n += 8 + file.len() + name.len();
    });
    n
}

/// Writes the names of the Python frames among `words` into `out` (at least
/// [`names_len`] bytes); returns the bytes written.
pub fn write_names(words: &[u64], out: &mut [u8]) -> usize {
    let Some(py) = interpreter() else {
        return 0;
    };
    let l = &py.layout;
    let mut at = 0;
    each_frame(words, |code, index| {
        // SAFETY: a live frame's code object and its objects (module documentation).
        let ((file, name), line) = unsafe { (names(l, code), line(l, code, index)) };
        let need = 8 + file.len() + name.len();
        let Some(slot) = out.get_mut(at..at + need) else {
            return;
        };
        slot[..4].copy_from_slice(&line.to_le_bytes());
        slot[4..6].copy_from_slice(&(file.len() as u16).to_le_bytes());
        slot[6..8].copy_from_slice(&(name.len() as u16).to_le_bytes());
        slot[8..8 + file.len()].copy_from_slice(file);
        slot[8 + file.len()..].copy_from_slice(name);
        at += need;
    });
    at
}

/// Calls `f(code, index)` for each Python frame among a stack's words.
fn each_frame(words: &[u64], mut f: impl FnMut(u64, u64)) {
    let mut it = words.iter();
    while let Some(&w) = it.next() {
        if w & TAG != 0 {
            it.next();
            let (code, index) = split(w);
            f(code, index);
        }
    }
}

/// The file and qualified name of a live code object, as bytes.
///
/// # Safety
/// `code` is a live code object of the interpreter `l` describes.
unsafe fn names(l: &Layout, code: u64) -> (&'static [u8], &'static [u8]) {
    // SAFETY: the caller's contract; the name objects live as long as the code object.
    unsafe {
        let file = *((code + l.code_filename as u64) as *const u64);
        let name = *((code + l.code_qualname as u64) as *const u64);
        (text(l, file, true), text(l, name, false))
    }
}

/// A `str` object's bytes: compact ASCII, or the cached UTF-8 form; empty otherwise.
///
/// # Safety
/// `s` is 0 or a live `str` object.
unsafe fn text(l: &Layout, s: u64, keep_end: bool) -> &'static [u8] {
    if s == 0 {
        return &[];
    }
    // SAFETY: the caller's contract: the header of a live str object.
    unsafe {
        let length = *((s + l.unicode_length as u64) as *const i64);
        let state = *((s + l.unicode_state as u64) as *const u32);
        let (compact, ascii) = ((state >> 5) & 1, (state >> 6) & 1);
        if compact == 0 || length < 0 {
            return &[];
        }
        let (data, len) = if ascii == 1 {
            (s + l.ascii_size as u64, length as usize)
        } else {
            // PyCompactUnicodeObject: utf8_length, then utf8, right after the ASCII header.
            let utf8_len = *((s + l.ascii_size as u64) as *const i64);
            let utf8 = *((s + l.ascii_size as u64 + 8) as *const u64);
            if utf8 == 0 || utf8_len < 0 {
                return &[];
            }
            (utf8, utf8_len as usize)
        };
        let bytes = std::slice::from_raw_parts(data as *const u8, len);
        if bytes.len() <= MAX_STRING {
            bytes
        } else if keep_end {
            &bytes[bytes.len() - MAX_STRING..]
        } else {
            &bytes[..MAX_STRING]
        }
    }
}

/// The line of instruction `index` of a live code object; 0 when unknown.
///
/// # Safety
/// `code` is a live code object of the interpreter `l` describes.
unsafe fn line(l: &Layout, code: u64, index: u64) -> u32 {
    // SAFETY: the caller's contract; the table is an immutable bytes object the code holds.
    unsafe {
        let first = *((code + l.code_firstlineno as u64) as *const i32);
        let table = *((code + l.code_linetable as u64) as *const u64);
        if table == 0 {
            return 0;
        }
        let size = *((table + l.bytes_size as u64) as *const i64);
        if size < 0 || size as u64 > MAX_TABLE {
            return 0;
        }
        let bytes =
            std::slice::from_raw_parts((table + l.bytes_sval as u64) as *const u8, size as usize);
        linetable::line_of(bytes, first, index).unwrap_or(0)
    }
}

/// What the writer reads back: one named frame per Python frame of the stack, in order.
pub struct Names<'a> {
    bytes: &'a [u8],
}

/// A Python frame's file, function and line, as the hook copied them.
pub struct Named {
    pub file: String,
    pub function: String,
    pub line: u32,
}

impl<'a> Names<'a> {
    pub fn new(bytes: &'a [u8]) -> Names<'a> {
        Names { bytes }
    }
}

impl Iterator for Names<'_> {
    type Item = Named;

    fn next(&mut self) -> Option<Named> {
        let head = self.bytes.get(..8)?;
        let line = u32::from_le_bytes(head[..4].try_into().ok()?);
        let file_len = usize::from(u16::from_le_bytes(head[4..6].try_into().ok()?));
        let name_len = usize::from(u16::from_le_bytes(head[6..8].try_into().ok()?));
        let file = self.bytes.get(8..8 + file_len)?;
        let name = self.bytes.get(8 + file_len..8 + file_len + name_len)?;
        let named = Named {
            file: String::from_utf8_lossy(file).into_owned(),
            function: String::from_utf8_lossy(name).into_owned(),
            line,
        };
        self.bytes = &self.bytes[8 + file_len + name_len..];
        Some(named)
    }
}
