//! What can be wrong with a `--policy` list: its syntax, a name no policy has, or an option a
//! policy rejects.

use crate::units::SizeError;

/// A policy list that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error(transparent)]
    Syntax(#[from] SpecSyntax),
    #[error("unknown policy `{name}` (known: {})", known.join(", "))]
    Unknown {
        name: String,
        known: Vec<&'static str>,
    },
    /// An option the policy does not take, or a value it rejects.
    #[error("{spec}: {source}")]
    Option { spec: String, source: OptionError },
}

/// An option of one policy that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    #[error("unknown option `{key}` ({})", known_keys(known))]
    Unknown {
        key: String,
        known: Vec<&'static str>,
    },
    #[error("{key}={value}: not a whole number")]
    NotWhole { key: String, value: String },
    #[error("{key}={value}: at most {max}")]
    AboveMaximum {
        key: String,
        value: String,
        max: u64,
    },
    #[error("{key}={value}: not a power of two up to 1 GiB")]
    NotAnAlignment { key: String, value: u64 },
    #[error("{key}={value}: not a number")]
    NotANumber { key: String, value: String },
    #[error("{key}={value}: not true or false")]
    NotABool { key: String, value: String },
    #[error("{key}: {source}")]
    Size { key: String, source: SizeError },
    /// A value outside what the policy (or the allocator it models) accepts, and why.
    #[error("{0}")]
    Rejected(String),
}

fn known_keys(known: &[&str]) -> String {
    if known.is_empty() {
        "this policy takes none".into()
    } else {
        format!("known: {}", known.join(", "))
    }
}

impl From<String> for OptionError {
    fn from(why: String) -> OptionError {
        OptionError::Rejected(why)
    }
}

impl From<&str> for OptionError {
    fn from(why: &str) -> OptionError {
        OptionError::Rejected(why.into())
    }
}

/// Text that is not `NAME[:KEY=VALUE,...][,NAME...]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecSyntax {
    #[error("`{0}` is an option but no policy comes before it")]
    OptionWithoutPolicy(String),
    #[error("`{0}` is not KEY=VALUE")]
    NotKeyValue(String),
    #[error("no policy named")]
    Empty,
    /// A `key:value` item right after a policy written as NAME[:KEY=VALUE,...]: it could be an
    /// option of that policy or a second policy (a configuration of the default allocator).
    #[error(
        "`{written}` is ambiguous: write `{one}` for one policy with that option, or `{two}` for \
         two policies"
    )]
    Ambiguous {
        written: String,
        one: String,
        two: String,
    },
    /// A `PYTORCH_CUDA_ALLOC_CONF` value that PyTorch would reject too.
    #[error("{0}")]
    AllocConf(String),
}
