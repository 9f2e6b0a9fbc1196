//! The allocator policies, one file each, and the registry that names them.
//!
//! Adding a policy: write `policy/NAME.rs` with a type implementing [`Policy`] and a
//! `pub const INFO: PolicyInfo`, then add its `mod` line and one entry to [`REGISTRY`].
//! Nothing else changes: the commands, the parallel engine and `--list-policies` read the
//! registry.
//!
//! Besides the policies this module holds what they are written against: the [`Policy`] trait,
//! the simulated [`Driver`] and the [`Device`] handle through which a policy calls it, the
//! [`AddressMap`] a policy reports, and (in `support/`) the option parser, the coalescing free
//! list and the slot table several policies share. The replay engine (`crate::replay`) builds
//! on this module, never the reverse.

pub mod alloc_conf;
mod allocator;
pub mod best_fit;
pub mod bfc;
pub mod buddy;
pub mod cuda_async;
pub mod cuda_malloc;
mod device;
pub mod driver;
pub mod equivalence;
mod error;
pub mod gmlake;
pub mod greedy_by_size;
mod layout;
pub mod lower_bound;
pub mod ordered_pool;
pub mod pytorch;
pub mod rmm_arena;
pub mod rmm_binning;
pub mod rmm_pool;
mod stream_pool;
pub mod support;
pub mod validated;

pub use allocator::{Policy, Refused};
pub use device::Device;
pub use driver::{AddressOrder, Driver, DriverCall, DriverModel};
pub use error::{OptionError, PolicyError, SpecSyntax};
pub use layout::{AddressMap, BlockSpan, Span};
pub use support::options::{Options, PolicySpec, parse_divisions, parse_specs};

use crate::model::RequestStream;
use driver::H200_TOTAL_MEMORY;

/// One option a policy takes, for `--list-policies`.
#[derive(Debug, Clone, Copy)]
pub struct KeyInfo {
    pub key: &'static str,
    pub default: &'static str,
    pub about: &'static str,
}

/// What a policy needs to be built for one replay.
#[derive(Debug, Clone, Copy)]
pub struct BuildContext<'a> {
    /// The whole stream: online policies ignore it, offline bounds plan from it.
    pub stream: &'a RequestStream,
    /// The replay's device capacity (`u64::MAX` for none).
    pub capacity: u64,
}

impl BuildContext<'_> {
    /// The device's memory, for the options defined as a fraction of it: the capacity, or
    /// when the replay has none the recorded device's total (`device.memory`), else the
    /// H200's `totalGlobalMem`.
    pub fn device_memory(&self) -> u64 {
        if self.capacity == u64::MAX {
            self.stream.device_total.unwrap_or(H200_TOTAL_MEMORY)
        } else {
            self.capacity
        }
    }
}

/// Makes a policy from its options, or says which option is wrong.
pub type Builder = fn(&Options, &BuildContext) -> Result<Box<dyn Policy>, OptionError>;

/// A registered policy.
#[derive(Clone, Copy)]
pub struct PolicyInfo {
    pub name: &'static str,
    pub summary: &'static str,
    pub keys: &'static [KeyInfo],
    pub build: Builder,
}

impl std::fmt::Debug for PolicyInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyInfo")
            .field("name", &self.name)
            .finish()
    }
}

/// Every policy, in the order `all` runs them.
pub const REGISTRY: &[PolicyInfo] = &[
    cuda_malloc::INFO,
    pytorch::INFO,
    pytorch::EXPANDABLE_INFO,
    greedy_by_size::INFO,
    lower_bound::INFO,
    // Part 2 (issue 6); after the bounds so that part 1's outputs keep their positions.
    cuda_async::INFO,
    bfc::INFO,
    rmm_pool::INFO,
    rmm_arena::INFO,
    rmm_binning::INFO,
    gmlake::INFO,
    best_fit::INFO,
    buddy::INFO,
];

/// The bounds: policies that plan with the whole stream known (or hold exactly what is live),
/// so no program can select them and their placement does not depend on the capacity.
pub const BOUNDS: &[&str] = &["lower-bound", "greedy-by-size"];

/// The policies whose build reads the stream's requests, not only its device's memory (a plan
/// of the whole stream; whether the program ordered its CUDA streams at all): they cannot start
/// before the whole stream is known ([`crate::replay::Beside`]).
pub const READ_THE_STREAM: &[&str] = &["greedy-by-size", "cuda-async"];

/// The policies a program can select: each is an allocator some framework or library offers,
/// chosen by an environment variable or a documented call (docs/definitions.md, "tune"). The
/// others model research allocators (GMLake, best fit, buddy) or are [`BOUNDS`].
pub const SELECTABLE: &[&str] = &[
    "cuda-malloc",
    "pytorch",
    "pytorch-expandable",
    "cuda-async",
    "bfc",
    "rmm-pool",
    "rmm-arena",
    "rmm-binning",
];

/// What a policy is to a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyRole {
    /// One of [`SELECTABLE`].
    Setting,
    /// One of [`BOUNDS`]: the best any allocator could do.
    Bound,
    /// A research allocator's model: no framework ships it.
    Model,
}

/// The role of the policy `spec` names.
pub fn role(spec: &PolicySpec) -> PolicyRole {
    if BOUNDS.contains(&spec.name.as_str()) {
        PolicyRole::Bound
    } else if SELECTABLE.contains(&spec.name.as_str()) {
        PolicyRole::Setting
    } else {
        PolicyRole::Model
    }
}

/// Whether `spec` reserves a fixed share of the device up front whatever the program does
/// (BFC without growth, an RMM arena): its peak is that share, not a measure of the program.
pub fn preallocates(spec: &PolicySpec) -> bool {
    let opt = |k: &str| {
        spec.options
            .iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    match spec.name.as_str() {
        "bfc" => opt("allow_growth") != Some("true"),
        "rmm-arena" => true,
        _ => false,
    }
}

/// The registered policy called `name`.
pub fn find(name: &str) -> Option<&'static PolicyInfo> {
    REGISTRY.iter().find(|p| p.name == name)
}

/// Policies that plan from the whole request stream before its first request: their cost grows
/// with the number of pairs of lifetimes that overlap, not with the stream's length (the
/// `greedy-by-size` plan of a 630,000-entry generate-loop snapshot takes 9.5 s of one core, the
/// other twelve policies 0.04 to 0.09 s each). `online` is every policy but these.
pub const OFFLINE: &[&str] = &[greedy_by_size::INFO.name];

/// `all`, `online` (all but [`OFFLINE`]), or a list of specs (in the policy syntax or the
/// `PYTORCH_CUDA_ALLOC_CONF` syntax, [`alloc_conf::parse_policy_list`]); checks names and
/// options so errors come before any work.
pub fn resolve(text: &str) -> Result<Vec<PolicySpec>, PolicyError> {
    let set = text.trim();
    let specs = if set == "all" || set == "online" {
        REGISTRY
            .iter()
            .filter(|p| set == "all" || !OFFLINE.contains(&p.name))
            .map(|p| PolicySpec {
                name: p.name.to_string(),
                options: Vec::new(),
            })
            .collect()
    } else {
        alloc_conf::parse_policy_list(text)?
    };
    let empty = RequestStream::default();
    for spec in &specs {
        build(
            spec,
            &BuildContext {
                stream: &empty,
                capacity: u64::MAX,
            },
        )?;
    }
    Ok(specs)
}

/// Builds the policy a spec names, with its options.
pub fn build(spec: &PolicySpec, ctx: &BuildContext) -> Result<Box<dyn Policy>, PolicyError> {
    let (info, options) = options_of(spec)?;
    (info.build)(&options, ctx).map_err(|source| rejected(spec, source))
}

/// The policy a spec names and its options, checked against the keys the policy knows.
fn options_of(spec: &PolicySpec) -> Result<(&'static PolicyInfo, Options<'_>), PolicyError> {
    let info = find(&spec.name).ok_or_else(|| PolicyError::Unknown {
        name: spec.name.clone(),
        known: REGISTRY.iter().map(|p| p.name).collect(),
    })?;
    let options = Options::new(&spec.options, info.keys).map_err(|e| rejected(spec, e))?;
    Ok((info, options))
}

fn rejected(spec: &PolicySpec, source: OptionError) -> PolicyError {
    PolicyError::Option {
        spec: spec.to_string(),
        source,
    }
}
