//! Kernels (entry points with typed parameters and attributes) and modules (sets of kernels).

use std::fmt;
use std::sync::Arc;

use crate::expr::Var;
use crate::stmt::Stmt;

/// Kernel attributes, written `#name(...)` after the parameter list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Attrs {
    /// `#reqd_work_group_size(x, y, z)`: the only local size the kernel may run with.
    pub reqd_work_group_size: Option<[u32; 3]>,
    /// `#fast_math`: passes may reassociate and contract float arithmetic.
    pub fast_math: bool,
    /// `#nd_range(global = [..], local = [..], offset = [..])`: the nd-range the kernel is
    /// meant to be launched with (recorded by kernel fusion; `kiln run` uses it by default).
    pub nd_range: Option<NdRangeAttr>,
    /// `#fused(kernels = [..], args = [[..], ..])`: how a fused kernel's parameters relate to
    /// the original kernels' arguments.
    pub fused: Option<FusedAttr>,
}

/// The `#nd_range` attribute: one entry per dimension in each list (1 to 3).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NdRangeAttr {
    /// Global size per dimension.
    pub global: Vec<u32>,
    /// Work-group size per dimension, if fixed.
    pub local: Option<Vec<u32>>,
    /// Global offset per dimension.
    pub offset: Vec<u32>,
}

/// What became of one original argument of a fused kernel (an entry of `#fused`'s `args`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FusedArg {
    /// `param(i)`: passed as fused parameter `i`.
    Param(u32),
    /// `identical(i)`: elided, the same argument as fused parameter `i`.
    Identical(u32),
    /// `promoted(private|local, size)`: internalized into an array of `size` elements.
    Promoted {
        /// True for local memory, false for private.
        local: bool,
        /// Element count.
        size: u32,
    },
    /// `const(type, value)`: replaced by a constant (floats written as their IEEE bits in
    /// hexadecimal, so the value round-trips exactly).
    Const(crate::expr::Imm),
}

/// The `#fused` attribute: the original kernels, in order, and for each its arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FusedAttr {
    /// The fused kernels' names, in order (repeats allowed).
    pub kernels: Vec<String>,
    /// Per kernel, per original parameter, what it became.
    pub args: Vec<Vec<FusedArg>>,
}

fn list(f: &mut fmt::Formatter<'_>, v: &[u32]) -> fmt::Result {
    let s: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    write!(f, "[{}]", s.join(", "))
}

impl fmt::Display for NdRangeAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("#nd_range(global = ")?;
        list(f, &self.global)?;
        if let Some(l) = &self.local {
            f.write_str(", local = ")?;
            list(f, l)?;
        }
        f.write_str(", offset = ")?;
        list(f, &self.offset)?;
        f.write_str(")")
    }
}

impl fmt::Display for FusedArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::expr::Imm;
        match *self {
            FusedArg::Param(i) => write!(f, "param({i})"),
            FusedArg::Identical(i) => write!(f, "identical({i})"),
            FusedArg::Promoted { local, size } => {
                write!(f, "promoted({}, {size})", if local { "local" } else { "private" })
            }
            FusedArg::Const(Imm::Bool(b)) => write!(f, "const(bool, {})", b as u8),
            FusedArg::Const(i @ Imm::Int(t, _)) => {
                write!(f, "const({t}, {})", i.as_i128().unwrap_or(0))
            }
            FusedArg::Const(i @ Imm::Float(t, _)) => write!(f, "const({t}, 0x{:x})", i.to_bits()),
        }
    }
}

impl fmt::Display for FusedAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#fused(kernels = [{}], args = [", self.kernels.join(", "))?;
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            let s: Vec<String> = a.iter().map(|x| x.to_string()).collect();
            write!(f, "[{}]", s.join(", "))?;
        }
        f.write_str("])")
    }
}

#[derive(PartialEq, Eq, Hash)]
struct KernelData {
    name: String,
    params: Vec<Var>,
    attrs: Attrs,
    body: Stmt,
}

/// A kernel: a name, typed parameters (scalars, or pointers to global/constant/generic
/// memory), attributes and a body. A cheap-to-clone handle with structural equality.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Kernel(Arc<KernelData>);

impl Kernel {
    /// A kernel with default attributes.
    pub fn new(name: impl Into<String>, params: Vec<Var>, body: Stmt) -> Kernel {
        Kernel::with_attrs(name, params, Attrs::default(), body)
    }

    /// A kernel with the given attributes. A body that is not a block is wrapped in one.
    pub fn with_attrs(
        name: impl Into<String>,
        params: Vec<Var>,
        attrs: Attrs,
        body: Stmt,
    ) -> Kernel {
        Kernel(Arc::new(KernelData { name: name.into(), params, attrs, body: body.into_block() }))
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The parameters, in order.
    pub fn params(&self) -> &[Var] {
        &self.0.params
    }

    /// The parameter with the given name.
    pub fn param(&self, name: &str) -> Option<&Var> {
        self.0.params.iter().find(|p| p.name() == name)
    }

    /// The attributes.
    pub fn attrs(&self) -> &Attrs {
        &self.0.attrs
    }

    /// The body (normally a block).
    pub fn body(&self) -> &Stmt {
        &self.0.body
    }

    /// True if both handles point to the same kernel (no structural comparison): passes
    /// return the very same handle when they change nothing.
    pub fn ptr_eq(&self, other: &Kernel) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The same kernel with another body; returns `self` unchanged (pointer-equal) if the new
    /// body is pointer-equal to the old one.
    pub fn with_body(&self, body: Stmt) -> Kernel {
        if body.ptr_eq(&self.0.body) {
            return self.clone();
        }
        Kernel::with_attrs(self.name(), self.params().to_vec(), self.attrs().clone(), body)
    }

    /// Structural equality (same as `==`).
    pub fn is_equal(&self, other: &Kernel) -> bool {
        self == other
    }

    /// Prints the kernel in the text format to stderr (for debuggers).
    #[inline(never)]
    pub fn dump(&self) {
        eprintln!("{self}");
    }
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// A set of kernels, in source order.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Module {
    /// The kernels.
    pub kernels: Vec<Kernel>,
}

impl Module {
    /// A module of the given kernels.
    pub fn new(kernels: Vec<Kernel>) -> Module {
        Module { kernels }
    }

    /// The kernel with the given name.
    pub fn kernel(&self, name: &str) -> Option<&Kernel> {
        self.kernels.iter().find(|k| k.name() == name)
    }

    /// Structural equality (same as `==`).
    pub fn is_equal(&self, other: &Module) -> bool {
        self == other
    }

    /// Prints the module in the text format to stderr (for debuggers).
    #[inline(never)]
    pub fn dump(&self) {
        eprintln!("{self}");
    }
}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}
