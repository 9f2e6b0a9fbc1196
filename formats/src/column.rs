//! Events as columns: the in-memory batch a chunk decodes to, and the column codec.
//!
//! Each of the sixteen event fields is one column of `u64`. A column is stored in whichever of
//! five modes is smallest for this chunk (see SPEC.md, "Event columns"):
//!
//! - `LINEAR`: `start` and a signed `step`; covers constant columns (step 0) and sequence numbers
//!   (step 1) in two varints, and decodes without touching memory.
//! - `PLAIN`: one LEB128 varint per value.
//! - `DELTA`: one zigzag LEB128 varint per difference from the previous value (the first from 0).
//! - `PLANES`: fixed-width little-endian values split into byte planes (all low bytes, then all
//!   second bytes, ...).
//! - `DELTA_PLANES`: the first value as a varint, then the wrapping differences as byte planes.
//! - `REPEAT` (version 3): per value, how many events back the same value was last seen, or 0
//!   and the value as a literal: frees name the address an allocation returned, and a training
//!   loop hands the same blocks out step after step.
//!
//! In version 3 each column's data is compressed on its own (zstd) when that makes it smaller,
//! instead of the whole chunk at once: one zstd block mixes the literals of every column under
//! one Huffman table, so the timing noise of `time_ns`, the different noise of `duration_ns`
//! and the address bytes were coded as if they were one distribution (the re-recorded PyTorch
//! samples took 20% more bytes so; `recorder/BENCHMARKS.md`, "Trace size").
//!
//! Byte planes exist for timestamps and durations: their low bytes are timing noise, their high
//! bytes repeat with the program's loop. Split apart, zstd stores the noise at about its entropy
//! and the pattern for almost nothing; interleaved in varints, neither compresses. Ties between
//! sizes go to planes for that reason. The hand-written column codec replaces bincode on this
//! path because it is both smaller and faster (BENCHMARKS.md).

use crate::api::Api;
use crate::chunk::MAX_RAW_LEN;
use crate::codec::{
    self, Compressor, Cursor, CursorError, put_uvarint, unzigzag, uvarint_len, zigzag,
};
use crate::event::Event;

/// Number of event columns, in storage order.
pub const COLUMNS: usize = 16;

/// Column names in storage order, as SPEC.md lists them.
pub const COLUMN_NAMES: [&str; COLUMNS] = [
    "seq",
    "time_ns",
    "duration_ns",
    "pid",
    "tid",
    "device",
    "api",
    "result",
    "address",
    "size",
    "handle",
    "aux",
    "stream",
    "pool",
    "flags",
    "stack",
];

/// Columns whose values must fit 32 bits: pid, tid, device (zigzag of an i32), api, result,
/// stack.
const NARROW: [usize; 6] = [3, 4, 5, 6, 7, 15];

const MODE_LINEAR: u8 = 0;
const MODE_PLAIN: u8 = 1;
const MODE_DELTA: u8 = 2;
const MODE_PLANES: u8 = 3;
const MODE_DELTA_PLANES: u8 = 4;
const MODE_REPEAT: u8 = 5;
/// Set in a column's mode byte when its data is a zstd frame (version 3).
const COMPRESSED: u8 = 0x80;
/// Columns whose values recur (addresses, sizes, handles): the ones `REPEAT` is tried on.
const RECURRING: [usize; 4] = [8, 9, 10, 11];
/// Column data shorter than this is stored as is: a zstd frame costs more than it saves.
const MIN_COMPRESSED: usize = 64;
/// Decompressed bytes a column may declare per stored byte (as for whole chunks).
const MAX_COLUMN_RATIO: usize = crate::chunk::MAX_EXPANSION as usize;

/// One decoded column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Column {
    /// `value(i) = start + i·step` (wrapping).
    Linear { start: u64, step: i64 },
    /// One value per event.
    Values(Vec<u64>),
    /// One value per event, for the columns whose values fit 32 bits.
    Narrow(Vec<u32>),
}

impl Column {
    #[inline]
    pub fn get(&self, i: usize) -> u64 {
        match self {
            Column::Linear { start, step } => {
                start.wrapping_add((i as u64).wrapping_mul(*step as u64))
            }
            Column::Values(v) => v[i],
            Column::Narrow(v) => u64::from(v[i]),
        }
    }

    /// Hands the first `len` values to `f` in order, matching the representation once rather
    /// than once per value as [`Self::get`] does: the fast way through a whole column.
    #[inline]
    pub fn for_each(&self, len: usize, mut f: impl FnMut(u64)) {
        match self {
            Column::Linear { start, step } => {
                let mut v = *start;
                for _ in 0..len {
                    f(v);
                    v = v.wrapping_add(*step as u64);
                }
            }
            Column::Values(v) => v[..len].iter().for_each(|&x| f(x)),
            Column::Narrow(v) => v[..len].iter().for_each(|&x| f(u64::from(x))),
        }
    }
}

/// The one mapping of the columns to an [`Event`]'s fields: `$each!(c, setter)` for each
/// column index `c` ([`COLUMN_NAMES`]), the setter storing the column's `u64` value in its
/// field. [`EventBatch::get`] and [`EventBatch::extend_rows`] both expand it.
macro_rules! event_fields {
    ($each:ident) => {
        $each!(0, |e: &mut Event, v| e.seq = v);
        $each!(1, |e: &mut Event, v| e.time_ns = v);
        $each!(2, |e: &mut Event, v| e.duration_ns = v);
        $each!(3, |e: &mut Event, v| e.pid = v as u32);
        $each!(4, |e: &mut Event, v| e.tid = v as u32);
        $each!(5, |e: &mut Event, v| e.device = unzigzag(v) as i32);
        $each!(6, |e: &mut Event, v| {
            e.api = Api::from_id(v as u16).expect("api ids are validated at decode")
        });
        $each!(7, |e: &mut Event, v| e.result = v as u32);
        $each!(8, |e: &mut Event, v| e.address = v);
        $each!(9, |e: &mut Event, v| e.size = v);
        $each!(10, |e: &mut Event, v| e.handle = v);
        $each!(11, |e: &mut Event, v| e.aux = v);
        $each!(12, |e: &mut Event, v| e.stream = v);
        $each!(13, |e: &mut Event, v| e.pool = v);
        $each!(14, |e: &mut Event, v| e.flags = v);
        $each!(15, |e: &mut Event, v| e.stack = v as u32);
    };
}

/// Sets one field of each of `rows` from the values `range` of `column` ([`Column::get`]).
#[inline]
fn fill(
    column: &Column,
    range: &std::ops::Range<usize>,
    rows: &mut [Event],
    set: impl Fn(&mut Event, u64),
) {
    match column {
        Column::Linear { step, .. } => {
            let step = *step as u64;
            let mut v = column.get(range.start);
            let (fours, rest) = rows.as_chunks_mut::<4>();
            for [a, b, c, d] in fours {
                set(a, v);
                set(b, v.wrapping_add(step));
                set(c, v.wrapping_add(step.wrapping_mul(2)));
                set(d, v.wrapping_add(step.wrapping_mul(3)));
                v = v.wrapping_add(step.wrapping_mul(4));
            }
            for e in rest {
                set(e, v);
                v = v.wrapping_add(step);
            }
        }
        Column::Values(v) => fill_from(rows, &v[range.clone()], |e, x| set(e, x)),
        Column::Narrow(v) => fill_from(rows, &v[range.clone()], |e, x| set(e, u64::from(x))),
    }
}

/// `set(row, value)` for each row and its value, four at a time: a loop of unknown length that
/// LLVM does not unroll, and whose counting and pointer steps cost as much as the copy.
#[inline(always)]
fn fill_from<T: Copy>(rows: &mut [Event], values: &[T], set: impl Fn(&mut Event, T)) {
    let (fours, rest) = rows.as_chunks_mut::<4>();
    let (values4, values_rest) = values.as_chunks::<4>();
    for ([a, b, c, d], [w, x, y, z]) in fours.iter_mut().zip(values4) {
        set(a, *w);
        set(b, *x);
        set(c, *y);
        set(d, *z);
    }
    rest.iter_mut()
        .zip(values_rest)
        .for_each(|(e, &v)| set(e, v));
}

/// A run of events stored column by column: what one event chunk decodes to.
///
/// Invariant: every `Values` column holds exactly `len` values, u32 columns hold values that fit
/// 32 bits, and every api id is known (checked by [`EventBatch::decode`]), so [`Self::get`]
/// cannot fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventBatch {
    len: usize,
    columns: [Column; COLUMNS],
}

impl EventBatch {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The column at storage index `c` (see [`COLUMN_NAMES`]).
    pub fn column(&self, c: usize) -> &Column {
        &self.columns[c]
    }

    /// The column named `name` (one of [`COLUMN_NAMES`]).
    ///
    /// # Panics
    /// On a name that is not a column's.
    pub fn column_named(&self, name: &str) -> &Column {
        let c = COLUMN_NAMES
            .iter()
            .position(|&n| n == name)
            .unwrap_or_else(|| panic!("no event column named {name}"));
        &self.columns[c]
    }

    /// Event `i` of the batch.
    #[inline]
    pub fn get(&self, i: usize) -> Event {
        let mut e = Event::new(Api::CuMemAlloc_v2);
        macro_rules! set {
            ($c:literal, $set:expr) => {
                $set(&mut e, self.columns[$c].get(i))
            };
        }
        event_fields!(set);
        e
    }

    /// Appends the events `range` to `out`, the same as [`Self::get`] of each, but column by
    /// column: each column's representation is matched once for the whole range rather than
    /// once per value, the fast way to rebuild many rows (a range of a few thousand events
    /// stays in cache between the columns). The constant columns (most of a chunk's: the
    /// process, the device, the result, the flags...) are set once, in the row every new one
    /// starts as.
    ///
    /// # Panics
    /// When `range` runs past [`Self::len`].
    pub fn extend_rows(&self, range: std::ops::Range<usize>, out: &mut Vec<Event>) {
        assert!(range.end <= self.len, "rows past the batch");
        let constant = |c: usize| match self.columns[c] {
            Column::Linear { start, step: 0 } => Some(start),
            _ => None,
        };
        let mut first = Event::new(Api::CuMemAlloc_v2);
        macro_rules! set_constant {
            ($c:literal, $set:expr) => {
                if let Some(v) = constant($c) {
                    $set(&mut first, v)
                }
            };
        }
        event_fields!(set_constant);
        let from = out.len();
        out.resize(from + range.len(), first);
        let rows = &mut out[from..];
        macro_rules! set {
            ($c:literal, $set:expr) => {
                if constant($c).is_none() {
                    fill(&self.columns[$c], &range, rows, $set)
                }
            };
        }
        event_fields!(set);
    }

    /// The events in storage order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Event> + '_ {
        (0..self.len).map(|i| self.get(i))
    }

    /// Builds a batch from events (tests, importers).
    pub fn from_events(events: &[Event]) -> EventBatch {
        let mut b = ColumnBuilder::default();
        for e in events {
            b.push(e);
        }
        b.into_batch()
    }

    /// Decodes the raw (decompressed) payload of an event chunk holding `count` events.
    /// Errors carry the offset within `raw`.
    pub fn decode(raw: &[u8], count: usize) -> Result<EventBatch, (usize, String)> {
        let mut cur = Cursor::new(raw);
        let at = |cur: &Cursor, e: CursorError| (cur.position(), format!("{e:?} column data"));
        let declared = cur.uvarint().map_err(|e| at(&cur, e))?;
        if declared != count as u64 {
            return Err((
                0,
                format!("payload holds {declared} events, header says {count}"),
            ));
        }
        let mut columns: [Column; COLUMNS] =
            std::array::from_fn(|_| Column::Linear { start: 0, step: 0 });
        let mut scratch = Vec::new();
        let mut expanded = 0usize;
        for (c, column) in columns.iter_mut().enumerate() {
            let start = cur.position();
            let mode = cur.u8().map_err(|e| at(&cur, e))?;
            let len = cur.uvarint().map_err(|e| at(&cur, e))?;
            let data = usize::try_from(len)
                .ok()
                .and_then(|len| cur.take(len).ok())
                .ok_or_else(|| {
                    (
                        start,
                        format!("column {} overruns the chunk", COLUMN_NAMES[c]),
                    )
                })?;
            let named = |what: String| (start, format!("column {}: {what}", COLUMN_NAMES[c]));
            let data = if mode & COMPRESSED != 0 {
                expanded += decompress_column(data, &mut scratch).map_err(named)?;
                if expanded > MAX_RAW_LEN as usize {
                    return Err(named(format!("columns expand past {MAX_RAW_LEN} bytes")));
                }
                &scratch[..]
            } else {
                data
            };
            *column = decode_column(c, mode & !COMPRESSED, data, count).map_err(named)?;
        }
        if cur.remaining() != 0 {
            return Err((
                cur.position(),
                "trailing bytes after the last column".into(),
            ));
        }
        let batch = EventBatch {
            len: count,
            columns,
        };
        batch.validate().map_err(|what| (0, what))?;
        Ok(batch)
    }

    /// Checks what decoding dense columns could not: linear narrow columns.
    fn validate(&self) -> Result<(), String> {
        for c in NARROW {
            if let Some(i) = first_outside(&self.columns[c], self.len, u64::from(u32::MAX)) {
                return Err(format!("event {i}: {} exceeds 32 bits", COLUMN_NAMES[c]));
            }
        }
        if let Column::Linear { .. } = self.columns[API]
            && let Some(i) = (0..self.len).find(|&i| !known_api(self.columns[API].get(i)))
        {
            return Err(unknown_api(i, self.columns[API].get(i)));
        }
        Ok(())
    }
}

/// Index of the api column.
const API: usize = 6;

fn known_api(id: u64) -> bool {
    u16::try_from(id).ok().and_then(Api::from_id).is_some()
}

fn unknown_api(i: usize, id: u64) -> String {
    format!("event {i}: unknown API id {id} (written by a newer recorder?)")
}

/// The first index whose value exceeds `limit`, if any.
fn first_outside(column: &Column, len: usize, limit: u64) -> Option<usize> {
    if let Column::Linear { start, step } = *column {
        // With both ends within the limit and |step| ≤ limit, a progression of at most
        // MAX_CHUNK_EVENTS values travels less than 2^64 and so cannot wrap between them.
        let last = column.get(len.saturating_sub(1));
        if len == 0 || (start <= limit && last <= limit && step.unsigned_abs() <= limit) {
            return None;
        }
    }
    (0..len).find(|&i| column.get(i) > limit)
}

/// Decompresses a compressed column's data (`uvarint raw_len`, then a zstd frame) into `out`;
/// returns the decompressed length.
fn decompress_column(data: &[u8], out: &mut Vec<u8>) -> Result<usize, String> {
    let mut cur = Cursor::new(data);
    let raw_len = cur.uvarint().map_err(bad_value)?;
    let frame = &data[cur.position()..];
    let raw_len = usize::try_from(raw_len)
        .ok()
        .filter(|&n| n <= MAX_RAW_LEN as usize && n <= MAX_COLUMN_RATIO * frame.len())
        .ok_or_else(|| format!("a {}-byte frame declares {raw_len} bytes", frame.len()))?;
    codec::decompress(frame, raw_len, out).map_err(|e| format!("zstd data: {e}"))?;
    Ok(raw_len)
}

/// Decodes column `c` (storage index) holding `count` values.
fn decode_column(c: usize, mode: u8, data: &[u8], count: usize) -> Result<Column, String> {
    let mut cur = Cursor::new(data);
    let column = if mode == MODE_LINEAR {
        let start = cur.uvarint().map_err(bad_value)?;
        let step = unzigzag(cur.uvarint().map_err(bad_value)?);
        Column::Linear { start, step }
    } else if c == API {
        // Ids below 128 are looked up once each: api columns have few distinct values.
        let mut known = [None::<bool>; 128];
        let mut values = Vec::with_capacity(count);
        for_each_value(mode, &mut cur, count, |id| {
            let ok = match known.get_mut(id as usize) {
                Some(slot) => *slot.get_or_insert_with(|| known_api(id)),
                None => known_api(id),
            };
            if !ok {
                return Err(unknown_api(values.len(), id));
            }
            values.push(id as u32);
            Ok(())
        })?;
        Column::Narrow(values)
    } else if NARROW.contains(&c) {
        let mut values = Vec::with_capacity(count);
        for_each_value(mode, &mut cur, count, |v| {
            values.push(u32::try_from(v).map_err(|_| "a value exceeds 32 bits".to_string())?);
            Ok(())
        })?;
        Column::Narrow(values)
    } else if mode == MODE_REPEAT {
        // Back-references read the values decoded so far: decode into the column itself.
        let mut values: Vec<u64> = Vec::with_capacity(count.min(cur.remaining()));
        repeat_values(&mut cur, count, |back, literal, i| {
            let v = match back {
                0 => literal,
                b => i.checked_sub(b).and_then(|j| values.get(j).copied())?,
            };
            values.push(v);
            Some(())
        })?;
        Column::Values(values)
    } else {
        let mut values = Vec::with_capacity(count);
        for_each_value(mode, &mut cur, count, |v| {
            values.push(v);
            Ok(())
        })?;
        Column::Values(values)
    };
    if cur.remaining() != 0 {
        return Err(format!(
            "{} bytes left after {count} values",
            cur.remaining()
        ));
    }
    Ok(column)
}

fn bad_value(e: CursorError) -> String {
    format!("{e:?} value")
}

/// Decodes the `count` values of a dense column and hands each to `f`, in order.
///
/// Every mode needs at least one byte per value (or per value but the first), checked before
/// anything is allocated, so a lying count cannot make the caller allocate more than the data
/// justifies.
fn for_each_value(
    mode: u8,
    cur: &mut Cursor,
    count: usize,
    mut f: impl FnMut(u64) -> Result<(), String>,
) -> Result<(), String> {
    if cur.remaining() < count.saturating_sub(1) {
        return Err(format!(
            "{} bytes cannot hold {count} values",
            cur.remaining()
        ));
    }
    match mode {
        MODE_PLAIN => {
            for _ in 0..count {
                f(cur.uvarint().map_err(bad_value)?)?;
            }
        }
        MODE_DELTA => {
            let mut prev = 0u64;
            for _ in 0..count {
                prev = prev.wrapping_add(unzigzag(cur.uvarint().map_err(bad_value)?) as u64);
                f(prev)?;
            }
        }
        MODE_PLANES | MODE_DELTA_PLANES => {
            let delta = mode == MODE_DELTA_PLANES;
            let mut prev = 0u64;
            if delta && count > 0 {
                prev = cur.uvarint().map_err(bad_value)?;
                f(prev)?;
            }
            let n = count - usize::from(delta && count > 0);
            let width = usize::from(cur.u8().map_err(bad_value)?);
            if !(1..=8).contains(&width) {
                return Err(format!("byte-plane width {width}"));
            }
            let planes = n
                .checked_mul(width)
                .and_then(|len| cur.take(len).ok())
                .ok_or_else(|| format!("byte planes shorter than {n} values of {width} bytes"))?;
            for i in 0..n {
                let mut v = 0u64;
                for k in 0..width {
                    v |= u64::from(planes[k * n + i]) << (8 * k);
                }
                prev = if delta { prev.wrapping_add(v) } else { v };
                f(prev)?;
            }
        }
        MODE_REPEAT => {
            // The values so far: what a back-reference names (bounded by `count`, which the
            // back-references' bytes already bound).
            let mut seen: Vec<u64> = Vec::with_capacity(count.min(cur.remaining()));
            let mut failed = None;
            repeat_values(cur, count, |back, literal, i| {
                let v = match back {
                    0 => literal,
                    b => i.checked_sub(b).and_then(|j| seen.get(j).copied())?,
                };
                seen.push(v);
                if failed.is_none() {
                    failed = f(v).err();
                }
                Some(())
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
        }
        other => return Err(format!("unknown column mode {other}")),
    }
    Ok(())
}

/// Decodes a `REPEAT` column of `count` values: `value(b, literal, i)` takes value `i`, its
/// back-reference `b` (0 for a literal, then `literal` is the value) and returns `None` when
/// `b` names no earlier value.
fn repeat_values(
    cur: &mut Cursor,
    count: usize,
    mut value: impl FnMut(usize, u64, usize) -> Option<()>,
) -> Result<(), String> {
    let tokens_len = usize::try_from(cur.uvarint().map_err(bad_value)?)
        .ok()
        .filter(|&n| n <= cur.remaining())
        .ok_or("the back-references overrun the column")?;
    let mut tokens = Cursor::new(cur.take(tokens_len).map_err(bad_value)?);
    let mut literal = 0u64;
    for i in 0..count {
        let b = tokens.uvarint().map_err(bad_value)?;
        if b == 0 {
            literal = literal.wrapping_add(unzigzag(cur.uvarint().map_err(bad_value)?) as u64);
        }
        usize::try_from(b)
            .ok()
            .and_then(|b| value(b, literal, i))
            .ok_or_else(|| format!("value {i} refers {b} values back"))?;
    }
    if tokens.remaining() != 0 {
        return Err(format!("{} back-reference bytes left", tokens.remaining()));
    }
    Ok(())
}

/// Accumulates events column by column and encodes them; the writer's bounded buffer.
#[derive(Debug, Default)]
pub struct ColumnBuilder {
    columns: [Vec<u64>; COLUMNS],
    /// One column's data before compression, and the `REPEAT` encoder's table: reused.
    scratch: Scratch,
}

#[derive(Debug, Default)]
struct Scratch {
    data: Vec<u8>,
    packed: Vec<u8>,
    /// The same column in a plane mode, and compressed.
    alt: Vec<u8>,
    alt_packed: Vec<u8>,
    repeat: Repeats,
}

/// A column's mode byte and its data (after the length).
fn split_column(column: &[u8]) -> (u8, &[u8]) {
    let mut cur = Cursor::new(column);
    let mode = cur.u8().unwrap_or(MODE_LINEAR);
    let _len = cur.uvarint();
    (mode, &column[cur.position()..])
}

impl ColumnBuilder {
    pub fn len(&self) -> usize {
        self.columns[0].len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn push(&mut self, e: &Event) {
        let values = [
            e.seq,
            e.time_ns,
            e.duration_ns,
            u64::from(e.pid),
            u64::from(e.tid),
            zigzag(i64::from(e.device)),
            u64::from(e.api.id()),
            u64::from(e.result),
            e.address,
            e.size,
            e.handle,
            e.aux,
            e.stream,
            e.pool,
            e.flags,
            u64::from(e.stack),
        ];
        for (column, v) in self.columns.iter_mut().zip(values) {
            column.push(v);
        }
    }

    /// Appends the chunk payload for the buffered events `range` to `out`, each column's data
    /// compressed with `compressor` where that makes it smaller (version 3), or none of them
    /// without one (for compressing the whole payload instead).
    pub fn encode_into(
        &mut self,
        range: std::ops::Range<usize>,
        out: &mut Vec<u8>,
        mut compressor: Option<&mut Compressor>,
    ) -> std::io::Result<()> {
        put_uvarint(out, range.len() as u64);
        let s = &mut self.scratch;
        for (c, column) in self.columns.iter().enumerate() {
            let values = &column[range.clone()];
            s.data.clear();
            let repeat = RECURRING.contains(&c).then_some(&mut s.repeat);
            let parts = encode_column(values, repeat, Choice::Smallest, &mut s.data);
            let (mode, data) = split_column(&s.data);
            let Some(compressor) = compressor
                .as_deref_mut()
                .filter(|_| data.len() >= MIN_COMPRESSED)
            else {
                out.extend_from_slice(&s.data);
                continue;
            };
            compressor.compress_parts(data, parts.starts(), &mut s.packed)?;
            let mut best = (mode, data.len(), &s.data, &s.packed);
            // Varints are smallest before compression, but timing noise compresses better in
            // byte planes (each plane its own block): compress both, keep the smaller.
            if matches!(mode, MODE_PLAIN | MODE_DELTA) {
                s.alt.clear();
                let parts = encode_column(values, None, Choice::Planes, &mut s.alt);
                let (alt_mode, alt) = split_column(&s.alt);
                compressor.compress_parts(alt, parts.starts(), &mut s.alt_packed)?;
                if s.alt_packed.len() < s.packed.len() {
                    best = (alt_mode, alt.len(), &s.alt, &s.alt_packed);
                }
            }
            let (mode, raw_len, plain, packed) = best;
            let stored = uvarint_len(raw_len as u64) + packed.len();
            if stored < raw_len {
                out.push(mode | COMPRESSED);
                put_uvarint(out, stored as u64);
                put_uvarint(out, raw_len as u64);
                out.extend_from_slice(packed);
            } else {
                out.extend_from_slice(plain);
            }
        }
        Ok(())
    }

    /// Value `i` of column `c`.
    pub fn value(&self, c: usize, i: usize) -> u64 {
        self.columns[c][i]
    }

    /// Forgets the buffered events.
    pub fn clear(&mut self) {
        for column in &mut self.columns {
            column.clear();
        }
    }

    /// The events as a batch; the 32-bit columns narrow, as decoding stores them (an
    /// [`Event`]'s fields of those columns are 32 bits wide, the device zigzag-encoded).
    fn into_batch(self) -> EventBatch {
        let len = self.len();
        let mut columns = self.columns.into_iter().enumerate().map(|(c, values)| {
            if NARROW.contains(&c) {
                Column::Narrow(values.iter().map(|&v| v as u32).collect())
            } else {
                Column::Values(values)
            }
        });
        EventBatch {
            len,
            columns: std::array::from_fn(|_| columns.next().expect("one per column")),
        }
    }
}

/// The `REPEAT` encoder's state: for each value, the index it was last seen at, in an
/// open-addressed table (cleared per column), and the two streams it writes.
#[derive(Debug, Default)]
struct Repeats {
    /// `(value, index + 1)`; index 0 marks an empty slot.
    slots: Vec<(u64, u32)>,
    tokens: Vec<u8>,
    literals: Vec<u8>,
}

impl Repeats {
    /// Encodes `values` into the two streams; returns the mode's data length.
    fn encode(&mut self, values: &[u64]) -> usize {
        let size = (values.len() * 2).next_power_of_two().max(16);
        self.slots.clear();
        self.slots.resize(size, (0, 0));
        self.tokens.clear();
        self.literals.clear();
        let mask = size - 1;
        let mut literal = 0u64;
        for (i, &v) in values.iter().enumerate() {
            let mut slot = (v.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize & mask;
            loop {
                let (key, at) = self.slots[slot];
                if at == 0 {
                    put_uvarint(&mut self.tokens, 0);
                    put_uvarint(&mut self.literals, zigzag(v.wrapping_sub(literal) as i64));
                    literal = v;
                    break;
                }
                if key == v {
                    put_uvarint(&mut self.tokens, (i + 1 - at as usize) as u64);
                    break;
                }
                slot = (slot + 1) & mask;
            }
            self.slots[slot] = (v, i as u32 + 1);
        }
        uvarint_len(self.tokens.len() as u64) + self.tokens.len() + self.literals.len()
    }
}

/// Where a column's data divides into parts of different statistics (the byte planes, the two
/// streams of `REPEAT`): the offset into the data at which each part after the first begins.
/// zstd codes each part as a block of its own ([`Compressor::compress_parts`]).
#[derive(Debug, Default, Clone, Copy)]
struct Parts {
    starts: [usize; 8],
    len: usize,
}

impl Parts {
    fn push(&mut self, at: usize) {
        if let Some(slot) = self.starts.get_mut(self.len) {
            *slot = at;
            self.len += 1;
        }
    }

    fn starts(&self) -> &[usize] {
        &self.starts[..self.len]
    }
}

/// Which modes [`encode_column`] chooses among.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    /// The mode that takes the fewest bytes before compression.
    Smallest,
    /// The smaller of the two plane modes: what compresses best where values carry noise in
    /// their low bytes, however many bytes varints would take.
    Planes,
}

/// Appends `values` as one column (mode, length, data) in the mode `choice` picks; `REPEAT` is
/// tried when `repeat` is given. Returns where the data's parts begin.
fn encode_column(
    values: &[u64],
    repeat: Option<&mut Repeats>,
    choice: Choice,
    out: &mut Vec<u8>,
) -> Parts {
    let mut parts = Parts::default();
    let Some(&first) = values.first() else {
        out.extend_from_slice(&[MODE_LINEAR, 2, 0, 0]);
        return parts;
    };
    let n = values.len();
    let step = values.get(1).map_or(0, |v| v.wrapping_sub(first));
    // Most columns are constant: this loop settles them, and exits early for the others.
    let mut expected = first;
    if values.iter().all(|&v| {
        let hit = v == expected;
        expected = expected.wrapping_add(step);
        hit
    }) {
        out.push(MODE_LINEAR);
        put_uvarint(
            out,
            (uvarint_len(first) + uvarint_len(zigzag(step as i64))) as u64,
        );
        put_uvarint(out, first);
        put_uvarint(out, zigzag(step as i64));
        return parts;
    }
    // One pass gathers what every other mode would cost (the plane modes' alone for `Planes`,
    // asked for after the same column's `Smallest`).
    let (mut plain, mut delta, mut bits, mut prev) = (0usize, 0usize, 0u64, 0u64);
    if choice == Choice::Planes {
        bits = values.iter().fold(0, |acc, &v| acc | v);
    } else {
        for &v in values {
            plain += uvarint_len(v);
            delta += uvarint_len(zigzag(v.wrapping_sub(prev) as i64));
            bits |= v;
            prev = v;
        }
    }
    // Plane widths leave out the first value, which DELTA_PLANES stores as a varint.
    let delta_bits = values
        .windows(2)
        .fold(0, |acc, w| acc | w[1].wrapping_sub(w[0]));
    let width = byte_width(bits);
    let delta_width = byte_width(delta_bits);
    let planes = 1 + n * width;
    let delta_planes = uvarint_len(first) + 1 + (n - 1) * delta_width;
    // The width byte does not count against planes: ties go to them.
    let best = match choice {
        Choice::Smallest => plain.min(delta).min(planes - 1).min(delta_planes - 1) + 1,
        Choice::Planes => planes.min(delta_planes),
    };
    let header = |out: &mut Vec<u8>, mode: u8, len: usize| {
        out.push(mode);
        put_uvarint(out, len as u64);
        out.reserve(len);
        out.len()
    };
    if let Some(r) = repeat.filter(|_| choice == Choice::Smallest) {
        let len = r.encode(values);
        if len < best {
            let data = header(out, MODE_REPEAT, len);
            put_uvarint(out, r.tokens.len() as u64);
            out.extend_from_slice(&r.tokens);
            parts.push(out.len() - data);
            out.extend_from_slice(&r.literals);
            return parts;
        }
    }
    if delta_planes <= best {
        let data = header(out, MODE_DELTA_PLANES, delta_planes);
        put_uvarint(out, first);
        let planes = out.len() + 1 - data;
        put_planes(
            out,
            values.windows(2).map(|w| w[1].wrapping_sub(w[0])),
            n - 1,
            delta_width,
        );
        (0..delta_width).for_each(|k| parts.push(planes + k * (n - 1)));
    } else if planes <= best {
        header(out, MODE_PLANES, planes);
        put_planes(out, values.iter().copied(), n, width);
        (0..width).for_each(|k| parts.push(1 + k * n));
    } else if plain <= best {
        header(out, MODE_PLAIN, plain);
        for &v in values {
            put_uvarint(out, v);
        }
    } else {
        header(out, MODE_DELTA, delta);
        let mut prev = 0u64;
        for &v in values {
            put_uvarint(out, zigzag(v.wrapping_sub(prev) as i64));
            prev = v;
        }
    }
    parts
}

/// Bytes needed for a value with these bits set (at least one).
fn byte_width(bits: u64) -> usize {
    ((64 - bits.leading_zeros() as usize).div_ceil(8)).max(1)
}

/// Writes the width byte, then `width` planes of `n` bytes each.
fn put_planes<I: Iterator<Item = u64> + Clone>(
    out: &mut Vec<u8>,
    values: I,
    n: usize,
    width: usize,
) {
    out.push(width as u8);
    let start = out.len();
    out.resize(start + n * width, 0);
    let planes = &mut out[start..];
    for (i, v) in values.enumerate() {
        for k in 0..width {
            planes[k * n + i] = (v >> (8 * k)) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::arb_event;
    use proptest::prelude::*;

    /// The storage mode of each column of a raw payload.
    fn column_modes(raw: &[u8]) -> Vec<u8> {
        let mut cur = Cursor::new(raw);
        cur.uvarint().unwrap();
        (0..COLUMNS)
            .map(|_| {
                let mode = cur.u8().unwrap();
                let len = cur.uvarint().unwrap();
                cur.take(len as usize).unwrap();
                mode
            })
            .collect()
    }

    fn round_trip(events: &[Event]) -> EventBatch {
        let mut b = ColumnBuilder::default();
        events.iter().for_each(|e| b.push(e));
        let mut raw = Vec::new();
        b.encode_into(0..b.len(), &mut raw, Some(&mut compressor()))
            .unwrap();
        EventBatch::decode(&raw, events.len()).unwrap()
    }

    fn compressor() -> Compressor {
        Compressor::new(1).unwrap()
    }

    proptest! {
        #[test]
        fn columns_round_trip_any_events(events in proptest::collection::vec(arb_event(), 0..200)) {
            let batch = round_trip(&events);
            prop_assert_eq!(batch.iter().collect::<Vec<_>>(), events);
        }

        #[test]
        fn rows_rebuilt_column_by_column_are_the_events_of_their_range(
            mut events in proptest::collection::vec(arb_event(), 1..200),
            cut in 0usize..200,
        ) {
            // Numbered in order, as a recorder numbers them, and a falling column: linear
            // columns among the others.
            events.iter_mut().zip(0u64..).for_each(|(e, i)| {
                e.seq = 100 + i;
                e.duration_ns = 1000u64.wrapping_sub(3 * i);
            });
            let batch = round_trip(&events);
            let cut = cut % events.len();
            let mut rows = vec![events[0]];
            batch.extend_rows(cut..events.len(), &mut rows);
            prop_assert_eq!(&rows[..1], &events[..1]);
            prop_assert_eq!(&rows[1..], &events[cut..]);
        }

        #[test]
        fn decode_never_panics_on_garbage(raw: Vec<u8>, count in 0usize..64) {
            let _ = EventBatch::decode(&raw, count);
        }
    }

    #[test]
    fn rows_rebuilt_beside_constant_columns_are_the_events_of_their_range() {
        let events: Vec<Event> = (0..1000u64)
            .map(|i| Event {
                seq: i,
                time_ns: i * i,
                pid: 7,
                device: 3,
                address: 0x7f00_0000_0000 + (i * 7919) % 1000 * 512,
                stack: 5,
                ..Event::new(Api::TorchAlloc)
            })
            .collect();
        let batch = round_trip(&events);
        assert_eq!(batch.column(3), &Column::Linear { start: 7, step: 0 });
        let mut rows = vec![Event::new(Api::CuMemFree_v2)];
        batch.extend_rows(3..997, &mut rows);
        assert_eq!(rows[0], Event::new(Api::CuMemFree_v2));
        assert_eq!(&rows[1..], &events[3..997]);
    }

    #[test]
    fn sequence_numbers_and_constants_take_linear_mode() {
        let events: Vec<Event> = (0..1000)
            .map(|i| Event {
                seq: 100 + i,
                time_ns: i * i,
                ..Event::new(Api::CuMemAlloc_v2)
            })
            .collect();
        let batch = round_trip(&events);
        assert_eq!(
            batch.column(0),
            &Column::Linear {
                start: 100,
                step: 1
            }
        );
        assert_eq!(batch.column(6), &Column::Linear { start: 1, step: 0 });
        assert!(matches!(batch.column(1), Column::Values(_)));
    }

    #[test]
    fn noisy_timestamps_take_delta_planes_and_round_trip() {
        let events: Vec<Event> = (0..1000u64)
            .map(|i| Event {
                seq: i,
                time_ns: 1_000_000_000 + i * 40_000 + (i * 7919) % 4000,
                duration_ns: 750 + (i * 104_729) % 300,
                ..Event::new(Api::CuMemAllocAsync)
            })
            .collect();
        let mut b = ColumnBuilder::default();
        events.iter().for_each(|e| b.push(e));
        let mut raw = Vec::new();
        b.encode_into(0..b.len(), &mut raw, Some(&mut compressor()))
            .unwrap();
        assert_eq!(column_modes(&raw)[1], MODE_DELTA_PLANES | COMPRESSED);
        let batch = EventBatch::decode(&raw, events.len()).unwrap();
        assert_eq!(batch.iter().collect::<Vec<_>>(), events);
    }

    /// A training loop's addresses: blocks handed out and freed again, step after step.
    fn reused_blocks() -> Vec<Event> {
        (0..3000u64)
            .map(|i| Event {
                seq: i,
                time_ns: i * 1000 + (i * 7919) % 611,
                address: 0x7f00_0000_0000 + ((i / 2) % 40) * 0x20_0000 + (i % 7) * 0x1000,
                size: 4096 << (i % 5),
                ..Event::new(if i % 2 == 0 {
                    Api::CuMemAllocAsync
                } else {
                    Api::CuMemFreeAsync
                })
            })
            .collect()
    }

    #[test]
    fn recurring_addresses_take_repeat_mode_and_round_trip_compressed() {
        let events = reused_blocks();
        let mut b = ColumnBuilder::default();
        events.iter().for_each(|e| b.push(e));
        let mut raw = Vec::new();
        b.encode_into(0..b.len(), &mut raw, Some(&mut compressor()))
            .unwrap();
        let modes = column_modes(&raw);
        assert_eq!(modes[8] & !COMPRESSED, MODE_REPEAT);
        assert_ne!(modes[1] & COMPRESSED, 0, "timestamps compressed");
        assert_eq!(modes[0], MODE_LINEAR, "seq stays a progression");
        let batch = EventBatch::decode(&raw, events.len()).unwrap();
        assert_eq!(batch.iter().collect::<Vec<_>>(), events);
    }

    #[test]
    fn a_back_reference_before_the_first_value_is_refused() {
        let mut data = Vec::new();
        put_uvarint(&mut data, 2);
        data.extend([0, 2, 8]);
        let err = decode_column(8, MODE_REPEAT, &data, 2).unwrap_err();
        assert!(err.contains("value 1 refers 2 values back"), "{err}");
        let ok = decode_column(8, MODE_REPEAT, &[2, 0, 1, 8], 2).unwrap();
        assert_eq!(ok, Column::Values(vec![4, 4]));
        // Any column may take the mode; the stack column decodes to 32-bit values.
        let ok = decode_column(15, MODE_REPEAT, &[2, 0, 1, 8], 2).unwrap();
        assert_eq!(ok, Column::Narrow(vec![4, 4]));
        let err = decode_column(15, MODE_REPEAT, &[2, 0, 2, 8], 2).unwrap_err();
        assert!(err.contains("value 1 refers 2 values back"), "{err}");
    }

    /// A nearly constant column of a full chunk compresses far more than 4,096 times (the
    /// limit once was 4,096: a synthetic 1 M-event trace the writer made could not be read).
    #[test]
    fn a_column_zstd_compresses_to_its_densest_still_decompresses() {
        let raw = vec![7u8; 393_217];
        let mut frame = Vec::new();
        compressor().compress(&raw, &mut frame).unwrap();
        assert!(frame.len() * 4096 < raw.len(), "{} bytes", frame.len());
        let mut data = Vec::new();
        put_uvarint(&mut data, raw.len() as u64);
        data.extend(&frame);
        let mut out = Vec::new();
        assert_eq!(decompress_column(&data, &mut out).unwrap(), raw.len());
        assert!(out.iter().all(|&b| b == 7) && out.len() == raw.len());
    }

    #[test]
    fn a_compressed_column_claiming_more_than_its_frame_allows_is_refused() {
        let mut frame = Vec::new();
        compressor().compress(&[1u8; 1000], &mut frame).unwrap();
        let mut data = Vec::new();
        put_uvarint(&mut data, (MAX_COLUMN_RATIO * frame.len() + 1) as u64);
        data.extend(&frame);
        let err = decompress_column(&data, &mut Vec::new()).unwrap_err();
        assert!(err.contains("declares"), "{err}");
        let mut data = Vec::new();
        put_uvarint(&mut data, 999);
        data.extend(&frame);
        assert!(
            decompress_column(&data, &mut Vec::new()).is_err(),
            "wrong length"
        );
    }

    #[test]
    fn an_unknown_api_id_is_refused_in_either_column_form() {
        let mut raw = Vec::new();
        put_uvarint(&mut raw, 1);
        for c in 0..COLUMNS {
            encode_column(
                &[if c == 6 { 999 } else { 0 }],
                None,
                Choice::Smallest,
                &mut raw,
            );
        }
        let (_, what) = EventBatch::decode(&raw, 1).unwrap_err();
        assert!(what.contains("unknown API id 999"), "{what}");

        let mut raw = Vec::new();
        put_uvarint(&mut raw, 3);
        for c in 0..COLUMNS {
            encode_column(
                &if c == API { [1, 4, 998] } else { [0, 0, 0] },
                None,
                Choice::Smallest,
                &mut raw,
            );
        }
        let (_, what) = EventBatch::decode(&raw, 3).unwrap_err();
        assert!(what.contains("event 2: unknown API id 998"), "{what}");
    }
}
