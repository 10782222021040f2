//! GEMM problems: `C = alpha * op(A) · op(B) + beta * C`, row-major, as views.
//!
//! A is `M x K` (stored `K x M` when transposed), B is `K x N` (stored `N x K` when
//! transposed), C is `M x N`; every matrix is dense row-major in its own buffer. The element
//! type is f32, or f16 for storage (A, B and C hold f16; loads widen to f32 and the
//! accumulation is f32, the result rounded once to f16).
//!
//! ```
//! use kiln_gen::{GemmConfig, GemmProblem};
//! use kiln_ir::Scalar;
//! let p = GemmProblem { m: 17, n: 3, k: 5, trans_a: true, trans_b: false, ty: Scalar::F32 };
//! let g = p.generate(&GemmConfig::default()).unwrap();
//! assert_eq!(g.kernel.name(), "gemm_tn_f32_17x3x5");
//! assert_eq!(g.buffer_elems, [17 * 5, 5 * 3, 17 * 3]);
//! // What a tuner would try for this shape: all valid, none with a tile far past the problem.
//! let cands = GemmConfig::candidates(17, 3, 5);
//! assert!(cands.iter().all(|c| c.validate().is_ok() && c.tile_n() < 8));
//! ```

use kiln_ir::Scalar;

use crate::codegen::{generate, generate_optimized, GemmViews, Generated};
use crate::config::GemmConfig;
use crate::layout::{Block, Layout};
use crate::view::{Base, DimKind, TDim, VDim, View};
use crate::MAX_SIZE;

/// A GEMM problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmProblem {
    /// Rows of C.
    pub m: i64,
    /// Columns of C.
    pub n: i64,
    /// The reduction size.
    pub k: i64,
    /// A is stored transposed (`K x M`).
    pub trans_a: bool,
    /// B is stored transposed (`N x K`).
    pub trans_b: bool,
    /// The storage type: f32 or f16.
    pub ty: Scalar,
}

fn matrix(ty: Scalar, rows: i64, cols: i64) -> Result<Layout, String> {
    Layout::dense(ty, &[rows, cols], &[0, 1]).map_err(|e| e.to_string())
}

/// A view of a row-major matrix whose virtual dimensions are `d0`, `d1` (stored in the
/// order `(d1, d0)` when `trans`).
fn operand(ty: Scalar, d0: VDim, d1: VDim, trans: bool) -> Result<View, String> {
    let (r, c) = if trans { (&d1, &d0) } else { (&d0, &d1) };
    let layout = matrix(ty, r.size, c.size)?;
    let tdims = vec![TDim::new("row", r.var()), TDim::new("col", c.var())];
    View::new(Base::Layout(layout), vec![d0, d1], tdims)
}

/// [`operand`] for a batch of `batch` such matrices, `stride` elements apart.
fn batched_operand(
    ty: Scalar,
    vb: VDim,
    d0: VDim,
    d1: VDim,
    trans: bool,
    stride: i64,
) -> Result<View, String> {
    let (r, c) = if trans { (&d1, &d0) } else { (&d0, &d1) };
    let blocks = vec![
        Block { dim: 0, size: vb.size, stride },
        Block { dim: 1, size: r.size, stride: c.size },
        Block { dim: 2, size: c.size, stride: 1 },
    ];
    let layout =
        Layout::new(ty, vec![vb.size, r.size, c.size], 0, blocks).map_err(|e| e.to_string())?;
    let tdims =
        vec![TDim::new("batch", vb.var()), TDim::new("row", r.var()), TDim::new("col", c.var())];
    View::new(Base::Layout(layout), vec![vb, d0, d1], tdims)
}

impl GemmProblem {
    /// The kernel's name: `gemm_<nn|nt|tn|tt>_<type>_<M>x<N>x<K>`.
    pub fn name(&self) -> String {
        let t = |b: bool| if b { 't' } else { 'n' };
        format!(
            "gemm_{}{}_{}_{}x{}x{}",
            t(self.trans_a),
            t(self.trans_b),
            self.ty,
            self.m,
            self.n,
            self.k
        )
    }

    /// The problem's views (A: m, k; B: k, n; C: m, n).
    pub fn views(&self) -> Result<GemmViews, String> {
        if !matches!(self.ty, Scalar::F32 | Scalar::F16) {
            return Err(format!("GEMM of {}: the generator supports f32 and f16", self.ty));
        }
        if self.m <= 0 || self.n <= 0 || self.k <= 0 {
            return Err(format!(
                "GEMM sizes must be positive: M = {}, N = {}, K = {}",
                self.m, self.n, self.k
            ));
        }
        if [self.m, self.n, self.k].iter().any(|&s| s > MAX_SIZE) {
            return Err(format!(
                "GEMM sizes must be at most {MAX_SIZE} (kernels index with 32-bit integers): \
                 M = {}, N = {}, K = {}",
                self.m, self.n, self.k
            ));
        }
        let (m, n, k) = (self.m, self.n, self.k);
        let vm = || VDim::new("m", m, DimKind::M);
        let vn = || VDim::new("n", n, DimKind::N);
        let vk = || VDim::new("k", k, DimKind::K);
        Ok(GemmViews {
            name: self.name(),
            a: operand(self.ty, vm(), vk(), self.trans_a)?,
            b: operand(self.ty, vk(), vn(), self.trans_b)?,
            c: operand(self.ty, vm(), vn(), false)?,
            names: ["a".into(), "b".into(), "c".into()],
        })
    }

    /// Generates the kernel; parameters `(a, b, c, alpha: f32, beta: f32)`.
    pub fn generate(&self, cfg: &GemmConfig) -> Result<Generated, String> {
        generate(&self.views()?, cfg)
    }

    /// [`generate`](Self::generate)'s kernel through the `-O` pipeline, verified once
    /// ([`generate_optimized`]): what a JIT hands a backend.
    pub fn generate_optimized(&self, cfg: &GemmConfig) -> Result<Generated, String> {
        generate_optimized(&self.views()?, cfg)
    }

    /// A batch of `batch` independent problems of this shape, each operand's matrices
    /// stored one after another (see [`BatchedGemm`]).
    pub fn batched(self, batch: i64) -> BatchedGemm {
        let (a, b) = ((self.m * self.k).max(1), (self.k * self.n).max(1));
        BatchedGemm { gemm: self, batch, strides: [a, b, (self.m * self.n).max(1)] }
    }
}

/// A batched GEMM: `C[i] = alpha * op(A[i]) · op(B[i]) + beta * C[i]` for `i` in
/// `0 .. batch`, one launch for the whole batch (dimension 2 of the launch runs over `i`).
/// Matrix `i` of an operand starts `i * stride` elements into its buffer; each matrix is
/// row-major as in [`GemmProblem`].
///
/// ```
/// use kiln_gen::{GemmConfig, GemmProblem};
/// use kiln_ir::Scalar;
/// let p = GemmProblem { m: 8, n: 4, k: 2, trans_a: false, trans_b: false, ty: Scalar::F32 };
/// let g = p.batched(3).generate(&GemmConfig::default()).unwrap();
/// assert_eq!(g.kernel.name(), "gemm_nn_f32_b3_8x4x2");
/// assert_eq!(g.buffer_elems, [3 * 8 * 2, 3 * 2 * 4, 3 * 8 * 4]);
/// assert_eq!(g.range().global[2], 3);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchedGemm {
    /// The shape of each problem of the batch.
    pub gemm: GemmProblem,
    /// How many problems.
    pub batch: i64,
    /// Elements from one matrix of A, B and C to the next: at least the matrix's size (the
    /// matrices may not overlap).
    pub strides: [i64; 3],
}

impl BatchedGemm {
    /// The kernel's name: `gemm_<nn|nt|tn|tt>_<type>_b<batch>_<M>x<N>x<K>`.
    pub fn name(&self) -> String {
        let p = &self.gemm;
        let t = |b: bool| if b { 't' } else { 'n' };
        let (ta, tb) = (t(p.trans_a), t(p.trans_b));
        format!("gemm_{ta}{tb}_{}_b{}_{}x{}x{}", p.ty, self.batch, p.m, p.n, p.k)
    }

    /// The problem's views (A: batch, m, k; B: batch, k, n; C: batch, m, n).
    pub fn views(&self) -> Result<GemmViews, String> {
        let p = &self.gemm;
        p.views()?;
        if self.batch <= 0 || self.batch > MAX_SIZE {
            return Err(format!("the batch must be from 1 to {MAX_SIZE}: {}", self.batch));
        }
        let sizes = [p.m * p.k, p.k * p.n, p.m * p.n];
        for ((name, &stride), size) in ["A", "B", "C"].iter().zip(&self.strides).zip(sizes) {
            if stride < size {
                return Err(format!(
                    "the batch stride of {name}, {stride}, is less than its {size} elements \
                     (the matrices would overlap)"
                ));
            }
        }
        let (m, n, k) = (p.m, p.n, p.k);
        let vb = || VDim::new("i", self.batch, DimKind::Batch);
        let vm = || VDim::new("m", m, DimKind::M);
        let vn = || VDim::new("n", n, DimKind::N);
        let vk = || VDim::new("k", k, DimKind::K);
        let [sa, sb, sc] = self.strides;
        Ok(GemmViews {
            name: self.name(),
            a: batched_operand(p.ty, vb(), vm(), vk(), p.trans_a, sa)?,
            b: batched_operand(p.ty, vb(), vk(), vn(), p.trans_b, sb)?,
            c: batched_operand(p.ty, vb(), vm(), vn(), false, sc)?,
            names: ["a".into(), "b".into(), "c".into()],
        })
    }

    /// Generates the kernel; parameters `(a, b, c, alpha: f32, beta: f32)`.
    pub fn generate(&self, cfg: &GemmConfig) -> Result<Generated, String> {
        generate(&self.views()?, cfg)
    }
}
