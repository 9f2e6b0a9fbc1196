//! Every byte-level encoding of the format lives here: LEB128 varints for the event columns,
//! bincode for tables and metadata, zstd for chunk payloads, CRC-32 (IEEE) checksums.
//!
//! bincode is pinned to `=2.0.1`: the 3.x releases are an empty crate, and 2.0.1 carries the
//! unmaintained-crate advisory RUSTSEC-2025-0141 (no known vulnerability; the crate is simply no
//! longer developed). Keeping it behind this module makes swapping it a one-file change.

use crate::error::Error;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Appends `value` as unsigned LEB128.
#[inline]
pub fn put_uvarint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Bytes [`put_uvarint`] writes for `value`.
#[inline]
pub fn uvarint_len(value: u64) -> usize {
    // Indexed by leading zeros: ceil(significant bits / 7), at least 1.
    const LEN: [u8; 65] = {
        let mut t = [0u8; 65];
        let mut lz = 0;
        while lz <= 64 {
            let bits = 64 - lz;
            t[lz] = if bits == 0 { 1 } else { bits.div_ceil(7) as u8 };
            lz += 1;
        }
        t
    };
    usize::from(LEN[value.leading_zeros() as usize])
}

/// Maps signed to unsigned so that small magnitudes stay small.
#[inline]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
#[inline]
pub fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// A cursor over a byte slice that decodes LEB128 and fixed-width values with bounds checks.
pub struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

/// Why a [`Cursor`] read failed; the caller turns it into an [`Error`] with a file offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorError {
    /// The data ended inside a value.
    Truncated,
    /// A varint longer than ten bytes or overflowing 64 bits.
    Overlong,
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, pos: 0 }
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    #[inline(always)]
    pub fn uvarint(&mut self) -> Result<u64, CursorError> {
        // Fast path: most column values fit one byte.
        if let Some(&b) = self.bytes.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        // Up to eight bytes at once: find the terminating byte in a word, then squeeze out the
        // continuation bits with shifts and masks (no loop, no branch per byte).
        if let Some(window) = self.bytes.get(self.pos..self.pos + 8) {
            let word = u64::from_le_bytes(window.try_into().expect("8 bytes"));
            let stops = !word & 0x8080_8080_8080_8080;
            if stops != 0 {
                let len = (stops.trailing_zeros() / 8 + 1) as usize;
                let keep = if len == 8 {
                    u64::MAX
                } else {
                    (1u64 << (8 * len)) - 1
                };
                let x = word & keep & 0x7f7f_7f7f_7f7f_7f7f;
                let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
                let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
                let x = (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4);
                self.pos += len;
                return Ok(x);
            }
        }
        self.uvarint_slow()
    }

    #[cold]
    fn uvarint_slow(&mut self) -> Result<u64, CursorError> {
        let mut value = 0u64;
        for i in 0..10 {
            let b = *self.bytes.get(self.pos).ok_or(CursorError::Truncated)?;
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(CursorError::Overlong);
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err(CursorError::Overlong)
    }

    pub fn u8(&mut self) -> Result<u8, CursorError> {
        Ok(self.take(1)?[0])
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], CursorError> {
        if self.remaining() < n {
            return Err(CursorError::Truncated);
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
}

fn bincode_config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes a table or metadata value with bincode's standard (varint, little-endian) config.
pub fn encode_value<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode_config())
        .expect("serializing plain data into a Vec cannot fail")
}

/// Decodes a value written by [`encode_value`], requiring that it uses every byte.
///
/// bincode checks each declared container length against the bytes that remain before it
/// allocates, so a hostile length (a table claiming 2^60 entries) fails instead of allocating.
pub fn decode_value<T: DeserializeOwned>(bytes: &[u8], offset: u64) -> Result<T, Error> {
    // The limit caps what a declared container length may claim before any allocation.
    let config = bincode_config().with_limit::<{ 1 << 30 }>();
    match bincode::serde::decode_from_slice::<T, _>(bytes, config) {
        Ok((value, used)) if used == bytes.len() => Ok(value),
        Ok((_, used)) => Err(Error::Corrupt {
            offset,
            what: format!("{} trailing bytes after a table", bytes.len() - used),
        }),
        Err(e) => Err(Error::Corrupt {
            offset,
            what: format!("undecodable table: {e}"),
        }),
    }
}

/// CRC-32 (IEEE 802.3, the zlib polynomial) of `bytes`.
pub fn checksum(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// A reusable zstd compressor.
pub struct Compressor(zstd::bulk::Compressor<'static>);

impl Compressor {
    pub fn new(level: i32) -> std::io::Result<Self> {
        Ok(Compressor(zstd::bulk::Compressor::new(level)?))
    }

    /// Compresses `raw` into `out`, replacing its contents.
    pub fn compress(&mut self, raw: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
        out.clear();
        out.reserve(zstd::zstd_safe::compress_bound(raw.len()));
        self.0.compress_to_buffer(raw, out)?;
        Ok(())
    }
}

impl Compressor {
    /// Compresses `raw` into `out` as one frame in which each part (from each offset of
    /// `starts`, the first from 0) ends a block: zstd then gives each part literal statistics
    /// of its own (a block chooses its Huffman table), where one block over all parts would
    /// code a column's noisy low bytes and its nearly constant high bytes with one table.
    pub fn compress_parts(
        &mut self,
        raw: &[u8],
        starts: &[usize],
        out: &mut Vec<u8>,
    ) -> std::io::Result<()> {
        use zstd::zstd_safe::{InBuffer, OutBuffer, ResetDirective, zstd_sys::ZSTD_EndDirective};
        let io = |code: usize| std::io::Error::other(zstd::zstd_safe::get_error_name(code));
        out.clear();
        out.reserve(zstd::zstd_safe::compress_bound(raw.len()) + 8 * (starts.len() + 1));
        let cctx = self.0.context_mut();
        cctx.reset(ResetDirective::SessionOnly).map_err(io)?;
        cctx.set_pledged_src_size(Some(raw.len() as u64))
            .map_err(io)?;
        let ends = starts.iter().copied().chain(std::iter::once(raw.len()));
        let mut from = 0;
        for (k, to) in ends.enumerate() {
            let last = k == starts.len();
            let part = raw.get(from..to.max(from)).unwrap_or(&[]);
            from = to.max(from);
            let mut input = InBuffer::around(part);
            let op = if last {
                ZSTD_EndDirective::ZSTD_e_end
            } else {
                ZSTD_EndDirective::ZSTD_e_flush
            };
            loop {
                if out.capacity() - out.len() < 64 {
                    out.reserve(out.capacity().max(64));
                }
                let pos = out.len();
                let mut output = OutBuffer::around_pos(out, pos);
                let left = cctx
                    .compress_stream2(&mut output, &mut input, op)
                    .map_err(io)?;
                if left == 0 && input.pos() == part.len() {
                    break;
                }
            }
        }
        Ok(())
    }
}

/// Decompresses a zstd payload that must expand to exactly `raw_len` bytes into `out`.
///
/// zstd never writes past the capacity it is given, so a payload that expands further fails
/// instead of allocating.
pub fn decompress(payload: &[u8], raw_len: usize, out: &mut Vec<u8>) -> Result<(), String> {
    thread_local! {
        static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    out.clear();
    out.reserve_exact(raw_len);
    // Capacity may exceed raw_len after an earlier, larger chunk: cap the output explicitly.
    let n = DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let d = match slot.as_mut() {
            Some(d) => d,
            None => slot.insert(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?),
        };
        out.resize(raw_len, 0);
        d.decompress_to_buffer(payload, out.as_mut_slice())
            .map_err(|e| e.to_string())
    })?;
    if n != raw_len {
        return Err(format!(
            "payload expands to {n} bytes, header says {raw_len}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn uvarint_round_trips_and_predicts_its_length(v: u64) {
            let mut out = Vec::new();
            put_uvarint(&mut out, v);
            prop_assert_eq!(out.len(), uvarint_len(v));
            let mut c = Cursor::new(&out);
            prop_assert_eq!(c.uvarint(), Ok(v));
            prop_assert_eq!(c.remaining(), 0);
        }

        #[test]
        fn uvarint_streams_round_trip(values: Vec<u64>) {
            // Consecutive values exercise the eight-byte window path as well as the tail.
            let mut out = Vec::new();
            values.iter().for_each(|&v| put_uvarint(&mut out, v));
            let mut c = Cursor::new(&out);
            for &v in &values {
                prop_assert_eq!(c.uvarint(), Ok(v));
            }
            prop_assert_eq!(c.remaining(), 0);
        }

        #[test]
        fn zigzag_round_trips(v: i64) {
            prop_assert_eq!(unzigzag(zigzag(v)), v);
        }

        #[test]
        fn uvarint_never_panics_on_garbage(bytes: Vec<u8>) {
            let mut c = Cursor::new(&bytes);
            while c.remaining() > 0 && c.uvarint().is_ok() {}
        }
    }

    #[test]
    fn uvarint_rejects_eleven_byte_and_overflowing_values() {
        let mut c = Cursor::new(&[0xff; 11]);
        assert_eq!(c.uvarint(), Err(CursorError::Overlong));
        let mut c = Cursor::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]);
        assert_eq!(c.uvarint(), Err(CursorError::Overlong));
        let mut c = Cursor::new(&[0x80]);
        assert_eq!(c.uvarint(), Err(CursorError::Truncated));
    }

    #[test]
    fn bincode_bytes_are_what_spec_md_section_5_says() {
        use crate::tables::{Device, Module};
        let d = Device {
            ordinal: -1,
            name: "H".into(),
            uuid: [7; 16],
            total_memory: 300,
            compute_capability: (9, 0),
        };
        let mut expected = vec![1, 1, b'H'];
        expected.extend([7; 16]);
        expected.extend([251, 44, 1, 9, 0]);
        assert_eq!(encode_value(&d), expected);
        let m = Module {
            id: 70_000,
            pid: 1,
            path: String::new(),
            build_id: vec![0xAB],
            load_address: 1 << 40,
            size: 0,
            loaded_ns: 0,
            unloaded_ns: Some(5),
        };
        let mut expected = vec![252];
        expected.extend(70_000u32.to_le_bytes());
        expected.extend([1, 0, 1, 0xAB, 253]);
        expected.extend((1u64 << 40).to_le_bytes());
        expected.extend([0, 0, 1, 5]);
        assert_eq!(encode_value(&m), expected);
    }

    #[test]
    fn crc32_is_the_ieee_polynomial() {
        assert_eq!(checksum(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn a_table_claiming_2_pow_60_entries_fails_without_allocating() {
        // bincode standard: a Vec length is a varint; 0xFD introduces a u64.
        let mut bytes = vec![0xFD];
        bytes.extend_from_slice(&(1u64 << 60).to_le_bytes());
        let r: Result<Vec<u64>, _> = decode_value(&bytes, 7);
        let err = r.unwrap_err().to_string();
        assert!(err.contains("byte 7"), "{err}");
    }
}
