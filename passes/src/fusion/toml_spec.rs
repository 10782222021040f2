//! The fusion spec in TOML (what `kiln fuse --spec` reads):
//!
//! ```toml
//! name = "fused"
//! kernels = ["add", "mul"]
//! ndranges = [{ global = [512] }, { global = [512], local = [64], offset = [0] }]
//! identical = [[[0, 2], [1, 0]]]                 # groups of [entry, param]
//! # or by name: [["add", "c"], [1, "a"]] (an entry by index or kernel name, a parameter by
//! # index or name; parameter names need the module: `FusionSpec::from_toml_for`)
//! promote = [{ entry = 0, param = 2, to = "private" }]   # optional: size, buffer_len
//! constants = [{ entry = 1, param = 3, value = 16 }]     # integer, float or bool
//! barriers = "work_group"                        # or "none"
//! remap = "default"                              # or "ptx"
//! epilogue = false                               # true: store-side epilogue fusion
//! ```
//!
//! Every key is documented for users, with examples, in docs/fusion.md.

use serde::Deserialize;
use thiserror::Error;

use super::names::{EntrySel, ParamSel};
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
    identical: Vec<Vec<[RawSel; 2]>>,
    #[serde(default)]
    promote: Vec<RawPromote>,
    #[serde(default)]
    constants: Vec<RawConst>,
    barriers: Option<String>,
    remap: Option<String>,
    #[serde(default)]
    epilogue: bool,
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
    entry: RawSel,
    param: RawSel,
    to: String,
    size: Option<u32>,
    buffer_len: Option<u32>,
}

/// An entry or parameter: by index or by name.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawSel {
    Index(usize),
    Name(String),
}

impl RawSel {
    fn entry(self) -> EntrySel {
        match self {
            RawSel::Index(i) => EntrySel::Index(i),
            RawSel::Name(n) => EntrySel::Name(n),
        }
    }

    fn param(self) -> ParamSel {
        match self {
            RawSel::Index(i) => ParamSel::Index(i),
            RawSel::Name(n) => ParamSel::Name(n),
        }
    }
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
    entry: RawSel,
    param: RawSel,
    value: RawValue,
}

impl FusionSpec {
    /// Reads a spec from TOML text (format in the module docs). Entries may be named by
    /// kernel name; a parameter named by name is refused (it needs the module:
    /// [`from_toml_for`](Self::from_toml_for)).
    pub fn from_toml(text: &str) -> Result<FusionSpec, SpecError> {
        FusionSpec::read_toml(text, None)
    }

    /// Reads a spec from TOML text whose entries and parameters may be named
    /// (`["add", "c"]`, `{ entry = "mul", param = "a", ... }`), resolved against `module`
    /// ([`FusionSpec::param`]); an unknown or ambiguous name is refused, naming it.
    ///
    /// ```
    /// use kiln_passes::fusion::{FusionSpec, ParamRef};
    /// let m = kiln_ir::parse_module(
    ///     "kernel add(a: ptr<global, f32>, c: ptr<global, f32>) { }
    ///      kernel mul(a: ptr<global, f32>, c: ptr<global, f32>) { }",
    /// )
    /// .unwrap();
    /// let text = "kernels = [\"add\", \"mul\"]\nndranges = [{ global = [4] }, { global = [4] }]\n\
    ///             identical = [[[\"add\", \"c\"], [1, \"a\"]]]\n";
    /// let spec = FusionSpec::from_toml_for(text, &m).unwrap();
    /// assert_eq!(spec.identical, vec![vec![ParamRef::new(0, 1), ParamRef::new(1, 0)]]);
    /// let err = FusionSpec::from_toml_for(&text.replace("\"c\"]", "\"z\"]"), &m).unwrap_err();
    /// assert!(err.to_string().contains("kernel `add` (entry 0) has no parameter `z`"), "{err}");
    /// ```
    pub fn from_toml_for(text: &str, module: &kiln_ir::Module) -> Result<FusionSpec, SpecError> {
        FusionSpec::read_toml(text, Some(module))
    }

    fn read_toml(text: &str, module: Option<&kiln_ir::Module>) -> Result<FusionSpec, SpecError> {
        let raw: RawSpec = toml::from_str(text).map_err(|e| SpecError::Toml(e.to_string()))?;
        // Names resolve against the list of kernels.
        let list = FusionSpec { kernels: raw.kernels.clone(), ..FusionSpec::default() };
        let at = |e: RawSel, p: RawSel| list.resolve(module, &e.entry(), &p.param());
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
                    param: at(p.entry, p.param)?,
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
        let identical = raw
            .identical
            .into_iter()
            .map(|g| g.into_iter().map(|[e, p]| at(e, p)).collect::<Result<Vec<ParamRef>, _>>())
            .collect::<Result<_, _>>()?;
        let constants = raw
            .constants
            .into_iter()
            .map(|c| {
                Ok(Constant {
                    param: at(c.entry, c.param)?,
                    value: match c.value {
                        RawValue::Bool(b) => ConstValue::Bool(b),
                        RawValue::Int(i) => ConstValue::Int(i as i128),
                        RawValue::Float(f) => ConstValue::Float(f),
                    },
                })
            })
            .collect::<Result<_, SpecError>>()?;
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
            identical,
            promote,
            constants,
            barriers,
            remap,
            epilogue: raw.epilogue,
        })
    }
}
