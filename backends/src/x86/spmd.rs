//! SPMD over 8 AVX2 lanes, for a deliberately small class of kernels: elementwise code
//! where every work-item touches only element `global_id(0)` of each buffer.
//!
//! A kernel qualifies when its body is only `let`s, stores and `if`/`else` (divergent
//! conditions included), its values are `f32`, `i32` or `u32` (`+ - *`, and `/` on f32), its
//! operands are scalar parameters, constants, `global_id(0)` and those `let`s, its
//! conditions are comparisons of such values (and `!`, `&&`, `||` of them), every load
//! and store indexes a global buffer with exactly `global_id(0)` (directly or through a
//! `let` of it), and no expression needs more than [`TEMPS`] registers at once. Then eight
//! consecutive work-items run at once, and one call runs a whole span of them (a row of a
//! work-group, or for 1-D launches many work-groups back to back).
//!
//! ## Code shape
//!
//! * Registers, not memory: expression temporaries are `ymm0..ymm7` (Sethi-Ullman order,
//!   so the deeper operand is computed first), `let`s live in `ymm8..ymm14` while those last
//!   (then in 32-byte slots of the vector frame, `r15`), and `ymm15` holds the batch's
//!   `global_id(0)` lanes (a `let` of `global_id(0)` is that register, no copy).
//! * Operands straight from memory: a load at `global_id(0)` is the memory operand of the
//!   instruction that uses it (`vaddps ymm0, ymm0, [rdx + rbx*4]`); buffer bases sit in
//!   general-purpose registers for the whole span (the first eight buffers), `rbx` is the
//!   batch's first `global_id(0)`.
//! * Uniform values once per span: scalar parameters and constants are broadcast into the
//!   vector frame before the loop, and top-level `let`s that the divergence analysis
//!   (`kiln_passes::divergence`) calls uniform are computed there too.
//! * Divergent `if`s are lane masks (stores under them are masked stores; a branch no lane
//!   takes is jumped over, so a uniform branch costs a test and a jump).
//! * No bounds check in the loop: the driver runs a span this way only if `global_id(0)` of
//!   its last work-item is within every accessed buffer (the check is hoisted out of the
//!   work-items), else the scalar code runs the group and reports what the interpreter
//!   reports.
//!
//! ## Why this is exact
//!
//! Each work-item touches element `global_id(0)` only, so two lanes of a batch never touch
//! the same element, and work-items sharing an element (same `x`, other rows) still run in
//! the interpreter's order (rows in order; multi-group spans are only used for 1-D launches,
//! which have one row); f32 lane arithmetic and comparisons are the same IEEE operations as
//! the scalar ones (quiet predicates, false on NaN except `!=`; no contraction); integer
//! lanes wrap at 32 bits as the scalar code does. `let`s under a branch are computed in
//! every lane: they are pure and, in this class, cannot fault, and only the masked stores
//! have effects. Nothing in the class can fault once the span's accesses are in bounds.
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
    /// Bytes of the vector frame (the lane-index constant, then 32-byte slots).
    pub vframe_bytes: usize,
    /// Memory-table entries the code loads or stores (the driver checks their lengths).
    pub accessed: Vec<u32>,
}

/// The lane-index constant `[0, 1, ..., 7]` at the start of the vector frame.
pub(crate) const IOTA: [u32; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

/// Expression temporaries: `ymm0..ymm{TEMPS-1}`.
pub(crate) const TEMPS: usize = 8;
/// The register holding the batch's `global_id(0)` lanes.
const GID: usize = 15;
/// Registers for `let`s: `ymm8..ymm14`.
const LET_REGS: std::ops::Range<usize> = TEMPS..GID;
const YMM: [AsmRegisterYmm; 16] = [
    ymm0, ymm1, ymm2, ymm3, ymm4, ymm5, ymm6, ymm7, ymm8, ymm9, ymm10, ymm11, ymm12, ymm13, ymm14,
    ymm15,
];
/// Registers holding buffer bases for the whole span (`rax` stays scratch for the others).
const BASES: [AsmRegister64; 8] = [rcx, rdx, rsi, rdi, r8, r9, r10, r11];
/// Vector frame slots the code itself uses: the span's end (`global_id(0)` bound).
const END_SLOT: i32 = 32;

/// Where a `let` lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loc {
    Reg(usize),
    Slot(i32),
}

/// An instruction's second source: a register or a 32-byte memory operand.
enum Src {
    Reg(usize),
    Mem(AsmMemoryOperand),
}

struct V {
    a: CodeAssembler,
    /// (name, location, is it `global_id(0)`) of each `let` in scope.
    lets: Vec<(String, Loc, bool)>,
    /// Next free vector frame offset.
    next: i32,
    /// Next free `let` register.
    next_reg: usize,
    /// Scalar parameters: name, frame slot.
    params: Vec<(String, i32)>,
    /// Pointer parameters: name, table index.
    bufs: Vec<(String, u32)>,
    /// Table entries accessed, in first-use order (the first eight have base registers).
    accessed: Vec<u32>,
    /// Uniform values broadcast before the loop: (bits, 0) for constants, (slot, 1) for
    /// parameters; and their vector frame slots.
    consts: Vec<((u64, u8), i32)>,
    /// Top-level `let`s computed before the loop: statement address, location.
    hoisted: Vec<(usize, Loc)>,
}

fn lane_type(t: Type) -> bool {
    matches!(t.scalar(), Some(Scalar::F32 | Scalar::I32 | Scalar::U32))
}

impl V {
    fn let_of(&self, v: &Var) -> Option<&(String, Loc, bool)> {
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

    fn param(&self, v: &Var) -> Option<i32> {
        self.params.iter().find(|(n, _)| n == v.name()).map(|p| p.1)
    }

    /// True if `e` is in the class (see the module docs).
    fn qualifies(&self, e: &Expr) -> bool {
        if !lane_type(e.ty()) {
            return false;
        }
        match e.node() {
            ExprNode::Var(v) => self.let_of(v).is_some() || self.param(v).is_some(),
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

    /// True if `e` (which qualifies) can be an instruction's second source as it is.
    fn is_leaf(e: &Expr) -> bool {
        matches!(
            e.node(),
            ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. } | ExprNode::Load { .. }
        )
    }

    /// Registers needed to compute `e` into a register (Sethi-Ullman).
    fn need(e: &Expr) -> usize {
        match e.node() {
            ExprNode::Binary { a, b, .. } => {
                let nb = if V::is_leaf(b) { 0 } else { V::need(b) };
                V::need(a).max(nb + 1)
            }
            _ => 1,
        }
    }

    /// Registers needed to compute condition `e` into a lane mask.
    fn need_cond(e: &Expr) -> usize {
        match e.node() {
            ExprNode::Binary { op, a, b } if op.is_comparison() => V::need(a).max(V::need(b) + 1),
            ExprNode::Binary { a, b, .. } => V::need_cond(a).max(V::need_cond(b) + 1),
            ExprNode::Unary { a, .. } => V::need_cond(a),
            _ => 1,
        }
    }

    /// A vector frame slot holding `key` broadcast to every lane (filled before the loop).
    fn const_slot(&mut self, key: (u64, u8)) -> i32 {
        if let Some(&(_, off)) = self.consts.iter().find(|(k, _)| *k == key) {
            return off;
        }
        let off = self.slot();
        self.consts.push((key, off));
        off
    }

    fn imm_slot(&mut self, bits: u32) -> i32 {
        self.const_slot((bits as u64, 0))
    }

    /// The memory operand of buffer `t` at the batch's `global_id(0)`.
    fn element(&mut self, t: u32) -> AsmResult<AsmMemoryOperand> {
        let pos = match self.accessed.iter().position(|&x| x == t) {
            Some(p) => p,
            None => {
                self.accessed.push(t);
                self.accessed.len() - 1
            }
        };
        Ok(match BASES.get(pos) {
            Some(&r) => ymmword_ptr(r + rbx * 4),
            None => {
                self.a.mov(rax, qword_ptr(r14 + (t as i32 * 16)))?;
                ymmword_ptr(rax + rbx * 4)
            }
        })
    }

    /// `e` (a leaf that qualifies) as a second source.
    fn src(&mut self, e: &Expr) -> AsmResult<Src> {
        Ok(match e.node() {
            ExprNode::Var(v) => match self.let_of(v) {
                Some(&(_, Loc::Reg(r), _)) => Src::Reg(r),
                Some(&(_, Loc::Slot(off), _)) => Src::Mem(ymmword_ptr(r15 + off)),
                None => {
                    let slot = self.param(v).unwrap_or(0);
                    let off = self.const_slot((slot as u64, 1));
                    Src::Mem(ymmword_ptr(r15 + off))
                }
            },
            ExprNode::Imm(i) => {
                let bits = rt::bits_of(kiln_ir::eval::cast(i.scalar(), *i));
                Src::Mem(ymmword_ptr(r15 + self.imm_slot(bits as u32)))
            }
            ExprNode::Load { buf, .. } => {
                let t = self.buf(buf).unwrap_or(0);
                Src::Mem(self.element(t)?)
            }
            _ => Src::Reg(GID),
        })
    }

    /// Evaluates `e` (which qualifies) into `ymm{d}`, with `ymm{d+1}..` as temporaries.
    fn expr(&mut self, e: &Expr, d: usize) -> AsmResult<()> {
        let ExprNode::Binary { op, a, b } = e.node() else {
            return match self.src(e)? {
                Src::Reg(r) if r == d => Ok(()),
                Src::Reg(r) => self.a.vmovaps(YMM[d], YMM[r]),
                Src::Mem(m) => self.a.vmovups(YMM[d], m),
            };
        };
        // (first source register, second source); the result goes to ymm{d}.
        let (first, s) = if V::is_leaf(b) {
            self.expr(a, d)?;
            (d, self.src(b)?)
        } else if V::need(a) >= V::need(b) {
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
        let float = a.ty() == Type::F32;
        match s {
            Src::Reg(r) => {
                let r = YMM[r];
                match (op, float) {
                    (BinOp::Add, true) => self.a.vaddps(x, y, r),
                    (BinOp::Sub, true) => self.a.vsubps(x, y, r),
                    (BinOp::Mul, true) => self.a.vmulps(x, y, r),
                    (BinOp::Div, true) => self.a.vdivps(x, y, r),
                    (BinOp::Add, false) => self.a.vpaddd(x, y, r),
                    (BinOp::Sub, false) => self.a.vpsubd(x, y, r),
                    _ => self.a.vpmulld(x, y, r),
                }
            }
            Src::Mem(m) => match (op, float) {
                (BinOp::Add, true) => self.a.vaddps(x, y, m),
                (BinOp::Sub, true) => self.a.vsubps(x, y, m),
                (BinOp::Mul, true) => self.a.vmulps(x, y, m),
                (BinOp::Div, true) => self.a.vdivps(x, y, m),
                (BinOp::Add, false) => self.a.vpaddd(x, y, m),
                (BinOp::Sub, false) => self.a.vpsubd(x, y, m),
                _ => self.a.vpmulld(x, y, m),
            },
        }
    }

    /// Evaluates `a` and `b` into registers (the deeper first); returns their registers,
    /// one of them `ymm{d}`.
    fn pair(&mut self, a: &Expr, b: &Expr, d: usize) -> AsmResult<(usize, usize)> {
        if V::need(a) >= V::need(b) {
            self.expr(a, d)?;
            self.expr(b, d + 1)?;
            Ok((d, d + 1))
        } else {
            self.expr(b, d)?;
            self.expr(a, d + 1)?;
            Ok((d + 1, d))
        }
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
            StmtNode::Let { var, value }
                if lane_type(var.ty()) && self.qualifies(value) && V::need(value) <= TEMPS =>
            {
                let gid = self.is_gid0(value);
                self.lets.push((var.name().to_string(), Loc::Slot(0), gid));
                true
            }
            StmtNode::Store { buf, index, value } => {
                self.buf(buf).is_some()
                    && self.is_gid0(index)
                    && self.qualifies(value)
                    && V::need(value) <= TEMPS
                    && Some(value.ty()) == buf.ty().elem().map(Type::Scalar)
            }
            StmtNode::If { cond, then, otherwise } => {
                self.qualifies_cond(cond)
                    && V::need_cond(cond) <= TEMPS
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

    /// Binds a `let` of `value` to a location (a free `let` register, else a slot) and
    /// computes it there; a `let` of `global_id(0)` is the lane-id register.
    fn bind_let(&mut self, var: &Var, value: &Expr) -> AsmResult<Loc> {
        if self.is_gid0(value) {
            self.lets.push((var.name().to_string(), Loc::Reg(GID), true));
            return Ok(Loc::Reg(GID));
        }
        self.expr(value, 0)?;
        let loc = if LET_REGS.contains(&self.next_reg) {
            self.next_reg += 1;
            self.a.vmovaps(YMM[self.next_reg - 1], ymm0)?;
            Loc::Reg(self.next_reg - 1)
        } else {
            let off = self.slot();
            self.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
            Loc::Slot(off)
        };
        self.lets.push((var.name().to_string(), loc, false));
        Ok(loc)
    }

    /// Generates a block whose stores take effect in the lanes of the mask in slot `mask`
    /// (all lanes when `None`).
    fn block(&mut self, stmts: &[Stmt], mask: Option<i32>) -> AsmResult<()> {
        let (mark, regs) = (self.lets.len(), self.next_reg);
        for s in stmts {
            if let Some(&(_, loc)) = self.hoisted.iter().find(|(a, _)| *a == s.addr()) {
                // Computed before the loop; in scope from here on.
                if let StmtNode::Let { var, .. } = s.node() {
                    self.lets.push((var.name().to_string(), loc, false));
                }
                continue;
            }
            match s.node() {
                StmtNode::Let { var, value } => {
                    // Pure and fault-free in this class: computed in every lane.
                    self.bind_let(var, value)?;
                }
                StmtNode::Store { buf, value, .. } => {
                    let r = match self.src_if_reg(value) {
                        Some(r) => r,
                        None => {
                            self.expr(value, 0)?;
                            0
                        }
                    };
                    let t = self.buf(buf).unwrap_or(0);
                    let m = self.element(t)?;
                    match mask {
                        None => self.a.vmovups(m, YMM[r])?,
                        Some(k) => {
                            let k_reg = if r == 1 { ymm2 } else { ymm1 };
                            self.a.vmovups(k_reg, ymmword_ptr(r15 + k))?;
                            self.a.vmaskmovps(m, k_reg, YMM[r])?;
                        }
                    }
                }
                StmtNode::If { cond, then, otherwise } => {
                    self.cond(cond, 0)?;
                    // then-mask = outer & cond, else-mask = outer & !cond.
                    let t = self.slot();
                    match mask {
                        Some(m) => {
                            self.a.vpandn(ymm1, ymm0, ymmword_ptr(r15 + m))?;
                            self.a.vpand(ymm0, ymm0, ymmword_ptr(r15 + m))?;
                        }
                        None => {
                            let ones = self.imm_slot(u32::MAX);
                            self.a.vpxor(ymm1, ymm0, ymmword_ptr(r15 + ones))?;
                        }
                    }
                    self.a.vmovups(ymmword_ptr(r15 + t), ymm0)?;
                    let e = if otherwise.is_some() {
                        let e = self.slot();
                        self.a.vmovups(ymmword_ptr(r15 + e), ymm1)?;
                        Some(e)
                    } else {
                        None
                    };
                    let mut skip = self.a.create_label();
                    self.a.vptest(ymm0, ymm0)?;
                    self.a.je(skip)?;
                    self.block(then.stmts(), Some(t))?;
                    self.bind(&mut skip)?;
                    if let (Some(o), Some(e)) = (otherwise, e) {
                        let mut skip = self.a.create_label();
                        self.a.vmovups(ymm1, ymmword_ptr(r15 + e))?;
                        self.a.vptest(ymm1, ymm1)?;
                        self.a.je(skip)?;
                        self.block(o.stmts(), Some(e))?;
                        self.bind(&mut skip)?;
                    }
                }
                _ => {}
            }
        }
        self.lets.truncate(mark);
        self.next_reg = regs;
        Ok(())
    }

    /// The register `e` already lives in, if it is a `let` in a register or `global_id(0)`.
    fn src_if_reg(&self, e: &Expr) -> Option<usize> {
        match e.node() {
            ExprNode::Var(v) => match self.let_of(v) {
                Some(&(_, Loc::Reg(r), _)) => Some(r),
                _ => None,
            },
            ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 } => Some(GID),
            _ => None,
        }
    }

    /// Places `label` here (a `nop` first if the previous instruction already has a label).
    fn bind(&mut self, label: &mut CodeLabel) -> AsmResult<()> {
        self.a.nop()?;
        self.a.set_label(label)
    }

    /// Evaluates a condition into `ymm{d}` as a lane mask (all ones where true). Float
    /// comparisons use the quiet predicates that are false on NaN, except `!=` (true on
    /// NaN), as the scalar comparisons are.
    fn cond(&mut self, e: &Expr, d: usize) -> AsmResult<()> {
        let ones = self.imm_slot(u32::MAX);
        match e.node() {
            ExprNode::Binary { op, a, b } if op.is_comparison() => {
                let (ra, rb) = self.pair(a, b, d)?;
                let (x, y, z) = (YMM[d], YMM[ra], YMM[rb]);
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
                        self.a.vcmpps(x, y, z, pred)
                    }
                    t => {
                        if t == Some(Scalar::U32) {
                            // Unsigned order is signed order with the sign bits flipped.
                            let sign = ymmword_ptr(r15 + self.imm_slot(0x8000_0000));
                            self.a.vpxor(y, y, sign)?;
                            self.a.vpxor(z, z, sign)?;
                        }
                        // a > b is gt(a, b); a < b is gt(b, a); the others negate these or
                        // equality.
                        let (cmp_gt, swap, negate) = match op {
                            BinOp::Eq => (false, false, false),
                            BinOp::Ne => (false, false, true),
                            BinOp::Gt => (true, false, false),
                            BinOp::Lt => (true, true, false),
                            BinOp::Le => (true, false, true),
                            _ => (true, true, true),
                        };
                        let (p, q) = if swap { (z, y) } else { (y, z) };
                        if cmp_gt {
                            self.a.vpcmpgtd(x, p, q)?;
                        } else {
                            self.a.vpcmpeqd(x, p, q)?;
                        }
                        if negate {
                            self.a.vpxor(x, x, ymmword_ptr(r15 + ones))?;
                        }
                        Ok(())
                    }
                }
            }
            ExprNode::Binary { op, a, b } => {
                self.cond(a, d)?;
                self.cond(b, d + 1)?;
                if matches!(op, BinOp::LogicAnd | BinOp::And) {
                    self.a.vpand(YMM[d], YMM[d], YMM[d + 1])
                } else {
                    self.a.vpor(YMM[d], YMM[d], YMM[d + 1])
                }
            }
            ExprNode::Unary { a, .. } => {
                self.cond(a, d)?;
                self.a.vpxor(YMM[d], YMM[d], ymmword_ptr(r15 + ones))
            }
            _ => Ok(()),
        }
    }
}

/// The vector code for `k` if it qualifies; `param_slots` are the scalar frame's parameter
/// slots (the vector code reads scalar parameters from the scalar frame).
///
/// The function takes (ctx, scalar frame, vector frame) and runs `ctx.span` work-items (a
/// multiple of 8) from `global_id(0)` = `ctx.global_id[0]`, of one row.
pub(crate) fn generate(k: &Kernel, param_slots: &[Option<i32>]) -> AsmResult<Option<Spmd>> {
    let mut v = V {
        a: CodeAssembler::new(64)?,
        lets: Vec::new(),
        next: END_SLOT + 32,
        next_reg: LET_REGS.start,
        params: Vec::new(),
        bufs: Vec::new(),
        accessed: Vec::new(),
        consts: Vec::new(),
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
    if !v.check_block(k.body().stmts()) {
        return Ok(None);
    }
    let a = &mut v.a;
    a.push(rbp)?;
    a.mov(rbp, rsp)?;
    a.push(rbx)?;
    a.push(r12)?;
    a.push(r13)?;
    a.push(r14)?;
    a.push(r15)?;
    a.mov(r12, rdi)?;
    a.mov(r13, rsi)?;
    a.mov(r15, rdx)?;
    a.mov(r14, qword_ptr(r12 + rt::OFF_MEMS))?;
    a.mov(rbx, qword_ptr(r12 + rt::OFF_GLOBAL_ID))?;
    a.mov(rax, qword_ptr(r12 + rt::OFF_SPAN))?;
    a.add(rax, rbx)?;
    a.mov(qword_ptr(r15 + END_SLOT), rax)?;
    // Broadcast constants and load buffer bases (emitted last, when all are known), then
    // come back for the uniform `let`s.
    let init = a.create_label();
    let mut hoist = a.create_label();
    a.jmp(init)?;
    v.bind(&mut hoist)?;
    // Uniform values once per span: the divergence analysis says which top-level lets are
    // uniform.
    let div = kiln_passes::divergence::analyze(k);
    for s in k.body().stmts() {
        if let StmtNode::Let { var, value } = s.node() {
            if div.binding_divergent(s) == Some(false) && !v.is_gid0(value) {
                let loc = v.bind_let(var, value)?;
                v.hoisted.push((s.addr(), loc));
            }
        }
    }
    v.lets.clear();
    v.a.vmovd(xmm15, ebx)?;
    v.a.vpbroadcastd(ymm15, xmm15)?;
    v.a.vpaddd(ymm15, ymm15, ymmword_ptr(r15))?;
    let mut top = v.a.create_label();
    v.bind(&mut top)?;
    v.block(k.body().stmts(), None)?;
    let eight = v.imm_slot(8);
    let a = &mut v.a;
    a.add(rbx, 8)?;
    a.vpaddd(ymm15, ymm15, ymmword_ptr(r15 + eight))?;
    a.cmp(rbx, qword_ptr(r15 + END_SLOT))?;
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
    let mut init = init;
    v.bind(&mut init)?;
    for &((key, param), off) in &v.consts {
        if param == 1 {
            v.a.vbroadcastss(ymm0, dword_ptr(r13 + key as i32))?;
        } else {
            v.a.mov(eax, key as u32)?;
            v.a.vmovd(xmm0, eax)?;
            v.a.vpbroadcastd(ymm0, xmm0)?;
        }
        v.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
    }
    for (&t, &r) in v.accessed.iter().zip(&BASES) {
        v.a.mov(r, qword_ptr(r14 + (t as i32 * 16)))?;
    }
    v.a.jmp(hoist)?;
    Ok(Some(Spmd { asm: v.a, vframe_bytes: v.next as usize, accessed: v.accessed }))
}
