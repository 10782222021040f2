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
//! for kt in 0 .. ceil(K / BK):                     // (depth 2: tile kt+1 loads into
//!   cooperative load of A's and B's BK-deep tiles    //  registers, tile kt is multiplied,
//!                                                    //  the registers go to local memory)
//!     (0 outside the views and past K, tested only in
//!     K's last k-tile; rows past M or N read the last
//!     row instead: they reach no stored element of C)
//!   barrier(local)
//!   for kk in 0 .. BK: a_i = a_s[..]; b_j = b_s[..]; acc_i_j = fma(a_i, b_j, acc_i_j)
//!   barrier(local)
//! C[...] = alpha * acc + beta * C[...]             // masked; beta == 0 does not use C
//! ```
//!
//! Local dimension 0 runs along N, 1 along M. Index arithmetic is `i32`; the generator
//! refuses problems whose offsets would not fit.

use kiln_ir::launch::NdRange;
use kiln_ir::{
    AddrSpace, Attrs, Expr, Intrinsic, Kernel, MemFence, NdRangeAttr, Scalar, Stmt, Type, Var,
};

use crate::config::{GemmConfig, MAX_LOCAL_BYTES};
use crate::ix::{self, c};
use crate::split::{reduce_kernel, SplitK, REDUCE_LOCAL};
use crate::view::{Access, DimKind, View};

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
    /// With split-K ([`GemmConfig::split_k`] above 1, when K has more than one slice):
    /// `kernel` is the partial-products kernel, with parameters `(a, b, w)`, and this says
    /// how to finish.
    pub split: Option<SplitK>,
}

impl Generated {
    /// The launch of [`Generated::kernel`] (its `#nd_range`): two dimensions, or three with
    /// split-K or a batch (dimension 2 runs over batch indices times slices, the slice
    /// fastest).
    pub fn range(&self) -> NdRange {
        match &self.kernel.attrs().nd_range {
            Some(r) => {
                NdRange::new(&r.global).with_local(r.local.as_deref().unwrap_or(&self.local))
            }
            None => NdRange::new(&self.global).with_local(&self.local),
        }
    }
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
pub(crate) fn load_f32(buf: &Var, off: Expr) -> Expr {
    let x = buf.load(off);
    if x.ty() == Type::F32 {
        x
    } else {
        x.cast(Scalar::F32)
    }
}

/// Lane 0's access of a would-be `w`-lane vector access whose lane `j` is `lane(j)`, when one
/// vector access at it reads or writes exactly those elements, aligned: no view mask applies,
/// the offsets are provably `offset0 + j` and `offset0` a multiple of `w`. `frame`
/// substitutes the work-group bases by multiples of their tile sizes for the alignment proof.
/// Anything the simplifier or the residue analysis cannot settle is `None` (the caller then
/// keeps scalar accesses).
fn vector_access(
    w: i64,
    frame: &std::collections::HashMap<Var, Expr>,
    lane: impl Fn(i64) -> Access,
) -> Option<Access> {
    let first = lane(0);
    if first.mask.is_some() {
        return None;
    }
    let step_ok = (1..w).all(|j| {
        let d = kiln_passes::simplify::simplify_expr(&(lane(j).offset - first.offset.clone()));
        d.as_imm().and_then(|i| i.as_i128()) == Some(j as i128)
    });
    let aligned = kiln_ir::verify::known_residue(&ix::subst(&first.offset, frame), w as u64);
    (step_ok && aligned == Some(0)).then_some(first)
}

/// How a tile copy stores a loaded value (an f32 or vector expression) into local memory.
type StoreFn = Box<dyn Fn(&Expr) -> Vec<Stmt>>;

/// One work-item's part of a cooperative tile copy: index arithmetic, when the source
/// exists, what to load and how to store it into the local tile.
struct TileCopy {
    /// `let`s of the positions the rest uses.
    pre: Vec<Stmt>,
    /// Where the source elements exist (`None`: always); elsewhere the tile gets zeros.
    cond: Option<Expr>,
    /// The load, as f32 or an f32 vector.
    value: Expr,
    /// The load's type.
    ty: Type,
    /// Zero of that type.
    zero: Expr,
    /// Copies (elements or vectors) per tile.
    total: i64,
    /// The store of a value of type `ty` into the tile.
    store: StoreFn,
}

impl TileCopy {
    /// A copy of vectors (`load` is a `vload`), zero where `cond` fails.
    fn vector(
        pre: Vec<Stmt>,
        cond: Option<Expr>,
        load: Expr,
        total: i64,
        store: StoreFn,
    ) -> TileCopy {
        let ty = load.ty();
        let zero = Expr::f32(0.0).broadcast(ty.lanes());
        TileCopy { pre, cond, value: load, ty, zero, total, store }
    }
}

#[derive(Clone)]
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
    /// Whether the tile copies zero reduction indices past K: only in a step whose k-tile
    /// can reach past it (the main loop of a peeled reduction runs without).
    k_guard: bool,
    /// `m0` and `n0` as multiples of the tile sizes, for alignment proofs.
    frame: std::collections::HashMap<Var, Expr>,
    /// The flat batch index of a batched GEMM (the views' batch dimensions), else `None`.
    batch: Option<Expr>,
    /// Elements past each local tile row (k-slice) before the next.
    pad: i64,
}

impl Gen<'_> {
    /// Elements from one k-slice of operand A's (`is_a`) or B's local tile to the next.
    fn stride(&self, is_a: bool) -> i64 {
        self.pad + if is_a { self.cfg.tile_m() } else { self.cfg.tile_n() } as i64
    }

    /// Virtual coordinates of `v` from flat M, N and K indices, and the work-group's batch
    /// index for the views' batch dimensions.
    fn coords(&self, v: &View, flat: &[(DimKind, Expr)]) -> Vec<Expr> {
        let mut all = flat.to_vec();
        if let Some(b) = &self.batch {
            all.push((DimKind::Batch, b.clone()));
        }
        unflatten(v, &all)
    }

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
    /// `slot` (an element offset), done at once: work-item `lid` copies elements (or
    /// vectors) `lid, lid + T, ...` of the tile.
    fn load_tile(&self, is_a: bool, k0: &Expr, slot: &Expr) -> Stmt {
        let threads = self.cfg.threads() as i64;
        let tag = if is_a { "ta" } else { "tb" };
        let e = Var::new(format!("{tag}_e"), Type::I32);
        let idx = Var::new(format!("{tag}_i"), Type::I32);
        let copy = self.tile_copy(is_a, k0, slot, &idx.expr(), "");
        let v = Var::new(format!("{tag}_v"), copy.ty);
        let mut body = copy.pre;
        // A masked copy stores zeros in its `else` (rather than through a `var`), the form
        // the `slm-buffer3` pass recognises.
        let mut load = vec![Stmt::let_(&v, copy.value)];
        load.extend((copy.store)(&v.expr()));
        body.push(match copy.cond {
            Some(cond) => {
                Stmt::if_else(cond, Stmt::block(load), Stmt::block((copy.store)(&copy.zero)))
            }
            None => Stmt::block(load),
        });
        let mut inner =
            vec![Stmt::let_(&idx, ix::add(&self.lid, &ix::mul(&e.expr(), &c(threads))))];
        if copy.total % threads != 0 {
            inner.push(Stmt::if_(idx.expr().cmp_lt(c(copy.total)), Stmt::block(body)));
        } else {
            inner.extend(body);
        }
        let steps = (copy.total + threads - 1) / threads;
        Stmt::for_(&e, c(0), c(steps), c(1), Stmt::block(inner))
    }

    /// The same copy staged through registers, for the double-buffered loop: `.0` loads
    /// this work-item's share into variables when `guard` holds (issued before the
    /// multiply, so the global loads' latency overlaps it), `.1` stores them into the
    /// tile (after the multiply, before the barrier).
    fn stage_tile(
        &self,
        is_a: bool,
        k0: &Expr,
        slot: &Expr,
        guard: Option<&Expr>,
    ) -> (Vec<Stmt>, Vec<Stmt>) {
        let threads = self.cfg.threads() as i64;
        let tag = if is_a { "pa" } else { "pb" };
        let (mut fetch, mut store) = (Vec::new(), Vec::new());
        let mut e = 0;
        loop {
            let idx = Var::new(format!("{tag}_i{e}"), Type::I32);
            let at = ix::add(&self.lid, &c(e * threads));
            let copy = self.tile_copy(is_a, k0, slot, &idx.expr(), &e.to_string());
            fetch.push(Stmt::let_(&idx, at));
            fetch.extend(copy.pre);
            let v = Var::new(format!("{tag}_v{e}"), copy.ty);
            let inside = if copy.total % threads != 0 {
                Some(idx.expr().cmp_lt(c(copy.total)))
            } else {
                None
            };
            let when = ix::and(guard.cloned(), inside);
            match ix::and(when.clone(), copy.cond) {
                Some(load_when) => {
                    fetch.push(Stmt::decl(&v, copy.zero));
                    fetch.push(Stmt::if_(load_when, Stmt::assign(&v, copy.value)));
                }
                None => fetch.push(Stmt::let_(&v, copy.value)),
            }
            let put = Stmt::block((copy.store)(&v.expr()));
            store.push(match when {
                Some(when) => Stmt::if_(when, put),
                None => put,
            });
            e += 1;
            if e * threads >= copy.total {
                return (fetch, store);
            }
        }
    }

    /// Work-item index `idx`'s part of the copy of a tile: vectors along the tile's rows,
    /// vectors along K, or single elements, whichever the view provably allows.
    fn tile_copy(&self, is_a: bool, k0: &Expr, slot: &Expr, idx: &Expr, sfx: &str) -> TileCopy {
        if let Some(t) = self.copy_vector_rows(is_a, k0, slot, idx, sfx) {
            return t;
        }
        if let Some(t) = self.copy_vector_k(is_a, k0, slot, idx, sfx) {
            return t;
        }
        let (view, buf, dst, rows, mn0, mn_size, kind) = self.operand(is_a);
        let tag = if is_a { "la" } else { "lb" };
        let bk = self.cfg.k_tile as i64;
        let r = Var::new(format!("{tag}_r{sfx}"), Type::I32);
        let kk = Var::new(format!("{tag}_k{sfx}"), Type::I32);
        // Rows fastest: neighbouring work-items take neighbouring rows of the tile, and the
        // tile is stored k-major, as the multiply reads it.
        let mut pre = vec![Stmt::let_(&r, ix::rem(idx, rows)), Stmt::let_(&kk, ix::div(idx, rows))];
        let row = clamp(&ix::add(mn0, &r.expr()), mn_size, rows, 1);
        let kidx = ix::add(k0, &kk.expr());
        // A flat index over several virtual dimensions (a convolution's M = mb, oh, ow and
        // K = ic, kh, kw) is taken apart with divisions: each coordinate is bound once, so
        // that the mask and the offset share it, and those of the row, which do not change
        // from one reduction step to the next, are hoisted out of the k loop (`licm`).
        let by_mn = self.coords(view, &[(kind, row.clone())]);
        let by_k = unflatten(view, &[(DimKind::K, kidx.clone())]);
        let mut coords = Vec::new();
        for (p, d) in view.vdims().iter().enumerate() {
            let e = if d.kind == DimKind::K { by_k[p].clone() } else { by_mn[p].clone() };
            if view.dims_of(d.kind).len() > 1 {
                let v = Var::new(format!("{tag}_{}{sfx}", d.name), Type::I32);
                pre.push(Stmt::let_(&v, e));
                coords.push(v.expr());
            } else {
                coords.push(e);
            }
        }
        let acc = view.access(&coords);
        let cond = ix::and(self.k_edge(&kidx), acc.mask);
        let at = ix::add(slot, &ix::add(&ix::mul(&kk.expr(), &c(self.stride(is_a))), &r.expr()));
        let dst = dst.clone();
        TileCopy {
            pre,
            cond,
            value: load_f32(buf, acc.offset),
            ty: Type::F32,
            zero: Expr::f32(0.0),
            total: rows * bk,
            store: Box::new(move |v| vec![Stmt::store(&dst, at.clone(), v.clone())]),
        }
    }

    /// The condition that reduction index `kidx` is inside the problem, where this step's
    /// k-tile can reach past K (elsewhere `None`: no test).
    fn k_edge(&self, kidx: &Expr) -> Option<Expr> {
        self.k_guard.then(|| kidx.cmp_lt(c(self.k)))
    }

    /// The copy with `vec`-lane vectors along the tile's rows, when the view is provably
    /// contiguous and aligned along them and the masks are per vector.
    fn copy_vector_rows(
        &self,
        is_a: bool,
        k0: &Expr,
        slot: &Expr,
        idx: &Expr,
        sfx: &str,
    ) -> Option<TileCopy> {
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
        let q = Var::new(format!("{tag}_q{sfx}"), Type::I32);
        let kk = Var::new(format!("{tag}_k{sfx}"), Type::I32);
        let r = ix::mul(&q.expr(), &c(w));
        let kidx = ix::add(k0, &kk.expr());
        let lane = |j: i64| {
            let row = ix::add(mn0, &ix::add(&r, &c(j)));
            view.access(&self.coords(view, &[(kind, row), (DimKind::K, kidx.clone())]))
        };
        vector_access(w, &self.frame, lane)?;
        // The proof holds for every multiple of `w` as the first row (`q` is free), so
        // also for the clamped one (`mn_size - w`, a multiple of `w` here).
        let first = clamp(&ix::add(mn0, &r), mn_size, rows, w);
        let acc = view.access(&self.coords(view, &[(kind, first), (DimKind::K, kidx.clone())]));
        if acc.mask.is_some() {
            return None;
        }
        let mut pre =
            vec![Stmt::let_(&q, ix::rem(idx, rows / w)), Stmt::let_(&kk, ix::div(idx, rows / w))];
        let cond = self.k_edge(&kidx);
        let own = ix::add(&ix::mul(&kk.expr(), &c(self.stride(is_a))), &r);
        // In the double-buffered loop's staged copies (`sfx` names the share), the
        // work-item's place in the tile is bound before the loop (see `copy_vector_k`).
        let at = if sfx.is_empty() {
            ix::add(slot, &own)
        } else {
            let v = Var::new(format!("{tag}_o{sfx}"), Type::I32);
            pre.push(Stmt::let_(&v, own));
            ix::add(slot, &v.expr())
        };
        let dst = dst.clone();
        let store: StoreFn = Box::new(move |v| vec![Stmt::vstore(&dst, at.clone(), v.clone())]);
        Some(TileCopy::vector(
            pre,
            cond,
            Expr::vload(buf, acc.offset, w as u8),
            rows * bk / w,
            store,
        ))
    }

    /// The copy with `vec`-lane vector loads along K (a row-major A, a column-major B),
    /// each stored to local memory lane by lane (the tile is K-major there), when the view
    /// is provably contiguous and aligned along K and the masks are per vector.
    fn copy_vector_k(
        &self,
        is_a: bool,
        k0: &Expr,
        slot: &Expr,
        idx: &Expr,
        sfx: &str,
    ) -> Option<TileCopy> {
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
        let r = Var::new(format!("{tag}_r{sfx}"), Type::I32);
        let q = Var::new(format!("{tag}_q{sfx}"), Type::I32);
        let kk = ix::mul(&q.expr(), &c(w));
        let row = ix::add(mn0, &r.expr());
        let lane = |j: i64| {
            let kidx = ix::add(k0, &ix::add(&kk, &c(j)));
            view.access(&self.coords(view, &[(kind, row.clone()), (DimKind::K, kidx)]))
        };
        vector_access(w, &self.frame, lane)?;
        // The proof holds for every row (`r` is free), so also for the clamped one.
        let kfirst = ix::add(k0, &kk);
        let crow = clamp(&row, mn_size, rows, 1);
        let acc = view.access(&self.coords(view, &[(kind, crow), (DimKind::K, kfirst.clone())]));
        if acc.mask.is_some() {
            return None;
        }
        let cond = self.k_edge(&kfirst);
        // The vectors of a row fastest: neighbouring work-items read neighbouring 16-byte
        // pieces of one row, so a warp's loads touch half as many cache lines (with
        // `k_tile / vec` of them per row) as with rows fastest, for store bank conflicts
        // of at most that many ways on a few stores per step.
        let qs = bk / w;
        let pre = vec![Stmt::let_(&r, ix::div(idx, qs)), Stmt::let_(&q, ix::rem(idx, qs))];
        let stride = self.stride(is_a);
        // In the staged copies of the double-buffered loop (`sfx` names the share), the
        // lanes' places in the tile are one place plus constants: bound once (the
        // work-item's part before the loop, the slot's in each step), the backend folds the
        // constants into the stores' addresses. The single-buffered loop keeps plain
        // stores, the form the `slm-buffer` passes take.
        let own = Var::new(format!("{tag}_o{sfx}"), Type::I32);
        let mut pre = pre;
        let bind = !sfx.is_empty();
        if bind {
            pre.push(Stmt::let_(&own, ix::add(&ix::mul(&kk, &c(stride)), &r.expr())));
        }
        let (dst, slot, tag) = (dst.clone(), slot.clone(), format!("{tag}_at{sfx}"));
        let store: StoreFn = Box::new(move |v| {
            let at = Var::new(&tag, Type::I32);
            let mut out = Vec::new();
            if bind {
                out.push(Stmt::let_(&at, ix::add(&slot, &own.expr())));
            }
            for j in 0..w {
                let place = if bind {
                    ix::add(&at.expr(), &c(j * stride))
                } else {
                    ix::add(&slot, &ix::add(&ix::mul(&ix::add(&kk, &c(j)), &c(stride)), &r.expr()))
                };
                out.push(Stmt::store(&dst, place, v.extract(j as u8)));
            }
            out
        });
        Some(TileCopy::vector(
            pre,
            cond,
            Expr::vload(buf, acc.offset, w as u8),
            rows * bk / w,
            store,
        ))
    }

    /// Register-block rows (or columns) of `t` lanes come in groups of `gw` contiguous
    /// elements: `vec` when it divides `t` (each work-item reads a group with one `vload`,
    /// and neighbouring work-items read neighbouring groups, so a warp's local-memory reads
    /// are contiguous and free of bank conflicts), else the whole block.
    fn group(&self, t: u32) -> i64 {
        if t.is_multiple_of(self.cfg.vec) {
            self.cfg.vec as i64
        } else {
            t as i64
        }
    }

    /// The tile coordinate of element `i` of a register block of `t` lanes owned by
    /// work-item `w` of `wg` along that axis: `w + i * wg` (lanes `wg` apart) without
    /// vectors; with them, group `i / gw` starts at `(i / gw) * wg * gw` and work-item `w`
    /// owns lanes `w * gw .. w * gw + gw` of it.
    fn lane_at(&self, w: &Expr, i: i64, t: u32, wg: u32) -> Expr {
        let (stride, off) = self.lane_split(i, t, wg);
        ix::add(&ix::mul(w, &c(stride)), &c(off))
    }

    /// [`Gen::lane_at`] as `w * stride + offset`: the part that depends on the work-item
    /// and the constant part.
    fn lane_split(&self, i: i64, t: u32, wg: u32) -> (i64, i64) {
        if self.cfg.vec > 1 {
            let gw = self.group(t);
            (gw, (i / gw) * wg as i64 * gw + i % gw)
        } else {
            (1, i * wg as i64)
        }
    }

    /// The row of the tile (0 .. BM) that register-block row `i` of work-item row `ty` is.
    fn row(&self, ty: &Expr, i: i64) -> Expr {
        self.lane_at(ty, i, self.cfg.tm, self.cfg.wg_m)
    }

    /// The column of the tile that register-block column `j` of work-item column `tx` is.
    fn col(&self, tx: &Expr, j: i64) -> Expr {
        self.lane_at(tx, j, self.cfg.tn, self.cfg.wg_n)
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
        let gw = self.group(n as u32);
        if self.cfg.vec > 1 && [2, 4, 8].contains(&gw) {
            let mut out = Vec::new();
            for g in 0..n / gw {
                let v = Var::new(format!("{tag}_v{g}"), Type::vector(Scalar::F32, gw as u8));
                let at0 = ix::add(base, &at(g * gw));
                body.push(Stmt::let_(&v, Expr::vload(s, at0, gw as u8)));
                out.extend((0..gw).map(|i| v.expr().extract(i as u8)));
            }
            return out;
        }
        (0..n)
            .map(|i| {
                let x = Var::new(format!("{tag}_{i}"), Type::F32);
                body.push(Stmt::let_(&x, s.load(ix::add(base, &at(i)))));
                x.expr()
            })
            .collect()
    }

    /// The multiply of the tiles at slots `sa`, `sb` into the register block. Each
    /// work-item's first row and column of the tiles are bound once, so that every read
    /// in the (unrolled) `kk` loop is that position plus a constant, which backends fold
    /// into the address.
    fn multiply(&self, sa: &Expr, sb: &Expr, acc: &[Vec<Var>], tx: &Expr, ty: &Expr) -> Stmt {
        let cfg = &self.cfg;
        let kk = Var::new("kk", Type::I32);
        let (a_at, b_at) = (Var::new("a_at", Type::I32), Var::new("b_at", Type::I32));
        let pre = [
            Stmt::let_(&a_at, ix::add(sa, &self.row(ty, 0))),
            Stmt::let_(&b_at, ix::add(sb, &self.col(tx, 0))),
        ];
        let mut body = Vec::new();
        let abase = ix::add(&a_at.expr(), &ix::mul(&kk.expr(), &c(self.stride(true))));
        let ar = self.block_loads(
            &self.a_s,
            &abase,
            "a",
            cfg.tm as i64,
            &|i| c(self.lane_split(i, cfg.tm, cfg.wg_m).1),
            &mut body,
        );
        let bbase = ix::add(&b_at.expr(), &ix::mul(&kk.expr(), &c(self.stride(false))));
        let br = self.block_loads(
            &self.b_s,
            &bbase,
            "b",
            cfg.tn as i64,
            &|j| c(self.lane_split(j, cfg.tn, cfg.wg_n).1),
            &mut body,
        );
        for (i, a) in ar.iter().enumerate() {
            for (j, b) in br.iter().enumerate() {
                let s = &acc[i][j];
                let f = Expr::intrinsic(Intrinsic::Fma, [a.clone(), b.clone(), s.clone().expr()]);
                body.push(Stmt::assign(s, f));
            }
        }
        let mut out = pre.to_vec();
        if cfg.unroll {
            // Unrolled here rather than left to the `unroll` pass, whose size limit keeps an
            // 8 x 8 block's loop at a k-tile of 16 (1088 statements) rolled; the same blocks
            // the pass makes.
            for i in 0..cfg.k_tile as i64 {
                let mut copy = vec![Stmt::let_(&kk, c(i))];
                copy.extend(body.iter().cloned());
                out.push(Stmt::block(copy));
            }
        } else {
            out.push(Stmt::for_(&kk, c(0), c(cfg.k_tile as i64), c(1), Stmt::block(body)));
        }
        Stmt::block(out)
    }
}

/// A tile's first row `row` of a run of `run` rows (1, or a vector's lanes), kept inside the
/// `size` rows of M or N where the `rows`-row tiles do not divide them: rows past the edge
/// read the last run instead. What they read only reaches rows or columns of C that lie
/// outside it and are never stored, so the copies need no test there (as K's edge does,
/// where every element of C adds the tile's zeros).
fn clamp(row: &Expr, size: i64, rows: i64, run: i64) -> Expr {
    if size % rows == 0 {
        row.clone()
    } else {
        ix::min(row, &c(size - run))
    }
}

/// Whether work-items are arranged in 8 x 4 warp tiles (see [`work_item_n`]).
fn warp_tiled(cfg: &GemmConfig) -> bool {
    cfg.vec > 1
        && cfg.wg_n.is_multiple_of(8)
        && cfg.wg_m.is_multiple_of(4)
        && cfg.threads().is_multiple_of(32)
}

/// The work-item's column position `tx` (0 .. wg_n) from its linear id. With vectors,
/// each run of 32 linear ids (a warp or subgroup) covers 8 columns by 4 rows of
/// work-items, so the warp's local-memory reads of B are 8 neighbouring groups (one
/// conflict-free access) and of A 4 groups, instead of 16 and 2 of a row-major mapping.
fn work_item_n(cfg: &GemmConfig, lid: &Expr) -> Expr {
    if !warp_tiled(cfg) {
        return Expr::local_id(0).cast(Scalar::I32);
    }
    let warp = ix::div(lid, 32);
    let lane = ix::rem(lid, 32);
    ix::add(&ix::mul(&ix::rem(&warp, cfg.wg_n as i64 / 8), &c(8)), &ix::rem(&lane, 8))
}

/// The work-item's row position `ty` (0 .. wg_m), the partner of [`work_item_n`].
fn work_item_m(cfg: &GemmConfig, lid: &Expr) -> Expr {
    if !warp_tiled(cfg) {
        return Expr::local_id(1).cast(Scalar::I32);
    }
    let warp = ix::div(lid, 32);
    let lane = ix::rem(lid, 32);
    ix::add(&ix::mul(&ix::div(&warp, cfg.wg_n as i64 / 8), &c(4)), &ix::div(&lane, 8))
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
        let allowed = |k: DimKind| kinds.contains(&k) || k == DimKind::Batch;
        if let Some(d) = v.vdims().iter().find(|d| !allowed(d.kind)) {
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
    agree(a, cv, DimKind::Batch, "A", "C")?;
    agree(b, cv, DimKind::Batch, "B", "C")?;
    let ta = elem_ty(a, "A")?;
    let tb = elem_ty(b, "B")?;
    let tc = elem_ty(cv, "C")?;
    let prod = |v: Vec<i64>| v.iter().try_fold(1i64, |acc, &x| acc.checked_mul(x));
    let too_big = || "the flattened GEMM exceeds 2^31 in a dimension (indices are i32)".to_string();
    let m = prod(sizes(a, DimKind::M)).filter(|&x| x < 1 << 30).ok_or_else(too_big)?;
    let k = prod(sizes(a, DimKind::K)).filter(|&x| x < 1 << 30).ok_or_else(too_big)?;
    let n = prod(sizes(b, DimKind::N)).filter(|&x| x < 1 << 30).ok_or_else(too_big)?;
    let batch = prod(sizes(cv, DimKind::Batch)).filter(|&x| x < 1 << 30).ok_or_else(too_big)?;
    let (bm, bn, bk) = (cfg.tile_m() as i64, cfg.tile_n() as i64, cfg.k_tile as i64);
    // Split-K: slices of whole k-tiles, as few as cover K.
    let ktiles = (k + bk - 1) / bk;
    let per_slice = (ktiles + cfg.split_k as i64 - 1) / cfg.split_k as i64;
    let slices = (ktiles + per_slice - 1) / per_slice;
    let kspan = per_slice * bk;
    let c_elems = cv.layout().size_elems().unwrap_or(0);
    if slices > 1 {
        if c_elems != batch * m * n {
            let what = if batch > 1 { "batch x M x N" } else { "M x N" };
            return Err(format!(
                "split-K needs C's buffer to hold exactly its {what} = {} elements (it has {c_elems})",
                batch * m * n
            ));
        }
        if slices.checked_mul(c_elems).is_none_or(|w| w >= 1 << 31) {
            return Err(format!(
                "split-K: the workspace of {slices} x {c_elems} elements exceeds 2^31 (indices are i32)"
            ));
        }
    }
    let groups_m = (m + bm - 1) / bm;
    let groups_n = (n + bn - 1) / bn;
    let global = [groups_n * cfg.wg_n as i64, groups_m * cfg.wg_m as i64];
    // Dimension 2 of the launch: one work-group per batch index and split-K slice, the
    // slice fastest.
    let groups_z = batch * slices;
    if global.iter().any(|&g| g > u32::MAX as i64 / 2) {
        return Err(too_big());
    }
    if groups_z > u16::MAX as i64 {
        return Err(format!(
            "{batch} batch indices x {slices} split-K slices = {groups_z} work-groups along \
             dimension 2, more than {} (the smallest limit among kiln's targets)",
            u16::MAX
        ));
    }
    let pa = Var::new(&views.names[0], Type::ptr(AddrSpace::Global, ta));
    let pb = Var::new(&views.names[1], Type::ptr(AddrSpace::Global, tb));
    let pc = Var::new(&views.names[2], Type::ptr(AddrSpace::Global, tc));
    // Split-K's partial products go to the workspace instead of C.
    let pw = Var::new("w", Type::ptr(AddrSpace::Global, Scalar::F32));
    let kb = Var::new("kb", Type::I32);
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
    // The local arrays are sized below, once the padding is known.
    let mut body = vec![
        Stmt::block([]),
        Stmt::block([]),
        Stmt::let_(
            &lid,
            ix::add(
                &ix::mul(&Expr::local_id(1).cast(Scalar::I32), &c(cfg.wg_n as i64)),
                &Expr::local_id(0).cast(Scalar::I32),
            ),
        ),
        Stmt::let_(&tx, work_item_n(cfg, &lid.expr())),
        Stmt::let_(&ty, work_item_m(cfg, &lid.expr())),
    ];
    body.push(Stmt::let_(&m0, ix::mul(&Expr::group_id(1).cast(Scalar::I32), &c(bm))));
    body.push(Stmt::let_(&n0, ix::mul(&Expr::group_id(0).cast(Scalar::I32), &c(bn))));
    let gz = || Expr::group_id(2).cast(Scalar::I32);
    // The work-group's split-K slice and batch index (dimension 2 is batch * slices + slice).
    let slice = if batch > 1 { ix::rem(&gz(), slices) } else { gz() };
    let bidx = Var::new("bidx", Type::I32);
    if batch > 1 {
        body.push(Stmt::let_(&bidx, ix::div(&gz(), slices)));
    }
    if slices > 1 {
        body.push(Stmt::let_(&kb, ix::mul(&slice, &c(kspan))));
    }
    let acc: Vec<Vec<Var>> = (0..cfg.tm)
        .map(|i| (0..cfg.tn).map(|j| Var::new(format!("acc_{i}_{j}"), Type::F32)).collect())
        .collect();
    for v in acc.iter().flatten() {
        body.push(Stmt::decl(v, Expr::f32(0.0)));
    }
    // Whether K's last k-tile (of a slice) reaches past K, and whether that tile's step is
    // peeled off the double-buffered loop, so that the loop copies tiles without testing K:
    // without split-K only the last k-tile can reach past K (with it, a whole slice's last
    // tiles can). The single-buffered loop stays in one piece, the form the `slm-buffer`
    // passes (triple buffering) take.
    let tail = k % if slices > 1 { kspan } else { bk } != 0;
    let peel = tail && slices == 1 && depth == 2;
    let mut g = Gen {
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
        k_guard: tail && !peel,
        frame: [
            (m0.clone(), ix::mul(&Var::new("group_m", Type::I32).expr(), &c(bm))),
            (n0.clone(), ix::mul(&Var::new("group_n", Type::I32).expr(), &c(bn))),
            (kb.clone(), ix::mul(&Var::new("group_k", Type::I32).expr(), &c(kspan))),
            (bidx.clone(), Var::new("group_b", Type::I32).expr()),
        ]
        .into_iter()
        .collect(),
        batch: (batch > 1).then(|| bidx.expr()),
        pad: 0,
    };
    // When both tiles are copied with vectors along K, each vector's lanes are stored
    // `BM` (`BN`) elements apart, 2 to 4 work-items of a warp hitting one bank: 4 more
    // elements per k-slice spread them (4096^3 with B transposed on the H200: 0.79x ->
    // 0.86x cuBLAS at k-tile 16, 0.89x -> 0.91x at 8; a row-major B, copied along its rows,
    // measured no better padded).
    let along_k = |is_a| {
        let (z, lid) = (c(0), lid.expr());
        g.copy_vector_rows(is_a, &z, &z, &lid, "").is_none()
            && g.copy_vector_k(is_a, &z, &z, &lid, "").is_some()
    };
    let padded = cfg.local_bytes() + (depth * bk * 8 * 4) as u64 <= MAX_LOCAL_BYTES as u64;
    if along_k(true) && along_k(false) && padded {
        g.pad = 4;
    }
    let pad = g.pad;
    body[0] = Stmt::alloc(&g.a_s, (depth * bk * (bm + pad)) as u32);
    body[1] = Stmt::alloc(&g.b_s, (depth * bk * (bn + pad)) as u32);
    let nk = if slices > 1 { per_slice } else { ktiles };
    let kt = Var::new("kt", Type::I32);
    let barrier = || Stmt::barrier(MemFence::LOCAL);
    // The first reduction index of a step: past the slice's start with split-K.
    let kstart = |e: Expr| if slices > 1 { ix::add(&kb.expr(), &e) } else { e };
    let k0 = kstart(ix::mul(&kt.expr(), &c(bk)));
    // The step that copies K's last k-tile, testing K, when it is peeled off the loop.
    let gk = Gen { k_guard: true, ..g.clone() };
    let z = c(0);
    if depth == 1 {
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
        let first = if peel && nk == 1 { &gk } else { &g };
        body.push(first.load_tile(true, &kstart(c(0)), &z));
        body.push(first.load_tile(false, &kstart(c(0)), &z));
        body.push(barrier());
        // The slots of the tile multiplied (`sa`, `sb`) and of the one filled (`na`, `nb`):
        // they swap after each step by a subtraction (`kt % 2` cost ptxas's generic division
        // sequence, 7% of the loop's instructions at 4096^3).
        let (sa, sb) = (Var::new("sa", Type::I32), Var::new("sb", Type::I32));
        let (na, nb) = (Var::new("na", Type::I32), Var::new("nb", Type::I32));
        let (half_a, half_b) = (bk * (bm + pad), bk * (bn + pad));
        body.push(Stmt::decl(&sa, c(0)));
        body.push(Stmt::decl(&sb, c(0)));
        // The next tile goes through registers: its global loads are issued before the
        // multiply and stored to local memory after it, so their latency overlaps the
        // multiply instead of stalling the stores in front of it. The last tile's
        // multiply is peeled off the loop, so the loads in it need no guard.
        let step = |g: &Gen, kt: &Expr| {
            let next = ix::add(kt, &c(1));
            let nk0 = kstart(ix::mul(&next, &c(bk)));
            let mut step = vec![
                Stmt::let_(&na, ix::sub(&c(half_a), &sa.expr())),
                Stmt::let_(&nb, ix::sub(&c(half_b), &sb.expr())),
            ];
            let (fa, sta) = g.stage_tile(true, &nk0, &na.expr(), None);
            let (fb, stb) = g.stage_tile(false, &nk0, &nb.expr(), None);
            step.extend(fa);
            step.extend(fb);
            step.push(g.multiply(&sa.expr(), &sb.expr(), &acc, &tx.expr(), &ty.expr()));
            step.extend(sta);
            step.extend(stb);
            step.push(barrier());
            step.push(Stmt::assign(&sa, na.expr()));
            step.push(Stmt::assign(&sb, nb.expr()));
            Stmt::block(step)
        };
        // With a peeled tail, the step that loads the last k-tile follows the loop.
        let looped = if peel && nk > 1 { nk - 2 } else { nk - 1 };
        if looped > 0 {
            body.push(Stmt::for_(&kt, c(0), c(looped), c(1), step(&g, &kt.expr())));
        }
        if peel && nk > 1 {
            body.push(step(&gk, &c(nk - 2)));
        }
        body.push(g.multiply(&sa.expr(), &sb.expr(), &acc, &tx.expr(), &ty.expr()));
    }
    // Epilogue: C = alpha * acc + beta * C, masked; beta == 0 ignores C's old value (even
    // NaN), as BLAS does, and then does not read C at all (a uniform branch).
    let beta0 = beta.expr().cmp_eq(Expr::f32(0.0));
    // Split-K stores the unscaled accumulators to its slice of the workspace.
    let zoff = ix::mul(&slice, &c(c_elems));
    let (mut fresh, mut update, mut partial) = (Vec::new(), Vec::new(), Vec::new());
    let mut put = |cond: Option<Expr>, st: [Stmt; 3]| {
        for (list, st) in [&mut fresh, &mut update, &mut partial].into_iter().zip(st) {
            list.push(match &cond {
                Some(cond) => Stmt::if_(cond.clone(), st),
                None => st,
            });
        }
    };
    let w = cfg.vec as i64;
    for (i, row) in acc.iter().enumerate() {
        let mi = ix::add(&m0.expr(), &g.row(&ty.expr(), i as i64));
        // Vector stores along N where each `w` columns are provably contiguous and aligned
        // in C and need no per-lane mask.
        let mut vectored = vec![false; row.len()];
        let split_aligned = slices == 1 || c_elems % w == 0;
        if w > 1
            && tc == Scalar::F32
            && split_aligned
            && row.len() as i64 % w == 0
            && (n % bn == 0 || n % w == 0)
        {
            for j0 in (0..row.len() as i64).step_by(w as usize) {
                let lane = |j: i64| {
                    let nj = ix::add(&n0.expr(), &g.col(&tx.expr(), j0 + j));
                    cv.access(&g.coords(cv, &[(DimKind::M, mi.clone()), (DimKind::N, nj)]))
                };
                let Some(at) = vector_access(w, &g.frame, lane) else { continue };
                let nj = ix::add(&n0.expr(), &g.col(&tx.expr(), j0));
                let mut cond = None;
                if m % bm != 0 {
                    cond = ix::and(cond, Some(mi.cmp_lt(c(m))));
                }
                if n % bn != 0 {
                    cond = ix::and(cond, Some(nj.cmp_lt(c(n))));
                }
                let lanes = Expr::build_vector((j0..j0 + w).map(|j| row[j as usize].expr()));
                let scaled = alpha.expr().broadcast(w as u8) * lanes.clone();
                let old = Expr::vload(&pc, at.offset.clone(), w as u8);
                let updated = scaled.clone() + beta.expr().broadcast(w as u8) * old;
                put(
                    cond,
                    [
                        Stmt::vstore(&pc, at.offset.clone(), scaled),
                        Stmt::vstore(&pc, at.offset.clone(), updated),
                        Stmt::vstore(&pw, ix::add(&zoff, &at.offset), lanes),
                    ],
                );
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
            let coords = g.coords(cv, &[(DimKind::M, mi.clone()), (DimKind::N, nj.clone())]);
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
            let updated = scaled.clone() + beta.expr() * old;
            let narrow = |v: Expr| if tc == Scalar::F32 { v } else { v.cast(tc) };
            put(
                cond,
                [
                    Stmt::store(&pc, at.offset.clone(), narrow(scaled)),
                    Stmt::store(&pc, at.offset.clone(), narrow(updated)),
                    Stmt::store(&pw, ix::add(&zoff, &at.offset), s.expr()),
                ],
            );
        }
    }
    let local = [cfg.wg_n, cfg.wg_m];
    let global = [global[0] as u32, global[1] as u32];
    let (params, range, split) = if slices > 1 {
        body.push(Stmt::block(partial));
        let reduce = reduce_kernel(&views.name, &views.names[2], tc, slices, c_elems);
        let split = SplitK {
            slices: slices as u32,
            workspace_elems: (slices * c_elems) as usize,
            reduce_global: (c_elems as u32).div_ceil(REDUCE_LOCAL) * REDUCE_LOCAL,
            reduce_local: REDUCE_LOCAL,
            reduce,
        };
        let range = ([global[0], global[1], groups_z as u32], [local[0], local[1], 1]);
        (vec![pa, pb, pw], (range.0.to_vec(), range.1.to_vec()), Some(split))
    } else {
        body.push(Stmt::if_else(beta0, Stmt::block(fresh), Stmt::block(update)));
        let range = if batch > 1 {
            (vec![global[0], global[1], groups_z as u32], vec![local[0], local[1], 1])
        } else {
            (global.to_vec(), local.to_vec())
        };
        (vec![pa, pb, pc, alpha, beta], range, None)
    };
    let attrs = Attrs {
        reqd_work_group_size: Some([local[0], local[1], 1]),
        nd_range: Some(NdRangeAttr {
            offset: vec![0; range.0.len()],
            global: range.0,
            local: Some(range.1),
        }),
        ..Attrs::default()
    };
    let mut kernel = Kernel::with_attrs(&views.name, params, attrs, Stmt::block(body));
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
    // Last: the forms above are what the passes and the vector proofs read.
    kernel = crate::fastdiv::lower_divisions(&kernel);
    for k in std::iter::once(&kernel).chain(split.as_ref().map(|s| &s.reduce)) {
        kiln_ir::verify_kernel(k).map_err(|e| {
            let first = e.first().map(|x| x.to_string()).unwrap_or_default();
            format!("internal error: the generated kernel does not verify: {first}")
        })?;
    }
    let elems = |v: &View| v.layout().size_elems().unwrap_or(0) as usize;
    Ok(Generated {
        kernel,
        global,
        local,
        buffer_elems: [elems(a), elems(b), elems(cv)],
        mnk: [m as u64, n as u64, k as u64],
        split,
    })
}
