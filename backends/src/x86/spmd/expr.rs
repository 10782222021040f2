//! Expressions and conditions of the vector code: what their lanes are ([`Kind`]), how
//! many registers they need, and their code.

use std::collections::HashSet;

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Builtin, Expr, ExprNode, Intrinsic, Scalar, Stmt, StmtNode, Type};

use super::{lane_type, no, scalar, uniform, Kind, Loc, GID, R, TEMPS, V, XMM, YMM};
use crate::x86::gen::Site;
use crate::x86::rt;

/// True if `e` has an integer `/` or `%` (which the GPR code does by a constant, the lane
/// code only for u32 uniform values).
fn has_div(e: &Expr) -> bool {
    match e.node() {
        ExprNode::Binary { op: BinOp::Div | BinOp::Rem, a, .. } if a.ty() != Type::F32 => true,
        ExprNode::Binary { a, b, .. } => has_div(a) || has_div(b),
        ExprNode::Unary { a, .. } => has_div(a),
        _ => desugar(e).is_some_and(|d| has_div(&d)),
    }
}

/// The context field of a built-in's dimension 0 (dimension `d` is `8 * d` further).
pub(super) fn builtin_field(kind: Builtin) -> i32 {
    match kind {
        Builtin::GlobalId => rt::OFF_GLOBAL_ID,
        Builtin::LocalId => rt::OFF_LOCAL_ID,
        Builtin::GroupId => rt::OFF_GROUP_ID,
        Builtin::GlobalSize => rt::OFF_GLOBAL_SIZE,
        Builtin::LocalSize => rt::OFF_LOCAL_SIZE,
        Builtin::NumGroups => rt::OFF_NUM_GROUPS,
        Builtin::GlobalOffset => rt::OFF_OFFSET,
    }
}

/// An instruction's second source: a register or a 32-byte memory operand.
pub(super) enum Src {
    Reg(usize),
    Mem(AsmMemoryOperand),
}

/// `mad(a, b, c)` and `add3(a, b, c)` on i32/u32 (and the 8/16-bit integers) as the
/// wrapping `a * b + c` and `a + b + c` they are (the `-O` pipeline makes them from index
/// arithmetic).
pub(super) fn desugar(e: &Expr) -> Option<Expr> {
    let ExprNode::Intrinsic { op, args } = e.node() else { return None };
    let int = matches!(e.ty(), Type::Scalar(Scalar::I32 | Scalar::U32 | Scalar::I64 | Scalar::U64))
        || super::narrow::narrow(e.ty()).is_some_and(|_| e.ty() != Type::F16);
    if !int || args.len() != 3 {
        return None;
    }
    let (a, b, c) = (args[0].clone(), args[1].clone(), args[2].clone());
    match op {
        Intrinsic::Mad => Some(Expr::binary(BinOp::Add, Expr::binary(BinOp::Mul, a, b), c)),
        Intrinsic::Add3 => Some(Expr::binary(BinOp::Add, Expr::binary(BinOp::Add, a, b), c)),
        _ => None,
    }
}

/// The names bound only by `let`s of `global_id(0)` (or of such names): accesses at them
/// are the unchecked, span-checked kind.
pub(super) fn gid0_names(stmts: &[Stmt]) -> HashSet<String> {
    let mut yes = HashSet::new();
    let mut not = HashSet::new();
    fn walk(stmts: &[Stmt], yes: &mut HashSet<String>, not: &mut HashSet<String>) {
        for s in stmts {
            match s.node() {
                StmtNode::Let { var, value } => {
                    let g = match value.node() {
                        ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 } => true,
                        ExprNode::Var(v) => yes.contains(v.name()) && !not.contains(v.name()),
                        _ => false,
                    };
                    if g {
                        yes.insert(var.name().to_string());
                    } else {
                        not.insert(var.name().to_string());
                    }
                }
                StmtNode::Decl { var, .. } | StmtNode::For { var, .. } => {
                    not.insert(var.name().to_string());
                }
                StmtNode::Call { result: Some(r), .. } => {
                    not.insert(r.name().to_string());
                }
                _ => {}
            }
            match s.node() {
                StmtNode::If { then, otherwise, .. } => {
                    walk(then.stmts(), yes, not);
                    if let Some(o) = otherwise {
                        walk(o.stmts(), yes, not);
                    }
                }
                StmtNode::For { body, .. } | StmtNode::While { body, .. } => {
                    walk(body.stmts(), yes, not)
                }
                StmtNode::Block(v) => walk(v, yes, not),
                _ => {}
            }
        }
    }
    walk(stmts, &mut yes, &mut not);
    yes.retain(|n| !not.contains(n));
    yes
}

/// True if `e` is `global_id(0)` or one of `names`.
fn is_gid0_syntax(e: &Expr, names: &HashSet<String>) -> bool {
    match e.node() {
        ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 } => true,
        ExprNode::Var(v) => names.contains(v.name()),
        _ => false,
    }
}

/// True if `e` has a load at an index other than `global_id(0)` or an integer division
/// (what can fault).
pub(super) fn has_checked_load(e: &Expr, names: &HashSet<String>) -> bool {
    match e.node() {
        ExprNode::Load { index, .. } => {
            !is_gid0_syntax(index, names) || has_checked_load(index, names)
        }
        // Integer division can fault too.
        ExprNode::Binary { op: BinOp::Div | BinOp::Rem, a, .. } if a.ty() != Type::F32 => true,
        ExprNode::Binary { a, b, .. } => has_checked_load(a, names) || has_checked_load(b, names),
        ExprNode::Unary { a, .. } | ExprNode::Cast { a, .. } => has_checked_load(a, names),
        ExprNode::Intrinsic { args, .. } => args.iter().any(|a| has_checked_load(a, names)),
        ExprNode::Select { cond, a, b } => [cond, a, b].iter().any(|x| has_checked_load(x, names)),
        // Other nodes are outside the class (the kernel gets no vector code).
        _ => false,
    }
}

/// True if the body has loops or accesses other than at exactly `global_id(0)`: lanes can
/// fault or run long, so the code keeps the alive mask.
pub(super) fn needs_alive(stmts: &[Stmt], names: &HashSet<String>) -> bool {
    needs_alive_but(stmts, names, &|_| false)
}

/// [`needs_alive`], where an atomic whose arguments `unchecked` accepts (its index needs no
/// check) and whose other operands cannot fault cannot fault either.
pub(super) fn needs_alive_but(
    stmts: &[Stmt],
    names: &HashSet<String>,
    unchecked: &dyn Fn(&[Expr]) -> bool,
) -> bool {
    stmts.iter().any(|s| match s.node() {
        StmtNode::For { .. } | StmtNode::While { .. } => true,
        StmtNode::Store { index, value, .. } => {
            !is_gid0_syntax(index, names)
                || has_checked_load(index, names)
                || has_checked_load(value, names)
        }
        StmtNode::Let { value: e, .. }
        | StmtNode::Decl { init: e, .. }
        | StmtNode::Assign { value: e, .. } => has_checked_load(e, names),
        StmtNode::If { cond, then, otherwise } => {
            has_checked_load(cond, names)
                || needs_alive_but(then.stmts(), names, unchecked)
                || otherwise.as_ref().is_some_and(|o| needs_alive_but(o.stmts(), names, unchecked))
        }
        StmtNode::Block(v) => needs_alive_but(v, names, unchecked),
        // Atomics check their indices.
        StmtNode::Call { func, args, .. } => {
            matches!(func.kind(), kiln_ir::FuncKind::Atomic(_))
                && !(unchecked(args) && args.iter().all(|a| !has_checked_load(a, names)))
        }
        _ => false,
    })
}

/// How far ahead of a region batch's load at `global_id(0)` its buffer is prefetched, in
/// bytes: 32 groups of 64 `f32`s. On the 2-core development VM (one thread, the reduction
/// of `examples/reduce.kir`) 1 KB ahead gave 4.4 ms at 2^24 elements, 4 KB 2.9 ms, 8 KB
/// 2.7 ms, 16 KB 2.7 ms (none: 5.3 ms); at 2^22 (in the last-level cache) 8 KB and 4 KB
/// 0.60 ms, 16 KB 0.66 ms.
pub(super) const PREFETCH_AHEAD: i32 = 8192;

impl V {
    /// What `e`'s lanes are (assuming it is in the class).
    pub(super) fn kind(&self, e: &Expr) -> Kind {
        if let Some(d) = desugar(e) {
            return self.kind(&d);
        }
        match e.node() {
            ExprNode::Imm(_) => Kind::Uniform,
            ExprNode::Var(v) => match self.find(v.name()) {
                Some(b) => b.kind,
                None if self.param(v).is_some() => Kind::Uniform,
                None => Kind::Div,
            },
            ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 } => Kind::Gid0,
            ExprNode::Builtin { kind: Builtin::LocalId, dim: 0 } => Kind::Contig,
            ExprNode::Builtin { .. } => Kind::Uniform,
            ExprNode::Binary { op, a, b } if !op.is_comparison() => {
                let (ka, kb) = (self.kind(a), self.kind(b));
                let int = matches!(e.ty(), Type::Scalar(Scalar::I32 | Scalar::U32));
                let contig = |k: Kind| matches!(k, Kind::Gid0 | Kind::Contig);
                if ka == Kind::Uniform && kb == Kind::Uniform {
                    Kind::Uniform
                } else if int
                    && ((*op == BinOp::Add
                        && ((contig(ka) && kb == Kind::Uniform)
                            || (ka == Kind::Uniform && contig(kb))))
                        || (*op == BinOp::Sub && contig(ka) && kb == Kind::Uniform))
                {
                    Kind::Contig
                } else {
                    Kind::Div
                }
            }
            // (Each lane has its own private array.) Only 32-bit loads broadcast one element to
            // every lane; narrower and 64-bit ones fill the active lanes alone, so their
            // inactive lanes would not hold the value that uniform code (a division in a
            // general-purpose register, say) reads from lane 0.
            ExprNode::Load { buf, index }
                if self.kind(index) == Kind::Uniform
                    && self.private(buf).is_none()
                    && e.ty().scalar().is_some_and(|s| s.bits() == 32) =>
            {
                Kind::Uniform
            }
            // Anything else of uniform operands (see `uniform::uniform`).
            ExprNode::Binary { .. }
            | ExprNode::Unary { .. }
            | ExprNode::Cast { .. }
            | ExprNode::Select { .. }
            | ExprNode::Intrinsic { .. }
                if uniform::operands(e).iter().all(|x| self.kind(x) == Kind::Uniform) =>
            {
                Kind::Uniform
            }
            _ => Kind::Div,
        }
    }

    /// True if condition `e` is the same in every lane.
    pub(super) fn uniform_cond(&self, e: &Expr) -> bool {
        // Buffer parameters and local arrays: the same memory in every lane.
        uniform::uniform_cond(e, &|n| {
            self.find(n).map_or(
                self.params.iter().any(|p| p.0 == n) || self.bufs.iter().any(|b| b.0 == n),
                |b| b.kind == Kind::Uniform,
            )
        })
    }

    /// True if `e` is fixed for a whole call (computed once before the loop): constants,
    /// parameters, ids and sizes other than `global_id(0)` and `local_id(0)`, and lets of
    /// those; no loads.
    pub(super) fn invariant(&self, e: &Expr) -> bool {
        if let Some(d) = desugar(e) {
            return self.invariant(&d);
        }
        match e.node() {
            ExprNode::Imm(_) => true,
            // (In the loop body a uniform `let` already in lanes counts too: what matters
            // there is that its lanes need no broadcast.)
            ExprNode::Var(v) => match self.find(v.name()) {
                Some(b) => {
                    b.kind == Kind::Uniform && b.decl.is_none() && !matches!(b.loc, Loc::Scalar(_))
                }
                None => self.param(v).is_some(),
            },
            ExprNode::Builtin { kind: Builtin::GlobalId | Builtin::LocalId, dim: 0 } => false,
            ExprNode::Builtin { kind: Builtin::GroupId, dim: 0 } => false,
            ExprNode::Builtin { .. } => true,
            // A division that can fault is computed in the batch loop, where faults are
            // reported.
            ExprNode::Binary { op: BinOp::Div | BinOp::Rem, a, b }
                if a.ty() != Type::F32 && !scalar::safe_divisor_expr(b) =>
            {
                false
            }
            ExprNode::Binary { op, a, b } => {
                !op.is_comparison() && self.invariant(a) && self.invariant(b)
            }
            ExprNode::Unary { .. } | ExprNode::Cast { .. } | ExprNode::Intrinsic { .. }
                if e.ty() != Type::BOOL =>
            {
                uniform::operands(e).iter().all(|x| x.ty() != Type::BOOL && self.invariant(x))
            }
            _ => false,
        }
    }

    /// True if `a` must be evaluated before `b` (both can fault: the interpreter reports
    /// the left one's fault first when one lane has both). [`V::need`] counts the registers
    /// of that order for such operands.
    pub(super) fn in_order(&self, a: &Expr, b: &Expr) -> bool {
        self.may_fault(a) && self.may_fault(b)
    }

    /// True if computing `e` can fault: a checked load (any but at exactly
    /// `global_id(0)`) or an integer division by anything but a safe constant.
    fn may_fault(&self, e: &Expr) -> bool {
        if let Some(d) = desugar(e) {
            return self.may_fault(&d);
        }
        match e.node() {
            ExprNode::Load { buf, index } => {
                self.kind(index) != Kind::Gid0
                    || self.private(buf).is_some()
                    || self.may_fault(index)
            }
            ExprNode::Binary { op: BinOp::Div | BinOp::Rem, a, b }
                if a.ty() != Type::F32 && !scalar::safe_divisor_expr(b) =>
            {
                true
            }
            _ => uniform::operands(e).iter().any(|x| self.may_fault(x)),
        }
    }

    /// True if `e` can be an instruction's second source as it is.
    pub(super) fn is_leaf(&self, e: &Expr) -> bool {
        match e.node() {
            // A GPR value is broadcast into a register first.
            ExprNode::Var(v) => {
                !matches!(self.find(v.name()), Some(b) if matches!(b.loc, Loc::Scalar(_)))
            }
            ExprNode::Imm(_) => true,
            ExprNode::Builtin { kind: Builtin::LocalId, dim: 0 } => false,
            ExprNode::Builtin { .. } => true,
            ExprNode::Load { buf, index } => {
                (self.kind(index) == Kind::Gid0 && self.private(buf).is_none() && lane_type(e.ty()))
                    || self.blocked_load(buf, index).is_some()
            }
            _ => false,
        }
    }

    /// Registers needed to compute `e` into a register (Sethi-Ullman).
    pub(super) fn need(&self, e: &Expr) -> usize {
        // A 64-bit operand of a 32-bit node (a cast to f16, say) takes two registers: the
        // rules below count one per value.
        if super::wide64::is_64(e.ty()) {
            return self.need64(e);
        }
        if let Some(d) = desugar(e) {
            return self.need(&d);
        }
        if let Some(n) = self.need_from64(e) {
            return n;
        }
        if let Some((op, a)) = super::math::lanes_math(e) {
            return self.need(a).max(super::math::need(op));
        }
        if e.ty() == Type::BOOL {
            return self.need_cond(e);
        }
        if let Some(n) = self.need_narrow(e) {
            return n;
        }
        if let Some(n) = self.need_op(e) {
            return n;
        }
        match e.node() {
            ExprNode::Binary { op, a, b } if op.is_comparison() || op.is_logical() => {
                self.need_cond(e)
            }
            ExprNode::Binary { op: BinOp::Div | BinOp::Rem, a, b } if a.ty() != Type::F32 => {
                self.need(a).max(self.need(b) + 1).max(3)
            }
            ExprNode::Binary { op: BinOp::Shl | BinOp::Shr, a, b } if !self.in_order(a, b) => {
                self.need(a).max(self.need(b)).max(self.need(a).min(self.need(b)) + 1)
            }
            ExprNode::Binary { op: BinOp::Shl | BinOp::Shr, a, b } => {
                self.need(a).max(self.need(b) + 1)
            }
            ExprNode::Binary { a, b, .. } if self.is_leaf(b) => self.need(a).max(1),
            ExprNode::Binary { a, b, .. } if self.in_order(a, b) => {
                self.need(a).max(self.need(b) + 1)
            }
            // The deeper operand first (see `binary`): a chain like Horner's
            // `k * (c0 + k * (c1 + ...))` needs two registers at any depth.
            ExprNode::Binary { a, b, .. } => {
                let (na, nb) = (self.need(a), self.need(b));
                na.max(nb).max(na.min(nb) + 1)
            }
            ExprNode::Load { index, .. } if !self.is_leaf(e) => self.need(index).max(3),
            _ => 1,
        }
    }

    /// Registers needed to compute condition `e` into a lane mask.
    pub(super) fn need_cond(&self, e: &Expr) -> usize {
        if let Some(n) = self.need_from64(e) {
            return n;
        }
        if let Some(n) = self.need_op_cond(e) {
            return n;
        }
        match e.node() {
            ExprNode::Binary { op, a, b } if op.is_comparison() => {
                self.need(a).max(self.need(b) + 1)
            }
            ExprNode::Binary { a, b, .. } => self.need_cond(a).max(self.need_cond(b) + 1),
            ExprNode::Unary { a, .. } => self.need_cond(a),
            _ => 1,
        }
    }

    /// `e` (a leaf) as a second source.
    pub(super) fn src(&mut self, e: &Expr) -> R<Src> {
        Ok(match e.node() {
            ExprNode::Var(v) => match self.find(v.name()) {
                Some(b) => match b.loc {
                    Loc::Reg(r) => Src::Reg(r),
                    Loc::Slot(off) => Src::Mem(ymmword_ptr(r15 + off)),
                    Loc::Scalar(_) => return no(format!("internal: `{}` is no leaf", v.name())),
                },
                None => match self.param(v) {
                    Some(slot) => {
                        // (An 8/16-bit or f16 parameter's slot holds its canonical bits.)
                        if !lane_type(e.ty()) && super::narrow::narrow(e.ty()).is_none() {
                            return no(format!("parameter `{}` of type {}", v.name(), e.ty()));
                        }
                        let off = self.const_slot((slot as u64, 1));
                        Src::Mem(ymmword_ptr(r15 + off))
                    }
                    None => return no(format!("`{}` of type {}", v.name(), e.ty())),
                },
            },
            ExprNode::Imm(i) => {
                // (Narrow integers: their canonical bits, cut to the lane.)
                if !lane_type(e.ty()) && super::narrow::narrow(e.ty()).is_none() {
                    return no(format!("a constant of type {}", e.ty()));
                }
                let bits = rt::bits_of(kiln_ir::eval::cast(i.scalar(), *i));
                Src::Mem(ymmword_ptr(r15 + self.imm_slot(bits as u32)))
            }
            ExprNode::Load { buf, index } => match self.blocked_load(buf, index) {
                Some(m) => Src::Mem(m),
                None => {
                    let t = self.buf_of(buf, e.ty())?;
                    let b = self.element_base(t)?;
                    if self.regions.is_some() || self.counting() {
                        // Region code streams its groups' `x[global_id(0)]` with a few
                        // hundred instructions per group between the loads: too few
                        // groups' loads in flight for the memory's latency (a reduction at
                        // 2^24 elements read 6 GB/s on one core), so the lines a few groups
                        // ahead are asked for now. A prefetch never faults, past the end
                        // of a buffer included, and changes no value. The counting program
                        // (`counted.rs`) is in the same case: eight read-modify-writes a
                        // batch fill the store buffer long before the loads' lines arrive.
                        self.a.prefetcht0(byte_ptr(b + rbx * 4 + PREFETCH_AHEAD))?;
                    }
                    // (What `element` addresses, from the base loaded once.)
                    Src::Mem(ymmword_ptr(b + rbx * 4))
                }
            },
            ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 } => Src::Reg(GID),
            ExprNode::Builtin { kind, dim } => {
                let field = builtin_field(*kind);
                if *kind == Builtin::GroupId && *dim == 0 {
                    self.per_group = true;
                }
                let off = self.const_slot(((field + 8 * *dim as i32) as u64, 2));
                Src::Mem(ymmword_ptr(r15 + off))
            }
            _ => return no(format!("`{e}`")),
        })
    }

    /// Evaluates a statement's `e` into `ymm{d}` (`ymm0..ymm{d-1}` holding values), in deep
    /// mode if it needs more temporaries than there are (`spill.rs`).
    pub(super) fn expr_top(&mut self, e: &Expr, d: usize) -> R<()> {
        let deep = d + self.need(e) > TEMPS;
        self.deep_if(deep, |v| v.expr(e, d))
    }

    /// Evaluates `e` into `ymm{d}`, with `ymm{d+1}..` as temporaries.
    pub(super) fn expr(&mut self, e: &Expr, d: usize) -> R<()> {
        if self.must_spill(d, |v| v.need(e)) {
            return self.spilled(d, 1, |v| v.expr(e, 0));
        }
        if d >= TEMPS {
            // (`need` counts what this takes: never reached, but never a let register.)
            return no("internal: out of expression registers");
        }
        if let Some(r) = self.from64(e, d) {
            return r;
        }
        if super::wide64::is_64(e.ty()) {
            return no(format!("`{e}` ({}) where a 32-bit lane value is needed", e.ty()));
        }
        if e.ty() == Type::BOOL {
            // A lane mask.
            return self.cond(e, d);
        }
        if let Some(r) = self.narrow_expr(e, d) {
            return r;
        }
        if !lane_type(e.ty()) && super::narrow::narrow(e.ty()).is_none() {
            return no(format!("a value of type {}", e.ty()));
        }
        if let Some(plain) = desugar(e) {
            return self.expr(&plain, d);
        }
        if let Some((op, a)) = super::math::lanes_math(e) {
            return self.math(e, op, a, d);
        }
        match e.node() {
            ExprNode::Var(v) => {
                if let Some(Loc::Scalar(off)) = self.find(v.name()).map(|b| b.loc) {
                    // A uniform value meeting divergent ones: broadcast from its dword.
                    match self.home(off) {
                        Some(r) => {
                            self.a.vmovd(XMM[d], r)?;
                            self.a.vpbroadcastd(YMM[d], XMM[d])?;
                        }
                        None => self.a.vpbroadcastd(YMM[d], dword_ptr(r15 + off))?,
                    }
                    return Ok(());
                }
            }
            ExprNode::Binary { .. } if self.gpr_ok(e) && (!self.invariant(e) || has_div(e)) => {
                // Uniform index arithmetic that changes within a call (loop counters,
                // uniform `var`s): computed in a GPR, then broadcast. (Values fixed for the
                // call take the lane code below, on operands broadcast once per call.)
                self.gpr(e)?;
                self.a.vmovd(XMM[d], eax)?;
                self.a.vpbroadcastd(YMM[d], XMM[d])?;
                return Ok(());
            }
            ExprNode::Binary { op: op @ (BinOp::Div | BinOp::Rem), a, b }
                if a.ty() == Type::U32
                    && self.kind(a) == Kind::Uniform
                    && self.kind(b) == Kind::Uniform =>
            {
                return self.uniform_div(e, *op == BinOp::Rem, a, b, d);
            }
            ExprNode::Binary { op: BinOp::Div | BinOp::Rem, a, .. } if a.ty() != Type::F32 => {
                return self.op_expr(e, d);
            }
            ExprNode::Binary { op, a, b } => return self.binary(*op, a, b, d),
            ExprNode::Select { .. }
            | ExprNode::Unary { .. }
            | ExprNode::Cast { .. }
            | ExprNode::Intrinsic { .. } => return self.op_expr(e, d),
            ExprNode::Load { buf, index } if !self.is_leaf(e) => {
                if let Some(p) = self.private(buf) {
                    return self.load_private(&p, index, e.ty(), d);
                }
                return self.load(buf, index, e.ty(), d);
            }
            ExprNode::Builtin { kind: Builtin::LocalId, dim: 0 } => return self.lid_lanes(d),
            _ => {}
        }
        match self.src(e)? {
            Src::Reg(r) if r == d => {}
            Src::Reg(r) => self.a.vmovaps(YMM[d], YMM[r])?,
            Src::Mem(m) => self.a.vmovups(YMM[d], m)?,
        }
        Ok(())
    }

    pub(super) fn binary(&mut self, op: BinOp, a: &Expr, b: &Expr, d: usize) -> R<()> {
        let float = a.ty() == Type::F32;
        if matches!(op, BinOp::Shl | BinOp::Shr) && !float {
            if let Some(c) = super::narrow::const_count(b) {
                // A constant count: an immediate shift, modulo 32 here.
                let (x, y) = (YMM[d], self.operand_reg(a, d)?);
                match (op, a.ty() == Type::I32) {
                    (BinOp::Shl, _) => self.a.vpslld(x, y, c & 31)?,
                    (_, true) => self.a.vpsrad(x, y, c & 31)?,
                    _ => self.a.vpsrld(x, y, c & 31)?,
                }
                return Ok(());
            }
            // Per-lane counts, taken modulo 32 as the interpreter does.
            let (ra, rb) = self.pair(a, b, d)?;
            let m31 = self.imm_slot(31);
            let (x, y, z) = (YMM[d], YMM[ra], YMM[rb]);
            self.a.vpand(z, z, ymmword_ptr(r15 + m31))?;
            match (op, a.ty() == Type::I32) {
                (BinOp::Shl, _) => self.a.vpsllvd(x, y, z)?,
                (_, true) => self.a.vpsravd(x, y, z)?,
                _ => self.a.vpsrlvd(x, y, z)?,
            }
            return Ok(());
        }
        let ok = match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul => true,
            BinOp::Div => float,
            BinOp::And | BinOp::Or | BinOp::Xor => !float,
            _ => false,
        };
        if !ok {
            return no(format!("`{}` on {}", op.symbol(), a.ty()));
        }
        if op == BinOp::Mul && !float && self.mul_by_shift(a, b, d)? {
            return Ok(());
        }
        // (first source register, second source); the result goes to ymm{d}. A left
        // operand already in a register (a `let` or `var` there, `global_id(0)`) is the
        // instruction's first source as it is, not copied first.
        let (first, s) = if let Some(r) = self.src_if_reg(a) {
            if self.is_leaf(b) {
                (r, self.src(b)?)
            } else {
                self.expr(b, d)?;
                (r, Src::Reg(d))
            }
        } else if self.is_leaf(b) {
            self.expr(a, d)?;
            (d, self.src(b)?)
        } else if self.need(a) >= self.need(b) || self.in_order(a, b) {
            self.expr(a, d)?;
            self.expr(b, d + 1)?;
            (d, Src::Reg(d + 1))
        } else {
            // The deeper operand first, so that neither needs more than `need(e)`.
            self.expr(b, d)?;
            self.expr(a, d + 1)?;
            (d + 1, Src::Reg(d))
        };
        let (x, y) = (YMM[d], YMM[first]);
        let m = match s {
            Src::Reg(r) => {
                let r = YMM[r];
                match (op, float) {
                    (BinOp::Add, true) => self.a.vaddps(x, y, r)?,
                    (BinOp::Sub, true) => self.a.vsubps(x, y, r)?,
                    (BinOp::Mul, true) => self.a.vmulps(x, y, r)?,
                    (BinOp::Div, true) => self.a.vdivps(x, y, r)?,
                    (BinOp::Add, false) => self.a.vpaddd(x, y, r)?,
                    (BinOp::Sub, false) => self.a.vpsubd(x, y, r)?,
                    (BinOp::And, _) => self.a.vpand(x, y, r)?,
                    (BinOp::Or, _) => self.a.vpor(x, y, r)?,
                    (BinOp::Xor, _) => self.a.vpxor(x, y, r)?,
                    _ => self.a.vpmulld(x, y, r)?,
                }
                return Ok(());
            }
            Src::Mem(m) => m,
        };
        match (op, float) {
            (BinOp::Add, true) => self.a.vaddps(x, y, m)?,
            (BinOp::Sub, true) => self.a.vsubps(x, y, m)?,
            (BinOp::Mul, true) => self.a.vmulps(x, y, m)?,
            (BinOp::Div, true) => self.a.vdivps(x, y, m)?,
            (BinOp::Add, false) => self.a.vpaddd(x, y, m)?,
            (BinOp::Sub, false) => self.a.vpsubd(x, y, m)?,
            (BinOp::And, _) => self.a.vpand(x, y, m)?,
            (BinOp::Or, _) => self.a.vpor(x, y, m)?,
            (BinOp::Xor, _) => self.a.vpxor(x, y, m)?,
            _ => self.a.vpmulld(x, y, m)?,
        }
        Ok(())
    }

    /// A u32 `/` or `%` of uniform values (`ymm{d}`..`ymm{d+2}`): one `div` for all lanes;
    /// a zero divisor is an error of the lowest active lane (with no lane active, nothing
    /// is computed).
    fn uniform_div(&mut self, e: &Expr, rem: bool, a: &Expr, b: &Expr, d: usize) -> R<()> {
        let (ra, rb) = self.pair(a, b, d)?;
        let mut ok = self.a.create_label();
        let mut zero = self.a.create_label();
        let mut end = self.a.create_label();
        self.a.vmovd(r10d, XMM[rb])?;
        self.a.test(r10d, r10d)?;
        self.a.jne(ok)?;
        self.active(d + 2)?;
        self.a.vptest(YMM[d + 2], YMM[d + 2])?;
        self.a.je(zero)?;
        let site = Site::Div { rem, expr: e.fault_site() };
        self.fault_stub(rb, d + 2, d + 2, rt::ERR_DIV_ZERO, site, false, Some(zero))?;
        self.bind(&mut ok)?;
        self.a.vmovd(eax, XMM[ra])?;
        // rdx may hold a buffer base.
        self.a.push(rdx)?;
        self.a.xor(edx, edx)?;
        self.a.div(r10d)?;
        if rem {
            self.a.mov(eax, edx)?;
        }
        self.a.pop(rdx)?;
        self.a.vmovd(XMM[d], eax)?;
        self.a.vpbroadcastd(YMM[d], XMM[d])?;
        self.a.jmp(end)?;
        self.bind(&mut zero)?;
        self.a.vpxor(YMM[d], YMM[d], YMM[d])?;
        self.bind(&mut end)
    }

    /// `e` in a register without a copy: the `let` register or `global_id(0)`'s that holds
    /// it, else `ymm{d}` computed.
    pub(super) fn operand_reg(&mut self, e: &Expr, d: usize) -> R<AsmRegisterYmm> {
        match self.src_if_reg(e) {
            Some(r) => Ok(YMM[r]),
            None => {
                self.expr(e, d)?;
                Ok(YMM[d])
            }
        }
    }

    /// Evaluates `a` and `b` into registers (the deeper first); returns their registers,
    /// one of them `ymm{d}`.
    pub(super) fn pair(&mut self, a: &Expr, b: &Expr, d: usize) -> R<(usize, usize)> {
        if self.need(a) >= self.need(b) || self.in_order(a, b) {
            self.expr(a, d)?;
            self.expr(b, d + 1)?;
            Ok((d, d + 1))
        } else {
            self.expr(b, d)?;
            self.expr(a, d + 1)?;
            Ok((d + 1, d))
        }
    }
}

impl V {
    /// `local_id(0)`'s lanes into `YMM[d]`: `global_id(0)` minus the group's first.
    pub(super) fn lid_lanes(&mut self, d: usize) -> R<()> {
        self.per_group = true;
        let base = self.const_slot((rt::OFF_BASE as u64, 2));
        self.a.vpsubd(YMM[d], YMM[GID], ymmword_ptr(r15 + base))?;
        Ok(())
    }
}
