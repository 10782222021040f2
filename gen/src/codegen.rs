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
//! for kt in 0 .. ceil(K / BK):                     // (depth 2: the last tile is loaded
//!   cooperative load of A's and B's BK-deep tiles    //  first; then tile kt loads into
//!                                                    //  registers, the tile before it is
//!                                                    //  multiplied, the registers go to
//!                                                    //  local memory; a partial last tile
//!                                                    //  is instead a peeled last step)
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
use kiln_ir::{AddrSpace, Attrs, Expr, Kernel, MemFence, NdRangeAttr, Scalar, Stmt, Type, Var};

use crate::config::{GemmConfig, MAX_LOCAL_BYTES};
use crate::ix::{self, c};
use crate::split::{reduce_kernel, SplitK, REDUCE_LOCAL};
use crate::view::{Access, DimKind, View};

mod block;
mod checked;
mod copy;

use block::{work_item_m, work_item_n};
use checked::optimize_generated;
pub(crate) use checked::verify_generated;

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
    /// The kernel (verified; optimized too from [`generate_optimized`]).
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
    // The affine form settles the usual offsets (`row * stride + col + j`) without building
    // the difference; the simplifier (a tenth of the fp32 generator's time when asked of
    // every lane) only what it leaves open. Either proves the same difference.
    let step_ok = (1..w).all(|j| {
        let l = lane(j).offset;
        let d = match kiln_passes::simplify::affine::constant_difference(&l, &first.offset) {
            Some(d) => Some(d),
            None => kiln_passes::simplify::simplify_expr(&(l - first.offset.clone()))
                .as_imm()
                .and_then(|i| i.as_i128()),
        };
        d == Some(j as i128)
    });
    let aligned = kiln_ir::verify::known_residue(&ix::subst(&first.offset, frame), w as u64);
    (step_ok && aligned == Some(0)).then_some(first)
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
    /// Whether the tile copies zero reduction indices past K: only in a copy whose k-tile
    /// can reach past it (the double-buffered loop copies whole k-tiles only, without).
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
}

/// Generates the kernel for `views` with `cfg`: verified, and unrolled when `cfg.unroll`.
pub fn generate(views: &GemmViews, cfg: &GemmConfig) -> Result<Generated, String> {
    let g = build(views, cfg)?;
    for k in std::iter::once(&g.kernel).chain(g.split.as_ref().map(|s| &s.reduce)) {
        verify_generated(k)?;
    }
    Ok(g)
}

/// [`generate`]'s kernels (with split-K, both) through the `-O` pipeline, as a backend wants
/// them: the same kernels as `optimize` of [`generate`]'s, but each verified once, by `-O`'s
/// verifier, instead of also before. A kernel that does not verify is an error, never the
/// unoptimized kernel: the generator's bug as [`generate`] reports it, or the pass that
/// broke it.
pub fn generate_optimized(views: &GemmViews, cfg: &GemmConfig) -> Result<Generated, String> {
    let mut g = build(views, cfg)?;
    g.kernel = optimize_generated(&g.kernel)?;
    if let Some(s) = &mut g.split {
        s.reduce = optimize_generated(&s.reduce)?;
    }
    Ok(g)
}

/// [`generate`]'s kernels, not yet verified.
fn build(views: &GemmViews, cfg: &GemmConfig) -> Result<Generated, String> {
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
    // peeled off the double-buffered loop (`peel`), so that the loop copies tiles without
    // testing K: without split-K only the last k-tile can reach past K (with it, a whole
    // slice's last tiles can). The single-buffered loop stays in one piece, the form the `slm-buffer`
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
    // The copy of K's last k-tile, testing K, before the double-buffered loop.
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
        // The next tile loads into the other slot while the current one is multiplied: the
        // barrier at the end of a step both publishes the next tile and retires the current
        // one, so one barrier per step suffices, and every copy in the loop stays inside the
        // operands without a test.
        // Without a partial last k-tile the loop holds the only copy of the multiply (K's last
        // tile is copied first, multiplied by step 0; step `kt` copies tile `kt`). With one,
        // its step is peeled off the loop (copied testing K) and a drain multiplies the last
        // tile: the one-loop form, with the partial tile copied first and the steps' tiles
        // clamped, measured 0.52x against this form's 0.95x of cuBLAS at 1023x1025x1027
        // (H200), where the peel and drain cost only the JIT's time.
        let first = if peel && nk == 1 { &gk } else { &g };
        let k_first = kstart(c(if peel { 0 } else { (nk - 1) * bk }));
        body.push(first.load_tile(true, &k_first, &z));
        body.push(first.load_tile(false, &k_first, &z));
        body.push(barrier());
        // The slots of the tile multiplied (`sa`, `sb`) and of the one filled (`na`, `nb`):
        // they swap after each step by a subtraction (`kt % 2` cost ptxas's generic division
        // sequence, 7% of the loop's instructions at 4096^3).
        let (sa, sb) = (Var::new("sa", Type::I32), Var::new("sb", Type::I32));
        let (na, nb) = (Var::new("na", Type::I32), Var::new("nb", Type::I32));
        let (half_a, half_b) = (bk * (bm + pad), bk * (bn + pad));
        body.push(Stmt::decl(&sa, c(0)));
        body.push(Stmt::decl(&sb, c(0)));
        // A step copies tile `next` while the current one is multiplied. The next tile goes
        // through registers: its global loads are issued before the multiply and stored to
        // local memory after it, so their latency overlaps the multiply instead of stalling
        // the stores in front of it.
        let step = |g: &Gen, next: &Expr| {
            let nk0 = kstart(ix::mul(next, &c(bk)));
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
        // Built only where it is used: the loop alone (a whole K of whole k-tiles) makes its
        // own, and building (and freeing) this one for nothing was 0.05 ms of the tuned
        // 4096^3 GEMM's 0.65.
        let multiply = || g.multiply(&sa.expr(), &sb.expr(), &acc, &tx.expr(), &ty.expr());
        if nk == 1 {
            body.push(multiply());
        } else if !peel {
            body.push(Stmt::for_(&kt, c(0), c(nk), c(1), step(&g, &kt.expr())));
        } else {
            if nk > 2 {
                let next = ix::add(&kt.expr(), &c(1));
                body.push(Stmt::for_(&kt, c(0), c(nk - 2), c(1), step(&g, &next)));
            }
            body.push(step(&gk, &c(nk - 1)));
            body.push(multiply());
        }
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
    // Made once: every lane of every vector access below reads them (a handle each time was
    // an allocation per lane).
    let (n0e, txe) = (n0.expr(), tx.expr());
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
                    let nj = ix::add(&n0e, &g.col(&txe, j0 + j));
                    cv.access(&g.coords(cv, &[(DimKind::M, mi.clone()), (DimKind::N, nj)]))
                };
                let Some(at) = vector_access(w, &g.frame, lane) else { continue };
                let nj = ix::add(&n0e, &g.col(&txe, j0));
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
            let nj = ix::add(&n0e, &g.col(&txe, j as i64));
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
    // Last, the `strength` pass's division rule (the forms above are what the passes and the
    // vector proofs read): `-O` applies it too, but applied here the simplifier then folds
    // the lowered quotients with their neighbours (a convolution's filter index: 870 PTX
    // instructions in the 256-channel 14 x 14 layer's loop instead of 902). The kernel is
    // made for its `#nd_range` (every index assumes it), so the rule may bound ids by it.
    kernel = kiln_passes::strength::div::lower_divisions_at_range(&kernel);
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
