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
//! `global_id(0)`) whose `if`s are hoisted ranges without `else` or lane-varying `if`s
//! (with or without `else`) on conditions of the class, run under masks (`masked.rs`), and
//! whose values are all of one width: `let`s, `var`s and assignments of `i8`/`u8` (or `i16`/`u16`) and
//! `bool` values, `let`s of `global_id(0)` (used only as indices or in the ranges), loads
//! and stores of global buffers of that width at exactly `global_id(0)`, scalar parameters
//! and constants of that width, and the operators: `+ - * & | ^ ~` and unary `-`
//! (wrapping), `<< >>` by constant counts (modulo the width, arithmetic `>>` on signed
//! types), `/` and `%` by constant powers of two, and of unsigned values by any nonzero
//! constant (`divide.rs`: a multiply-high by a magic number), comparisons, `!`,
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

mod divide;
mod gen;
mod masked;

use super::{hoist, END_SLOT, R, V};
use gen::Gen;

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
pub(super) fn pure(e: &Expr) -> bool {
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
    /// Lane-varying `if`s around the statement checked (their stores are merged).
    masks: usize,
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
                        let signed = t.scalar().is_some_and(|s| s.is_signed());
                        let by_magic = !signed && divide::plan(d as u32, tbits(t)).is_some();
                        let regs = if by_magic { 4 } else { 3 };
                        ((d.is_power_of_two() || by_magic) && a.ty() == t).then_some(na.max(regs))
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
                    // (One more register to pack 8-bit values from 16-bit lanes; under a
                    // mask, two more for the elements and the packed mask.)
                    self.stores += 1;
                    let more = if self.masks > 0 { 3 } else { 1 };
                    let need = self.expr(value).map_or(REGS + 1, |n| n + more);
                    self.buffer(buf, value.ty()) && self.is_gid(index) && self.live + need <= REGS
                }
                StmtNode::If { cond, then, otherwise } => {
                    let addr = cond as *const Expr as usize;
                    match self.v.hoisted_ranges.iter().find(|r| r.cond == addr) {
                        Some(r) if otherwise.is_none() => {
                            self.ranges.push(r.clone());
                            self.block(then.stmts())
                        }
                        Some(_) => false,
                        // Lane-varying: both sides under masks (`masked.rs`), the mask one
                        // more live register.
                        None => {
                            let fits = cond.ty() == Type::BOOL && self.fits(cond);
                            self.live += 1;
                            self.masks += 1;
                            let ok = fits
                                && self.block(then.stmts())
                                && otherwise.as_ref().is_none_or(|o| self.block(o.stmts()));
                            self.live -= 1;
                            self.masks -= 1;
                            ok
                        }
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
                masks: 0,
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
            let mut g =
                Gen { v: self, w, free, scope: Vec::new(), params, sign, items, mask: None };
            g.block(k.body().stmts())?;
        }
        self.a.add(rbx, UNROLL * lanes)?;
        self.a.cmp(rbx, qword_ptr(r15 + pairs))?;
        self.a.jle(top)?;
        self.bind(&mut single)?;
        self.a.cmp(rbx, qword_ptr(r15 + limit))?;
        self.a.jg(exit)?;
        let free = u16::MAX;
        let params = slots;
        let mut g = Gen { v: self, w, free, scope: Vec::new(), params, sign, items: 0, mask: None };
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
