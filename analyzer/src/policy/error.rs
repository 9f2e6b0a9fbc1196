//! What can be wrong with a `--policy` list: its syntax, a name no policy has, or an option a
//! policy rejects.

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
    /// An option the policy does not take, or a value it rejects; `reason` says which and why.
    #[error("{spec}: {reason}")]
    Option { spec: String, reason: String },
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
}
