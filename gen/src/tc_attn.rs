//! Attention as one tensor-core kernel, flash-attention style: `O = softmax(Q·K^T · scale
//! [+ causal mask]) · V` for bf16 (or f16) `Q`, `K`, `V` and `O` of shape `[heads, L, D]`
//! (row-major, heads = batch x heads), f32 accumulation, `scale = 1/sqrt(D)`.
//!
//! A work-group of `warps` warps takes `16 · warps` query rows (each warp 16) and walks the
//! keys in blocks of [`KEY_BLOCK`], keeping each row's running maximum `m` and sum `l`
//! (online softmax):
//!
//! ```text
//! for each key block: K, V tiles -> local memory
//!   S = Q·K^T (mma, per warp 16 x KEY_BLOCK) -> local memory
//!   per row: m' = max(m, max_j S_j·scale) over the keys it may see; P_j = exp(S_j·scale - m')
//!            (bf16, to local memory); l = l·exp(m - m') + sum_j P_j; O's row *= exp(m - m')
//!   O += P·V (mma, accumulators loaded from and stored to local memory)
//! O / l -> global memory (rounded once)
//! ```
//!
//! The IR's fragments cannot be scaled row by row, so O goes through local memory each key
//! block; the matrix products are `mma` on fragments as in [`crate::tc`]. With `causal`, a
//! query sees the keys at or before it, and key blocks wholly after a work-group's last
//! query are not visited. Rows past L are computed on zeros and not stored; keys past L are
//! masked.

use kiln_ir::launch::NdRange;
use kiln_ir::matrix::{FragRole, Layout as FragLayout, MatrixOp};
use kiln_ir::{
    AddrSpace, Attrs, Expr, Func, Intrinsic, Kernel, MemFence, NdRangeAttr, Scalar, Stmt, Type, Var,
};

use crate::ix::{self, c};
use crate::tc::{nn_div, nn_rem, u32_of, zero};

/// Keys per block of the online softmax.
pub const KEY_BLOCK: i64 = 64;

/// An attention problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TcAttnProblem {
    /// Independent heads (batch x heads).
    pub heads: i64,
    /// Sequence length (queries and keys).
    pub len: i64,
    /// Head dimension: a multiple of 16, at most 128 (64 and 128 are the usual ones).
    pub dim: i64,
    /// A query sees only the keys at or before its position.
    pub causal: bool,
    /// The element type of Q, K, V and O: bf16 or f16.
    pub ty: Scalar,
    /// Warps per work-group (16 query rows each): 1 to 8.
    pub warps: u32,
}

/// A generated attention kernel and its launch.
#[derive(Clone, Debug)]
pub struct TcAttnGenerated {
    /// The kernel (verified); parameters `(q, k, v, o)`.
    pub kernel: Kernel,
    /// Global size, dimension 0 first.
    pub global: [u32; 2],
    /// Work-group size.
    pub local: [u32; 2],
    /// Elements each of Q, K, V and O holds.
    pub elems: usize,
}

impl TcAttnGenerated {
    /// The kernel's launch.
    pub fn range(&self) -> NdRange {
        NdRange::new(&self.global).with_local(&self.local)
    }
}

impl TcAttnProblem {
    /// A problem with 4 warps per work-group (64 query rows).
    pub fn new(heads: i64, len: i64, dim: i64, causal: bool, ty: Scalar) -> TcAttnProblem {
        TcAttnProblem { heads, len, dim, causal, ty, warps: 4 }
    }

    /// `tc_attn_<ty>_<heads>x<len>x<dim>[_causal]`.
    pub fn name(&self) -> String {
        let causal = if self.causal { "_causal" } else { "" };
        format!("tc_attn_{}_{}x{}x{}{causal}", self.ty, self.heads, self.len, self.dim)
    }

    /// Why the problem cannot be generated, if it cannot.
    pub fn validate(&self) -> Result<(), String> {
        if !matches!(self.ty, Scalar::F16 | Scalar::BF16) {
            return Err(format!("attention of {}: the inputs must be f16 or bf16", self.ty));
        }
        if self.heads <= 0 || self.len <= 0 {
            return Err(format!(
                "attention sizes must be positive: heads = {}, length = {}",
                self.heads, self.len
            ));
        }
        if self.dim <= 0 || self.dim % 16 != 0 || self.dim > 128 {
            return Err(format!(
                "attention head dimension {}: it must be a multiple of 16, at most 128",
                self.dim
            ));
        }
        if !(1..=8).contains(&self.warps) {
            return Err(format!("attention with {} warps: 1 to 8", self.warps));
        }
        let elems = self.heads.checked_mul(self.len).and_then(|v| v.checked_mul(self.dim));
        if elems.is_none_or(|e| e >= 1 << 31) || self.len > crate::MAX_SIZE {
            return Err(format!(
                "attention of {} x {} x {}: a tensor has 2^31 elements or more (kernels index \
                 with 32-bit integers)",
                self.heads, self.len, self.dim
            ));
        }
        Ok(())
    }

    /// Generates the kernel.
    pub fn generate(&self) -> Result<TcAttnGenerated, String> {
        self.validate()?;
        let kernel = self.kernel();
        crate::codegen::verify_generated(&kernel)?;
        let threads = 32 * self.warps;
        let blocks = (self.len as u32).div_ceil(16 * self.warps);
        Ok(TcAttnGenerated {
            kernel,
            global: [blocks * threads, self.heads as u32],
            local: [threads, 1],
            elems: (self.heads * self.len * self.dim) as usize,
        })
    }

    fn kernel(&self) -> Kernel {
        let (l, d, ty) = (self.len, self.dim, self.ty);
        let threads = 32 * self.warps as i64;
        let br = 16 * self.warps as i64;
        let bc = KEY_BLOCK;
        let (ds, ps) = (d + 8, bc + 8);
        let gptr = |n: &str| Var::new(n, Type::ptr(AddrSpace::Global, ty));
        let (q, k, v, o) = (gptr("q"), gptr("k"), gptr("v"), gptr("o"));
        let lptr = |n: &str, t: Scalar| Var::new(n, Type::ptr(AddrSpace::Local, t));
        let (q_s, k_s, v_s, p_s) =
            (lptr("q_s", ty), lptr("k_s", ty), lptr("v_s", ty), lptr("p_s", ty));
        let (s_s, o_s) = (lptr("s_s", Scalar::F32), lptr("o_s", Scalar::F32));
        let (m_s, l_s, a_s) =
            (lptr("m_s", Scalar::F32), lptr("l_s", Scalar::F32), lptr("a_s", Scalar::F32));
        let i32v = |n: &str| Var::new(n, Type::I32);
        let (lid, warp, q0, base) = (i32v("lid"), i32v("warp"), i32v("q0"), i32v("base"));
        let barrier = || Stmt::barrier(MemFence::LOCAL);
        let frag = |role, elem| {
            kiln_ir::Type::Frag(kiln_ir::matrix::Frag::new(
                role,
                kiln_ir::matrix::MatShape::M16N8K16,
                elem,
            ))
        };
        let load_frag = |f: &Var, p: &Var, off: Expr, stride: i64, lay| {
            Stmt::call_into(
                f,
                Func::matrix(MatrixOp::Load(lay)),
                [p.expr(), u32_of(&off), Expr::u32(stride as u32)],
            )
        };
        let store_frag = |p: &Var, off: Expr, stride: i64, f: &Var| {
            Stmt::call(
                Func::matrix(MatrixOp::Store(FragLayout::Row)),
                [p.expr(), u32_of(&off), Expr::u32(stride as u32), f.expr()],
            )
        };
        // acc[j] += A · B_j over `ksteps` steps of 16: A is the warp's 16 rows of `a` (row
        // pitch `ap`), B_j's fragment of step ks is at `b_at(ks, j)` in `b` (pitch `bp`).
        type Operand<'v> = (&'v Var, i64);
        let warp_product = |step: &mut Vec<Stmt>,
                            [ta, tb, td]: [&str; 3],
                            (a, ap): Operand,
                            (b, bp, bl): (&Var, i64, FragLayout),
                            b_at: &dyn Fn(i64, i64) -> i64,
                            ksteps: i64,
                            accs: &[Var]| {
            let wrow = ix::mul(&warp.expr(), &c(16));
            for ks in 0..ksteps {
                let fa = Var::new(format!("{ta}{ks}"), frag(FragRole::A, ty));
                let a_at = ix::add(&ix::mul(&wrow, &c(ap)), &c(ks * 16));
                step.push(load_frag(&fa, a, a_at, ap, FragLayout::Row));
                for (j, acc) in accs.iter().enumerate() {
                    let fb = Var::new(format!("{tb}{ks}_{j}"), frag(FragRole::B, ty));
                    step.push(load_frag(&fb, b, c(b_at(ks, j as i64)), bp, bl));
                    let dv = Var::new(format!("{td}{ks}_{j}"), frag(FragRole::Acc, Scalar::F32));
                    let mma = [fa.expr(), fb.expr(), acc.expr()];
                    step.push(Stmt::call_into(&dv, Func::matrix(MatrixOp::Mma), mma));
                    step.push(Stmt::assign(acc, dv.expr()));
                }
            }
        };
        // `rows x d` of a [len, d] matrix from row `r0` into a local tile of row stride `ds`,
        // zeros past L: each work-item elements lid, lid + T, ...
        let tile = |dst: &Var, src: &Var, r0: &Expr, rows: i64, tag: &str| {
            let mut out = Vec::new();
            for e in 0..(rows * d + threads - 1) / threads {
                let (idx, r, cc) = (
                    i32v(&format!("{tag}i{e}")),
                    i32v(&format!("{tag}r{e}")),
                    i32v(&format!("{tag}c{e}")),
                );
                let gr = ix::add(r0, &r.expr());
                let at = ix::add(&base.expr(), &ix::add(&ix::mul(&gr, &c(d)), &cc.expr()));
                let to = ix::add(&ix::mul(&r.expr(), &c(ds)), &cc.expr());
                let body = vec![
                    Stmt::let_(&r, nn_div(&idx.expr(), d)),
                    Stmt::let_(&cc, nn_rem(&idx.expr(), d)),
                    Stmt::if_else(
                        gr.cmp_lt(c(l)),
                        Stmt::store(dst, to.clone(), src.load(at)),
                        Stmt::store(dst, to, zero(ty)),
                    ),
                ];
                let mut item = vec![Stmt::let_(&idx, ix::add(&lid.expr(), &c(e * threads)))];
                if (e + 1) * threads > rows * d {
                    item.push(Stmt::if_(idx.expr().cmp_lt(c(rows * d)), Stmt::block(body)));
                } else {
                    item.extend(body);
                }
                out.push(Stmt::block(item));
            }
            out
        };
        // Each work-item's elements lid, lid + T, ... of the br x d tile o_s: `f(idx, row)`.
        let per_o = |tag: &str, f: &dyn Fn(&Expr, &Expr) -> Vec<Stmt>| {
            let mut out = Vec::new();
            for e in 0..(br * d + threads - 1) / threads {
                let idx = i32v(&format!("{tag}{e}"));
                let mut body = vec![Stmt::let_(&idx, ix::add(&lid.expr(), &c(e * threads)))];
                body.extend(f(&idx.expr(), &nn_div(&idx.expr(), d)));
                out.push(Stmt::block(body));
            }
            out
        };

        let mut body = vec![
            Stmt::alloc(&q_s, (br * ds) as u32),
            Stmt::alloc(&k_s, (bc * ds) as u32),
            Stmt::alloc(&v_s, (bc * ds) as u32),
            Stmt::alloc(&p_s, (br * ps) as u32),
            Stmt::alloc(&s_s, (br * bc) as u32),
            Stmt::alloc(&o_s, (br * d) as u32),
            Stmt::alloc(&m_s, br as u32),
            Stmt::alloc(&l_s, br as u32),
            Stmt::alloc(&a_s, br as u32),
            Stmt::let_(&lid, Expr::local_id(0).cast(Scalar::I32)),
            Stmt::let_(&warp, nn_div(&lid.expr(), 32)),
            Stmt::let_(&q0, ix::mul(&Expr::group_id(0).cast(Scalar::I32), &c(br))),
            Stmt::let_(&base, ix::mul(&Expr::group_id(1).cast(Scalar::I32), &c(l * d))),
        ];
        body.extend(tile(&q_s, &q, &q0.expr(), br, "q"));
        body.extend(per_o("oz", &|idx, _| vec![Stmt::store(&o_s, idx.clone(), Expr::f32(0.0))]));
        body.push(Stmt::if_(
            lid.expr().cmp_lt(c(br)),
            Stmt::block(vec![
                Stmt::store(&m_s, lid.expr(), Expr::f32(f32::NEG_INFINITY)),
                Stmt::store(&l_s, lid.expr(), Expr::f32(0.0)),
            ]),
        ));

        // The key blocks: all, or (causal) those that start at or before the last query.
        let kb = i32v("kb");
        let k0 = i32v("k0");
        let all = (l + bc - 1) / bc;
        let blocks = if self.causal {
            ix::min(&c(all), &nn_div(&ix::add(&q0.expr(), &c(br + bc - 1)), bc))
        } else {
            c(all)
        };
        let mut step = vec![Stmt::let_(&k0, ix::mul(&kb.expr(), &c(bc))), barrier()];
        step.extend(tile(&k_s, &k, &k0.expr(), bc, "k"));
        step.extend(tile(&v_s, &v, &k0.expr(), bc, "v"));
        step.push(barrier());
        // S = Q·K^T for the warp's 16 rows.
        let z = Var::new("zero", frag(FragRole::Acc, Scalar::F32));
        step.push(Stmt::call_into(&z, Func::matrix(MatrixOp::Fill), [Expr::f32(0.0)]));
        let sacc: Vec<Var> = (0..bc / 8)
            .map(|j| Var::new(format!("s{j}"), frag(FragRole::Acc, Scalar::F32)))
            .collect();
        for a in &sacc {
            step.push(Stmt::decl(a, z.expr()));
        }
        let wrow = ix::mul(&warp.expr(), &c(16));
        // B = K^T: element (kk, n) is K[n][kk], at n * ds + kk.
        let k_at = |ks: i64, j: i64| j * 8 * ds + ks * 16;
        warp_product(
            &mut step,
            ["qa", "kb", "sd"],
            (&q_s, ds),
            (&k_s, ds, FragLayout::Col),
            &k_at,
            d / 16,
            &sacc,
        );
        for (j, a) in sacc.iter().enumerate() {
            step.push(store_frag(&s_s, ix::add(&ix::mul(&wrow, &c(bc)), &c(j as i64 * 8)), bc, a));
        }
        step.push(barrier());
        // The online softmax of row `lid` (work-items below br).
        let scale = 1.0 / (d as f32).sqrt();
        let (col, mx, sum, p) = (
            i32v("col"),
            Var::new("mx", Type::F32),
            Var::new("sum", Type::F32),
            Var::new("p", Type::F32),
        );
        let (x, x2) = (Var::new("x", Type::F32), Var::new("x2", Type::F32));
        let (m_old, alpha) = (Var::new("m_old", Type::F32), Var::new("alpha", Type::F32));
        let key = ix::add(&k0.expr(), &col.expr());
        let visible = ix::and(
            Some(key.cmp_lt(c(l))),
            self.causal.then(|| key.cmp_le(ix::add(&q0.expr(), &lid.expr()))),
        )
        .expect("a condition");
        let s_at = ix::add(&ix::mul(&lid.expr(), &c(bc)), &col.expr());
        let load_x = |x: &Var| Stmt::let_(x, s_s.load(s_at.clone()) * Expr::f32(scale));
        let ninf = Expr::f32(f32::NEG_INFINITY);
        let exp = |e: Expr| Expr::intrinsic(Intrinsic::Exp, [e]);
        let row = vec![
            Stmt::let_(&m_old, m_s.load(lid.expr())),
            Stmt::decl(&mx, m_old.expr()),
            Stmt::for_(
                &col,
                c(0),
                c(bc),
                c(1),
                Stmt::block(vec![
                    load_x(&x),
                    Stmt::if_(visible.clone(), Stmt::assign(&mx, mx.expr().max(x.expr()))),
                ]),
            ),
            // A row that sees no key yet keeps m = -inf: its P is 0 and nothing is rescaled.
            Stmt::let_(
                &alpha,
                Expr::select(
                    mx.expr().cmp_eq(ninf.clone()),
                    Expr::f32(1.0),
                    exp(m_old.expr() - mx.expr()),
                ),
            ),
            Stmt::decl(&sum, Expr::f32(0.0)),
            Stmt::for_(
                &col,
                c(0),
                c(bc),
                c(1),
                Stmt::block(vec![
                    load_x(&x2),
                    Stmt::let_(
                        &p,
                        Expr::select(visible, exp(x2.expr() - mx.expr()), Expr::f32(0.0)),
                    ),
                    Stmt::store(
                        &p_s,
                        ix::add(&ix::mul(&lid.expr(), &c(ps)), &col.expr()),
                        p.expr().cast(ty),
                    ),
                    Stmt::assign(&sum, sum.expr() + p.expr()),
                ]),
            ),
            Stmt::store(&l_s, lid.expr(), l_s.load(lid.expr()) * alpha.expr() + sum.expr()),
            Stmt::store(&m_s, lid.expr(), mx.expr()),
            Stmt::store(&a_s, lid.expr(), alpha.expr()),
        ];
        step.push(Stmt::if_(lid.expr().cmp_lt(c(br)), Stmt::block(row)));
        step.push(barrier());
        step.extend(per_o("os", &|idx, r| {
            vec![Stmt::store(&o_s, idx.clone(), o_s.load(idx.clone()) * a_s.load(r.clone()))]
        }));
        step.push(barrier());
        // O += P·V for the warp's rows.
        let oacc: Vec<Var> = (0..d / 8)
            .map(|n| Var::new(format!("o{n}"), frag(FragRole::Acc, Scalar::F32)))
            .collect();
        for (n, a) in oacc.iter().enumerate() {
            let t = Var::new(format!("ol{n}"), frag(FragRole::Acc, Scalar::F32));
            step.push(load_frag(
                &t,
                &o_s,
                ix::add(&ix::mul(&wrow, &c(d)), &c(n as i64 * 8)),
                d,
                FragLayout::Row,
            ));
            step.push(Stmt::decl(a, t.expr()));
        }
        // Every work-item has read O before any stores it (the interpreter runs a sub-group's
        // work-items one after another between barriers).
        step.push(barrier());
        let v_at = |ks: i64, n: i64| ks * 16 * ds + n * 8;
        warp_product(
            &mut step,
            ["pa", "vb", "od"],
            (&p_s, ps),
            (&v_s, ds, FragLayout::Row),
            &v_at,
            bc / 16,
            &oacc,
        );
        for (n, a) in oacc.iter().enumerate() {
            step.push(store_frag(&o_s, ix::add(&ix::mul(&wrow, &c(d)), &c(n as i64 * 8)), d, a));
        }
        body.push(Stmt::for_(&kb, c(0), blocks, c(1), Stmt::block(step)));
        body.push(barrier());
        // O / l, rounded once, for the rows inside L.
        body.extend(per_o("out", &|idx, r| {
            let qr = ix::add(&q0.expr(), r);
            let at = ix::add(&base.expr(), &ix::add(&ix::mul(&qr, &c(d)), &nn_rem(idx, d)));
            let val = (o_s.load(idx.clone()) / l_s.load(r.clone())).cast(ty);
            let mut cond = qr.cmp_lt(c(l));
            if (br * d) % threads != 0 {
                cond = ix::and(Some(idx.cmp_lt(c(br * d))), Some(cond)).expect("a condition");
            }
            vec![Stmt::if_(cond, Stmt::store(&o, at, val))]
        }));

        let threads = threads as u32;
        let blocks = (l as u32).div_ceil(br as u32);
        let attrs = Attrs {
            reqd_work_group_size: Some([threads, 1, 1]),
            nd_range: Some(NdRangeAttr {
                offset: vec![0, 0],
                global: vec![blocks * threads, self.heads as u32],
                local: Some(vec![threads, 1]),
            }),
            ..Attrs::default()
        };
        Kernel::with_attrs(self.name(), vec![q, k, v, o], attrs, Stmt::block(body))
    }
}
