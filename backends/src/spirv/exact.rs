//! Vulkan-flavour lowerings of the operations whose SPIR-V result the Vulkan environment
//! leaves undefined or less precise than kiln's semantics (see the module docs of
//! `spirv` for the list and why each one is needed).
//!
//! Every routine here builds the exact IEEE result from operations Vulkan does define
//! exactly: integer arithmetic, `OpUDiv`/`OpUMod`, and f64 `OpFAdd`/`OpFSub`/`OpFMul` and
//! `OpFConvert`, which the environment requires to be correctly rounded. Each f64 step is
//! `NoContraction`, so a driver can neither fuse nor re-associate it (that would undo the
//! error-free transformations).

use rspirv::spirv::{Decoration, GLOp, Word};

use rspirv::dr::Operand;

use kiln_ir::{BinOp, Scalar};

use super::ctx::Ctx;

type R<T> = Result<T, String>;

fn er(e: rspirv::dr::Error) -> String {
    e.to_string()
}

/// Forbids fusing and value-changing algebra on a float result.
fn nc(cx: &mut Ctx, id: Word) -> Word {
    cx.b.decorate(id, Decoration::NoContraction, []);
    id
}

fn fadd(cx: &mut Ctx, a: Word, b: Word) -> R<Word> {
    let t = cx.ty(Scalar::F64);
    let r = cx.b.f_add(t, None, a, b).map_err(er)?;
    Ok(nc(cx, r))
}

fn fsub(cx: &mut Ctx, a: Word, b: Word) -> R<Word> {
    let t = cx.ty(Scalar::F64);
    let r = cx.b.f_sub(t, None, a, b).map_err(er)?;
    Ok(nc(cx, r))
}

fn fmul(cx: &mut Ctx, a: Word, b: Word) -> R<Word> {
    let t = cx.ty(Scalar::F64);
    let r = cx.b.f_mul(t, None, a, b).map_err(er)?;
    Ok(nc(cx, r))
}

fn fdiv(cx: &mut Ctx, a: Word, b: Word) -> R<Word> {
    let t = cx.ty(Scalar::F64);
    let r = cx.b.f_div(t, None, a, b).map_err(er)?;
    Ok(nc(cx, r))
}

fn widen(cx: &mut Ctx, a: Word) -> R<Word> {
    let t = cx.ty(Scalar::F64);
    cx.b.f_convert(t, None, a).map_err(er)
}

fn narrow(cx: &mut Ctx, a: Word) -> R<Word> {
    let t = cx.ty(Scalar::F32);
    cx.b.f_convert(t, None, a).map_err(er)
}

fn bits32(cx: &mut Ctx, a: Word) -> R<Word> {
    let t = cx.ty(Scalar::U32);
    cx.b.bitcast(t, None, a).map_err(er)
}

fn from_bits32(cx: &mut Ctx, a: Word) -> R<Word> {
    let t = cx.ty(Scalar::F32);
    cx.b.bitcast(t, None, a).map_err(er)
}

fn sel(cx: &mut Ctx, s: Scalar, c: Word, a: Word, b: Word) -> R<Word> {
    let t = cx.ty(s);
    cx.b.select(t, None, c, a, b).map_err(er)
}

fn or(cx: &mut Ctx, a: Word, b: Word) -> R<Word> {
    let bt = cx.ty(Scalar::Bool);
    cx.b.logical_or(bt, None, a, b).map_err(er)
}

fn and(cx: &mut Ctx, a: Word, b: Word) -> R<Word> {
    let bt = cx.ty(Scalar::Bool);
    cx.b.logical_and(bt, None, a, b).map_err(er)
}

/// `x > 0.0` for an f64 (false for NaN).
fn positive(cx: &mut Ctx, x: Word) -> R<Word> {
    let bt = cx.ty(Scalar::Bool);
    let z = cx.float_const(Scalar::F64, 0.0);
    cx.b.f_ord_greater_than(bt, None, x, z).map_err(er)
}

/// `x != 0.0` for an f64, false for NaN.
fn nonzero(cx: &mut Ctx, x: Word) -> R<Word> {
    let bt = cx.ty(Scalar::Bool);
    let z = cx.float_const(Scalar::F64, 0.0);
    cx.b.f_ord_not_equal(bt, None, x, z).map_err(er)
}

/// Signed `a / b` or `a % b` from unsigned operations on the magnitudes: Vulkan leaves
/// `OpSRem`/`OpSMod` undefined when an operand is negative, and `OpSDiv` undefined on
/// overflow (`MIN / -1`). `|MIN|` is `MIN` read as unsigned, so `MIN / -1` comes out as
/// `-(2^(n-1))`, which wraps to `MIN`, and `MIN % -1` as 0, the interpreter's answers.
pub(super) fn signed_div_rem(cx: &mut Ctx, op: BinOp, t: Scalar, a: Word, b: Word) -> R<Word> {
    let ty = cx.ty(t);
    let bt = cx.ty(Scalar::Bool);
    let zero = cx.constant(t, 0);
    let a_neg = cx.b.s_less_than(bt, None, a, zero).map_err(er)?;
    let b_neg = cx.b.s_less_than(bt, None, b, zero).map_err(er)?;
    let na = cx.b.s_negate(ty, None, a).map_err(er)?;
    let nb = cx.b.s_negate(ty, None, b).map_err(er)?;
    let ma = sel(cx, t, a_neg, na, a)?;
    let mb = sel(cx, t, b_neg, nb, b)?;
    let (m, neg) = if op == BinOp::Rem {
        (cx.b.u_mod(ty, None, ma, mb).map_err(er)?, a_neg)
    } else {
        (
            cx.b.u_div(ty, None, ma, mb).map_err(er)?,
            cx.b.logical_not_equal(bt, None, a_neg, b_neg).map_err(er)?,
        )
    };
    let nm = cx.b.s_negate(ty, None, m).map_err(er)?;
    sel(cx, t, neg, nm, m)
}

/// f32 `fma(a, b, c)` rounded once. GLSL.std.450 `Fma` may round twice (lavapipe does), so
/// the sum is formed in f64: the product of two f32 is exact there, `s = p + c` is rounded
/// once, TwoSum gives its exact error `e`, and when `e != 0` the last bit of `s` is forced
/// to 1 (rounding to odd). Rounding that to f32 (24 bits, at most 53 - 2) is the correctly
/// rounded result. Infinities and NaN flow through `s` unchanged (then `e` is NaN and the
/// fix-up does nothing). Needs `shaderFloat64`.
pub(super) fn fma_f32(cx: &mut Ctx, a: Word, b: Word, c: Word) -> R<Word> {
    let (da, db, dc) = (widen(cx, a)?, widen(cx, b)?, widen(cx, c)?);
    let p = fmul(cx, da, db)?;
    let s = fadd(cx, p, dc)?;
    // Knuth's TwoSum: s + e == p + c exactly.
    let bv = fsub(cx, s, p)?;
    let av = fsub(cx, s, bv)?;
    let ea = fsub(cx, p, av)?;
    let eb = fsub(cx, dc, bv)?;
    let e = fadd(cx, ea, eb)?;
    let u64t = cx.ty(Scalar::U64);
    let bt = cx.ty(Scalar::Bool);
    let sb = cx.b.bitcast(u64t, None, s).map_err(er)?;
    let one = cx.constant(Scalar::U64, 1);
    let low = cx.b.bitwise_and(u64t, None, sb, one).map_err(er)?;
    let zero = cx.constant(Scalar::U64, 0);
    let even = cx.b.i_equal(bt, None, low, zero).map_err(er)?;
    let inexact = nonzero(cx, e)?;
    let fix = and(cx, even, inexact)?;
    // Same sign: the exact value is further from zero than `s`, so the odd neighbour is
    // the next larger magnitude; otherwise the next smaller one (s != 0 when e != 0).
    let (sp, ep) = (positive(cx, s)?, positive(cx, e)?);
    let away = cx.b.logical_equal(bt, None, sp, ep).map_err(er)?;
    let up = cx.b.i_add(u64t, None, sb, one).map_err(er)?;
    let down = cx.b.i_sub(u64t, None, sb, one).map_err(er)?;
    let moved = sel(cx, Scalar::U64, away, up, down)?;
    let odd = sel(cx, Scalar::U64, fix, moved, sb)?;
    let f64t = cx.ty(Scalar::F64);
    let r = cx.b.bitcast(f64t, None, odd).map_err(er)?;
    narrow(cx, r)
}

/// Picks between `q` (an f32 within one unit in the last place of the exact result `x`)
/// and its neighbour towards `x`: `resid(q)` must return, exactly in f64, a value with the
/// sign of `x - q` (zero when equal). The neighbour wins when `x` lies beyond the midpoint;
/// an exact tie goes to the even one. A neighbour past `MAX` is infinity, as IEEE rounding
/// overflows.
fn fix_last_bit(
    cx: &mut Ctx,
    q: Word,
    resid: &mut dyn FnMut(&mut Ctx, Word) -> R<Word>,
) -> R<Word> {
    let bt = cx.ty(Scalar::Bool);
    let u = Scalar::U32;
    let dq = widen(cx, q)?;
    let r = resid(cx, dq)?;
    let inexact = nonzero(cx, r)?;
    let up = positive(cx, r)?; // x > q
    let qb = bits32(cx, q)?;
    let sign_mask = cx.constant(u, 0x8000_0000);
    let ut = cx.ty(u);
    let qs = cx.b.bitwise_and(ut, None, qb, sign_mask).map_err(er)?;
    let zero_u = cx.constant(u, 0);
    let q_neg = cx.b.i_not_equal(bt, None, qs, zero_u).map_err(er)?;
    let mag = cx.b.bitwise_xor(ut, None, qb, qs).map_err(er)?;
    let q_zero = cx.b.i_equal(bt, None, mag, zero_u).map_err(er)?;
    // Away from zero when moving in q's direction, or always from a zero.
    let same = cx.b.logical_not_equal(bt, None, up, q_neg).map_err(er)?;
    let away = or(cx, same, q_zero)?;
    let one = cx.constant(u, 1);
    let inc = cx.b.i_add(ut, None, qb, one).map_err(er)?;
    let dec = cx.b.i_sub(ut, None, qb, one).map_err(er)?;
    let moved = sel(cx, u, away, inc, dec)?;
    // From a zero the neighbour is the smallest subnormal with the sign of the direction.
    let neg_tiny = cx.constant(u, 0x8000_0001);
    let tiny = sel(cx, u, up, one, neg_tiny)?;
    let nb = sel(cx, u, q_zero, tiny, moved)?;
    let n = from_bits32(cx, nb)?;
    // The midpoint, exact in f64 (25 bits); past MAX the "neighbour" is 2^128.
    let inf_bits = cx.constant(u, 0x7f80_0000);
    let abs_mask = cx.constant(u, 0x7fff_ffff);
    let nmag = cx.b.bitwise_and(ut, None, nb, abs_mask).map_err(er)?;
    let n_inf = cx.b.i_equal(bt, None, nmag, inf_bits).map_err(er)?;
    let dn = widen(cx, n)?;
    let two128 = cx.float_const(Scalar::F64, 2f64.powi(128));
    let m128 = cx.float_const(Scalar::F64, -(2f64.powi(128)));
    let big = sel(cx, Scalar::F64, q_neg, m128, two128)?;
    let dn = sel(cx, Scalar::F64, n_inf, big, dn)?;
    let sum = fadd(cx, dq, dn)?;
    let half = cx.float_const(Scalar::F64, 0.5);
    let mid = fmul(cx, sum, half)?;
    let rm = resid(cx, mid)?;
    // Beyond the midpoint: rm has r's (non-zero) sign.
    let rm_up = positive(cx, rm)?;
    let rm_nz = nonzero(cx, rm)?;
    let same_side = cx.b.logical_equal(bt, None, rm_up, up).map_err(er)?;
    let beyond = and(cx, rm_nz, same_side)?;
    let q_even = {
        let low = cx.b.bitwise_and(ut, None, qb, one).map_err(er)?;
        cx.b.i_equal(bt, None, low, zero_u).map_err(er)?
    };
    let tie = cx.b.logical_not(bt, None, rm_nz).map_err(er)?;
    let tie_n = cx.b.logical_not(bt, None, q_even).map_err(er)?;
    let tie_n = and(cx, tie, tie_n)?;
    let take_n = or(cx, beyond, tie_n)?;
    let take_n = and(cx, take_n, inexact)?;
    sel(cx, Scalar::F32, take_n, n, q)
}

/// A quiet NaN.
fn nan32(cx: &mut Ctx) -> R<Word> {
    let c = cx.constant(Scalar::U32, 0x7fc0_0000);
    from_bits32(cx, c)
}

/// `q`, or `±MAX` where `q` is `±inf`.
fn finite_or_max(cx: &mut Ctx, q: Word) -> R<Word> {
    let (u, bt) = (Scalar::U32, cx.ty(Scalar::Bool));
    let ut = cx.ty(u);
    let (abs_mask, inf, one) =
        (cx.constant(u, 0x7fff_ffff), cx.constant(u, 0x7f80_0000), cx.constant(u, 1));
    let qb = bits32(cx, q)?;
    let qm = cx.b.bitwise_and(ut, None, qb, abs_mask).map_err(er)?;
    let q_inf = cx.b.i_equal(bt, None, qm, inf).map_err(er)?;
    let dec = cx.b.i_sub(ut, None, qb, one).map_err(er)?;
    let r = sel(cx, u, q_inf, dec, qb)?;
    from_bits32(cx, r)
}

/// Correctly rounded f32 `a / b`: Vulkan allows 2.5 ULP (and anything for a divisor
/// outside [2^-126, 2^126]). An f64 quotient rounded to f32, one Newton step with the exact
/// residual `a - q*b` (the product of two f32 is exact in f64, and the difference is small
/// enough to be exact too), then [`fix_last_bit`] with exact residuals. Zeros, infinities
/// and NaN are decided explicitly.
pub(super) fn div_f32(cx: &mut Ctx, a: Word, b: Word) -> R<Word> {
    let bt = cx.ty(Scalar::Bool);
    let u = Scalar::U32;
    let ut = cx.ty(u);
    let (da, db) = (widen(cx, a)?, widen(cx, b)?);
    // An overflowed estimate continues from ±MAX: the fix-up decides MAX or infinity.
    let qd = fdiv(cx, da, db)?;
    let q0 = narrow(cx, qd)?;
    let q0 = finite_or_max(cx, q0)?;
    let dq0 = widen(cx, q0)?;
    let p0 = fmul(cx, dq0, db)?;
    let r0 = fsub(cx, da, p0)?;
    let corr = fdiv(cx, r0, db)?;
    let qd1 = fadd(cx, dq0, corr)?;
    let q1 = narrow(cx, qd1)?;
    let q1 = finite_or_max(cx, q1)?;
    // Residual with the sign of a/b - q: (a - q*b) * sign(b).
    let b_neg = {
        let z = cx.float_const(Scalar::F64, 0.0);
        cx.b.f_ord_less_than(bt, None, db, z).map_err(er)?
    };
    let mut resid = |cx: &mut Ctx, q: Word| -> R<Word> {
        let p = fmul(cx, q, db)?;
        let r = fsub(cx, da, p)?;
        let f64t = cx.ty(Scalar::F64);
        let nr = cx.b.f_negate(f64t, None, r).map_err(er)?;
        sel(cx, Scalar::F64, b_neg, nr, r)
    };
    let q = fix_last_bit(cx, q1, &mut resid)?;
    // Special operands: a or b zero, infinite or NaN.
    let (ab, bb) = (bits32(cx, a)?, bits32(cx, b)?);
    let (abs_mask, inf) = (cx.constant(u, 0x7fff_ffff), cx.constant(u, 0x7f80_0000));
    let am = cx.b.bitwise_and(ut, None, ab, abs_mask).map_err(er)?;
    let bm = cx.b.bitwise_and(ut, None, bb, abs_mask).map_err(er)?;
    let zero = cx.constant(u, 0);
    // Zero as the driver's arithmetic sees it: where a driver flushes subnormals (NVIDIA's
    // does for f32), a subnormal operand then gives the zero operand's result, never a NaN
    // from the f64 sequence dividing by a flushed zero.
    let dzero = cx.float_const(Scalar::F64, 0.0);
    let a_zero = cx.b.f_ord_equal(bt, None, da, dzero).map_err(er)?;
    let b_zero = cx.b.f_ord_equal(bt, None, db, dzero).map_err(er)?;
    let a_inf = cx.b.i_equal(bt, None, am, inf).map_err(er)?;
    let b_inf = cx.b.i_equal(bt, None, bm, inf).map_err(er)?;
    let a_nan = cx.b.u_greater_than(bt, None, am, inf).map_err(er)?;
    let b_nan = cx.b.u_greater_than(bt, None, bm, inf).map_err(er)?;
    let zz = and(cx, a_zero, b_zero)?;
    let ii = and(cx, a_inf, b_inf)?;
    let some_nan = or(cx, a_nan, b_nan)?;
    let invalid = or(cx, zz, ii)?;
    let nan = or(cx, some_nan, invalid)?;
    let to_inf = or(cx, a_inf, b_zero)?;
    let to_zero = or(cx, a_zero, b_inf)?;
    let inf_or_zero = or(cx, to_inf, to_zero)?;
    let special = or(cx, nan, inf_or_zero)?;
    let sign = cx.b.bitwise_xor(ut, None, ab, bb).map_err(er)?;
    let sign_mask = cx.constant(u, 0x8000_0000);
    let sign = cx.b.bitwise_and(ut, None, sign, sign_mask).map_err(er)?;
    let mag = sel(cx, u, to_inf, inf, zero)?;
    let sv = cx.b.bitwise_or(ut, None, mag, sign).map_err(er)?;
    let sv = from_bits32(cx, sv)?;
    let nanv = nan32(cx)?;
    let sv = sel(cx, Scalar::F32, nan, nanv, sv)?;
    sel(cx, Scalar::F32, special, sv, q)
}

/// Correctly rounded f32 `sqrt(x)`: Vulkan's `Sqrt` is only as exact as `1 / InverseSqrt`.
/// The driver's estimate, one Newton step in f64 with the exact residual `x - q*q`, then
/// [`fix_last_bit`]. Negative numbers give NaN; ±0, +inf and NaN are returned as they are.
pub(super) fn sqrt_f32(cx: &mut Ctx, x: Word) -> R<Word> {
    let bt = cx.ty(Scalar::Bool);
    let f64t = cx.ty(Scalar::F64);
    let set = cx.ext_set;
    let dx = widen(cx, x)?;
    // In f64, where every f32 (subnormals too) is normal: no flushing of the estimate.
    let qd = cx.b.ext_inst(f64t, None, set, GLOp::Sqrt as u32, [Operand::IdRef(dx)]).map_err(er)?;
    let q0 = narrow(cx, qd)?;
    let dq0 = widen(cx, q0)?;
    let sq = fmul(cx, dq0, dq0)?;
    let r0 = fsub(cx, dx, sq)?;
    let two = fadd(cx, dq0, dq0)?;
    let corr = fdiv(cx, r0, two)?;
    let qd1 = fadd(cx, dq0, corr)?;
    let q1 = narrow(cx, qd1)?;
    let mut resid = |cx: &mut Ctx, q: Word| -> R<Word> {
        let sq = fmul(cx, q, q)?;
        fsub(cx, dx, sq)
    };
    let q = fix_last_bit(cx, q1, &mut resid)?;
    // Finite and positive takes the computed root; otherwise x itself, or NaN below zero.
    // Decided on the widened value, the one the f64 sequence used: where a driver flushes
    // subnormals (NVIDIA's does for f32), a subnormal x is then a zero, never 0/0 = NaN.
    let zero = cx.float_const(Scalar::F64, 0.0);
    let inf = cx.float_const(Scalar::F64, f64::INFINITY);
    let pos = cx.b.f_ord_greater_than(bt, None, dx, zero).map_err(er)?;
    let fin = cx.b.f_ord_less_than(bt, None, dx, inf).map_err(er)?;
    let normal = and(cx, pos, fin)?;
    let neg = cx.b.f_ord_less_than(bt, None, dx, zero).map_err(er)?;
    let nanv = nan32(cx)?;
    let same = narrow(cx, dx)?;
    let special = sel(cx, Scalar::F32, neg, nanv, same)?;
    sel(cx, Scalar::F32, normal, q, special)
}
