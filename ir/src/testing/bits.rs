//! NaN payloads that only move: the case every device must copy bit for bit.

use crate::expr::Imm;
use crate::launch::{Arg, Buffer, NdRange};
use crate::parse::parse_module;
use crate::types::Scalar;

use super::TestCase;

/// Bit patterns of type `ty` (f16, f32 or f64): signalling NaNs (the smallest payload, the
/// largest, a negative one) and a quiet NaN with a payload.
fn nan_inputs(ty: Scalar) -> [u64; 4] {
    match ty {
        Scalar::F16 => [0x7c01, 0x7dff, 0xfc01, 0x7e01],
        Scalar::F32 => [0x7f80_0001, 0x7fbf_ffff, 0xff80_0001, 0x7fc0_0001],
        _ => [
            0x7ff0_0000_0000_0001,
            0x7ff7_ffff_ffff_ffff,
            0xfff0_0000_0000_0001,
            0x7ff8_0000_0000_0001,
        ],
    }
}

/// The signalling NaNs of type `ty` passed as the scalar argument and written as a literal.
fn nan_scalar_and_literal(ty: Scalar) -> (u64, u64) {
    match ty {
        Scalar::F16 => (0x7d55, 0xfd01),
        Scalar::F32 => (0x7fa0_0005, 0xffb0_0003),
        _ => (0x7ff4_0000_0000_0005, 0xfff0_0000_dead_beef),
    }
}

/// Work-items of [`nan_copy_case`] (a multiple of 8, so that the x86 8-lane code runs it);
/// each writes `NAN_COPY_STRIDE` elements of `dst`.
const ITEMS: usize = 8;
const NAN_COPY_STRIDE: usize = 6;

/// A kernel on `ty` values (f16, f32 or f64) that only moves NaNs with payloads, most of them
/// signalling: loads, stores, `let`, `var` and assignment under branches, `?:` selects (not
/// on f16, a storage type), a scalar argument, a literal, and vector loads, broadcasts,
/// `insert`, `extract` and stores. It
/// does no arithmetic, so IEEE 754 lets nothing quiet a NaN: every device must give the
/// returned expected buffers bit for bit (compare them with `==`, which is bitwise). The
/// expectation is written here by hand, not computed by the interpreter, so it checks the
/// interpreter too.
pub fn nan_copy_case(ty: Scalar) -> (TestCase, Vec<Buffer>) {
    let name = ty.name();
    let (s_bits, lit_bits) = nan_scalar_and_literal(ty);
    // f16 is a storage type, without selects: there `?:` is left out (row 5 stays 0).
    let select =
        if ty == Scalar::F16 { "" } else { "dst[6u32 * i + 5u32] = c[i] != 0u32 ? s : v;\n  " };
    let src = format!(
        "kernel nan_copy_{name}(src: ptr<global, {name}>, dst: ptr<global, {name}>, \
             vec: ptr<global, {name}>, c: ptr<global, u32>, s: {name}) {{
  let i: u32 = global_id(0);
  let v: {name} = src[i];
  var w: {name} = s;
  w = v;
  dst[6u32 * i] = w;
  var pick: {name} = s;
  if c[i] != 0u32 {{
    pick = v;
  }}
  dst[6u32 * i + 1u32] = pick;
  dst[6u32 * i + 2u32] = s;
  dst[6u32 * i + 3u32] = nan{name}(0x{lit_bits:x});
  let lanes: {name}x4 = vload4(src, 0u32);
  dst[6u32 * i + 4u32] = extract(lanes, 3);
  {select}var picked: {name}x4 = {name}x4(s);
  if c[i] != 0u32 {{
    picked = lanes;
  }}
  vstore(vec, 4u32 * i, insert(picked, 2, v));
}}"
    );
    let kernel = parse_module(&src)
        .unwrap_or_else(|e| panic!("nan_copy_case({ty}): {e:?}"))
        .kernels
        .remove(0);
    crate::verify::verify_kernel(&kernel).unwrap_or_else(|e| panic!("nan_copy_case({ty}): {e:?}"));
    let inputs: Vec<u64> = nan_inputs(ty).iter().cycle().take(ITEMS).copied().collect();
    let c: Vec<u32> = (0..ITEMS as u32).map(|i| (i + i / 4) % 2).collect();
    let imms = |bits: &[u64]| -> Vec<Imm> { bits.iter().map(|&b| Imm::from_bits(ty, b)).collect() };
    let buf = |bits: &[u64]| Buffer::from_imms(ty, &imms(bits)).expect("values of the type");
    let mut dst = vec![0u64; ITEMS * NAN_COPY_STRIDE];
    let mut vec = vec![0u64; ITEMS * 4];
    for i in 0..ITEMS {
        let row = &mut dst[i * NAN_COPY_STRIDE..(i + 1) * NAN_COPY_STRIDE];
        row[0] = inputs[i];
        row[1] = if c[i] != 0 { inputs[i] } else { s_bits };
        row[2] = s_bits;
        row[3] = lit_bits;
        row[4] = inputs[3];
        if ty != Scalar::F16 {
            row[5] = if c[i] != 0 { s_bits } else { inputs[i] };
        }
        for k in 0..4 {
            vec[4 * i + k] = match (k, c[i] != 0) {
                (2, _) => inputs[i],
                (_, true) => inputs[k],
                (_, false) => s_bits,
            };
        }
    }
    let buffers = vec![
        buf(&inputs),
        buf(&[0; ITEMS * NAN_COPY_STRIDE]),
        buf(&[0; ITEMS * 4]),
        Buffer::from_slice(&c),
    ];
    let expected = vec![buf(&inputs), buf(&dst), buf(&vec), Buffer::from_slice(&c)];
    let args = vec![
        Arg::Buffer(0),
        Arg::Buffer(1),
        Arg::Buffer(2),
        Arg::Buffer(3),
        Arg::Scalar(Imm::from_bits(ty, s_bits)),
    ];
    let case = TestCase { kernel, range: NdRange::new(&[ITEMS as u32]), args, buffers };
    (case, expected)
}

/// The first element where `got` differs from `want` in any bit, named with both bit
/// patterns; `Ok` when every buffer is identical.
pub fn bits_match(want: &[Buffer], got: &[Buffer]) -> Result<(), String> {
    if want.len() != got.len() {
        return Err(format!("{} buffers expected, {} found", want.len(), got.len()));
    }
    for (b, (w, g)) in want.iter().zip(got).enumerate() {
        if w.elem() != g.elem() || w.len() != g.len() {
            return Err(format!(
                "buffer {b}: expected {} {} elements, found {} {}",
                w.len(),
                w.elem(),
                g.len(),
                g.elem()
            ));
        }
        for i in 0..w.len() {
            let (x, y) = (w.get(i).map(|v| v.to_bits()), g.get(i).map(|v| v.to_bits()));
            if x != y {
                return Err(format!(
                    "buffer {b}, element {i}: expected bits {:#x}, found {:#x}",
                    x.unwrap_or_default(),
                    y.unwrap_or_default()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 29 (W1): the interpreter, the oracle, quieted signalling NaNs on a plain copy
    /// (f32 0x7f800001 became 0x7fc00001, f16 0x7c01 became 0x7e01), scalar arguments and
    /// literals included.
    #[test]
    fn the_interpreter_copies_every_bit() {
        for ty in [Scalar::F16, Scalar::F32, Scalar::F64] {
            let (case, want) = nan_copy_case(ty);
            let got = case.run().unwrap_or_else(|e| panic!("{ty}: {e}"));
            bits_match(&want, &got).unwrap_or_else(|e| panic!("{ty}: {e}"));
            // Not a vacuous comparison: the expectation holds signalling NaNs.
            let snan = want[1]
                .to_imms()
                .iter()
                .filter(|v| v.as_f64().is_some_and(|f| f.is_nan() && f.to_bits() & 1 << 51 == 0))
                .count();
            assert!(snan >= 12, "{ty}: only {snan} signalling NaNs expected");
        }
        // The expectation itself goes through buffers: their bytes are the bits given (fills
        // and host copies write elements the same way).
        for (ty, bits) in [
            (Scalar::F16, 0x7c01u64),
            (Scalar::F32, 0x7f80_0001),
            (Scalar::F64, 0x7ff0_0000_0000_0001),
        ] {
            let mut b = Buffer::zeroed(ty, 1);
            b.set(0, Imm::from_bits(ty, bits)).unwrap();
            assert_eq!(b.as_bytes(), &bits.to_le_bytes()[..ty.size_bytes()], "{ty}");
        }
        let f = Buffer::from_slice(&[f32::from_bits(0x7fbf_ffff)]);
        assert_eq!(f.as_bytes(), &0x7fbf_ffffu32.to_le_bytes());
        assert_eq!(f.to_vec::<f32>().unwrap()[0].to_bits(), 0x7fbf_ffff);
    }

    #[test]
    fn results_match_holds_signalling_nans_to_their_bits() {
        use crate::testing::results_match;
        let one = |bits: u64| {
            vec![Buffer::from_imms(Scalar::F32, &[Imm::from_bits(Scalar::F32, bits)]).unwrap()]
        };
        let (s, q, n) = (one(0x7f80_0001), one(0x7fc0_0001), vec![Buffer::from_slice(&[f32::NAN])]);
        assert!(results_match(&s, &q).is_err());
        assert!(results_match(&s, &s).is_ok());
        // A quiet NaN is an arithmetic result: any NaN meets it.
        assert!(results_match(&q, &n).is_ok());
        assert!(results_match(&n, &q).is_ok());
        assert!(bits_match(&q, &s).unwrap_err().contains("0x7fc00001"));
    }
}
