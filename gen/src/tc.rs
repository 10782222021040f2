//! Tensor-core GEMM: `C = epilogue(op(A) · op(B))` with f16 or bf16 inputs, f32 accumulation
//! and an f32, f16 or bf16 output, through the IR's matrix operations (docs/matrix.md).
//!
//! A work-group of `warps_m x warps_n` sub-groups (warps) computes a `bm x bn` tile of C;
//! each warp a `bm/warps_m x bn/warps_n` sub-tile as a grid of `m16n8k16` accumulators.
//! The reduction runs in `bk`-deep steps through a ring of `stages` local-memory tiles:
//!
//! ```text
//! local a_s: T[stages * tile_a]; local b_s: T[stages * tile_b]; local c_s: f32[..]
//! var acc_i_j: frag<acc, m16n8k16, f32> = frag_fill(0.0)
//! for s in 0 .. stages-1: copy tile s into slot s; async_commit()     // the prologue
//! for kt in 0 .. ceil(K / bk):
//!   async_wait(stages - 2); barrier(local)        // tile kt has landed, slot kt-1 is free
//!   copy tile kt + stages - 1 into its slot; async_commit()
//!   for ks in 0 .. bk/16: frag_load the warp's A and B fragments; acc_i_j = mma(..)
//! per 16-row band of the warp's tile: frag_store the accumulators to c_s, barrier,
//!   each work-item applies the epilogue to its elements and stores them (masked), barrier
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

use std::fmt;

use kiln_ir::launch::NdRange;
use kiln_ir::matrix::{Frag, FragRole, Layout as FragLayout, MatShape, MatrixOp};
use kiln_ir::{
    AddrSpace, Attrs, BinOp, Expr, Func, Kernel, MemFence, NdRangeAttr, Scalar, Stmt, Type, Var,
};

use crate::ix::{self, c};
use crate::tc_epilogue::{apply, Epilogue};
use crate::MAX_SIZE;

/// The most local memory a generated kernel uses: what an sm_90 work-group may use once the
/// launch opts in to dynamic shared memory past 48 KiB (the PTX backend's
/// `MAX_DYNAMIC_SHARED_BYTES`).
pub const MAX_LOCAL_BYTES: u32 = 227 * 1024;

/// Block rows of C that run side by side (see `Gen::block_origin`).
const RASTER_ROWS: i64 = 8;

/// The blocking of a tensor-core GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TcConfig {
    /// Rows of C per work-group.
    pub bm: u32,
    /// Columns of C per work-group.
    pub bn: u32,
    /// Reduction depth of one local-memory tile (a multiple of 16).
    pub bk: u32,
    /// Warps along M.
    pub warps_m: u32,
    /// Warps along N.
    pub warps_n: u32,
    /// Local-memory tiles in flight (2 to 4): `stages - 1` tiles are being copied while one
    /// is multiplied.
    pub stages: u32,
}

impl Default for TcConfig {
    /// 128 x 128 x 32, 2 x 4 warps (each 64 x 32), two stages (static shared memory: no
    /// launch setup needed).
    fn default() -> TcConfig {
        TcConfig { bm: 128, bn: 128, bk: 32, warps_m: 2, warps_n: 4, stages: 2 }
    }
}

impl fmt::Display for TcConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "block={}x{}x{} warps={}x{} stages={}",
            self.bm, self.bn, self.bk, self.warps_m, self.warps_n, self.stages
        )
    }
}

impl TcConfig {
    /// Work-items per work-group.
    pub fn threads(&self) -> u32 {
        32 * self.warps_m * self.warps_n
    }

    /// One warp's sub-tile, rows x columns.
    pub fn warp_tile(&self) -> (u32, u32) {
        (self.bm / self.warps_m.max(1), self.bn / self.warps_n.max(1))
    }

    /// Why the blocking cannot be generated, if it cannot.
    pub fn validate(&self) -> Result<(), String> {
        let bad = |why: String| Err(format!("tensor-core blocking {self}: {why}"));
        if self.warps_m == 0 || self.warps_n == 0 || self.warps_m * self.warps_n > 16 {
            return bad("the work-group must have 1 to 16 warps".into());
        }
        if self.bm == 0
            || self.bn == 0
            || !self.bm.is_multiple_of(self.warps_m)
            || !self.bn.is_multiple_of(self.warps_n)
        {
            return bad("the block must split evenly among the warps".into());
        }
        let (wm, wn) = self.warp_tile();
        if wm % 16 != 0 || wn % 8 != 0 {
            return bad(format!("a warp's tile {wm}x{wn} must be a multiple of 16x8 (m16n8k16)"));
        }
        if (wm / 16) * (wn / 8) > 64 {
            return bad(format!("a warp's tile {wm}x{wn} needs more than 64 accumulators"));
        }
        if self.bk == 0 || !self.bk.is_multiple_of(16) || self.bk > 128 {
            return bad("the k-tile must be a multiple of 16, at most 128".into());
        }
        if !(2..=4).contains(&self.stages) {
            return bad("stages must be 2, 3 or 4".into());
        }
        let bytes = self.local_bytes();
        if bytes > MAX_LOCAL_BYTES {
            return bad(format!(
                "{bytes} bytes of local memory, more than the 227 KiB ({MAX_LOCAL_BYTES} bytes) an sm_90 \
                 work-group may use (fewer stages or a smaller block)"
            ));
        }
        Ok(())
    }

    /// Local memory the kernel allocates, in bytes (padded operand tiles of 2-byte elements
    /// for every stage, and the f32 staging of one 16-row band per warp).
    pub fn local_bytes(&self) -> u32 {
        let (bm, bn, bk) = (self.bm, self.bn, self.bk);
        // The larger of the two layouts of each operand tile.
        let a = (bm * (bk + 8)).max(bk * (bm + 8));
        let b = (bn * (bk + 8)).max(bk * (bn + 8));
        2 * self.stages * (a + b) + 4 * self.warps_m * self.warps_n * 16 * self.epilogue_cols()
    }

    /// Columns of one warp's accumulators the epilogue stages through local memory at once
    /// (16 rows by this many): 16, or 8 when the warp's tile is an odd multiple of 8 wide.
    pub fn epilogue_cols(&self) -> u32 {
        if self.warp_tile().1.is_multiple_of(16) {
            16
        } else {
            8
        }
    }

    /// Blockings a tuner should try for an `m x n x k` problem, best guess first; all valid.
    pub fn candidates(m: u64, n: u64, k: u64) -> Vec<TcConfig> {
        let mut out = Vec::new();
        for (bm, bn, wm, wn) in [
            (128, 128, 2, 4),
            (128, 128, 2, 2),
            (128, 256, 2, 4),
            (256, 128, 4, 2),
            (64, 128, 2, 2),
            (128, 64, 2, 2),
            (64, 64, 2, 2),
            (32, 32, 1, 2),
        ] {
            for (bk, stages) in [(32, 2), (16, 3), (16, 4), (32, 3), (64, 2)] {
                let cfg = TcConfig { bm, bn, bk, warps_m: wm, warps_n: wn, stages };
                // Keep blocks that do not dwarf the problem.
                let fits = (bm as u64) < 2 * m.max(16)
                    && (bn as u64) < 2 * n.max(16)
                    && (bk as u64) < 2 * k.max(16);
                if cfg.validate().is_ok() && fits {
                    out.push(cfg);
                }
            }
        }
        if out.is_empty() {
            out.push(TcConfig { bm: 32, bn: 32, bk: 16, warps_m: 1, warps_n: 2, stages: 2 });
        }
        out
    }
}

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
        kiln_ir::verify_kernel(&kernel).map_err(|e| {
            let first = e.first().map(|x| x.to_string()).unwrap_or_default();
            format!("internal error: the generated kernel does not verify: {first}")
        })?;
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

fn frag(role: FragRole, elem: Scalar) -> Type {
    Type::Frag(Frag::new(role, MatShape::M16N8K16, elem))
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

    /// Copies K-tile `kt` of both operands into slot `kt % stages`, when `kt` is a tile of
    /// the problem (`guard`: it may not be), then closes the group of copies.
    fn load_stage(&self, kt: &Expr, guard: bool, tag: &str) -> Vec<Stmt> {
        let s = self.cfg.stages as i64;
        let slot = nn_rem(kt, s);
        let sa = ix::mul(&slot, &c(self.a.tile_elems()));
        let sb = ix::mul(&slot, &c(self.b.tile_elems()));
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

    /// The warp's multiply of the tiles in slot `slot`.
    fn multiply(&self, slot: &Expr, wm0: &Expr, wn0: &Expr, acc: &[Vec<Var>]) -> Vec<Stmt> {
        let (mi, ni) = (acc.len() as i64, acc[0].len() as i64);
        let (a, b) = (&self.a, &self.b);
        let abase = Var::new("a_at", Type::I32);
        let bbase = Var::new("b_at", Type::I32);
        let mut out = vec![
            Stmt::let_(&abase, ix::mul(slot, &c(a.tile_elems()))),
            Stmt::let_(&bbase, ix::mul(slot, &c(b.tile_elems()))),
        ];
        for ks in 0..self.cfg.bk as i64 / 16 {
            let k = ks * 16;
            let fa: Vec<Var> = (0..mi)
                .map(|i| {
                    let f = Var::new(format!("fa{ks}_{i}"), frag(FragRole::A, self.p.ty));
                    let m = ix::add(wm0, &c(16 * i));
                    // A's element (m, k): m * ls + k (row) or k * ls + m (col).
                    let (off, lay) = if a.k_major {
                        (ix::add(&c(k * a.ls), &m), FragLayout::Col)
                    } else {
                        (ix::add(&ix::mul(&m, &c(a.ls)), &c(k)), FragLayout::Row)
                    };
                    let off = ix::add(&abase.expr(), &off);
                    out.push(Stmt::call_into(
                        &f,
                        Func::matrix(MatrixOp::Load(lay)),
                        [a.local.expr(), u32_of(&off), Expr::u32(a.ls as u32)],
                    ));
                    f
                })
                .collect();
            let fb: Vec<Var> = (0..ni)
                .map(|j| {
                    let f = Var::new(format!("fb{ks}_{j}"), frag(FragRole::B, self.p.ty));
                    let n = ix::add(wn0, &c(8 * j));
                    // B's element (k, n): k * ls + n (row) or n * ls + k (col).
                    let (off, lay) = if b.k_major {
                        (ix::add(&c(k * b.ls), &n), FragLayout::Row)
                    } else {
                        (ix::add(&ix::mul(&n, &c(b.ls)), &c(k)), FragLayout::Col)
                    };
                    let off = ix::add(&bbase.expr(), &off);
                    out.push(Stmt::call_into(
                        &f,
                        Func::matrix(MatrixOp::Load(lay)),
                        [b.local.expr(), u32_of(&off), Expr::u32(b.ls as u32)],
                    ));
                    f
                })
                .collect();
            for (i, row) in acc.iter().enumerate() {
                for (j, v) in row.iter().enumerate() {
                    let d = Var::new(format!("d{ks}_{i}_{j}"), frag(FragRole::Acc, Scalar::F32));
                    out.push(Stmt::call_into(
                        &d,
                        Func::matrix(MatrixOp::Mma),
                        [fa[i].expr(), fb[j].expr(), v.expr()],
                    ));
                    out.push(Stmt::assign(v, d.expr()));
                }
            }
        }
        out
    }

    /// Stores the warp's accumulators through local memory, one 16-row band at a time: the
    /// band's fragments go to the warp's staging area, then each work-item applies the
    /// epilogue to elements `lane, lane + 32, ...` of it and stores those inside C.
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
        let base = Var::new("c_at", Type::I32);
        let mut out = vec![Stmt::let_(&base, ix::mul(warp, &c(chunk)))];
        let barrier = || Stmt::barrier(MemFence::LOCAL);
        let per_chunk = ec as usize / 8;
        for (i, row) in acc.iter().enumerate() {
            for (jc, frags) in row.chunks(per_chunk).enumerate() {
                for (j, v) in frags.iter().enumerate() {
                    let off = ix::add(&base.expr(), &c(8 * j as i64));
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
                out.push(barrier());
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
        let (mi, ni) = (wm as i64 / 16, wn as i64 / 8);
        let s = cfg.stages as i64;
        let warp = Var::new("warp", Type::I32);
        let lane = Var::new("lane", Type::I32);
        let (wm0, wn0) = (Var::new("wm0", Type::I32), Var::new("wn0", Type::I32));
        let cs = Var::new("c_s", Type::ptr(AddrSpace::Local, Scalar::F32));
        let (block_m, block_n) = self.block_origin();
        let mut body = vec![
            Stmt::alloc(&self.a.local, (s * self.a.tile_elems()) as u32),
            Stmt::alloc(&self.b.local, (s * self.b.tile_elems()) as u32),
            Stmt::alloc(&cs, cfg.warps_m * cfg.warps_n * 16 * cfg.epilogue_cols()),
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
        let z = Var::new("zero", frag(FragRole::Acc, Scalar::F32));
        body.push(Stmt::call_into(&z, Func::matrix(MatrixOp::Fill), [Expr::f32(0.0)]));
        let acc: Vec<Vec<Var>> = (0..mi)
            .map(|i| {
                (0..ni)
                    .map(|j| {
                        let v = Var::new(format!("acc_{i}_{j}"), frag(FragRole::Acc, Scalar::F32));
                        body.push(Stmt::decl(&v, z.expr()));
                        v
                    })
                    .collect()
            })
            .collect();
        // The prologue: tiles 0 .. stages-2 in flight.
        for t in 0..s - 1 {
            body.extend(self.load_stage(&c(t), t >= self.ktiles, &format!("p{t}")));
        }
        let kt = Var::new("kt", Type::I32);
        let mut step = vec![
            Stmt::call(Func::matrix(MatrixOp::Wait((s - 2) as u8)), []),
            Stmt::barrier(MemFence::LOCAL),
        ];
        let next = ix::add(&kt.expr(), &c(s - 1));
        step.extend(self.load_stage(&next, true, "n"));
        step.extend(self.multiply(&nn_rem(&kt.expr(), s), &wm0.expr(), &wn0.expr(), &acc));
        body.push(Stmt::for_(&kt, c(0), c(self.ktiles), c(1), Stmt::block(step)));
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
