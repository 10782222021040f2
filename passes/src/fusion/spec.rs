//! The fusion request ([`FusionSpec`]) and the description of its result ([`ArgMap`]).

use kiln_ir::Imm;

/// One list entry's nd-range as the user gave it. `global.len()` is the number of dimensions
/// (1..=3); `local` and `offset`, when given, have one entry per dimension. Sizes and offsets
/// are in kiln's dimension order (dimension 0 varies fastest).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RangeSpec {
    /// Global size per dimension.
    pub global: Vec<u32>,
    /// Work-group size per dimension; `None` is compatible with any local size.
    pub local: Option<Vec<u32>>,
    /// Global offset per dimension; `None` is compatible with any offset.
    pub offset: Option<Vec<u32>>,
}

impl RangeSpec {
    /// A range of the given global size, local size and offset left open.
    pub fn new(global: &[u32]) -> RangeSpec {
        RangeSpec { global: global.to_vec(), local: None, offset: None }
    }

    /// The same range with an explicit local size.
    pub fn with_local(mut self, local: &[u32]) -> RangeSpec {
        self.local = Some(local.to_vec());
        self
    }

    /// The same range with an explicit offset.
    pub fn with_offset(mut self, offset: &[u32]) -> RangeSpec {
        self.offset = Some(offset.to_vec());
        self
    }
}

/// A parameter of one list entry: `(entry index, parameter index)`, both 0-based.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParamRef {
    /// Index into [`FusionSpec::kernels`].
    pub entry: usize,
    /// Index into that kernel's parameters.
    pub param: usize,
}

impl ParamRef {
    /// `(entry, param)`.
    pub fn new(entry: usize, param: usize) -> ParamRef {
        ParamRef { entry, param }
    }
}

/// Where a promoted buffer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PromoteTo {
    /// Explicitly not promoted (conflicts with a private/local request on the same buffer).
    None,
    /// One array per work-item.
    Private,
    /// One array per work-group (needs an explicit local size).
    Local,
}

impl PromoteTo {
    /// `private` or `local`.
    pub fn name(self) -> &'static str {
        match self {
            PromoteTo::None => "none",
            PromoteTo::Private => "private",
            PromoteTo::Local => "local",
        }
    }
}

/// A request to promote (internalize) a buffer parameter.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Promotion {
    /// The parameter (any member of its identical group).
    pub param: ParamRef,
    /// Private or local memory.
    pub to: PromoteTo,
    /// The promoted array's element count. When `None` it is derived as the original does
    /// from `buffer_len`: private = elements / work-items, local = elements / work-groups.
    pub size: Option<u32>,
    /// The buffer's length in elements, used to derive `size`.
    pub buffer_len: Option<u32>,
}

/// A run-time value for a scalar parameter. It must fit the parameter's type exactly
/// ([`ConstValue::to_imm`]): kiln never wraps, truncates or reinterprets a constant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ConstValue {
    /// An integer.
    Int(i128),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
}

impl std::fmt::Display for ConstValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConstValue::Int(i) => write!(f, "{i}"),
            // `{:?}` keeps a `.0` on integral floats, so `2.0` is told apart from `2`.
            ConstValue::Float(x) => write!(f, "{x:?}"),
            ConstValue::Bool(b) => write!(f, "{b}"),
        }
    }
}

impl ConstValue {
    /// The value as an immediate of scalar type `ty`, or why it does not fit exactly.
    ///
    /// The rule: a `bool` parameter takes only `true`/`false`; an integer parameter takes only
    /// an integer within its type's range (no float, not even `2.0`, and no bool); a float
    /// parameter takes an integer or a float, rounded to the nearest value of its type as a
    /// float literal is (so `0.1` is accepted), but a finite value that rounds to infinity
    /// (overflow) or a non-zero value that rounds to zero (underflow) is refused, as is a
    /// bool. Explicit infinities and NaN are kept as they are.
    pub fn to_imm(self, ty: kiln_ir::Scalar) -> Result<Imm, String> {
        use kiln_ir::Scalar;
        match (self, ty) {
            (ConstValue::Bool(b), Scalar::Bool) => Ok(Imm::Bool(b)),
            (v, Scalar::Bool) => Err(format!("`{v}` is not a bool (write `true` or `false`)")),
            (ConstValue::Bool(b), t) => {
                Err(format!("`{b}` is a bool, not a number of type `{}`", t.name()))
            }
            (ConstValue::Int(i), t) if t.is_int() => {
                let (lo, hi) = (t.int_min().unwrap_or(0), t.int_max().unwrap_or(0));
                if i < lo || i > hi {
                    return Err(format!(
                        "`{i}` is outside the range of `{}` ({lo} to {hi})",
                        t.name()
                    ));
                }
                Ok(Imm::int(t, i))
            }
            (ConstValue::Float(f), t) if t.is_int() => Err(format!(
                "`{}` is a float; parameter type `{}` takes an integer",
                ConstValue::Float(f),
                t.name()
            )),
            (v, t) => {
                let x = match v {
                    ConstValue::Int(i) => i as f64,
                    ConstValue::Float(f) => f,
                    ConstValue::Bool(_) => unreachable!("handled above"),
                };
                let r = kiln_ir::expr::round_float(t, x);
                if x.is_finite() && r.is_infinite() {
                    return Err(format!(
                        "`{v}` overflows `{}` (it would become infinity)",
                        t.name()
                    ));
                }
                if x != 0.0 && r == 0.0 {
                    return Err(format!("`{v}` underflows `{}` (it would become 0)", t.name()));
                }
                Ok(Imm::float(t, x))
            }
        }
    }
}

/// A scalar parameter replaced by a run-time constant.
#[derive(Clone, Debug, PartialEq)]
pub struct Constant {
    /// The parameter (any member of its identical group).
    pub param: ParamRef,
    /// Its value.
    pub value: ConstValue,
}

/// What goes between two fused kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BarrierPolicy {
    /// A work-group barrier with local and global fences (the default).
    #[default]
    WorkGroup,
    /// Nothing (the original's `no_barriers`).
    None,
}

/// How work-item built-ins are remapped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RemapMode {
    /// The design's formulas.
    #[default]
    Default,
    /// The PTX note: without an explicit local size, `num_groups = 1`, `group_id = 0`,
    /// `local_size = GS`, `local_id = global_id`.
    Ptx,
}

/// Everything `fuse_kernels` needs, mirroring the original `fuseKernels` inputs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FusionSpec {
    /// The fused kernel's name.
    pub name: String,
    /// Kernels to fuse, by name, in order; a name may repeat.
    pub kernels: Vec<String>,
    /// One nd-range per entry of `kernels`.
    pub ndranges: Vec<RangeSpec>,
    /// Groups of parameters bound to the same argument (merged transitively).
    pub identical: Vec<Vec<ParamRef>>,
    /// Buffers to internalize.
    pub promote: Vec<Promotion>,
    /// Scalar parameters replaced by constants.
    pub constants: Vec<Constant>,
    /// What goes between fused kernels.
    pub barriers: BarrierPolicy,
    /// The target's remapping mode.
    pub remap: RemapMode,
    /// Epilogue (store-side) fusion: the first entry is a producer and every later entry an
    /// element-wise consumer whose body runs at the producer's stores of the buffer it reads
    /// (see [`crate::fusion::epilogue`]), instead of one entry after another.
    pub epilogue: bool,
}

/// What became of one original argument.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgMap {
    /// Passed as the fused kernel's parameter with this index.
    Param(usize),
    /// Elided: identical to the argument passed as the fused parameter with this index.
    Identical(usize),
    /// Internalized: never passed, never written back.
    Promoted {
        /// Private or local.
        to: PromoteTo,
        /// The array's element count.
        size: u32,
    },
    /// Replaced by a constant; not passed.
    Constant(Imm),
}
