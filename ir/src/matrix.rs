//! Matrix (tensor-core) operations: fragments held cooperatively by a sub-group, and the
//! per-work-item asynchronous global-to-local copies that feed them.
//!
//! A *fragment* (`frag<role, shape, elem>`, [`Frag`]) is one tile of a matrix product
//! `D = A·B + C` held by a **sub-group**: 32 work-items of consecutive linear local id
//! (`local_id(0)` fastest; work-items `32s .. 32s + 31` form sub-group `s`), a warp on PTX.
//! Which work-item holds which element is the target's business; the IR sees the whole tile.
//! The cooperative operations ([`MatrixOp::Load`], [`MatrixOp::Store`], [`MatrixOp::Fill`],
//! [`MatrixOp::Mma`]) must be executed by all 32 work-items of a sub-group together, with
//! equal operands: the work-group size must be a multiple of 32, and a sub-group whose
//! work-items disagree (one skips the op, or passes another offset) is an error.
//!
//! The text form (docs/matrix.md has the full reference):
//!
//! ```
//! let src = "kernel k(a: ptr<global, f16>, b: ptr<global, f16>, d: ptr<global, f32>) {
//!   let fa: frag<a, m16n8k16, f16> = frag_load(a, 0u32, 16u32, row);
//!   let fb: frag<b, m16n8k16, f16> = frag_load(b, 0u32, 16u32, col);
//!   let c: frag<acc, m16n8k16, f32> = frag_fill(0.0f32);
//!   let fd: frag<acc, m16n8k16, f32> = mma(fa, fb, c);
//!   frag_store(d, 0u32, 8u32, row, fd);
//! }";
//! let m = kiln_ir::parse_module(src).unwrap();
//! kiln_ir::verify_module(&m).unwrap();
//! assert_eq!(kiln_ir::parse_module(&m.to_string()).unwrap(), m);
//! ```

use std::fmt;

use crate::types::Scalar;
use crate::warpgroup::{TmaBox, WgLayout};

/// What a fragment holds: the left factor `A` (M×K), the right factor `B` (K×N) or an
/// accumulator `C`/`D` (M×N).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FragRole {
    /// `A`, M rows by K columns (text `a`).
    A,
    /// `B`, K rows by N columns (text `b`).
    B,
    /// An accumulator `C` or `D`, M rows by N columns (text `acc`).
    Acc,
}

impl FragRole {
    /// Every role.
    pub const ALL: [FragRole; 3] = [FragRole::A, FragRole::B, FragRole::Acc];

    /// The text-format name.
    pub fn name(self) -> &'static str {
        match self {
            FragRole::A => "a",
            FragRole::B => "b",
            FragRole::Acc => "acc",
        }
    }

    /// Parses a text-format name.
    pub fn from_name(name: &str) -> Option<FragRole> {
        FragRole::ALL.into_iter().find(|r| r.name() == name)
    }
}

/// The shape `M×N×K` of one matrix product step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MatShape {
    /// M = 16, N = 8, K = 16 (text `m16n8k16`): one PTX `mma.sync.m16n8k16`.
    M16N8K16,
    /// M = 16, N = 16, K = 16 (text `m16n16k16`): two `m16n8k16` steps on PTX.
    M16N16K16,
    /// M = 64, N = the value (a multiple of 8 from 8 to 256), K = 16 (text `m64nNk16`): a
    /// **warpgroup** product (`wgmma`, [`crate::warpgroup`]); only accumulators have it.
    M64(u16),
}

impl MatShape {
    /// The sub-group shapes.
    pub const ALL: [MatShape; 2] = [MatShape::M16N8K16, MatShape::M16N16K16];

    /// `(M, N, K)`.
    pub fn mnk(self) -> (u32, u32, u32) {
        match self {
            MatShape::M16N8K16 => (16, 8, 16),
            MatShape::M16N16K16 => (16, 16, 16),
            MatShape::M64(n) => (64, n as u32, 16),
        }
    }

    /// The text-format name.
    pub fn name(self) -> String {
        let (m, n, k) = self.mnk();
        format!("m{m}n{n}k{k}")
    }

    /// True for the warpgroup shapes `m64nNk16`.
    pub fn is_warpgroup(self) -> bool {
        matches!(self, MatShape::M64(_))
    }

    /// Parses a text-format name (`m16n8k16`, `m16n16k16`, or `m64nNk16` with N a multiple
    /// of 8 from 8 to 256).
    pub fn from_name(name: &str) -> Option<MatShape> {
        if let Some(s) = MatShape::ALL.into_iter().find(|s| s.name() == name) {
            return Some(s);
        }
        let n: u16 = name.strip_prefix("m64n")?.strip_suffix("k16")?.parse().ok()?;
        let ok = n.is_multiple_of(8) && (8..=256).contains(&n) && name == format!("m64n{n}k16");
        ok.then_some(MatShape::M64(n))
    }
}

/// A fragment type `frag<role, shape, elem>`: the value of one tile, held by a sub-group.
///
/// Well-formed fragments ([`Frag::check`]) have `elem` f16 or bf16 for roles `a` and `b`,
/// and f32 for `acc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frag {
    /// What the tile is in the product.
    pub role: FragRole,
    /// The product's shape.
    pub shape: MatShape,
    /// The element type.
    pub elem: Scalar,
}

impl Frag {
    /// A fragment type (not checked; see [`Frag::check`]).
    pub fn new(role: FragRole, shape: MatShape, elem: Scalar) -> Frag {
        Frag { role, shape, elem }
    }

    /// The tile's `(rows, columns)`: M×K for `a`, K×N for `b`, M×N for `acc`.
    pub fn dims(self) -> (u32, u32) {
        let (m, n, k) = self.shape.mnk();
        match self.role {
            FragRole::A => (m, k),
            FragRole::B => (k, n),
            FragRole::Acc => (m, n),
        }
    }

    /// The number of elements of the tile.
    pub fn len(self) -> usize {
        let (r, c) = self.dims();
        (r * c) as usize
    }

    /// Always false: a tile has elements. (Here for `len`'s sake.)
    pub fn is_empty(self) -> bool {
        false
    }

    /// Elements each work-item holds in the interpreter: the whole tile for sub-group
    /// shapes, its own `N / 2` for warpgroup accumulators ([`crate::warpgroup::acc_coords`]).
    pub fn held(self) -> usize {
        match self.shape {
            MatShape::M64(n) => n as usize / 2,
            _ => self.len(),
        }
    }

    /// Why this fragment type is not allowed, if it is not.
    pub fn check(self) -> Result<(), String> {
        if let MatShape::M64(n) = self.shape {
            if !n.is_multiple_of(8) || !(8..=256).contains(&n) {
                return Err(format!("{self}: N of m64nNk16 is a multiple of 8 from 8 to 256"));
            }
            if self.role != FragRole::Acc {
                return Err(format!(
                    "{self}: warpgroup products read their factors from local memory; only \
                     `acc` fragments have the shape {}",
                    self.shape.name()
                ));
            }
        }
        let ok = match self.role {
            FragRole::A | FragRole::B => matches!(self.elem, Scalar::F16 | Scalar::BF16),
            FragRole::Acc => self.elem == Scalar::F32,
        };
        if ok {
            Ok(())
        } else {
            let want = if self.role == FragRole::Acc { "f32" } else { "f16 or bf16" };
            Err(format!("{self}: `{}` fragments hold {want} elements", self.role.name()))
        }
    }
}

impl fmt::Display for Frag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "frag<{}, {}, {}>", self.role.name(), self.shape.name(), self.elem)
    }
}

/// How a tile lies in memory: element `(r, c)` at `offset + r * stride + c` (`row`) or
/// `offset + c * stride + r` (`col`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Row-major: a row's elements are contiguous.
    Row,
    /// Column-major: a column's elements are contiguous.
    Col,
}

impl Layout {
    /// The text-format name.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Row => "row",
            Layout::Col => "col",
        }
    }

    /// Parses a text-format name.
    pub fn from_name(name: &str) -> Option<Layout> {
        [Layout::Row, Layout::Col].into_iter().find(|l| l.name() == name)
    }

    /// The element index of `(r, c)` relative to the tile's offset.
    pub fn index(self, r: u64, c: u64, stride: u64) -> u64 {
        match self {
            Layout::Row => r * stride + c,
            Layout::Col => c * stride + r,
        }
    }
}

/// Offsets and strides of fragment loads and stores are multiples of this many elements (so
/// that targets may move 16 bytes of f16 at once); see [`MatrixOp`].
pub const FRAG_ALIGN: u64 = 8;

/// The matrix operations call statements invoke ([`crate::FuncKind::Matrix`]).
///
/// Cooperative (whole sub-group, equal operands):
/// * `let f: frag<..> = frag_load(p, offset, stride, row|col);` loads the tile from `p`
///   (global, constant or local memory, elements of the fragment's type). `offset` and
///   `stride` are `u32`, multiples of 8 ([`FRAG_ALIGN`]); every element must be in bounds.
/// * `frag_store(p, offset, stride, row|col, f);` stores an `acc` fragment to global or
///   local memory (f32 elements), with the same rules.
/// * `let f: frag<..> = frag_fill(x);` every element `x`, a scalar of the element type.
/// * `let d: frag<acc, S, f32> = mma(a, b, c);` `D = A·B + C`: `a` is `frag<a, S, T>`,
///   `b` is `frag<b, S, T>` (T f16 or bf16), `c` is `frag<acc, S, f32>`. The interpreter
///   computes each element as `c[i][j]`, then adds the exact products `a[i][k] * b[k][j]` in
///   increasing `k`, rounding to f32 after each addition ([`mma_reference`]); hardware may
///   sum in another order, within [`MMA_TOLERANCE`].
///
/// Per work-item (no sub-group rule):
/// * `copy_async(dst, di, src, si, n);` copies the `n` elements `src[si .. si + n]` (global)
///   to `dst[di .. di + n]` (local), same element type, `n` times the element size 4, 8 or
///   16 bytes, `di` and `si` multiples of `n`. The copy joins the work-item's current group.
/// * `async_commit();` closes the current group of copies.
/// * `async_wait(n);` waits until at most `n` committed groups of this work-item are still
///   pending: the interpreter performs the older groups' copies here (reading `src` now).
///   Copies never waited for are not performed; reading their destination is a race, and so
///   is reading a copy's destination, or writing its source or destination, before the wait
///   that completes it (targets copy at any moment in between).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatrixOp {
    /// `frag_load(p, offset, stride, layout)`.
    Load(Layout),
    /// `frag_store(p, offset, stride, layout, f)`.
    Store(Layout),
    /// `frag_fill(x)`.
    Fill,
    /// `mma(a, b, c)`.
    Mma,
    /// `copy_async(dst, di, src, si, n)` with `n` the element count.
    CopyAsync(u8),
    /// `async_commit()`.
    Commit,
    /// `async_wait(n)`: at most `n` committed groups left pending.
    Wait(u8),
    /// `wgmma(d, a, ai, b, bi, la, lb)`: `d = A·B + d` for the warpgroup accumulator
    /// variable `d` (`frag<acc, m64nNk16, f32>`), the 64x16 A at element `ai` of the local
    /// array `a` and the 16xN B at `bi` of `b`, laid out as `la` and `lb` say.
    Wgmma(WgLayout, WgLayout),
    /// `wgmma_fence()`: orders register and local-memory accesses before later `wgmma`s.
    WgFence,
    /// `wgmma_commit()`: closes the current group of `wgmma`s.
    WgCommit,
    /// `wgmma_wait(n)`: waits until at most `n` committed `wgmma` groups are pending.
    WgWait(u8),
    /// `frag_elem(f, i)`: element `i` of this work-item's share of a warpgroup accumulator.
    FragElem(u8),
    /// `tma_load(dst, di, src, width, height, pitch, x, y, bar, bi, w, h, swizzle)`: copies
    /// the box of the 2-D tensor `src` at column `x`, row `y` into local memory, completing
    /// its bytes on barrier object `bar[bi]`.
    TmaLoad(TmaBox),
    /// `mbar_init(bar, bi, count)`: a barrier object expecting `count` arrivals per phase.
    MbarInit,
    /// `mbar_arrive(bar, bi)`: one arrival.
    MbarArrive,
    /// `mbar_expect_tx(bar, bi, bytes)`: expect `bytes` more of tile copies, and arrive.
    MbarExpectTx,
    /// `mbar_wait(bar, bi, parity)`: waits until the phase of parity `parity & 1` completed.
    MbarWait,
    /// `setmaxnreg_inc(count)` / `setmaxnreg_dec(count)`: the executing warpgroup raises
    /// (`inc`) or lowers its per-work-item register budget to `count` (a multiple of 8 in
    /// 24..=256), so that warpgroups with little to hold give registers to those with much.
    /// Executed by every work-item of a warpgroup alike; it changes no value (the
    /// interpreter only checks it).
    SetMaxNReg {
        /// Raise (`setmaxnreg_inc`) rather than lower (`setmaxnreg_dec`).
        inc: bool,
        /// The new budget, registers per work-item.
        count: u16,
    },
}

impl MatrixOp {
    /// The call's name in the text format.
    pub fn name(self) -> &'static str {
        match self {
            MatrixOp::Load(_) => "frag_load",
            MatrixOp::Store(_) => "frag_store",
            MatrixOp::Fill => "frag_fill",
            MatrixOp::Mma => "mma",
            MatrixOp::CopyAsync(_) => "copy_async",
            MatrixOp::Commit => "async_commit",
            MatrixOp::Wait(_) => "async_wait",
            MatrixOp::Wgmma(..) => "wgmma",
            MatrixOp::WgFence => "wgmma_fence",
            MatrixOp::WgCommit => "wgmma_commit",
            MatrixOp::WgWait(_) => "wgmma_wait",
            MatrixOp::FragElem(_) => "frag_elem",
            MatrixOp::TmaLoad(_) => "tma_load",
            MatrixOp::MbarInit => "mbar_init",
            MatrixOp::MbarArrive => "mbar_arrive",
            MatrixOp::MbarExpectTx => "mbar_expect_tx",
            MatrixOp::MbarWait => "mbar_wait",
            MatrixOp::SetMaxNReg { inc: true, .. } => "setmaxnreg_inc",
            MatrixOp::SetMaxNReg { inc: false, .. } => "setmaxnreg_dec",
        }
    }

    /// True for the operations a whole sub-group executes together (warpgroup operations:
    /// each of its sub-groups, see [`MatrixOp::is_warpgroup`]).
    pub fn is_cooperative(self) -> bool {
        matches!(
            self,
            MatrixOp::Load(_)
                | MatrixOp::Store(_)
                | MatrixOp::Fill
                | MatrixOp::Mma
                | MatrixOp::Wgmma(..)
                | MatrixOp::WgFence
                | MatrixOp::WgCommit
                | MatrixOp::WgWait(_)
                | MatrixOp::SetMaxNReg { .. }
        )
    }

    /// True for the operations of the warpgroup (sm_90) tier.
    pub fn is_warpgroup(self) -> bool {
        matches!(
            self,
            MatrixOp::Wgmma(..)
                | MatrixOp::WgFence
                | MatrixOp::WgCommit
                | MatrixOp::WgWait(_)
                | MatrixOp::FragElem(_)
                | MatrixOp::TmaLoad(_)
                | MatrixOp::MbarInit
                | MatrixOp::MbarArrive
                | MatrixOp::MbarExpectTx
                | MatrixOp::MbarWait
                | MatrixOp::SetMaxNReg { .. }
        )
    }

    /// True if the call yields a value: a fragment (load, fill, mma) or, for `frag_elem`,
    /// an f32.
    pub fn has_result(self) -> bool {
        matches!(self, MatrixOp::Load(_) | MatrixOp::Fill | MatrixOp::Mma | MatrixOp::FragElem(_))
    }

    /// The static attributes written after the operands in the text form.
    pub fn words(self) -> Vec<String> {
        match self {
            MatrixOp::Load(l) => vec![l.name().into()],
            MatrixOp::CopyAsync(n) | MatrixOp::Wait(n) | MatrixOp::WgWait(n) => {
                vec![n.to_string()]
            }
            MatrixOp::FragElem(i) => vec![i.to_string()],
            MatrixOp::SetMaxNReg { count, .. } => vec![count.to_string()],
            MatrixOp::Wgmma(a, b) => vec![a.name(), b.name()],
            MatrixOp::TmaLoad(b) => vec![b.w.to_string(), b.h.to_string(), b.swizzle.name().into()],
            _ => Vec::new(),
        }
    }

    /// The number of expression operands the call takes.
    pub fn arity(self) -> usize {
        match self {
            MatrixOp::Load(_) => 3,
            MatrixOp::Store(_) => 4,
            MatrixOp::Fill => 1,
            MatrixOp::Mma => 3,
            MatrixOp::CopyAsync(_) => 4,
            MatrixOp::Commit | MatrixOp::Wait(_) => 0,
            MatrixOp::Wgmma(..) => 5,
            MatrixOp::WgFence | MatrixOp::WgCommit | MatrixOp::WgWait(_) => 0,
            MatrixOp::SetMaxNReg { .. } => 0,
            MatrixOp::FragElem(_) => 1,
            MatrixOp::TmaLoad(_) => 10,
            MatrixOp::MbarInit | MatrixOp::MbarExpectTx | MatrixOp::MbarWait => 3,
            MatrixOp::MbarArrive => 2,
        }
    }

    /// True if `name` is the text name of a matrix operation.
    pub fn is_name(name: &str) -> bool {
        matches!(
            name,
            "frag_load"
                | "frag_store"
                | "frag_fill"
                | "mma"
                | "copy_async"
                | "async_commit"
                | "async_wait"
                | "wgmma"
                | "wgmma_fence"
                | "wgmma_commit"
                | "wgmma_wait"
                | "frag_elem"
                | "tma_load"
                | "mbar_init"
                | "mbar_arrive"
                | "mbar_expect_tx"
                | "mbar_wait"
                | "setmaxnreg_inc"
                | "setmaxnreg_dec"
        )
    }
}

/// How far a hardware `mma` result may be from the interpreter's ([`mma_reference`]):
/// `|d_hw - d| <= MMA_TOLERANCE * (|c| + sum_k |a[i][k] * b[k][j]|)` for each element.
/// Tensor cores add the K products in another order (and may keep fewer guard bits); for
/// K = 16 this bound is about 32 f32 ulps of the absolute sum.
pub const MMA_TOLERANCE: f64 = 1.0 / (1u64 << 18) as f64;

/// The interpreter's `D = A·B + C` on whole tiles held row-major (`a` M×K, `b` K×N, `c` M×N):
/// each element starts at `c[i][j]` and adds `a[i][k] * b[k][j]` for k = 0, 1, ..., K-1,
/// rounding to f32 after each addition. The products of f16 or bf16 values are exact in f32.
pub fn mma_reference(shape: MatShape, a: &[f32], b: &[f32], c: &[f32]) -> Vec<f32> {
    let (m, n, k) = shape.mnk();
    let (m, n, k) = (m as usize, n as usize, k as usize);
    let mut d = c.to_vec();
    for i in 0..m {
        for j in 0..n {
            let mut s = c[i * n + j];
            for kk in 0..k {
                s += a[i * k + kk] * b[kk * n + j];
            }
            d[i * n + j] = s;
        }
    }
    d
}

/// The bound [`MMA_TOLERANCE`] gives for element `(i, j)`: `MMA_TOLERANCE * (|c| + sum_k
/// |a[i][k] * b[k][j]|)`, tiles as in [`mma_reference`].
pub fn mma_bound(shape: MatShape, a: &[f32], b: &[f32], c: &[f32], i: usize, j: usize) -> f64 {
    let (_, n, k) = shape.mnk();
    let (n, k) = (n as usize, k as usize);
    let mut s = (c[i * n + j] as f64).abs();
    for kk in 0..k {
        s += (a[i * k + kk] as f64 * b[kk * n + j] as f64).abs();
    }
    MMA_TOLERANCE * s
}

/// What of this module (or of bf16) a kernel uses first, for targets that lower neither and
/// refuse such kernels by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extension {
    /// A matrix operation.
    Matrix(MatrixOp),
    /// A fragment-typed variable (only reachable through matrix operations in verified IR).
    Frag(Frag),
    /// A bf16 value or pointer.
    Bf16,
}

impl fmt::Display for Extension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Extension::Matrix(op) => write!(f, "matrix operation `{}`", op.name()),
            Extension::Frag(t) => write!(f, "fragment type {t}"),
            Extension::Bf16 => f.write_str("bf16"),
        }
    }
}

/// The first matrix operation, fragment or bf16 type `k` uses, in program order (matrix
/// operations first: a kernel with both is reported by its matrix operation).
pub fn first_extension(k: &crate::Kernel) -> Option<Extension> {
    first_use(k, true)
}

/// Whether `k` has a bf16 value, pointer, cast or local array anywhere (matrix operations
/// or not), for targets that lower matrix operations but not bf16.
pub fn uses_bf16(k: &crate::Kernel) -> bool {
    first_use(k, false) == Some(Extension::Bf16)
}

/// [`first_extension`]; with `matrix_first` false, matrix operations are not looked for
/// (only bf16 is).
fn first_use(k: &crate::Kernel, matrix_first: bool) -> Option<Extension> {
    use crate::visit::{walk_expr, walk_stmt, Visitor};
    use crate::{Expr, StmtNode, Type};
    #[derive(Default)]
    struct Find {
        matrix: Option<Extension>,
        bf16: bool,
        /// Record matrix operations (and stop at the first).
        matrix_first: bool,
    }
    fn is_bf16(t: Type) -> bool {
        matches!(
            t,
            Type::Scalar(Scalar::BF16) | Type::Ptr(_, Scalar::BF16) | Type::Vector(Scalar::BF16, _)
        )
    }
    impl Visitor for Find {
        fn visit_expr(&mut self, e: &Expr) {
            self.bf16 |= is_bf16(e.ty());
            if let crate::ExprNode::Cast { to: Scalar::BF16, .. } = e.node() {
                self.bf16 = true;
            }
            walk_expr(self, e)
        }
        fn visit_stmt(&mut self, s: &crate::Stmt) {
            if self.matrix.is_some() {
                return;
            }
            match s.node() {
                StmtNode::Call { func, .. } if self.matrix_first => {
                    if let crate::FuncKind::Matrix(op) = func.kind() {
                        self.matrix = Some(Extension::Matrix(op));
                        return;
                    }
                }
                StmtNode::Let { var, .. } | StmtNode::Decl { var, .. } => {
                    if let Type::Frag(f) = var.ty() {
                        if self.matrix_first {
                            self.matrix = Some(Extension::Frag(f));
                            return;
                        }
                        self.bf16 |= f.elem == Scalar::BF16;
                    }
                    self.bf16 |= is_bf16(var.ty());
                }
                StmtNode::Alloc { var, .. } => self.bf16 |= is_bf16(var.ty()),
                _ => {}
            }
            walk_stmt(self, s)
        }
    }
    let k = crate::depth::bound_kernel(k);
    let mut f =
        Find { bf16: k.params().iter().any(|p| is_bf16(p.ty())), matrix_first, ..Find::default() };
    f.visit_stmt(k.body());
    f.matrix.or(f.bf16.then_some(Extension::Bf16))
}

/// The first operation of the warpgroup (sm_90) tier `k` uses (or the first warpgroup
/// accumulator it declares), for targets that need sm_90a for them.
pub fn first_warpgroup(k: &crate::Kernel) -> Option<Extension> {
    use crate::visit::{walk_stmt, Visitor};
    use crate::{StmtNode, Type};
    #[derive(Default)]
    struct Find(Option<Extension>);
    impl Visitor for Find {
        // Warpgroup operations are statements and fragments are declared by statements:
        // expressions never need a look (and may be arbitrarily deep).
        fn visit_expr(&mut self, _: &crate::Expr) {}
        fn visit_stmt(&mut self, s: &crate::Stmt) {
            if self.0.is_some() {
                return;
            }
            match s.node() {
                StmtNode::Call { func, result, .. } => {
                    if let crate::FuncKind::Matrix(op) = func.kind() {
                        let wg_result = result.as_ref().and_then(|r| r.ty().frag());
                        if op.is_warpgroup() || wg_result.is_some_and(|f| f.shape.is_warpgroup()) {
                            self.0 = Some(Extension::Matrix(op));
                            return;
                        }
                    }
                }
                StmtNode::Let { var, .. } | StmtNode::Decl { var, .. } => {
                    if let Type::Frag(f) = var.ty() {
                        if f.shape.is_warpgroup() {
                            self.0 = Some(Extension::Frag(f));
                            return;
                        }
                    }
                }
                _ => {}
            }
            walk_stmt(self, s)
        }
    }
    let mut f = Find::default();
    f.visit_stmt(k.body());
    f.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for r in FragRole::ALL {
            assert_eq!(FragRole::from_name(r.name()), Some(r));
        }
        for s in MatShape::ALL {
            assert_eq!(MatShape::from_name(&s.name()), Some(s));
        }
        for s in [MatShape::M64(8), MatShape::M64(256)] {
            assert_eq!(MatShape::from_name(&s.name()), Some(s));
        }
        for bad in ["m64n12k16", "m64n264k16", "m64n0k16", "m64n064k16"] {
            assert_eq!(MatShape::from_name(bad), None, "{bad}");
        }
        assert_eq!(
            Frag::new(FragRole::Acc, MatShape::M16N8K16, Scalar::F32).to_string(),
            "frag<acc, m16n8k16, f32>"
        );
    }

    #[test]
    fn element_types_are_checked() {
        assert!(Frag::new(FragRole::A, MatShape::M16N8K16, Scalar::BF16).check().is_ok());
        assert!(Frag::new(FragRole::A, MatShape::M16N8K16, Scalar::F32).check().is_err());
        assert!(Frag::new(FragRole::Acc, MatShape::M16N16K16, Scalar::F16).check().is_err());
    }

    #[test]
    fn reference_sums_in_k_order() {
        // 1 + 2^24 rounds back to 2^24 at each step in f32; summing the small terms
        // first would keep them.
        let shape = MatShape::M16N8K16;
        let mut a = vec![0.0f32; 16 * 16];
        let b = vec![1.0f32; 16 * 8];
        let mut c = vec![0.0f32; 16 * 8];
        c[0] = 16777216.0;
        a[..16].fill(1.0);
        let d = mma_reference(shape, &a, &b, &c);
        assert_eq!(d[0], 16777216.0);
        assert_eq!(d[8], 0.0);
    }
}
