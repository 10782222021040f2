//! Batch-uniform integer values in general-purpose registers.
//!
//! What `uniform.rs` proves the same in all eight lanes needs no vector: index arithmetic,
//! the counters of uniform `for` loops and uniform conditions are computed with scalar
//! instructions in `eax` (`r10` as the second operand, the machine stack for deeper
//! trees), and kept in a dword of the vector frame ([`Loc::Scalar`], addressed by `r15`,
//! so a batch stopped at a barrier keeps them). Only where such a value meets a divergent
//! one is it broadcast into a YMM register (`vpbroadcastd` from its dword), and a uniform
//! branch tests a flag, not lane 0 of a mask.
//!
//! In kernels without barriers, uniform `var`s, `let`s in the batch loop and the 64-bit
//! counters of uniform `for` loops live in a general-purpose register instead of their
//! slot while one is free ([`V::homes`]): the base registers that no buffer of the kernel
//! takes (`BASES` past the kernel's tables), handed out innermost last as the names come
//! into scope and back when their scope ends, the slot used when none is left. The code
//! that borrows `rcx` (shift counts) or `rdx` (division) saves it around the borrowing,
//! and the limit stub saves them all, so a value in one lives across either.
//!
//! Exactness: `i32`/`u32` `+ - * & | ^` wrap at 32 bits in a GPR as in a lane, `<<` and
//! `>>` shift by the count modulo 32 (`sar` for `i32`) as the interpreter's do, `/` and
//! `%` by a constant that cannot fault (not 0, for `i32` not -1) truncate as the
//! interpreter's do (`div`/`idiv`), and
//! comparisons use the signed or unsigned condition codes of the operands' type; the
//! values have no loads (nothing here can fault), so computing them is pure. (Where
//! [`V::gpr_loads`] is set, they may have loads that need no check, [`V::unchecked_load`],
//! which cannot fault either.)

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Builtin, Expr, ExprNode, Scalar, Type, UnOp};

use super::expr::desugar;
use super::{no, Kind, R, V};
use crate::x86::rt;

/// True for the 32-bit integer types a GPR holds here.
pub(super) fn int_type(t: Type) -> bool {
    matches!(t, Type::Scalar(Scalar::I32 | Scalar::U32))
}

impl V {
    /// True if `e` is a batch-uniform `i32`/`u32` value computable in a GPR: constants,
    /// parameters, ids and sizes other than `global_id(0)`/`local_id(0)`, names bound to
    /// GPR dwords, and `+ - * & | ^ << >>` of those.
    pub(super) fn gpr_ok(&self, e: &Expr) -> bool {
        if let Some(d) = desugar(e) {
            return self.gpr_ok(&d);
        }
        if !int_type(e.ty()) {
            return false;
        }
        match e.node() {
            ExprNode::Imm(_) => true,
            ExprNode::Var(v) => match self.find(v.name()) {
                Some(b) => b.dword.is_some() && b.kind == Kind::Uniform,
                None => self.param(v).is_some(),
            },
            ExprNode::Builtin { kind: Builtin::GlobalId | Builtin::LocalId, dim: 0 } => false,
            ExprNode::Builtin { .. } => true,
            ExprNode::Load { buf, index } => {
                self.gpr_loads && self.unchecked_load(buf, index).is_some() && self.gpr_ok(index)
            }
            ExprNode::Binary { op: BinOp::Div | BinOp::Rem, a, b } => {
                safe_divisor(b).is_some() && self.gpr_ok(a)
            }
            ExprNode::Binary { op: BinOp::Shl | BinOp::Shr, a, b } => {
                a.ty() == b.ty() && self.gpr_ok(a) && self.gpr_ok(b)
            }
            ExprNode::Binary { op, a, b } => {
                matches!(
                    op,
                    BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::And | BinOp::Or | BinOp::Xor
                ) && self.gpr_ok(a)
                    && self.gpr_ok(b)
            }
            _ => false,
        }
    }

    /// `eax = eax / d` or `eax % d` for a [`safe_divisor`] `d` (`rdx` may hold a buffer
    /// base: saved around the division).
    fn gpr_div(&mut self, d: u32, rem: bool, signed: bool) -> R<()> {
        let a = &mut self.a;
        if !signed && d.is_power_of_two() {
            // Unsigned: a shift (quotient) or a mask (remainder), as `div` would give.
            if rem {
                a.and(eax, (d - 1) as i32)?;
            } else if d > 1 {
                a.shr(eax, d.trailing_zeros())?;
            }
            return Ok(());
        }
        a.push(rdx)?;
        a.mov(r10d, d)?;
        if signed {
            a.cdq()?;
            a.idiv(r10d)?;
        } else {
            a.xor(edx, edx)?;
            a.div(r10d)?;
        }
        if rem {
            a.mov(eax, edx)?;
        }
        a.pop(rdx)?;
        Ok(())
    }

    /// True if condition `e` is computable in a GPR: comparisons of [`V::gpr_ok`] values
    /// and `! && || & |` of such conditions.
    pub(super) fn gpr_cond_ok(&self, e: &Expr) -> bool {
        match e.node() {
            ExprNode::Binary { op, a, b } if op.is_comparison() => {
                a.ty() == b.ty() && self.gpr_ok(a) && self.gpr_ok(b)
            }
            ExprNode::Binary {
                op: BinOp::LogicAnd | BinOp::LogicOr | BinOp::And | BinOp::Or,
                a,
                b,
            } if a.ty() == Type::BOOL => self.gpr_cond_ok(a) && self.gpr_cond_ok(b),
            ExprNode::Unary { op: UnOp::Not, a } => self.gpr_cond_ok(a),
            _ => false,
        }
    }

    /// A leaf of a GPR expression as a 32-bit memory operand or immediate, if it is one.
    fn gpr_leaf(&mut self, e: &Expr) -> R<Option<Leaf>> {
        Ok(Some(match e.node() {
            ExprNode::Imm(i) => {
                Leaf::Imm(rt::bits_of(kiln_ir::eval::cast(i.scalar(), *i)) as u32 as i32)
            }
            ExprNode::Var(v) => match self.find(v.name()).map(|b| b.dword) {
                Some(Some(off)) => match self.home(off) {
                    Some(r) => Leaf::Reg(r),
                    None => Leaf::Mem(dword_ptr(r15 + off)),
                },
                Some(None) => return no(format!("internal: `{}` is not in a GPR", v.name())),
                None => match self.param(v) {
                    Some(slot) => Leaf::Mem(dword_ptr(r13 + slot)),
                    None => return no(format!("`{}` is not a value here", v.name())),
                },
            },
            ExprNode::Builtin { kind, dim } => {
                let field = super::expr::builtin_field(*kind);
                if *kind == Builtin::GroupId && *dim == 0 {
                    self.per_group = true;
                }
                // The low 32 bits of the context's u64 field, as the broadcasts take them.
                Leaf::Mem(dword_ptr(r12 + (field + 8 * *dim as i32)))
            }
            _ => return Ok(None),
        }))
    }

    /// The table of a load of `buf[index]` that a GPR may compute ([`V::gpr_loads`]): a
    /// global buffer's 32-bit element at a batch-uniform index that needs no check (in
    /// bounds by a proof: a row-uniform `ids[r]` in a guard's range, `rowwise.rs`), so the
    /// load cannot fault.
    pub(super) fn unchecked_load(&self, buf: &kiln_ir::Var, index: &Expr) -> Option<u32> {
        let t = self.buf(buf).filter(|_| self.private(buf).is_none())?;
        let m = self.mems.get(self.mem_of(t) as usize)?;
        let word = matches!(m.elem, Scalar::I32 | Scalar::U32);
        let ok = word
            && m.local.is_none()
            && self.kind(index) == Kind::Uniform
            && !self.needs_check(index, t);
        ok.then_some(t)
    }

    /// Computes [`V::gpr_ok`] value `e` into `eax` (`r10` and the stack as temporaries).
    pub(super) fn gpr(&mut self, e: &Expr) -> R<()> {
        if let Some(d) = desugar(e) {
            return self.gpr(&d);
        }
        if let ExprNode::Load { buf, index } = e.node() {
            // ([`V::gpr_loads`] only: in bounds, so no check.)
            let Some(t) = self.unchecked_load(buf, index).filter(|_| self.gpr_loads) else {
                return no(format!("internal: `{e}` in a GPR"));
            };
            self.gpr(index)?;
            let base = self.base(t)?;
            self.a.mov(eax, dword_ptr(base + rax * 4))?;
            return Ok(());
        }
        if let Some(l) = self.gpr_leaf(e)? {
            match l {
                Leaf::Imm(i) => self.a.mov(eax, i as u32)?,
                Leaf::Mem(m) => self.a.mov(eax, m)?,
                Leaf::Reg(r) => self.a.mov(eax, r)?,
            }
            return Ok(());
        }
        let ExprNode::Binary { op, a, b } = e.node() else {
            return no(format!("internal: `{e}` is not a GPR value"));
        };
        if matches!(op, BinOp::Div | BinOp::Rem) {
            let Some(d) = safe_divisor(b) else {
                return no(format!("internal: `{e}` in a GPR"));
            };
            self.gpr(a)?;
            return self.gpr_div(d, *op == BinOp::Rem, e.ty() == Type::I32);
        }
        if matches!(op, BinOp::Shl | BinOp::Shr) {
            return self.gpr_shift(*op, a, b, e.ty() == Type::I32);
        }
        let leaf = match self.gpr_leaf_if(b)? {
            Some(l) => {
                self.gpr(a)?;
                l
            }
            None => {
                self.gpr(b)?;
                self.a.push(rax)?;
                self.gpr(a)?;
                self.a.pop(r10)?;
                Leaf::Reg(r10d)
            }
        };
        self.gpr_op(*op, leaf)
    }

    /// `eax = a << b` or `a >> b` (arithmetic for `i32`). The count is `b & 31`, the
    /// interpreter's: an immediate masked here, else `cl`, which x86 masks to 5 bits for
    /// 32-bit operands (`rcx` may hold a buffer base: saved around the shift).
    fn gpr_shift(&mut self, op: BinOp, a: &Expr, b: &Expr, signed: bool) -> R<()> {
        let count = match b.node() {
            ExprNode::Imm(i) => Some(rt::bits_of(kiln_ir::eval::cast(i.scalar(), *i)) as u32 & 31),
            _ => None,
        };
        if let Some(c) = count {
            self.gpr(a)?;
            let a = &mut self.a;
            match (op, signed) {
                (BinOp::Shl, _) => a.shl(eax, c)?,
                (_, true) => a.sar(eax, c)?,
                (_, false) => a.shr(eax, c)?,
            }
            return Ok(());
        }
        self.gpr(b)?;
        self.a.push(rax)?;
        self.gpr(a)?;
        let a = &mut self.a;
        a.pop(r10)?;
        a.push(rcx)?;
        a.mov(ecx, r10d)?;
        match (op, signed) {
            (BinOp::Shl, _) => a.shl(eax, cl)?,
            (_, true) => a.sar(eax, cl)?,
            (_, false) => a.shr(eax, cl)?,
        }
        a.pop(rcx)?;
        Ok(())
    }

    /// `b` as a leaf if it is one (after desugaring it is never one when desugarable).
    fn gpr_leaf_if(&mut self, b: &Expr) -> R<Option<Leaf>> {
        if desugar(b).is_some() {
            return Ok(None);
        }
        self.gpr_leaf(b)
    }

    /// `eax = eax op leaf`.
    fn gpr_op(&mut self, op: BinOp, l: Leaf) -> R<()> {
        if matches!(l, Leaf::Imm(0))
            && matches!(op, BinOp::Add | BinOp::Sub | BinOp::Or | BinOp::Xor)
        {
            // `eax` as it is (a guard's span `r * w + 0`): every value here is a 32-bit
            // write, so `rax`'s upper half is already clear.
            return Ok(());
        }
        let a = &mut self.a;
        match (op, l) {
            (BinOp::Add, Leaf::Reg(r)) => a.add(eax, r)?,
            (BinOp::Sub, Leaf::Reg(r)) => a.sub(eax, r)?,
            (BinOp::Mul, Leaf::Reg(r)) => a.imul_2(eax, r)?,
            (BinOp::And, Leaf::Reg(r)) => a.and(eax, r)?,
            (BinOp::Or, Leaf::Reg(r)) => a.or(eax, r)?,
            (BinOp::Xor, Leaf::Reg(r)) => a.xor(eax, r)?,
            (BinOp::Add, Leaf::Mem(m)) => a.add(eax, m)?,
            (BinOp::Sub, Leaf::Mem(m)) => a.sub(eax, m)?,
            (BinOp::Mul, Leaf::Mem(m)) => a.imul_2(eax, m)?,
            (BinOp::And, Leaf::Mem(m)) => a.and(eax, m)?,
            (BinOp::Or, Leaf::Mem(m)) => a.or(eax, m)?,
            (BinOp::Xor, Leaf::Mem(m)) => a.xor(eax, m)?,
            (BinOp::Add, Leaf::Imm(i)) => a.add(eax, i)?,
            (BinOp::Sub, Leaf::Imm(i)) => a.sub(eax, i)?,
            (BinOp::Mul, Leaf::Imm(i)) => a.imul_3(eax, eax, i)?,
            (BinOp::And, Leaf::Imm(i)) => a.and(eax, i)?,
            (BinOp::Or, Leaf::Imm(i)) => a.or(eax, i)?,
            (BinOp::Xor, Leaf::Imm(i)) => a.xor(eax, i)?,
            _ => return no(format!("internal: `{}` in a GPR", op.symbol())),
        }
        Ok(())
    }

    /// Computes [`V::gpr_cond_ok`] condition `e` into `eax` as 0 or 1.
    pub(super) fn gpr_cond(&mut self, e: &Expr) -> R<()> {
        match e.node() {
            ExprNode::Binary { op, a, b } if op.is_comparison() => {
                let signed = a.ty() == Type::I32;
                self.gpr_cmp(a, b)?;
                let a = &mut self.a;
                match (op, signed) {
                    (BinOp::Eq, _) => a.sete(al)?,
                    (BinOp::Ne, _) => a.setne(al)?,
                    (BinOp::Lt, true) => a.setl(al)?,
                    (BinOp::Le, true) => a.setle(al)?,
                    (BinOp::Gt, true) => a.setg(al)?,
                    (BinOp::Ge, true) => a.setge(al)?,
                    (BinOp::Lt, false) => a.setb(al)?,
                    (BinOp::Le, false) => a.setbe(al)?,
                    (BinOp::Gt, false) => a.seta(al)?,
                    _ => a.setae(al)?,
                }
                a.movzx(eax, al)?;
            }
            ExprNode::Binary { op, a, b } => {
                // `&&` and `||` evaluate both sides (kiln_ir's semantics); these have no
                // loads, so the order does not matter either.
                self.gpr_cond(b)?;
                self.a.push(rax)?;
                self.gpr_cond(a)?;
                self.a.pop(r10)?;
                if matches!(op, BinOp::LogicAnd | BinOp::And) {
                    self.a.and(eax, r10d)?;
                } else {
                    self.a.or(eax, r10d)?;
                }
            }
            ExprNode::Unary { a, .. } => {
                self.gpr_cond(a)?;
                self.a.xor(eax, 1)?;
            }
            _ => return no(format!("internal: the condition `{e}` in a GPR")),
        }
        Ok(())
    }

    /// The flags of `cmp a, b` for [`V::gpr_ok`] values (`b` as an operand when it is a
    /// leaf, else through `r10`).
    fn gpr_cmp(&mut self, a: &Expr, b: &Expr) -> R<()> {
        match self.gpr_leaf_if(b)? {
            Some(l) => {
                // A name in a register is compared where it is.
                let x = match self.gpr_leaf_if(a)? {
                    Some(Leaf::Reg(r)) => r,
                    _ => {
                        self.gpr(a)?;
                        eax
                    }
                };
                match l {
                    Leaf::Imm(i) => self.a.cmp(x, i)?,
                    Leaf::Mem(m) => self.a.cmp(x, m)?,
                    Leaf::Reg(r) => self.a.cmp(x, r)?,
                }
            }
            None => {
                self.gpr(b)?;
                self.a.push(rax)?;
                self.gpr(a)?;
                self.a.pop(r10)?;
                self.a.cmp(eax, r10d)?;
            }
        }
        Ok(())
    }

    /// Jumps to `no_label` unless uniform condition `e` holds: scalar code where it can be
    /// (see [`V::gpr_cond_ok`]; a comparison is a compare and a conditional jump), else
    /// lane 0 of the vector condition.
    pub(super) fn uniform_jump_unless(&mut self, e: &Expr, no_label: CodeLabel) -> R<()> {
        if let ExprNode::Binary { op, a, b } = e.node() {
            if op.is_comparison() && self.gpr_cond_ok(e) {
                self.gpr_cmp(a, b)?;
                let x = &mut self.a;
                // The jump where the comparison is false.
                match (op, a.ty() == Type::I32) {
                    (BinOp::Eq, _) => x.jne(no_label)?,
                    (BinOp::Ne, _) => x.je(no_label)?,
                    (BinOp::Lt, true) => x.jge(no_label)?,
                    (BinOp::Le, true) => x.jg(no_label)?,
                    (BinOp::Gt, true) => x.jle(no_label)?,
                    (BinOp::Ge, true) => x.jl(no_label)?,
                    (BinOp::Lt, false) => x.jae(no_label)?,
                    (BinOp::Le, false) => x.ja(no_label)?,
                    (BinOp::Gt, false) => x.jbe(no_label)?,
                    _ => x.jb(no_label)?,
                }
                return Ok(());
            }
        }
        if self.gpr_cond_ok(e) {
            self.gpr_cond(e)?;
            self.a.test(eax, eax)?;
        } else {
            self.cond_top(e, 0)?;
            self.a.vmovmskps(eax, ymm0)?;
            self.a.test(eax, 1)?;
        }
        self.a.je(no_label)?;
        Ok(())
    }

    /// The register holding the frame dword (or `for` counter qword) at `off`, if one does.
    pub(super) fn home(&self, off: i32) -> Option<AsmRegister32> {
        self.homes.iter().rev().find(|h| h.0 == off).map(|h| low32(h.1))
    }

    /// A free register for the dword or qword at `off`, from now until
    /// [`V::release_homes`] of an earlier mark; `None` under pressure (the slot stays).
    pub(super) fn take_home(&mut self, off: i32) -> Option<AsmRegister64> {
        let r = self.free_gprs.pop()?;
        self.homes.push((off, r));
        Some(r)
    }

    /// Gives back the registers of the homes taken since `mark` (`homes.len()` then).
    pub(super) fn release_homes(&mut self, mark: usize) {
        while self.homes.len() > mark {
            let (_, r) = self.homes.pop().expect("a home");
            self.free_gprs.push(r);
        }
    }

    /// Stores `eax` (a uniform dword) into the place of the dword at `off`.
    pub(super) fn put_dword(&mut self, off: i32) -> R<()> {
        match self.home(off) {
            Some(r) => self.a.mov(r, eax)?,
            None => self.a.mov(dword_ptr(r15 + off), eax)?,
        }
        Ok(())
    }

    /// `var = var op x` for a uniform integer `var` whose dword is in register `r`, as one
    /// instruction where `x` is a leaf (`i = i + 1u32`, `k = k ^ c`); false (no code) for
    /// other values.
    pub(super) fn update_in_place(&mut self, name: &str, r: AsmRegister32, e: &Expr) -> R<bool> {
        let ExprNode::Binary { op, a, b } = e.node() else { return Ok(false) };
        if !matches!(op, BinOp::Add | BinOp::Sub | BinOp::And | BinOp::Or | BinOp::Xor)
            || !matches!(a.node(), ExprNode::Var(v) if v.name() == name)
            || desugar(e).is_some()
        {
            return Ok(false);
        }
        let Some(l) = self.gpr_leaf_if(b)? else { return Ok(false) };
        let x = &mut self.a;
        match (op, l) {
            (BinOp::Add, Leaf::Imm(i)) => x.add(r, i)?,
            (BinOp::Sub, Leaf::Imm(i)) => x.sub(r, i)?,
            (BinOp::And, Leaf::Imm(i)) => x.and(r, i)?,
            (BinOp::Or, Leaf::Imm(i)) => x.or(r, i)?,
            (BinOp::Xor, Leaf::Imm(i)) => x.xor(r, i)?,
            (BinOp::Add, Leaf::Mem(m)) => x.add(r, m)?,
            (BinOp::Sub, Leaf::Mem(m)) => x.sub(r, m)?,
            (BinOp::And, Leaf::Mem(m)) => x.and(r, m)?,
            (BinOp::Or, Leaf::Mem(m)) => x.or(r, m)?,
            (BinOp::Xor, Leaf::Mem(m)) => x.xor(r, m)?,
            (BinOp::Add, Leaf::Reg(s)) => x.add(r, s)?,
            (BinOp::Sub, Leaf::Reg(s)) => x.sub(r, s)?,
            (BinOp::And, Leaf::Reg(s)) => x.and(r, s)?,
            (BinOp::Or, Leaf::Reg(s)) => x.or(r, s)?,
            (BinOp::Xor, Leaf::Reg(s)) => x.xor(r, s)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Uniform `i32`/`u32` value `e` into `eax`: in GPRs where it can be, else computed in
    /// lanes and lane 0 taken.
    pub(super) fn uniform_to_eax(&mut self, e: &Expr) -> R<()> {
        if self.gpr_ok(e) {
            return self.gpr(e);
        }
        self.expr_top(e, 0)?;
        self.a.vmovd(eax, xmm0)?;
        Ok(())
    }
}

/// The 32-bit register of home register `r` (one of `BASES`).
pub(super) fn low32(r: AsmRegister64) -> AsmRegister32 {
    const LOW: [AsmRegister32; 6] = [ecx, edx, esi, edi, r8d, r9d];
    let i = super::BASES.iter().position(|&b| b == r).expect("a base register");
    LOW[i]
}

/// The bits of constant divisor `b` if dividing by it can never fault: not 0, and for
/// `i32` not -1 (`MIN / -1`). Other divisors take the lane code and its checks.
fn safe_divisor(b: &Expr) -> Option<u32> {
    let ExprNode::Imm(i) = b.node() else { return None };
    let d = rt::bits_of(kiln_ir::eval::cast(i.scalar(), *i)) as u32;
    let bad = d == 0 || (b.ty() == Type::I32 && d == u32::MAX);
    (!bad).then_some(d)
}

/// True if `b` is a divisor that can never fault (see [`safe_divisor`]).
pub(super) fn safe_divisor_expr(b: &Expr) -> bool {
    safe_divisor(b).is_some()
}

/// A GPR instruction's second operand.
#[derive(Clone, Copy)]
enum Leaf {
    /// `r10d` (a computed operand) or a name's home register.
    Reg(AsmRegister32),
    Mem(AsmMemoryOperand),
    Imm(i32),
}
