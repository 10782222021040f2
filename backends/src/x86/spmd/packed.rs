//! Packed lanes for elementwise kernels on 8- and 16-bit data: 32 (or 16) work-items per
//! register instead of 8.
//!
//! The 8-lane code widens every `u8` to a 32-bit lane, so a thresholding kernel does eight
//! pixels per batch where a plain loop compiled by rustc does 32 per instruction. For the
//! kernels this module takes, the vector function gets, before its batch loop, a loop over
//! blocks of `L` work-items (`L` = 32 for 8-bit data, 16 for 16-bit data) computed in the
//! element width itself, one work-item per byte (or word) of a YMM register. It runs while
//! the whole block is in the span and inside every hoisted range of the kernel's `if`s
//! (`hoist.rs`: the batches where every lane takes the branch); what is left (the span's
//! start before a lower bound, its tail, a guard's last partial batch) runs on the 8-lane
//! code as before, from the first work-item the packed loop did not do.
//!
//! ## The class
//!
//! Straight-line kernels (no loops, barriers, atomics, arrays, ids other than
//! `global_id(0)`) whose `if`s are all hoisted ranges without `else`, and whose values are
//! all of one width: `let`s, `var`s and assignments of `i8`/`u8` (or `i16`/`u16`) and
//! `bool` values, `let`s of `global_id(0)` (used only as indices or in the ranges), loads
//! and stores of global buffers of that width at exactly `global_id(0)`, scalar parameters
//! and constants of that width, and the operators: `+ - * & | ^ ~` and unary `-`
//! (wrapping), `<< >>` by constant counts (modulo the width, arithmetic `>>` on signed
//! types), `/` and `%` of unsigned values by constant powers of two, comparisons, `!`,
//! `&&`, `||`, `select`, `min`, `max`, `abs`, casts between the width's two types and to
//! and from `bool`. Other `let`s that cannot fault (no loads, no integer division) may
//! stand beside them, unused by the packed code (a guard's bound, say). Anything else
//! leaves the kernel to the 8-lane code alone.
//!
//! ## Why this is exact
//!
//! The block's work-items run statement by statement, as the 8-lane batch's do: every
//! access is at the work-item's own element, so for a race-free kernel nothing one
//! work-item writes is read by another, and each work-item's loads and stores keep their
//! order. Nothing in the class can fault: the accesses at `global_id(0)` are the unchecked
//! kind the driver checks against the span (they are recorded as such), and no division
//! has a divisor that can be zero. Every operation is the interpreter's on the type's bits:
//! byte and word arithmetic wraps as the narrow types do; unsigned comparisons are signed
//! ones of the operands with their sign bits flipped, or `min`/`max` and equality; byte
//! shifts, which x86 lacks, are word shifts with the bits that crossed a byte cleared
//! (arithmetic ones through `((x ^ 0x80) >> c) - (0x80 >> c)`); byte multiplication is two
//! word multiplications, of the even and of the odd bytes.

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Builtin, Expr, ExprNode, Imm, Intrinsic, Kernel, Scalar, Stmt, StmtNode};
use kiln_ir::{Type, UnOp, Var};

use super::{hoist, no, R, END_SLOT, V, XMM, YMM};

/// How far ahead of the packed loop's accesses their streams are prefetched, in bytes (as the
/// 8-lane code's narrow accesses, `narrow.rs`).
const AHEAD: i32 = 1024;

/// Blocks per pass of the packed loop.
const UNROLL: i32 = 2;

/// What a name in the packed code is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Name {
    /// A `let` or `var` in this register.
    Reg(usize),
    /// `global_id(0)`.
    Gid,
    /// A value the packed code does not compute (it cannot fault, see [`pure`]).
    Opaque,
}

/// An instruction's source: a register, or a frame slot of a value broadcast before the
/// loop (a constant's or a parameter's), with the slot of its bits with the sign bits
/// flipped (for unsigned comparisons).
#[derive(Clone, Copy)]
enum Op {
    /// A register; true if a temporary (freed once used).
    Reg(usize, bool),
    /// Slots of the value and of its sign-flipped bits.
    Slot(i32, i32),
}

/// The width of the lanes: bytes for kernels of 8-bit values only, else words (16-bit
/// values, and 8-bit ones in their canonical form, extended to 16 bits).
#[derive(Clone, Copy)]
struct Width {
    /// 16-bit lanes (else 8-bit).
    w16: bool,
}

/// The width in bits of a narrow integer type.
fn tbits(t: Type) -> u32 {
    8 * t.scalar().map_or(0, |s| s.size_bytes() as u32)
}

impl Width {
    /// True if values of type `t` live in these lanes.
    fn ok(&self, t: Type) -> bool {
        let want: &[Scalar] = if self.w16 {
            &[Scalar::I8, Scalar::U8, Scalar::I16, Scalar::U16]
        } else {
            &[Scalar::I8, Scalar::U8]
        };
        t.scalar().is_some_and(|s| want.contains(&s))
    }

    /// True if `t` is an 8-bit type in 16-bit lanes (extended: wrapping operations then
    /// extend their low byte again).
    fn wide8(&self, t: Type) -> bool {
        self.w16 && matches!(t.scalar(), Some(Scalar::I8 | Scalar::U8))
    }

    /// True if values of type `t` compare (and `min`/`max`) as signed lanes: signed types,
    /// and unsigned 8-bit ones zero-extended in 16-bit lanes.
    fn signed_ops(&self, t: Type) -> bool {
        t.scalar().is_some_and(|s| s.is_signed()) || self.wide8(t)
    }

    /// The constant `bits` of the width repeated over 32 bits.
    fn splat(&self, bits: u64) -> u32 {
        if self.w16 {
            (bits as u32 & 0xffff) * 0x0001_0001
        } else {
            (bits as u32 & 0xff) * 0x0101_0101
        }
    }

    fn bits(&self) -> u32 {
        if self.w16 {
            16
        } else {
            8
        }
    }
}

/// True if `e` cannot fault: no loads and no integer division.
fn pure(e: &Expr) -> bool {
    match e.node() {
        ExprNode::Load { .. } => false,
        ExprNode::Binary { op: BinOp::Div | BinOp::Rem, a, .. } if !a.ty().is_float() => false,
        ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. } => true,
        ExprNode::Unary { .. }
        | ExprNode::Binary { .. }
        | ExprNode::Select { .. }
        | ExprNode::Cast { .. }
        | ExprNode::Intrinsic { .. } => e.children().into_iter().all(pure),
        _ => false,
    }
}

/// The constant's canonical bits, if `e` is an integer constant.
fn imm_bits(e: &Expr) -> Option<u64> {
    match e.node() {
        ExprNode::Imm(Imm::Int(_, b)) => Some(*b),
        _ => None,
    }
}

/// The class check: names in scope, live registers and the ranges the loop must be in.
struct Check<'v> {
    v: &'v V,
    w: Width,
    scope: Vec<(String, Name)>,
    live: usize,
    ranges: Vec<hoist::Range>,
    /// Parameters used: scalar frame slot and type.
    params: Vec<(i32, Type)>,
    stores: usize,
}

/// Registers the packed code may use (all sixteen: it runs before the 8-lane code's).
const REGS: usize = 16;

impl Check<'_> {
    fn lookup(&self, n: &str) -> Option<Name> {
        self.scope.iter().rev().find(|(m, _)| m == n).map(|x| x.1)
    }

    fn is_gid(&self, e: &Expr) -> bool {
        match e.node() {
            ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 } => true,
            ExprNode::Var(v) => self.lookup(v.name()) == Some(Name::Gid),
            _ => false,
        }
    }

    /// A global buffer of the width's elements.
    fn buffer(&self, buf: &Var, t: Type) -> bool {
        let Some(tab) = self.v.buf(buf) else { return false };
        let m = self.v.mems.get(self.v.mem_of(tab) as usize);
        self.lookup(buf.name()).is_none()
            && m.is_some_and(|m| m.local.is_none() && m.param.is_some())
            && buf.ty().elem().map(Type::Scalar) == Some(t)
            && self.w.ok(t)
    }

    /// The registers `e` needs (an upper bound on what [`Gen::expr`] takes), or `None` if
    /// it is not in the class.
    fn expr(&mut self, e: &Expr) -> Option<usize> {
        if let Some(d) = super::expr::desugar(e) {
            return self.expr(&d);
        }
        let t = e.ty();
        let int = self.w.ok(t);
        if !int && t != Type::BOOL {
            return None;
        }
        match e.node() {
            ExprNode::Imm(Imm::Int(..)) if int => Some(1),
            ExprNode::Imm(Imm::Bool(_)) => Some(1),
            ExprNode::Var(v) => match self.lookup(v.name()) {
                Some(Name::Reg(_)) => Some(1),
                Some(_) => None,
                None if int && v.ty() == t => {
                    let p = self.v.param(v)?;
                    if !self.params.contains(&(p, t)) {
                        self.params.push((p, t));
                    }
                    Some(1)
                }
                None => None,
            },
            ExprNode::Load { buf, index } => {
                (self.buffer(buf, t) && self.is_gid(index)).then_some(1)
            }
            ExprNode::Unary { op: UnOp::Neg | UnOp::BitNot, a } if int && a.ty() == t => {
                Some(self.expr(a)?.max(2))
            }
            ExprNode::Unary { op: UnOp::Not, a } if a.ty() == Type::BOOL => {
                Some(self.expr(a)?.max(2))
            }
            ExprNode::Binary { op, a, b } => {
                let (na, nb) = (self.expr(a)?, self.expr(b)?);
                let both = na.max(nb + 1);
                match op {
                    BinOp::Add | BinOp::Sub | BinOp::Mul if int && a.ty() == t && b.ty() == t => {
                        Some(both.max(4))
                    }
                    BinOp::And | BinOp::Or | BinOp::Xor if a.ty() == t && b.ty() == t => {
                        Some(both.max(2))
                    }
                    BinOp::LogicAnd | BinOp::LogicOr if a.ty() == Type::BOOL => Some(both.max(2)),
                    BinOp::Div | BinOp::Rem if int => {
                        let d = imm_bits(b)?;
                        (d.is_power_of_two() && a.ty() == t).then_some(na.max(3))
                    }
                    BinOp::Shl | BinOp::Shr if int && a.ty() == t => {
                        super::narrow::const_count(b)?;
                        Some(na.max(3))
                    }
                    _ if op.is_comparison() && self.w.ok(a.ty()) && a.ty() == b.ty() => {
                        Some(both.max(3))
                    }
                    _ => None,
                }
            }
            ExprNode::Select { cond, a, b } if cond.ty() == Type::BOOL => {
                let (nc, na, nb) = (self.expr(cond)?, self.expr(a)?, self.expr(b)?);
                (a.ty() == t && b.ty() == t).then_some(nc.max(na + 1).max(nb + 2).max(3))
            }
            ExprNode::Intrinsic { op: Intrinsic::Min | Intrinsic::Max, args }
                if int && args.len() == 2 && args.iter().all(|x| x.ty() == t) =>
            {
                Some(self.expr(&args[0])?.max(self.expr(&args[1])? + 1).max(2))
            }
            ExprNode::Intrinsic { op: Intrinsic::Abs, args }
                if int && args.len() == 1 && args[0].ty() == t =>
            {
                Some(self.expr(&args[0])?.max(2))
            }
            ExprNode::Cast { a, .. } if self.w.ok(a.ty()) || a.ty() == Type::BOOL => {
                Some(self.expr(a)?.max(2))
            }
            _ => None,
        }
    }

    /// True if `e`'s registers fit beside the live names.
    fn fits(&mut self, e: &Expr) -> bool {
        self.expr(e).is_some_and(|n| self.live + n <= REGS)
    }

    fn block(&mut self, stmts: &[Stmt]) -> bool {
        let (depth, live) = (self.scope.len(), self.live);
        for s in stmts {
            let ok = match s.node() {
                StmtNode::Let { var, value } if var.ty() == Type::U32 && self.is_gid(value) => {
                    self.scope.push((var.name().to_string(), Name::Gid));
                    true
                }
                StmtNode::Let { var, value } | StmtNode::Decl { var, init: value }
                    if self.w.ok(var.ty()) || var.ty() == Type::BOOL =>
                {
                    let fits = self.fits(value);
                    self.live += 1;
                    self.scope.push((var.name().to_string(), Name::Reg(0)));
                    fits
                }
                StmtNode::Let { var, value } if pure(value) => {
                    self.scope.push((var.name().to_string(), Name::Opaque));
                    true
                }
                StmtNode::Assign { var, value } => {
                    matches!(self.lookup(var.name()), Some(Name::Reg(_))) && self.fits(value)
                }
                StmtNode::Store { buf, index, value } => {
                    // (One more register to pack 8-bit values from 16-bit lanes.)
                    self.stores += 1;
                    let need = self.expr(value).map_or(REGS + 1, |n| n + 1);
                    self.buffer(buf, value.ty()) && self.is_gid(index) && self.live + need <= REGS
                }
                StmtNode::If { cond, then, otherwise: None } => {
                    let addr = cond as *const Expr as usize;
                    match self.v.hoisted_ranges.iter().find(|r| r.cond == addr) {
                        Some(r) => {
                            self.ranges.push(r.clone());
                            self.block(then.stmts())
                        }
                        None => false,
                    }
                }
                _ => false,
            };
            if !ok {
                return false;
            }
        }
        self.scope.truncate(depth);
        self.live = live;
        true
    }
}

/// The code generator of the packed loop's body.
struct Gen<'v> {
    v: &'v mut V,
    w: Width,
    /// Free registers (bit r: `ymm{r}`).
    free: u16,
    scope: Vec<(String, Name)>,
    /// Scalar frame slot of each parameter used, its broadcast's slot and its sign-flipped
    /// copy's.
    params: Vec<(i32, i32, i32)>,
    /// The slot of the sign bits of the width's lanes.
    sign: i32,
    /// The block's first work-item after `rbx`'s (in an unrolled copy of the body).
    items: i32,
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
    fn alloc(&mut self) -> R<usize> {
        if self.free == 0 {
            return no("internal: the packed code ran out of registers");
        }
        let r = self.free.trailing_zeros() as usize;
        self.free &= !(1 << r);
        Ok(r)
    }

    fn release(&mut self, o: Op) {
        if let Op::Reg(r, true) = o {
            self.free |= 1 << r;
        }
    }

    fn lookup(&self, n: &str) -> Option<Name> {
        self.scope.iter().rev().find(|(m, _)| m == n).map(|x| x.1)
    }

    /// A constant's slots (its bits and its sign-flipped bits).
    fn konst(&mut self, bits: u32) -> Op {
        let sign = self.w.splat(1 << (self.w.bits() - 1));
        Op::Slot(self.v.imm_slot(bits), self.v.imm_slot(bits ^ sign))
    }

    /// `o` in a register (a temporary, or the register it is in).
    fn reg(&mut self, o: Op) -> R<(usize, Op)> {
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
    fn element(&mut self, buf: &Var, ahead: i32) -> R<(AsmRegister64, i32, i32)> {
        let t = self.v.buf(buf).expect("a buffer of the class");
        let base = self.v.element_base(t)?;
        let size = buf.ty().elem().map_or(1, |e| e.size_bytes()) as i32;
        Ok((base, size, self.items * size + ahead))
    }

    /// A prefetch of `buf`'s stream ahead (by the first copy of the body: a pass of the
    /// unrolled loop covers one 64-byte line of each stream).
    fn prefetch(&mut self, buf: &Var) -> R<()> {
        if self.items != 0 {
            return Ok(());
        }
        let (base, size, d) = self.element(buf, AHEAD)?;
        self.v.a.prefetcht0(byte_ptr(base + rbx * size + d))?;
        Ok(())
    }

    /// `e`'s lanes, in canonical form (8-bit values in 16-bit lanes extended again after
    /// operations that wrap).
    fn expr(&mut self, e: &Expr) -> R<Op> {
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
        if let Some(d) = super::expr::desugar(e) {
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
                let c = super::narrow::const_count(b).expect("a constant count") & (tbits(t) - 1);
                let x = self.expr(a)?;
                self.shift(*op == BinOp::Shl, signed, x, c)
            }
            ExprNode::Binary { op: op @ (BinOp::Div | BinOp::Rem), a, b } => {
                let k = imm_bits(b).expect("a constant").trailing_zeros();
                let x = self.expr(a)?;
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

    fn block(&mut self, stmts: &[Stmt]) -> R<()> {
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
                    match o {
                        Op::Reg(x, _) if x == r => {}
                        Op::Reg(x, _) => self.v.a.vmovdqa(YMM[r], YMM[x])?,
                        Op::Slot(s, _) => self.v.a.vmovdqu(YMM[r], ymmword_ptr(r15 + s))?,
                    }
                    self.release(o);
                }
                StmtNode::Store { buf, value, .. } => {
                    let o = self.expr(value)?;
                    let (r, o) = self.reg(o)?;
                    self.prefetch(buf)?;
                    let (base, size, d) = self.element(buf, 0)?;
                    let at = base + rbx * size + d;
                    if self.w.wide8(value.ty()) {
                        // The canonical words packed to their bytes (in range: no saturation),
                        // the two halves' quadwords brought together.
                        let p = if matches!(o, Op::Reg(_, true)) { r } else { self.alloc()? };
                        if value.ty().scalar().is_some_and(|s| s.is_signed()) {
                            self.v.a.vpacksswb(YMM[p], YMM[r], YMM[r])?;
                        } else {
                            self.v.a.vpackuswb(YMM[p], YMM[r], YMM[r])?;
                        }
                        self.v.a.vpermq(YMM[p], YMM[p], 8)?;
                        self.v.a.vmovdqu(xmmword_ptr(at), XMM[p])?;
                        self.free |= 1 << p;
                    } else {
                        self.v.a.vmovdqu(ymmword_ptr(at), YMM[r])?;
                    }
                    self.release(o);
                }
                StmtNode::If { then, .. } => self.block(then.stmts())?,
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
fn slot(o: Op) -> i32 {
    match o {
        Op::Slot(s, _) => s,
        Op::Reg(..) => unreachable!("a constant is a slot"),
    }
}

impl V {
    /// The packed loop, where the kernel is in the class (module docs): emitted before the
    /// batch loop (its `global_id(0)` lanes not set yet), after the hoisted ranges. It runs
    /// blocks from `rbx` while they fit, leaves `rbx` at the first work-item left, and ends
    /// the call if none is.
    pub(super) fn packed(&mut self, k: &Kernel) -> R<()> {
        // Byte lanes where every value is 8-bit, else word lanes.
        let mut found = None;
        for w16 in [false, true] {
            let mut c = Check {
                v: self,
                w: Width { w16 },
                scope: Vec::new(),
                live: 0,
                ranges: Vec::new(),
                params: Vec::new(),
                stores: 0,
            };
            if c.block(k.body().stmts()) && c.stores > 0 {
                found = Some((c.ranges, c.params, c.w));
                break;
            }
        }
        let Some((ranges, params, w)) = found else { return Ok(()) };
        let lanes: i32 = if w.w16 { 16 } else { 32 };
        let sign = self.imm_slot(w.splat(1 << (w.bits() - 1)));
        // Parameters broadcast, and their sign-flipped copies.
        let mut slots = Vec::new();
        for (p, t) in params {
            let (s, f) = (self.slot(), self.slot());
            if !w.w16 {
                self.a.vpbroadcastb(ymm0, byte_ptr(r13 + p))?;
            } else if !w.wide8(t) {
                self.a.vpbroadcastw(ymm0, word_ptr(r13 + p))?;
            } else {
                // Extended to the word.
                if t.scalar().is_some_and(|s| s.is_signed()) {
                    self.a.movsx(eax, byte_ptr(r13 + p))?;
                } else {
                    self.a.movzx(eax, byte_ptr(r13 + p))?;
                }
                self.a.vmovd(xmm0, eax)?;
                self.a.vpbroadcastw(ymm0, xmm0)?;
            }
            self.a.vmovdqu(ymmword_ptr(r15 + s), ymm0)?;
            self.a.vpxor(ymm0, ymm0, ymmword_ptr(r15 + sign))?;
            self.a.vmovdqu(ymmword_ptr(r15 + f), ymm0)?;
            slots.push((p, s, f));
        }
        // The last block's first work-item: the span's end less a block, and for each range
        // its highest lane-0 id less the block's batches after the first.
        let limit = self.slot();
        self.a.mov(rax, qword_ptr(r15 + END_SLOT))?;
        self.a.sub(rax, lanes)?;
        for r in &ranges {
            self.a.mov(r11, qword_ptr(r15 + r.slot + 8))?;
            self.a.sub(r11, lanes - 8)?;
            self.a.cmp(rax, r11)?;
            self.a.cmovg(rax, r11)?;
        }
        self.a.mov(qword_ptr(r15 + limit), rax)?;
        let exit = self.a.create_label();
        for r in ranges.iter().filter(|r| r.lower) {
            // (Ids only grow: a block past the lowest at the start is past it after.)
            self.a.cmp(rbx, qword_ptr(r15 + r.slot))?;
            self.a.jl(exit)?;
        }
        // Blocks in pairs while two fit, then one if it does.
        let mut top = self.a.create_label();
        let mut single = self.a.create_label();
        let pairs = self.slot();
        self.a.sub(rax, lanes * (UNROLL - 1))?;
        self.a.mov(qword_ptr(r15 + pairs), rax)?;
        self.a.cmp(rbx, rax)?;
        self.a.jg(single)?;
        self.bind(&mut top)?;
        for copy in 0..UNROLL {
            let items = copy * lanes;
            let free = u16::MAX;
            let params = slots.clone();
            let mut g = Gen { v: self, w, free, scope: Vec::new(), params, sign, items };
            g.block(k.body().stmts())?;
        }
        self.a.add(rbx, UNROLL * lanes)?;
        self.a.cmp(rbx, qword_ptr(r15 + pairs))?;
        self.a.jle(top)?;
        self.bind(&mut single)?;
        self.a.cmp(rbx, qword_ptr(r15 + limit))?;
        self.a.jg(exit)?;
        let mut g = Gen { v: self, w, free: u16::MAX, scope: Vec::new(), params: slots, sign, items: 0 };
        g.block(k.body().stmts())?;
        self.a.add(rbx, lanes)?;
        let mut exit = exit;
        self.bind(&mut exit)?;
        let mut more = self.a.create_label();
        self.a.cmp(rbx, qword_ptr(r15 + END_SLOT))?;
        self.a.jb(more)?;
        self.a.xor(eax, eax)?;
        self.a.jmp(self.ret)?;
        self.bind(&mut more)?;
        Ok(())
    }
}
