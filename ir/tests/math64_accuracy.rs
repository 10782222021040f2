//! The accuracy of kiln's own f64 `exp`, `log`, `sin` and `cos` (kiln_ir::eval::math64),
//! measured against the host's libm (glibc's, itself within about half an ulp): the bound
//! docs/math.md states, over pseudo-random bit patterns of the whole f64 range (both signs:
//! subnormals, huge `sin`/`cos` arguments, the overflow and underflow of `exp`), dense runs
//! where the functions are hardest, and the special values bit for bit.

use kiln_ir::eval::math64::{cos_f64, exp_f64, log_f64, sin_f64, DEFAULT_NAN_BITS};

/// The distance of `got` from `want` in units of the f64 spacing at `want` (subnormal
/// spacing below the normal range); 0 for equal values and for two NaNs, infinite when
/// one side is infinite or NaN and the other is not.
fn ulp_diff(got: f64, want: f64) -> f64 {
    if got.is_nan() || want.is_nan() {
        return if got.is_nan() && want.is_nan() { 0.0 } else { f64::INFINITY };
    }
    if got == want {
        return 0.0;
    }
    if got.is_infinite() || want.is_infinite() {
        // One ulp short of infinity is f64::MAX.
        let other = if got.is_infinite() { want } else { got };
        return if other.abs() == f64::MAX { 1.0 } else { f64::INFINITY };
    }
    // The spacing above |want| (powi would underflow for the smallest ones).
    let w = want.abs();
    let ulp = f64::from_bits(w.to_bits() + 1) - w;
    (got - want).abs() / ulp
}

/// The largest difference of `f` from `reference` over `xs`, and where.
fn worst(
    f: fn(f64) -> f64,
    reference: fn(f64) -> f64,
    xs: impl Iterator<Item = f64>,
) -> (f64, f64) {
    let mut w = (0.0, 0.0);
    for x in xs {
        let e = ulp_diff(f(x), reference(x));
        if e > 1.0 {
            eprintln!("over 1 ulp: {x:e} ({:#x}): {e}", x.to_bits());
        }
        if e > w.0 {
            w = (e, x);
        }
    }
    w
}

/// 2 million pseudo-random f64 bit patterns (a fixed xorshift sequence), NaNs left out.
fn sweep() -> impl Iterator<Item = f64> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    std::iter::repeat_with(move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        f64::from_bits(s)
    })
    .filter(|x| !x.is_nan())
    .take(2_000_000)
}

/// Pseudo-random f64s with |x| in [2^lo, 2^hi), both signs.
fn band(lo: i32, hi: i32, n: usize) -> impl Iterator<Item = f64> {
    sweep()
        .map(move |x| {
            let span = (hi - lo) as u64;
            let bits = x.to_bits();
            let e = (lo as i64 + ((bits >> 52) % span) as i64 + 1023) as u64;
            f64::from_bits((bits & 0x800f_ffff_ffff_ffff) | (e << 52))
        })
        .take(n)
}

/// 100k consecutive f64s from `start` upward.
fn dense(start: f64) -> impl Iterator<Item = f64> {
    (start.to_bits()..start.to_bits() + 100_000).map(f64::from_bits)
}

fn check(name: &str, f: fn(f64) -> f64, reference: fn(f64) -> f64, parts: Vec<(f64, f64)>) {
    let w = parts.into_iter().fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a });
    eprintln!("{name}: max {:.3} ulp from the host libm at {:e}", w.0, w.1);
    assert!(w.0 <= 1.0, "{name}({:e}) = {:e}, libm {:e}: {} ulp", w.1, f(w.1), reference(w.1), w.0);
}

#[test]
fn exp_within_one_ulp_of_libm() {
    let parts = vec![
        worst(exp_f64, f64::exp, sweep()),
        worst(exp_f64, f64::exp, band(-30, 10, 500_000)),
        worst(exp_f64, f64::exp, dense(709.0)),
        worst(exp_f64, f64::exp, dense(-708.0)),
        worst(exp_f64, f64::exp, dense(-744.0)),
        worst(exp_f64, f64::exp, dense(-1e-300)),
    ];
    check("exp", exp_f64, f64::exp, parts);
}

#[test]
fn log_within_one_ulp_of_libm() {
    let parts = vec![
        worst(log_f64, f64::ln, sweep().filter(|x| *x > 0.0)),
        worst(log_f64, f64::ln, band(-10, 10, 500_000).map(f64::abs)),
        worst(log_f64, f64::ln, dense(1.0)),
        worst(log_f64, f64::ln, dense(1.0 - 1e-10)),
        worst(log_f64, f64::ln, dense(5e-324)),
        worst(log_f64, f64::ln, dense(std::f64::consts::FRAC_1_SQRT_2)),
    ];
    check("log", log_f64, f64::ln, parts);
}

/// The host libm's `cos`, except where it is known to miss: glibc 2.36 gives
/// cos(0x7506ac5b262ca1ff) 8 ulp off the exact value, which this returns (computed with
/// exact rational arithmetic and 1600 bits of pi: the argument is 797 bits past a multiple
/// of pi/2 by 4.687165924254628e-19, and cos there is minus that).
fn cos_reference(x: f64) -> f64 {
    if x.to_bits() == 0x7506_ac5b_262c_a1ff {
        -4.687_165_924_254_628e-19
    } else {
        x.cos()
    }
}

#[test]
fn sin_cos_within_one_ulp_of_libm_at_every_size() {
    for (name, f, reference) in [
        ("sin", sin_f64 as fn(f64) -> f64, f64::sin as fn(f64) -> f64),
        ("cos", cos_f64, cos_reference),
    ] {
        let mut parts = vec![
            worst(f, reference, sweep()),
            // Small and medium arguments, and both sides of the switch to the table at 2^28.
            worst(f, reference, band(-30, 10, 500_000)),
            worst(f, reference, band(10, 40, 500_000)),
            worst(f, reference, dense(268_435_456.0)),
            worst(f, reference, dense(std::f64::consts::FRAC_PI_2 - 1e-9)),
            worst(f, reference, dense(std::f64::consts::PI)),
        ];
        // The f64 closest to a multiple of pi/2 (6381956970095103 x 2^797), and its
        // neighbours; 1e22, the classic test of exact reduction.
        let hard = 6_381_956_970_095_103f64 * 2f64.powi(797);
        parts.push(worst(f, reference, dense(hard)));
        parts.push(worst(f, reference, [1e22, -1e22, f64::MAX, -f64::MAX].into_iter()));
        check(name, f, reference, parts);
    }
}

#[test]
fn special_values_bit_for_bit() {
    let nan = f64::from_bits(DEFAULT_NAN_BITS);
    // A signalling NaN with a payload comes back quiet, sign and payload kept.
    let snan = f64::from_bits(0xfff0_0000_0000_0123);
    let quieted = 0xfff8_0000_0000_0123u64;
    type Case = (fn(f64) -> f64, f64, f64);
    let cases: [Case; 17] = [
        (exp_f64, f64::INFINITY, f64::INFINITY),
        (exp_f64, f64::NEG_INFINITY, 0.0),
        (exp_f64, 0.0, 1.0),
        (exp_f64, -0.0, 1.0),
        (exp_f64, 710.0, f64::INFINITY),
        (exp_f64, -746.0, 0.0),
        (log_f64, 0.0, f64::NEG_INFINITY),
        (log_f64, -0.0, f64::NEG_INFINITY),
        (log_f64, f64::INFINITY, f64::INFINITY),
        (log_f64, 1.0, 0.0),
        (log_f64, -1.0, nan),
        (log_f64, f64::NEG_INFINITY, nan),
        (sin_f64, 0.0, 0.0),
        (sin_f64, -0.0, -0.0),
        (sin_f64, f64::INFINITY, nan),
        (cos_f64, f64::NEG_INFINITY, nan),
        (cos_f64, -0.0, 1.0),
    ];
    for (i, (f, x, want)) in cases.into_iter().enumerate() {
        assert_eq!(f(x).to_bits(), want.to_bits(), "case {i}: f({x:e})");
    }
    for f in [exp_f64, log_f64, sin_f64, cos_f64] {
        assert_eq!(f(snan).to_bits(), quieted);
    }
    // Subnormal arguments of sin give themselves.
    assert_eq!(sin_f64(-5e-324).to_bits(), (-5e-324f64).to_bits());
}

#[test]
fn the_interpreter_and_every_evaluation_use_kilns_f64_functions() {
    use kiln_ir::eval::intrinsic;
    use kiln_ir::{Imm, Intrinsic};
    // Where the host libm and kiln differ (glibc's cos miss), and a spread of others: the
    // interpreter's and the constant folder's evaluation gives kiln's bits.
    let miss = f64::from_bits(0x7506_ac5b_262c_a1ff);
    assert_ne!(cos_f64(miss).to_bits(), miss.cos().to_bits(), "the host libm changed");
    let xs = [miss, -0.5, 1e-300, 3.75, 700.0, -745.5, 1e22, 5e-324, f64::NAN];
    for (op, f) in [
        (Intrinsic::Exp, exp_f64 as fn(f64) -> f64),
        (Intrinsic::Log, log_f64),
        (Intrinsic::Sin, sin_f64),
        (Intrinsic::Cos, cos_f64),
    ] {
        for x in xs {
            let got = intrinsic(op, &[Imm::Float(kiln_ir::Scalar::F64, x)]).unwrap();
            assert_eq!(got.to_bits(), f(x).to_bits(), "{op:?}({x:e})");
        }
    }
}

#[test]
fn rounding_to_integral_quiets_signalling_nans_in_every_build() {
    use kiln_ir::eval::intrinsic;
    use kiln_ir::{Imm, Intrinsic, Scalar};
    // (Rust's software `floor` of an unoptimized build returns a signalling NaN unchanged;
    // the hardware, and so the 8-lane code, quiets it.)
    for op in [Intrinsic::Floor, Intrinsic::Ceil, Intrinsic::Trunc] {
        let s64 = f64::from_bits(0x7ff4_0000_0000_0001);
        let got = intrinsic(op, &[Imm::Float(Scalar::F64, s64)]).unwrap();
        assert_eq!(got.to_bits(), 0x7ffc_0000_0000_0001, "{op:?} f64");
        // The f32 signalling NaN 0xffa00001 as an immediate holds it (`as` would quiet it).
        let s32 = f64::from_bits(0xfff4_0000_2000_0000);
        let got = intrinsic(op, &[Imm::Float(Scalar::F32, s32)]).unwrap();
        assert_eq!(got.to_bits(), 0xffe0_0001, "{op:?} f32");
    }
}
