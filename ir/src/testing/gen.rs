//! The random kernel and expression generator behind [`super::arb_kernel`] and
//! [`super::arb_expr`].
//!
//! Everything it builds is well typed and runs without error by construction:
//!
//! * indices are reduced modulo the length (`(e as u32) % LEN`), divisors are made odd
//!   (`a / (b | 1)`), loop bounds are clamped to a small window (`max(e, a) .. min(e, b)`,
//!   `b - a <= 6`) with a positive step, and `while` loops carry a bounded counter;
//! * barriers appear only in uniform control flow: the kernel's top-level block and the
//!   bodies of `for` loops whose bounds are uniform (built from constants, scalar
//!   parameters, uniform built-ins and uniform `let`s only);
//! * there are no data races, so every schedule gives the same result: input buffers are
//!   only read; each work-item reads and writes only its own slots of output buffers
//!   (`out[lin * K + j]`, `lin` the global linear id); local arrays alternate between
//!   "own" phases (each work-item touches only its own slots) and "shared" phases (anyone
//!   reads, no one writes), switching only at barriers (a uniform loop whose body has a
//!   barrier ends its body with one and restores the entry phase); atomics whose old value
//!   is used act on the work-item's own slots, and atomics on a shared counter buffer all
//!   use one commutative integer operation (or add and sub) and discard the old value.

use crate::expr::{Builtin, Expr, Var};
use crate::kernel::{Attrs, Kernel};
use crate::launch::{Arg, Buffer, NdRange};
use crate::stmt::{AtomicOp, Func, MemFence, Stmt};
use crate::types::{AddrSpace, Scalar, Type};

use super::values::{gen_buffer, gen_imm, Choices};

mod expr;
use super::{ExprEnv, GenConfig, TestCase};

/// The types arithmetic is generated on.
const ARITH: [Scalar; 10] = Scalar::ARITH;

const INTS: [Scalar; 8] = Scalar::INTS;

const ATOMIC_INTS: [Scalar; 4] = [Scalar::I32, Scalar::U32, Scalar::I64, Scalar::U64];

#[derive(Clone)]
struct Binding {
    var: Var,
    uniform: bool,
    assignable: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum MemKind {
    /// Read anywhere, never written.
    Input,
    /// Global output: each work-item owns `lin * k .. lin * k + k`.
    Out { k: u32 },
    /// Shared atomic counters: one commutative integer atomic (add and sub mix), old value
    /// unused. Different operations on one element would not commute.
    Counter { op: AtomicOp },
    /// Local array `id`: each work-item owns `llin * k .. llin * k + k`.
    Local { k: u32, id: usize },
    /// A private array: any index.
    Private,
}

#[derive(Clone)]
struct MemVar {
    var: Var,
    len: u32,
    kind: MemKind,
}

impl MemVar {
    fn elem(&self) -> Scalar {
        self.var.ty().elem().unwrap_or(Scalar::I32)
    }
}

/// The phase a local array is in (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Own,
    Shared,
}

pub(super) struct Gen<'a, 'c> {
    c: &'a mut Choices<'c>,
    cfg: &'a GenConfig,
    scope: Vec<Binding>,
    mems: Vec<MemVar>,
    phases: Vec<Phase>,
    next_name: usize,
    free_names: Vec<String>,
    lin: Option<Var>,
    llin: Option<Var>,
    uniform_cf: bool,
    nesting: usize,
    stmts_left: usize,
    barriers: usize,
    /// With [`GenConfig::repeat_subexprs`]: the expressions generated since the current
    /// statement began (each with whether it is uniform), for [`Gen::expr`] to use again.
    /// Emptied when a statement begins and when a scope ends, so every one is in scope.
    pool: Vec<(Expr, bool)>,
}

fn storable(f16: bool) -> Vec<Scalar> {
    let mut v = ARITH.to_vec();
    if f16 {
        v.push(Scalar::F16);
    }
    v
}

impl<'a, 'c> Gen<'a, 'c> {
    pub(super) fn new(c: &'a mut Choices<'c>, cfg: &'a GenConfig) -> Gen<'a, 'c> {
        Gen {
            c,
            cfg,
            scope: Vec::new(),
            mems: Vec::new(),
            phases: Vec::new(),
            next_name: 0,
            free_names: Vec::new(),
            lin: None,
            llin: None,
            uniform_cf: true,
            nesting: 0,
            stmts_left: cfg.max_stmts.max(1) * 4,
            barriers: 0,
            pool: Vec::new(),
        }
    }

    fn pick<T: Copy>(&mut self, options: &[T]) -> T {
        options[self.c.below(options.len())]
    }

    fn fresh(&mut self, prefix: &str) -> String {
        if self.cfg.reuse_names && !self.free_names.is_empty() && self.c.chance(30) {
            let i = self.c.below(self.free_names.len());
            return self.free_names.swap_remove(i);
        }
        self.next_name += 1;
        format!("{prefix}{}", self.next_name - 1)
    }

    fn mark(&self) -> (usize, usize) {
        (self.scope.len(), self.mems.len())
    }

    /// Ends the bindings made since `mark`; their names become free for re-binding.
    fn release(&mut self, (s, m): (usize, usize)) {
        self.pool.clear();
        for b in self.scope.drain(s..) {
            self.free_names.push(b.var.name().to_string());
        }
        for mv in self.mems.drain(m..) {
            self.free_names.push(mv.var.name().to_string());
        }
    }

    fn bind(&mut self, var: &Var, uniform: bool, assignable: bool) {
        self.scope.push(Binding { var: var.clone(), uniform, assignable });
    }

    // ---- statements ------------------------------------------------------------------------

    fn block(&mut self, max_len: usize) -> Vec<Stmt> {
        let mark = self.mark();
        let n = 1 + self.c.below(max_len.max(1));
        let mut out = Vec::new();
        for _ in 0..n {
            if self.stmts_left == 0 {
                break;
            }
            self.stmt(&mut out);
        }
        self.release(mark);
        out
    }

    fn writable(&self) -> Vec<MemVar> {
        self.mems
            .iter()
            .filter(|m| match m.kind {
                MemKind::Out { .. } | MemKind::Private => true,
                MemKind::Local { id, .. } => self.phases[id] == Phase::Own,
                MemKind::Input | MemKind::Counter { .. } => false,
            })
            .cloned()
            .collect()
    }

    fn atomic_targets(&self) -> Vec<MemVar> {
        self.mems
            .iter()
            .filter(|m| {
                let capable = ATOMIC_INTS.contains(&m.elem()) || m.elem() == Scalar::F32;
                match m.kind {
                    MemKind::Counter { .. } => true,
                    MemKind::Out { .. } => {
                        capable && m.var.ty().addr_space() == Some(AddrSpace::Global)
                    }
                    MemKind::Local { id, .. } => capable && self.phases[id] == Phase::Own,
                    _ => false,
                }
            })
            .cloned()
            .collect()
    }

    fn value_of(&mut self, elem: Scalar, uni: bool) -> Expr {
        let depth = self.cfg.max_expr_depth;
        if elem.is_storage_float() {
            self.storage_expr(elem, depth, uni)
        } else {
            self.expr(elem, depth, uni)
        }
    }

    fn stmt(&mut self, out: &mut Vec<Stmt>) {
        self.pool.clear();
        self.stmts_left = self.stmts_left.saturating_sub(1);
        let cfg = self.cfg;
        let nest_ok = self.nesting < cfg.max_nesting;
        let has_assignable = self.scope.iter().any(|b| b.assignable);
        let writable = self.writable();
        let atomic_targets = if cfg.atomics { self.atomic_targets() } else { Vec::new() };
        let w = [
            4,
            2,
            if has_assignable { 3 } else { 0 },
            if writable.is_empty() { 0 } else { 5 },
            if nest_ok { 2 } else { 0 },
            if nest_ok && cfg.loops { 2 } else { 0 },
            if nest_ok && cfg.loops { 1 } else { 0 },
            if cfg.private_arrays { 1 } else { 0 },
            if atomic_targets.is_empty() { 0 } else { 2 },
            if cfg.barriers && self.uniform_cf { 2 } else { 0 },
            1,
        ];
        let depth = cfg.max_expr_depth;
        match self.c.weighted(&w) {
            kind @ (0 | 1) => {
                let is_let = kind == 0;
                let mut types = ARITH.to_vec();
                types.push(Scalar::Bool);
                let ty = self.pick(&types);
                let uni = is_let && self.uniform_cf && self.c.chance(30);
                let value = self.expr(ty, depth, uni);
                let var = Var::new(self.fresh("v"), Type::Scalar(ty));
                out.push(if is_let { Stmt::let_(&var, value) } else { Stmt::decl(&var, value) });
                self.bind(&var, uni, !is_let);
            }
            2 => {
                let vars: Vec<Var> =
                    self.scope.iter().filter(|b| b.assignable).map(|b| b.var.clone()).collect();
                let v = vars[self.c.below(vars.len())].clone();
                let ty = v.ty().scalar().unwrap_or(Scalar::I32);
                let value = self.expr(ty, depth, false);
                out.push(Stmt::assign(&v, value));
            }
            3 => {
                let m = writable[self.c.below(writable.len())].clone();
                let index = match m.kind {
                    MemKind::Private => self.any_index(m.len, 2, false),
                    _ => self.read_index(&m, 2, false),
                };
                let value = self.value_of(m.elem(), false);
                out.push(Stmt::store(&m.var, index, value));
            }
            4 => out.push(self.if_stmt()),
            5 => out.push(self.for_stmt()),
            6 => self.while_stmt(out),
            7 => {
                let elem = self.pick(&storable(cfg.f16));
                let len = 1 + self.c.below(8) as u32;
                let var = Var::new(self.fresh("arr"), Type::ptr(AddrSpace::Private, elem));
                out.push(Stmt::alloc(&var, len));
                self.mems.push(MemVar { var, len, kind: MemKind::Private });
            }
            8 => {
                let m = atomic_targets[self.c.below(atomic_targets.len())].clone();
                out.push(self.atomic_stmt(&m));
            }
            9 => {
                let fence = self.pick(&[MemFence::LOCAL, MemFence::GLOBAL, MemFence::BOTH]);
                out.push(Stmt::barrier(fence));
                self.barriers += 1;
                for i in 0..self.phases.len() {
                    self.phases[i] = if self.c.chance(50) { Phase::Shared } else { Phase::Own };
                }
            }
            _ => {
                let fence = self.pick(&[MemFence::LOCAL, MemFence::GLOBAL, MemFence::BOTH]);
                out.push(Stmt::call(Func::fence(fence), []));
            }
        }
    }

    fn nested(&mut self, uniform: bool) -> Vec<Stmt> {
        let saved = self.uniform_cf;
        self.uniform_cf = saved && uniform;
        self.nesting += 1;
        let b = self.block(self.cfg.max_block_stmts);
        self.nesting -= 1;
        self.uniform_cf = saved;
        b
    }

    fn if_stmt(&mut self) -> Stmt {
        let cond = self.expr(Scalar::Bool, self.cfg.max_expr_depth, false);
        let then = Stmt::block(self.nested(false));
        if self.c.chance(50) {
            let otherwise = Stmt::block(self.nested(false));
            Stmt::if_else(cond, then, otherwise)
        } else {
            Stmt::if_(cond, then)
        }
    }

    fn for_stmt(&mut self) -> Stmt {
        let ty = self.pick(&INTS);
        let uniform = self.uniform_cf && self.c.chance(60);
        let span = self.c.below(7) as i128;
        let a: i128 = if self.c.chance(10) {
            ty.int_max().unwrap_or(0) - 6
        } else if ty.is_signed() {
            self.c.below(21) as i128 - 10
        } else {
            self.c.below(21) as i128
        };
        let b = a + span;
        let d = self.cfg.max_expr_depth.min(2);
        let lo = if self.c.chance(60) {
            Expr::int(ty, a)
        } else {
            self.expr(ty, d, uniform).max(Expr::int(ty, a))
        };
        let hi = if self.c.chance(60) {
            Expr::int(ty, b)
        } else {
            self.expr(ty, d, uniform).min(Expr::int(ty, b))
        };
        let step = if self.c.chance(60) {
            Expr::int(ty, 1 + self.c.below(3) as i128)
        } else {
            (self.expr(ty, d, uniform) & Expr::int(ty, 1)) + Expr::int(ty, 1)
        };
        let var = Var::new(self.fresh("it"), Type::Scalar(ty));
        let mark = self.mark();
        self.bind(&var, uniform, false);
        let (phases, barriers) = (self.phases.clone(), self.barriers);
        let mut body = self.nested(uniform);
        if self.barriers != barriers {
            // The next iteration's head runs in the entry phase: close the last one.
            body.push(Stmt::barrier(MemFence::LOCAL));
            self.phases = phases;
        }
        self.release(mark);
        Stmt::for_(&var, lo, hi, step, Stmt::block(body))
    }

    fn while_stmt(&mut self, out: &mut Vec<Stmt>) {
        let w = Var::new(self.fresh("w"), Type::I32);
        let bound = 1 + self.c.below(4) as i32;
        out.push(Stmt::decl(&w, Expr::i32(0)));
        let cond = w.expr().cmp_lt(Expr::i32(bound));
        let cond = if self.c.chance(70) {
            cond.logic_and(self.expr(Scalar::Bool, self.cfg.max_expr_depth, false))
        } else {
            cond
        };
        let mut body = self.nested(false);
        body.push(Stmt::assign(&w, &w + 1));
        out.push(Stmt::while_(cond, Stmt::block(body)));
        // Readable afterwards, never assigned by generated code.
        self.bind(&w, false, false);
    }

    fn atomic_stmt(&mut self, m: &MemVar) -> Stmt {
        let elem = m.elem();
        let d = self.cfg.max_expr_depth.min(2);
        let counter = matches!(m.kind, MemKind::Counter { .. });
        let op = if let MemKind::Counter { op } = m.kind {
            if matches!(op, AtomicOp::Add | AtomicOp::Sub) {
                self.pick(&[AtomicOp::Add, AtomicOp::Sub])
            } else {
                op
            }
        } else if elem == Scalar::F32 {
            AtomicOp::Add
        } else {
            self.pick(&AtomicOp::ALL)
        };
        let index = match m.kind {
            MemKind::Counter { .. } => self.any_index(m.len, d, false),
            _ => self.read_index(m, d, false),
        };
        let mut args = vec![m.var.expr(), index];
        for _ in 0..op.value_operands() {
            args.push(self.expr(elem, d, false));
        }
        if !counter && self.c.chance(60) {
            let r = Var::new(self.fresh("old"), Type::Scalar(elem));
            self.bind(&r, false, false);
            Stmt::call_into(&r, Func::atomic(op), args)
        } else {
            Stmt::call(Func::atomic(op), args)
        }
    }

    // ---- kernels ---------------------------------------------------------------------------

    fn range(&mut self) -> NdRange {
        let dims = 1 + self.c.below(self.cfg.max_dims.clamp(1, 3));
        let mut local = [1u32; 3];
        let mut groups = [1u32; 3];
        let mut offset = [0u32; 3];
        for d in 0..dims {
            local[d] = if d == 0 { self.pick(&[1, 2, 4, 3, 8]) } else { self.pick(&[1, 2, 3]) };
            groups[d] = 1 + self.c.below(3) as u32;
            offset[d] = if self.c.chance(50) { self.c.below(6) as u32 } else { 0 };
        }
        let max = self.cfg.max_work_items.max(1);
        while (0..3).map(|d| local[d] * groups[d]).product::<u32>() > max {
            let d = (0..3).rev().find(|&d| groups[d] > 1 || local[d] > 1).unwrap_or(0);
            if groups[d] > 1 {
                groups[d] -= 1;
            } else {
                local[d] = (local[d] / 2).max(1);
            }
        }
        let global: Vec<u32> = (0..dims).map(|d| local[d] * groups[d]).collect();
        NdRange::new(&global).with_local(&local[..dims]).with_offset(&offset[..dims])
    }

    /// The global linear id, in one of two equivalent forms.
    fn linear_id(&mut self, dims: usize) -> Expr {
        let by_groups = self.c.chance(50);
        let rel = |d: u8| {
            if by_groups {
                Expr::group_id(d) * Expr::builtin(Builtin::LocalSize, d) + Expr::local_id(d)
            } else {
                Expr::global_id(d) - Expr::builtin(Builtin::GlobalOffset, d)
            }
        };
        let mut e = rel(dims as u8 - 1);
        for d in (0..dims as u8 - 1).rev() {
            e = rel(d) + Expr::builtin(Builtin::GlobalSize, d) * e;
        }
        e
    }

    fn local_linear_id(dims: usize) -> Expr {
        let mut e = Expr::local_id(dims as u8 - 1);
        for d in (0..dims as u8 - 1).rev() {
            e = Expr::local_id(d) + Expr::builtin(Builtin::LocalSize, d) * e;
        }
        e
    }

    pub(super) fn kernel_case(&mut self) -> TestCase {
        let cfg = self.cfg;
        let range = self.range();
        let local = range.local.unwrap_or([1; 3]);
        let group_size: u32 = local.iter().product();
        let n_items = range.work_items() as u32;
        let types = storable(cfg.f16);

        // Parameters and buffers.
        let mut params: Vec<(Var, Arg)> = Vec::new();
        let mut buffers: Vec<Buffer> = Vec::new();
        for i in 0..1 + self.c.below(2) {
            let elem = self.pick(&types);
            let len = self.pick(&[4u32, 8, 16, 5]);
            let space = self.pick(&[AddrSpace::Global, AddrSpace::Constant, AddrSpace::Generic]);
            buffers.push(gen_buffer(self.c, elem, len as usize));
            let var = Var::new(format!("in{i}"), Type::ptr(space, elem));
            params.push((var.clone(), Arg::Buffer(buffers.len() - 1)));
            self.mems.push(MemVar { var, len, kind: MemKind::Input });
            if self.c.chance(15) {
                // A second parameter bound to the same (read-only) buffer.
                let space = self.pick(&[AddrSpace::Global, AddrSpace::Constant]);
                let var = Var::new(format!("alias{i}"), Type::ptr(space, elem));
                params.push((var.clone(), Arg::Buffer(buffers.len() - 1)));
                self.mems.push(MemVar { var, len, kind: MemKind::Input });
            }
        }
        for i in 0..1 + self.c.below(2) {
            let elem = self.pick(&types);
            let k = 1 + self.c.below(3) as u32;
            let space = if self.c.chance(20) { AddrSpace::Generic } else { AddrSpace::Global };
            buffers.push(gen_buffer(self.c, elem, (n_items * k) as usize));
            let var = Var::new(format!("out{i}"), Type::ptr(space, elem));
            params.push((var.clone(), Arg::Buffer(buffers.len() - 1)));
            self.mems.push(MemVar { var, len: n_items * k, kind: MemKind::Out { k } });
        }
        if cfg.atomics && self.c.chance(50) {
            let elem = self.pick(&ATOMIC_INTS);
            let len = 1 + self.c.below(4) as u32;
            buffers.push(gen_buffer(self.c, elem, len as usize));
            let var = Var::new("cnt", Type::ptr(AddrSpace::Global, elem));
            params.push((var.clone(), Arg::Buffer(buffers.len() - 1)));
            let op = self.pick(&[
                AtomicOp::Add,
                AtomicOp::Sub,
                AtomicOp::Min,
                AtomicOp::Max,
                AtomicOp::And,
                AtomicOp::Or,
                AtomicOp::Xor,
            ]);
            self.mems.push(MemVar { var, len, kind: MemKind::Counter { op } });
        }
        for i in 0..self.c.below(3) {
            let ty = self.pick(&ARITH);
            let var = Var::new(format!("s{i}"), Type::Scalar(ty));
            params.push((var.clone(), Arg::Scalar(gen_imm(self.c, ty))));
            self.bind(&var, true, false);
        }
        let rot = self.c.below(params.len());
        params.rotate_left(rot);

        // Prologue: local arrays, then the linear ids.
        let mut body = Vec::new();
        if cfg.local_arrays {
            for i in 0..self.c.below(3) {
                let elem = self.pick(&types);
                let k = 1 + self.c.below(2) as u32;
                let var = Var::new(format!("tile{i}"), Type::ptr(AddrSpace::Local, elem));
                body.push(Stmt::alloc(&var, group_size * k));
                let id = self.phases.len();
                self.phases.push(if self.c.chance(30) { Phase::Shared } else { Phase::Own });
                self.mems.push(MemVar { var, len: group_size * k, kind: MemKind::Local { k, id } });
            }
        }
        let lin = Var::new("lin", Type::U32);
        let llin = Var::new("llin", Type::U32);
        body.push(Stmt::let_(&lin, self.linear_id(range.dims)));
        body.push(Stmt::let_(&llin, Gen::local_linear_id(range.dims)));
        self.bind(&lin, false, false);
        self.bind(&llin, false, false);
        self.lin = Some(lin);
        self.llin = Some(llin);

        let n = 1 + self.c.below(cfg.max_stmts.max(1));
        for _ in 0..n {
            if self.stmts_left == 0 {
                break;
            }
            self.stmt(&mut body);
        }

        // Epilogue: make a few top-level values observable.
        let outs: Vec<MemVar> =
            self.mems.iter().filter(|m| matches!(m.kind, MemKind::Out { .. })).cloned().collect();
        let values: Vec<Var> = self
            .scope
            .iter()
            .filter(|b| !["lin", "llin"].contains(&b.var.name()))
            .map(|b| b.var.clone())
            .collect();
        for v in values.iter().rev().take(2) {
            let m = outs[self.c.below(outs.len())].clone();
            let index = self.read_index(&m, 1, false);
            out_store(&mut body, &m, index, v);
        }

        let attrs = Attrs {
            reqd_work_group_size: if self.c.chance(20) { Some(local) } else { None },
            fast_math: false,
            ..Attrs::default()
        };
        let name = format!("k{}", self.c.below(1000));
        let (vars, args): (Vec<Var>, Vec<Arg>) = params.into_iter().unzip();
        TestCase {
            kernel: Kernel::with_attrs(name, vars, attrs, Stmt::block(body)),
            range,
            args,
            buffers,
        }
    }

    /// An expression over the environment's variables and buffers.
    pub(super) fn env_expr(&mut self, env: &ExprEnv, ty: Scalar, depth: u32) -> Expr {
        for v in &env.vars {
            self.bind(v, false, false);
        }
        for (v, len) in &env.buffers {
            if v.ty().is_ptr() && *len > 0 {
                self.mems.push(MemVar { var: v.clone(), len: *len, kind: MemKind::Input });
            }
        }
        if ty.is_storage_float() {
            self.storage_expr(ty, depth, false)
        } else {
            self.expr(ty, depth, false)
        }
    }
}

fn out_store(body: &mut Vec<Stmt>, m: &MemVar, index: Expr, v: &Var) {
    let elem = m.elem();
    let value = if v.ty() == Type::Scalar(elem) { v.expr() } else { v.expr().cast(elem) };
    body.push(Stmt::store(&m.var, index, value));
}
