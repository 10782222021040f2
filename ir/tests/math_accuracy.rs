//! The accuracy of kiln's own `exp`, `log`, `sin` and `cos` (kiln_ir::eval::math), measured
//! against the host's f64 libm (whose error, below 2^-52 relative, is negligible at f32
//! precision): the bounds docs/math.md states, over a sweep of the whole f32 range
//! (every 1021st bit pattern, both signs: subnormals, huge `sin`/`cos` arguments and the
//! overflow and underflow of `exp` included), dense sweeps where the functions are hardest,
//! and the special values bit for bit.

use kiln_ir::eval::math::{cos_f32, exp_f32, log_f32, sin_f32};
use std::f32::consts::{FRAC_PI_2, PI};

/// The error of `got` against the exact `want`, in units of the f32 spacing at `want`
/// (subnormal spacing below the normal range); 0 for equal infinities, infinite when one
/// side is infinite or NaN and the other is not.
fn ulp_err(got: f32, want: f64) -> f64 {
    if want.is_nan() || got.is_nan() {
        return if want.is_nan() && got.is_nan() { 0.0 } else { f64::INFINITY };
    }
    let w32 = want as f32;
    if w32.is_infinite() || got.is_infinite() {
        // Past the largest f32 the correctly rounded result is infinite; one ulp short of it
        // is f32::MAX.
        let max_ulp = 2f64.powi(127 - 23);
        return if got as f64 == want || (got == w32) {
            0.0
        } else if got.is_finite() && want.is_infinite() {
            f64::INFINITY
        } else {
            (got as f64 - want).abs() / max_ulp
        };
    }
    let e = if want == 0.0 { -126 } else { want.abs().log2().floor() as i32 };
    let ulp = 2f64.powi(e.max(-126) - 23);
    (got as f64 - want).abs() / ulp
}

/// The largest error of `f` against `reference` over `xs`, and where.
fn worst(
    f: fn(f32) -> f32,
    reference: fn(f64) -> f64,
    xs: impl Iterator<Item = f32>,
) -> (f64, f32) {
    let mut w = (0.0, 0.0);
    for x in xs {
        let e = ulp_err(f(x), reference(x as f64));
        if e > w.0 {
            w = (e, x);
        }
    }
    w
}

/// Every 1021st f32 bit pattern, NaNs left out.
fn sweep() -> impl Iterator<Item = f32> {
    (0..=u32::MAX).step_by(1021).map(f32::from_bits).filter(|x| !x.is_nan())
}

/// 200k consecutive f32s from `start` upward.
fn dense(start: f32) -> impl Iterator<Item = f32> {
    (start.to_bits()..start.to_bits() + 200_000).map(f32::from_bits)
}

#[test]
fn exp_within_one_ulp() {
    let all = worst(exp_f32, f64::exp, sweep());
    // Near overflow, near 0 and into the subnormal results.
    let edges = [88.0f32, -0.001, -88.0, -103.0]
        .into_iter()
        .map(|s| worst(exp_f32, f64::exp, dense(s)))
        .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a });
    eprintln!(
        "exp: max {:.3} ulp at {:e}; edges {:.3} ulp at {:e}",
        all.0, all.1, edges.0, edges.1
    );
    assert!(all.0 <= 1.0, "exp({:e}): {} ulp", all.1, all.0);
    assert!(edges.0 <= 1.0, "exp({:e}): {} ulp", edges.1, edges.0);
}

#[test]
fn log_within_one_ulp() {
    let pos = sweep().filter(|x| *x > 0.0);
    let all = worst(log_f32, f64::ln, pos);
    // Just below and above 1 (cancellation), and subnormals.
    let edges = [0.99f32, 1.0, 1e-45, std::f32::consts::SQRT_2 - 1e-3]
        .into_iter()
        .map(|s| worst(log_f32, f64::ln, dense(s)))
        .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a });
    eprintln!(
        "log: max {:.3} ulp at {:e}; edges {:.3} ulp at {:e}",
        all.0, all.1, edges.0, edges.1
    );
    assert!(all.0 <= 1.0, "log({:e}): {} ulp", all.1, all.0);
    assert!(edges.0 <= 1.0, "log({:e}): {} ulp", edges.1, edges.0);
}

#[test]
fn sin_cos_within_one_ulp_on_every_argument() {
    for (name, f, reference) in
        [("sin", sin_f32 as fn(f32) -> f32, f64::sin as fn(f64) -> f64), ("cos", cos_f32, f64::cos)]
    {
        let all = worst(f, reference, sweep());
        // Around pi/4, pi/2 and pi (quadrant edges), the 2^28 switch to the table, and the
        // classic hard case 16367173 * 2^72 (x mod pi/2 ~ 2^-30 of x).
        let edges =
            [0.785f32, FRAC_PI_2 - 1e-4, PI - 1e-4, 268_000_000.0, 16_367_173.0 * 2f32.powi(72)]
                .into_iter()
                .map(|s| worst(f, reference, dense(s).chain(dense(-s))))
                .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a });
        eprintln!(
            "{name}: max {:.3} ulp at {:e}; edges {:.3} ulp at {:e}",
            all.0, all.1, edges.0, edges.1
        );
        assert!(all.0 <= 1.0, "{name}({:e}): {} ulp", all.1, all.0);
        assert!(edges.0 <= 1.0, "{name}({:e}): {} ulp", edges.1, edges.0);
    }
}

#[test]
fn special_values() {
    let bits = |x: f32| x.to_bits();
    let default_nan = 0x7fc0_0000;
    // A NaN argument gives itself, quieted: sign and payload kept.
    for f in [exp_f32, log_f32, sin_f32, cos_f32] {
        assert_eq!(bits(f(f32::from_bits(0xff80_0001))), 0xffc0_0001);
        assert_eq!(bits(f(f32::from_bits(0x7fc0_1234))), 0x7fc0_1234);
    }
    assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
    assert_eq!(bits(exp_f32(f32::NEG_INFINITY)), 0);
    assert_eq!(exp_f32(0.0), 1.0);
    assert_eq!(exp_f32(-0.0), 1.0);
    assert_eq!(exp_f32(89.0), f32::INFINITY);
    assert_eq!(bits(exp_f32(-104.0)), 0);
    assert_eq!(bits(exp_f32(-103.0)), bits((-103f64).exp() as f32));
    assert_eq!(log_f32(0.0), f32::NEG_INFINITY);
    assert_eq!(log_f32(-0.0), f32::NEG_INFINITY);
    assert_eq!(log_f32(f32::INFINITY), f32::INFINITY);
    assert_eq!(log_f32(1.0).to_bits(), 0);
    assert_eq!(bits(log_f32(-1.0)), default_nan);
    assert_eq!(bits(log_f32(f32::NEG_INFINITY)), default_nan);
    assert_eq!(bits(log_f32(f32::from_bits(1))), bits((-103.27893f64) as f32));
    assert_eq!(bits(sin_f32(-0.0)), bits(-0.0));
    assert_eq!(bits(sin_f32(0.0)), 0);
    assert_eq!(bits(sin_f32(f32::from_bits(0x8000_0001))), 0x8000_0001);
    assert_eq!(cos_f32(-0.0), 1.0);
    for f in [sin_f32, cos_f32] {
        assert_eq!(bits(f(f32::INFINITY)), default_nan);
        assert_eq!(bits(f(f32::NEG_INFINITY)), default_nan);
        assert!(f(f32::MAX).abs() <= 1.0);
    }
}
