//! kiln's own `exp`, `log`, `sin` and `cos` on f64: the one definition of their bits.
//!
//! As on f32 (`math`), each function is a fixed sequence of IEEE f64 operations (`+ - * /`,
//! `fma` where written), 64-bit integer bit operations, conversions, comparisons and
//! selects, with one table lookup (the huge-argument reduction of `sin`/`cos`), so that the
//! result never depends on the host's libm and the sequence can run lane for lane in vector
//! code. The polynomials are fdlibm's (as musl has them), whose error bounds are below
//! 1 ulp; docs/math.md has the errors measured against the host libm.
//!
//! Special values: a NaN argument gives that NaN, quieted; `exp(+inf)` is +inf, `exp(-inf)`
//! +0, overflow +inf and underflow rounds once to a subnormal or +0; `log(±0)` is -inf,
//! `log(+inf)` +inf, `log` of a negative number or -inf is the positive quiet NaN
//! [`DEFAULT_NAN_BITS`]; `sin(±0)` is ±0, `sin(±inf)` and `cos(±inf)` are that NaN.

use super::math::{pi_bits, SINCOS_PIO2, TWO_OVER_PI};

/// The positive quiet NaN that invalid operations (`log(-1.0)`, `sin(inf)`) give.
pub const DEFAULT_NAN_BITS: u64 = 0x7ff8_0000_0000_0000;

/// `exp` clamps its argument into [`EXP_LO`, `EXP_HI`]: below, the result rounds to +0
/// anyway; above, it overflows to +inf.
pub const EXP_LO: f64 = -746.0;
/// See [`EXP_LO`].
pub const EXP_HI: f64 = 710.0;
/// 1 / ln 2.
pub const INV_LN2: f64 = f64::from_bits(0x3ff7_1547_652b_82fe);
/// ln 2 in two parts, the first with 32 significant bits (so `k * LN2_HI` is exact).
pub const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
/// See [`LN2_HI`].
pub const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
/// exp: R(r²) = r² (P1 + r² (P2 + ...)), c = r - R (fdlibm's `exp`): P1..P5.
pub const EXP_P: [f64; 5] = [
    f64::from_bits(0x3fc5_5555_5555_553e),
    f64::from_bits(0xbf66_c16c_16be_bd93),
    f64::from_bits(0x3f11_566a_af25_de2c),
    f64::from_bits(0xbebb_bd41_c5d2_6bf1),
    f64::from_bits(0x3e66_3769_72be_a4d0),
];

/// The bits of sqrt(1/2), high word: the mantissa is reduced into [sqrt(1/2), sqrt(2)).
pub const LOG_SQRT_HALF_HI: u64 = 0x3fe6_a09e;
/// log(1+f) = f - f²/2 + s (f²/2 + R), s = f / (2 + f), R a polynomial in s² (fdlibm's
/// `log`): Lg1..Lg7.
pub const LOG_LG: [f64; 7] = [
    f64::from_bits(0x3fe5_5555_5555_5593),
    f64::from_bits(0x3fd9_9999_9997_fa04),
    f64::from_bits(0x3fd2_4924_9422_9359),
    f64::from_bits(0x3fcc_71c5_1d8e_78af),
    f64::from_bits(0x3fc7_4664_96cb_03de),
    f64::from_bits(0x3fc3_9a09_d078_c69f),
    f64::from_bits(0x3fc2_f112_df3e_5244),
];

/// `sin`/`cos` of |x| below this reduce by pi/2 in three parts with `fma`; from it on (and
/// for ±inf), by the table [`SINCOS_TABLE`].
pub const SINCOS_HUGE: f64 = 268_435_456.0; // 2^28
/// sin(r + t) on |r| <= pi/4 (fdlibm's `__kernel_sin`): S1..S6.
pub const SIN_S: [f64; 6] = [
    f64::from_bits(0xbfc5_5555_5555_5549),
    f64::from_bits(0x3f81_1111_1110_f8a6),
    f64::from_bits(0xbf2a_01a0_19c1_61d5),
    f64::from_bits(0x3ec7_1de3_57b1_fe7d),
    f64::from_bits(0xbe5a_e5e6_8a2b_9ceb),
    f64::from_bits(0x3de5_d93a_5acf_d57c),
];
/// cos(r + t) on |r| <= pi/4 (fdlibm's `__kernel_cos`): C1..C6.
pub const COS_C: [f64; 6] = [
    f64::from_bits(0x3fa5_5555_5555_554c),
    f64::from_bits(0xbf56_c16c_16c1_5177),
    f64::from_bits(0x3efa_01a0_19cb_1590),
    f64::from_bits(0xbe92_7e4f_809c_52ad),
    f64::from_bits(0x3e21_ee9e_bdb4_b1c4),
    f64::from_bits(0xbda8_fae9_be88_38d4),
];

/// Rows of [`SINCOS_TABLE`]: one per binary exponent E of x = M 2^E (M the 53-bit integer
/// significand) from [`SINCOS_E0`] (x >= 2^28) to 971 (the largest finite f64).
pub const SINCOS_ROWS: usize = 996;
/// The exponent E of the table's first row.
pub const SINCOS_E0: i32 = -24;
/// Parts per row: 2^E 2/pi mod 4 in 53-bit pieces, so that M times a piece is exact as
/// an `fma` two-product.
pub const SINCOS_PARTS: usize = 4;

const fn pow2(n: i32) -> f64 {
    f64::from_bits(((1023 + n) as u64) << 52)
}

const fn build_table() -> [f64; SINCOS_PARTS * SINCOS_ROWS] {
    let mut t = [0.0; SINCOS_PARTS * SINCOS_ROWS];
    let mut row = 0;
    while row < SINCOS_ROWS {
        let e = SINCOS_E0 as i64 + row as i64;
        // 2^E 2/pi mod 4 = the bits from E-1 on, weighing 2^1, 2^0, ...; part j holds the
        // 53 of them from weight 2^(1-53j).
        let mut j = 0;
        while j < SINCOS_PARTS {
            let bits = pi_bits(e - 1 + 53 * j as i64, 53);
            t[j * SINCOS_ROWS + row] = bits as f64 * pow2(-52 - 53 * j as i32 + 1);
            j += 1;
        }
        row += 1;
    }
    t
}

/// 2^E 2/pi mod 4 for E = [`SINCOS_E0`] + row, in [`SINCOS_PARTS`] parts: the first
/// [`SINCOS_ROWS`] entries the highest parts, then the next, and so on.
pub static SINCOS_TABLE: [f64; SINCOS_PARTS * SINCOS_ROWS] = build_table();

fn quiet(x: f64) -> f64 {
    f64::from_bits(x.to_bits() | 0x0008_0000_0000_0000)
}

/// `maxpd(a, b)`: `a > b ? a : b` (so `b` when either is NaN).
fn maxpd(a: f64, b: f64) -> f64 {
    if a > b {
        a
    } else {
        b
    }
}

/// `minpd(a, b)`: `a < b ? a : b`.
fn minpd(a: f64, b: f64) -> f64 {
    if a < b {
        a
    } else {
        b
    }
}

/// 2^k for k in -1022..=1023, from its bits.
fn pow2i(k: i64) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// kiln's `exp` on f64.
pub fn exp_f64(x: f64) -> f64 {
    let xc = minpd(maxpd(x, EXP_LO), EXP_HI);
    let k = (xc * INV_LN2).round_ties_even();
    // k * LN2_HI is exact and close to xc: hi is exact.
    let hi = xc - k * LN2_HI;
    let lo = k * LN2_LO;
    let r = hi - lo;
    let rr = r * r;
    let p = EXP_P[3] + rr * EXP_P[4];
    let p = EXP_P[2] + rr * p;
    let p = EXP_P[1] + rr * p;
    let p = EXP_P[0] + rr * p;
    let c = r - rr * p;
    let y = 1.0 + ((r * c / (2.0 - c) - lo) + hi);
    // 2^k in two factors, both normal for k in -1076..=1025: y * 2^k1 is exact, and the
    // second product rounds once (to a subnormal, or to infinity).
    let ki = k as i64;
    let k1 = ki >> 1;
    let res = y * pow2i(k1) * pow2i(ki - k1);
    if x.is_nan() {
        quiet(x)
    } else {
        res
    }
}

/// kiln's `log` (natural logarithm) on f64.
pub fn log_f64(x: f64) -> f64 {
    let tiny = x < f64::MIN_POSITIVE;
    let xs = if tiny { x * pow2(54) } else { x };
    let kadj: i64 = if tiny { -54 } else { 0 };
    let ix = xs.to_bits().wrapping_add((0x3ff0_0000 - LOG_SQRT_HALF_HI) << 32);
    let k = ((ix as i64) >> 52) - 0x3ff + kadj;
    let m = f64::from_bits((ix & 0x000f_ffff_ffff_ffff) + (LOG_SQRT_HALF_HI << 32));
    let f = m - 1.0;
    let hfsq = 0.5 * f * f;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LOG_LG[1] + w * (LOG_LG[3] + w * LOG_LG[5]));
    let t2 = z * (LOG_LG[0] + w * (LOG_LG[2] + w * (LOG_LG[4] + w * LOG_LG[6])));
    let r = t2 + t1;
    let dk = k as f64;
    let res = s * (hfsq + r) + dk * LN2_LO - hfsq + f + dk * LN2_HI;
    if x.is_nan() {
        quiet(x)
    } else if x < 0.0 {
        f64::from_bits(DEFAULT_NAN_BITS)
    } else if x == 0.0 {
        f64::NEG_INFINITY
    } else if x == f64::INFINITY {
        x
    } else {
        res
    }
}

/// `a + b` exactly, as the rounded sum and its error.
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb);
    (s, e)
}

/// x reduced by pi/2: (r, t, n) with x = n pi/2 + r + t (r + t a double-double,
/// |r| <= ~pi/4), n mod 4 exact.
fn reduce(x: f64) -> (f64, f64, i64) {
    if x.abs() >= SINCOS_HUGE {
        return reduce_huge(x);
    }
    let k = (x * TWO_OVER_PI).round_ties_even();
    // Exact: k * P0 is a multiple of 2^-52 close to x.
    let a = (-k).mul_add(SINCOS_PIO2[0], x);
    let bh = k * SINCOS_PIO2[1];
    let bl = k.mul_add(SINCOS_PIO2[1], -bh);
    let (rh, e) = two_sum(a, -bh);
    let rl = (e - bl) - k * SINCOS_PIO2[2];
    let r = rh + rl;
    let t = (rh - r) + rl;
    (r, t, k as i64)
}

/// [`reduce`] for |x| >= 2^28 (and ±inf, whose result is replaced).
fn reduce_huge(x: f64) -> (f64, f64, i64) {
    let bits = x.to_bits();
    let row = ((((bits >> 52) & 0x7ff) as i64) - 1075 - SINCOS_E0 as i64)
        .min(SINCOS_ROWS as i64 - 1) as usize;
    let m = ((bits & 0x000f_ffff_ffff_ffff) | 0x0010_0000_0000_0000) as f64;
    let part = |j: usize| SINCOS_TABLE[j * SINCOS_ROWS + row];
    // M times each part as an exact two-product; the first reduced mod 4 exactly.
    let h0 = m * part(0);
    let l0 = m.mul_add(part(0), -h0);
    let h0 = (h0 * 0.25).floor().mul_add(-4.0, h0);
    let h1 = m * part(1);
    let l1 = m.mul_add(part(1), -h1);
    let h2 = m * part(2);
    let l2 = m.mul_add(part(2), -h2);
    let h3 = m * part(3);
    let (a, ea) = two_sum(h0, l0);
    let (b, eb) = two_sum(a, h1);
    let k = b.round_ties_even();
    // Exact: |b - k| <= 1/2 and k is a multiple of b's ulp.
    let f = b - k;
    let (s, e1) = two_sum(f, ea);
    let (s, e2) = two_sum(s, eb);
    let (s, e3) = two_sum(s, l1);
    let (s, e4) = two_sum(s, h2);
    let lo = ((((e1 + e2) + e3) + e4) + l2) + h3;
    let (s, lo) = two_sum(s, lo);
    // (s + lo) pi/2 as a double-double.
    let rh = s * SINCOS_PIO2[0];
    let rl = s.mul_add(SINCOS_PIO2[0], -rh) + (lo * SINCOS_PIO2[0] + s * SINCOS_PIO2[1]);
    let r = rh + rl;
    let t = (rh - r) + rl;
    if x < 0.0 {
        (-r, -t, -(k as i64))
    } else {
        (r, t, k as i64)
    }
}

/// sin(r + t) on |r| <= ~pi/4.
fn kernel_sin(r: f64, t: f64) -> f64 {
    let z = r * r;
    let w = z * z;
    let p = SIN_S[1] + z * (SIN_S[2] + z * SIN_S[3]) + z * w * (SIN_S[4] + z * SIN_S[5]);
    let v = z * r;
    r - ((z * (0.5 * t - v * p) - t) - v * SIN_S[0])
}

/// cos(r + t) on |r| <= ~pi/4.
fn kernel_cos(r: f64, t: f64) -> f64 {
    let z = r * r;
    let w = z * z;
    let p = z * (COS_C[0] + z * (COS_C[1] + z * COS_C[2]))
        + w * w * (COS_C[3] + z * (COS_C[4] + z * COS_C[5]));
    let hz = 0.5 * z;
    let w = 1.0 - hz;
    w + (((1.0 - w) - hz) + (z * p - r * t))
}

/// sin (q even) or cos (q odd) of x, negated when q & 2, where q = n + `shift`.
fn sin_cos(x: f64, shift: i64) -> f64 {
    let (r, t, n) = reduce(x);
    let q = n.wrapping_add(shift);
    let v = if q & 1 != 0 { kernel_cos(r, t) } else { kernel_sin(r, t) };
    if q & 2 != 0 {
        -v
    } else {
        v
    }
}

/// kiln's `sin` on f64.
pub fn sin_f64(x: f64) -> f64 {
    if x.is_nan() {
        quiet(x)
    } else if x.is_infinite() {
        f64::from_bits(DEFAULT_NAN_BITS)
    } else if x == 0.0 {
        x
    } else {
        sin_cos(x, 0)
    }
}

/// kiln's `cos` on f64.
pub fn cos_f64(x: f64) -> f64 {
    if x.is_nan() {
        quiet(x)
    } else if x.is_infinite() {
        f64::from_bits(DEFAULT_NAN_BITS)
    } else {
        sin_cos(x, 1)
    }
}
