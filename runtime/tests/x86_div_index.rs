//! u32 `/` and `%` of lanes by divisors fixed for the call, with dividends from the ids:
//! index decomposition as users write it (a permute, im2col and a transpose launched 1-D, a
//! batched kernel finding its batch), with divisors small and large, odd sizes, ranges
//! rounded up and guards, zero divisors, and dividends near the top of the u32 range;
//! results and errors against the interpreter and the scalar code
//! (`backends/src/x86/spmd/divuniform.rs`; `near.rs`'s pairs).
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};

/// Divisors: tiny, around the lane count, large, around the path's limit 2^20, and beyond.
const DIVISORS: [u32; 14] = [
    1,
    2,
    3,
    7,
    8,
    9,
    1000,
    (1 << 20) - 1,
    1 << 20,
    (1 << 20) + 1,
    65537,
    0x8000_0001,
    0xffff_fffe,
    u32::MAX,
];

fn u32s(n: usize, seed: u32) -> Vec<u32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            s
        })
        .collect()
}

const PERMUTE: &str =
    "kernel permute(src: ptr<global, u32>, dst: ptr<global, u32>, c: u32, h: u32, w: u32, total: u32) {
  let i: u32 = global_id(0);
  if i < total {
    let ch: u32 = i % c;
    let p: u32 = i / c;
    let x: u32 = p % w;
    let q: u32 = p / w;
    let y: u32 = q % h;
    let b: u32 = q / h;
    dst[i] = src[((b * c + ch) * h + y) * w + x];
  }
}";

#[test]
fn a_permute_launched_1d_matches_the_interpreter_for_odd_sizes() {
    let k = kernel(PERMUTE);
    if avx2() {
        let l = vector_listing(&k);
        assert!(l.iter().any(|l| l.starts_with("vpmuludq")), "the magic numbers");
        assert!(!l.iter().any(|l| l.starts_with("vdivpd") || l.starts_with("vcvt")), "no f64");
    }
    let shapes = [
        (3u32, 7u32, 11u32, 2u32),
        (1, 1, 1, 37),
        (8, 9, 1, 3),
        (9, 2, 8, 2),
        (2, 3, 1000, 1),
        (4, 5, 9, 3),
        (1, 13, 3, 1),
        (5, 1, 1, 7),
    ];
    for (c, h, w, nb) in shapes {
        let total = (c * h * w * nb) as usize;
        let src = u32s(total, c * 31 + w);
        let bufs = vec![Buffer::from_slice(&src), Buffer::from_slice(&vec![0u32; total])];
        for local in [8usize, 16, 64] {
            let range =
                NdRange::new(&[total.next_multiple_of(local) as u32]).with_local(&[local as u32]);
            let args = [
                Arg::Buffer(0),
                Arg::Buffer(1),
                Arg::scalar(c),
                Arg::scalar(h),
                Arg::scalar(w),
                Arg::scalar(total as u32),
            ];
            agree(&k, &range, &args, &bufs, &format!("{c}x{h}x{w}x{nb} by {local}"));
        }
    }
}

/// `base + i * stride` divided by `d`: in stores, and in a pair of `let`s that share one
/// computation (the remainder first).
const BY_PARAM: [&str; 2] = [
    "kernel k(q: ptr<global, u32>, r: ptr<global, u32>, base: u32, stride: u32, d: u32, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let a: u32 = base + i * stride;
    q[i] = a / d;
    r[i] = a % d;
  }
}",
    "kernel k(q: ptr<global, u32>, r: ptr<global, u32>, base: u32, stride: u32, d: u32, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let a: u32 = base + i * stride;
    let rr: u32 = a % d;
    let qq: u32 = a / d;
    q[i] = qq;
    r[i] = rr;
  }
}",
];

#[test]
fn lanes_near_and_far_and_near_the_top_divide_exactly() {
    // `base + i * step`: consecutive lanes (step 1), spread ones (the path's offset limit
    // 2^16 inside a batch or not), lanes wrapping past u32::MAX, and lane 0 near the top.
    for src in BY_PARAM {
        let k = kernel(src);
        let n = 203u32;
        let range = NdRange::new(&[208]).with_local(&[16]);
        for &d in &DIVISORS {
            for (base, step) in [
                (0u32, 1u32),
                (12345, 1),
                (d.wrapping_mul(5).wrapping_sub(3), 1),
                (0, 8191),
                (7, 9363),
                (0xffff_0000 - 2000, 1),
                (0xffff_0000 - 100, 1),
                (u32::MAX - 300, 1),
                (u32::MAX - 300, 3),
                (0x7fff_fff0, 0x1000_0001),
            ] {
                let bufs = vec![Buffer::from_slice(&vec![0u32; n as usize]); 2];
                let args = [
                    Arg::Buffer(0),
                    Arg::Buffer(1),
                    Arg::scalar(base),
                    Arg::scalar(step),
                    Arg::scalar(d),
                    Arg::scalar(n),
                ];
                agree(
                    &k,
                    &range,
                    &args,
                    &bufs,
                    &format!("d = {d}, base = {base}, stride = {step}"),
                );
            }
        }
    }
}

#[test]
fn a_zero_divisor_faults_in_the_first_active_lane_and_not_without_one() {
    for src in BY_PARAM {
        let k = kernel(src);
        let range = NdRange::new(&[64]).with_local(&[32]);
        for n in [64u32, 9, 1, 0] {
            let bufs = vec![Buffer::from_slice(&[0u32; 64]); 2];
            let args = [
                Arg::Buffer(0),
                Arg::Buffer(1),
                Arg::scalar(5u32),
                Arg::scalar(1u32),
                Arg::scalar(0u32),
                Arg::scalar(n),
            ];
            agree(&k, &range, &args, &bufs, &format!("n = {n}"));
        }
    }
}

#[test]
fn im2col_a_transpose_and_a_batched_kernel_launched_1d_match_the_interpreter() {
    // im2col of a c x h x w image for a kh x kw window (stride 1, no padding): one
    // work-item per element of the (c kh kw) x (oh ow) matrix.
    let im2col = kernel(
        "kernel im2col(src: ptr<global, f32>, dst: ptr<global, f32>, h: u32, w: u32, kh: u32, kw: u32, oh: u32, ow: u32, total: u32) {
  let i: u32 = global_id(0);
  if i < total {
    let col: u32 = i % (oh * ow);
    let row: u32 = i / (oh * ow);
    let ox: u32 = col % ow;
    let oy: u32 = col / ow;
    let kx: u32 = row % kw;
    let ky: u32 = (row / kw) % kh;
    let ch: u32 = row / (kw * kh);
    dst[i] = src[(ch * h + oy + ky) * w + ox + kx];
  }
}",
    );
    for (c, h, w, kh, kw) in [(3u32, 9u32, 10u32, 3u32, 3u32), (2, 5, 33, 1, 4), (1, 40, 7, 5, 2)] {
        let (oh, ow) = (h - kh + 1, w - kw + 1);
        let total = c * kh * kw * oh * ow;
        let src: Vec<f32> = (0..c * h * w).map(|v| v as f32 * 0.5).collect();
        let bufs = vec![Buffer::from_slice(&src), Buffer::from_slice(&vec![0f32; total as usize])];
        let range = NdRange::new(&[total.next_multiple_of(64)]).with_local(&[64]);
        let args: Vec<Arg> = [0, 1]
            .map(Arg::Buffer)
            .into_iter()
            .chain([h, w, kh, kw, oh, ow, total].map(Arg::scalar))
            .collect();
        agree(&im2col, &range, &args, &bufs, &format!("im2col {c} {h} {w} {kh} {kw}"));
    }
    // A transpose of a rows x cols matrix launched 1-D: row and column by `/` and `%`.
    let transpose = kernel(
        "kernel t(a: ptr<global, f32>, b: ptr<global, f32>, rows: u32, cols: u32) {
  let i: u32 = global_id(0);
  if i < rows * cols {
    let r: u32 = i / cols;
    let c: u32 = i % cols;
    b[c * rows + r] = a[i];
  }
}",
    );
    for (rows, cols) in [(13u32, 7u32), (5, 1), (3, 1031), (1, 9)] {
        let a: Vec<f32> = (0..rows * cols).map(|v| v as f32).collect();
        let bufs = vec![Buffer::from_slice(&a), Buffer::from_slice(&vec![0f32; a.len()])];
        let range = NdRange::new(&[(rows * cols).next_multiple_of(32)]).with_local(&[32]);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(rows), Arg::scalar(cols)];
        agree(&transpose, &range, &args, &bufs, &format!("transpose {rows}x{cols}"));
    }
    // Batched 4x4 matrix times vector: the batch and the row by a constant, the element
    // by `%`.
    let batched = kernel(
        "kernel mv(m: ptr<global, f32>, x: ptr<global, f32>, y: ptr<global, f32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n * 4u32 {
    let b: u32 = i / 4u32;
    let r: u32 = i % 4u32;
    var acc: f32 = 0.0;
    for j: u32 in 0 .. 4 {
      acc = acc + m[b * 16u32 + r * 4u32 + j] * x[b * 4u32 + j];
    }
    y[i] = acc;
  }
}",
    );
    for nb in [1u32, 3, 50] {
        let m: Vec<f32> = (0..nb * 16).map(|v| (v % 13) as f32).collect();
        let x: Vec<f32> = (0..nb * 4).map(|v| (v % 5) as f32).collect();
        let bufs = vec![
            Buffer::from_slice(&m),
            Buffer::from_slice(&x),
            Buffer::from_slice(&vec![0f32; (nb * 4) as usize]),
        ];
        let range = NdRange::new(&[(nb * 4).next_multiple_of(64)]).with_local(&[64]);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(nb)];
        agree(&batched, &range, &args, &bufs, &format!("batched {nb}"));
    }
}

#[test]
fn a_pair_shares_one_division_and_data_dividends_take_the_magic_number_too() {
    if !avx2() {
        return kiln_ir::testing::skip("no AVX2: no 8-lane code to look at");
    }
    let count = |src: &str, op: &str| {
        vector_listing(&kernel(src)).iter().filter(|l| l.starts_with(op)).count()
    };
    // The stores' `/` and `%` each multiply; the `let` pair once.
    let (apart, shared) = (count(BY_PARAM[0], "vpmuludq"), count(BY_PARAM[1], "vpmuludq"));
    assert!(shared > 0 && 2 * shared == apart, "{shared} {apart}");
    // A dividend loaded from memory: the same multiply, no f64.
    let data = "kernel k(x: ptr<global, u32>, q: ptr<global, u32>, d: u32, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    q[i] = x[i] / d + x[i] % 7u32;
  }
}";
    assert_eq!(count(data, "vroundpd") + count(data, "vdivpd"), 0);
    assert!(count(data, "vpmuludq") > 0);
}

#[test]
fn a_pair_split_by_a_barrier_is_computed_on_each_side() {
    // Region code runs every batch of the group up to the barrier before any goes on: a
    // value left in a slot by the first of the pair would be the last batch's.
    let k = kernel(
        "kernel k(q: ptr<global, u32>, r: ptr<global, u32>, d: u32, n: u32) #reqd_work_group_size(64, 1, 1) {
  local t: u32[64];
  let l: u32 = local_id(0);
  let i: u32 = global_id(0);
  let rr: u32 = i % d;
  t[l] = rr;
  barrier(local);
  let qq: u32 = i / d;
  if i < n {
    q[i] = qq;
    r[i] = t[l];
  }
}",
    );
    for d in [3u32, 1000, 0xffff_ffff, 0] {
        let n = 300u32;
        let range = NdRange::new(&[320]).with_local(&[64]);
        let bufs = vec![Buffer::from_slice(&[0u32; 300]); 2];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(d), Arg::scalar(n)];
        agree(&k, &range, &args, &bufs, &format!("d = {d}"));
    }
}
