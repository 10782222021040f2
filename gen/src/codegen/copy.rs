//! The cooperative copies of A's and B's k-tiles from global into local memory: element by
//! element, or with vectors along the operand's rows or along K where a proof shows them
//! contiguous and aligned; zeros past K, clamped rows past M and N.

use kiln_ir::{Expr, Scalar, Stmt, Type, Var};

use super::{load_f32, unflatten, vector_access, Gen};
use crate::ix::{self, c};
use crate::view::DimKind;

/// How a tile copy stores a loaded value (an f32 or vector expression) into local memory.
type StoreFn = Box<dyn Fn(&Expr) -> Vec<Stmt>>;

/// One work-item's part of a cooperative tile copy: index arithmetic, when the source
/// exists, what to load and how to store it into the local tile.
pub(super) struct TileCopy {
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
    pub(super) fn vector(
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

impl Gen<'_> {
    /// The cooperative load of one `BK`-deep tile of an operand into local memory at
    /// `slot` (an element offset), done at once: work-item `lid` copies elements (or
    /// vectors) `lid, lid + T, ...` of the tile.
    pub(super) fn load_tile(&self, is_a: bool, k0: &Expr, slot: &Expr) -> Stmt {
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
    pub(super) fn stage_tile(
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
    pub(super) fn tile_copy(
        &self,
        is_a: bool,
        k0: &Expr,
        slot: &Expr,
        idx: &Expr,
        sfx: &str,
    ) -> TileCopy {
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
    pub(super) fn k_edge(&self, kidx: &Expr) -> Option<Expr> {
        self.k_guard.then(|| kidx.cmp_lt(c(self.k)))
    }

    /// The copy with `vec`-lane vectors along the tile's rows, when the view is provably
    /// contiguous and aligned along them and the masks are per vector.
    pub(super) fn copy_vector_rows(
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
    pub(super) fn copy_vector_k(
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
