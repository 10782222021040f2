//! kiln's own `exp`, `log`, `sin` and `cos` on f32 (on f64: `math64`): the one definition
//! of their bits.
//!
//! Each function is a fixed sequence of IEEE operations (f32 or f64 `+ - * /`, `fma` where
//! written, a single rounding), integer bit operations, conversions, comparisons and
//! selects, with one table lookup (the huge-argument reduction of `sin`/`cos`), so that the
//! x86 backend's 8-lane code runs the very same sequence (a gather for the lookup) and gets
//! the interpreter's bits, and the result never depends on the host's libm. Every step is
//! written the way the vector code does it (`max`/`min` as `maxps`/`minps` pick operands,
//! rounding to integral ties to even): the constants below are shared with that code.
//!
//! Accuracy, measured over every f32 of the ranges the tests sweep, against the f64 libm
//! (docs/math.md has the table): `exp` and `log` within 1 ulp, `sin` and `cos` within
//! 1 ulp over the whole f32 range (huge arguments included: they are reduced with 2/pi to
//! 207 bits). Special values: a NaN argument gives that NaN, quieted; `exp(+inf)`
//! is +inf, `exp(-inf)` +0, overflow +inf and underflow rounds to subnormals or +0;
//! `log(±0)` is -inf, `log(+inf)` +inf, `log` of a negative number or -inf is the positive
//! quiet NaN `0x7fc00000`; `sin(±0)` is ±0, `sin(±inf)` and `cos(±inf)` are `0x7fc00000`.

/// `exp` clamps its argument into [`EXP_LO`, `EXP_HI`] (a lane's `maxps` then `minps`):
/// below, the result underflows to +0 anyway; above, it overflows to +inf.
pub const EXP_LO: f32 = -104.0;
/// See [`EXP_LO`].
pub const EXP_HI: f32 = 89.0;
/// log2(e), rounded to f32.
pub const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 in two parts: `EXP_LN2_HI + EXP_LN2_LO` (Cody-Waite, with `fma`).
pub const EXP_LN2_HI: f32 = 0.693_145_75;
/// See [`EXP_LN2_HI`].
pub const EXP_LN2_LO: f32 = 1.428_606_8e-6;
/// exp(r) = 1 + r + r² P(r) on |r| <= ln2/2; P's coefficients, highest degree first
/// (Cephes' `expf`).
pub const EXP_P: [f32; 6] =
    [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_6e-1, 5e-1];

/// Arguments below the smallest normal f32 are scaled by 2^25 first.
pub const LOG_TINY: f32 = f32::MIN_POSITIVE;
/// The bits of sqrt(1/2): the mantissa is reduced into [sqrt(1/2), sqrt(2)).
pub const LOG_SQRT_HALF_BITS: u32 = 0x3f35_04f3;
/// ln 2 in two parts for `log` (musl's `logf`): `LOG_LN2_HI + LOG_LN2_LO`.
pub const LOG_LN2_HI: f32 = 6.931_381e-1;
/// See [`LOG_LN2_HI`].
pub const LOG_LN2_LO: f32 = 9.058_001e-6;
/// log(1+f) = f - f²/2 + s (f²/2 + R(s²)), s = f / (2 + f); R's coefficients (musl's
/// `logf`, |error| < 2^-25.3 on the reduced range).
pub const LOG_LG: [f32; 4] = [0.666_666_6, 0.400_009_72, 0.284_987_87, 0.242_790_79];

/// The positive quiet NaN that invalid operations (`log(-1)`, `sin(inf)`) give.
pub const DEFAULT_NAN_BITS: u32 = 0x7fc0_0000;

/// `sin`/`cos` of |x| below this reduce by Cody-Waite in f64; from it on (and for ±inf),
/// by the table [`SINCOS_TABLE`].
pub const SINCOS_HUGE: f32 = 268_435_456.0; // 2^28
/// 2/pi rounded to f64.
pub const TWO_OVER_PI: f64 = f64::from_bits(0x3fe4_5f30_6dc9_c883);
/// pi/2 in three f64 parts (`fma` makes `x - k * SINCOS_PIO2[0]` exact).
pub const SINCOS_PIO2: [f64; 3] = [
    f64::from_bits(0x3ff9_21fb_5444_2d18),
    f64::from_bits(0x3c91_a626_3314_5c07),
    f64::from_bits(0xb91f_1976_b7ed_8fbc),
];
/// sin(r) = r + r³ (S1 + r² S2) + r⁷ (S3 + r² S4) on |r| <= pi/4 (musl's `__sindf`,
/// |sin(r)/r - s(r)| < 2^-37.5): S1..S4.
pub const SIN_S: [f64; 4] = [
    -0.166_666_666_416_265_24,
    0.008_333_329_385_889_463,
    -0.000_198_393_348_360_966_32,
    0.000_002_718_311_493_989_822,
];
/// cos(r) = 1 + r² C0 + r⁴ C1 + r⁶ (C2 + r² C3) on |r| <= pi/4 (musl's `__cosdf`,
/// |cos(r) - c(r)| < 2^-34.1): C0..C3.
pub const COS_C: [f64; 4] = [
    -0.499_999_997_251_031,
    0.041_666_623_323_739_06,
    -0.001_388_676_377_460_993,
    0.000_024_390_448_796_277_41,
];

/// The first bits of 2/pi, 24 a word (1248 bits: enough for the f64 reduction's table in
/// `math64`, whose last row reads to bit 1183).
pub(super) const TWO_OVER_PI_BITS: [u32; 52] = [
    0xa2f983, 0x6e4e44, 0x1529fc, 0x2757d1, 0xf534dd, 0xc0db62, 0x95993c, 0x439041, 0xfe5163,
    0xabdebb, 0xc561b7, 0x246e3a, 0x424dd2, 0xe00649, 0x2eea09, 0xd1921c, 0xfe1deb, 0x1cb129,
    0xa73ee8, 0x8235f5, 0x2ebb44, 0x84e99c, 0x7026b4, 0x5f7e41, 0x3991d6, 0x398353, 0x39f49c,
    0x845f8b, 0xbdf928, 0x3b1ff8, 0x97ffde, 0x05980f, 0xef2f11, 0x8b5a0a, 0x6d1f6d, 0x367ecf,
    0x27cb09, 0xb74f46, 0x3f669e, 0x5fea2d, 0x7527ba, 0xc7ebe5, 0xf17b3d, 0x0739f7, 0x8a5292,
    0xea6bfb, 0x5fb11f, 0x8d5d08, 0x560330, 0x46fc7b, 0x6babf0, 0xcfbc20,
];

/// Rows of [`SINCOS_TABLE`]: one per binary exponent E of x = M 2^E (M the 24-bit integer
/// significand) from [`SINCOS_E0`] (x >= 2^28) to 104 (the largest finite f32).
pub const SINCOS_ROWS: usize = 100;
/// The exponent E of the table's first row.
pub const SINCOS_E0: i32 = 5;

/// Bits `i..i+len` of 2/pi (bit 1 weighs 1/2, bits from 0 down are zero) as an integer.
pub(super) const fn pi_bits(i: i64, len: usize) -> u64 {
    let mut v = 0u64;
    let mut j = 0;
    while j < len {
        let b = i + j as i64 - 1;
        let bit = if b < 0 {
            0
        } else {
            (TWO_OVER_PI_BITS[b as usize / 24] >> (23 - b as usize % 24)) & 1
        };
        v = v << 1 | bit as u64;
        j += 1;
    }
    v
}

const fn build_table() -> [f64; 3 * SINCOS_ROWS] {
    let mut t = [0.0; 3 * SINCOS_ROWS];
    let mut row = 0;
    while row < SINCOS_ROWS {
        let e = SINCOS_E0 as i64 + row as i64;
        // 2^E 2/pi mod 4 = the bits from E-1 on, weighing 2^1, 2^0, ...: 26 bits down to
        // 2^-24 (times M: exact, 50 bits), 26 more down to 2^-50 (exact too, and exactly
        // added to the first after its reduction mod 4), then 53 more.
        t[row] = pi_bits(e - 1, 26) as f64 / (1u64 << 24) as f64;
        t[SINCOS_ROWS + row] = pi_bits(e + 25, 26) as f64 / (1u64 << 50) as f64;
        t[2 * SINCOS_ROWS + row] =
            pi_bits(e + 51, 53) as f64 / (1u64 << 52) as f64 / (1u64 << 51) as f64;
        row += 1;
    }
    t
}

/// 2^E 2/pi mod 4 for E = [`SINCOS_E0`] + row, in three parts: the first
/// [`SINCOS_ROWS`] entries the high parts, then the middle ones, then the low ones.
pub static SINCOS_TABLE: [f64; 3 * SINCOS_ROWS] = build_table();

fn quiet(x: f32) -> f32 {
    f32::from_bits(x.to_bits() | 0x0040_0000)
}

/// `maxps(a, b)`: `a > b ? a : b` (so `b` when either is NaN).
fn maxps(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// `minps(a, b)`: `a < b ? a : b`.
fn minps(a: f32, b: f32) -> f32 {
    if a < b {
        a
    } else {
        b
    }
}

/// 2^k for k in -126..=127, from its bits.
fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

/// kiln's `exp` on f32.
pub fn exp_f32(x: f32) -> f32 {
    let xc = minps(maxps(x, EXP_LO), EXP_HI);
    let k = (xc * LOG2E).round_ties_even();
    let r = (-k).mul_add(EXP_LN2_HI, xc);
    let r = (-k).mul_add(EXP_LN2_LO, r);
    let mut p = EXP_P[0];
    for &c in &EXP_P[1..] {
        p = p.mul_add(r, c);
    }
    let y = p.mul_add(r * r, r) + 1.0;
    // 2^k in two factors, both normal for k in -150..=128: y * 2^k1 is exact, and the
    // second product rounds once (to a subnormal, or to infinity).
    let ki = k as i32;
    let k1 = ki >> 1;
    let res = y * pow2(k1) * pow2(ki - k1);
    if x.is_nan() {
        quiet(x)
    } else {
        res
    }
}

/// kiln's `log` (natural logarithm) on f32.
pub fn log_f32(x: f32) -> f32 {
    let tiny = x < LOG_TINY;
    let xs = if tiny { x * 33_554_432.0 } else { x };
    let kadj = if tiny { -25 } else { 0 };
    let ix = xs.to_bits().wrapping_add(0x3f80_0000 - LOG_SQRT_HALF_BITS);
    let k = ((ix as i32) >> 23) - 0x7f + kadj;
    let m = f32::from_bits((ix & 0x007f_ffff) + LOG_SQRT_HALF_BITS);
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LOG_LG[1] + w * LOG_LG[3]);
    let t2 = z * (LOG_LG[0] + w * LOG_LG[2]);
    let r = t2 + t1;
    let hfsq = 0.5 * f * f;
    let dk = k as f32;
    let res = s * (hfsq + r) + dk * LOG_LN2_LO - hfsq + f + dk * LOG_LN2_HI;
    if x.is_nan() {
        quiet(x)
    } else if x < 0.0 {
        f32::from_bits(DEFAULT_NAN_BITS)
    } else if x == 0.0 {
        f32::NEG_INFINITY
    } else if x == f32::INFINITY {
        x
    } else {
        res
    }
}

/// x reduced by pi/2: (r, n) with x = n pi/2 + r, |r| <= ~pi/4, n mod 4 exact.
fn reduce(x: f32) -> (f64, i32) {
    if x.abs() >= SINCOS_HUGE {
        return reduce_huge(x);
    }
    let xd = x as f64;
    let k = (xd * TWO_OVER_PI).round_ties_even();
    let r = (-k).mul_add(SINCOS_PIO2[0], xd);
    let r = (-k).mul_add(SINCOS_PIO2[1], r);
    let r = (-k).mul_add(SINCOS_PIO2[2], r);
    (r, k as i32)
}

/// [`reduce`] for |x| >= 2^28 (and ±inf, whose result is replaced).
fn reduce_huge(x: f32) -> (f64, i32) {
    let bits = x.to_bits();
    let row = (((bits >> 23) & 0xff) as i32 - 150 - SINCOS_E0).min(SINCOS_ROWS as i32 - 1);
    let row = row as usize;
    let m = ((bits & 0x007f_ffff) | 0x0080_0000) as f64;
    let (hi, mid, lo) =
        (SINCOS_TABLE[row], SINCOS_TABLE[SINCOS_ROWS + row], SINCOS_TABLE[2 * SINCOS_ROWS + row]);
    // |x| 2/pi mod 4, exactly up to the last part's rounding.
    let p = m * hi;
    let p = (p * 0.25).floor().mul_add(-4.0, p);
    let s = m.mul_add(mid, p);
    let k = s.round_ties_even();
    let f = (s - k) + m * lo;
    let r = f.mul_add(SINCOS_PIO2[0], f * SINCOS_PIO2[1]);
    // x < 0: -r, and -k quadrants.
    if x < 0.0 {
        (-r, -(k as i32))
    } else {
        (r, k as i32)
    }
}

/// sin (q even) or cos (q odd) of x, negated when q & 2, where q = n + `shift`.
fn sin_cos(x: f32, shift: i32) -> f32 {
    let (r, n) = reduce(x);
    let z = r * r;
    let w = z * z;
    let s = z * r;
    let sin = (r + s * (SIN_S[0] + z * SIN_S[1])) + s * w * (SIN_S[2] + z * SIN_S[3]);
    let cos = ((1.0 + z * COS_C[0]) + w * COS_C[1]) + (w * z) * (COS_C[2] + z * COS_C[3]);
    let q = n.wrapping_add(shift);
    let v = if q & 1 != 0 { cos } else { sin };
    let v = if q & 2 != 0 { -v } else { v };
    v as f32
}

/// kiln's `sin` on f32.
pub fn sin_f32(x: f32) -> f32 {
    if x.is_nan() {
        quiet(x)
    } else if x.is_infinite() {
        f32::from_bits(DEFAULT_NAN_BITS)
    } else if x == 0.0 {
        x
    } else {
        sin_cos(x, 0)
    }
}

/// kiln's `cos` on f32.
pub fn cos_f32(x: f32) -> f32 {
    if x.is_nan() {
        quiet(x)
    } else if x.is_infinite() {
        f32::from_bits(DEFAULT_NAN_BITS)
    } else {
        sin_cos(x, 1)
    }
}
