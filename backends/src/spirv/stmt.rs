//! Statement lowering: scopes, structured control flow, memory, barriers and atomics.

use std::collections::HashMap;

use rspirv::spirv::{LoopControl, SelectionControl, StorageClass, Word};

use kiln_ir::{AtomicOp, Builtin, Expr, FuncKind, Kernel, MemFence, Scalar, Stmt, StmtNode, Var};

use super::ctx::Ctx;
use super::Flavour;

/// Private arrays up to this many elements are zeroed by one store of a null array; longer
/// ones by a loop.
const PRIVATE_NULL_STORE_MAX: u32 = 64;

/// Where a pointer-typed name points.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mem {
    /// A Vulkan storage buffer variable (a block whose member 0 is the runtime array).
    Storage(Word),
    /// An array variable (`Workgroup` or `Function`) of a known length.
    Array(Word, StorageClass),
    /// An OpenCL pointer argument.
    ClPtr(Word, StorageClass),
}

/// What a name is bound to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Val {
    /// An SSA value of the given type.
    Ssa(Word),
    /// A mutable local: a Function variable.
    Mut(Word, Scalar),
    /// A buffer or array with its element type.
    Ptr(Mem, Scalar),
    /// A vector (a vector load's result): index into [`Emitter::vectors`].
    Vector(usize),
    /// A fragment (`let`): an SSA value of its cooperative matrix type.
    Frag(Word),
    /// A mutable fragment (`var`): a Function variable of its cooperative matrix type.
    FragMut(Word),
}

/// Per-kernel lowering state.
pub(crate) struct Emitter {
    scopes: Vec<HashMap<String, Val>>,
    pub builtins: HashMap<Builtin, Word>,
    pub wg_size: Vec<Word>,
    pub push_var: Option<Word>,
    /// A `u32` 0 the compiler cannot see as a constant (Vulkan: push-constant member 3).
    /// Float zero immediates are built from it, because lavapipe's code generator
    /// short-circuits `x * 0.0`, `x + 0.0`, `0.0 - x` and `0.0 / x` on constant zeros, which
    /// is wrong for -0.0, NaN and infinities.
    pub opaque_zero: Option<Word>,
    pub push_params: Vec<(Var, u32, Scalar)>,
    /// The entry point's function id (set by the flavour's setup).
    pub entry_fn: Word,
    cl_params: Vec<(Var, Word)>,
    local_arrays: Vec<(usize, Word, Word, Scalar, u32)>,
    /// The vector values bound by `let`s (see `vector.rs`).
    pub(crate) vectors: Vec<super::vector::VecVal>,
    /// Storage buffer variables and their bindings (Vulkan).
    pub(crate) storage_bindings: Vec<(Word, u32)>,
    /// Aliased vector views of storage buffers: (buffer variable, lane type, lanes, view).
    pub(crate) vector_views: Vec<(Word, Scalar, u8, Word)>,
    /// The block types of vector views already decorated.
    pub(crate) vector_structs: Vec<Word>,
}

impl Emitter {
    pub fn new(_kernel: &Kernel) -> Emitter {
        Emitter {
            scopes: vec![HashMap::new()],
            builtins: HashMap::new(),
            wg_size: Vec::new(),
            push_var: None,
            opaque_zero: None,
            push_params: Vec::new(),
            entry_fn: 0,
            cl_params: Vec::new(),
            local_arrays: Vec::new(),
            vectors: Vec::new(),
            storage_bindings: Vec::new(),
            vector_views: Vec::new(),
            vector_structs: Vec::new(),
        }
    }

    pub fn add_local_array(&mut self, s: &Stmt, var: Word, arr_ty: Word, elem: Scalar, n: u32) {
        self.local_arrays.push((s.addr(), var, arr_ty, elem, n));
    }

    pub fn bind_storage(&mut self, p: &Var, var: Word, binding: u32) {
        self.storage_bindings.push((var, binding));
        let elem = p.ty().elem().expect("pointer");
        self.bind(p, Val::Ptr(Mem::Storage(var), elem));
    }

    pub fn bind_cl_param(&mut self, p: &Var, id: Word) {
        self.cl_params.push((p.clone(), id));
    }

    pub(crate) fn bind(&mut self, v: &Var, val: Val) {
        self.scopes.last_mut().expect("scope").insert(v.name().to_string(), val);
    }

    pub(crate) fn lookup(&self, v: &Var) -> Result<Val, String> {
        self.scopes
            .iter()
            .rev()
            .find_map(|s| s.get(v.name()).copied())
            .ok_or_else(|| format!("`{}` is not in scope", v.name()))
    }

    /// Emits the function body and ends the function.
    pub fn body(&mut self, cx: &mut Ctx, kernel: &Kernel) -> Result<(), String> {
        cx.b.begin_block(None).map_err(|e| e.to_string())?;
        for (p, id) in std::mem::take(&mut self.cl_params) {
            match p.ty() {
                kiln_ir::Type::Ptr(space, elem) => {
                    let sc = if space == kiln_ir::AddrSpace::Constant {
                        StorageClass::UniformConstant
                    } else {
                        StorageClass::CrossWorkgroup
                    };
                    self.bind(&p, Val::Ptr(Mem::ClPtr(id, sc), elem));
                }
                kiln_ir::Type::Scalar(s) => {
                    let v = self.load_conv(cx, s, id);
                    self.bind(&p, Val::Ssa(v));
                }
                kiln_ir::Type::Vector(..) => return Err(super::VECTORS.into()),
                kiln_ir::Type::Frag(_) => return Err(super::MATRIX.into()),
            }
        }
        if let Some(pv) = self.push_var {
            let ut = cx.ty(Scalar::U32);
            let pt = cx.ptr(StorageClass::PushConstant, ut);
            let m = cx.u32c(3);
            let ptr = cx.b.access_chain(pt, None, pv, [m]).map_err(|e| e.to_string())?;
            self.opaque_zero = Some(cx.b.load(ut, None, ptr, None, []).map_err(|e| e.to_string())?);
            for (p, member, slot) in self.push_params.clone() {
                let st = cx.ty(slot);
                let pt = cx.ptr(StorageClass::PushConstant, st);
                let m = cx.u32c(member);
                let ptr = cx.b.access_chain(pt, None, pv, [m]).map_err(|e| e.to_string())?;
                let raw = cx.b.load(st, None, ptr, None, []).map_err(|e| e.to_string())?;
                let s = p.ty().scalar().expect("scalar");
                let v = self.decode_push(cx, s, slot, raw)?;
                self.bind(&p, Val::Ssa(v));
            }
        }
        self.zero_local_arrays(cx)?;
        self.stmt(cx, kernel.body())?;
        cx.b.ret().map_err(|e| e.to_string())?;
        cx.b.end_function().map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Converts a push-constant slot (`u32` or `u64` bits) to a value of type `s`.
    fn decode_push(
        &mut self,
        cx: &mut Ctx,
        s: Scalar,
        slot: Scalar,
        raw: Word,
    ) -> Result<Word, String> {
        Ok(match s {
            Scalar::Bool => {
                let zero = cx.constant(slot, 0);
                let bt = cx.ty(Scalar::Bool);
                cx.b.i_not_equal(bt, None, raw, zero).map_err(|e| e.to_string())?
            }
            _ if s.bits() == slot.bits() => {
                if s.is_float() {
                    let t = cx.ty(s);
                    cx.b.bitcast(t, None, raw).map_err(|e| e.to_string())?
                } else {
                    raw
                }
            }
            _ => {
                let it = cx.ty(int_of_bits(s.bits()));
                let narrow = cx.b.u_convert(it, None, raw).map_err(|e| e.to_string())?;
                if s.is_float() {
                    let t = cx.ty(s);
                    cx.b.bitcast(t, None, narrow).map_err(|e| e.to_string())?
                } else {
                    narrow
                }
            }
        })
    }

    /// Converts a value loaded from memory (bool as a byte) to its IR type.
    pub(crate) fn load_conv(&mut self, cx: &mut Ctx, s: Scalar, v: Word) -> Word {
        if s == Scalar::Bool {
            let zero = cx.constant(Scalar::U8, 0);
            let bt = cx.ty(Scalar::Bool);
            cx.b.i_not_equal(bt, None, v, zero).expect("block")
        } else {
            v
        }
    }

    /// Converts a value to its in-memory form (bool as a byte).
    pub(crate) fn store_conv(&mut self, cx: &mut Ctx, s: Scalar, v: Word) -> Word {
        if s == Scalar::Bool {
            let one = cx.constant(Scalar::U8, 1);
            let zero = cx.constant(Scalar::U8, 0);
            let t = cx.ty(Scalar::U8);
            cx.b.select(t, None, v, one, zero).expect("block")
        } else {
            v
        }
    }

    /// A pointer to element `index` of `mem`.
    pub(crate) fn elem_ptr(
        &mut self,
        cx: &mut Ctx,
        mem: Mem,
        elem: Scalar,
        index: &Expr,
    ) -> Result<(Word, StorageClass), String> {
        let (ix, ity) = self.expr(cx, index)?;
        let et = cx.mem_ty(elem);
        let (want, sc) = match mem {
            Mem::Storage(_) => (Scalar::U32, StorageClass::StorageBuffer),
            Mem::Array(_, sc) => (Scalar::U32, sc),
            Mem::ClPtr(_, sc) => (Scalar::U64, sc),
        };
        // In-bounds indices are non-negative, so zero-extension or truncation keeps them.
        let ix = if ity.bits() == want.bits() {
            ix
        } else {
            let t = cx.ty(want);
            cx.b.u_convert(t, None, ix).map_err(|e| e.to_string())?
        };
        let pt = cx.ptr(sc, et);
        let p = match mem {
            Mem::Storage(v) => {
                let zero = cx.u32c(0);
                cx.b.access_chain(pt, None, v, [zero, ix])
            }
            Mem::Array(v, _) => cx.b.access_chain(pt, None, v, [ix]),
            Mem::ClPtr(v, _) => cx.b.in_bounds_ptr_access_chain(pt, None, v, ix, []),
        }
        .map_err(|e| e.to_string())?;
        Ok((p, sc))
    }

    /// The memory `v` points to and its element type.
    pub(crate) fn ptr_to(&self, v: &Var) -> Result<(Mem, Scalar), String> {
        match self.lookup(v)? {
            Val::Ptr(m, e) => Ok((m, e)),
            _ => Err(format!("`{}` is not a pointer", v.name())),
        }
    }

    /// Work-group linear local id and size, for the local-array zeroing loop.
    fn zero_local_arrays(&mut self, cx: &mut Ctx) -> Result<(), String> {
        if self.local_arrays.is_empty() {
            return Ok(());
        }
        let l = |d| Expr::builtin(Builtin::LocalId, d);
        let s = |d| Expr::builtin(Builtin::LocalSize, d);
        let lin = l(0) + s(0) * (l(1) + s(1) * l(2));
        let total = s(0) * s(1) * s(2);
        let (lin, _) = self.expr(cx, &lin)?;
        let (total, _) = self.expr(cx, &total)?;
        for (_, var, _, elem, n) in self.local_arrays.clone() {
            self.zero_loop(cx, var, StorageClass::Workgroup, elem, n, Some((lin, total)))?;
        }
        self.barrier(cx, MemFence::LOCAL, true)
    }

    /// Zeroes the `n` elements of the array variable `var`: all of them, or with
    /// `Some((first, step))` the elements `first, first + step, ...` (a work-group's items
    /// sharing the work).
    fn zero_loop(
        &mut self,
        cx: &mut Ctx,
        var: Word,
        sc: StorageClass,
        elem: Scalar,
        n: u32,
        share: Option<(Word, Word)>,
    ) -> Result<(), String> {
        let ut = cx.ty(Scalar::U32);
        let (first, step) = match share {
            Some(s) => s,
            None => (cx.u32c(0), cx.u32c(1)),
        };
        let counter = {
            let pt = cx.ptr(StorageClass::Function, ut);
            cx.local_var(pt)
        };
        cx.b.store(counter, first, None, []).map_err(|e| e.to_string())?;
        let nc = cx.u32c(n);
        let et = cx.mem_ty(elem);
        let zero = cx.null(et);
        let bt = cx.ty(Scalar::Bool);
        self.structured_loop(
            cx,
            |_, cx| {
                let i = cx.b.load(ut, None, counter, None, []).map_err(|e| e.to_string())?;
                cx.b.u_less_than(bt, None, i, nc).map_err(|e| e.to_string())
            },
            |_, cx| {
                let i = cx.b.load(ut, None, counter, None, []).map_err(|e| e.to_string())?;
                let pt = cx.ptr(sc, et);
                let p = cx.b.access_chain(pt, None, var, [i]).map_err(|e| e.to_string())?;
                cx.b.store(p, zero, None, []).map_err(|e| e.to_string())
            },
            |_, cx| {
                let i = cx.b.load(ut, None, counter, None, []).map_err(|e| e.to_string())?;
                let n = cx.b.i_add(ut, None, i, step).map_err(|e| e.to_string())?;
                cx.b.store(counter, n, None, []).map_err(|e| e.to_string())
            },
        )
    }

    /// A structured loop: `cond` evaluated in the header, then `body`, then `cont`.
    fn structured_loop(
        &mut self,
        cx: &mut Ctx,
        cond: impl FnOnce(&mut Self, &mut Ctx) -> Result<Word, String>,
        body: impl FnOnce(&mut Self, &mut Ctx) -> Result<(), String>,
        cont: impl FnOnce(&mut Self, &mut Ctx) -> Result<(), String>,
    ) -> Result<(), String> {
        let e = |e: rspirv::dr::Error| e.to_string();
        let (header, check, body_l, cont_l, merge) =
            (cx.b.id(), cx.b.id(), cx.b.id(), cx.b.id(), cx.b.id());
        cx.b.branch(header).map_err(e)?;
        cx.b.begin_block(Some(header)).map_err(e)?;
        cx.b.loop_merge(merge, cont_l, LoopControl::NONE, []).map_err(e)?;
        cx.b.branch(check).map_err(e)?;
        cx.b.begin_block(Some(check)).map_err(e)?;
        let c = cond(self, cx)?;
        cx.b.branch_conditional(c, body_l, merge, []).map_err(e)?;
        cx.b.begin_block(Some(body_l)).map_err(e)?;
        body(self, cx)?;
        cx.b.branch(cont_l).map_err(e)?;
        cx.b.begin_block(Some(cont_l)).map_err(e)?;
        cont(self, cx)?;
        cx.b.branch(header).map_err(e)?;
        cx.b.begin_block(Some(merge)).map_err(e)?;
        Ok(())
    }

    fn scoped(&mut self, cx: &mut Ctx, s: &Stmt) -> Result<(), String> {
        self.scopes.push(HashMap::new());
        let r = self.stmt(cx, s);
        self.scopes.pop();
        r
    }

    fn stmt(&mut self, cx: &mut Ctx, s: &Stmt) -> Result<(), String> {
        let e = |e: rspirv::dr::Error| e.to_string();
        match s.node() {
            StmtNode::Let { var, value } if var.ty().is_vector() => {
                let v = self.vec_value(cx, value)?;
                self.vectors.push(v);
                self.bind(var, Val::Vector(self.vectors.len() - 1));
            }
            StmtNode::Let { var, value } if var.ty().frag().is_some() => {
                self.frag_bind(cx, var, value, false)?
            }
            StmtNode::Decl { var, init } if var.ty().frag().is_some() => {
                self.frag_bind(cx, var, init, true)?
            }
            StmtNode::Assign { var, value } if var.ty().frag().is_some() => {
                self.frag_assign(cx, var, value)?
            }
            StmtNode::Let { var, value } => {
                let (v, _) = self.expr(cx, value)?;
                self.bind(var, Val::Ssa(v));
            }
            StmtNode::Decl { var, init } => {
                let (v, t) = self.expr(cx, init)?;
                let ty = cx.ty(t);
                let pt = cx.ptr(StorageClass::Function, ty);
                let p = cx.local_var(pt);
                cx.b.store(p, v, None, []).map_err(e)?;
                self.bind(var, Val::Mut(p, t));
            }
            StmtNode::Assign { var, value } => {
                let (v, _) = self.expr(cx, value)?;
                match self.lookup(var)? {
                    Val::Mut(p, _) => cx.b.store(p, v, None, []).map_err(e)?,
                    _ => return Err(format!("assignment to immutable `{}`", var.name())),
                }
            }
            StmtNode::Store { buf, index, value } => {
                let (mem, elem) = self.ptr_to(buf)?;
                let (v, _) = self.expr(cx, value)?;
                let (p, _) = self.elem_ptr(cx, mem, elem, index)?;
                let v = self.store_conv(cx, elem, v);
                cx.b.store(p, v, None, []).map_err(e)?;
            }
            StmtNode::Alloc { var, count } => {
                let elem = var.ty().elem().expect("pointer");
                if let Some(&(_, v, _, _, _)) =
                    self.local_arrays.iter().find(|(a, ..)| *a == s.addr())
                {
                    self.bind(var, Val::Ptr(Mem::Array(v, StorageClass::Workgroup), elem));
                } else {
                    let et = cx.mem_ty(elem);
                    let n = cx.u32c((*count).max(1));
                    let arr = cx.b.type_array(et, n);
                    let pt = cx.ptr(StorageClass::Function, arr);
                    let v = cx.local_var(pt);
                    // Private arrays start zeroed, as in the interpreter. One store of a null
                    // array is fine for small ones, but drivers expand it into a constant as
                    // large as the array (lavapipe hangs on 100,000 elements): a loop instead.
                    if *count <= PRIVATE_NULL_STORE_MAX {
                        let z = cx.null(arr);
                        cx.b.store(v, z, None, []).map_err(e)?;
                    } else {
                        self.zero_loop(cx, v, StorageClass::Function, elem, *count, None)?;
                    }
                    self.bind(var, Val::Ptr(Mem::Array(v, StorageClass::Function), elem));
                }
            }
            StmtNode::If { cond, then, otherwise } => {
                let (c, _) = self.expr(cx, cond)?;
                let (tl, el, merge) = (cx.b.id(), cx.b.id(), cx.b.id());
                cx.b.selection_merge(merge, SelectionControl::NONE).map_err(e)?;
                let else_target = if otherwise.is_some() { el } else { merge };
                cx.b.branch_conditional(c, tl, else_target, []).map_err(e)?;
                cx.b.begin_block(Some(tl)).map_err(e)?;
                self.scoped(cx, then)?;
                cx.b.branch(merge).map_err(e)?;
                if let Some(o) = otherwise {
                    cx.b.begin_block(Some(el)).map_err(e)?;
                    self.scoped(cx, o)?;
                    cx.b.branch(merge).map_err(e)?;
                }
                cx.b.begin_block(Some(merge)).map_err(e)?;
            }
            StmtNode::While { cond, body } => {
                self.structured_loop(
                    cx,
                    |me, cx| Ok(me.expr(cx, cond)?.0),
                    |me, cx| me.scoped(cx, body),
                    |_, _| Ok(()),
                )?;
            }
            StmtNode::For { var, lo, hi, step, body } => {
                self.for_loop(cx, var, lo, hi, step, body)?
            }
            StmtNode::Block(v) => {
                self.scopes.push(HashMap::new());
                let r = v.iter().try_for_each(|s| self.stmt(cx, s));
                self.scopes.pop();
                r?;
            }
            StmtNode::VecStore { buf, index, value } => self.vec_store(cx, buf, index, value)?,
            StmtNode::Call { result, func, args } => match func.kind() {
                FuncKind::Barrier(f) => self.barrier(cx, f, true)?,
                FuncKind::Fence(f) => self.barrier(cx, f, false)?,
                FuncKind::Atomic(op) => {
                    let v = self.atomic(cx, op, args)?;
                    if let Some(r) = result {
                        self.bind(r, Val::Ssa(v));
                    }
                }
                FuncKind::Matrix(op) => self.matrix(cx, op, result.as_ref(), args)?,
            },
        }
        Ok(())
    }

    /// `for var in lo .. hi step step`: bounds evaluated once; the counter never wraps
    /// (the loop continues while `hi - v > step`, compared unsigned).
    fn for_loop(
        &mut self,
        cx: &mut Ctx,
        var: &Var,
        lo: &Expr,
        hi: &Expr,
        step: &Expr,
        body: &Stmt,
    ) -> Result<(), String> {
        let e = |e: rspirv::dr::Error| e.to_string();
        let t = var.ty().scalar().ok_or("loop counter must be a scalar")?;
        let (lo, _) = self.expr(cx, lo)?;
        let (hi, _) = self.expr(cx, hi)?;
        let (step, _) = self.expr(cx, step)?;
        let ty = cx.ty(t);
        let bt = cx.ty(Scalar::Bool);
        let pt = cx.ptr(StorageClass::Function, ty);
        let counter = cx.local_var(pt);
        let bpt = cx.ptr(StorageClass::Function, bt);
        let go = cx.local_var(bpt);
        cx.b.store(counter, lo, None, []).map_err(e)?;
        let first = if t.is_signed() {
            cx.b.s_less_than(bt, None, lo, hi)
        } else {
            cx.b.u_less_than(bt, None, lo, hi)
        }
        .map_err(e)?;
        cx.b.store(go, first, None, []).map_err(e)?;
        self.structured_loop(
            cx,
            |_, cx| cx.b.load(bt, None, go, None, []).map_err(e),
            |me, cx| {
                let v = cx.b.load(ty, None, counter, None, []).map_err(e)?;
                me.scopes.push(HashMap::new());
                me.bind(var, Val::Ssa(v));
                let r = me.scoped(cx, body);
                me.scopes.pop();
                r
            },
            |_, cx| {
                let v = cx.b.load(ty, None, counter, None, []).map_err(e)?;
                let left = cx.b.i_sub(ty, None, hi, v).map_err(e)?;
                let more = cx.b.u_greater_than(bt, None, left, step).map_err(e)?;
                cx.b.store(go, more, None, []).map_err(e)?;
                let n = cx.b.i_add(ty, None, v, step).map_err(e)?;
                cx.b.store(counter, n, None, []).map_err(e)
            },
        )
    }

    /// OpControlBarrier (work-group execution scope) or OpMemoryBarrier.
    fn barrier(&mut self, cx: &mut Ctx, f: MemFence, control: bool) -> Result<(), String> {
        // Scope: Device = 1, Workgroup = 2. Semantics: AcquireRelease = 0x8,
        // UniformMemory = 0x40 (storage buffers), WorkgroupMemory = 0x100,
        // CrossWorkgroupMemory = 0x200.
        let global_bits = match cx.flavour {
            Flavour::Vulkan => 0x40,
            Flavour::OpenCl => 0x200,
        };
        let mut sem = 0x8;
        if f.local {
            sem |= 0x100;
        }
        if f.global {
            sem |= global_bits;
        }
        if !f.local && !f.global {
            sem = 0;
        }
        if sem != 0 && cx.vulkan_memory_model {
            // MakeAvailable | MakeVisible: under the Vulkan memory model a barrier orders
            // memory only with them.
            sem |= 0x2000 | 0x4000;
        }
        let wg = cx.u32c(2);
        let ms = if f.global { cx.device_scope() } else { cx.u32c(2) };
        let sm = cx.u32c(sem);
        if control {
            cx.b.control_barrier(wg, ms, sm).map_err(|e| e.to_string())
        } else {
            cx.b.memory_barrier(ms, sm).map_err(|e| e.to_string())
        }
    }

    fn atomic(&mut self, cx: &mut Ctx, op: AtomicOp, args: &[Expr]) -> Result<Word, String> {
        let e = |e: rspirv::dr::Error| e.to_string();
        let buf = match args.first().map(|a| a.node()) {
            Some(kiln_ir::ExprNode::Var(v)) => v.clone(),
            _ => return Err("atomic needs a pointer variable operand".into()),
        };
        let (mem, elem) = self.ptr_to(&buf)?;
        let idx = args.get(1).ok_or("atomic needs an index")?;
        let (p, sc) = self.elem_ptr(cx, mem, elem, idx)?;
        let mut vals = Vec::new();
        for a in &args[2..] {
            vals.push(self.expr(cx, a)?.0);
        }
        let ty = cx.ty(elem);
        let scope = if sc == StorageClass::Workgroup { cx.u32c(2) } else { cx.device_scope() };
        let sem = cx.u32c(0);
        if elem.bits() == 64 {
            if cx.flavour == Flavour::OpenCl {
                return Err("64-bit atomics are not supported by the OpenCL flavour (OpenCL \
                     environments forbid the Int64Atomics capability)"
                    .into());
            }
            cx.cap(rspirv::spirv::Capability::Int64Atomics);
        }
        let v = vals[0];
        let signed = elem.is_signed();
        match op {
            AtomicOp::Add if elem.is_float() => {
                cx.cap(rspirv::spirv::Capability::AtomicFloat32AddEXT);
                cx.ext("SPV_EXT_shader_atomic_float_add");
                cx.b.atomic_f_add_ext(ty, None, p, scope, sem, v)
            }
            AtomicOp::Add => cx.b.atomic_i_add(ty, None, p, scope, sem, v),
            AtomicOp::Sub => cx.b.atomic_i_sub(ty, None, p, scope, sem, v),
            AtomicOp::Min if signed => cx.b.atomic_s_min(ty, None, p, scope, sem, v),
            AtomicOp::Min => cx.b.atomic_u_min(ty, None, p, scope, sem, v),
            AtomicOp::Max if signed => cx.b.atomic_s_max(ty, None, p, scope, sem, v),
            AtomicOp::Max => cx.b.atomic_u_max(ty, None, p, scope, sem, v),
            AtomicOp::And => cx.b.atomic_and(ty, None, p, scope, sem, v),
            AtomicOp::Or => cx.b.atomic_or(ty, None, p, scope, sem, v),
            AtomicOp::Xor => cx.b.atomic_xor(ty, None, p, scope, sem, v),
            AtomicOp::Xchg => cx.b.atomic_exchange(ty, None, p, scope, sem, v),
            AtomicOp::CmpXchg => {
                let new = *vals.get(1).ok_or("atomic_cmpxchg needs two values")?;
                cx.b.atomic_compare_exchange(ty, None, p, scope, sem, sem, new, v)
            }
        }
        .map_err(e)
    }
}

/// The unsigned integer type of a width.
pub(crate) fn int_of_bits(bits: u32) -> Scalar {
    match bits {
        8 => Scalar::U8,
        16 => Scalar::U16,
        32 => Scalar::U32,
        _ => Scalar::U64,
    }
}
