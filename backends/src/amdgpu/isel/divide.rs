//! Division, remainder and square root by non-constant operands.
//!
//! * 32-bit integers: LLVM's AMDGPU expansion: an f32 reciprocal estimate of the divisor
//!   scaled to a 32-bit fixed-point reciprocal, one Newton step in integers, the quotient by
//!   `mulhi`, and two correction steps (exact for any reciprocal within a few ulps).
//! * 64-bit integers: a restoring shift-subtract loop of 64 steps (uniform trip count).
//! * f64 `/` and `sqrt`: special operands are handled apart; finite ones are split by
//!   `frexp` into mantissa and exponent, a Newton-refined quotient (root) of the mantissas
//!   is made faithful and then correctly rounded by comparing exact `fma` residuals of the
//!   two candidates, and the exponent is put back with `ldexp` (a double rounding into the
//!   subnormal range is undone with the residual's sign).
//! * f32 `/` and `sqrt` go through f64: 53 >= 2*24+2 bits make the double rounding exact.

use kiln_ir::Scalar;

use super::{hi, lo, Isel, Val};
use crate::amdgpu::mir::{LoopRange, Opnd};

impl Isel<'_> {
    /// Unsigned 32-bit `x / y` and `x % y` (VGPRs).
    fn udivrem32(&mut self, x: Opnd, y: Opnd) -> (Opnd, Opnd) {
        let fy = self.vv("v_cvt_f32_u32", vec![y.clone()]);
        let rcp = self.vv("v_rcp_iflag_f32", vec![fy]);
        // 2^32 - 512: the estimate stays below 2^32 / y.
        let fz = self.vv("v_mul_f32", vec![Opnd::Imm(0x4f7f_fffe), rcp]);
        let z = self.vv("v_cvt_u32_f32", vec![fz]);
        let ny = self.vv("v_sub_u32", vec![Opnd::Imm(0), y.clone()]);
        let nyz = self.vv("v_mul_lo_u32", vec![ny, z.clone()]);
        let corr = self.vv("v_mul_hi_u32", vec![z.clone(), nyz]);
        let z = self.vv("v_add_u32", vec![z, corr]);
        let mut q = self.vv("v_mul_hi_u32", vec![x.clone(), z]);
        let qy = self.vv("v_mul_lo_u32", vec![q.clone(), y.clone()]);
        let mut r = self.vv("v_sub_u32", vec![x, qy]);
        for _ in 0..2 {
            let m = self.mm("v_cmp_ge_u32_e64", vec![r.clone(), y.clone()]);
            let q1 = self.vv("v_add_u32", vec![Opnd::Imm(1), q.clone()]);
            let r1 = self.vv("v_sub_u32", vec![r.clone(), y.clone()]);
            q = self.vv("v_cndmask_b32_e64", vec![q, q1, m.clone()]);
            r = self.vv("v_cndmask_b32_e64", vec![r, r1, m]);
        }
        (q, r)
    }

    /// 32-bit (and extended 8/16-bit) `x / y` or `x % y`, truncating toward zero.
    pub(super) fn divrem32(&mut self, signed: bool, rem: bool, x: Opnd, y: Opnd) -> Opnd {
        if !signed {
            let (q, r) = self.udivrem32(x, y);
            return if rem { r } else { q };
        }
        let abs = |me: &mut Self, v: &Opnd| {
            let n = me.vv("v_sub_u32", vec![Opnd::Imm(0), v.clone()]);
            me.vv("v_max_i32", vec![v.clone(), n])
        };
        let (ax, ay) = (abs(self, &x), abs(self, &y));
        let (q, r) = self.udivrem32(ax, ay);
        // sign = 0 or -1; v = (v ^ sign) - sign applies it.
        let sign = if rem {
            self.vv("v_ashrrev_i32", vec![Opnd::Imm(31), x])
        } else {
            let t = self.vv("v_xor_b32", vec![x, y]);
            self.vv("v_ashrrev_i32", vec![Opnd::Imm(31), t])
        };
        let v = if rem { r } else { q };
        let t = self.vv("v_xor_b32", vec![v, sign.clone()]);
        self.vv("v_sub_u32", vec![t, sign])
    }

    /// Unsigned 64-bit quotient and remainder by a restoring shift-subtract loop.
    fn udivrem64(&mut self, x: &Opnd, y: &Opnd) -> (Opnd, Opnd) {
        let (n, q, r) = (self.v2(), self.v2(), self.v2());
        self.copy64(&n, x);
        let z = self.const64(0);
        self.copy64(&q, &z);
        self.copy64(&r, &z);
        let cnt = self.s();
        self.emit("s_mov_b32", vec![cnt.clone()], vec![Opnd::Imm(64)]);
        let head = self.label();
        let start = self.f.insts.len();
        self.place(head);
        // r:n <<= 1 as one 128-bit shift; a bit shifted out of r means r > y for sure.
        let top = self.vv("v_lshrrev_b32", vec![Opnd::Imm(31), hi(&r)]);
        let nb = self.vv("v_lshrrev_b32", vec![Opnd::Imm(31), hi(&n)]);
        let r2 = self.ww("v_lshlrev_b64", vec![Opnd::Imm(1), r.clone()]);
        let rl = self.vv("v_or_b32", vec![nb, lo(&r2)]);
        let r2 = self.pair(rl, hi(&r2));
        let n2 = self.ww("v_lshlrev_b64", vec![Opnd::Imm(1), n.clone()]);
        self.copy64(&n, &n2);
        let q2 = self.ww("v_lshlrev_b64", vec![Opnd::Imm(1), q.clone()]);
        let ge = self.cmp64(Scalar::U64, kiln_ir::BinOp::Ge, &r2, y);
        let over = self.mm("v_cmp_ne_u32_e64", vec![Opnd::Imm(0), top]);
        let m = self.s2();
        self.emit("s_or_b64", vec![m.clone()], vec![ge, over]);
        let sub = self.sub64(&r2, y);
        let rn = self.sel64(m.clone(), r2, sub);
        self.copy64(&r, &rn);
        let bit = self.vv("v_cndmask_b32_e64", vec![Opnd::Imm(0), Opnd::Imm(1), m]);
        let ql = self.vv("v_or_b32", vec![bit, lo(&q2)]);
        self.emit("v_mov_b32", vec![lo(&q)], vec![ql]);
        self.emit("v_mov_b32", vec![hi(&q)], vec![hi(&q2)]);
        self.emit("s_sub_u32", vec![cnt.clone()], vec![cnt.clone(), Opnd::Imm(1)]);
        self.emit("s_cmp_lg_u32", vec![], vec![cnt, Opnd::Imm(0)]);
        let end = self.f.insts.len();
        self.emit("s_cbranch_scc1", vec![], vec![Opnd::L(head)]);
        self.f.loops.push(LoopRange { head: start, end });
        (q, r)
    }

    /// 64-bit `x / y` or `x % y`, truncating toward zero (`MIN / -1` wraps).
    pub(super) fn divrem64(&mut self, signed: bool, rem: bool, x: &Opnd, y: &Opnd) -> Opnd {
        if !signed {
            let (q, r) = self.udivrem64(x, y);
            return if rem { r } else { q };
        }
        let z = self.const64(0);
        let abs = |me: &mut Self, v: &Opnd| {
            let neg = me.mm("v_cmp_gt_i32_e64", vec![Opnd::Imm(0), hi(v)]);
            let n = me.sub64(&z, v);
            (me.sel64(neg.clone(), v.clone(), n), neg)
        };
        let (ax, nx) = abs(self, x);
        let (ay, ny) = abs(self, y);
        let (q, r) = self.udivrem64(&ax, &ay);
        let (v, neg) = if rem {
            (r, nx)
        } else {
            let m = self.s2();
            self.emit("s_xor_b64", vec![m.clone()], vec![nx, ny]);
            (q, m)
        };
        let nv = self.sub64(&z, &v);
        self.sel64(neg, v, nv)
    }

    /// Correctly rounded f32 `a / b` through f64.
    pub(super) fn fdiv32(&mut self, a: Val, b: Val) -> Val {
        let (a, b) = (self.vgpr(a), self.vgpr(b));
        let a = self.ww("v_cvt_f64_f32", vec![a]);
        let b = self.ww("v_cvt_f64_f32", vec![b]);
        let q = self.fdiv64(&a, &b);
        Val { o: self.vv("v_cvt_f32_f64", vec![q]), s: false }
    }

    /// Correctly rounded f32 `sqrt` through f64.
    pub(super) fn sqrt32(&mut self, a: Val) -> Val {
        let a = self.vgpr(a);
        let a = self.ww("v_cvt_f64_f32", vec![a]);
        let r = self.sqrt64(&a);
        Val { o: self.vv("v_cvt_f32_f64", vec![r]), s: false }
    }

    fn fma64(&mut self, a: &Opnd, b: &Opnd, c: &Opnd) -> Opnd {
        self.ww("v_fma_f64", vec![a.clone(), b.clone(), c.clone()])
    }

    /// `x` with its bit pattern stepped by +1 or -1 (the next float away from / toward zero
    /// for a positive finite `x`) where `up` is set / clear.
    fn step(&mut self, x: &Opnd, up: Opnd) -> Opnd {
        let one = self.const64(1);
        let all = self.const64(u64::MAX);
        let d = self.sel64(up, all, one);
        self.add64(x, &d)
    }

    /// Of two candidate results `c0`, `c1` with exact residuals `r0`, `r1`, the one with the
    /// smaller residual magnitude.
    fn nearer(&mut self, c0: Opnd, r0: &Opnd, c1: Opnd, r1: &Opnd) -> Opnd {
        let (a0, a1) = (self.abs_f64(r0), self.abs_f64(r1));
        let m = self.mm("v_cmp_lt_f64_e64", vec![a1, a0]);
        self.sel64(m, c0, c1)
    }

    /// Correctly rounded f64 `a / b`.
    pub(super) fn fdiv64(&mut self, a: &Opnd, b: &Opnd) -> Opnd {
        let one = self.const64(1f64.to_bits());
        // Special operands (zero, infinite, NaN): a * (1/b) is exactly IEEE's answer there.
        let rb = self.ww("v_rcp_f64", vec![b.clone()]);
        let special = self.ww("v_mul_f64", vec![a.clone(), rb]);
        let finite = |me: &mut Self, v: &Opnd| {
            let av = me.abs_f64(v);
            let inf = me.const64(f64::INFINITY.to_bits());
            let m1 = me.mm("v_cmp_lt_f64_e64", vec![av.clone(), inf]);
            let m2 = me.mm("v_cmp_lt_f64_e64", vec![Opnd::Imm(0), av]);
            let m = me.s2();
            me.emit("s_and_b64", vec![m.clone()], vec![m1, m2]);
            m
        };
        let (fa, fb) = (finite(self, a), finite(self, b));
        let fb2 = self.s2();
        self.emit("s_mov_b64", vec![fb2.clone()], vec![fb.clone()]);
        let ok = self.s2();
        self.emit("s_and_b64", vec![ok.clone()], vec![fa, fb]);
        // Mantissas in [0.5, 1) (magnitudes) and exponents.
        let (aa, ab) = (self.abs_f64(a), self.abs_f64(b));
        let ma = self.ww("v_frexp_mant_f64", vec![aa.clone()]);
        let mb = self.ww("v_frexp_mant_f64", vec![ab.clone()]);
        let ea = self.vv("v_frexp_exp_i32_f64", vec![aa]);
        let eb = self.vv("v_frexp_exp_i32_f64", vec![ab]);
        let e = self.vv("v_sub_u32", vec![ea, eb]);
        let nmb = self.neg_f64(&mb);
        // Reciprocal: estimate and two Newton steps.
        let mut y = self.ww("v_rcp_f64", vec![mb.clone()]);
        for _ in 0..2 {
            let err = self.fma64(&nmb, &y, &one);
            y = self.fma64(&y, &err, &y);
        }
        let q0 = self.ww("v_mul_f64", vec![ma.clone(), y.clone()]);
        let r0 = self.fma64(&nmb, &q0, &ma);
        let q1 = self.fma64(&r0, &y, &q0);
        // q1 is faithful; its neighbour on the residual's side is the other candidate.
        let r1 = self.fma64(&nmb, &q1, &ma);
        let below = self.mm("v_cmp_gt_f64_e64", vec![r1.clone(), Opnd::Imm(0)]);
        let q2 = self.step(&q1, below);
        let r2 = self.fma64(&nmb, &q2, &ma);
        let q = self.nearer(q1, &r1, q2.clone(), &r2);
        let rq = self.fma64(&nmb, &q, &ma);
        // Scale back; undo a double rounding at a tie of the subnormal grid.
        let res = self.ww("v_ldexp_f64", vec![q.clone(), e.clone()]);
        let ne = self.vv("v_sub_u32", vec![Opnd::Imm(0), e.clone()]);
        let back = self.ww("v_ldexp_f64", vec![res.clone(), ne.clone()]);
        let e1 = self.vv("v_add_u32", vec![Opnd::Imm(1), e]);
        let ne1 = self.vv("v_sub_u32", vec![Opnd::Imm(0), e1.clone()]);
        let fine = self.ww("v_ldexp_f64", vec![q.clone(), e1]);
        let fine_back = self.ww("v_ldexp_f64", vec![fine, ne1]);
        let inexact = self.mm("v_cmp_neq_f64_e64", vec![back.clone(), q.clone()]);
        let on_mid = self.mm("v_cmp_eq_f64_e64", vec![fine_back, q.clone()]);
        let up = self.mm("v_cmp_gt_f64_e64", vec![back, q]);
        let pos = self.mm("v_cmp_gt_f64_e64", vec![rq.clone(), Opnd::Imm(0)]);
        let neg = self.mm("v_cmp_lt_f64_e64", vec![rq, Opnd::Imm(0)]);
        // Rounded up but the true value is below the tie: step down; and the mirror case.
        let (down_fix, up_fix, t) = (self.s2(), self.s2(), self.s2());
        self.emit("s_and_b64", vec![t.clone()], vec![inexact, on_mid]);
        self.emit("s_and_b64", vec![down_fix.clone()], vec![t.clone(), up.clone()]);
        self.emit("s_and_b64", vec![down_fix.clone()], vec![down_fix.clone(), neg]);
        self.emit("s_andn2_b64", vec![up_fix.clone()], vec![t, up]);
        self.emit("s_and_b64", vec![up_fix.clone()], vec![up_fix.clone(), pos]);
        let all = self.const64(u64::MAX);
        let dn = self.add64(&res, &all);
        let res = self.sel64(down_fix, res, dn);
        let upv = self.sub64(&res, &all);
        let res = self.sel64(up_fix, res, upv);
        // Sign, then the special cases.
        let sx = self.vv("v_xor_b32", vec![hi(a), hi(b)]);
        let sx = self.vv("v_and_b32", vec![Opnd::Imm(0x8000_0000), sx]);
        let h = self.vv("v_or_b32", vec![sx.clone(), hi(&res)]);
        let res = self.pair(lo(&res), h);
        let res = self.sel64(ok, special, res);
        // 0 / finite is a signed zero (1/b may overflow for a subnormal b: not via `special`).
        let za = self.mm("v_cmp_eq_f64_e64", vec![a.clone(), Opnd::Imm(0)]);
        let zm = self.s2();
        self.emit("s_and_b64", vec![zm.clone()], vec![za, fb2]);
        let zero = self.pair(Opnd::Imm(0), sx);
        self.sel64(zm, res, zero)
    }

    /// Correctly rounded f64 `sqrt`.
    pub(super) fn sqrt64(&mut self, x: &Opnd) -> Opnd {
        // Special operands: negative -> NaN; +-0, +inf and NaN -> themselves.
        let nan = self.const64(f64::NAN.to_bits());
        let negm = self.mm("v_cmp_lt_f64_e64", vec![x.clone(), Opnd::Imm(0)]);
        let special = self.sel64(negm, x.clone(), nan);
        let inf = self.const64(f64::INFINITY.to_bits());
        let m1 = self.mm("v_cmp_lt_f64_e64", vec![x.clone(), inf]);
        let m2 = self.mm("v_cmp_lt_f64_e64", vec![Opnd::Imm(0), x.clone()]);
        let ok = self.s2();
        self.emit("s_and_b64", vec![ok.clone()], vec![m1, m2]);
        // x = m * 2^e with e even and m in [0.5, 2).
        let m = self.ww("v_frexp_mant_f64", vec![x.clone()]);
        let e = self.vv("v_frexp_exp_i32_f64", vec![x.clone()]);
        let odd = self.vv("v_and_b32", vec![Opnd::Imm(1), e.clone()]);
        let m = self.ww("v_ldexp_f64", vec![m, odd.clone()]);
        let e = self.vv("v_sub_u32", vec![e, odd]);
        let half_e = self.vv("v_ashrrev_i32", vec![Opnd::Imm(1), e]);
        let half = self.const64(0.5f64.to_bits());
        let g = self.ww("v_rsq_f64", vec![m.clone()]);
        let h = self.ww("v_mul_f64", vec![half.clone(), g.clone()]);
        let s0 = self.ww("v_mul_f64", vec![m.clone(), g]);
        let nh = self.neg_f64(&h);
        let r = self.fma64(&nh, &s0, &half);
        let h = self.fma64(&h, &r, &h);
        let s = self.fma64(&s0, &r, &s0);
        let ns = self.neg_f64(&s);
        let d = self.fma64(&ns, &s, &m);
        let s = self.fma64(&d, &h, &s);
        // s is faithful: compare exact residuals of s and its neighbour on the residual's side.
        let ns = self.neg_f64(&s);
        let d = self.fma64(&ns, &s, &m);
        let below = self.mm("v_cmp_gt_f64_e64", vec![d.clone(), Opnd::Imm(0)]);
        let s2 = self.step(&s, below);
        let ns2 = self.neg_f64(&s2);
        let d2 = self.fma64(&ns2, &s2, &m);
        let s = self.nearer(s, &d, s2, &d2);
        let res = self.ww("v_ldexp_f64", vec![s, half_e]);
        self.sel64(ok, special, res)
    }
}
