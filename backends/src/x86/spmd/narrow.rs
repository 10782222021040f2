//! 8- and 16-bit integers (`i8`, `u8`, `i16`, `u16`) in the lane code: a value lives in a
//! 32-bit lane, sign-extended (signed types) or zero-extended (unsigned), which is the
//! interpreter's canonical form of its bits (`kiln_ir::canonical_int`) cut to 32 bits.
//!
//! Why this is exact: `+ - * & | ^ << ~` and unary `-` of the 32-bit lanes agree with the
//! narrow operation in the low bits (arithmetic modulo 2^32 is arithmetic modulo 2^8 and
//! 2^16), so re-extending the low bits ([`V::rewiden`]) gives the interpreter's wrapped
//! result; `>>` of an extended value is the narrow shift (arithmetic on signed types,
//! logical on unsigned), with the count taken modulo the width as the interpreter takes it.
//! Extended values compare, `min`, `max` and `abs` as signed 32-bit integers do (an
//! unsigned narrow value is a non-negative i32). Casts: to a 32-bit integer the extension
//! is the interpreter's (sign extension from a signed type, zero extension from an
//! unsigned one); to f32 the conversion is exact; from f32 the saturating conversion to
//! i32/u32 followed by a clamp to the narrow range is the saturating conversion to the
//! narrow type (NaN gives 0 in both). Loads at exactly `global_id(0)` extend the batch's
//! eight elements by one instruction, other loads each active lane's element; stores write
//! each active lane's low bytes, one lane after another (as the 32-bit per-lane stores:
//! where lanes collide, the last work-item wins), checked as 32-bit accesses are, except
//! that a whole batch's store at `global_id(0)` packs the eight canonical lanes (in the
//! type's range, so the packs of its signedness never saturate) into one store, with no
//! lane test where every lane is known active when the code is generated. Loads and
//! whole-batch stores at `global_id(0)` prefetch their stream's line ahead.
//! Integer `/` and `%` are per lane as for i32 (`ops.rs`), on the extended values.
//!
//! `f16` values (a storage type: loads, stores, casts, `let`/`var`) are their bits in the
//! lanes as u16 values are, and convert through f32 (F16C).

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Expr, ExprNode, Intrinsic, Scalar, Type, UnOp, Var};

use super::{lane_type, no, Kind, R, V, XMM, YMM};
use crate::x86::rt;

/// Width in bits and signedness of an 8- or 16-bit integer type; f16, a storage type (no
/// operator takes it), is its 16 bits zero-extended, as u16.
pub(super) fn narrow(t: Type) -> Option<(u32, bool)> {
    match t.scalar()? {
        Scalar::I8 => Some((8, true)),
        Scalar::U8 => Some((8, false)),
        Scalar::I16 => Some((16, true)),
        Scalar::U16 | Scalar::F16 => Some((16, false)),
        _ => None,
    }
}

/// True if a cast converts to or from f16 (through f32: `half_cast`).
fn half_cast(to: Scalar, from: Type) -> bool {
    (to == Scalar::F16) != (from == Type::F16)
}

/// True if the casts of this module convert `from` to `to` (see [`V::narrow_expr`]).
fn narrow_cast(to: Scalar, from: Type) -> bool {
    let to_t = Type::Scalar(to);
    let from_ok = narrow(from).is_some() || lane_type(from) || from == Type::BOOL;
    let wide = matches!(from.scalar(), Some(Scalar::F64 | Scalar::I64 | Scalar::U64));
    (narrow(to_t).is_some() && (from_ok || wide)) || (narrow(from).is_some() && lane_type(to_t))
}

/// How far ahead of a batch's 8/16-bit elements at `global_id(0)` their loads and stores
/// prefetch, in bytes (16 lines: measured on thresholding, 1024 and 4096 alike).
const NARROW_PREFETCH_AHEAD: i32 = 1024;

/// The value of a constant shift count (its canonical bits, cut to 32 bits), if `b` is one.
pub(super) fn const_count(b: &Expr) -> Option<u32> {
    match b.node() {
        ExprNode::Imm(i) => Some(rt::bits_of(kiln_ir::eval::cast(i.scalar(), *i)) as u32),
        _ => None,
    }
}

impl V {
    /// Re-extends the low `bits` of `ymm{d}`'s lanes: the canonical form of the wrapped
    /// narrow value.
    fn rewiden(&mut self, d: usize, bits: u32, signed: bool) -> R<()> {
        let s = 32 - bits;
        self.a.vpslld(YMM[d], YMM[d], s)?;
        if signed {
            self.a.vpsrad(YMM[d], YMM[d], s)?;
        } else {
            self.a.vpsrld(YMM[d], YMM[d], s)?;
        }
        Ok(())
    }

    /// Registers the nodes of this module need (see [`V::need`]); `None` for other nodes.
    pub(super) fn need_narrow(&self, e: &Expr) -> Option<usize> {
        match e.node() {
            ExprNode::Cast { to, a } if half_cast(*to, a.ty()) => Some(self.need(a).max(4)),
            ExprNode::Cast { to, a } if narrow_cast(*to, a.ty()) => {
                // From f32 through the saturating 32-bit conversion (4 for u32).
                if super::wide64::is_64(a.ty()) {
                    return Some(self.need64(a).max(4));
                }
                Some(self.need(a).max(if a.ty() == Type::F32 { 4 } else { 1 }))
            }
            _ if narrow(e.ty()).is_none() => None,
            ExprNode::Load { buf, .. } if self.private(buf).is_some() => None,
            // At exactly `global_id(0)` one extending load; else checked, per lane.
            ExprNode::Load { index, .. } if self.kind(index) == Kind::Gid0 => Some(1),
            ExprNode::Load { buf, index } if self.private(buf).is_none() => {
                Some(self.need(index).max(3))
            }
            ExprNode::Unary { a, .. } => Some(self.need(a).max(2)),
            ExprNode::Intrinsic { op: Intrinsic::Min | Intrinsic::Max, args }
                if args.len() == 2 =>
            {
                Some(self.need(&args[0]).max(self.need(&args[1]) + 1))
            }
            _ => None,
        }
    }

    /// The nodes of this module into `ymm{d}` (temporaries above it); `None` for other
    /// nodes (a narrow `let`, `var` or `select` takes the common code).
    pub(super) fn narrow_expr(&mut self, e: &Expr, d: usize) -> Option<R<()>> {
        if let ExprNode::Cast { to, a } = e.node() {
            if half_cast(*to, a.ty()) {
                return Some(self.half_cast(*to, a, d));
            }
            if narrow_cast(*to, a.ty()) {
                return Some(self.narrow_cast(*to, a, d));
            }
        }
        let (bits, signed) = narrow(e.ty())?;
        if let Some(plain) = super::expr::desugar(e) {
            return Some(self.expr(&plain, d));
        }
        Some(match e.node() {
            ExprNode::Imm(i) => {
                // The canonical bits, cut to the lane.
                let v = rt::bits_of(kiln_ir::eval::cast(i.scalar(), *i)) as u32;
                let off = self.imm_slot(v);
                self.a.vmovups(YMM[d], ymmword_ptr(r15 + off)).map_err(Into::into)
            }
            ExprNode::Load { buf, index } if self.private(buf).is_none() => {
                self.narrow_load(buf, index, e.ty(), d)
            }
            ExprNode::Binary {
                op:
                    op @ (BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::And | BinOp::Or | BinOp::Xor),
                a,
                b,
            } => self.binary(*op, a, b, d).and_then(|_| {
                if matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul) {
                    self.rewiden(d, bits, signed)?;
                }
                Ok(())
            }),
            // Per lane as i32 division of the extended values (exact: no quotient
            // overflows 32 bits), then re-extended: MIN / -1 wraps to MIN, as the
            // interpreter's wrapping division.
            ExprNode::Binary { op: op @ (BinOp::Div | BinOp::Rem), a, b } => self
                .lane_div(e, *op == BinOp::Rem, a, b, d)
                .and_then(|_| self.rewiden(d, bits, signed)),
            ExprNode::Binary { op: op @ (BinOp::Shl | BinOp::Shr), a, b } => {
                self.narrow_shift(*op == BinOp::Shl, a, b, d, bits, signed)
            }
            ExprNode::Unary { op: UnOp::Neg, a } => self.expr(a, d).and_then(|_| {
                let z = YMM[d + 1];
                self.a.vpxor(z, z, z)?;
                self.a.vpsubd(YMM[d], z, YMM[d])?;
                self.rewiden(d, bits, signed)
            }),
            ExprNode::Unary { op: UnOp::BitNot, a } => self.expr(a, d).and_then(|_| {
                let ones = self.imm_slot(u32::MAX);
                self.a.vpxor(YMM[d], YMM[d], ymmword_ptr(r15 + ones))?;
                self.rewiden(d, bits, signed)
            }),
            ExprNode::Intrinsic { op: op @ (Intrinsic::Min | Intrinsic::Max), args }
                if args.len() == 2 =>
            {
                self.pair(&args[0], &args[1], d).and_then(|(ra, rb)| {
                    let (x, y, z) = (YMM[d], YMM[ra], YMM[rb]);
                    if *op == Intrinsic::Min {
                        self.a.vpminsd(x, y, z)?;
                    } else {
                        self.a.vpmaxsd(x, y, z)?;
                    }
                    Ok(())
                })
            }
            ExprNode::Intrinsic { op: Intrinsic::Abs, args } if args.len() == 1 => {
                self.expr(&args[0], d).and_then(|_| {
                    if signed {
                        // Wrapping: abs(MIN) is MIN again after re-extension.
                        self.a.vpabsd(YMM[d], YMM[d])?;
                        self.rewiden(d, bits, signed)?;
                    }
                    Ok(())
                })
            }
            // (Private arrays hold the lane form: `mem.rs` loads them.)
            ExprNode::Var(_) | ExprNode::Select { .. } | ExprNode::Load { .. } => return None,
            _ => no(format!("`{e}` on {}", e.ty())),
        })
    }

    /// `a << b` or `a >> b` of narrow values: counts modulo the width.
    fn narrow_shift(
        &mut self,
        left: bool,
        a: &Expr,
        b: &Expr,
        d: usize,
        bits: u32,
        signed: bool,
    ) -> R<()> {
        if let Some(c) = const_count(b) {
            // A constant count: an immediate shift, the count taken modulo the width here.
            let c = c & (bits - 1);
            let x = YMM[d];
            let y = self.operand_reg(a, d)?;
            if left {
                self.a.vpslld(x, y, c)?;
                self.rewiden(d, bits, signed)?;
            } else if signed {
                self.a.vpsrad(x, y, c)?;
            } else {
                self.a.vpsrld(x, y, c)?;
            }
            return Ok(());
        }
        let (ra, rb) = self.pair(a, b, d)?;
        let m = self.imm_slot(bits - 1);
        let (x, y, z) = (YMM[d], YMM[ra], YMM[rb]);
        self.a.vpand(z, z, ymmword_ptr(r15 + m))?;
        if left {
            self.a.vpsllvd(x, y, z)?;
            self.rewiden(d, bits, signed)?;
        } else if signed {
            self.a.vpsravd(x, y, z)?;
        } else {
            self.a.vpsrlvd(x, y, z)?;
        }
        Ok(())
    }

    /// `a as to` where one side is f16: through f32, with F16C's conversions (`vcvtph2ps`
    /// is exact; `vcvtps2ph` rounds to nearest even, quiets a NaN keeping its sign and top
    /// payload bits, as `kiln_ir::eval::cast` does). Every source type's value is exact in
    /// f32 or, where it is not (integers beyond 2^24), infinite as f16 either way.
    fn half_cast(&mut self, to: Scalar, a: &Expr, d: usize) -> R<()> {
        if !std::arch::is_x86_feature_detected!("f16c") {
            return no("an f16 conversion without F16C");
        }
        if to == Scalar::F16 && a.ty() == Type::F64 {
            // Through f32 it would round twice.
            return no("a cast from f64 to f16");
        }
        if to == Scalar::F16 {
            if a.ty() == Type::F32 {
                self.expr(a, d)?;
            } else {
                self.expr(&a.cast(Scalar::F32), d)?;
            }
            self.a.vcvtps2ph(XMM[d], YMM[d], 0)?;
            self.a.vpmovzxwd(YMM[d], XMM[d])?;
            return Ok(());
        }
        if to != Scalar::F32 {
            return self.expr(&a.cast(Scalar::F32).cast(to), d);
        }
        // The eight f16s as packed words, then converted.
        self.expr(a, d)?;
        self.a.vextracti128(XMM[d + 1], YMM[d], 1)?;
        self.a.vpackusdw(XMM[d], XMM[d], XMM[d + 1])?;
        self.a.vcvtph2ps(YMM[d], XMM[d])?;
        Ok(())
    }

    /// `a as to` where one side is a narrow integer type (see `narrow_cast`).
    fn narrow_cast(&mut self, to: Scalar, a: &Expr, d: usize) -> R<()> {
        let to_t = Type::Scalar(to);
        let Some((bits, signed)) = narrow(to_t) else {
            // From a narrow type to a 32-bit one: the extension is the cast.
            self.expr(a, d)?;
            if to == Scalar::F32 {
                self.a.vcvtdq2ps(YMM[d], YMM[d])?;
            }
            return Ok(());
        };
        if a.ty() == Type::F32 || a.ty() == Type::F64 {
            // Saturating to the 32-bit type of the same signedness, then clamped.
            let via = if signed { Scalar::I32 } else { Scalar::U32 };
            self.expr(&a.cast(via), d)?;
            let hi =
                self.imm_slot(if signed { (1u32 << (bits - 1)) - 1 } else { (1u32 << bits) - 1 });
            if signed {
                let lo = self.imm_slot((-(1i32 << (bits - 1))) as u32);
                self.a.vpminsd(YMM[d], YMM[d], ymmword_ptr(r15 + hi))?;
                self.a.vpmaxsd(YMM[d], YMM[d], ymmword_ptr(r15 + lo))?;
            } else {
                self.a.vpminud(YMM[d], YMM[d], ymmword_ptr(r15 + hi))?;
            }
            return Ok(());
        }
        if matches!(a.ty().scalar(), Some(Scalar::I64 | Scalar::U64)) {
            // Truncated to 32 bits first, then to the width.
            self.expr(&a.cast(Scalar::I32), d)?;
            return self.rewiden(d, bits, signed);
        }
        if a.ty() == Type::BOOL {
            // 0 or 1: already canonical.
            return self.expr(&a.cast(Scalar::I32), d);
        }
        self.expr(a, d)?;
        self.rewiden(d, bits, signed)
    }

    /// A load of narrow elements `buf[index]` into `ymm{d}` (`ymm{d+1}`, `ymm{d+2}`
    /// temporaries): checked as 32-bit loads are (but at exactly `global_id(0)`), then one
    /// gather of the dwords around 8-bit elements (`gather8.rs`), one extending scalar load
    /// per active lane of 16-bit ones; inactive lanes get 0.
    fn narrow_load(&mut self, buf: &Var, index: &Expr, ty: Type, d: usize) -> R<()> {
        let t = self.buf_of(buf, ty)?;
        let (bits, signed) = narrow(ty).unwrap_or((32, false));
        let idx_signed = Self::index_type(index)?;
        if self.kind(index) == Kind::Gid0 {
            // The batch's eight elements, in bounds (the driver checks the span), extended
            // by one instruction.
            let b = self.element_base(t)?;
            let x = YMM[d];
            self.narrow_prefetch(b, bits)?;
            match (bits, signed) {
                (8, true) => self.a.vpmovsxbd(x, qword_ptr(b + rbx))?,
                (8, false) => self.a.vpmovzxbd(x, qword_ptr(b + rbx))?,
                (_, true) => self.a.vpmovsxwd(x, xmmword_ptr(b + rbx * 2))?,
                (_, false) => self.a.vpmovzxwd(x, xmmword_ptr(b + rbx * 2))?,
            }
            return Ok(());
        }
        self.expr(index, d)?;
        let mut fin = self.a.create_label();
        // At `global_id(0)` plus a uniform value (a 2-D filter's `src[(y - 1) * w + x + 1]`)
        // under no control mask: with the batch's span in bounds (a proof, or one compare of
        // lane 0's index, as for 32-bit elements), the eight elements extended by one
        // instruction; otherwise the lanes below.
        let contig = self.kind(index) == Kind::Contig && self.mask.is_none();
        if contig {
            let slow = self.span_test(index, t, d)?;
            let b = self.base(t)?;
            let x = YMM[d];
            match (bits, signed) {
                (8, true) => self.a.vpmovsxbd(x, qword_ptr(b + rax))?,
                (8, false) => self.a.vpmovzxbd(x, qword_ptr(b + rax))?,
                (_, true) => self.a.vpmovsxwd(x, xmmword_ptr(b + rax * 2))?,
                (_, false) => self.a.vpmovzxwd(x, xmmword_ptr(b + rax * 2))?,
            }
            let Some(mut slow) = slow else {
                return Ok(());
            };
            self.a.jmp(fin)?;
            self.bind(&mut slow)?;
        }
        // Bytes at a small stride (`rgb[3 * i + 1]`): the span at once when it is in
        // bounds (`strided.rs`).
        let strided = self.stride_of(index).filter(|&s| bits == 8 && s <= 4);
        if let Some(s) = strided {
            let mut slow = self.strided_bytes(t, s, signed, d, fin)?;
            self.bind(&mut slow)?;
        }
        self.active(d + 1)?;
        self.check(index, d, d + 1, d + 2, t, "load", idx_signed)?;
        let base = self.base(t)?;
        if bits == 8 {
            // One gather of the dwords around the bytes (`gather8.rs`), or in a loop that
            // writes no memory, the dwords an earlier trip gathered (`bytecache.rs`).
            if !self.cached_bytes(base, t, index, d, signed)? {
                self.gather_bytes(base, d, signed)?;
            }
            if strided.is_some() || contig {
                self.bind(&mut fin)?;
            }
            return Ok(());
        }
        self.a.vmovups(ymmword_ptr(r15 + self.tmp_i), YMM[d])?;
        self.a.vmovmskps(eax, YMM[d + 1])?;
        for lane in 0..8 {
            let mut skip = self.a.create_label();
            let mut done = self.a.create_label();
            let slot = dword_ptr(r15 + (self.tmp_v + 4 * lane));
            self.a.test(eax, 1 << lane)?;
            self.a.je(skip)?;
            self.a.movsxd(r10, dword_ptr(r15 + (self.tmp_i + 4 * lane)))?;
            match (bits, signed) {
                (8, true) => self.a.movsx(r11d, byte_ptr(base + r10))?,
                (8, false) => self.a.movzx(r11d, byte_ptr(base + r10))?,
                (_, true) => self.a.movsx(r11d, word_ptr(base + r10 * 2))?,
                (_, false) => self.a.movzx(r11d, word_ptr(base + r10 * 2))?,
            }
            self.a.mov(slot, r11d)?;
            self.a.jmp(done)?;
            self.bind(&mut skip)?;
            self.a.mov(slot, 0)?;
            self.bind(&mut done)?;
        }
        self.a.vmovups(YMM[d], ymmword_ptr(r15 + self.tmp_v))?;
        if strided.is_some() || contig {
            self.bind(&mut fin)?;
        }
        Ok(())
    }

    /// A prefetch of the line [`NARROW_PREFETCH_AHEAD`] bytes past this batch's elements
    /// of `bits` bits at `global_id(0)` of the buffer based at `b`. A batch of 8/16-bit
    /// elements touches 8 or 16 bytes, so the few loads and stores a core keeps in flight
    /// cover few lines of a stream: thresholding 2^24 bytes ran at two thirds of rustc's
    /// loop (16-byte accesses) with its time on the load and the store, and 15-30% faster
    /// with the lines asked for ahead. A prefetch never faults, past the end of a buffer
    /// included, and changes no value.
    fn narrow_prefetch(&mut self, b: AsmRegister64, bits: u32) -> R<()> {
        if bits == 8 {
            self.a.prefetcht0(byte_ptr(b + rbx + NARROW_PREFETCH_AHEAD))?;
        } else {
            self.a.prefetcht0(byte_ptr(b + rbx * 2 + NARROW_PREFETCH_AHEAD))?;
        }
        Ok(())
    }

    /// `ymm0`'s eight lanes' low `bits` (8 or 16) stored packed at `global_id(0)` of the
    /// buffer based at `b`.
    fn packed_store(&mut self, b: AsmRegister64, bits: u32, signed: bool) -> R<()> {
        self.narrow_prefetch(b, bits)?;
        self.pack_lanes(bits, signed)?;
        if bits == 8 {
            self.a.vmovq(qword_ptr(b + rbx), xmm0)?;
        } else {
            self.a.vmovdqu(xmmword_ptr(b + rbx * 2), xmm0)?;
        }
        Ok(())
    }

    /// `ymm0`'s eight lanes' low `bits` (8 or 16) packed into the low 8 or 16 bytes of
    /// `xmm0`.
    fn pack_lanes(&mut self, bits: u32, signed: bool) -> R<()> {
        // The lanes hold canonical values (zero-extended for unsigned types, sign-extended
        // for signed ones), in the narrow type's range: the packs of the same signedness
        // only narrow, nothing saturates.
        if signed {
            self.a.vpackssdw(ymm0, ymm0, ymm0)?;
        } else {
            self.a.vpackusdw(ymm0, ymm0, ymm0)?;
        }
        self.a.vpermq(ymm0, ymm0, 0b00_00_10_00)?;
        if bits == 8 {
            if signed {
                self.a.vpacksswb(xmm0, xmm0, xmm0)?;
            } else {
                self.a.vpackuswb(xmm0, xmm0, xmm0)?;
            }
        }
        Ok(())
    }

    /// `buf[index] = value` of narrow elements in the active lanes, checked as 32-bit
    /// stores are (but at exactly `global_id(0)`).
    pub(super) fn narrow_store(&mut self, buf: &Var, index: &Expr, value: &Expr) -> R<()> {
        let t = self.buf_of(buf, value.ty())?;
        let (bits, vsigned) = narrow(value.ty()).unwrap_or((32, false));
        let signed = Self::index_type(index)?;
        let indexed = self.store_operands(index, value, 1)?;
        if self.kind(index) == Kind::Gid0 {
            // The batch's elements, in bounds (the driver checks the span): each active
            // lane's low bytes at `global_id(0)` + lane.
            if self.all_lanes_active() {
                // Every lane active, known as the code is generated (an unmasked copy's
                // batch): only the packed store.
                let b = self.element_base(t)?;
                return self.packed_store(b, bits, vsigned);
            }
            self.active(1)?;
            self.a.vmovups(ymmword_ptr(r15 + self.tmp_v), ymm0)?;
            self.a.vmovmskps(r10d, ymm1)?;
            let b = self.element_base(t)?;
            // With every lane active (a whole batch, the usual case), the eight low bytes or
            // words packed and stored at once: eight byte stores of their own cost more than
            // the loop's loads and arithmetic together.
            let mut lanes = self.a.create_label();
            let mut done = self.a.create_label();
            self.a.cmp(r10d, 0xff)?;
            self.a.jne(lanes)?;
            self.packed_store(b, bits, vsigned)?;
            self.a.jmp(done)?;
            self.bind(&mut lanes)?;
            for lane in 0..8 {
                let mut skip = self.a.create_label();
                self.a.test(r10d, 1 << lane)?;
                self.a.je(skip)?;
                self.a.mov(r11d, dword_ptr(r15 + (self.tmp_v + 4 * lane)))?;
                if bits == 8 {
                    self.a.mov(byte_ptr(b + rbx + lane), r11b)?;
                } else {
                    self.a.mov(word_ptr(b + rbx * 2 + 2 * lane), r11w)?;
                }
                self.bind(&mut skip)?;
            }
            self.bind(&mut done)?;
            return Ok(());
        }
        if !indexed {
            self.expr_top(index, 1)?;
        }
        // At `global_id(0)` plus a uniform value under no control mask, as for loads: the
        // eight lanes packed and stored at once where the span is in bounds.
        let mut done = self.a.create_label();
        let contig = self.kind(index) == Kind::Contig && self.mask.is_none();
        if contig {
            let slow = self.span_test(index, t, 1)?;
            let b = self.base(t)?;
            self.pack_lanes(bits, vsigned)?;
            if bits == 8 {
                self.a.vmovq(qword_ptr(b + rax), xmm0)?;
            } else {
                self.a.vmovdqu(xmmword_ptr(b + rax * 2), xmm0)?;
            }
            let Some(mut slow) = slow else {
                return Ok(());
            };
            self.a.jmp(done)?;
            self.bind(&mut slow)?;
        }
        self.active(2)?;
        self.check(index, 1, 2, 3, t, "store", signed)?;
        let base = self.base(t)?;
        self.store_lanes(base, 0, bits / 8)?;
        if contig {
            self.bind(&mut done)?;
        }
        Ok(())
    }
}
