//! Whether a trace holds every event its process recorded: a file cut short, one read past a
//! damaged chunk (`--salvage`), or one with a crash journal's events merged in memory only is
//! incomplete, and every command says so beside its figures, with the share of the numbered
//! events it has (docs/definitions.md, "Incomplete traces").

use serde::Serialize;
use vramtrace_format::Layout;
use vramtrace_format::chunk::ChunkKind;

/// What an incomplete trace has.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Incomplete {
    /// Why, with the byte offset where the file went wrong.
    pub damage: String,
    /// Events read.
    pub events: u64,
    /// Events the sequence numbers of the chunks read account for (each chunk numbers its
    /// first event): at least as many as the process recorded before the last chunk read.
    /// Events after a cut are not numbered anywhere, so the share is an upper bound.
    pub events_numbered: u64,
    /// `events / events_numbered`.
    pub fraction: f64,
}

impl Incomplete {
    /// `None` for a complete trace.
    pub fn of(layout: &Layout) -> Option<Incomplete> {
        if layout.complete {
            return None;
        }
        let chunks = layout.chunks.iter().filter(|c| c.kind == ChunkKind::Events);
        let events: u64 = chunks.clone().map(|c| u64::from(c.event_count)).sum();
        let numbered = chunks
            .map(|c| c.first_seq + u64::from(c.event_count))
            .max()
            .unwrap_or(0)
            .max(events);
        Some(Incomplete {
            damage: layout
                .damage
                .clone()
                .unwrap_or_else(|| "the file has no index".into()),
            events,
            events_numbered: numbered,
            fraction: if numbered == 0 {
                1.0
            } else {
                events as f64 / numbered as f64
            },
        })
    }

    /// One line for stderr.
    pub fn warning(&self, file: &str) -> String {
        format!(
            "{file} is incomplete ({}): its figures come from the {} events read, {:.1}% of the \
             {} its chunks number (events after a cut are not numbered anywhere)",
            self.damage,
            crate::units::count(self.events),
            100.0 * self.fraction,
            crate::units::count(self.events_numbered)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_format::chunk::{ChunkHeader, Compression};

    fn events(first_seq: u64, event_count: u32) -> ChunkHeader {
        ChunkHeader {
            offset: 0,
            kind: ChunkKind::Events,
            compression: Compression::None,
            payload_len: 0,
            raw_len: 0,
            event_count,
            first_seq,
            first_time_ns: 0,
            last_time_ns: 0,
            payload_crc: 0,
        }
    }

    #[test]
    fn a_salvaged_trace_has_the_share_of_the_numbered_events_it_read() {
        let mut layout = Layout {
            version: 3,
            chunks: vec![events(0, 100), events(200, 50)],
            complete: false,
            damage: Some("bad chunk at byte 4096".into()),
            file_bytes: 8192,
        };
        let i = Incomplete::of(&layout).unwrap();
        assert_eq!((i.events, i.events_numbered), (150, 250));
        assert_eq!(
            i.warning("t.vramtrace"),
            "t.vramtrace is incomplete (bad chunk at byte 4096): its figures come from the 150 \
             events read, 60.0% of the 250 its chunks number (events after a cut are not \
             numbered anywhere)"
        );
        layout.complete = true;
        assert_eq!(Incomplete::of(&layout), None);
    }
}
