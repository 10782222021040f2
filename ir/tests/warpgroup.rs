//! The warpgroup (sm_90) matrix operations: text round trips, verifier rules, and the
//! interpreter running a producer/consumer kernel (tma_load + barrier objects + wgmma)
//! against a product computed here.

use half::{bf16, f16};
use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{check_source, parse_module, verify_module};

/// Exact small values (multiples of 1/8 in [-2, 2)), deterministic by index.
fn vals(n: usize, seed: u32) -> Vec<f32> {
    (0..n as u32).map(|i| ((i * 37 + seed * 11 + i / 7) % 32) as f32 / 8.0 - 2.0).collect()
}

fn run_kernel(src: &str, local: u32, args: &[Arg], bufs: &mut [Buffer]) -> Result<(), String> {
    let m = check_source("t.kir", src).map_err(|d| format!("{d:?}"))?;
    let k = &m.kernels[0];
    run(k, &NdRange::new(&[local]).with_local(&[local]), args, bufs).map_err(|e| e.to_string())
}

/// One 64 x `n` tile of `D = A·B^T` over K = 64 (A `m x 64`, B `n x 64`, both row-major,
/// `m <= 64` rows present: the rest zero-filled by the copy): warpgroup 0 copies with
/// `tma_load` (one work-item), warpgroup 1 waits on the barrier, multiplies in four k-steps
/// and stores its elements with `frag_elem`.
fn gemm_src(elem: &str, m: u32, n: u32, sw: &str, order: &str) -> String {
    let row = match sw {
        "sw128" => 64,
        "sw64" => 32,
        _ => 16,
    };
    let steps = 64 / row;
    let box_b = n * row;
    let bytes = (64 + n) * 64 * 2;
    // The box's rows (one per M or N row) hold `row` k elements: A and B each come in
    // `steps` boxes along k, each box's tile `64 x row` (A) or `n x row` (B).
    let kt = 16;
    let elems: Vec<String> = (0..n / 2)
        .map(|i| {
            format!(
                "    let v{i}: f32 = frag_elem(acc, {i});
    let r{i}: u32 = 16u32 * (t >> 5u32) + ((t & 31u32) >> 2u32) + 8u32 * {hi}u32;
    if r{i} < {m}u32 {{ d[r{i} * {n}u32 + {c}u32 + 2u32 * (t & 3u32)] = v{i}; }}
",
                hi = (i / 2) % 2,
                c = 8 * (i / 4) + i % 2
            )
        })
        .collect();
    let waits = if order == "expect_first" {
        "mbar_expect_tx(bar, 0u32, BYTES);\n      for s in 0u32 .. STEPS { tma_load(a_s, s * 64u32 * ROW, a, 64u32, M, 64u32, s * ROW, 0u32, bar, 0u32, ROW, 64, SW); tma_load(b_s, s * BOXB, b, 64u32, N, 64u32, s * ROW, 0u32, bar, 0u32, ROW, N, SW); }"
    } else {
        "for s in 0u32 .. STEPS { tma_load(a_s, s * 64u32 * ROW, a, 64u32, M, 64u32, s * ROW, 0u32, bar, 0u32, ROW, 64, SW); tma_load(b_s, s * BOXB, b, 64u32, N, 64u32, s * ROW, 0u32, bar, 0u32, ROW, N, SW); }\n      mbar_expect_tx(bar, 0u32, BYTES);"
    };
    let src = format!(
        "kernel k(a: ptr<global, {elem}>, b: ptr<global, {elem}>, d: ptr<global, f32>) {{
  local a_s: {elem}[4096];
  local b_s: {elem}[{bsz}];
  local bar: u64[1];
  let lin: u32 = local_id(0);
  if lin == 0u32 {{ mbar_init(bar, 0u32, 1u32); }}
  barrier(local);
  if lin < 128u32 {{
    if lin == 0u32 {{
      {waits}
    }}
  }} else {{
    let t: u32 = lin - 128u32;
    let z: frag<acc, m64n{n}k16, f32> = frag_fill(0.0f32);
    var acc: frag<acc, m64n{n}k16, f32> = z;
    mbar_wait(bar, 0u32, 0u32);
    wgmma_fence();
    for k in 0u32 .. 4u32 {{
      let s: u32 = k * 16u32 / ROW;
      let kk: u32 = k * 16u32 % ROW;
      wgmma(acc, a_s, s * 64u32 * ROW + kk, b_s, s * BOXB + kk, SW, SW);
    }}
    wgmma_commit();
    wgmma_wait(0);
{body}  }}
}}",
        bsz = n * 64,
        body = elems.concat()
    );
    let _ = kt;
    src.replace("STEPS", &format!("{steps}u32"))
        .replace("BOXB", &format!("{box_b}u32"))
        .replace("BYTES", &format!("{bytes}u32"))
        .replace("ROW, 64, SW", &format!("{row}, 64, {sw}"))
        .replace("ROW, N, SW", &format!("{row}, {n}, {sw}"))
        .replace("SW, SW", &format!("{sw}, {sw}"))
        .replace("ROW", &format!("{row}u32"))
        .replace(", M,", &format!(", {m}u32,"))
        .replace(", N,", &format!(", {n}u32,"))
}

fn check_gemm(elem: &str, m: u32, n: u32, sw: &str, order: &str) {
    let (mu, nu) = (m as usize, n as usize);
    let a = vals(mu * 64, 1);
    let b = vals(nu * 64, 2);
    let to = |v: &[f32]| -> Buffer {
        if elem == "f16" {
            Buffer::from_slice(&v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>())
        } else {
            Buffer::from_slice(&v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>())
        }
    };
    let src = gemm_src(elem, m, n, sw, order);
    let mut bufs = vec![to(&a), to(&b), Buffer::from_slice(&vec![f32::NAN; mu * nu])];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
    run_kernel(&src, 256, &args, &mut bufs).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let got = bufs[2].to_vec::<f32>().unwrap();
    for i in 0..mu {
        for j in 0..nu {
            let mut s = 0.0f32;
            for k in 0..64 {
                s += a[i * 64 + k] * b[j * 64 + k];
            }
            assert_eq!(got[i * nu + j].to_bits(), s.to_bits(), "{elem} {sw} d[{i}][{j}]");
        }
    }
}

#[test]
fn producer_consumer_tile_product_matches_the_sequential_sum() {
    check_gemm("bf16", 64, 32, "sw128", "expect_first");
    check_gemm("f16", 64, 16, "sw64", "copies_first");
    check_gemm("bf16", 64, 8, "sw32", "expect_first");
}

/// One 64 x `n` tile of `D = A·B` over K = 64 with B stored K x N (N-contiguous) and A stored
/// K x M if `a_mn`, else M x K: the N-contiguous (and M-contiguous) factors are copied as
/// boxes of 64 k rows of `E = S / 2` elements, `64 S` bytes apart, and read MN-major
/// (`<sw>_mn<64 S>`); a K-major A as in [`gemm_src`].
fn mn_src(elem: &str, m: u32, n: u32, sw: &str, a_mn: bool) -> String {
    let e = match sw {
        "sw128" => 64,
        "sw64" => 32,
        _ => 16,
    };
    let l = 64 * e * 2;
    let lay = format!("{sw}_mn{l}");
    let nb = n.div_ceil(e);
    let bytes = 64 * 64 * 2 + nb * e * 64 * 2;
    let mut copies = String::new();
    let (a_lay, a_step) = if a_mn {
        for j in 0..64 / e {
            copies.push_str(&format!(
                "tma_load(a_s, {}u32, a, {m}u32, 64u32, {m}u32, {}u32, 0u32, bar, 0u32, {e}, 64, {sw}); ",
                j * 64 * e,
                j * e
            ));
        }
        (lay.clone(), format!("k * {}u32", 16 * e))
    } else {
        for s in 0..64 / e {
            copies.push_str(&format!(
                "tma_load(a_s, {}u32, a, 64u32, {m}u32, 64u32, {}u32, 0u32, bar, 0u32, {e}, 64, {sw}); ",
                s * 64 * e,
                s * e
            ));
        }
        (sw.to_string(), format!("k * 16u32 / {e}u32 * {}u32 + k * 16u32 % {e}u32", 64 * e))
    };
    for j in 0..nb {
        copies.push_str(&format!(
            "tma_load(b_s, {}u32, b, {n}u32, 64u32, {n}u32, {}u32, 0u32, bar, 0u32, {e}, 64, {sw}); ",
            j * 64 * e,
            j * e
        ));
    }
    let elems: String = (0..n / 2)
        .map(|i| {
            format!(
                "    let v{i}: f32 = frag_elem(acc, {i});
    let r{i}: u32 = 16u32 * (t >> 5u32) + ((t & 31u32) >> 2u32) + 8u32 * {hi}u32;
    if r{i} < {m}u32 {{ d[r{i} * {n}u32 + {c}u32 + 2u32 * (t & 3u32)] = v{i}; }}
",
                hi = (i / 2) % 2,
                c = 8 * (i / 4) + i % 2
            )
        })
        .collect();
    format!(
        "kernel k(a: ptr<global, {elem}>, b: ptr<global, {elem}>, d: ptr<global, f32>) {{
  local a_s: {elem}[4096];
  local b_s: {elem}[{bsz}];
  local bar: u64[1];
  let lin: u32 = local_id(0);
  if lin == 0u32 {{ mbar_init(bar, 0u32, 1u32); }}
  barrier(local);
  if lin < 128u32 {{
    if lin == 0u32 {{ mbar_expect_tx(bar, 0u32, {bytes}u32); {copies}}}
  }} else {{
    let t: u32 = lin - 128u32;
    let z: frag<acc, m64n{n}k16, f32> = frag_fill(0.0f32);
    var acc: frag<acc, m64n{n}k16, f32> = z;
    mbar_wait(bar, 0u32, 0u32);
    wgmma_fence();
    for k in 0u32 .. 4u32 {{
      wgmma(acc, a_s, {a_step}, b_s, k * {b_step}u32, {a_lay}, {lay});
    }}
    wgmma_commit();
    wgmma_wait(0);
{elems}  }}
}}",
        bsz = nb * e * 64,
        b_step = 16 * e,
    )
}

/// Runs [`mn_src`] and compares every element with the sequential sum, bit for bit.
fn check_mn(elem: &str, m: u32, n: u32, sw: &str, a_mn: bool) {
    let (mu, nu) = (m as usize, n as usize);
    let a = vals(mu * 64, 3); // A[i][k]
    let b = vals(nu * 64, 4); // B[k][j], stored K x N
    let a_st: Vec<f32> =
        if a_mn { (0..mu * 64).map(|x| a[(x % mu) * 64 + x / mu]).collect() } else { a.clone() };
    let to = |v: &[f32]| -> Buffer {
        if elem == "f16" {
            Buffer::from_slice(&v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>())
        } else {
            Buffer::from_slice(&v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>())
        }
    };
    let src = mn_src(elem, m, n, sw, a_mn);
    let mut bufs = vec![to(&a_st), to(&b), Buffer::from_slice(&vec![f32::NAN; mu * nu])];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
    run_kernel(&src, 256, &args, &mut bufs).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let got = bufs[2].to_vec::<f32>().unwrap();
    for i in 0..mu {
        for j in 0..nu {
            let mut s = 0.0f32;
            for k in 0..64 {
                s += a[i * 64 + k] * b[k * nu + j];
            }
            assert_eq!(
                got[i * nu + j].to_bits(),
                s.to_bits(),
                "{elem} {sw} a_mn {a_mn} d[{i}][{j}]"
            );
        }
    }
}

#[test]
fn mn_major_factors_match_the_sequential_sum() {
    // Both factors MN-major (the transposed layouts), or B alone; every swizzle; B spanning
    // one or several MN groups; fewer M rows than the tile (zero-filled).
    check_mn("bf16", 64, 64, "sw128", true);
    check_mn("f16", 64, 128, "sw128", false);
    check_mn("f16", 56, 48, "sw64", true);
    check_mn("bf16", 64, 40, "sw32", true);
}

#[test]
fn rows_past_the_tensor_are_zero_filled() {
    // 50 rows of A: the box's last 14 rows are zeros, and the kernel stores only 50 rows.
    check_gemm("f16", 50, 24, "sw128", "expect_first");
}

#[test]
fn text_round_trips() {
    let src = gemm_src("bf16", 64, 32, "sw128", "expect_first");
    let m = parse_module(&src).unwrap();
    verify_module(&m).unwrap();
    let text = m.to_string();
    assert!(text.contains("wgmma(acc, a_s,") && text.contains("sw128, sw128)"), "{text}");
    assert!(text.contains("frag<acc, m64n32k16, f32>"), "{text}");
    assert_eq!(parse_module(&text).unwrap(), m);
    assert_eq!(parse_module(&text).unwrap().to_string(), text);
    let m = parse_module(&mn_src("f16", 64, 64, "sw64", true)).unwrap();
    verify_module(&m).unwrap();
    let text = m.to_string();
    assert!(text.contains("sw64_mn4096, sw64_mn4096)"), "{text}");
    assert_eq!(parse_module(&text).unwrap(), m);
}

fn verify_error(body: &str) -> String {
    let src = format!(
        "kernel k(g: ptr<global, bf16>, h: ptr<global, f16>) {{
  local a: bf16[4096];
  local bar: u64[2];
  local w: u32[2];
{body}
}}"
    );
    match check_source("t.kir", &src) {
        Ok(_) => panic!("accepted:\n{src}"),
        Err(d) => format!("{d:?}"),
    }
}

#[test]
fn verifier_rules_are_located() {
    let acc = "  let z: frag<acc, m64n64k16, f32> = frag_fill(0.0f32);\n  var acc: frag<acc, m64n64k16, f32> = z;\n";
    let cases = [
        (format!("{acc}  wgmma(acc, a, 0u32, a, 0u32, noswizzle, sw128);"), "are swizzled"),
        (format!("{acc}  wgmma(acc, a, 0u32, a, 0u32, sw128, noswizzle_mn1024);"), "are swizzled"),
        (format!("{acc}  wgmma(acc, a, 0u32, a, 0u32, sw128, sw128_mn512);"), "multiple of the 1024-byte"),
        (format!("{acc}  wgmma(acc, a, 0u32, a, 0u32, sw32_mn0, sw128);"), "positive multiple"),
        (
            "  let acc: frag<acc, m64n64k16, f32> = frag_fill(0.0f32);\n  wgmma(acc, a, 0u32, a, 0u32, sw128, sw128);".into(),
            "must be a `var`",
        ),
        (format!("{acc}  let v: f32 = frag_elem(acc, 32);"), "holds 32 elements"),
        ("  let f: frag<a, m64n64k16, bf16> = frag_fill(0.0bf16);".into(), "only `acc` fragments"),
        ("  let f: frag<acc, m64n12k16, f32> = frag_fill(0.0f32);".into(), "matrix shape"),
        ("  mbar_init(w, 0u32, 1u32);".into(), "u64 elements"),
        (
            "  tma_load(a, 0u32, h, 64u32, 64u32, 64u32, 0u32, 0u32, bar, 0u32, 64, 64, sw128);".into(),
            "from f16 elements to bf16",
        ),
        (
            "  tma_load(a, 0u32, g, 64u32, 64u32, 64u32, 0u32, 0u32, bar, 0u32, 32, 64, sw128);".into(),
            "exactly 128 bytes",
        ),
        (format!("{acc}  frag_store(w, 0u32, 8u32, row, acc);"), "warpgroup accumulator"),
    ];
    for (body, want) in cases {
        let e = verify_error(&body);
        assert!(e.contains(want), "{body}: {e}");
        assert!(e.contains("file: \"t.kir\", line: "), "located: {e}");
    }
}

#[test]
fn run_time_rules() {
    // A wait for a phase nothing completes is a deadlock, reported.
    let src = "kernel k(d: ptr<global, f32>) {
  local bar: u64[1];
  if local_id(0) == 0u32 { mbar_init(bar, 0u32, 2u32); }
  barrier(local);
  if local_id(0) == 0u32 { mbar_arrive(bar, 0u32); }
  mbar_wait(bar, 0u32, 0u32);
  d[local_id(0)] = 1.0f32;
}";
    let mut bufs = vec![Buffer::from_slice(&[0.0f32; 128])];
    let e = run_kernel(src, 128, &[Arg::Buffer(0)], &mut bufs).unwrap_err();
    assert!(e.contains("deadlock"), "{e}");
    // With the second arrival the phase completes and every work-item passes.
    let ok = src
        .replace("mbar_arrive(bar, 0u32); }", "mbar_arrive(bar, 0u32); mbar_arrive(bar, 0u32); }");
    let mut bufs = vec![Buffer::from_slice(&[0.0f32; 128])];
    run_kernel(&ok, 128, &[Arg::Buffer(0)], &mut bufs).unwrap();
    assert!(bufs[0].to_vec::<f32>().unwrap().iter().all(|&x| x == 1.0));
    // An uninitialized barrier object.
    let bad = src.replace("mbar_init(bar, 0u32, 2u32);", "");
    let mut bufs = vec![Buffer::from_slice(&[0.0f32; 128])];
    let e = run_kernel(&bad, 128, &[Arg::Buffer(0)], &mut bufs).unwrap_err();
    assert!(e.contains("never initialized"), "{e}");
    // Warpgroup operations need whole warpgroups.
    let wg = "kernel k(d: ptr<global, f32>) { wgmma_fence(); }";
    let mut bufs = vec![Buffer::from_slice(&[0.0f32; 64])];
    let e = run_kernel(wg, 64, &[Arg::Buffer(0)], &mut bufs).unwrap_err();
    assert!(e.contains("whole warpgroups"), "{e}");
    // A wgmma factor off its swizzle row.
    let src =
        gemm_src("bf16", 64, 32, "sw128", "expect_first").replace("+ kk, b_s", "+ kk + 8u32, b_s");
    let mut bufs = vec![
        Buffer::from_slice(&vec![bf16::ZERO; 64 * 64]),
        Buffer::from_slice(&vec![bf16::ZERO; 32 * 64]),
        Buffer::from_slice(&vec![0.0f32; 64 * 32]),
    ];
    let e = run_kernel(&src, 256, &[Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)], &mut bufs)
        .unwrap_err();
    assert!(e.contains("16-byte boundary"), "{e}");
    // An MN-major factor off a swizzle repeat.
    let src = mn_src("bf16", 64, 64, "sw128", true)
        .replace("b_s, k * 1024u32", "b_s, k * 1024u32 + 64u32");
    let mut bufs = vec![
        Buffer::from_slice(&vec![bf16::ZERO; 64 * 64]),
        Buffer::from_slice(&vec![bf16::ZERO; 64 * 64]),
        Buffer::from_slice(&vec![0.0f32; 64 * 64]),
    ];
    let e = run_kernel(&src, 256, &[Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)], &mut bufs)
        .unwrap_err();
    assert!(e.contains("MN-major") && e.contains("1024-byte swizzle-repeat boundary"), "{e}");
}

#[test]
fn setmaxnreg_round_trips_is_checked_and_changes_no_value() {
    // Text form, parsed back; no effect on the result (the producer/consumer kernel with the
    // budgets set equals the one without).
    let src = gemm_src("bf16", 64, 32, "sw128", "expect_first");
    let with = src
        .replacen("if lin < 128u32 {", "if lin < 128u32 {\n    setmaxnreg_dec(40);", 1)
        .replacen("} else {", "} else {\n    setmaxnreg_inc(232);", 1);
    assert_ne!(with, src, "the kernel has a producer branch");
    let m = parse_module(&with).unwrap();
    verify_module(&m).unwrap();
    let text = m.to_string();
    assert!(
        text.contains("setmaxnreg_dec(40);") && text.contains("setmaxnreg_inc(232);"),
        "{text}"
    );
    assert_eq!(parse_module(&text).unwrap(), m);
    let (a, b) = (vals(64 * 64, 1), vals(32 * 64, 2));
    let run_it = |s: &str| {
        let mut bufs = vec![
            Buffer::from_slice(&a.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>()),
            Buffer::from_slice(&b.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>()),
            Buffer::from_slice(&vec![f32::NAN; 64 * 32]),
        ];
        run_kernel(s, 256, &[Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)], &mut bufs)
            .map(|()| bufs[2].to_vec::<f32>().unwrap())
    };
    let want = run_it(&src).unwrap();
    let got = run_it(&with).unwrap();
    assert!(want.iter().zip(&got).all(|(x, y)| x.to_bits() == y.to_bits()));
    // Budgets: multiples of 8 from 24 to 256.
    for bad in ["setmaxnreg_dec(16);", "setmaxnreg_inc(236);", "setmaxnreg_inc(264);"] {
        let e = verify_error(&format!("  {bad}"));
        assert!(e.contains("a multiple of 8 from 24 to 256"), "{bad}: {e}");
    }
    // Every work-item of a warpgroup executes the same `setmaxnreg` (the same statement,
    // the same budget): one sub-group setting another budget than the rest of its warpgroup
    // is refused by the interpreter.
    let split = "kernel k(d: ptr<global, f32>) {
  if local_id(0) < 32u32 { setmaxnreg_dec(40); } else { setmaxnreg_dec(48); }
  d[local_id(0)] = 1.0f32;
}";
    let mut bufs = vec![Buffer::from_slice(&[0.0f32; 128])];
    let e = run_kernel(split, 128, &[Arg::Buffer(0)], &mut bufs).unwrap_err();
    assert!(e.contains("not executed uniformly by warpgroup 0"), "{e}");
    let whole = split.replace(
        "if local_id(0) < 32u32 { setmaxnreg_dec(40); } else { setmaxnreg_dec(48); }",
        "setmaxnreg_dec(40);",
    );
    assert_ne!(whole, split);
    let mut bufs = vec![Buffer::from_slice(&[0.0f32; 128])];
    run_kernel(&whole, 128, &[Arg::Buffer(0)], &mut bufs).unwrap();
}
