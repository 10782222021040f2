//! Kernel fusion: the job of the SYCL user-driven kernel-fusion JIT (see
//! `KernelFusionJIT.md`), without LLVM.
//!
//! [`fuse_kernels`] fuses an ordered list of kernels (repeats allowed) into one kernel that
//! does exactly the visible work of running them one after another:
//!
//! 1. every entry's nd-range is validated and the fused nd-range chosen ([`ndrange`]: dims
//!    the largest, global size the largest linear size, local size and offset the specified
//!    ones, which must agree), refusing illegal combinations with an error naming the rule;
//! 2. identical parameters are merged (transitively) and passed once;
//! 3. scalar constants are checked to fit their parameters exactly and substituted, and
//!    promotions resolved: a conflict, an escaping pointer or accesses that [`legality`]
//!    cannot prove exact leave the buffer in global memory, with a [`FusionWarning`] naming
//!    the buffer, kernel and access (promotion is done when legal, never an error);
//! 4. each entry's body is rewritten ([`rewrite`]: unique names, substituted parameters,
//!    remapped built-ins, see [`remap`]) and placed in order, guarded by
//!    `if glid < N_k` when its linear size is smaller than the fused one, with a
//!    work-group barrier (local + global fences) between entries, outside the guards;
//! 5. the post-fusion pipeline runs: [`FuseOptions::post_fusion`], a single
//!    `fn(&Kernel) -> Kernel` call site, by default the `-O` pipeline
//!    ([`crate::pipeline::optimize`]: simplify, constant propagation, CSE, LICM, DCE, ...).
//!
//! The result, [`FusedKernel`], holds the kernel, its nd-range and for every original
//! argument an [`ArgMap`]. [`fusion_key`] gives a stable key for caching fused kernels.
//!
//! ```
//! use kiln_ir::parse_module;
//! use kiln_passes::fusion::{fuse_kernels, ArgMap, FusionSpec, ParamRef, PromoteTo, Promotion, RangeSpec};
//!
//! let m = parse_module(
//!     "kernel add(a: ptr<global, f32>, b: ptr<global, f32>, tmp: ptr<global, f32>) {
//!        let i: u32 = global_id(0); tmp[i] = a[i] + b[i]; }
//!      kernel mul(tmp: ptr<global, f32>, c: ptr<global, f32>, out: ptr<global, f32>) {
//!        let i: u32 = global_id(0); out[i] = tmp[i] * c[i]; }",
//! )
//! .unwrap();
//! let spec = FusionSpec {
//!     name: "fused".into(),
//!     kernels: vec!["add".into(), "mul".into()],
//!     ndranges: vec![RangeSpec::new(&[512]), RangeSpec::new(&[512])],
//!     identical: vec![vec![ParamRef::new(0, 2), ParamRef::new(1, 0)]],
//!     promote: vec![Promotion {
//!         param: ParamRef::new(0, 2),
//!         to: PromoteTo::Private,
//!         size: None,
//!         buffer_len: Some(512),
//!     }],
//!     ..FusionSpec::default()
//! };
//! let f = fuse_kernels(&m, &spec).unwrap();
//! let names: Vec<&str> = f.kernel.params().iter().map(|p| p.name()).collect();
//! assert_eq!(names, ["add_a", "add_b", "mul_c", "mul_out"]);
//! assert_eq!(f.args[1][0], ArgMap::Promoted { to: PromoteTo::Private, size: 1 });
//! assert!(f.kernel.to_string().contains("#nd_range(global = [512], offset = [0])"));
//! ```

pub mod bind;
pub mod epilogue;
pub mod explain;
mod fuse;
pub mod internalize;
pub mod key;
pub mod legality;
mod names;
pub mod ndrange;
mod promote;
pub mod remap;
pub mod rewrite;
pub mod spec;
pub mod toml_spec;

use kiln_ir::launch::NdRange;
use kiln_ir::{Kernel, Module, NdRangeAttr, Type};
use thiserror::Error;

pub use spec::{
    ArgMap, BarrierPolicy, ConstValue, Constant, FusionSpec, ParamRef, PromoteTo, Promotion,
    RangeSpec, RemapMode,
};

pub use bind::BindError;
pub use epilogue::{explain_epilogue, EpilogueReport};
pub use explain::{explain, BufferReport};
pub use fuse::{fuse_kernels_with, fusion_keeps_result};
pub use key::{fusion_key, FusionKey};
pub use legality::AccessVerdict;
pub use names::{EntrySel, ParamSel};
pub use toml_spec::SpecError;

/// Why fusion was refused. Every variant names the violated rule.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum FusionError {
    /// The list of kernels is empty.
    #[error("nothing to fuse: the kernel list is empty")]
    Empty,
    /// A listed kernel is not in the module.
    #[error("entry {entry}: no kernel `{name}` in the module")]
    UnknownKernel {
        /// The entry.
        entry: usize,
        /// The missing name.
        name: String,
    },
    /// `ndranges` does not have one range per entry.
    #[error("{ranges} nd-ranges given for {kernels} kernels (one per entry required)")]
    RangeCount {
        /// Number of kernels.
        kernels: usize,
        /// Number of ranges.
        ranges: usize,
    },
    /// An nd-range is malformed.
    #[error("entry {entry}: invalid nd-range: {why}")]
    BadRange {
        /// The entry.
        entry: usize,
        /// What is wrong.
        why: String,
    },
    /// A `(entry, param)` reference is out of range.
    #[error("parameter reference ({entry}, {param}) does not exist: {why}")]
    BadParam {
        /// The entry.
        entry: usize,
        /// The parameter index.
        param: usize,
        /// Why.
        why: String,
    },
    /// Rule: identical parameters must have the same type.
    #[error("identical parameters ({}, {}) and ({}, {}) have different types `{}` and `{}`", .a.entry, .a.param, .b.entry, .b.param, .ta, .tb)]
    IdenticalTypeMismatch {
        /// One parameter.
        a: ParamRef,
        /// Its type.
        ta: Type,
        /// The other.
        b: ParamRef,
        /// Its type.
        tb: Type,
    },
    /// Rule: constants are for scalar parameters.
    #[error("parameter ({}, {}) of type `{ty}` cannot be a constant: only scalar parameters can", .at.entry, .at.param)]
    ConstantNotScalar {
        /// The parameter.
        at: ParamRef,
        /// Its type.
        ty: Type,
    },
    /// Rule: a constant fits its parameter's type exactly (see [`ConstValue::to_imm`]).
    #[error("constant for parameter ({}, {}) (`{param}` of `{kernel}`, type `{ty}`): {why}", .at.entry, .at.param)]
    ConstantDoesNotFit {
        /// The parameter.
        at: ParamRef,
        /// The kernel of the entry.
        kernel: String,
        /// The parameter's name.
        param: String,
        /// Its type.
        ty: Type,
        /// Why the value does not fit.
        why: String,
    },
    /// Rule: one argument has one value.
    #[error("parameter ({}, {}) is given two different constant values", .at.entry, .at.param)]
    ConflictingConstants {
        /// The parameter.
        at: ParamRef,
    },
    /// Rule: promotion is for pointer parameters.
    #[error("parameter ({}, {}) of type `{ty}` cannot be promoted: only buffers can", .at.entry, .at.param)]
    PromoteNotBuffer {
        /// The parameter.
        at: ParamRef,
        /// Its type.
        ty: Type,
    },
    /// Rule: no two specified local sizes may differ.
    #[error(
        "rule `local sizes agree`: entries {first} and {second} specify different local sizes"
    )]
    LocalSizeMismatch {
        /// First entry.
        first: usize,
        /// Second entry.
        second: usize,
    },
    /// Rule: no two specified offsets may differ.
    #[error("rule `offsets agree`: entries {first} and {second} specify different offsets")]
    OffsetMismatch {
        /// First entry.
        first: usize,
        /// Second entry.
        second: usize,
    },
    /// Rule: `#reqd_work_group_size` attributes must agree.
    #[error("rule `required work-group sizes agree`: entries {first} and {second} require different work-group sizes")]
    ReqdWorkGroupSizeMismatch {
        /// First entry.
        first: usize,
        /// Second entry.
        second: usize,
    },
    /// Rule: ranges differ, an offset is non-zero and some entry needs id remapping.
    #[error("rule `no offset with id remapping`: the ranges differ, the offset is non-zero and entry {entry} needs id remapping")]
    OffsetWithRemap {
        /// The entry needing remapping.
        entry: usize,
    },
    /// Rule: ranges differ, a local size is given and a range is not divisible by it.
    #[error("rule `local size divides the ranges`: the ranges differ and local size {local:?} does not divide the fused range or entry {entry}'s range")]
    NotDivisible {
        /// The entry.
        entry: usize,
        /// The local size.
        local: [u32; 3],
    },
    /// Rule: an entry with an explicit local size cannot have its ids remapped.
    #[error("rule `no explicit local size with id remapping`: entry {entry} has an explicit local size and needs id remapping")]
    LocalSizeWithRemap {
        /// The entry.
        entry: usize,
    },
    /// Rule: an entry whose work-groups cannot be preserved must not synchronize them (the
    /// kiln form of "a built-in that cannot be remapped": barriers and local memory of an
    /// entry that is remapped, or guarded without an explicit local size).
    #[error("rule `work-groups preserved`: entry {entry} uses barriers or local memory, but its work-groups are not preserved in the fused range (id remapping, or a guard without an explicit local size)")]
    WorkGroupNotPreserved {
        /// The entry.
        entry: usize,
    },
    /// Rule: the fused kernel's name must parse back as a kernel name.
    #[error("the fused kernel's name `{0}` is not an identifier that can name a kernel (letters, digits and `_`, not starting with a digit, not a keyword or type name)")]
    BadName(String),
    /// Rule: a fused kernel that needs the global linear id (guards or id remapping) has at
    /// most 2^32 work-items, since that id is a `u32`.
    #[error("rule `linear id fits u32`: the fused range has {items} work-items, but entries with different nd-ranges are placed by a u32 global linear id, which holds at most 4294967296")]
    TooManyWorkItems {
        /// The fused range's work-item count.
        items: u64,
    },
    /// Rule `epilogue`: a consumer of an epilogue fusion (`FusionSpec::epilogue`) must run
    /// exactly at the stores of the kernels before it; `why` names what is not proven
    /// (see [`epilogue`]).
    #[error("rule `epilogue`: entry {entry} (`{kernel}`) cannot run at the stores of the kernels before it: {why}")]
    Epilogue {
        /// The consumer entry (0 when the list has no consumer).
        entry: usize,
        /// Its kernel.
        kernel: String,
        /// What is not proven.
        why: String,
    },
    /// The fused kernel failed verification (a bug in fusion).
    #[error("internal error: the fused kernel does not verify: {0}")]
    Internal(String),
}

/// A promotion that was not done; the buffer stays in global memory and is written back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FusionWarning {
    /// The fused parameter index the buffer is passed as.
    pub param: ParamRef,
    /// Why promotion was refused.
    pub reason: String,
}

impl std::fmt::Display for FusionWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "promotion of parameter ({}, {}) refused: {}",
            self.param.entry, self.param.param, self.reason
        )
    }
}

/// A fused kernel with everything needed to launch it.
#[derive(Clone, Debug)]
pub struct FusedKernel {
    /// The fused kernel (after the post-fusion pipeline).
    pub kernel: Kernel,
    /// The nd-range to launch it with.
    pub range: NdRange,
    /// For each entry, for each original parameter: what became of it.
    pub args: Vec<Vec<ArgMap>>,
    /// Promotions that were refused.
    pub warnings: Vec<FusionWarning>,
}

impl FusedKernel {
    /// Prints the fused kernel in the text format to stderr (its `#nd_range` and `#fused`
    /// attributes carry the range and the argument map), each refused promotion as a
    /// `//` comment after it. Meant for debuggers:
    /// `call kiln_passes::fusion::FusedKernel::dump(&f)` in gdb.
    #[inline(never)]
    pub fn dump(&self) {
        eprintln!("{}", self.kernel);
        for w in &self.warnings {
            eprintln!("// warning: {w}");
        }
    }
}

// Keep `dump()` in every binary that links kiln-passes, for debuggers (see kiln-ir's).
#[used]
static KEEP_FUSED_DUMP: fn(&FusedKernel) = FusedKernel::dump;

/// Options of [`fuse_kernels_with`].
#[derive(Clone, Copy, Debug)]
pub struct FuseOptions {
    /// The post-fusion pipeline: the one call site where fused kernels are optimized.
    /// Defaults to [`crate::pipeline::optimize`]; [`identity`] skips optimization.
    pub post_fusion: fn(&Kernel) -> Kernel,
    /// Verify the fused kernel before and after the post-fusion pipeline. By default on in
    /// debug builds (and so in every test), off in release builds, as the pass manager
    /// does: there every consumer of a fused kernel verifies it anyway (each backend's
    /// input, the runtime's device builds), and the two checks were a fifth of the fused
    /// chain's JIT time.
    pub verify: bool,
}

/// The identity pipeline.
pub fn identity(k: &Kernel) -> Kernel {
    k.clone()
}

impl Default for FuseOptions {
    fn default() -> FuseOptions {
        FuseOptions { post_fusion: crate::pipeline::optimize, verify: cfg!(debug_assertions) }
    }
}

/// Fuses `spec.kernels` from `module` with the default options.
pub fn fuse_kernels(module: &Module, spec: &FusionSpec) -> Result<FusedKernel, FusionError> {
    fuse_kernels_with(module, spec, &FuseOptions::default())
}

/// The `#nd_range` attribute for a range.
pub fn nd_range_attr(r: &NdRange) -> NdRangeAttr {
    let d = r.dims.clamp(1, 3);
    NdRangeAttr {
        global: r.global[..d].to_vec(),
        local: r.local.map(|l| l[..d].to_vec()),
        offset: r.offset[..d].to_vec(),
    }
}

/// The range an `#nd_range` attribute describes.
pub fn nd_range_of(a: &NdRangeAttr) -> NdRange {
    let mut r = NdRange::new(&a.global).with_offset(&a.offset);
    if let Some(l) = &a.local {
        r = r.with_local(l);
    }
    r
}
