//! CPython's location table (`co_linetable`, 3.11 and later): instruction index → source line.
//!
//! The format is CPython's `Objects/locations.md`: a sequence of entries, each covering
//! `(first byte & 7) + 1` code units, whose first byte has bit 7 set and carries a code in bits
//! 3..7. Code 15: no location; 14: long form (signed line delta, end-line delta, columns); 13:
//! line delta only; 10 to 12: the line moves by `code − 10`, two column bytes; 0 to 9: same
//! line, one column byte. Varints are 6-bit groups, bit 6 meaning "more", least significant
//! first; a signed varint keeps the sign in bit 0. This is what `PyCode_Addr2Line` walks.

/// The line of the instruction at code-unit `index`, starting from `first_line`
/// (`co_firstlineno`); `None` for an instruction without a location or past the table's end.
pub fn line_of(table: &[u8], first_line: i32, index: u64) -> Option<u32> {
    let mut bytes = table.iter().copied();
    let mut line = i64::from(first_line);
    let mut at = 0u64;
    while let Some(first) = bytes.next() {
        if first & 0x80 == 0 {
            return None;
        }
        let code = (first >> 3) & 15;
        let length = u64::from(first & 7) + 1;
        let here = match code {
            15 => None,
            14 => {
                line += signed(&mut bytes)?;
                for _ in 0..3 {
                    varint(&mut bytes)?;
                }
                Some(line)
            }
            13 => {
                line += signed(&mut bytes)?;
                Some(line)
            }
            10..=12 => {
                line += i64::from(code) - 10;
                bytes.next()?;
                bytes.next()?;
                Some(line)
            }
            _ => {
                bytes.next()?;
                Some(line)
            }
        };
        if index < at + length {
            return here.and_then(|l| u32::try_from(l).ok());
        }
        at += length;
    }
    None
}

fn varint(bytes: &mut impl Iterator<Item = u8>) -> Option<u64> {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let b = bytes.next()?;
        value |= u64::from(b & 63) << shift;
        if b & 64 == 0 || shift > 56 {
            return Some(value);
        }
        shift += 6;
    }
}

fn signed(bytes: &mut impl Iterator<Item = u8>) -> Option<i64> {
    let v = varint(bytes)?;
    let magnitude = (v >> 1) as i64;
    Some(if v & 1 == 1 { -magnitude } else { magnitude })
}
