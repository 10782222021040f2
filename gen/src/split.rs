//! Split-K: the second kernel of a GEMM whose reduction is cut into slices
//! ([`GemmConfig::split_k`](crate::GemmConfig::split_k)); the first, the partial products
//! per slice, is [`crate::codegen`]'s kernel with a slice dimension.

use kiln_ir::launch::NdRange;
use kiln_ir::{AddrSpace, Attrs, Expr, Kernel, NdRangeAttr, Scalar, Stmt, Type, Var};

use crate::codegen::load_f32;
use crate::ix::{self, c};

/// The second half of a split-K GEMM. The partial-products kernel (three-dimensional:
/// dimension 2 is the slice) writes slice `s`'s product `A[:, Ks] · B[Ks, :]` to
/// `w[s * E + i]` for each element `i` of C (`E` elements); `reduce` then computes, per
/// element, `acc = w[i]; acc += w[E + i]; ...` in slice order and
/// `C[i] = alpha * acc (+ beta * C[i])`, as the unsplit kernel does with its accumulator.
/// Every launch adds in the same order, so the result is the same on every run and device
/// (it may differ in the last bits from the unsplit kernel's, which adds all of K in one
/// chain).
#[derive(Clone, Debug)]
pub struct SplitK {
    /// Slices the reduction is cut into (each a whole number of k-tiles).
    pub slices: u32,
    /// Elements of the f32 workspace `w` (`slices * E`).
    pub workspace_elems: usize,
    /// The reduction kernel: parameters `(w, c, alpha, beta)`, one work-item per element.
    pub reduce: Kernel,
    /// Its global size (one dimension).
    pub reduce_global: u32,
    /// Its work-group size.
    pub reduce_local: u32,
}

impl SplitK {
    /// The launch of [`SplitK::reduce`].
    pub fn range(&self) -> NdRange {
        NdRange::new(&[self.reduce_global]).with_local(&[self.reduce_local])
    }
}

/// Work-items per work-group of the split-K reduction.
pub(crate) const REDUCE_LOCAL: u32 = 256;

/// The split-K reduction `NAME_reduce(w, c, alpha, beta)` (see [`SplitK`]): work-item `i`
/// adds `w[i], w[E + i], ...` in slice order and updates `C[i]`; `beta == 0` ignores C's
/// old value, as the unsplit kernel does.
pub(crate) fn reduce_kernel(
    name: &str,
    c_name: &str,
    tc: Scalar,
    slices: i64,
    elems: i64,
) -> Kernel {
    let pw = Var::new("w", Type::ptr(AddrSpace::Global, Scalar::F32));
    let pc = Var::new(c_name, Type::ptr(AddrSpace::Global, tc));
    let alpha = Var::new("alpha", Type::F32);
    let beta = Var::new("beta", Type::F32);
    let i = Var::new("i", Type::I32);
    let z = Var::new("z", Type::I32);
    let acc = Var::new("acc", Type::F32);
    let add = Stmt::assign(
        &acc,
        acc.expr() + pw.load(ix::add(&ix::mul(&z.expr(), &c(elems)), &i.expr())),
    );
    let narrow = |v: Expr| if tc == Scalar::F32 { v } else { v.cast(tc) };
    let scaled = alpha.expr() * acc.expr();
    let updated = scaled.clone() + beta.expr() * load_f32(&pc, i.expr());
    let body = Stmt::block([
        Stmt::let_(&i, Expr::global_id(0).cast(Scalar::I32)),
        Stmt::if_(
            i.expr().cmp_lt(c(elems)),
            Stmt::block([
                Stmt::decl(&acc, pw.load(i.expr())),
                Stmt::for_(&z, c(1), c(slices), c(1), add),
                Stmt::if_else(
                    beta.expr().cmp_eq(Expr::f32(0.0)),
                    Stmt::store(&pc, i.expr(), narrow(scaled)),
                    Stmt::store(&pc, i.expr(), narrow(updated)),
                ),
            ]),
        ),
    ]);
    let global = (elems as u32).div_ceil(REDUCE_LOCAL) * REDUCE_LOCAL;
    let attrs = Attrs {
        reqd_work_group_size: Some([REDUCE_LOCAL, 1, 1]),
        nd_range: Some(NdRangeAttr {
            global: vec![global],
            local: Some(vec![REDUCE_LOCAL]),
            offset: vec![0],
        }),
        ..Attrs::default()
    };
    Kernel::with_attrs(format!("{name}_reduce"), vec![pw, pc, alpha, beta], attrs, body)
}
