//! Matrix operations in the Vulkan flavour, through SPV_KHR_cooperative_matrix.
//!
//! A fragment `frag<role, shape, elem>` is an `OpTypeCooperativeMatrixKHR` of `Subgroup`
//! scope, `elem` components, the tile's rows and columns, and the use `MatrixAKHR`,
//! `MatrixBKHR` or `MatrixAccumulatorKHR` for roles `a`, `b` and `acc`. The IR's sub-group
//! (32 work-items of consecutive linear local id) must be the device's subgroup: the Vulkan
//! device runs such kernels only where its subgroups are 32 invocations, in work-groups of
//! whole sub-groups (see docs/vulkan.md).
//!
//! * `frag_load` / `frag_store`: `OpCooperativeMatrixLoadKHR` / `StoreKHR` at the pointer to
//!   element `offset` of the buffer or local array (`StorageBuffer` or `Workgroup`),
//!   `RowMajorKHR` or `ColumnMajorKHR`, the stride in elements, as the IR counts it. The
//!   IR's offsets and strides are multiples of 8 elements, which gives the 16-byte alignment
//!   Vulkan asks of these pointers and strides.
//! * `frag_fill(x)`: `OpCompositeConstruct` of the one scalar.
//! * `mma(a, b, c)`: `OpCooperativeMatrixMulAddKHR` (no operand flags: float components).
//!   The driver sums in its own order: results lie within the IR's `MMA_TOLERANCE`, as on
//!   PTX, not bit for bit.
//! * `copy_async(dst, di, src, si, n)`: a plain copy of the `n` elements when issued (see
//!   `Emitter::copy`); `async_commit` and `async_wait` emit nothing. This gives the
//!   interpreter's results for every kernel without a race: the IR reads a copy's source at
//!   the wait that completes it and writes its destination there, so a kernel in which the
//!   copy at issue differs must read the destination, or write the source or destination,
//!   between the copy and that wait (or never wait for it and read the destination), which
//!   docs/matrix.md makes a race, as PTX's `cp.async` does.
//!
//! Refused by name: the warpgroup (sm_90) tier (cooperative matrices have no warpgroup
//! scope), bf16 fragments (they need SPV_KHR_bfloat16, not emitted), and every matrix
//! operation in the OpenCL flavour.

use rspirv::dr::{Module, Operand};
use rspirv::spirv::{Capability, MemoryAccess, Op, StorageClass, Word};

use kiln_ir::matrix::{Frag, FragRole, Layout, MatrixOp};
use kiln_ir::{Expr, Scalar, Var};

use super::ctx::{self, Ctx};
use super::stmt::{Emitter, Val};
use super::Flavour;

type R<T> = Result<T, String>;

fn er(e: rspirv::dr::Error) -> String {
    e.to_string()
}

/// `Subgroup` scope (SPIR-V's Scope enumerant 3).
const SCOPE_SUBGROUP: u32 = 3;

/// Why a bf16 fragment is refused.
pub(crate) const BF16_FRAG: &str =
    "bf16 is not yet emitted for SPIR-V (it needs SPV_KHR_bfloat16), fragments included";

/// Why the OpenCL flavour refuses matrix operations.
pub(crate) const OPENCL: &str = "matrix operations are emitted for the Vulkan flavour only \
     (SPV_KHR_cooperative_matrix with Subgroup scope); use the target spirv-vk";

/// Why the warpgroup tier is refused.
pub(crate) const WARPGROUP: &str = "the warpgroup (sm_90) tier has no SPIR-V lowering: \
     SPV_KHR_cooperative_matrix has no warpgroup scope, tile copies or barrier objects";

/// Whether `k` has fragments (cooperative matrices), not only asynchronous copies.
pub(crate) fn uses_fragments(k: &kiln_ir::Kernel) -> bool {
    use kiln_ir::visit::{walk_stmt, Visitor};
    use kiln_ir::{FuncKind, StmtNode};
    struct Find(bool);
    impl Visitor for Find {
        fn visit_expr(&mut self, _: &Expr) {}
        fn visit_stmt(&mut self, s: &kiln_ir::Stmt) {
            if let StmtNode::Call { func, .. } = s.node() {
                if let FuncKind::Matrix(op) = func.kind() {
                    self.0 |= matches!(
                        op,
                        MatrixOp::Load(_) | MatrixOp::Store(_) | MatrixOp::Fill | MatrixOp::Mma
                    );
                }
            }
            walk_stmt(self, s)
        }
    }
    let mut f = Find(false);
    f.visit_stmt(k.body());
    f.0
}

impl Ctx {
    /// The `OpTypeCooperativeMatrixKHR` of a sub-group fragment type.
    pub(crate) fn frag_ty(&mut self, f: Frag) -> R<Word> {
        if f.elem == Scalar::BF16 {
            return Err(format!("{f}: {BF16_FRAG}"));
        }
        if f.shape.is_warpgroup() {
            return Err(format!("{f}: {WARPGROUP}"));
        }
        if self.flavour != Flavour::Vulkan {
            return Err(format!("{f}: {OPENCL}"));
        }
        self.cap(Capability::CooperativeMatrixKHR);
        self.ext("SPV_KHR_cooperative_matrix");
        // Cooperative matrices are not 16-bit storage: f16 components need Float16 itself,
        // which `ty` declares.
        let comp = self.ty(f.elem);
        let (rows, cols) = f.dims();
        let usage = match f.role {
            FragRole::A => 0,
            FragRole::B => 1,
            FragRole::Acc => 2,
        };
        let (scope, rows, cols, usage) =
            (self.u32c(SCOPE_SUBGROUP), self.u32c(rows), self.u32c(cols), self.u32c(usage));
        // rspirv's builder declares each type once.
        Ok(self.b.type_cooperative_matrix_khr(comp, scope, rows, cols, usage))
    }
}

/// The fragment type of a variable.
fn frag_of(v: &Var) -> R<Frag> {
    v.ty().frag().ok_or_else(|| format!("ill-formed kernel: `{}` is not a fragment", v.name()))
}

impl Emitter {
    /// The value of a fragment operand (a fragment variable).
    fn frag_value(&mut self, cx: &mut Ctx, e: &Expr) -> R<Word> {
        let v = e.as_var().ok_or("ill-formed kernel: a fragment operand is not a variable")?;
        match self.lookup(v)? {
            Val::Frag(id) => Ok(id),
            Val::FragMut(p) => {
                let t = cx.frag_ty(frag_of(v)?)?;
                cx.b.load(t, None, p, None, []).map_err(er)
            }
            _ => Err(format!("ill-formed kernel: `{}` is not a fragment", v.name())),
        }
    }

    /// `let` (`mutable` false) or `var` of a fragment, initialized from another fragment
    /// variable.
    pub(crate) fn frag_bind(
        &mut self,
        cx: &mut Ctx,
        var: &Var,
        value: &Expr,
        mutable: bool,
    ) -> R<()> {
        let v = self.frag_value(cx, value)?;
        if !mutable {
            self.bind(var, Val::Frag(v));
            return Ok(());
        }
        let t = cx.frag_ty(frag_of(var)?)?;
        let pt = cx.ptr(StorageClass::Function, t);
        let p = cx.local_var(pt);
        cx.b.store(p, v, None, []).map_err(er)?;
        self.bind(var, Val::FragMut(p));
        Ok(())
    }

    /// Assignment to a fragment `var`.
    pub(crate) fn frag_assign(&mut self, cx: &mut Ctx, var: &Var, value: &Expr) -> R<()> {
        let v = self.frag_value(cx, value)?;
        match self.lookup(var)? {
            Val::FragMut(p) => cx.b.store(p, v, None, []).map_err(er),
            _ => Err(format!("assignment to immutable `{}`", var.name())),
        }
    }

    /// The pointer to element `index` of the memory operand `e`.
    fn tile_ptr(&mut self, cx: &mut Ctx, e: &Expr, index: &Expr) -> R<Word> {
        let v = e.as_var().ok_or("ill-formed kernel: a matrix memory operand is not a name")?;
        let (mem, elem) = self.ptr_to(v)?;
        Ok(self.elem_ptr(cx, mem, elem, index)?.0)
    }

    /// `copy_async(dst, di, src, si, n)` as a plain copy. From a storage buffer, a copy of 8
    /// or 16 bytes is one load of a `u32` vector (through an aliased view of the buffer: `si`
    /// is a multiple of `n`, which the IR checks) whose words are bitcast to the elements;
    /// otherwise one load per element. One store per element.
    fn copy(&mut self, cx: &mut Ctx, n: u8, args: &[Expr]) -> R<()> {
        let name =
            |e: &Expr| e.as_var().cloned().ok_or("ill-formed kernel: a copy operand is not a name");
        let (dst, src) = (name(&args[0])?, name(&args[2])?);
        let (dmem, elem) = self.ptr_to(&dst)?;
        let (smem, _) = self.ptr_to(&src)?;
        let et = cx.mem_ty(elem);
        let at = |base: &Expr, k: u32| base.clone() + Expr::u32(k);
        let size = ctx::mem_scalar(elem).size_bytes() as u32;
        let bytes = u32::from(n) * size;
        let mut values = Vec::new();
        match smem {
            super::stmt::Mem::Storage(var) if size <= 4 && matches!(bytes, 8 | 16) => {
                let words = bytes / 4;
                let view = self.vector_view(cx, var, Scalar::U32, words as u8)?;
                let ut = cx.ty(Scalar::U32);
                let vt = cx.b.type_vector(ut, words);
                let index = args[3].clone() >> Expr::u32(u32::from(n).trailing_zeros());
                let (vi, _) = self.expr(cx, &index)?;
                let zero = cx.u32c(0);
                let pt = cx.ptr(StorageClass::StorageBuffer, vt);
                let p = cx.b.access_chain(pt, None, view, [zero, vi]).map_err(er)?;
                let v = cx.b.load(vt, None, p, None, []).map_err(er)?;
                let per_word = 4 / size;
                for w in 0..words {
                    let x = cx.b.composite_extract(ut, None, v, [w]).map_err(er)?;
                    if per_word == 1 {
                        let x = if et == ut { x } else { cx.b.bitcast(et, None, x).map_err(er)? };
                        values.push(x);
                        continue;
                    }
                    // The first element is the word's low bits (little-endian memory).
                    let pair = cx.b.type_vector(et, per_word);
                    let xs = cx.b.bitcast(pair, None, x).map_err(er)?;
                    for h in 0..per_word {
                        values.push(cx.b.composite_extract(et, None, xs, [h]).map_err(er)?);
                    }
                }
            }
            _ => {
                for k in 0..u32::from(n) {
                    let (sp, _) = self.elem_ptr(cx, smem, elem, &at(&args[3], k))?;
                    values.push(cx.b.load(et, None, sp, None, []).map_err(er)?);
                }
            }
        }
        for (k, x) in (0..).zip(values) {
            let (dp, _) = self.elem_ptr(cx, dmem, elem, &at(&args[1], k))?;
            cx.b.store(dp, x, None, []).map_err(er)?;
        }
        Ok(())
    }

    /// A matrix call statement.
    pub(crate) fn matrix(
        &mut self,
        cx: &mut Ctx,
        op: MatrixOp,
        result: Option<&Var>,
        args: &[Expr],
    ) -> R<()> {
        if cx.flavour != Flavour::Vulkan {
            return Err(format!("matrix operation `{}`: {OPENCL}", op.name()));
        }
        if op.is_warpgroup() {
            return Err(format!("matrix operation `{}`: {WARPGROUP}", op.name()));
        }
        let layout = |l: Layout, cx: &mut Ctx| cx.u32c(if l == Layout::Row { 0 } else { 1 });
        let result_frag = || -> R<(&Var, Frag)> {
            let r = result
                .ok_or_else(|| format!("ill-formed kernel: `{}` without a result", op.name()))?;
            Ok((r, frag_of(r)?))
        };
        match op {
            MatrixOp::Load(l) => {
                let (r, f) = result_frag()?;
                let t = cx.frag_ty(f)?;
                let p = self.tile_ptr(cx, &args[0], &args[1])?;
                let (stride, _) = self.expr(cx, &args[2])?;
                let l = layout(l, cx);
                let v =
                    cx.b.cooperative_matrix_load_khr(t, None, p, l, Some(stride), None, [])
                        .map_err(er)?;
                self.bind(r, Val::Frag(v));
            }
            MatrixOp::Store(l) => {
                let f = self.frag_value(cx, &args[3])?;
                let p = self.tile_ptr(cx, &args[0], &args[1])?;
                let (stride, _) = self.expr(cx, &args[2])?;
                let l = layout(l, cx);
                cx.b.cooperative_matrix_store_khr(p, f, l, Some(stride), None, []).map_err(er)?;
            }
            MatrixOp::Fill => {
                let (r, f) = result_frag()?;
                let t = cx.frag_ty(f)?;
                let (x, _) = self.expr(cx, &args[0])?;
                let v = cx.b.composite_construct(t, None, [x]).map_err(er)?;
                self.bind(r, Val::Frag(v));
            }
            MatrixOp::Mma => {
                let (r, f) = result_frag()?;
                let t = cx.frag_ty(f)?;
                let a = self.frag_value(cx, &args[0])?;
                let b = self.frag_value(cx, &args[1])?;
                let c = self.frag_value(cx, &args[2])?;
                let v = cx.b.cooperative_matrix_mul_add_khr(t, None, a, b, c, None).map_err(er)?;
                self.bind(r, Val::Frag(v));
            }
            MatrixOp::CopyAsync(n) => self.copy(cx, n, args)?,
            MatrixOp::Commit | MatrixOp::Wait(_) => {}
            _ => return Err(format!("matrix operation `{}`: {WARPGROUP}", op.name())),
        }
        Ok(())
    }
}

/// Under the Vulkan memory model a plain load or store is *private*: it is not ordered
/// with other invocations' accesses by barriers, so a compiler may, for one, keep a value
/// loaded before a barrier. kiln's kernels communicate through local and global memory
/// across barriers, so every load and store of `Workgroup` or `StorageBuffer` memory
/// (cooperative-matrix ones included) gets the `NonPrivatePointer` memory operand, as
/// glslang gives `shared` and `coherent` variables; the barriers make memory available and
/// visible (`Emitter::barrier`).
pub(crate) fn mark_non_private(module: &mut Module) {
    use std::collections::HashMap;
    let shared =
        |sc: StorageClass| matches!(sc, StorageClass::Workgroup | StorageClass::StorageBuffer);
    // Pointer types and global variables by id: their storage classes.
    let mut ptr_class: HashMap<Word, StorageClass> = HashMap::new();
    let mut value_class: HashMap<Word, StorageClass> = HashMap::new();
    for i in &module.types_global_values {
        match (i.class.opcode, i.result_id, i.operands.first()) {
            (Op::TypePointer, Some(id), Some(Operand::StorageClass(sc))) => {
                ptr_class.insert(id, *sc);
            }
            (Op::Variable, Some(id), Some(Operand::StorageClass(sc))) => {
                value_class.insert(id, *sc);
            }
            _ => {}
        }
    }
    for f in &mut module.functions {
        for b in &mut f.blocks {
            for i in &mut b.instructions {
                if let (Some(t), Some(id)) = (i.result_type, i.result_id) {
                    if let Some(&sc) = ptr_class.get(&t) {
                        value_class.insert(id, sc);
                    }
                }
                // Where the memory operand goes: after the pointer (load), the object
                // (store), the layout and stride (cooperative matrix load and store).
                let at = match i.class.opcode {
                    Op::Load => 1,
                    Op::Store => 2,
                    Op::CooperativeMatrixLoadKHR => 3,
                    Op::CooperativeMatrixStoreKHR => 4,
                    _ => continue,
                };
                let Some(&Operand::IdRef(p)) = i.operands.first() else { continue };
                if !value_class.get(&p).is_some_and(|&sc| shared(sc)) {
                    continue;
                }
                let len = i.operands.len();
                match i.operands.get_mut(at) {
                    Some(Operand::MemoryAccess(m)) => *m |= MemoryAccess::NON_PRIVATE_POINTER,
                    None if len == at => {
                        i.operands.push(Operand::MemoryAccess(MemoryAccess::NON_PRIVATE_POINTER))
                    }
                    _ => {}
                }
            }
        }
    }
}
