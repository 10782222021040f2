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

    /// A kernel with the given attributes.
    pub fn with_attrs(
        name: impl Into<String>,
        params: Vec<Var>,
        attrs: Attrs,
        body: Stmt,
    ) -> Kernel {
        Kernel(Arc::new(KernelData {
            name: name.into(),
            params,
            attrs,
            body,
        }))
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

    /// The same kernel with another body; returns `self` unchanged (pointer-equal) if the new
    /// body is pointer-equal to the old one.
    pub fn with_body(&self, body: Stmt) -> Kernel {
        if body.ptr_eq(&self.0.body) {
            return self.clone();
        }
        Kernel::with_attrs(
            self.name(),
            self.params().to_vec(),
            self.attrs().clone(),
            body,
        )
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
