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

use crate::codegen::{generate, GemmViews, Generated};
use crate::config::GemmConfig;
use crate::layout::Layout;
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
}
