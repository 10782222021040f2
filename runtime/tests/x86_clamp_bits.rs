//! Issue 24's third-set classes on the 8-lane code, against the interpreter and the scalar
//! code, bit for bit and faults included: f32 `min`/`max` with a constant bound (one
//! `vminps`/`vmaxps` where the bound is not a NaN nor the zero the rule would not pick,
//! `ops.rs`'s `const_bound`), NaNs and signed zeros in every position; u32 `==`/`!=`
//! (no sign flips) in branchy bit twiddling; gathers with clamped indices, which load the
//! batches whose indices are consecutive with one masked load (`clamped.rs`): edge
//! batches, odd sizes, guards, bounds that fault; `let` copies naming the copied place.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};

/// f32 values for `min`/`max`: NaNs (quiet, signalling, negative), signed zeros,
/// infinities, the bounds the tests use and their neighbours, ordinary values.
fn specials() -> Vec<f32> {
    let mut v = vec![
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xffc0_1234),
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1.0,
        -1.0,
        1.0f32.next_up(),
        1.0f32.next_down(),
        -2.5,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE / 2.0,
        f32::MAX,
    ];
    for i in 0..61 {
        v.push(i as f32 * 0.173 - 4.0);
    }
    v
}

fn f32_range(n: usize) -> NdRange {
    NdRange::new(&[n.next_multiple_of(16) as u32]).with_local(&[16])
}

#[test]
fn min_and_max_with_a_constant_match_the_interpreter_bit_for_bit() {
    let bounds = ["1.0", "-2.5", "0.0", "-0.0", "inf", "-inf", "nan", "3.0e38"];
    let x = specials();
    let n = x.len();
    for c in bounds {
        let lit = match c {
            "inf" => "(1.0 / 0.0)".to_string(),
            "-inf" => "(-1.0 / 0.0)".to_string(),
            "nan" => "(0.0 / 0.0)".to_string(),
            _ => c.to_string(),
        };
        for (f, order) in [("min", 0), ("max", 0), ("min", 1), ("max", 1)] {
            let call = if order == 0 { format!("{f}(v, {lit})") } else { format!("{f}({lit}, v)") };
            let src = format!(
                "kernel k(x: ptr<global, f32>, y: ptr<global, f32>, n: u32) {{
  let i: u32 = global_id(0);
  if i < n {{
    let v: f32 = x[i];
    y[i] = {call};
  }}
}}"
            );
            let k = kernel(&src);
            let bufs = vec![Buffer::from_slice(&x), Buffer::from_slice(&vec![0f32; n])];
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n as u32)];
            agree(&k, &f32_range(n), &args, &bufs, &call);
        }
    }
}

#[test]
fn a_clamp_to_a_constant_is_one_instruction_without_nan_fixups() {
    if !avx2() {
        kiln_ir::testing::skip("no AVX2: no 8-lane code");
        return;
    }
    // premul's form: a vector min with a splatted 1.0 (scalarized by -O).
    let k = kernel(
        "kernel premul(px: ptr<global, f32>, out: ptr<global, f32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let p: f32x4 = vload4(px, 4 * i);
    let a: f32 = extract(p, 3);
    let q: f32x4 = p * f32x4(a, a, a, 1.0);
    vstore(out, 4 * i, min(q, f32x4(1.0)));
  }
}",
    );
    let lst = vector_listing(&k);
    assert!(!lst.iter().any(|l| l.starts_with("vcmpunordps")), "{}", lst.join("\n"));
    let mut px = specials();
    px.truncate(76);
    let n = px.len() / 4;
    let bufs = vec![Buffer::from_slice(&px), Buffer::from_slice(&vec![0f32; 4 * n])];
    for m in [n, n - 1, 1] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(m as u32)];
        agree(&k, &f32_range(n), &args, &bufs, &format!("premul n = {m}"));
    }
    // A +0.0 bound of `min` keeps the NaN fix-ups' zero rule (min(-0.0, +0.0) is -0.0).
    let k = kernel(
        "kernel k(x: ptr<global, f32>, y: ptr<global, f32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    y[i] = min(x[i], 0.0);
  }
}",
    );
    assert!(vector_listing(&k).iter().any(|l| l.starts_with("vcmpeqps")));
}

/// u32 keys with every high-bit pattern the binary searches test: zero, single bits,
/// the sign bit, all ones, and mixed values.
fn keys(n: usize) -> Vec<u32> {
    let mut s = 0x2545_f491u32;
    (0..n as u32)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            match i % 8 {
                0 => 0,
                1 => 1 << (i % 32),
                2 => 0x8000_0000,
                3 => u32::MAX,
                4 => s >> (i % 32),
                5 => 0x8000_0000 ^ (i % 5),
                _ => s,
            }
        })
        .collect()
}

fn u32_case(src: &str, n: usize, outs: usize) {
    let k = kernel(src);
    let x = keys(n);
    let mut bufs = vec![Buffer::from_slice(&x)];
    for _ in 0..outs {
        bufs.push(Buffer::from_slice(&vec![0u32; n]));
    }
    let range = NdRange::new(&[n.next_multiple_of(32) as u32]).with_local(&[32]);
    for m in [n, n - 3, 5] {
        let mut args: Vec<Arg> = (0..=outs).map(Arg::Buffer).collect();
        args.push(Arg::scalar(m as u32));
        agree(&k, &range, &args, &bufs, &format!("n = {m}"));
    }
}

#[test]
fn leading_zeros_by_binary_search_match_the_interpreter() {
    // bitrev's second half: five data-dependent ifs on `(x & mask) == 0`, then `k == 0`.
    u32_case(
        "kernel clz(keys: ptr<global, u32>, out: ptr<global, u32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let k: u32 = keys[i];
    var x: u32 = k;
    var z: u32 = 0;
    if (x & 0xffff0000) == 0 {
      z = z + 16;
      x = x << 16;
    }
    if (x & 0xff000000) == 0 {
      z = z + 8;
      x = x << 8;
    }
    if (x & 0xf0000000) == 0 {
      z = z + 4;
      x = x << 4;
    }
    if (x & 0xc0000000) == 0 {
      z = z + 2;
      x = x << 2;
    }
    if (x & 0x80000000) == 0 {
      z = z + 1;
    }
    if k == 0 {
      z = 32;
    }
    out[i] = z;
  }
}",
        301,
        1,
    );
}

#[test]
fn u32_equalities_near_the_sign_bit_match_the_interpreter() {
    // Trailing zeros by a search from the low end, a parity fold, equality and inequality
    // of values that differ only above or at the sign bit.
    u32_case(
        "kernel bits(keys: ptr<global, u32>, tz: ptr<global, u32>, eq: ptr<global, u32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let k: u32 = keys[i];
    var x: u32 = k;
    var z: u32 = 0;
    if (x & 0xffff) == 0 {
      z = z + 16;
      x = x >> 16;
    }
    if (x & 0xff) == 0 {
      z = z + 8;
      x = x >> 8;
    }
    if (x & 0xf) == 0 {
      z = z + 4;
      x = x >> 4;
    }
    if (x & 3) == 0 {
      z = z + 2;
      x = x >> 2;
    }
    if (x & 1) == 0 {
      z = z + 1;
    }
    tz[i] = z;
    var p: u32 = k ^ k >> 16;
    p = p ^ p >> 8;
    p = p ^ p >> 4;
    var e: u32 = p & 1;
    if k != 0x80000000 {
      e = e + 2;
    }
    if (k ^ 0x80000000) == (k | 0x80000000) {
      e = e + 4;
    }
    eq[i] = e;
  }
}",
        333,
        2,
    );
}

const BLUR3: &str = "kernel blur3(src: ptr<global, f32>, dst: ptr<global, f32>, w: u32, h: u32) {
  let x: u32 = global_id(0);
  let y: u32 = global_id(1);
  if x < w && y < h {
    var acc: f32 = 0.0;
    for dy: i32 in -1 .. 2 {
      let yy: u32 = min(max(y as i32 + dy, 0), h as i32 - 1) as u32;
      for dx: i32 in -1 .. 2 {
        let xx: u32 = min(max(x as i32 + dx, 0), w as i32 - 1) as u32;
        acc = acc + src[yy * w + xx];
      }
    }
    dst[y * w + x] = acc * 0.11111111;
  }
}";

#[test]
fn a_clamped_blur_matches_the_interpreter_at_odd_sizes() {
    let k = kernel(BLUR3);
    if avx2() {
        let lst = vector_listing(&k);
        assert!(lst.iter().any(|l| l.starts_with("vgatherdps")), "the edge batches' gather");
        assert!(lst.iter().any(|l| l.starts_with("vmaskmovps ymm")), "the inner batches' load");
    }
    for (w, h) in [(1usize, 1usize), (2, 3), (7, 5), (8, 2), (9, 4), (17, 3), (33, 6), (70, 3)] {
        let src: Vec<f32> = (0..w * h).map(|v| (v as f32 * 0.37).sin()).collect();
        let bufs = vec![Buffer::from_slice(&src), Buffer::from_slice(&vec![0f32; w * h])];
        let range = NdRange::new(&[w.next_multiple_of(8) as u32, h as u32]).with_local(&[8, 1]);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w as u32), Arg::scalar(h as u32)];
        agree(&k, &range, &args, &bufs, &format!("{w}x{h}"));
    }
    // A source shorter than the image: the first tap out of bounds faults, in the
    // interpreter's order, whichever batch (inner or edge) reaches it.
    for (w, h, len) in [(33usize, 6usize, 33 * 5 + 20), (17, 3, 17 * 2 + 1), (9, 4, 8)] {
        let src: Vec<f32> = (0..len).map(|v| v as f32).collect();
        let bufs = vec![Buffer::from_slice(&src), Buffer::from_slice(&vec![0f32; w * h])];
        let range = NdRange::new(&[w.next_multiple_of(8) as u32, h as u32]).with_local(&[8, 1]);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w as u32), Arg::scalar(h as u32)];
        agree(&k, &range, &args, &bufs, &format!("{w}x{h}, {len} elements"));
    }
}

#[test]
fn clamped_one_dimensional_stencils_match_the_interpreter() {
    // A 5-tap smoothing with the clamp to parameters (which may lie outside the data: the
    // consecutive batches then fault like the gather), and a mirrored index that is
    // consecutive nowhere (`n - 1 - i`, clamped): the test fails and the gather runs.
    let k = kernel(
        "kernel smooth(x: ptr<global, f32>, y: ptr<global, f32>, n: u32, lo: i32, hi: i32) {
  let i: u32 = global_id(0);
  if i < n {
    var s: f32 = 0.0;
    for d: i32 in -2 .. 3 {
      s = s + x[min(max(i as i32 + d, lo), hi) as u32];
    }
    y[i] = s + x[min(max(n as i32 - 1 - i as i32, lo), hi) as u32];
  }
}",
    );
    for (n, lo, hi, len) in [
        (100usize, 0i32, 99i32, 100usize),
        (37, 0, 36, 37),
        (37, 3, 20, 37),
        (64, 0, 63, 64),
        (7, 0, 6, 7),
        (50, 0, 60, 55),
        (50, -1, 49, 50),
        (40, 10, 5, 40),
    ] {
        let x: Vec<f32> = (0..len).map(|v| v as f32 * 0.5 - 3.0).collect();
        let bufs = vec![Buffer::from_slice(&x), Buffer::from_slice(&vec![0f32; n])];
        let range = NdRange::new(&[n.next_multiple_of(16) as u32]).with_local(&[16]);
        let args = [
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::scalar(n as u32),
            Arg::scalar(lo),
            Arg::scalar(hi),
        ];
        agree(&k, &range, &args, &bufs, &format!("n = {n}, [{lo}, {hi}], {len} elements"));
    }
}

#[test]
fn clamped_integer_gathers_under_a_guard_match_the_interpreter() {
    // i32 elements, a clamp of a 2-D index to a rectangle, half the lanes off by a guard.
    let k = kernel(
        "kernel crop(src: ptr<global, i32>, dst: ptr<global, i32>, w: u32, h: u32, x0: i32, y0: i32) {
  let x: u32 = global_id(0);
  let y: u32 = global_id(1);
  if x < w && y < h && (x & 4) == 0 {
    let sx: u32 = min(max(x as i32 + x0, 0), w as i32 - 1) as u32;
    let sy: u32 = min(max(y as i32 + y0, 0), h as i32 - 1) as u32;
    dst[y * w + x] = src[sy * w + sx] * 3 + 1;
  }
}",
    );
    for (w, h, x0, y0) in [(19usize, 5usize, 3i32, -1i32), (16, 4, -9, 2), (40, 3, 0, 0)] {
        let src: Vec<i32> = (0..(w * h) as i32).map(|v| v * 7 - 100).collect();
        let bufs = vec![Buffer::from_slice(&src), Buffer::from_slice(&vec![0i32; w * h])];
        let range = NdRange::new(&[w.next_multiple_of(8) as u32, h as u32]).with_local(&[8, 1]);
        let args = [
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::scalar(w as u32),
            Arg::scalar(h as u32),
            Arg::scalar(x0),
            Arg::scalar(y0),
        ];
        agree(&k, &range, &args, &bufs, &format!("{w}x{h} at {x0}, {y0}"));
    }
}

#[test]
fn copies_of_lets_read_the_value_copied_and_copies_of_vars_keep_theirs() {
    // `let b = a` names `a`'s place (`stmt.rs`): right for `let`s and a loop's counter,
    // which do not change in the copy's scope; a copy of a `var` must keep the value it
    // had when copied.
    let k = kernel(
        "kernel k(x: ptr<global, f32>, y: ptr<global, f32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let a: f32 = x[i];
    var v: f32 = a * 2.0;
    let c: f32 = v;
    v = v + 1.0;
    var s: f32 = 0.0;
    for j: u32 in 0 .. 3 {
      let jc: u32 = j;
      let b: f32 = a;
      if x[i] > 0.0 {
        let bb: f32 = b;
        s = s + bb * jc as f32;
      }
    }
    y[i] = s + c * 10.0 + v;
  }
}",
    );
    let x = specials();
    let n = x.len();
    let bufs = vec![Buffer::from_slice(&x), Buffer::from_slice(&vec![0f32; n])];
    for m in [n, n - 5] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(m as u32)];
        agree(&k, &f32_range(n), &args, &bufs, &format!("n = {m}"));
    }
}
