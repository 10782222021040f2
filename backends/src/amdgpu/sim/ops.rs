//! Per-lane semantics of the scalar and vector ALU instructions kiln emits.
//!
//! Operands arrive as `u64`: 32-bit instructions use the low 32 bits, 64-bit ones (`_b64`,
//! `_f64`, `_i64`, `_u64`) the whole value. The approximate instructions (`v_rcp_*`,
//! `v_rsq_f64`) are modelled as the correctly rounded result, which is within the hardware's
//! documented error, never as the exact final answer of the sequences that use them.

fn fl(x: u64) -> f32 {
    f32::from_bits(x as u32)
}

fn db(x: u64) -> f64 {
    f64::from_bits(x)
}

fn f(x: f32) -> u64 {
    x.to_bits() as u64
}

fn d(x: f64) -> u64 {
    x.to_bits()
}

/// `x * 2^e` with a single rounding (IEEE scaleB), for any `e`.
pub fn ldexp(x: f64, e: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let (m, ex) = frexp(x);
    let t = ex.saturating_add(e);
    if t > 1024 {
        return f64::INFINITY.copysign(x);
    }
    if t >= -1021 {
        // Normal result: exact.
        return (m * 2.0) * 2f64.powi(t - 1);
    }
    if t < -1100 {
        return 0f64.copysign(x);
    }
    // Subnormal: round to a multiple of 2^-1074, ties to even.
    let y = m * 2f64.powi(t + 1074);
    y.round_ties_even() * f64::from_bits(1)
}

fn frexp(x: f64) -> (f64, i32) {
    if x == 0.0 || !x.is_finite() {
        return (x, 0);
    }
    let (x, adj) = if x.abs() < f64::MIN_POSITIVE { (x * 2f64.powi(64), -64) } else { (x, 0) };
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32 - 1022;
    let mant = f64::from_bits((bits & !(0x7ff << 52)) | (1022u64 << 52));
    (mant, exp + adj)
}

/// A 32-bit SALU result.
pub fn salu(op: &str, a: u32, b: u32) -> Option<u32> {
    Some(match op {
        "s_add_i32" | "s_add_u32" => a.wrapping_add(b),
        "s_sub_i32" | "s_sub_u32" => a.wrapping_sub(b),
        "s_mul_i32" => a.wrapping_mul(b),
        "s_mul_hi_u32" => ((a as u64 * b as u64) >> 32) as u32,
        "s_and_b32" => a & b,
        "s_or_b32" => a | b,
        "s_xor_b32" => a ^ b,
        "s_lshl_b32" => a << (b & 31),
        "s_lshr_b32" => a >> (b & 31),
        "s_ashr_i32" => ((a as i32) >> (b & 31)) as u32,
        "s_min_i32" => (a as i32).min(b as i32) as u32,
        "s_max_i32" => (a as i32).max(b as i32) as u32,
        "s_min_u32" => a.min(b),
        "s_max_u32" => a.max(b),
        "s_sext_i32_i8" => a as i8 as i32 as u32,
        "s_sext_i32_i16" => a as i16 as i32 as u32,
        _ => return None,
    })
}

/// A VALU result (low 32 bits used for 32-bit destinations).
pub fn valu(op: &str, a: u64, b: u64, c: u64) -> Option<u64> {
    let (a32, b32, c32) = (a as u32, b as u32, c as u32);
    Some(match op {
        "v_mov_b32" => a32 as u64,
        "v_not_b32" => !a32 as u64,
        "v_add_u32" => a32.wrapping_add(b32) as u64,
        "v_sub_u32" => a32.wrapping_sub(b32) as u64,
        "v_subrev_u32" => b32.wrapping_sub(a32) as u64,
        "v_mul_lo_u32" => a32.wrapping_mul(b32) as u64,
        "v_add3_u32" => a32.wrapping_add(b32).wrapping_add(c32) as u64,
        "v_mul_hi_u32" => (a32 as u64 * b32 as u64) >> 32,
        "v_and_b32" => (a32 & b32) as u64,
        "v_or_b32" => (a32 | b32) as u64,
        "v_xor_b32" => (a32 ^ b32) as u64,
        "v_lshlrev_b32" => (b32 << (a32 & 31)) as u64,
        "v_lshrrev_b32" => (b32 >> (a32 & 31)) as u64,
        "v_ashrrev_i32" => ((b32 as i32) >> (a32 & 31)) as u32 as u64,
        "v_lshlrev_b64" => b << (a32 & 63),
        "v_lshrrev_b64" => b >> (a32 & 63),
        "v_ashrrev_i64" => ((b as i64) >> (a32 & 63)) as u64,
        "v_min_i32" => (a32 as i32).min(b32 as i32) as u32 as u64,
        "v_max_i32" => (a32 as i32).max(b32 as i32) as u32 as u64,
        "v_min_u32" => a32.min(b32) as u64,
        "v_max_u32" => a32.max(b32) as u64,
        "v_med3_i32" => {
            let (x, y, z) = (a32 as i32, b32 as i32, c32 as i32);
            x.max(y).min(x.min(y).max(z)) as u32 as u64
        }
        "v_med3_u32" => a32.max(b32).min(a32.min(b32).max(c32)) as u64,
        "v_bfe_i32" => {
            let (off, w) = (b32 & 31, c32 & 31);
            if w == 0 {
                0
            } else {
                (((a32 >> off) << (32 - w)) as i32 >> (32 - w)) as u32 as u64
            }
        }
        "v_ffbh_u32" => {
            if a32 == 0 {
                u32::MAX as u64
            } else {
                a32.leading_zeros() as u64
            }
        }
        "v_add_f32" => f(fl(a) + fl(b)),
        "v_sub_f32" => f(fl(a) - fl(b)),
        "v_mul_f32" => f(fl(a) * fl(b)),
        "v_fma_f32" => f(fl(a).mul_add(fl(b), fl(c))),
        "v_rcp_iflag_f32" => f(1.0 / fl(a)),
        "v_ldexp_f32" => f(ldexp(fl(a) as f64, b32 as i32) as f32),
        "v_floor_f32" => f(fl(a).floor()),
        // The transcendental units: 2^x, log2 x, sin and cos of x turns (approximate on
        // hardware; modelled as the f32 library results).
        "v_exp_f32" => f(fl(a).exp2()),
        "v_log_f32" => f(fl(a).log2()),
        "v_sin_f32" => f((fl(a) as f64 * std::f64::consts::TAU).sin() as f32),
        "v_cos_f32" => f((fl(a) as f64 * std::f64::consts::TAU).cos() as f32),
        "v_fract_f32" => {
            let x = fl(a);
            f(if x.is_infinite() {
                f32::NAN
            } else {
                (x - x.floor()).min(f32::from_bits(0x3f7f_ffff))
            })
        }
        "v_ceil_f32" => f(fl(a).ceil()),
        "v_trunc_f32" => f(fl(a).trunc()),
        "v_cvt_f32_i32" => f(a32 as i32 as f32),
        "v_cvt_f32_u32" => f(a32 as f32),
        "v_cvt_i32_f32" => fl(a) as i32 as u32 as u64,
        "v_cvt_u32_f32" => fl(a) as u32 as u64,
        "v_cvt_f16_f32" => half::f16::from_f32(fl(a)).to_bits() as u64,
        "v_cvt_f32_f16" => f(half::f16::from_bits(a32 as u16).to_f32()),
        "v_cvt_f64_f32" => d(fl(a) as f64),
        "v_cvt_f32_f64" => f(db(a) as f32),
        "v_cvt_f64_i32" => d(a32 as i32 as f64),
        "v_cvt_f64_u32" => d(a32 as f64),
        "v_cvt_i32_f64" => db(a) as i32 as u32 as u64,
        "v_cvt_u32_f64" => db(a) as u32 as u64,
        "v_add_f64" => d(db(a) + db(b)),
        "v_mul_f64" => d(db(a) * db(b)),
        "v_fma_f64" => d(db(a).mul_add(db(b), db(c))),
        "v_rcp_f64" => d(1.0 / db(a)),
        "v_rsq_f64" => d(1.0 / db(a).sqrt()),
        "v_ldexp_f64" => d(ldexp(db(a), b32 as i32)),
        "v_frexp_mant_f64" => d(frexp(db(a)).0),
        "v_frexp_exp_i32_f64" => frexp(db(a)).1 as u32 as u64,
        "v_floor_f64" => d(db(a).floor()),
        "v_ceil_f64" => d(db(a).ceil()),
        "v_trunc_f64" => d(db(a).trunc()),
        "v_cndmask_b32_e64" => {
            if c != 0 {
                b32 as u64
            } else {
                a32 as u64
            }
        }
        _ => return None,
    })
}

/// A VALU compare (`v_cmp_<cond>_<type>`, with `_e64` stripped).
pub fn vcmp(cmp: &str, a: u64, b: u64) -> Option<bool> {
    let (cond, ty) = cmp.rsplit_once('_')?;
    let ord = match ty {
        "u32" => (a as u32).partial_cmp(&(b as u32)),
        "i32" => (a as u32 as i32).partial_cmp(&(b as u32 as i32)),
        "u64" => a.partial_cmp(&b),
        "i64" => (a as i64).partial_cmp(&(b as i64)),
        "f32" => fl(a).partial_cmp(&fl(b)),
        "f64" => db(a).partial_cmp(&db(b)),
        _ => return None,
    };
    use std::cmp::Ordering::*;
    Some(match cond {
        "eq" => ord == Some(Equal),
        "ne" | "lg" => ord.is_some_and(|o| o != Equal),
        "neq" => ord != Some(Equal),
        "lt" => ord == Some(Less),
        "le" => matches!(ord, Some(Less | Equal)),
        "gt" => ord == Some(Greater),
        "ge" => matches!(ord, Some(Greater | Equal)),
        "u" => ord.is_none(),
        _ => return None,
    })
}

/// The value an atomic read-modify-write (`global_atomic_*`, `ds_*_rtn_*`) stores, given
/// the old value, its data operand and (compare-and-swap) the compare value.
pub fn atomic(op: &str, old: u64, data: u64, cmp: Option<u64>) -> Option<u64> {
    let wide = op.ends_with("_x2") || op.ends_with("64");
    let mask = if wide { u64::MAX } else { u32::MAX as u64 };
    let (old, data) = (old & mask, data & mask);
    let signed = ["smin", "smax", "_i32", "_i64"].iter().any(|s| op.contains(s));
    let sx = |v: u64| if wide { v as i64 } else { v as u32 as i32 as i64 };
    let less = if signed { sx(data) < sx(old) } else { data < old };
    let new = if op.contains("cmpst") || op.contains("cmpswap") {
        if Some(old) == cmp.map(|c| c & mask) {
            data
        } else {
            old
        }
    } else if op.contains("swap") || op.contains("wrxchg") {
        data
    } else if op.contains("xor") {
        old ^ data
    } else if op.contains("add") && op.ends_with("f32") {
        f(fl(old) + fl(data))
    } else if op.contains("add") {
        old.wrapping_add(data)
    } else if op.contains("sub") {
        old.wrapping_sub(data)
    } else if op.contains("min") {
        if less {
            data
        } else {
            old
        }
    } else if op.contains("max") {
        if !less && data != old {
            data
        } else {
            old
        }
    } else if op.contains("and") {
        old & data
    } else if op.contains("or") {
        old | data
    } else {
        return None;
    };
    Some(new & mask)
}
