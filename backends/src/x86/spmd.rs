//! SPMD over 8 AVX2 lanes, for a deliberately small class of kernels: elementwise code
//! where every work-item touches only element `global_id(0)` of each buffer.
//!
//! A kernel qualifies when its body is only `let`s, stores and `if`/`else` (divergent
//! conditions included), its values are `f32`, `i32` or `u32` (`+ - *`, and `/` on f32), its
//! operands are scalar parameters, constants, `global_id(0)` and those `let`s, its
//! conditions are comparisons of such values (and `!`, `&&`, `||` of them), and every load
//! and store indexes a global buffer with exactly `global_id(0)` (directly or through a
//! `let` of it). Then eight consecutive work-items of a row run at once: every value in one
//! YMM register per 8 lanes (uniform values are broadcast), loads and stores as unaligned
//! 8-wide moves, an `if` as a lane mask (stores under it are masked stores; a branch no
//! lane takes is jumped over, so a uniform branch costs a test and a jump). Top-level
//! `let`s that the divergence analysis (`kiln_passes::divergence`) calls uniform are
//! computed once per row, before the batch loop.
//!
//! Why this is exact, not just usually right: each work-item touches element `global_id(0)`
//! only, so two lanes of a batch never touch the same element, and work-items sharing an
//! element (same `x`, other rows) still run in the interpreter's order (rows in order); f32
//! lane arithmetic and comparisons are the same IEEE operations as the scalar ones (quiet
//! predicates, false on NaN except `!=`); integer lanes wrap at 32 bits as the scalar code
//! does. `let`s under a branch are computed in every lane: they are pure and, in this class,
//! cannot fault, and only the masked stores have effects. There is no fault to report in
//! the middle of a batch: the driver runs a work-group this way only if `global_id(0)` of
//! its last work-item is within every accessed buffer (else the scalar code runs it and
//! reports what the interpreter reports), and nothing else in the class can fault.
//!
//! Everything else (loops, barriers, atomics, arrays, other types or indices, gathers) runs
//! on the scalar code; so does every kernel on CPUs without AVX2.

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Builtin, Expr, ExprNode, Kernel, Scalar, Stmt, StmtNode, Type, UnOp, Var};

use super::gen::AsmResult;
use super::rt;

/// A qualifying kernel's vector code, before assembly.
pub(crate) struct Spmd {
    pub asm: CodeAssembler,
    /// Bytes of the vector frame (the lane-index constant, then one 32-byte slot per `let`).
    pub vframe_bytes: usize,
    /// Memory-table entries the code loads or stores (the driver checks their lengths).
    pub accessed: Vec<u32>,
}

/// The lane-index constant `[0, 1, ..., 7]` at the start of the vector frame.
pub(crate) const IOTA: [u32; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

struct V {
    a: CodeAssembler,
    /// (name, vector slot offset) of each `let`; whether it is `global_id(0)`.
    lets: Vec<(String, i32, bool)>,
    next: i32,
    /// Scalar parameters: name, frame slot.
    params: Vec<(String, i32)>,
    /// Pointer parameters: name, table index.
    bufs: Vec<(String, u32)>,
    accessed: Vec<u32>,
    /// Top-level `let`s the divergence analysis calls uniform: computed once per row, before
    /// the batch loop (statement addresses).
    hoisted: Vec<usize>,
}

fn lane_type(t: Type) -> bool {
    matches!(t.scalar(), Some(Scalar::F32 | Scalar::I32 | Scalar::U32))
}

impl V {
    fn let_of(&self, v: &Var) -> Option<&(String, i32, bool)> {
        self.lets.iter().rev().find(|(n, _, _)| n == v.name())
    }

    /// True if `e` is `global_id(0)` or a `let` of it.
    fn is_gid0(&self, e: &Expr) -> bool {
        match e.node() {
            ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 } => true,
            ExprNode::Var(v) => self.let_of(v).is_some_and(|l| l.2),
            _ => false,
        }
    }

    fn buf(&self, v: &Var) -> Option<u32> {
        self.bufs.iter().find(|(n, _)| n == v.name()).map(|b| b.1)
    }

    /// True if `e` is in the class (see the module docs).
    fn qualifies(&self, e: &Expr) -> bool {
        if !lane_type(e.ty()) {
            return false;
        }
        match e.node() {
            ExprNode::Var(v) => {
                self.let_of(v).is_some() || self.params.iter().any(|(n, _)| n == v.name())
            }
            ExprNode::Imm(_) => true,
            ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 } => true,
            ExprNode::Binary { op, a, b } => {
                let float = a.ty() == Type::F32;
                (matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul) || (float && *op == BinOp::Div))
                    && self.qualifies(a)
                    && self.qualifies(b)
            }
            ExprNode::Load { buf, index } => self.buf(buf).is_some() && self.is_gid0(index),
            _ => false,
        }
    }

    /// Evaluates `e` (which qualifies) into `ymm0` for the lanes of the batch whose first
    /// `global_id(0)` is `[r12 + global_id] + ebx`.
    fn expr(&mut self, e: &Expr) -> AsmResult<()> {
        match e.node() {
            ExprNode::Var(v) => {
                if let Some(&(_, off, _)) = self.let_of(v) {
                    return self.a.vmovups(ymm0, ymmword_ptr(r15 + off));
                }
                let slot = self.params.iter().find(|(n, _)| n == v.name()).map_or(0, |p| p.1);
                self.a.vbroadcastss(ymm0, dword_ptr(r13 + slot))
            }
            ExprNode::Imm(i) => {
                let bits = rt::bits_of(kiln_ir::eval::cast(i.scalar(), *i));
                self.a.mov(eax, bits as u32)?;
                self.a.vmovd(xmm0, eax)?;
                self.a.vpbroadcastd(ymm0, xmm0)
            }
            ExprNode::Builtin { .. } => {
                self.gid0_eax()?;
                self.a.vmovd(xmm0, eax)?;
                self.a.vpbroadcastd(ymm0, xmm0)?;
                self.a.vpaddd(ymm0, ymm0, ymmword_ptr(r15))
            }
            ExprNode::Binary { op, a, b } => {
                self.expr(a)?;
                self.a.sub(rsp, 32)?;
                self.a.vmovups(ymmword_ptr(rsp), ymm0)?;
                self.expr(b)?;
                self.a.vmovaps(ymm1, ymm0)?;
                self.a.vmovups(ymm0, ymmword_ptr(rsp))?;
                self.a.add(rsp, 32)?;
                match (op, a.ty() == Type::F32) {
                    (BinOp::Add, true) => self.a.vaddps(ymm0, ymm0, ymm1),
                    (BinOp::Sub, true) => self.a.vsubps(ymm0, ymm0, ymm1),
                    (BinOp::Mul, true) => self.a.vmulps(ymm0, ymm0, ymm1),
                    (BinOp::Div, true) => self.a.vdivps(ymm0, ymm0, ymm1),
                    (BinOp::Add, false) => self.a.vpaddd(ymm0, ymm0, ymm1),
                    (BinOp::Sub, false) => self.a.vpsubd(ymm0, ymm0, ymm1),
                    _ => self.a.vpmulld(ymm0, ymm0, ymm1),
                }
            }
            ExprNode::Load { buf, .. } => {
                let t = self.buf(buf).unwrap_or(0);
                self.address(t)?;
                self.a.vmovups(ymm0, ymmword_ptr(rdx + rax * 4))
            }
            _ => Ok(()),
        }
    }

    /// `eax` = `global_id(0)` of the batch's first lane.
    fn gid0_eax(&mut self) -> AsmResult<()> {
        self.a.mov(eax, dword_ptr(r12 + rt::OFF_GLOBAL_ID))?;
        self.a.add(eax, ebx)
    }

    /// True if `e` is a condition in the class: a comparison of lane values, or `!`, `&&`,
    /// `||`, `&`, `|` of such conditions.
    fn qualifies_cond(&self, e: &Expr) -> bool {
        match e.node() {
            ExprNode::Binary { op, a, b } if op.is_comparison() => {
                a.ty() == b.ty() && self.qualifies(a) && self.qualifies(b)
            }
            ExprNode::Binary {
                op: BinOp::LogicAnd | BinOp::LogicOr | BinOp::And | BinOp::Or,
                a,
                b,
            } => self.qualifies_cond(a) && self.qualifies_cond(b),
            ExprNode::Unary { op: UnOp::Not, a } => self.qualifies_cond(a),
            _ => false,
        }
    }

    /// True if every statement of a block is in the class (binding its `let`s for the rest
    /// of the block).
    fn check_block(&mut self, stmts: &[Stmt]) -> bool {
        let mark = self.lets.len();
        let ok = stmts.iter().all(|s| match s.node() {
            StmtNode::Let { var, value } if lane_type(var.ty()) && self.qualifies(value) => {
                let gid = self.is_gid0(value);
                self.lets.push((var.name().to_string(), 0, gid));
                true
            }
            StmtNode::Store { buf, index, value } => {
                self.buf(buf).is_some()
                    && self.is_gid0(index)
                    && self.qualifies(value)
                    && Some(value.ty()) == buf.ty().elem().map(Type::Scalar)
            }
            StmtNode::If { cond, then, otherwise } => {
                self.qualifies_cond(cond)
                    && self.check_block(then.stmts())
                    && otherwise.as_ref().is_none_or(|o| self.check_block(o.stmts()))
            }
            _ => false,
        });
        self.lets.truncate(mark);
        ok
    }

    /// A fresh 32-byte vector frame slot.
    fn slot(&mut self) -> i32 {
        let off = self.next;
        self.next += 32;
        off
    }

    /// Generates a block whose stores take effect in the lanes of the mask in slot `mask`
    /// (all lanes when `None`).
    fn block(&mut self, stmts: &[Stmt], mask: Option<i32>) -> AsmResult<()> {
        let mark = self.lets.len();
        for s in stmts {
            if self.hoisted.contains(&s.addr()) {
                continue;
            }
            match s.node() {
                StmtNode::Let { var, value } => {
                    // Pure and fault-free in this class: computed in every lane.
                    self.expr(value)?;
                    let off = self.slot();
                    self.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
                    let gid = self.is_gid0(value);
                    self.lets.push((var.name().to_string(), off, gid));
                }
                StmtNode::Store { buf, value, .. } => {
                    self.expr(value)?;
                    let t = self.buf(buf).unwrap_or(0);
                    self.address(t)?;
                    match mask {
                        None => self.a.vmovups(ymmword_ptr(rdx + rax * 4), ymm0)?,
                        Some(m) => {
                            self.a.vmovups(ymm1, ymmword_ptr(r15 + m))?;
                            self.a.vmaskmovps(ymmword_ptr(rdx + rax * 4), ymm1, ymm0)?;
                        }
                    }
                }
                StmtNode::If { cond, then, otherwise } => {
                    self.cond(cond)?;
                    // then-mask = outer & cond, else-mask = outer & !cond.
                    let (t, e) = (self.slot(), self.slot());
                    match mask {
                        Some(m) => {
                            self.a.vmovups(ymm1, ymmword_ptr(r15 + m))?;
                            self.a.vpand(ymm2, ymm1, ymm0)?;
                            self.a.vpandn(ymm3, ymm0, ymm1)?;
                        }
                        None => {
                            self.a.vmovaps(ymm2, ymm0)?;
                            self.a.vpcmpeqd(ymm3, ymm3, ymm3)?;
                            self.a.vpxor(ymm3, ymm3, ymm0)?;
                        }
                    }
                    self.a.vmovups(ymmword_ptr(r15 + t), ymm2)?;
                    self.a.vmovups(ymmword_ptr(r15 + e), ymm3)?;
                    let mut skip = self.a.create_label();
                    self.a.vptest(ymm2, ymm2)?;
                    self.a.je(skip)?;
                    self.block(then.stmts(), Some(t))?;
                    self.a.set_label(&mut skip)?;
                    self.a.nop()?;
                    if let Some(o) = otherwise {
                        let mut skip = self.a.create_label();
                        self.a.vmovups(ymm3, ymmword_ptr(r15 + e))?;
                        self.a.vptest(ymm3, ymm3)?;
                        self.a.je(skip)?;
                        self.block(o.stmts(), Some(e))?;
                        self.a.set_label(&mut skip)?;
                        self.a.nop()?;
                    }
                }
                _ => {}
            }
        }
        self.lets.truncate(mark);
        Ok(())
    }

    /// Evaluates a condition into `ymm0` as a lane mask (all ones where true). Float
    /// comparisons use the quiet predicates that are false on NaN, except `!=` (true on
    /// NaN), as the scalar comparisons are.
    fn cond(&mut self, e: &Expr) -> AsmResult<()> {
        match e.node() {
            ExprNode::Binary { op, a, b } if op.is_comparison() => {
                self.expr(a)?;
                self.a.sub(rsp, 32)?;
                self.a.vmovups(ymmword_ptr(rsp), ymm0)?;
                self.expr(b)?;
                self.a.vmovaps(ymm1, ymm0)?;
                self.a.vmovups(ymm0, ymmword_ptr(rsp))?;
                self.a.add(rsp, 32)?;
                match a.ty().scalar() {
                    Some(Scalar::F32) => {
                        let pred = match op {
                            BinOp::Eq => 0x00,
                            BinOp::Ne => 0x04,
                            BinOp::Lt => 0x11,
                            BinOp::Le => 0x12,
                            BinOp::Gt => 0x1e,
                            _ => 0x1d,
                        };
                        self.a.vcmpps(ymm0, ymm0, ymm1, pred)
                    }
                    t => {
                        if t == Some(Scalar::U32) {
                            // Unsigned order is signed order with the sign bits flipped.
                            self.a.mov(eax, 0x8000_0000u32)?;
                            self.a.vmovd(xmm2, eax)?;
                            self.a.vpbroadcastd(ymm2, xmm2)?;
                            self.a.vpxor(ymm0, ymm0, ymm2)?;
                            self.a.vpxor(ymm1, ymm1, ymm2)?;
                        }
                        // (mask, negate): a > b is gt(a, b); a < b is gt(b, a); the others
                        // negate these or equality.
                        self.a.vpcmpeqd(ymm3, ymm3, ymm3)?;
                        match op {
                            BinOp::Eq => self.a.vpcmpeqd(ymm0, ymm0, ymm1),
                            BinOp::Ne => {
                                self.a.vpcmpeqd(ymm0, ymm0, ymm1)?;
                                self.a.vpxor(ymm0, ymm0, ymm3)
                            }
                            BinOp::Gt => self.a.vpcmpgtd(ymm0, ymm0, ymm1),
                            BinOp::Lt => self.a.vpcmpgtd(ymm0, ymm1, ymm0),
                            BinOp::Le => {
                                self.a.vpcmpgtd(ymm0, ymm0, ymm1)?;
                                self.a.vpxor(ymm0, ymm0, ymm3)
                            }
                            _ => {
                                self.a.vpcmpgtd(ymm0, ymm1, ymm0)?;
                                self.a.vpxor(ymm0, ymm0, ymm3)
                            }
                        }
                    }
                }
            }
            ExprNode::Binary { op, a, b } => {
                self.cond(a)?;
                self.a.sub(rsp, 32)?;
                self.a.vmovups(ymmword_ptr(rsp), ymm0)?;
                self.cond(b)?;
                self.a.vmovups(ymm1, ymmword_ptr(rsp))?;
                self.a.add(rsp, 32)?;
                if matches!(op, BinOp::LogicAnd | BinOp::And) {
                    self.a.vpand(ymm0, ymm0, ymm1)
                } else {
                    self.a.vpor(ymm0, ymm0, ymm1)
                }
            }
            ExprNode::Unary { a, .. } => {
                self.cond(a)?;
                self.a.vpcmpeqd(ymm3, ymm3, ymm3)?;
                self.a.vpxor(ymm0, ymm0, ymm3)
            }
            _ => Ok(()),
        }
    }

    /// `rdx` = base of table entry `t`, `rax` = the batch's first `global_id(0)`.
    fn address(&mut self, t: u32) -> AsmResult<()> {
        if !self.accessed.contains(&t) {
            self.accessed.push(t);
        }
        self.gid0_eax()?;
        self.a.mov(rdx, qword_ptr(r14 + (t as i32 * 16)))
    }
}

/// The vector code for `k` if it qualifies; `param_slots` are the scalar frame's parameter
/// slots (the vector code reads scalar parameters from the scalar frame).
///
/// The function takes (ctx, scalar frame, vector frame) and runs one row of a work-group:
/// `global_id(0)` from `ctx.global_id[0]` for `ctx.local_size[0]` work-items (a multiple of 8).
pub(crate) fn generate(k: &Kernel, param_slots: &[Option<i32>]) -> AsmResult<Option<Spmd>> {
    let mut v = V {
        a: CodeAssembler::new(64)?,
        lets: Vec::new(),
        next: 32,
        params: Vec::new(),
        bufs: Vec::new(),
        accessed: Vec::new(),
        hoisted: Vec::new(),
    };
    let mut table = 0;
    for (p, slot) in k.params().iter().zip(param_slots) {
        match (p.ty(), slot) {
            (Type::Ptr(_, Scalar::F32 | Scalar::I32 | Scalar::U32), _) => {
                v.bufs.push((p.name().to_string(), table));
                table += 1;
            }
            (Type::Ptr(..), _) => table += 1,
            (_, Some(s)) if lane_type(p.ty()) => v.params.push((p.name().to_string(), *s)),
            _ => {}
        }
    }
    // Check the whole body first (no code for kernels that do not qualify).
    let mut probe = V { a: CodeAssembler::new(64)?, lets: Vec::new(), ..v };
    if !probe.check_block(k.body().stmts()) {
        return Ok(None);
    }
    let mut v = V { lets: Vec::new(), ..probe };
    let a = &mut v.a;
    a.push(rbp)?;
    a.mov(rbp, rsp)?;
    a.push(rbx)?;
    a.push(r12)?;
    a.push(r13)?;
    a.push(r14)?;
    a.push(r15)?;
    a.and(rsp, -32)?;
    a.mov(r12, rdi)?;
    a.mov(r13, rsi)?;
    a.mov(r15, rdx)?;
    a.mov(r14, qword_ptr(r12 + rt::OFF_MEMS))?;
    a.xor(ebx, ebx)?;
    // Uniform values (parameters and constants only, in this class) are computed once per
    // row: the divergence analysis says which top-level lets are uniform.
    let div = kiln_passes::divergence::analyze(k);
    for s in k.body().stmts() {
        if let StmtNode::Let { var, value } = s.node() {
            if div.binding_divergent(s) == Some(false) {
                v.expr(value)?;
                let off = v.slot();
                v.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
                let gid = v.is_gid0(value);
                v.lets.push((var.name().to_string(), off, gid));
                v.hoisted.push(s.addr());
            }
        }
    }
    let a = &mut v.a;
    let mut top = a.create_label();
    a.set_label(&mut top)?;
    a.nop()?;
    v.block(k.body().stmts(), None)?;
    let a = &mut v.a;
    a.add(ebx, 8)?;
    a.cmp(rbx, qword_ptr(r12 + rt::OFF_LOCAL_SIZE))?;
    a.jb(top)?;
    a.vzeroupper()?;
    a.lea(rsp, qword_ptr(rbp - 40))?;
    a.pop(r15)?;
    a.pop(r14)?;
    a.pop(r13)?;
    a.pop(r12)?;
    a.pop(rbx)?;
    a.pop(rbp)?;
    a.ret()?;
    Ok(Some(Spmd { asm: v.a, vframe_bytes: v.next as usize, accessed: v.accessed }))
}
