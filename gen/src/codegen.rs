//! The generator proper: `C = alpha * A·B + beta * C` over three views, as a kiln kernel.
//!
//! The M, N and K dimensions of the views are flattened (in view order, the last one
//! fastest): a flat row `m` of A or C is taken apart into the view's M dimensions with
//! `/` and `%` by constants, and so on. A's M dimensions must have the sizes of C's, A's K
//! dimensions those of B's, B's N dimensions those of C's.
//!
//! The kernel, for a work-group tile of `BM = wg_m * tm` rows by `BN = wg_n * tn` columns:
//!
//! ```text
//! local a_s: f32[depth * BK * BM]; local b_s: f32[depth * BK * BN];
//! var acc_i_j: f32 = 0.0;                          // tm x tn register block
//! for kt in 0 .. ceil(K / BK):                     // (depth 2: tile kt+1 loads here,
//!   cooperative load of A's and B's BK-deep tiles    //  while tile kt is multiplied)
//!     (masked: 0 outside the views or past M/N/K)
//!   barrier(local)
//!   for kk in 0 .. BK: a_i = a_s[..]; b_j = b_s[..]; acc_i_j = fma(a_i, b_j, acc_i_j)
//!   barrier(local)
//! C[...] = alpha * acc + beta * C[...]             // masked; beta == 0 does not use C
//! ```
//!
//! Local dimension 0 runs along N, 1 along M. Index arithmetic is `i32`; the generator
//! refuses problems whose offsets would not fit.

use kiln_ir::{
    AddrSpace, Attrs, Expr, Intrinsic, Kernel, MemFence, NdRangeAttr, Scalar, Stmt, Type, Var,
};

use crate::config::GemmConfig;
use crate::ix::{self, c};
use crate::view::{DimKind, View};

/// The three views of a GEMM-like kernel and the names of its buffer parameters.
#[derive(Clone, Debug)]
pub struct GemmViews {
    /// The kernel's name.
    pub name: String,
    /// A, with M and K dimensions.
    pub a: View,
    /// B, with K and N dimensions.
    pub b: View,
    /// C, with M and N dimensions.
    pub c: View,
    /// Parameter names of A, B and C.
    pub names: [String; 3],
}

/// A generated kernel and how to launch it.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The kernel (verified).
    pub kernel: Kernel,
    /// Global size, dimension 0 first.
    pub global: [u32; 2],
    /// Work-group size, dimension 0 first.
    pub local: [u32; 2],
    /// Elements each buffer parameter (A, B, C) must hold.
    pub buffer_elems: [usize; 3],
    /// The flattened GEMM sizes M, N, K.
    pub mnk: [u64; 3],
}

fn sizes(v: &View, kind: DimKind) -> Vec<i64> {
    v.dims_of(kind).iter().map(|d| d.size).collect()
}

/// Virtual coordinates of `v` from flat indices of its dimension kinds.
fn unflatten(v: &View, flat: &[(DimKind, Expr)]) -> Vec<Expr> {
    let mut out = vec![c(0); v.vdims().len()];
    for (kind, idx) in flat {
        let mut inner = 1;
        let pos: Vec<usize> =
            v.vdims().iter().enumerate().filter(|(_, d)| d.kind == *kind).map(|(i, _)| i).collect();
        for (n, &p) in pos.iter().enumerate().rev() {
            let q = ix::div(idx, inner);
            out[p] = if n == 0 { q } else { ix::rem(&q, v.vdims()[p].size) };
            inner *= v.vdims()[p].size;
        }
    }
    out
}

fn elem_ty(v: &View, which: &str) -> Result<Scalar, String> {
    match v.layout().ty() {
        t @ (Scalar::F32 | Scalar::F16) => Ok(t),
        t => Err(format!("{which} has element type {t}; the generator supports f32 and f16")),
    }
}

/// Loads element `off` of `buf` as f32.
fn load_f32(buf: &Var, off: Expr) -> Expr {
    let x = buf.load(off);
    if x.ty() == Type::F32 {
        x
    } else {
        x.cast(Scalar::F32)
    }
}

/// True if the element offsets `offs[j]` (lane `j` of a would-be vector access) are
/// provably `offs[0] + j`, and `offs[0]` a multiple of the lane count: then one vector
/// access of `offs.len()` lanes at `offs[0]` reads or writes exactly those elements, aligned.
/// `frame` substitutes the work-group bases by multiples of their tile sizes for the
/// alignment proof. Anything the simplifier or the residue analysis cannot settle is `false`
/// (the caller then keeps scalar accesses).
fn contiguous(offs: &[Expr], frame: &std::collections::HashMap<Var, Expr>) -> bool {
    let w = offs.len() as u64;
    let first = &offs[0];
    let step_ok = offs.iter().enumerate().skip(1).all(|(j, o)| {
        let d = kiln_passes::simplify::simplify_expr(&(o.clone() - first.clone()));
        d.as_imm().and_then(|i| i.as_i128()) == Some(j as i128)
    });
    step_ok && kiln_ir::verify::known_residue(&ix::subst(first, frame), w) == Some(0)
}

struct Gen<'a> {
    v: &'a GemmViews,
    cfg: GemmConfig,
    m: i64,
    n: i64,
    k: i64,
    pa: Var,
    pb: Var,
    a_s: Var,
    b_s: Var,
    lid: Expr,
    m0: Expr,
    n0: Expr,
    /// `m0` and `n0` as multiples of the tile sizes, for alignment proofs.
    frame: std::collections::HashMap<Var, Expr>,
}

impl Gen<'_> {
    /// Operand A (`is_a`) or B as a tile load sees it: its view, global buffer, local tile,
    /// tile rows, work-group base and size along M or N, and which of the two that is.
    fn operand(&self, is_a: bool) -> (&View, &Var, &Var, i64, &Expr, i64, DimKind) {
        if is_a {
            let rows = self.cfg.tile_m() as i64;
            (&self.v.a, &self.pa, &self.a_s, rows, &self.m0, self.m, DimKind::M)
        } else {
            let rows = self.cfg.tile_n() as i64;
            (&self.v.b, &self.pb, &self.b_s, rows, &self.n0, self.n, DimKind::N)
        }
    }

    /// The cooperative load of one `BK`-deep tile of an operand into local memory at
    /// `slot` (an element offset): work-item `lid` copies elements `lid, lid + T, ...`.
    fn load_tile(&self, is_a: bool, k0: &Expr, slot: &Expr) -> Stmt {
        let (view, buf, dst, rows, mn0, mn_size, kind) = self.operand(is_a);
        let tag = if is_a { "la" } else { "lb" };
        let bk = self.cfg.k_tile as i64;
        let threads = self.cfg.threads() as i64;
        let total = rows * bk;
        if let Some(s) = self.load_tile_vector(is_a, k0, slot) {
            return s;
        }
        if let Some(s) = self.load_tile_vector_k(is_a, k0, slot) {
            return s;
        }
        let e = Var::new(format!("{tag}_e"), Type::I32);
        let idx = Var::new(format!("{tag}_i"), Type::I32);
        let r = Var::new(format!("{tag}_r"), Type::I32);
        let kk = Var::new(format!("{tag}_k"), Type::I32);
        // Rows fastest: neighbouring work-items take neighbouring rows of the tile, and the
        // tile is stored k-major, as the multiply reads it.
        let mut body = vec![
            Stmt::let_(&r, ix::rem(&idx.expr(), rows)),
            Stmt::let_(&kk, ix::div(&idx.expr(), rows)),
        ];
        let row = ix::add(mn0, &r.expr());
        let kidx = ix::add(k0, &kk.expr());
        let coords = unflatten(view, &[(kind, row.clone()), (DimKind::K, kidx.clone())]);
        let acc = view.access(&coords);
        let mut cond = None;
        if mn_size % rows != 0 {
            cond = ix::and(cond, Some(row.cmp_lt(c(mn_size))));
        }
        if self.k % bk != 0 {
            cond = ix::and(cond, Some(kidx.cmp_lt(c(self.k))));
        }
        cond = ix::and(cond, acc.mask);
        let at = ix::add(slot, &ix::add(&ix::mul(&kk.expr(), &c(rows)), &r.expr()));
        let copy = Stmt::store(dst, at.clone(), load_f32(buf, acc.offset));
        body.push(match cond {
            Some(cond) => Stmt::if_else(cond, copy, Stmt::store(dst, at, Expr::f32(0.0))),
            None => copy,
        });
        let steps = (total + threads - 1) / threads;
        let mut inner =
            vec![Stmt::let_(&idx, ix::add(&self.lid, &ix::mul(&e.expr(), &c(threads))))];
        if total % threads != 0 {
            inner.push(Stmt::if_(idx.expr().cmp_lt(c(total)), Stmt::block(body)));
        } else {
            inner.extend(body);
        }
        Stmt::for_(&e, c(0), c(steps), c(1), Stmt::block(inner))
    }

    /// The cooperative tile load with `vec`-lane vectors along the tile's rows, when the
    /// view is provably contiguous and aligned along them and the masks are per vector.
    fn load_tile_vector(&self, is_a: bool, k0: &Expr, slot: &Expr) -> Option<Stmt> {
        let w = self.cfg.vec as i64;
        let (view, buf, dst, rows, mn0, mn_size, kind) = self.operand(is_a);
        let tag = if is_a { "va" } else { "vb" };
        if w == 1 || rows % w != 0 || view.layout().ty() != Scalar::F32 {
            return None;
        }
        // A vector straddling the M/N edge would need lane masks.
        if mn_size % rows != 0 && mn_size % w != 0 {
            return None;
        }
        let bk = self.cfg.k_tile as i64;
        let threads = self.cfg.threads() as i64;
        let total = rows * bk / w;
        let e = Var::new(format!("{tag}_e"), Type::I32);
        let idx = Var::new(format!("{tag}_i"), Type::I32);
        let q = Var::new(format!("{tag}_q"), Type::I32);
        let kk = Var::new(format!("{tag}_k"), Type::I32);
        let r = ix::mul(&q.expr(), &c(w));
        let kidx = ix::add(k0, &kk.expr());
        let lane = |j: i64| {
            let row = ix::add(mn0, &ix::add(&r, &c(j)));
            view.access(&unflatten(view, &[(kind, row), (DimKind::K, kidx.clone())]))
        };
        let acc = lane(0);
        if acc.mask.is_some() {
            return None;
        }
        let offs: Vec<Expr> = (0..w).map(|j| lane(j).offset).collect();
        if !contiguous(&offs, &self.frame) {
            return None;
        }
        let mut body = vec![
            Stmt::let_(&q, ix::rem(&idx.expr(), rows / w)),
            Stmt::let_(&kk, ix::div(&idx.expr(), rows / w)),
        ];
        let row = ix::add(mn0, &r);
        let mut cond = None;
        if mn_size % rows != 0 {
            cond = ix::and(cond, Some(row.cmp_lt(c(mn_size))));
        }
        if self.k % bk != 0 {
            cond = ix::and(cond, Some(kidx.cmp_lt(c(self.k))));
        }
        let at = ix::add(slot, &ix::add(&ix::mul(&kk.expr(), &c(rows)), &r));
        let copy = Stmt::vstore(dst, at.clone(), Expr::vload(buf, acc.offset, w as u8));
        body.push(match cond {
            Some(cond) => {
                Stmt::if_else(cond, copy, Stmt::vstore(dst, at, Expr::f32(0.0).broadcast(w as u8)))
            }
            None => copy,
        });
        let steps = (total + threads - 1) / threads;
        let mut inner =
            vec![Stmt::let_(&idx, ix::add(&self.lid, &ix::mul(&e.expr(), &c(threads))))];
        if total % threads != 0 {
            inner.push(Stmt::if_(idx.expr().cmp_lt(c(total)), Stmt::block(body)));
        } else {
            inner.extend(body);
        }
        Some(Stmt::for_(&e, c(0), c(steps), c(1), Stmt::block(inner)))
    }

    /// The cooperative tile load with `vec`-lane vector loads along K (a row-major A, a
    /// column-major B), each stored to local memory lane by lane (the tile is K-major there),
    /// when the view is provably contiguous and aligned along K and the masks are per vector.
    fn load_tile_vector_k(&self, is_a: bool, k0: &Expr, slot: &Expr) -> Option<Stmt> {
        let w = self.cfg.vec as i64;
        let (view, buf, dst, rows, mn0, mn_size, kind) = self.operand(is_a);
        let tag = if is_a { "ka" } else { "kb" };
        let bk = self.cfg.k_tile as i64;
        if w == 1 || bk % w != 0 || view.layout().ty() != Scalar::F32 {
            return None;
        }
        // A vector straddling the K edge would need lane masks.
        if self.k % bk != 0 && self.k % w != 0 {
            return None;
        }
        let threads = self.cfg.threads() as i64;
        let total = rows * bk / w;
        let e = Var::new(format!("{tag}_e"), Type::I32);
        let idx = Var::new(format!("{tag}_i"), Type::I32);
        let r = Var::new(format!("{tag}_r"), Type::I32);
        let q = Var::new(format!("{tag}_q"), Type::I32);
        let kk = ix::mul(&q.expr(), &c(w));
        let row = ix::add(mn0, &r.expr());
        let lane = |j: i64| {
            let kidx = ix::add(k0, &ix::add(&kk, &c(j)));
            view.access(&unflatten(view, &[(kind, row.clone()), (DimKind::K, kidx)]))
        };
        let acc = lane(0);
        if acc.mask.is_some() {
            return None;
        }
        let offs: Vec<Expr> = (0..w).map(|j| lane(j).offset).collect();
        if !contiguous(&offs, &self.frame) {
            return None;
        }
        let kidx = ix::add(k0, &kk);
        let mut cond = None;
        if mn_size % rows != 0 {
            cond = ix::and(cond, Some(row.cmp_lt(c(mn_size))));
        }
        if self.k % bk != 0 {
            cond = ix::and(cond, Some(kidx.cmp_lt(c(self.k))));
        }
        let at =
            |j: i64| ix::add(slot, &ix::add(&ix::mul(&ix::add(&kk, &c(j)), &c(rows)), &r.expr()));
        let v = Var::new(format!("{tag}_v"), Type::vector(Scalar::F32, w as u8));
        let mut copy = vec![Stmt::let_(&v, Expr::vload(buf, acc.offset, w as u8))];
        copy.extend((0..w).map(|j| Stmt::store(dst, at(j), v.expr().extract(j as u8))));
        let mut body = vec![
            Stmt::let_(&r, ix::rem(&idx.expr(), rows)),
            Stmt::let_(&q, ix::div(&idx.expr(), rows)),
        ];
        body.push(match cond {
            Some(cond) => {
                let zero = (0..w).map(|j| Stmt::store(dst, at(j), Expr::f32(0.0)));
                Stmt::if_else(cond, Stmt::block(copy), Stmt::block(zero))
            }
            None => Stmt::block(copy),
        });
        let steps = (total + threads - 1) / threads;
        let mut inner =
            vec![Stmt::let_(&idx, ix::add(&self.lid, &ix::mul(&e.expr(), &c(threads))))];
        if total % threads != 0 {
            inner.push(Stmt::if_(idx.expr().cmp_lt(c(total)), Stmt::block(body)));
        } else {
            inner.extend(body);
        }
        Some(Stmt::for_(&e, c(0), c(steps), c(1), Stmt::block(inner)))
    }

    /// The row of the tile (0 .. BM) that register-block row `i` of work-item row `ty` is:
    /// `ty + i * wg_m` (rows `wg_m` apart), or with vectors `ty * tm + i` (contiguous).
    fn row(&self, ty: &Expr, i: i64) -> Expr {
        if self.cfg.vec > 1 {
            ix::add(&ix::mul(ty, &c(self.cfg.tm as i64)), &c(i))
        } else {
            ix::add(ty, &c(i * self.cfg.wg_m as i64))
        }
    }

    /// The column of the tile that register-block column `j` of work-item column `tx` is.
    fn col(&self, tx: &Expr, j: i64) -> Expr {
        if self.cfg.vec > 1 {
            ix::add(&ix::mul(tx, &c(self.cfg.tn as i64)), &c(j))
        } else {
            ix::add(tx, &c(j * self.cfg.wg_n as i64))
        }
    }

    /// Loads `n` register-block operands from local array `s` at `base + f(i)`: one `vload`
    /// when the block is contiguous (`vec > 1`) and `n` is a lane count, else scalars.
    fn block_loads(
        &self,
        s: &Var,
        base: &Expr,
        tag: &str,
        n: i64,
        at: &dyn Fn(i64) -> Expr,
        body: &mut Vec<Stmt>,
    ) -> Vec<Expr> {
        if self.cfg.vec > 1 && [2, 4, 8].contains(&n) {
            let v = Var::new(format!("{tag}_v"), Type::vector(Scalar::F32, n as u8));
            body.push(Stmt::let_(&v, Expr::vload(s, ix::add(base, &at(0)), n as u8)));
            return (0..n).map(|i| v.expr().extract(i as u8)).collect();
        }
        (0..n)
            .map(|i| {
                let x = Var::new(format!("{tag}_{i}"), Type::F32);
                body.push(Stmt::let_(&x, s.load(ix::add(base, &at(i)))));
                x.expr()
            })
            .collect()
    }

    /// The multiply of the tiles at slots `sa`, `sb` into the register block.
    fn multiply(&self, sa: &Expr, sb: &Expr, acc: &[Vec<Var>], tx: &Expr, ty: &Expr) -> Stmt {
        let cfg = &self.cfg;
        let (bm, bn) = (cfg.tile_m() as i64, cfg.tile_n() as i64);
        let kk = Var::new("kk", Type::I32);
        let mut body = Vec::new();
        let abase = ix::add(sa, &ix::mul(&kk.expr(), &c(bm)));
        let ar = self.block_loads(
            &self.a_s,
            &abase,
            "a",
            cfg.tm as i64,
            &|i| self.row(ty, i),
            &mut body,
        );
        let bbase = ix::add(sb, &ix::mul(&kk.expr(), &c(bn)));
        let br = self.block_loads(
            &self.b_s,
            &bbase,
            "b",
            cfg.tn as i64,
            &|j| self.col(tx, j),
            &mut body,
        );
        for (i, a) in ar.iter().enumerate() {
            for (j, b) in br.iter().enumerate() {
                let s = &acc[i][j];
                let f = Expr::intrinsic(Intrinsic::Fma, [a.clone(), b.clone(), s.clone().expr()]);
                body.push(Stmt::assign(s, f));
            }
        }
        Stmt::for_(&kk, c(0), c(cfg.k_tile as i64), c(1), Stmt::block(body))
    }
}

/// Generates the kernel for `views` with `cfg`: verified, and unrolled when `cfg.unroll`.
pub fn generate(views: &GemmViews, cfg: &GemmConfig) -> Result<Generated, String> {
    cfg.validate()?;
    let (a, b, cv) = (&views.a, &views.b, &views.c);
    for (v, which, kinds) in [
        (a, "A", [DimKind::M, DimKind::K]),
        (b, "B", [DimKind::K, DimKind::N]),
        (cv, "C", [DimKind::M, DimKind::N]),
    ] {
        if let Some(d) = v.vdims().iter().find(|d| !kinds.contains(&d.kind)) {
            return Err(format!(
                "{which}'s dimension `{}` is {:?}; {which} has only {kinds:?}",
                d.name, d.kind
            ));
        }
        for kind in kinds {
            if v.dims_of(kind).is_empty() {
                return Err(format!("{which} has no {kind:?} dimension"));
            }
        }
        if !v.layout().fits_i32() {
            return Err(format!("{which}'s buffer exceeds 2^31 elements (indices are i32)"));
        }
    }
    let agree = |x: &View, y: &View, kind: DimKind, xs: &str, ys: &str| {
        let (p, q) = (sizes(x, kind), sizes(y, kind));
        if p == q {
            Ok(())
        } else {
            Err(format!("{xs}'s {kind:?} dimensions {p:?} differ from {ys}'s {q:?}"))
        }
    };
    agree(a, cv, DimKind::M, "A", "C")?;
    agree(a, b, DimKind::K, "A", "B")?;
    agree(b, cv, DimKind::N, "B", "C")?;
    let ta = elem_ty(a, "A")?;
    let tb = elem_ty(b, "B")?;
    let tc = elem_ty(cv, "C")?;
    let prod = |v: Vec<i64>| v.iter().try_fold(1i64, |acc, &x| acc.checked_mul(x));
    let too_big = || "the flattened GEMM exceeds 2^31 in a dimension (indices are i32)".to_string();
    let m = prod(sizes(a, DimKind::M)).filter(|&x| x < 1 << 30).ok_or_else(too_big)?;
    let k = prod(sizes(a, DimKind::K)).filter(|&x| x < 1 << 30).ok_or_else(too_big)?;
    let n = prod(sizes(b, DimKind::N)).filter(|&x| x < 1 << 30).ok_or_else(too_big)?;
    let (bm, bn, bk) = (cfg.tile_m() as i64, cfg.tile_n() as i64, cfg.k_tile as i64);
    let groups_m = (m + bm - 1) / bm;
    let groups_n = (n + bn - 1) / bn;
    let global = [groups_n * cfg.wg_n as i64, groups_m * cfg.wg_m as i64];
    if global.iter().any(|&g| g > u32::MAX as i64 / 2) {
        return Err(too_big());
    }
    let pa = Var::new(&views.names[0], Type::ptr(AddrSpace::Global, ta));
    let pb = Var::new(&views.names[1], Type::ptr(AddrSpace::Global, tb));
    let pc = Var::new(&views.names[2], Type::ptr(AddrSpace::Global, tc));
    let alpha = Var::new("alpha", Type::F32);
    let beta = Var::new("beta", Type::F32);
    let a_s = Var::new("a_s", Type::ptr(AddrSpace::Local, Scalar::F32));
    let b_s = Var::new("b_s", Type::ptr(AddrSpace::Local, Scalar::F32));
    let tx = Var::new("tx", Type::I32);
    let ty = Var::new("ty", Type::I32);
    let lid = Var::new("lid", Type::I32);
    let m0 = Var::new("m0", Type::I32);
    let n0 = Var::new("n0", Type::I32);
    // Triple buffering is the single-buffered loop through the `slm-buffer3` pass (below).
    let depth = if cfg.slm_depth == 3 { 1 } else { cfg.slm_depth as i64 };
    let mut body = vec![
        Stmt::alloc(&a_s, (depth * bk * bm) as u32),
        Stmt::alloc(&b_s, (depth * bk * bn) as u32),
        Stmt::let_(&tx, Expr::local_id(0).cast(Scalar::I32)),
        Stmt::let_(&ty, Expr::local_id(1).cast(Scalar::I32)),
        Stmt::let_(&lid, ix::add(&ix::mul(&ty.expr(), &c(cfg.wg_n as i64)), &tx.expr())),
        Stmt::let_(&m0, ix::mul(&Expr::group_id(1).cast(Scalar::I32), &c(bm))),
        Stmt::let_(&n0, ix::mul(&Expr::group_id(0).cast(Scalar::I32), &c(bn))),
    ];
    let acc: Vec<Vec<Var>> = (0..cfg.tm)
        .map(|i| (0..cfg.tn).map(|j| Var::new(format!("acc_{i}_{j}"), Type::F32)).collect())
        .collect();
    for v in acc.iter().flatten() {
        body.push(Stmt::decl(v, Expr::f32(0.0)));
    }
    let g = Gen {
        v: views,
        cfg: *cfg,
        m,
        n,
        k,
        pa: pa.clone(),
        pb: pb.clone(),
        a_s,
        b_s,
        lid: lid.expr(),
        m0: m0.expr(),
        n0: n0.expr(),
        frame: [
            (m0.clone(), ix::mul(&Var::new("group_m", Type::I32).expr(), &c(bm))),
            (n0.clone(), ix::mul(&Var::new("group_n", Type::I32).expr(), &c(bn))),
        ]
        .into_iter()
        .collect(),
    };
    let nk = (k + bk - 1) / bk;
    let kt = Var::new("kt", Type::I32);
    let barrier = || Stmt::barrier(MemFence::LOCAL);
    let k0 = ix::mul(&kt.expr(), &c(bk));
    if depth == 1 {
        let z = c(0);
        let step = Stmt::block([
            g.load_tile(true, &k0, &z),
            g.load_tile(false, &k0, &z),
            barrier(),
            g.multiply(&z, &z, &acc, &tx.expr(), &ty.expr()),
            barrier(),
        ]);
        body.push(Stmt::for_(&kt, c(0), c(nk), c(1), step));
    } else {
        // Tile kt+1 loads into the other slot while tile kt is multiplied: the barrier at
        // the end of a step both publishes the next tile and retires the current one, so
        // one barrier per step suffices.
        let z = c(0);
        body.push(g.load_tile(true, &z, &z));
        body.push(g.load_tile(false, &z, &z));
        body.push(barrier());
        let slot = |t: &Expr, size: i64| ix::mul(&ix::rem(t, 2), &c(bk * size));
        let next = ix::add(&kt.expr(), &c(1));
        let nk0 = ix::mul(&next, &c(bk));
        let (sa, sb) = (Var::new("sa", Type::I32), Var::new("sb", Type::I32));
        let step = Stmt::block([
            Stmt::let_(&sa, slot(&kt.expr(), bm)),
            Stmt::let_(&sb, slot(&kt.expr(), bn)),
            Stmt::if_(
                next.cmp_lt(c(nk)),
                Stmt::block([
                    g.load_tile(true, &nk0, &slot(&next, bm)),
                    g.load_tile(false, &nk0, &slot(&next, bn)),
                ]),
            ),
            g.multiply(&sa.expr(), &sb.expr(), &acc, &tx.expr(), &ty.expr()),
            barrier(),
        ]);
        body.push(Stmt::for_(&kt, c(0), c(nk), c(1), step));
    }
    // Epilogue: C = alpha * acc + beta * C, masked; beta == 0 ignores C's old value (even
    // NaN), as BLAS does.
    let beta0 = beta.expr().cmp_eq(Expr::f32(0.0));
    let w = cfg.vec as i64;
    for (i, row) in acc.iter().enumerate() {
        let mi = ix::add(&m0.expr(), &g.row(&ty.expr(), i as i64));
        // Vector stores along N where each `w` columns are provably contiguous and aligned
        // in C and need no per-lane mask.
        let mut vectored = vec![false; row.len()];
        if w > 1 && tc == Scalar::F32 && row.len() as i64 % w == 0 && (n % bn == 0 || n % w == 0) {
            for j0 in (0..row.len() as i64).step_by(w as usize) {
                let lane = |j: i64| {
                    let nj = ix::add(&n0.expr(), &g.col(&tx.expr(), j0 + j));
                    cv.access(&unflatten(cv, &[(DimKind::M, mi.clone()), (DimKind::N, nj)]))
                };
                let at = lane(0);
                let offs: Vec<Expr> = (0..w).map(|j| lane(j).offset).collect();
                if at.mask.is_some() || !contiguous(&offs, &g.frame) {
                    continue;
                }
                let nj = ix::add(&n0.expr(), &g.col(&tx.expr(), j0));
                let mut cond = None;
                if m % bm != 0 {
                    cond = ix::and(cond, Some(mi.cmp_lt(c(m))));
                }
                if n % bn != 0 {
                    cond = ix::and(cond, Some(nj.cmp_lt(c(n))));
                }
                let lanes = (j0..j0 + w).map(|j| row[j as usize].expr());
                let scaled = alpha.expr().broadcast(w as u8) * Expr::build_vector(lanes);
                let old = Expr::vload(&pc, at.offset.clone(), w as u8);
                let v = Expr::select(
                    beta0.clone(),
                    scaled.clone(),
                    scaled + beta.expr().broadcast(w as u8) * old,
                );
                let st = Stmt::vstore(&pc, at.offset, v);
                body.push(match cond {
                    Some(cond) => Stmt::if_(cond, st),
                    None => st,
                });
                for f in &mut vectored[j0 as usize..(j0 + w) as usize] {
                    *f = true;
                }
            }
        }
        for (j, s) in row.iter().enumerate() {
            if vectored[j] {
                continue;
            }
            let nj = ix::add(&n0.expr(), &g.col(&tx.expr(), j as i64));
            let coords = unflatten(cv, &[(DimKind::M, mi.clone()), (DimKind::N, nj.clone())]);
            let at = cv.access(&coords);
            let mut cond = None;
            if m % bm != 0 {
                cond = ix::and(cond, Some(mi.cmp_lt(c(m))));
            }
            if n % bn != 0 {
                cond = ix::and(cond, Some(nj.cmp_lt(c(n))));
            }
            cond = ix::and(cond, at.mask);
            let scaled = alpha.expr() * s.expr();
            let old = load_f32(&pc, at.offset.clone());
            let v = Expr::select(beta0.clone(), scaled.clone(), scaled + beta.expr() * old);
            let v = if tc == Scalar::F32 { v } else { v.cast(tc) };
            let st = Stmt::store(&pc, at.offset, v);
            body.push(match cond {
                Some(cond) => Stmt::if_(cond, st),
                None => st,
            });
        }
    }
    let local = [cfg.wg_n, cfg.wg_m];
    let global = [global[0] as u32, global[1] as u32];
    let attrs = Attrs {
        reqd_work_group_size: Some([local[0], local[1], 1]),
        nd_range: Some(NdRangeAttr {
            global: global.to_vec(),
            local: Some(local.to_vec()),
            offset: vec![0, 0],
        }),
        ..Attrs::default()
    };
    let mut kernel =
        Kernel::with_attrs(&views.name, vec![pa, pb, pc, alpha, beta], attrs, Stmt::block(body));
    if cfg.slm_depth == 3 {
        let tripled = kiln_passes::slm_buffering::slm_triple_buffer(&kernel);
        if tripled.ptr_eq(&kernel) {
            return Err("internal error: the slm-buffer3 pass left the k loop alone".into());
        }
        kernel = tripled;
    }
    if cfg.unroll {
        kernel = kiln_passes::unroll::unroll(&kernel);
    }
    kiln_ir::verify_kernel(&kernel).map_err(|e| {
        let first = e.first().map(|x| x.to_string()).unwrap_or_default();
        format!("internal error: the generated kernel does not verify: {first}")
    })?;
    let elems = |v: &View| v.layout().size_elems().unwrap_or(0) as usize;
    Ok(Generated {
        kernel,
        global,
        local,
        buffer_elems: [elems(a), elems(b), elems(cv)],
        mnk: [m as u64, n as u64, k as u64],
    })
}
