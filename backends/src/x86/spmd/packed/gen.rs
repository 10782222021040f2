//! The packed loop's code (see `packed.rs`): a body's statements on a block of work-items,
//! one per byte (word) of a YMM register, each expression into registers allocated as it is
//! generated (the class check bounds what they need).

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Builtin, Expr, ExprNode, Imm, Intrinsic, Stmt, StmtNode, Type, UnOp, Var};

use super::{imm_bits, tbits, Name, Op, Width, AHEAD};
use crate::x86::spmd::{no, R, V, YMM};

/// The code generator of the packed loop's body.
pub(super) struct Gen<'v> {
    pub(super) v: &'v mut V,
    pub(super) w: Width,
    /// Free registers (bit r: `ymm{r}`).
    pub(super) free: u16,
    pub(super) scope: Vec<(String, Name)>,
    /// Scalar frame slot of each parameter used, its broadcast's slot and its sign-flipped
    /// copy's.
    pub(super) params: Vec<(i32, i32, i32)>,
    /// The slot of the sign bits of the width's lanes.
    pub(super) sign: i32,
    /// The block's first work-item after `rbx`'s (in an unrolled copy of the body).
    pub(super) items: i32,
    /// The register of the lanes that run the statements (inside a lane-varying `if`, see
    /// `masked.rs`); `None` where all do.
    pub(super) mask: Option<usize>,
}

/// `$m` with a register and a source that is a register or a slot.
macro_rules! rm3 {
    ($a:expr, $m:ident, $d:expr, $x:expr, $y:expr) => {
        match $y {
            Op::Reg(r, _) => $a.$m(YMM[$d], YMM[$x], YMM[r]),
            Op::Slot(s, _) => $a.$m(YMM[$d], YMM[$x], ymmword_ptr(r15 + s)),
        }
    };
}

/// `$m` (byte form) or `$w` (word form).
macro_rules! bw {
    ($g:expr, $m:ident, $w:ident, $d:expr, $x:expr, $y:expr) => {
        if $g.w.w16 {
            rm3!($g.v.a, $w, $d, $x, $y)
        } else {
            rm3!($g.v.a, $m, $d, $x, $y)
        }
    };
}

impl Gen<'_> {
    pub(super) fn alloc(&mut self) -> R<usize> {
        if self.free == 0 {
            return no("internal: the packed code ran out of registers");
        }
        let r = self.free.trailing_zeros() as usize;
        self.free &= !(1 << r);
        Ok(r)
    }

    pub(super) fn release(&mut self, o: Op) {
        if let Op::Reg(r, true) = o {
            self.free |= 1 << r;
        }
    }

    fn lookup(&self, n: &str) -> Option<Name> {
        self.scope.iter().rev().find(|(m, _)| m == n).map(|x| x.1)
    }

    /// A constant's slots (its bits and its sign-flipped bits).
    pub(super) fn konst(&mut self, bits: u32) -> Op {
        let sign = self.w.splat(1 << (self.w.bits() - 1));
        Op::Slot(self.v.imm_slot(bits), self.v.imm_slot(bits ^ sign))
    }

    /// `o` in a register (a temporary, or the register it is in).
    pub(super) fn reg(&mut self, o: Op) -> R<(usize, Op)> {
        match o {
            Op::Reg(r, _) => Ok((r, o)),
            Op::Slot(s, _) => {
                let r = self.alloc()?;
                self.v.a.vmovdqu(YMM[r], ymmword_ptr(r15 + s))?;
                Ok((r, Op::Reg(r, true)))
            }
        }
    }

    /// The destination of an operation on `x` (and `y`): a temporary among them, else a
    /// fresh one. The operands stay readable until the instruction is emitted.
    fn dest(&mut self, x: Op, y: Option<Op>) -> R<usize> {
        for o in [Some(x), y].into_iter().flatten() {
            if let Op::Reg(r, true) = o {
                return Ok(r);
            }
        }
        self.alloc()
    }

    /// Frees the temporaries of `ops` but `keep`.
    fn done(&mut self, ops: &[Op], keep: usize) {
        for &o in ops {
            if !matches!(o, Op::Reg(r, true) if r == keep) {
                self.release(o);
            }
        }
    }

    /// The address of the block's elements of buffer `buf` (`ahead` bytes on): base
    /// register, element size, displacement.
    pub(super) fn element(&mut self, buf: &Var, ahead: i32) -> R<(AsmRegister64, i32, i32)> {
        let t = self.v.buf(buf).expect("a buffer of the class");
        let base = self.v.element_base(t)?;
        let size = buf.ty().elem().map_or(1, |e| e.size_bytes()) as i32;
        Ok((base, size, self.items * size + ahead))
    }

    /// A prefetch of `buf`'s stream ahead (by the first copy of the body: a pass of the
    /// unrolled loop covers one 64-byte line of each stream).
    pub(super) fn prefetch(&mut self, buf: &Var) -> R<()> {
        if self.items != 0 {
            return Ok(());
        }
        let (base, size, d) = self.element(buf, AHEAD)?;
        self.v.a.prefetcht0(byte_ptr(base + rbx * size + d))?;
        Ok(())
    }

    /// `e`'s lanes, in canonical form (8-bit values in 16-bit lanes extended again after
    /// operations that wrap).
    pub(super) fn expr(&mut self, e: &Expr) -> R<Op> {
        let o = self.expr_raw(e)?;
        let t = e.ty();
        let wraps = match e.node() {
            ExprNode::Binary { op, .. } => {
                matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Shl)
            }
            ExprNode::Unary { op, .. } => matches!(op, UnOp::Neg | UnOp::BitNot),
            ExprNode::Intrinsic { op: Intrinsic::Abs, .. } => true,
            ExprNode::Cast { a, .. } => a.ty() != t && a.ty() != Type::BOOL,
            _ => false,
        };
        if !self.w.wide8(t) || !wraps {
            return Ok(o);
        }
        let (rx, x) = self.reg(o)?;
        let d = self.dest(x, None)?;
        self.v.a.vpsllw(YMM[d], YMM[rx], 8)?;
        if t.scalar().is_some_and(|s| s.is_signed()) {
            self.v.a.vpsraw(YMM[d], YMM[d], 8)?;
        } else {
            self.v.a.vpsrlw(YMM[d], YMM[d], 8)?;
        }
        self.done(&[x], d);
        Ok(Op::Reg(d, true))
    }

    fn expr_raw(&mut self, e: &Expr) -> R<Op> {
        if let Some(d) = crate::x86::spmd::expr::desugar(e) {
            return self.expr(&d);
        }
        let t = e.ty();
        let signed = t.scalar().is_some_and(|s| s.is_signed());
        match e.node() {
            ExprNode::Imm(Imm::Int(_, b)) => Ok(self.konst(self.w.splat(*b))),
            ExprNode::Imm(Imm::Bool(b)) => Ok(self.konst(if *b { u32::MAX } else { 0 })),
            ExprNode::Var(v) => match self.lookup(v.name()) {
                Some(Name::Reg(r)) => Ok(Op::Reg(r, false)),
                Some(_) => no("internal: a name the packed code does not compute"),
                None => {
                    let p = self.v.param(v).expect("a parameter");
                    let &(_, s, f) = self.params.iter().find(|x| x.0 == p).expect("broadcast");
                    Ok(Op::Slot(s, f))
                }
            },
            ExprNode::Load { buf, .. } => {
                self.prefetch(buf)?;
                let (base, size, d) = self.element(buf, 0)?;
                let r = self.alloc()?;
                let at = base + rbx * size + d;
                match (self.w.wide8(t), signed) {
                    (false, _) => self.v.a.vmovdqu(YMM[r], ymmword_ptr(at))?,
                    (true, false) => self.v.a.vpmovzxbw(YMM[r], xmmword_ptr(at))?,
                    (true, true) => self.v.a.vpmovsxbw(YMM[r], xmmword_ptr(at))?,
                }
                Ok(Op::Reg(r, true))
            }
            ExprNode::Unary { op, a } => {
                let x = self.expr(a)?;
                let (rx, x) = self.reg(x)?;
                let d = self.dest(x, None)?;
                match op {
                    UnOp::Neg => {
                        let z = self.alloc()?;
                        self.v.a.vpxor(YMM[z], YMM[z], YMM[z])?;
                        bw!(self, vpsubb, vpsubw, d, z, Op::Reg(rx, false))?;
                        self.free |= 1 << z;
                    }
                    _ => {
                        let ones = self.konst(u32::MAX);
                        self.v.a.vpxor(YMM[d], YMM[rx], ymmword_ptr(r15 + slot(ones)))?;
                    }
                }
                self.done(&[x], d);
                Ok(Op::Reg(d, true))
            }
            ExprNode::Binary { op, a, b } if op.is_comparison() => self.compare(*op, a, b),
            ExprNode::Binary { op: op @ (BinOp::Shl | BinOp::Shr), a, b } => {
                let c = crate::x86::spmd::narrow::const_count(b).expect("a constant count")
                    & (tbits(t) - 1);
                let x = self.expr(a)?;
                self.shift(*op == BinOp::Shl, signed, x, c)
            }
            ExprNode::Binary { op: op @ (BinOp::Div | BinOp::Rem), a, b } => {
                let c = imm_bits(b).expect("a constant");
                let x = self.expr(a)?;
                if !c.is_power_of_two() {
                    return self.udiv(*op == BinOp::Div, x, c as u32, tbits(t));
                }
                let k = c.trailing_zeros();
                if signed {
                    return self.signed_div(*op == BinOp::Div, x, k);
                }
                if *op == BinOp::Div {
                    return self.shift(false, false, x, k);
                }
                let (rx, x) = self.reg(x)?;
                let d = self.dest(x, None)?;
                let m = self.konst(self.w.splat((1u64 << k) - 1));
                self.v.a.vpand(YMM[d], YMM[rx], ymmword_ptr(r15 + slot(m)))?;
                self.done(&[x], d);
                Ok(Op::Reg(d, true))
            }
            ExprNode::Binary { op: BinOp::Mul, a, b } if !self.w.w16 => self.mul8(a, b),
            ExprNode::Binary { op, a, b } => {
                let x = self.expr(a)?;
                let y = self.expr(b)?;
                let (rx, x) = self.reg(x)?;
                let d = self.dest(x, Some(y))?;
                match op {
                    BinOp::Add => bw!(self, vpaddb, vpaddw, d, rx, y)?,
                    BinOp::Sub => bw!(self, vpsubb, vpsubw, d, rx, y)?,
                    BinOp::Mul => rm3!(self.v.a, vpmullw, d, rx, y)?,
                    BinOp::And | BinOp::LogicAnd => rm3!(self.v.a, vpand, d, rx, y)?,
                    BinOp::Or | BinOp::LogicOr => rm3!(self.v.a, vpor, d, rx, y)?,
                    _ => rm3!(self.v.a, vpxor, d, rx, y)?,
                }
                self.done(&[x, y], d);
                Ok(Op::Reg(d, true))
            }
            ExprNode::Select { cond, a, b } => {
                let c = self.expr(cond)?;
                let x = self.expr(a)?;
                let y = self.expr(b)?;
                let (rc, c) = self.reg(c)?;
                let (ry, y) = self.reg(y)?;
                let d = self.dest(y, Some(c))?;
                let d = if matches!(x, Op::Reg(r, true) if r == d) { self.alloc()? } else { d };
                match x {
                    Op::Reg(r, _) => self.v.a.vpblendvb(YMM[d], YMM[ry], YMM[r], YMM[rc])?,
                    Op::Slot(s, _) => {
                        self.v.a.vpblendvb(YMM[d], YMM[ry], ymmword_ptr(r15 + s), YMM[rc])?
                    }
                }
                self.done(&[c, x, y], d);
                Ok(Op::Reg(d, true))
            }
            ExprNode::Intrinsic { op: Intrinsic::Abs, args } => {
                let x = self.expr(&args[0])?;
                if !signed {
                    return Ok(x);
                }
                let (rx, x) = self.reg(x)?;
                let d = self.dest(x, None)?;
                if self.w.w16 {
                    self.v.a.vpabsw(YMM[d], YMM[rx])?;
                } else {
                    self.v.a.vpabsb(YMM[d], YMM[rx])?;
                }
                self.done(&[x], d);
                Ok(Op::Reg(d, true))
            }
            ExprNode::Intrinsic { op, args } => {
                let x = self.expr(&args[0])?;
                let y = self.expr(&args[1])?;
                let (rx, x) = self.reg(x)?;
                let d = self.dest(x, Some(y))?;
                match (op, self.w.signed_ops(t)) {
                    (Intrinsic::Min, false) => bw!(self, vpminub, vpminuw, d, rx, y)?,
                    (Intrinsic::Min, true) => bw!(self, vpminsb, vpminsw, d, rx, y)?,
                    (_, false) => bw!(self, vpmaxub, vpmaxuw, d, rx, y)?,
                    (_, true) => bw!(self, vpmaxsb, vpmaxsw, d, rx, y)?,
                }
                self.done(&[x, y], d);
                Ok(Op::Reg(d, true))
            }
            ExprNode::Cast { a, .. } => {
                let x = self.expr(a)?;
                if t == Type::BOOL {
                    // `!= 0`
                    let (rx, x) = self.reg(x)?;
                    let d = self.dest(x, None)?;
                    let z = self.konst(0);
                    bw!(self, vpcmpeqb, vpcmpeqw, d, rx, z)?;
                    let ones = self.konst(u32::MAX);
                    self.v.a.vpxor(YMM[d], YMM[d], ymmword_ptr(r15 + slot(ones)))?;
                    self.done(&[x], d);
                    Ok(Op::Reg(d, true))
                } else if a.ty() == Type::BOOL {
                    // 0 or 1.
                    let (rx, x) = self.reg(x)?;
                    let d = self.dest(x, None)?;
                    let one = self.konst(self.w.splat(1));
                    self.v.a.vpand(YMM[d], YMM[rx], ymmword_ptr(r15 + slot(one)))?;
                    self.done(&[x], d);
                    Ok(Op::Reg(d, true))
                } else {
                    // The same bits (re-extended by `expr` where 8 of 16 are kept).
                    Ok(x)
                }
            }
            _ => no(format!("internal: `{e}` in packed code")),
        }
    }

    /// `a << c` or `a >> c` (`c` below the width).
    fn shift(&mut self, left: bool, signed: bool, x: Op, c: u32) -> R<Op> {
        if c == 0 {
            return Ok(x);
        }
        let (rx, x) = self.reg(x)?;
        let d = self.dest(x, None)?;
        let c8 = c as i32;
        if self.w.w16 {
            let a = &mut self.v.a;
            match (left, signed) {
                (true, _) => a.vpsllw(YMM[d], YMM[rx], c8)?,
                (false, true) => a.vpsraw(YMM[d], YMM[rx], c8)?,
                (false, false) => a.vpsrlw(YMM[d], YMM[rx], c8)?,
            }
        } else if left {
            self.v.a.vpsllw(YMM[d], YMM[rx], c8)?;
            let m = self.konst(self.w.splat(0xffu64 << c));
            self.v.a.vpand(YMM[d], YMM[d], ymmword_ptr(r15 + slot(m)))?;
        } else {
            let src = if signed {
                // ((x ^ 0x80) >>u c) - (0x80 >> c): the sign copied into the vacated bits.
                self.v.a.vpxor(YMM[d], YMM[rx], ymmword_ptr(r15 + self.sign))?;
                d
            } else {
                rx
            };
            self.v.a.vpsrlw(YMM[d], YMM[src], c8)?;
            let m = self.konst(self.w.splat(0xff >> c));
            self.v.a.vpand(YMM[d], YMM[d], ymmword_ptr(r15 + slot(m)))?;
            if signed {
                let s = self.konst(self.w.splat(0x80 >> c));
                self.v.a.vpsubb(YMM[d], YMM[d], ymmword_ptr(r15 + slot(s)))?;
            }
        }
        self.done(&[x], d);
        Ok(Op::Reg(d, true))
    }

    /// `x / 2^k` or `x % 2^k` of signed values, truncating as the interpreter's division:
    /// `x + (2^k - 1)` where `x` is negative, shifted arithmetically (or its low `k` bits
    /// cleared and subtracted from `x`).
    fn signed_div(&mut self, div: bool, x: Op, k: u32) -> R<Op> {
        if k == 0 {
            return if div { Ok(x) } else { Ok(self.konst(0)) };
        }
        let (rx, x) = self.reg(x)?;
        let t = self.alloc()?;
        let low = self.konst(self.w.splat((1u64 << k) - 1));
        self.v.a.vpxor(YMM[t], YMM[t], YMM[t])?;
        bw!(self, vpcmpgtb, vpcmpgtw, t, t, Op::Reg(rx, false))?;
        self.v.a.vpand(YMM[t], YMM[t], ymmword_ptr(r15 + slot(low)))?;
        bw!(self, vpaddb, vpaddw, t, t, Op::Reg(rx, false))?;
        if div {
            self.release(x);
            return self.shift(false, true, Op::Reg(t, true), k);
        }
        let high = self.konst(!self.w.splat((1u64 << k) - 1));
        self.v.a.vpand(YMM[t], YMM[t], ymmword_ptr(r15 + slot(high)))?;
        bw!(self, vpsubb, vpsubw, t, rx, Op::Reg(t, false))?;
        self.release(x);
        Ok(Op::Reg(t, true))
    }

    /// `a * b` on bytes: the even bytes' products are the low bytes of a word
    /// multiplication, the odd bytes' those of one of the words shifted right.
    fn mul8(&mut self, a: &Expr, b: &Expr) -> R<Op> {
        let x = self.expr(a)?;
        let y = self.expr(b)?;
        let (rx, x) = self.reg(x)?;
        let (ry, y) = self.reg(y)?;
        let (t, u) = (self.alloc()?, self.alloc()?);
        let high = self.konst(0xff00_ff00);
        let low = self.konst(0x00ff_00ff);
        let a = &mut self.v.a;
        a.vpsrlw(YMM[u], YMM[rx], 8)?;
        a.vpand(YMM[t], YMM[ry], ymmword_ptr(r15 + slot(high)))?;
        // The odd bytes' products, in the high bytes (the low ones zero).
        a.vpmullw(YMM[u], YMM[u], YMM[t])?;
        a.vpmullw(YMM[t], YMM[rx], YMM[ry])?;
        a.vpand(YMM[t], YMM[t], ymmword_ptr(r15 + slot(low)))?;
        a.vpor(YMM[t], YMM[t], YMM[u])?;
        self.free |= 1 << u;
        self.done(&[x, y], t);
        Ok(Op::Reg(t, true))
    }

    /// A comparison's lane mask.
    fn compare(&mut self, op: BinOp, a: &Expr, b: &Expr) -> R<Op> {
        let signed = self.w.signed_ops(a.ty());
        let x = self.expr(a)?;
        let y = self.expr(b)?;
        // `a > b` or `b > a` as a mask, `ne` true if the result is the mask's negation.
        let (d, ne) = match op {
            BinOp::Eq | BinOp::Ne => {
                let (rx, x) = self.reg(x)?;
                let d = self.dest(x, Some(y))?;
                bw!(self, vpcmpeqb, vpcmpeqw, d, rx, y)?;
                self.done(&[x, y], d);
                (d, op == BinOp::Ne)
            }
            BinOp::Ge | BinOp::Le => {
                // a >= b <=> max(a, b) == a; a <= b <=> min(a, b) == a.
                let (rx, x) = self.reg(x)?;
                let t = self.alloc()?;
                match (op == BinOp::Ge, signed) {
                    (true, false) => bw!(self, vpmaxub, vpmaxuw, t, rx, y)?,
                    (true, true) => bw!(self, vpmaxsb, vpmaxsw, t, rx, y)?,
                    (false, false) => bw!(self, vpminub, vpminuw, t, rx, y)?,
                    (false, true) => bw!(self, vpminsb, vpminsw, t, rx, y)?,
                }
                bw!(self, vpcmpeqb, vpcmpeqw, t, t, Op::Reg(rx, false))?;
                self.done(&[x, y], t);
                (t, false)
            }
            _ => {
                // a > b (or b > a for `<`), signed; unsigned with the sign bits flipped.
                let (p, q) = if op == BinOp::Gt { (x, y) } else { (y, x) };
                let (p, q) = if signed { (p, q) } else { (self.flip(p)?, self.flip(q)?) };
                let (rp, p) = self.reg(p)?;
                let d = self.dest(p, Some(q))?;
                bw!(self, vpcmpgtb, vpcmpgtw, d, rp, q)?;
                self.done(&[p, q], d);
                (d, false)
            }
        };
        if ne {
            let ones = self.konst(u32::MAX);
            self.v.a.vpxor(YMM[d], YMM[d], ymmword_ptr(r15 + slot(ones)))?;
        }
        Ok(Op::Reg(d, true))
    }

    /// `o` with its lanes' sign bits flipped: a slot's flipped copy, a register xor-ed
    /// into a temporary.
    fn flip(&mut self, o: Op) -> R<Op> {
        match o {
            Op::Slot(_, f) => Ok(Op::Slot(f, f)),
            Op::Reg(r, tmp) => {
                let d = if tmp { r } else { self.alloc()? };
                self.v.a.vpxor(YMM[d], YMM[r], ymmword_ptr(r15 + self.sign))?;
                Ok(Op::Reg(d, true))
            }
        }
    }

    pub(super) fn block(&mut self, stmts: &[Stmt]) -> R<()> {
        let (depth, free) = (self.scope.len(), self.free);
        for s in stmts {
            match s.node() {
                StmtNode::Let { var, value } if var.ty() == Type::U32 && self.is_gid(value) => {
                    self.scope.push((var.name().to_string(), Name::Gid));
                }
                StmtNode::Let { var, value } | StmtNode::Decl { var, init: value }
                    if self.w.ok(var.ty()) || var.ty() == Type::BOOL =>
                {
                    let r = self.value_reg(value)?;
                    self.scope.push((var.name().to_string(), Name::Reg(r)));
                }
                StmtNode::Let { var, .. } => {
                    self.scope.push((var.name().to_string(), Name::Opaque));
                }
                StmtNode::Assign { var, value } => {
                    let Some(Name::Reg(r)) = self.lookup(var.name()) else {
                        return no("internal: an assignment in packed code");
                    };
                    let o = self.expr(value)?;
                    if let Some(m) = self.mask {
                        // Only the lanes that run the assignment change.
                        match o {
                            Op::Reg(x, _) => self.v.a.vpblendvb(YMM[r], YMM[r], YMM[x], YMM[m])?,
                            Op::Slot(s, _) => {
                                self.v.a.vpblendvb(YMM[r], YMM[r], ymmword_ptr(r15 + s), YMM[m])?
                            }
                        }
                        self.release(o);
                        continue;
                    }
                    match o {
                        Op::Reg(x, _) if x == r => {}
                        Op::Reg(x, _) => self.v.a.vmovdqa(YMM[r], YMM[x])?,
                        Op::Slot(s, _) => self.v.a.vmovdqu(YMM[r], ymmword_ptr(r15 + s))?,
                    }
                    self.release(o);
                }
                StmtNode::Store { buf, value, .. } => self.store(buf, value)?,
                StmtNode::If { cond, then, otherwise } => {
                    if self.v.hoisted_ranges.iter().any(|r| r.cond == cond as *const Expr as usize)
                    {
                        // Every lane of the block takes it (the loop runs inside its range).
                        self.block(then.stmts())?;
                    } else {
                        self.branch(cond, then, otherwise.as_ref())?;
                    }
                }
                _ => return no("internal: a statement in packed code"),
            }
        }
        self.scope.truncate(depth);
        self.free = free;
        Ok(())
    }

    /// `e` into a register of its own (for a `let` or `var`).
    fn value_reg(&mut self, e: &Expr) -> R<usize> {
        let o = self.expr(e)?;
        match o {
            Op::Reg(r, true) => Ok(r),
            Op::Reg(x, false) => {
                let r = self.alloc()?;
                self.v.a.vmovdqa(YMM[r], YMM[x])?;
                Ok(r)
            }
            Op::Slot(s, _) => {
                let r = self.alloc()?;
                self.v.a.vmovdqu(YMM[r], ymmword_ptr(r15 + s))?;
                Ok(r)
            }
        }
    }

    fn is_gid(&self, e: &Expr) -> bool {
        match e.node() {
            ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 } => true,
            ExprNode::Var(v) => self.lookup(v.name()) == Some(Name::Gid),
            _ => false,
        }
    }
}

/// A slot operand's value slot.
pub(super) fn slot(o: Op) -> i32 {
    match o {
        Op::Slot(s, _) => s,
        Op::Reg(..) => unreachable!("a constant is a slot"),
    }
}
