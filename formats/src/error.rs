//! The one error type of this crate.

/// Why a trace could not be read or written. Messages say where (byte offset) and what.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{0}")]
    Io(#[from] std::io::Error),

    #[error("not a vramtrace file (the first 8 bytes are not the vramtrace magic)")]
    NotATrace,

    #[error(
        "format version {found} is newer than this vramtrace understands ({supported}); \
         upgrade vramtrace to read it"
    )]
    NewerVersion { found: u16, supported: u16 },

    #[error("the file is empty")]
    Empty,

    #[error("the file ends at byte {offset} inside the file header; nothing was recorded")]
    TruncatedHeader { offset: u64 },

    #[error("corrupt data at byte {offset}: {what}")]
    Corrupt { offset: u64, what: String },

    #[error("left beside the trace, both files as they are: {0}")]
    JournalNotMerged(String),

    #[error("the trace writer was already closed after an earlier error")]
    WriterPoisoned,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
