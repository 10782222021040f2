//! Matrix operations on the CUDA device against the interpreter: `mma.sync` products with
//! fragments loaded from global memory (every shape, element type and layout, several warps
//! each on its own tile) and from local memory through a `copy_async` pipeline and
//! `ldmatrix`. Results must lie within the documented tolerance
//! (`kiln_ir::matrix::MMA_TOLERANCE` times the sum of absolute products, per K step) of the
//! interpreter's; values whose sums are exact in f32 must match bit for bit, so a lane
//! holding the wrong element shows. Without a CUDA driver and device the tests run the
//! interpreter's half only and skip the device's with a message, unless
//! `KILN_REQUIRE_CUDA=1`, when they fail.

use half::{bf16, f16};
use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::matrix::{MatShape, MMA_TOLERANCE};
use kiln_ir::{parse_module, Kernel, Scalar};
use kiln_runtime::device::cuda::CudaDevice;
use kiln_runtime::{Device, DeviceError};

fn device() -> Option<CudaDevice> {
    let found = CudaDevice::open()
        .inspect_err(|e| assert!(matches!(e, DeviceError::Unavailable { .. }), "{e}"));
    let d = kiln_ir::testing::require("KILN_REQUIRE_CUDA", found)?;
    eprintln!("CUDA device: {} (sm_{})", d.name(), d.sm());
    Some(d)
}

/// Deterministic values: `exact` ones are multiples of 1/8 in [-2, 2) (every sum of 16
/// products is exact in f32, whatever the order); others are spread over [-1, 1).
fn values(n: usize, seed: u32, exact: bool) -> Vec<f32> {
    (0..n as u32)
        .map(|i| {
            let h = i.wrapping_mul(2654435761).wrapping_add(seed.wrapping_mul(40503)) >> 7;
            if exact {
                (h % 32) as f32 / 8.0 - 2.0
            } else {
                (h % 100_000) as f32 / 50_000.0 - 1.0
            }
        })
        .collect()
}

/// A buffer of `elem` holding `v` rounded to it, and the rounded values.
fn half_buffer(v: &[f32], elem: &str) -> (Buffer, Vec<f32>) {
    if elem == "f16" {
        let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
        let back = h.iter().map(|x| x.to_f32()).collect();
        (Buffer::from_slice(&h), back)
    } else {
        let h: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
        let back = h.iter().map(|x| x.to_f32()).collect();
        (Buffer::from_slice(&h), back)
    }
}

/// Runs `k` on the interpreter and on `dev`; output buffer `out` must agree element by
/// element within `bound[i]` (0 means bit for bit).
#[allow(clippy::too_many_arguments)]
fn compare(
    dev: Option<&CudaDevice>,
    k: &Kernel,
    range: &NdRange,
    args: &[Arg],
    bufs: Vec<Buffer>,
    out: usize,
    bound: &[f64],
    tag: &str,
) {
    let mut want = bufs.clone();
    run(k, range, args, &mut want).unwrap_or_else(|e| panic!("{tag}: {e}"));
    // The interpreter's half runs everywhere; the device's only where there is one.
    let Some(dev) = dev else { return };
    let mut got = bufs;
    dev.build_and_run(k, range, args, &mut got).unwrap_or_else(|e| panic!("{tag}: {e}"));
    let (w, g) = (want[out].to_vec::<f32>().unwrap(), got[out].to_vec::<f32>().unwrap());
    for (i, ((x, y), b)) in w.iter().zip(&g).zip(bound).enumerate() {
        let ok = if *b == 0.0 { x.to_bits() == y.to_bits() } else { ((x - y) as f64).abs() <= *b };
        assert!(ok, "{tag}: element {i}: device {y}, interpreter {x}, allowed difference {b}");
    }
}

/// `MMA_TOLERANCE * steps * (|c| + sum_k |a[i][k] b[k][j]|)` per element of the `m`×`n`
/// result, `a` m×kk and `b` kk×n row-major; 0 everywhere when `exact`.
fn bounds(
    a: &[f32],
    b: &[f32],
    c: &[f32],
    (m, n, kk): (usize, usize, usize),
    exact: bool,
) -> Vec<f64> {
    (0..m * n)
        .map(|e| {
            if exact {
                return 0.0;
            }
            let (i, j) = (e / n, e % n);
            let s: f64 = (0..kk).map(|q| (a[i * kk + q] as f64 * b[q * n + j] as f64).abs()).sum();
            MMA_TOLERANCE * (kk / 16) as f64 * (s + (c[e] as f64).abs())
        })
        .collect()
}

fn at(layout: &str, r: usize, c: usize, stride: usize) -> usize {
    if layout == "row" {
        r * stride + c
    } else {
        c * stride + r
    }
}

/// Four warps, each D = A·B + C on its own 16 rows of A, C and D (fragments loaded from
/// global memory).
#[test]
fn global_fragments_match_the_interpreter() {
    let dev = device();
    const WARPS: usize = 4;
    for shape in ["m16n8k16", "m16n16k16"] {
        let (_, n, _) = MatShape::from_name(shape).unwrap().mnk();
        let n = n as usize;
        for elem in ["f16", "bf16"] {
            for la in ["row", "col"] {
                for lb in ["row", "col"] {
                    for exact in [true, false] {
                        let m = 16 * WARPS;
                        let (lda, ldb) = (
                            if la == "row" { 24 } else { m + 8 },
                            if lb == "row" { n + 8 } else { 24 },
                        );
                        let aoff = if la == "row" { 16 * lda } else { 16 };
                        let a = values(m * 16, 1, exact);
                        let b = values(16 * n, 2, exact);
                        let c = values(m * n, 3, exact);
                        let mut ga = vec![0.0f32; if la == "row" { m } else { 16 } * lda];
                        let mut gb = vec![0.0f32; if lb == "row" { 16 } else { n } * ldb];
                        for i in 0..m {
                            for q in 0..16 {
                                ga[at(la, i, q, lda)] = a[i * 16 + q];
                            }
                        }
                        for q in 0..16 {
                            for j in 0..n {
                                gb[at(lb, q, j, ldb)] = b[q * n + j];
                            }
                        }
                        let (abuf, ga_r) = half_buffer(&ga, elem);
                        let (bbuf, gb_r) = half_buffer(&gb, elem);
                        let a_r: Vec<f32> =
                            (0..m * 16).map(|e| ga_r[at(la, e / 16, e % 16, lda)]).collect();
                        let b_r: Vec<f32> =
                            (0..16 * n).map(|e| gb_r[at(lb, e / n, e % n, ldb)]).collect();
                        let src = format!(
                            "kernel mm(a: ptr<global, {elem}>, b: ptr<global, {elem}>, c: ptr<global, f32>, d: ptr<global, f32>) {{
  let w: u32 = local_id(0) / 32u32;
  let fa: frag<a, {shape}, {elem}> = frag_load(a, w * {aoff}u32, {lda}u32, {la});
  let fb: frag<b, {shape}, {elem}> = frag_load(b, 0u32, {ldb}u32, {lb});
  let fc: frag<acc, {shape}, f32> = frag_load(c, w * {}u32, {n}u32, row);
  let r: frag<acc, {shape}, f32> = mma(fa, fb, fc);
  frag_store(d, w * {}u32, {n}u32, row, r);
}}",
                            16 * n,
                            16 * n
                        );
                        let k = parse_module(&src).unwrap().kernels[0].clone();
                        let bound = bounds(&a_r, &b_r, &c, (m, n, 16), exact);
                        compare(
                            dev.as_ref(),
                            &k,
                            &NdRange::new(&[32 * WARPS as u32]).with_local(&[32 * WARPS as u32]),
                            &[Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3)],
                            vec![
                                abuf,
                                bbuf,
                                Buffer::from_slice(&c),
                                Buffer::zeroed(Scalar::F32, m * n),
                            ],
                            3,
                            &bound,
                            &format!("{shape} {elem} a {la} b {lb} exact {exact}"),
                        );
                    }
                }
            }
        }
    }
}

/// A K loop of `STEPS` steps fed by a two-stage `copy_async` pipeline into local memory,
/// fragments loaded with `ldmatrix` (plain and `.trans`), the accumulator staged through
/// local memory before the store.
#[test]
fn local_pipeline_matches_the_interpreter() {
    let dev = device();
    const STEPS: usize = 4;
    for shape in ["m16n8k16", "m16n16k16"] {
        let (_, n, _) = MatShape::from_name(shape).unwrap().mnk();
        let n = n as usize;
        for elem in ["f16", "bf16"] {
            for (la, lb) in [("row", "row"), ("col", "col"), ("row", "col"), ("col", "row")] {
                for exact in [true, false] {
                    let kk = 16 * STEPS;
                    let a = values(16 * kk, 4, exact);
                    let b = values(kk * n, 5, exact);
                    let (sa, sb) = (16, if lb == "row" { n } else { 16 });
                    // Global data staged per K step: a dense 16x16 tile of A and 16xN of B.
                    let mut ga = vec![0.0f32; 256 * STEPS];
                    let mut gb = vec![0.0f32; 16 * n * STEPS];
                    for s in 0..STEPS {
                        for i in 0..16 {
                            for q in 0..16 {
                                ga[s * 256 + at(la, i, q, sa)] = a[i * kk + s * 16 + q];
                            }
                        }
                        for q in 0..16 {
                            for j in 0..n {
                                gb[s * 16 * n + at(lb, q, j, sb)] = b[(s * 16 + q) * n + j];
                            }
                        }
                    }
                    let (abuf, ga_r) = half_buffer(&ga, elem);
                    let (bbuf, gb_r) = half_buffer(&gb, elem);
                    let a_r: Vec<f32> = (0..16 * kk)
                        .map(|e| {
                            let (i, q) = (e / kk, e % kk);
                            ga_r[(q / 16) * 256 + at(la, i, q % 16, sa)]
                        })
                        .collect();
                    let b_r: Vec<f32> = (0..kk * n)
                        .map(|e| {
                            let (q, j) = (e / n, e % n);
                            gb_r[(q / 16) * 16 * n + at(lb, q % 16, j, sb)]
                        })
                        .collect();
                    let bs = 16 * n;
                    let src = format!(
                        "kernel pipe(a: ptr<global, {elem}>, b: ptr<global, {elem}>, d: ptr<global, f32>) {{
  local la: {elem}[512];
  local lb: {elem}[512];
  local ld: f32[256];
  let t: u32 = local_id(0);
  for s: u32 in 0u32 .. 2u32 {{
    copy_async(la, s * 256u32 + t * 8u32, a, s * 256u32 + t * 8u32, 8);
    if t * 8u32 < {bs}u32 {{
      copy_async(lb, s * 256u32 + t * 8u32, b, s * {bs}u32 + t * 8u32, 8);
    }}
    async_commit();
  }}
  let z: frag<acc, {shape}, f32> = frag_fill(0.0f32);
  var acc: frag<acc, {shape}, f32> = z;
  for kb: u32 in 0u32 .. {STEPS}u32 {{
    async_wait(1);
    barrier(local);
    let st: u32 = kb % 2u32;
    let fa: frag<a, {shape}, {elem}> = frag_load(la, st * 256u32, {sa}u32, {la});
    let fb: frag<b, {shape}, {elem}> = frag_load(lb, st * 256u32, {sb}u32, {lb});
    let r: frag<acc, {shape}, f32> = mma(fa, fb, acc);
    acc = r;
    barrier(local);
    if kb + 2u32 < {STEPS}u32 {{
      let nx: u32 = kb + 2u32;
      copy_async(la, st * 256u32 + t * 8u32, a, nx * 256u32 + t * 8u32, 8);
      if t * 8u32 < {bs}u32 {{
        copy_async(lb, st * 256u32 + t * 8u32, b, nx * {bs}u32 + t * 8u32, 8);
      }}
    }}
    async_commit();
  }}
  frag_store(ld, 0u32, {n}u32, row, acc);
  barrier(local);
  for e: u32 in 0u32 .. {}u32 {{
    d[e * 32u32 + t] = ld[e * 32u32 + t];
  }}
}}",
                        16 * n / 32
                    );
                    let k = parse_module(&src).unwrap().kernels[0].clone();
                    let zeros = vec![0.0f32; 16 * n];
                    let bound = bounds(&a_r, &b_r, &zeros, (16, n, kk), exact);
                    compare(
                        dev.as_ref(),
                        &k,
                        &NdRange::new(&[32]).with_local(&[32]),
                        &[Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)],
                        vec![abuf, bbuf, Buffer::zeroed(Scalar::F32, 16 * n)],
                        2,
                        &bound,
                        &format!("pipeline {shape} {elem} a {la} b {lb} exact {exact}"),
                    );
                }
            }
        }
    }
}
