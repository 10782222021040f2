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

/// A run-time value for a scalar parameter, converted to the parameter's type (integers
/// wrap, floats round, bools are `!= 0`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ConstValue {
    /// An integer.
    Int(i128),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
}

impl ConstValue {
    /// The value as an immediate of scalar type `ty`.
    pub fn to_imm(self, ty: kiln_ir::Scalar) -> Imm {
        use kiln_ir::Scalar;
        match (self, ty) {
            (ConstValue::Bool(b), Scalar::Bool) => Imm::Bool(b),
            (ConstValue::Int(i), Scalar::Bool) => Imm::Bool(i != 0),
            (ConstValue::Float(f), Scalar::Bool) => Imm::Bool(f != 0.0),
            (v, t) if t.is_float() => Imm::float(
                t,
                match v {
                    ConstValue::Int(i) => i as f64,
                    ConstValue::Float(f) => f,
                    ConstValue::Bool(b) => b as u8 as f64,
                },
            ),
            (ConstValue::Int(i), t) => Imm::int(t, i),
            (ConstValue::Float(f), t) => Imm::int(t, f as i128),
            (ConstValue::Bool(b), t) => Imm::int(t, b as i128),
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
