//! Tensor-core GEMM: `C = epilogue(op(A) · op(B))` with f16 or bf16 inputs, f32 accumulation
//! and an f32, f16 or bf16 output, through the IR's matrix operations (docs/matrix.md).
//!
//! A work-group of `warps_m x warps_n` sub-groups (warps) computes a `bm x bn` tile of C;
//! each warp a `bm/warps_m x bn/warps_n` sub-tile as a grid of `m16n16k16` accumulators
//! (`m16n8k16` where the sub-tile is an odd multiple of 8 wide). The reduction runs in
//! `bk`-deep tiles through a ring of `stages` local-memory slots, fragments loaded one k-step
//! (16) ahead of the `mma`s that use them, across tiles too:
//!
//! ```text
//! local a_s: T[stages * tile_a]; local b_s: T[stages * tile_b]; local c_s: f32[..]
//! var acc_i_j: frag<acc, m16n16k16, f32> = frag_fill(0.0)
//! for t in 0 .. stages: copy tile t into slot t; async_commit()      // every slot in flight
//! async_wait(stages - 1); barrier(local); var f = fragments of tile 0, k-step 0
//! for kt in 0 .. ceil(K / bk):
//!   for ks in 0 .. bk/16:
//!     if ks + 1 < bk/16: g = fragments of tile kt, k-step ks + 1
//!     else: async_wait(stages - 2); barrier(local)  // tile kt+1 landed; slot kt is read
//!           copy tile kt + stages into slot kt; async_commit()
//!           g = fragments of tile kt + 1, k-step 0
//!     acc_i_j = mma(f.a_i, f.b_j, acc_i_j); f = g
//! per 16-row chunk of the warp's tile: frag_store the accumulators to c_s, barrier,
//!   each work-item applies the epilogue to its elements and stores them (masked)
//! ```
//!
//! Tiles are copied with `copy_async` of 8 elements (16 bytes) where a chunk lies inside
//! the matrix and its row length is a multiple of 8; elsewhere (the edges of odd sizes,
//! unaligned rows) with plain loads that put zeros past M, N and K, so edge tiles multiply
//! zeros. Each local tile keeps the operand's memory order (a transposed operand is read with
//! `frag_load(.., col)`, a `.trans` load on PTX), and its rows are padded by 8 elements so that
//! the 8 rows one `ldmatrix` reads fall in distinct banks (the IR's fragment loads take an
//! offset and a stride, so padding rather than an XOR swizzle is what it can express).
//!
//! On the interpreter every `mma` adds its products in increasing k, rounding to f32 after
//! each addition, and the kernel runs K's steps in order: each element of the f32 product is
//! the plain sequential sum `((0 + a0 b0) + a1 b1) + ...`, bit for bit.

use kiln_ir::launch::NdRange;
use kiln_ir::matrix::{Frag, FragRole, Layout as FragLayout, MatShape, MatrixOp};
use kiln_ir::{
    AddrSpace, Attrs, BinOp, Expr, Func, Kernel, MemFence, NdRangeAttr, Scalar, Stmt, Type, Var,
};

mod config;

pub use config::{TcConfig, MAX_LOCAL_BYTES};

use crate::ix::{self, c};
use crate::tc_epilogue::{apply, Epilogue};
use crate::MAX_SIZE;

/// Block rows of C that run side by side (see `Gen::block_origin`).
const RASTER_ROWS: i64 = 8;

/// A tensor-core GEMM problem: `C = epilogue(op(A) · op(B))`, every matrix dense row-major
/// in its own buffer (A is M x K, stored K x M when `trans_a`; B is K x N, stored N x K when
/// `trans_b`; C is M x N).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TcGemmProblem {
    /// Rows of C.
    pub m: i64,
    /// Columns of C.
    pub n: i64,
    /// The reduction size.
    pub k: i64,
    /// A is stored transposed.
    pub trans_a: bool,
    /// B is stored transposed.
    pub trans_b: bool,
    /// A's and B's element type: f16 or bf16.
    pub ty: Scalar,
    /// C's element type: f32, f16 or bf16 (rounded once from the f32 result).
    pub out: Scalar,
    /// What is applied to each f32 element before the store.
    pub epilogue: Epilogue,
}

/// What fills A's local tiles in place of the copy of a stored matrix: the implicit-GEMM
/// convolution gathers A's elements from an image (`crate::tc_conv`). The rest of the
/// kernel (B's copies, the pipeline, the multiply, the store) is the GEMM's.
pub(crate) trait GatherA {
    /// Statements run once at the kernel's entry, after `m0` is set: the index arithmetic
    /// that does not change along K.
    fn setup(&self, t: &ATile<'_>) -> Vec<Stmt>;
    /// Statements filling A's K-tile that starts at column `k0` into `t.local` at `base`
    /// (`t.rows x t.cols`, row stride `t.ls`, zeros past M and K); `tag` makes names unique.
    fn fill(&self, t: &ATile<'_>, k0: &Expr, base: &Expr, tag: &str) -> Vec<Stmt>;
}

/// A's local tile as a [`GatherA`] sees it.
pub(crate) struct ATile<'e> {
    /// The local array of A's stages.
    pub local: &'e Var,
    /// The work-item's linear index in the work-group (i32).
    pub lid: &'e Expr,
    /// Work-items per work-group.
    pub threads: i64,
    /// The work-group's first row of C (i32).
    pub m0: &'e Var,
    /// Tile rows (the block's M) and columns (the k-tile), and the local row stride.
    pub rows: i64,
    pub cols: i64,
    pub ls: i64,
}

/// A kernel built on the GEMM's tile loop with A gathered by `gather`: its name and its
/// three buffer parameters' names (A, B, C).
pub(crate) struct Variant<'a> {
    pub name: String,
    pub bufs: [&'a str; 3],
    pub gather: &'a dyn GatherA,
}

/// A generated tensor-core GEMM and its launch.
#[derive(Clone, Debug)]
pub struct TcGenerated {
    /// The kernel (verified); parameters `(a, b, c)` then the epilogue's
    /// ([`Epilogue::params`]).
    pub kernel: Kernel,
    /// Global size, dimension 0 first.
    pub global: [u32; 2],
    /// Work-group size.
    pub local: [u32; 2],
    /// Elements A, B and C must hold.
    pub buffer_elems: [usize; 3],
}

impl TcGenerated {
    /// The kernel's launch.
    pub fn range(&self) -> NdRange {
        NdRange::new(&self.global).with_local(&self.local)
    }
}

impl TcGemmProblem {
    /// A plain product (no epilogue) with an f32 output.
    pub fn new(m: i64, n: i64, k: i64, ty: Scalar) -> TcGemmProblem {
        TcGemmProblem {
            m,
            n,
            k,
            trans_a: false,
            trans_b: false,
            ty,
            out: Scalar::F32,
            epilogue: Epilogue::default(),
        }
    }

    /// `tc_gemm_<nn|nt|tn|tt>_<in>_<out>_<M>x<N>x<K>[_<epilogue ops>]`.
    pub fn name(&self) -> String {
        let t = |b: bool| if b { 't' } else { 'n' };
        format!(
            "tc_gemm_{}{}_{}_{}_{}x{}x{}{}",
            t(self.trans_a),
            t(self.trans_b),
            self.ty,
            self.out,
            self.m,
            self.n,
            self.k,
            self.epilogue.suffix()
        )
    }

    /// Why the problem cannot be generated, if it cannot.
    pub fn validate(&self) -> Result<(), String> {
        if !matches!(self.ty, Scalar::F16 | Scalar::BF16) {
            return Err(format!("tensor-core GEMM of {}: the inputs must be f16 or bf16", self.ty));
        }
        if !matches!(self.out, Scalar::F32 | Scalar::F16 | Scalar::BF16) {
            return Err(format!(
                "tensor-core GEMM output {}: it must be f32, f16 or bf16",
                self.out
            ));
        }
        if self.m <= 0 || self.n <= 0 || self.k <= 0 {
            return Err(format!(
                "GEMM sizes must be positive: M = {}, N = {}, K = {}",
                self.m, self.n, self.k
            ));
        }
        let (m, n, k) = (self.m, self.n, self.k);
        if [m, n, k].iter().any(|&s| s > MAX_SIZE)
            || [m * k, k * n, m * n].iter().any(|&e| e >= 1 << 31)
        {
            return Err(format!(
                "GEMM of {m} x {n} x {k}: a matrix has 2^31 elements or more (kernels index \
                 with 32-bit integers)"
            ));
        }
        self.epilogue.check()
    }

    /// Generates the kernel with blocking `cfg`.
    pub fn generate(&self, cfg: &TcConfig) -> Result<TcGenerated, String> {
        self.generate_variant(cfg, None)
    }

    /// The kernel with blocking `cfg`, A's tiles filled by `variant`'s gather when given.
    pub(crate) fn generate_variant(
        &self,
        cfg: &TcConfig,
        variant: Option<&Variant<'_>>,
    ) -> Result<TcGenerated, String> {
        self.validate()?;
        cfg.validate()?;
        let kernel = Gen::new(self, cfg, variant).kernel();
        crate::codegen::verify_generated(&kernel)?;
        let threads = cfg.threads();
        let gn = (self.n as u32).div_ceil(cfg.bn);
        let gm = (self.m as u32).div_ceil(cfg.bm);
        let (m, n, k) = (self.m as usize, self.n as usize, self.k as usize);
        Ok(TcGenerated {
            kernel,
            global: [gn * threads, gm],
            local: [threads, 1],
            buffer_elems: [m * k, k * n, m * n],
        })
    }
}

/// One operand's global-to-local tile copy: the stored matrix is `rows x cols` (row-major,
/// leading dimension `cols`); a tile is `tr x tc` of it, at `(r0, c0)`.
struct Operand {
    buf: Var,
    local: Var,
    /// Rows and columns of the stored matrix.
    rows: i64,
    cols: i64,
    /// Tile rows and columns, and the local tile's row stride (`tc + 8`).
    tr: i64,
    tc: i64,
    ls: i64,
    /// The tile's origin: `(r0, c0)` is `(mn0, k0)` or `(k0, mn0)` (`k_major`: rows are K).
    k_major: bool,
}

impl Operand {
    fn tile_elems(&self) -> i64 {
        self.tr * self.ls
    }
}

struct Gen<'a> {
    p: &'a TcGemmProblem,
    cfg: TcConfig,
    variant: Option<&'a Variant<'a>>,
    /// C's buffer parameter's name.
    c_name: &'a str,
    a: Operand,
    b: Operand,
    lid: Expr,
    m0: Var,
    n0: Var,
    ktiles: i64,
}

/// `a / d` for `a >= 0` (every index this generator divides is): a shift when `d` is a power
/// of two. ptxas turns a signed division by a constant into the general reciprocal sequence
/// (about a dozen instructions, seen in the k-loop's SASS), where a shift is one.
pub(crate) fn nn_div(a: &Expr, d: i64) -> Expr {
    if ix::as_const(a).is_some() || d <= 1 || !(d as u64).is_power_of_two() {
        return ix::div(a, d);
    }
    Expr::binary(BinOp::Shr, a.clone(), c(d.trailing_zeros() as i64))
}

/// `a % d` for `a >= 0`: a mask when `d` is a power of two (see [`nn_div`]).
pub(crate) fn nn_rem(a: &Expr, d: i64) -> Expr {
    if ix::as_const(a).is_some() || d <= 1 || !(d as u64).is_power_of_two() {
        return ix::rem(a, d);
    }
    Expr::binary(BinOp::And, a.clone(), c(d - 1))
}

pub(crate) fn u32_of(e: &Expr) -> Expr {
    e.cast(Scalar::U32)
}

fn frag(role: FragRole, shape: MatShape, elem: Scalar) -> Type {
    Type::Frag(Frag::new(role, shape, elem))
}

pub(crate) fn zero(ty: Scalar) -> Expr {
    Expr::f32(0.0).cast(ty)
}

impl<'a> Gen<'a> {
    fn new(p: &'a TcGemmProblem, cfg: &TcConfig, variant: Option<&'a Variant<'a>>) -> Gen<'a> {
        let (m, n, k) = (p.m, p.n, p.k);
        let [a_name, b_name, c_name] = variant.map_or(["a", "b", "c"], |v| v.bufs);
        let (bm, bn, bk) = (cfg.bm as i64, cfg.bn as i64, cfg.bk as i64);
        let ptr = |name: &str| Var::new(name, Type::ptr(AddrSpace::Global, p.ty));
        let lptr = |name: &str| Var::new(name, Type::ptr(AddrSpace::Local, p.ty));
        let a = if p.trans_a {
            Operand {
                buf: ptr(a_name),
                local: lptr("a_s"),
                rows: k,
                cols: m,
                tr: bk,
                tc: bm,
                ls: bm + 8,
                k_major: true,
            }
        } else {
            Operand {
                buf: ptr(a_name),
                local: lptr("a_s"),
                rows: m,
                cols: k,
                tr: bm,
                tc: bk,
                ls: bk + 8,
                k_major: false,
            }
        };
        let b = if p.trans_b {
            Operand {
                buf: ptr(b_name),
                local: lptr("b_s"),
                rows: n,
                cols: k,
                tr: bn,
                tc: bk,
                ls: bk + 8,
                k_major: false,
            }
        } else {
            Operand {
                buf: ptr(b_name),
                local: lptr("b_s"),
                rows: k,
                cols: n,
                tr: bk,
                tc: bn,
                ls: bn + 8,
                k_major: true,
            }
        };
        Gen {
            p,
            cfg: *cfg,
            variant,
            c_name,
            a,
            b,
            lid: Expr::local_id(0).cast(Scalar::I32),
            m0: Var::new("m0", Type::I32),
            n0: Var::new("n0", Type::I32),
            ktiles: (k + bk - 1) / bk,
        }
    }

    fn a_tile(&self) -> ATile<'_> {
        ATile {
            local: &self.a.local,
            lid: &self.lid,
            threads: self.cfg.threads() as i64,
            m0: &self.m0,
            rows: self.a.tr,
            cols: self.a.tc,
            ls: self.a.ls,
        }
    }

    /// The copy of K-tile `kt` (an expression) of operand `o` (`mn0` its M or N origin) into
    /// local slot `slot`: each work-item copies chunks of 8 elements `lid, lid + T, ...`.
    fn copy_tile(&self, o: &Operand, mn0: &Expr, kt: &Expr, slot: &Expr, tag: &str) -> Vec<Stmt> {
        if let Some(offs) = self.fixed_offsets(o) {
            // Every chunk is a 16-byte copy: the work-item's offsets were computed before
            // the loop; the tile adds K's step.
            let step = if o.k_major { self.cfg.bk as i64 * o.cols } else { self.cfg.bk as i64 };
            let k = ix::mul(kt, &c(step));
            return offs
                .iter()
                .map(|(d, s)| {
                    Stmt::call(
                        Func::matrix(MatrixOp::CopyAsync(8)),
                        [
                            o.local.expr(),
                            u32_of(&ix::add(slot, &d.expr())),
                            o.buf.expr(),
                            u32_of(&ix::add(&s.expr(), &k)),
                        ],
                    )
                })
                .collect();
        }
        let threads = self.cfg.threads() as i64;
        let k0 = ix::mul(kt, &c(self.cfg.bk as i64));
        let (r0, c0) = if o.k_major { (k0, mn0.clone()) } else { (mn0.clone(), k0) };
        let per_row = o.tc / 8;
        let chunks = o.tr * per_row;
        let base = ix::add(slot, &c(0));
        let mut out = Vec::new();
        let rows_exact = o.rows % o.tr == 0;
        let cols_exact = o.cols % o.tc == 0;
        // 16-byte copies need the chunk's global offset to be a multiple of 8 elements.
        let aligned = o.cols % 8 == 0;
        for e in 0..(chunks + threads - 1) / threads {
            let q = Var::new(format!("{tag}_q{e}"), Type::I32);
            let (r, cc) = (
                Var::new(format!("{tag}_r{e}"), Type::I32),
                Var::new(format!("{tag}_c{e}"), Type::I32),
            );
            let (gr, gc) = (
                Var::new(format!("{tag}_gr{e}"), Type::I32),
                Var::new(format!("{tag}_gc{e}"), Type::I32),
            );
            let mut body = vec![
                Stmt::let_(&r, nn_div(&q.expr(), per_row)),
                Stmt::let_(&cc, ix::mul(&nn_rem(&q.expr(), per_row), &c(8))),
                Stmt::let_(&gr, ix::add(&r0, &r.expr())),
                Stmt::let_(&gc, ix::add(&c0, &cc.expr())),
            ];
            let dst = ix::add(&base, &ix::add(&ix::mul(&r.expr(), &c(o.ls)), &cc.expr()));
            let src = ix::add(&ix::mul(&gr.expr(), &c(o.cols)), &gc.expr());
            let row_in = (!rows_exact).then(|| gr.expr().cmp_lt(c(o.rows)));
            let full = ix::and(
                row_in.clone(),
                (!cols_exact).then(|| ix::add(&gc.expr(), &c(8)).cmp_le(c(o.cols))),
            );
            let fast = Stmt::call(
                Func::matrix(MatrixOp::CopyAsync(8)),
                [o.local.expr(), u32_of(&dst), o.buf.expr(), u32_of(&src)],
            );
            // Element by element, zero past the matrix's edges.
            let slow = || {
                let mut s = Vec::new();
                for j in 0..8 {
                    let d = ix::add(&dst, &c(j));
                    let col = ix::add(&gc.expr(), &c(j));
                    let inside = ix::and(row_in.clone(), Some(col.cmp_lt(c(o.cols))));
                    let load = Stmt::store(&o.local, d.clone(), o.buf.load(ix::add(&src, &c(j))));
                    s.push(match inside {
                        Some(cond) => {
                            Stmt::if_else(cond, load, Stmt::store(&o.local, d, zero(self.p.ty)))
                        }
                        None => load,
                    });
                }
                Stmt::block(s)
            };
            body.push(match (aligned, full) {
                (true, None) => fast,
                (true, Some(cond)) => Stmt::if_else(cond, fast, slow()),
                (false, _) => slow(),
            });
            let mut item = vec![Stmt::let_(&q, ix::add(&self.lid, &c(e * threads)))];
            if (e + 1) * threads > chunks {
                item.push(Stmt::if_(q.expr().cmp_lt(c(chunks)), Stmt::block(body)));
            } else {
                item.extend(body);
            }
            out.push(Stmt::block(item));
        }
        out
    }

    /// Where every chunk of `o`'s tiles is a 16-byte copy inside the matrix (sizes multiples
    /// of the tile, rows multiples of 8 elements, as many chunks per work-item), the
    /// variables holding each of this work-item's chunks' offsets: in the local tile, and in
    /// the matrix for K-tile 0. They depend only on the work-item, so they are computed once
    /// before the k-loop ([`Self::fixed_offset_lets`]) rather than in every tile's copy.
    fn fixed_offsets(&self, o: &Operand) -> Option<Vec<(Var, Var)>> {
        let threads = self.cfg.threads() as i64;
        let chunks = o.tr * (o.tc / 8);
        let exact = o.rows % o.tr == 0 && o.cols % o.tc == 0 && o.cols % 8 == 0;
        if !exact || chunks % threads != 0 {
            return None;
        }
        let tag = o.local.name();
        Some(
            (0..chunks / threads)
                .map(|e| {
                    (
                        Var::new(format!("{tag}_dst{e}"), Type::I32),
                        Var::new(format!("{tag}_src{e}"), Type::I32),
                    )
                })
                .collect(),
        )
    }

    /// The `let`s of [`Self::fixed_offsets`] for operand `o` (`mn0` its M or N origin).
    fn fixed_offset_lets(&self, o: &Operand, mn0: &Expr) -> Vec<Stmt> {
        let Some(offs) = self.fixed_offsets(o) else { return Vec::new() };
        let threads = self.cfg.threads() as i64;
        let per_row = o.tc / 8;
        let mut out = Vec::new();
        for (e, (d, s)) in offs.iter().enumerate() {
            let q = ix::add(&self.lid, &c(e as i64 * threads));
            let (r, cc) = (nn_div(&q, per_row), ix::mul(&nn_rem(&q, per_row), &c(8)));
            // Tile 0's origin: (mn0, 0), or (0, mn0) when the rows are K.
            let (gr, gc) = if o.k_major {
                (r.clone(), ix::add(mn0, &cc))
            } else {
                (ix::add(mn0, &r), cc.clone())
            };
            out.push(Stmt::let_(d, ix::add(&ix::mul(&r, &c(o.ls)), &cc)));
            out.push(Stmt::let_(s, ix::add(&ix::mul(&gr, &c(o.cols)), &gc)));
        }
        out
    }

    /// Copies K-tile `kt` of both operands into slot `slot`, when `kt` is a tile of the
    /// problem (`guard`: it may not be), then closes the group of copies.
    fn load_stage(&self, kt: &Expr, slot: &Expr, guard: bool, tag: &str) -> Vec<Stmt> {
        let sa = ix::mul(slot, &c(self.a.tile_elems()));
        let sb = ix::mul(slot, &c(self.b.tile_elems()));
        let mut copies = match self.variant {
            Some(v) => {
                let k0 = ix::mul(kt, &c(self.cfg.bk as i64));
                v.gather.fill(&self.a_tile(), &k0, &sa, &format!("{tag}a"))
            }
            None => self.copy_tile(&self.a, &self.m0.expr(), kt, &sa, &format!("{tag}a")),
        };
        copies.extend(self.copy_tile(&self.b, &self.n0.expr(), kt, &sb, &format!("{tag}b")));
        let mut out = vec![if guard {
            Stmt::if_(kt.cmp_lt(c(self.ktiles)), Stmt::block(copies))
        } else {
            Stmt::block(copies)
        }];
        out.push(Stmt::call(Func::matrix(MatrixOp::Commit), []));
        out
    }

    /// The shape of the warp's products: `m16n16k16` where the warp's tile is a multiple of
    /// 16 wide (one B fragment is then two n-blocks, a single `ldmatrix.x4` on PTX instead
    /// of two `.x2`), else `m16n8k16`.
    fn shape(&self) -> MatShape {
        if self.cfg.warp_tile().1.is_multiple_of(16) {
            MatShape::M16N16K16
        } else {
            MatShape::M16N8K16
        }
    }

    /// Columns of one accumulator fragment (16 or 8).
    fn frag_cols(&self) -> i64 {
        if self.shape() == MatShape::M16N16K16 {
            16
        } else {
            8
        }
    }

    /// Loads the warp's A and B fragments of k-step `ks` (16 deep) of the tiles at element
    /// offsets `abase` and `bbase`: `mi` A and `ni` B fragments, named after `tag`. `wa` and
    /// `wb` are the warp's origins within a tile; each offset is written `(base + w) + C`
    /// so that the PTX backend puts `C` in the address (one register per tile and warp).
    #[allow(clippy::too_many_arguments)]
    fn load_frags(
        &self,
        abase: &Expr,
        bbase: &Expr,
        ks: i64,
        (wa, wb): (&Expr, &Expr),
        (mi, ni): (i64, i64),
        tag: &str,
        out: &mut Vec<Stmt>,
    ) -> (Vec<Var>, Vec<Var>) {
        let (a, b) = (&self.a, &self.b);
        let (shape, fw) = (self.shape(), self.frag_cols());
        let k = ks * 16;
        let (at, bt) = (ix::add(abase, wa), ix::add(bbase, wb));
        let fa = (0..mi)
            .map(|i| {
                let f = Var::new(format!("{tag}a_{i}"), frag(FragRole::A, shape, self.p.ty));
                // The warp's A element (16i, k): 16i * ls + k (row) or k * ls + 16i (col).
                let (off, lay) = if a.k_major {
                    (k * a.ls + 16 * i, FragLayout::Col)
                } else {
                    (16 * i * a.ls + k, FragLayout::Row)
                };
                out.push(Stmt::call_into(
                    &f,
                    Func::matrix(MatrixOp::Load(lay)),
                    [a.local.expr(), u32_of(&ix::add(&at, &c(off))), Expr::u32(a.ls as u32)],
                ));
                f
            })
            .collect();
        let fb = (0..ni)
            .map(|j| {
                let f = Var::new(format!("{tag}b_{j}"), frag(FragRole::B, shape, self.p.ty));
                // The warp's B element (k, fw j): k * ls + fw j (row) or fw j * ls + k (col).
                let (off, lay) = if b.k_major {
                    (k * b.ls + fw * j, FragLayout::Row)
                } else {
                    (fw * j * b.ls + k, FragLayout::Col)
                };
                out.push(Stmt::call_into(
                    &f,
                    Func::matrix(MatrixOp::Load(lay)),
                    [b.local.expr(), u32_of(&ix::add(&bt, &c(off))), Expr::u32(b.ls as u32)],
                ));
                f
            })
            .collect();
        (fa, fb)
    }

    /// The pipeline and the k-loop. The prologue starts the copies of tiles `0 .. stages`,
    /// one per slot. Fragments are loaded one k-step ahead of the `mma`s that use them,
    /// across tiles too: the last k-step of tile `kt` waits for tile `kt + 1`, passes the
    /// barrier (after which no warp reads tile `kt`'s slot any more), starts the copy of tile
    /// `kt + stages` into that slot and loads tile `kt + 1`'s first fragments, and only then
    /// issues its own `mma`s, so the tensor cores have queued work across the barrier.
    fn mainloop(&self, wm0: &Expr, wn0: &Expr, acc: &[Vec<Var>]) -> Vec<Stmt> {
        let s = self.cfg.stages as i64;
        let nks = self.cfg.bk as i64 / 16;
        // The warp's origins within the A and B tiles, in elements.
        let (wa, wb) = (Var::new("a_w", Type::I32), Var::new("b_w", Type::I32));
        let origin =
            |o: &Operand, w: &Expr| if o.k_major { w.clone() } else { ix::mul(w, &c(o.ls)) };
        let (wa_e, wb_e) = (wa.expr(), wb.expr());
        let w = (&wa_e, &wb_e);
        let dims = (acc.len() as i64, acc[0].len() as i64);
        let wait = |n: i64| Stmt::call(Func::matrix(MatrixOp::Wait(n as u8)), []);
        let mut out =
            vec![Stmt::let_(&wa, origin(&self.a, wm0)), Stmt::let_(&wb, origin(&self.b, wn0))];
        if self.variant.is_none() {
            out.extend(self.fixed_offset_lets(&self.a, &self.m0.expr()));
        }
        out.extend(self.fixed_offset_lets(&self.b, &self.n0.expr()));
        for t in 0..s {
            out.extend(self.load_stage(&c(t), &c(t), t >= self.ktiles, &format!("p{t}")));
        }
        out.extend([wait(s - 1), Stmt::barrier(MemFence::LOCAL)]);
        let (fa, fb) = self.load_frags(&c(0), &c(0), 0, w, dims, "p", &mut out);
        // The fragments carried from one tile's last k-step to the next tile's first.
        let carry = |fs: Vec<Var>, name: &str, out: &mut Vec<Stmt>| -> Vec<Var> {
            fs.iter()
                .enumerate()
                .map(|(i, f)| {
                    let v = Var::new(format!("{name}_{i}"), f.ty());
                    out.push(Stmt::decl(&v, f.expr()));
                    v
                })
                .collect()
        };
        let ca = carry(fa, "ca", &mut out);
        let cb = carry(fb, "cb", &mut out);
        // The slot of tile kt (kt % stages, carried to avoid a division when stages is 3).
        let slot = Var::new("slot", Type::I32);
        out.push(Stmt::decl(&slot, c(0)));

        let kt = Var::new("kt", Type::I32);
        let next = Var::new("slot_n", Type::I32);
        let (abase, bbase) = (Var::new("a_at", Type::I32), Var::new("b_at", Type::I32));
        let (anext, bnext) = (Var::new("a_nx", Type::I32), Var::new("b_nx", Type::I32));
        let at = |v: &Var, o: &Operand| ix::mul(&v.expr(), &c(o.tile_elems()));
        let mut step = vec![
            Stmt::let_(
                &next,
                Expr::select(slot.expr().cmp_eq(c(s - 1)), c(0), ix::add(&slot.expr(), &c(1))),
            ),
            Stmt::let_(&abase, at(&slot, &self.a)),
            Stmt::let_(&bbase, at(&slot, &self.b)),
            Stmt::let_(&anext, at(&next, &self.a)),
            Stmt::let_(&bnext, at(&next, &self.b)),
        ];
        let (mut fa, mut fb) = (ca.clone(), cb.clone());
        for ks in 0..nks {
            let (na, nb) = if ks + 1 < nks {
                let (ab, bb) = (abase.expr(), bbase.expr());
                self.load_frags(&ab, &bb, ks + 1, w, dims, &format!("f{}", ks + 1), &mut step)
            } else {
                step.extend([wait(s - 2), Stmt::barrier(MemFence::LOCAL)]);
                let ahead = ix::add(&kt.expr(), &c(s));
                step.extend(self.load_stage(&ahead, &slot.expr(), true, "n"));
                let (ab, bb) = (anext.expr(), bnext.expr());
                self.load_frags(&ab, &bb, 0, w, dims, "g", &mut step)
            };
            for (i, row) in acc.iter().enumerate() {
                for (j, v) in row.iter().enumerate() {
                    let d = Var::new(format!("d{ks}_{i}_{j}"), v.ty());
                    step.push(Stmt::call_into(
                        &d,
                        Func::matrix(MatrixOp::Mma),
                        [fa[i].expr(), fb[j].expr(), v.expr()],
                    ));
                    step.push(Stmt::assign(v, d.expr()));
                }
            }
            (fa, fb) = (na, nb);
        }
        for (v, f) in ca.iter().zip(&fa).chain(cb.iter().zip(&fb)) {
            step.push(Stmt::assign(v, f.expr()));
        }
        step.push(Stmt::assign(&slot, next.expr()));
        out.push(Stmt::for_(&kt, c(0), c(self.ktiles), c(1), Stmt::block(step)));
        out
    }

    /// Stores the warp's accumulators through local memory, one 16-row chunk at a time: the
    /// chunk's fragments go to the warp's staging area, then each work-item applies the
    /// epilogue to elements `lane, lane + 32, ...` of it and stores those inside C. The
    /// staging area has two halves used in turn where they fit (`TcConfig::staging_halves`),
    /// so one barrier per chunk suffices: a half is written again only after the barrier
    /// that follows every read of it; with one half, a second barrier ends each chunk.
    fn store(
        &self,
        acc: &[Vec<Var>],
        warp: &Expr,
        lane: &Expr,
        wm0: &Expr,
        wn0: &Expr,
    ) -> Vec<Stmt> {
        let p = self.p;
        let ec = self.cfg.epilogue_cols() as i64;
        let chunk = 16 * ec;
        let cs = Var::new("c_s", Type::ptr(AddrSpace::Local, Scalar::F32));
        let cbuf = Var::new(self.c_name, Type::ptr(AddrSpace::Global, p.out));
        let at = Var::new("c_at", Type::I32);
        let halves = self.cfg.staging_halves() as i64;
        let mut out = vec![Stmt::let_(&at, ix::mul(warp, &c(halves * chunk)))];
        let barrier = || Stmt::barrier(MemFence::LOCAL);
        let fw = self.frag_cols();
        let per_chunk = (ec / fw) as usize;
        let mut half = 0;
        for (i, row) in acc.iter().enumerate() {
            for (jc, frags) in row.chunks(per_chunk).enumerate() {
                let base = Var::new(format!("c_at{i}_{jc}"), Type::I32);
                out.push(Stmt::let_(&base, ix::add(&at.expr(), &c(half * chunk))));
                half = (half + 1) % halves;
                for (j, v) in frags.iter().enumerate() {
                    let off = ix::add(&base.expr(), &c(fw * j as i64));
                    out.push(Stmt::call(
                        Func::matrix(MatrixOp::Store(FragLayout::Row)),
                        [cs.expr(), u32_of(&off), Expr::u32(ec as u32), v.expr()],
                    ));
                }
                out.push(barrier());
                for e in 0..chunk / 32 {
                    let tag = format!("{i}_{jc}_{e}");
                    let idx = ix::add(lane, &c(32 * e));
                    let (gm, gn) = (
                        Var::new(format!("gm{tag}"), Type::I32),
                        Var::new(format!("gn{tag}"), Type::I32),
                    );
                    let x = Var::new(format!("x{tag}"), Type::F32);
                    let mut body = vec![Stmt::let_(&x, cs.load(ix::add(&base.expr(), &idx)))];
                    let mut pre = Vec::new();
                    let mut val = x.expr();
                    for &op in &p.epilogue.0 {
                        val = apply(op, val, &gm.expr(), &gn.expr(), p.n, p.out, &mut pre);
                    }
                    body.extend(pre);
                    let val = if p.out == Scalar::F32 { val } else { val.cast(p.out) };
                    let at = ix::add(&ix::mul(&gm.expr(), &c(p.n)), &gn.expr());
                    body.push(Stmt::store(&cbuf, at, val));
                    let cond = ix::and(
                        (p.m % self.cfg.bm as i64 != 0).then(|| gm.expr().cmp_lt(c(p.m))),
                        (p.n % self.cfg.bn as i64 != 0).then(|| gn.expr().cmp_lt(c(p.n))),
                    );
                    // Element `idx` of the chunk is row idx / ec, column idx % ec.
                    let row0 = ix::add(wm0, &ix::add(&c(16 * i as i64), &nn_div(&idx, ec)));
                    let col0 = ix::add(wn0, &ix::add(&c(ec * jc as i64), &nn_rem(&idx, ec)));
                    out.push(Stmt::let_(&gm, ix::add(&self.m0.expr(), &row0)));
                    out.push(Stmt::let_(&gn, ix::add(&self.n0.expr(), &col0)));
                    out.push(match cond {
                        Some(cond) => Stmt::if_(cond, Stmt::block(body)),
                        None => Stmt::block(body),
                    });
                }
                if halves == 1 {
                    out.push(barrier());
                }
            }
        }
        out
    }

    /// The work-group's block row and column of C. Work-groups start in linear order
    /// (dimension 0 fastest); walking C in bands of [`RASTER_ROWS`] block rows, column by
    /// column, keeps the A rows and B columns that run together few enough to stay in L2
    /// (a plain row-major walk streams all of B once per block row). Only where the block
    /// rows split evenly into bands; elsewhere the plain order.
    fn block_origin(&self) -> (Expr, Expr) {
        let (gx, gy) = (Expr::group_id(0).cast(Scalar::I32), Expr::group_id(1).cast(Scalar::I32));
        let gn = (self.p.n as u32).div_ceil(self.cfg.bn) as i64;
        let gm = (self.p.m as u32).div_ceil(self.cfg.bm) as i64;
        if gm <= RASTER_ROWS || gm % RASTER_ROWS != 0 || gn == 1 {
            return (gy, gx);
        }
        let linear = ix::add(&ix::mul(&gy, &c(gn)), &gx);
        let band = nn_div(&linear, RASTER_ROWS * gn);
        let within = nn_rem(&linear, RASTER_ROWS * gn);
        let row = ix::add(&ix::mul(&band, &c(RASTER_ROWS)), &nn_rem(&within, RASTER_ROWS));
        (row, nn_div(&within, RASTER_ROWS))
    }

    fn kernel(&self) -> Kernel {
        let p = self.p;
        let cfg = &self.cfg;
        let (wm, wn) = cfg.warp_tile();
        let (mi, ni) = (wm as i64 / 16, wn as i64 / self.frag_cols());
        let s = cfg.stages as i64;
        let warp = Var::new("warp", Type::I32);
        let lane = Var::new("lane", Type::I32);
        let (wm0, wn0) = (Var::new("wm0", Type::I32), Var::new("wn0", Type::I32));
        let cs = Var::new("c_s", Type::ptr(AddrSpace::Local, Scalar::F32));
        let (block_m, block_n) = self.block_origin();
        let mut body = vec![
            Stmt::alloc(&self.a.local, (s * self.a.tile_elems()) as u32),
            Stmt::alloc(&self.b.local, (s * self.b.tile_elems()) as u32),
            Stmt::alloc(
                &cs,
                cfg.staging_halves() * cfg.warps_m * cfg.warps_n * 16 * cfg.epilogue_cols(),
            ),
            Stmt::let_(&self.m0, ix::mul(&block_m, &c(cfg.bm as i64))),
            Stmt::let_(&self.n0, ix::mul(&block_n, &c(cfg.bn as i64))),
            Stmt::let_(&warp, nn_div(&self.lid, 32)),
            Stmt::let_(&lane, nn_rem(&self.lid, 32)),
            Stmt::let_(&wm0, ix::mul(&nn_div(&warp.expr(), cfg.warps_n as i64), &c(wm as i64))),
            Stmt::let_(&wn0, ix::mul(&nn_rem(&warp.expr(), cfg.warps_n as i64), &c(wn as i64))),
        ];
        if let Some(v) = self.variant {
            body.extend(v.gather.setup(&self.a_tile()));
        }
        let shape = self.shape();
        let z = Var::new("zero", frag(FragRole::Acc, shape, Scalar::F32));
        body.push(Stmt::call_into(&z, Func::matrix(MatrixOp::Fill), [Expr::f32(0.0)]));
        let acc: Vec<Vec<Var>> = (0..mi)
            .map(|i| {
                (0..ni)
                    .map(|j| {
                        let v = Var::new(format!("acc_{i}_{j}"), z.ty());
                        body.push(Stmt::decl(&v, z.expr()));
                        v
                    })
                    .collect()
            })
            .collect();
        body.extend(self.mainloop(&wm0.expr(), &wn0.expr(), &acc));
        body.extend(self.store(&acc, &warp.expr(), &lane.expr(), &wm0.expr(), &wn0.expr()));

        let mut params = vec![
            self.a.buf.clone(),
            self.b.buf.clone(),
            Var::new(self.c_name, Type::ptr(AddrSpace::Global, p.out)),
        ];
        params.extend(p.epilogue.params(p.out));
        let threads = cfg.threads();
        let gn = (p.n as u32).div_ceil(cfg.bn);
        let gm = (p.m as u32).div_ceil(cfg.bm);
        let attrs = Attrs {
            reqd_work_group_size: Some([threads, 1, 1]),
            nd_range: Some(NdRangeAttr {
                offset: vec![0, 0],
                global: vec![gn * threads, gm],
                local: Some(vec![threads, 1]),
            }),
            ..Attrs::default()
        };
        let name = self.variant.map_or_else(|| p.name(), |v| v.name.clone());
        Kernel::with_attrs(name, params, attrs, Stmt::block(body))
    }
}
