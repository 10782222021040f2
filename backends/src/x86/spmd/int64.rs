//! i64/u64 operations of the lane code beyond what they share with f64 (`wide64.rs`: the
//! two-register layout, constants, names, loads, stores, `select`, comparisons, casts):
//! arithmetic, shifts, `min`/`max`/`abs`, `/` and `%` per lane, and the conversion to f64.

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Expr, ExprNode, Intrinsic, Type, UnOp};

use super::wide64::F64_M2P31;
use super::{no, R, V, XMM, YMM};

impl V {
    /// i64/u64 `a` as f64 into `ymm{d}`, `ymm{d+1}`, correctly rounded: the high dword
    /// (signed for i64) times 2^32 and the low dword (unsigned) are both exact in f64, so
    /// their sum rounds once.
    pub(super) fn int64_to_f64(&mut self, signed: bool, a: &Expr, d: usize) -> R<()> {
        self.expr64(a, d)?;
        self.int64_lanes_to_f64(signed, d)
    }

    /// [`V::int64_to_f64`] of the qword lanes already in `ymm{d}`, `ymm{d+1}`
    /// (`ymm{d+2}`, `ymm{d+3}` temporaries).
    fn int64_lanes_to_f64(&mut self, signed: bool, d: usize) -> R<()> {
        let sign = self.imm_slot(0x8000_0000);
        let k = self.q_slot(F64_M2P31);
        let two32 = self.q_slot(0x41f0_0000_0000_0000);
        for h in 0..2 {
            let (p, t, u) = (YMM[d + h], YMM[d + 2], YMM[d + 3]);
            // The high dwords, then the low ones, of the four qwords in an xmm each.
            self.a.vshufps(t, p, p, 0xdd)?;
            self.a.vpermpd(t, t, 0x08)?;
            self.a.vshufps(u, p, p, 0x88)?;
            self.a.vpermpd(u, u, 0x08)?;
            if !signed {
                self.a.vpxor(XMM[d + 2], XMM[d + 2], xmmword_ptr(r15 + sign))?;
            }
            self.a.vcvtdq2pd(t, XMM[d + 2])?;
            if !signed {
                self.a.vsubpd(t, t, k)?;
            }
            self.a.vmulpd(t, t, two32)?;
            self.a.vpxor(XMM[d + 3], XMM[d + 3], xmmword_ptr(r15 + sign))?;
            self.a.vcvtdq2pd(u, XMM[d + 3])?;
            self.a.vsubpd(u, u, k)?;
            self.a.vaddpd(p, t, u)?;
        }
        Ok(())
    }

    /// i64/u64 `a` as f32 into `ymm{d}`, correctly rounded (`ymm{d+1..d+3}` temporaries).
    /// Below 2^53 in magnitude the f64 conversion is exact, so rounding it to f32 rounds
    /// once. Above, the value is first rounded to odd at 2^11 (the low 11 bits cleared and
    /// bit 11 set if any was: exact in f64, 53 bits at most), then converted exactly, then
    /// rounded to f32: rounding to odd with at least two bits to spare below the target's
    /// last bit (f32's is 2^30 or more there) and then to nearest even is rounding once.
    pub(super) fn int64_to_f32(&mut self, signed: bool, a: &Expr, d: usize) -> R<()> {
        self.expr64(a, d)?;
        let low = self.q_slot(0x7ff);
        let high = self.q_slot(!0x7ff);
        let (t, u) = (YMM[d + 2], YMM[d + 3]);
        let limits = if signed {
            Some((self.q_slot((1 << 53) - 1), self.q_slot((-(1i64 << 53)) as u64)))
        } else {
            None
        };
        let zero = self.q_slot(0);
        for h in 0..2 {
            let p = YMM[d + h];
            // `t`: all ones in the lanes of magnitude 2^53 or more.
            match limits {
                Some((above, below)) => {
                    self.a.vpcmpgtq(t, p, above)?;
                    self.a.vmovdqu(u, below)?;
                    self.a.vpcmpgtq(u, u, p)?;
                    self.a.vpor(t, t, u)?;
                }
                None => {
                    self.a.vpsrlq(t, p, 53)?;
                    self.a.vpcmpeqq(t, t, zero)?;
                    self.a.vpcmpeqd(u, u, u)?;
                    self.a.vpxor(t, t, u)?;
                }
            }
            // `u`: the value rounded to odd at 2^11.
            self.a.vpand(u, p, low)?;
            self.a.vpaddq(u, u, low)?;
            self.a.vpor(u, u, p)?;
            self.a.vpand(u, u, high)?;
            self.a.vblendvpd(p, p, u, t)?;
        }
        self.int64_lanes_to_f64(signed, d)?;
        self.a.vcvtpd2ps(XMM[d], YMM[d])?;
        self.a.vcvtpd2ps(XMM[d + 1], YMM[d + 1])?;
        self.a.vinsertf128(YMM[d], YMM[d], XMM[d + 1], 1)?;
        Ok(())
    }

    /// The f64 lanes in `ymm{d}`, `ymm{d+1}` as i64 or u64 (`unsigned`), truncated toward
    /// zero and saturating, NaN giving 0, as `kiln_ir::eval::cast` (`ymm{d+2}`, `ymm{d+3}`
    /// temporaries). The truncated value t is split into hi = floor(t / 2^32) and lo = t -
    /// hi * 2^32 in [0, 2^32), both exact in f64 and each converted as a dword; then hi << 32
    /// | lo. i64: NaN lanes cleared first, below -2^63 clamped to it, at 2^63 and above
    /// i64::MAX. u64: NaN and negative lanes 0 (`max` with 0 takes the 0 for a NaN), at
    /// 2^64 and above u64::MAX.
    pub(super) fn f64_to_int64(&mut self, unsigned: bool, d: usize) -> R<()> {
        let (t, u) = (YMM[d + 2], YMM[d + 3]);
        let zero = self.q_slot(0);
        let limit =
            self.q_slot(if unsigned { 0x43f0_0000_0000_0000 } else { 0x43e0_0000_0000_0000 });
        let min = self.q_slot(0xc3e0_0000_0000_0000);
        let scale_down = self.q_slot(0x3df0_0000_0000_0000);
        let scale_up = self.q_slot(0x41f0_0000_0000_0000);
        let m2p31 = self.q_slot(F64_M2P31);
        let sign = self.imm_slot(0x8000_0000);
        let max = self.q_slot(i64::MAX as u64);
        for h in 0..2 {
            let p = YMM[d + h];
            if unsigned {
                self.a.vmaxpd(p, p, zero)?;
            } else {
                self.a.vcmppd(t, p, p, super::CMP_ORD_Q)?;
                self.a.vandpd(p, p, t)?;
                self.a.vmaxpd(p, p, min)?;
            }
            // Toward zero, no precision exception.
            self.a.vroundpd(p, p, 0x0b)?;
            self.a.vcmppd(t, p, limit, super::CMP_GE_OQ)?;
            // u: hi; p: lo (scaling by powers of two is exact).
            self.a.vmulpd(u, p, scale_down)?;
            self.a.vroundpd(u, u, 0x09)?;
            self.a.vmulpd(u, u, scale_up)?;
            self.a.vsubpd(p, p, u)?;
            self.a.vmulpd(u, u, scale_down)?;
            // Each as a dword: lo in [0, 2^32) through lo - 2^31; hi likewise for u64, and
            // in [-2^31, 2^31) for i64 (out of range it is blended away below).
            self.a.vaddpd(p, p, m2p31)?;
            self.a.vcvttpd2dq(XMM[d + h], p)?;
            self.a.vpxor(XMM[d + h], XMM[d + h], xmmword_ptr(r15 + sign))?;
            if unsigned {
                self.a.vaddpd(u, u, m2p31)?;
            }
            self.a.vcvttpd2dq(XMM[d + 3], u)?;
            if unsigned {
                self.a.vpxor(XMM[d + 3], XMM[d + 3], xmmword_ptr(r15 + sign))?;
            }
            self.a.vpmovzxdq(p, XMM[d + h])?;
            self.a.vpmovzxdq(u, XMM[d + 3])?;
            self.a.vpsllq(u, u, 32)?;
            self.a.vpor(p, p, u)?;
            if unsigned {
                self.a.vpor(p, p, t)?;
            } else {
                self.a.vblendvpd(p, p, max, t)?;
            }
        }
        Ok(())
    }

    /// The i64/u64 operations that differ from f64's into `ymm{d}`, `ymm{d+1}`; `None` for
    /// the nodes both share (constants, names, loads, `select`, casts).
    pub(super) fn int64_op(&mut self, e: &Expr, d: usize) -> Option<R<()>> {
        let signed = e.ty() == Type::I64;
        Some(match e.node() {
            ExprNode::Binary { op: op @ (BinOp::Div | BinOp::Rem), a, b } => {
                self.div64(e, *op == BinOp::Rem, signed, a, b, d)
            }
            ExprNode::Binary { op, a, b } => {
                let op = *op;
                // One operand read in place (`inplace64.rs`).
                if let Some((x, o)) = self.split64(op, a, b) {
                    return Some(self.binary64_in_place(e, op, x, o, d));
                }
                // Both factors zero-extended from 32 bits (`(x as u64) * (y as u64)`, x and y
                // `u32`): their high halves are zero, so the exact product, which no 64 bits
                // wrap, is `vpmuludq`'s alone.
                let widened =
                    |e: &Expr| matches!(e.node(), ExprNode::Cast { a, .. } if a.ty() == Type::U32);
                let narrow_mul = op == BinOp::Mul && widened(a) && widened(b);
                self.expr64(a, d).and_then(|_| self.expr64(b, d + 2)).and_then(|_| {
                    for h in 0..2 {
                        let (p, q) = (YMM[d + h], YMM[d + 2 + h]);
                        let (t, u) = (YMM[d + 4], YMM[d + 5]);
                        match op {
                            BinOp::Add => self.a.vpaddq(p, p, q)?,
                            BinOp::Sub => self.a.vpsubq(p, p, q)?,
                            BinOp::And => self.a.vpand(p, p, q)?,
                            BinOp::Or => self.a.vpor(p, p, q)?,
                            BinOp::Xor => self.a.vpxor(p, p, q)?,
                            BinOp::Mul if narrow_mul => self.a.vpmuludq(p, p, q)?,
                            BinOp::Mul => {
                                // Wrapping: lo*lo + ((hi_a*lo_b + lo_a*hi_b) << 32).
                                self.a.vpsrlq(t, p, 32)?;
                                self.a.vpmuludq(t, t, q)?;
                                self.a.vpsrlq(u, q, 32)?;
                                self.a.vpmuludq(u, u, p)?;
                                self.a.vpaddq(t, t, u)?;
                                self.a.vpsllq(t, t, 32)?;
                                self.a.vpmuludq(p, p, q)?;
                                self.a.vpaddq(p, p, t)?;
                            }
                            BinOp::Shl | BinOp::Shr => {
                                // Counts modulo 64, as the interpreter takes them.
                                let m = self.q_slot(63);
                                self.a.vpand(q, q, m)?;
                                if op == BinOp::Shl {
                                    self.a.vpsllvq(p, p, q)?;
                                } else if signed {
                                    // ((x ^ s) >>> n) ^ s, s the sign mask.
                                    self.a.vpxor(t, t, t)?;
                                    self.a.vpcmpgtq(t, t, p)?;
                                    self.a.vpxor(p, p, t)?;
                                    self.a.vpsrlvq(p, p, q)?;
                                    self.a.vpxor(p, p, t)?;
                                } else {
                                    self.a.vpsrlvq(p, p, q)?;
                                }
                            }
                            _ => return no(format!("`{}` on {}", op.symbol(), e.ty())),
                        }
                    }
                    Ok(())
                })
            }
            ExprNode::Unary { op, a } => {
                let op = *op;
                self.expr64(a, d).and_then(|_| {
                    let z = YMM[d + 2];
                    for h in 0..2 {
                        let p = YMM[d + h];
                        if op == UnOp::Neg {
                            self.a.vpxor(z, z, z)?;
                            self.a.vpsubq(p, z, p)?;
                        } else {
                            let ones = self.q_slot(u64::MAX);
                            self.a.vpxor(p, p, ones)?;
                        }
                    }
                    Ok(())
                })
            }
            ExprNode::Intrinsic { op: op @ (Intrinsic::Min | Intrinsic::Max), args }
                if args.len() == 2 =>
            {
                let max = *op == Intrinsic::Max;
                self.expr64(&args[0], d).and_then(|_| self.expr64(&args[1], d + 2)).and_then(|_| {
                    for h in 0..2 {
                        let (p, q, m) = (YMM[d + h], YMM[d + 2 + h], YMM[d + 4]);
                        // m: a > b (signed, or with the sign bits flipped).
                        if signed {
                            self.a.vpcmpgtq(m, p, q)?;
                        } else {
                            let sign = self.q_slot(1 << 63);
                            self.a.vpxor(m, p, sign)?;
                            self.a.vpxor(YMM[d + 5], q, sign)?;
                            self.a.vpcmpgtq(m, m, YMM[d + 5])?;
                        }
                        if max {
                            self.a.vblendvpd(p, q, p, m)?;
                        } else {
                            self.a.vblendvpd(p, p, q, m)?;
                        }
                    }
                    Ok(())
                })
            }
            ExprNode::Intrinsic { op: Intrinsic::Abs, args } if args.len() == 1 => {
                self.expr64(&args[0], d).and_then(|_| {
                    if signed {
                        // (x ^ s) - s, s the sign mask: wrapping at MIN.
                        let s = YMM[d + 2];
                        for h in 0..2 {
                            let p = YMM[d + h];
                            self.a.vpxor(s, s, s)?;
                            self.a.vpcmpgtq(s, s, p)?;
                            self.a.vpxor(p, p, s)?;
                            self.a.vpsubq(p, p, s)?;
                        }
                    }
                    Ok(())
                })
            }
            ExprNode::Intrinsic { op, .. } => no(format!("`{}` on {}", op.name(), e.ty())),
            _ => return None,
        })
    }

    /// An i64/u64 `/` or `%` per lane: a zero divisor in an active lane is an error of the
    /// lowest such lane (as `ops.rs`'s i32 division reports it); then one `idiv`/`div` per
    /// active lane on the lanes spilled to the frame, `MIN / -1` wrapping to MIN (`%`: 0)
    /// as the interpreter's wrapping division (where `idiv` would trap).
    fn div64(&mut self, e: &Expr, rem: bool, signed: bool, a: &Expr, b: &Expr, d: usize) -> R<()> {
        self.expr64(a, d)?;
        // A nonzero constant: a multiply by its magic number per lane (`div64const.rs`).
        if let Some(c) = super::div64const::const_divisor64(b) {
            return self.const_div64(rem, signed, c, d);
        }
        // A divisor fixed for the call: its magic number (`divuniform64.rs`).
        if let Some((m, _)) = self.magic_slots(e) {
            return self.magic_div64(e, rem, signed, m, d);
        }
        self.expr64(b, d + 2)?;
        // A constant nonzero divisor cannot fault: every lane is divided (such a division
        // may be computed before the batch loop, where there is no lane mask yet).
        let safe = super::scalar::safe_divisor_expr(b);
        if safe {
            let ones = self.imm_slot(u32::MAX);
            self.a.vmovups(YMM[d + 5], ymmword_ptr(r15 + ones))?;
        } else {
            let z = self.q_slot(0);
            self.a.vpcmpeqq(YMM[d + 4], YMM[d + 2], z)?;
            self.a.vpcmpeqq(YMM[d + 5], YMM[d + 3], z)?;
            self.pack_masks(d + 4)?;
            self.active(d + 5)?;
            self.a.vpand(YMM[d + 4], YMM[d + 4], YMM[d + 5])?;
            let site = crate::x86::gen::Site::Div { rem, expr: e.fault_site() };
            let code = crate::x86::rt::ERR_DIV_ZERO;
            self.fault_stub(d + 4, d + 4, d + 5, code, site, false, None)?;
            // Then every lane with a nonzero divisor is divided, active or not: the
            // quotient of batch-uniform operands is batch-uniform, and uniform code (a
            // uniform load's index, a division in a GPR) reads it from lane 0, which may be
            // masked off. (Dividing the active lanes alone left the dividend there.)
            self.a.vpcmpeqq(YMM[d + 4], YMM[d + 2], z)?;
            self.a.vpcmpeqq(YMM[d + 5], YMM[d + 3], z)?;
            self.pack_masks(d + 4)?;
            self.a.vpcmpeqd(YMM[d + 5], YMM[d + 5], YMM[d + 5])?;
            self.a.vpxor(YMM[d + 5], YMM[d + 5], YMM[d + 4])?;
        }
        let (sa, sb) = (self.scratch64(), self.slot64());
        self.a.vmovupd(ymmword_ptr(r15 + sa), YMM[d])?;
        self.a.vmovupd(ymmword_ptr(r15 + (sa + 32)), YMM[d + 1])?;
        self.a.vmovupd(ymmword_ptr(r15 + sb), YMM[d + 2])?;
        self.a.vmovupd(ymmword_ptr(r15 + (sb + 32)), YMM[d + 3])?;
        self.a.vmovmskps(r11d, YMM[d + 5])?;
        // rdx may hold a buffer base.
        self.a.push(rdx)?;
        for lane in 0..8 {
            let mut skip = self.a.create_label();
            let mut minus1 = self.a.create_label();
            let mut done = self.a.create_label();
            self.a.test(r11d, 1 << lane)?;
            self.a.je(skip)?;
            self.a.mov(rax, qword_ptr(r15 + (sa + 8 * lane)))?;
            self.a.mov(r10, qword_ptr(r15 + (sb + 8 * lane)))?;
            if signed {
                self.a.cmp(r10, -1)?;
                self.a.je(minus1)?;
                self.a.cqo()?;
                self.a.idiv(r10)?;
            } else {
                self.a.xor(edx, edx)?;
                self.a.div(r10)?;
            }
            if rem {
                self.a.mov(rax, rdx)?;
            }
            self.a.jmp(done)?;
            self.bind(&mut minus1)?;
            if rem {
                self.a.xor(eax, eax)?;
            } else {
                self.a.neg(rax)?;
            }
            self.bind(&mut done)?;
            self.a.mov(qword_ptr(r15 + (sa + 8 * lane)), rax)?;
            self.bind(&mut skip)?;
        }
        self.a.pop(rdx)?;
        self.a.vmovupd(YMM[d], ymmword_ptr(r15 + sa))?;
        self.a.vmovupd(YMM[d + 1], ymmword_ptr(r15 + (sa + 32)))?;
        Ok(())
    }
}
