//! The fusion spec in TOML (what `kiln fuse --spec` reads):
//!
//! ```toml
//! name = "fused"
//! kernels = ["add", "mul"]
//! ndranges = [{ global = [512] }, { global = [512], local = [64], offset = [0] }]
//! identical = [[[0, 2], [1, 0]]]                 # groups of [entry, param]
//! promote = [{ entry = 0, param = 2, to = "private" }]   # optional: size, buffer_len
//! constants = [{ entry = 1, param = 3, value = 16 }]     # integer, float or bool
//! barriers = "work_group"                        # or "none"
//! remap = "default"                              # or "ptx"
//! ```
//!
//! Every key is documented for users, with examples, in docs/fusion.md.

use serde::Deserialize;
use thiserror::Error;

use super::spec::{
    BarrierPolicy, ConstValue, Constant, FusionSpec, ParamRef, PromoteTo, Promotion, RangeSpec,
    RemapMode,
};

/// A spec that could not be read.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SpecError {
    /// Not valid TOML, or fields of the wrong shape (the message names the field and line).
    #[error("invalid fusion spec: {0}")]
    Toml(String),
    /// A field has a value outside its allowed set.
    #[error("invalid fusion spec: {0}")]
    Value(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    name: Option<String>,
    kernels: Vec<String>,
    ndranges: Vec<RawRange>,
    #[serde(default)]
    identical: Vec<Vec<[usize; 2]>>,
    #[serde(default)]
    promote: Vec<RawPromote>,
    #[serde(default)]
    constants: Vec<RawConst>,
    barriers: Option<String>,
    remap: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRange {
    global: Vec<u32>,
    local: Option<Vec<u32>>,
    offset: Option<Vec<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPromote {
    entry: usize,
    param: usize,
    to: String,
    size: Option<u32>,
    buffer_len: Option<u32>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawValue {
    Bool(bool),
    Int(i64),
    Float(f64),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConst {
    entry: usize,
    param: usize,
    value: RawValue,
}

impl FusionSpec {
    /// Reads a spec from TOML text (format in the module docs).
    pub fn from_toml(text: &str) -> Result<FusionSpec, SpecError> {
        let raw: RawSpec = toml::from_str(text).map_err(|e| SpecError::Toml(e.to_string()))?;
        let promote = raw
            .promote
            .into_iter()
            .map(|p| {
                let to = match p.to.as_str() {
                    "private" => PromoteTo::Private,
                    "local" => PromoteTo::Local,
                    "none" => PromoteTo::None,
                    o => {
                        return Err(SpecError::Value(format!(
                            "promote.to is `{o}` (expected `private`, `local` or `none`)"
                        )))
                    }
                };
                Ok(Promotion {
                    param: ParamRef::new(p.entry, p.param),
                    to,
                    size: p.size,
                    buffer_len: p.buffer_len,
                })
            })
            .collect::<Result<_, _>>()?;
        let barriers = match raw.barriers.as_deref() {
            None | Some("work_group") => BarrierPolicy::WorkGroup,
            Some("none") | Some("no_barriers") => BarrierPolicy::None,
            Some(o) => {
                return Err(SpecError::Value(format!(
                    "barriers is `{o}` (expected `work_group` or `none`)"
                )))
            }
        };
        let remap = match raw.remap.as_deref() {
            None | Some("default") => RemapMode::Default,
            Some("ptx") => RemapMode::Ptx,
            Some(o) => {
                return Err(SpecError::Value(format!(
                    "remap is `{o}` (expected `default` or `ptx`)"
                )))
            }
        };
        // An explicit empty name would silently become the default one.
        if raw.name.as_deref() == Some("") {
            return Err(SpecError::Value("name is empty (leave it out for `fused`)".into()));
        }
        Ok(FusionSpec {
            name: raw.name.unwrap_or_else(|| "fused".into()),
            kernels: raw.kernels,
            ndranges: raw
                .ndranges
                .into_iter()
                .map(|r| RangeSpec { global: r.global, local: r.local, offset: r.offset })
                .collect(),
            identical: raw
                .identical
                .into_iter()
                .map(|g| g.into_iter().map(|[e, p]| ParamRef::new(e, p)).collect())
                .collect(),
            promote,
            constants: raw
                .constants
                .into_iter()
                .map(|c| Constant {
                    param: ParamRef::new(c.entry, c.param),
                    value: match c.value {
                        RawValue::Bool(b) => ConstValue::Bool(b),
                        RawValue::Int(i) => ConstValue::Int(i as i128),
                        RawValue::Float(f) => ConstValue::Float(f),
                    },
                })
                .collect(),
            barriers,
            remap,
        })
    }
}
