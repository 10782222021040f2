//! Matrix operations and bf16: text round trips, verifier rules, and the interpreter's
//! results against a product computed here from the host arrays.

use half::{bf16, f16};
use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::matrix::{mma_reference, MatShape};
use kiln_ir::{check_source, parse_module, verify_module};
use proptest::prelude::*;

/// Small exact values (multiples of 1/8 in [-2, 2)) as f32, deterministic by index.
fn vals(n: usize, seed: u32) -> Vec<f32> {
    (0..n as u32).map(|i| ((i * 37 + seed * 11) % 32) as f32 / 8.0 - 2.0).collect()
}

fn run_kernel(src: &str, local: u32, args: &[Arg], bufs: &mut [Buffer]) -> Result<(), String> {
    let m = check_source("t.kir", src).map_err(|d| format!("{d:?}"))?;
    let k = &m.kernels[0];
    run(k, &NdRange::new(&[local]).with_local(&[local]), args, bufs).map_err(|e| e.to_string())
}

/// The (r, c) element of a tile stored with `layout` ("row" or "col") at `stride`.
fn at(layout: &str, r: usize, c: usize, stride: usize) -> usize {
    if layout == "row" {
        r * stride + c
    } else {
        c * stride + r
    }
}

/// D = A·B + C through frag_load (with the given layouts), mma and frag_store, compared bit
/// for bit with `mma_reference` on the same values.
fn check_mma(shape: &str, elem: &str, la: &str, lb: &str) {
    let s = MatShape::from_name(shape).unwrap();
    let (m, n, k) = s.mnk();
    let (m, n, k) = (m as usize, n as usize, k as usize);
    // Strides padded past the tile, as a kernel reading a sub-tile of a larger matrix does.
    let (sa, sb) = (if la == "row" { k } else { m } + 8, if lb == "row" { n } else { k } + 8);
    let a = vals(m * k, 1);
    let b = vals(k * n, 2);
    let c = vals(m * n, 3);
    let mut abuf = vec![0.0f32; 16 * sa + 8];
    let mut bbuf = vec![0.0f32; 16 * sb + 8];
    for r in 0..m {
        for q in 0..k {
            abuf[8 + at(la, r, q, sa)] = a[r * k + q];
        }
    }
    for r in 0..k {
        for q in 0..n {
            bbuf[8 + at(lb, r, q, sb)] = b[r * n + q];
        }
    }
    let to = |v: &[f32]| -> Buffer {
        if elem == "f16" {
            Buffer::from_slice(&v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>())
        } else {
            Buffer::from_slice(&v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>())
        }
    };
    let src = format!(
        "kernel k(a: ptr<global, {elem}>, b: ptr<global, {elem}>, c: ptr<global, f32>, d: ptr<global, f32>) {{
  let fa: frag<a, {shape}, {elem}> = frag_load(a, 8u32, {sa}u32, {la});
  let fb: frag<b, {shape}, {elem}> = frag_load(b, 8u32, {sb}u32, {lb});
  let fc: frag<acc, {shape}, f32> = frag_load(c, 0u32, {n}u32, row);
  let fd: frag<acc, {shape}, f32> = mma(fa, fb, fc);
  frag_store(d, 0u32, {n}u32, row, fd);
}}"
    );
    let mut bufs = vec![
        to(&abuf),
        to(&bbuf),
        Buffer::from_slice(&c),
        Buffer::zeroed(kiln_ir::Scalar::F32, m * n),
    ];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3)];
    run_kernel(&src, 64, &args, &mut bufs).unwrap();
    let want = mma_reference(s, &a, &b, &c);
    let got = bufs[3].to_vec::<f32>().unwrap();
    assert_eq!(
        got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        "{shape} {elem} {la} {lb}"
    );
    // The values are not trivially equal to C: the product contributed.
    assert_ne!(got, c);
}

#[test]
fn mma_matches_the_reference_for_every_shape_type_and_layout() {
    for shape in ["m16n8k16", "m16n16k16"] {
        for elem in ["f16", "bf16"] {
            for la in ["row", "col"] {
                for lb in ["row", "col"] {
                    check_mma(shape, elem, la, lb);
                }
            }
        }
    }
}

/// A K loop accumulating in a `var` fragment, tiles loaded from local memory after a
/// multi-stage `copy_async` pipeline: the result is the full 16x64 · 64x8 product.
#[test]
fn k_loop_through_local_memory_and_async_copies() {
    let (m, n, kk) = (16usize, 8usize, 64usize);
    let a = vals(m * kk, 5);
    let b = vals(kk * n, 6);
    let src = "kernel k(a: ptr<global, f16>, b: ptr<global, f16>, d: ptr<global, f32>) {
  local sa: f16[512];
  local sb: f16[256];
  let t: u32 = local_id(0);
  let z: frag<acc, m16n8k16, f32> = frag_fill(0.0f32);
  var acc: frag<acc, m16n8k16, f32> = z;
  for s: u32 in 0u32 .. 2u32 {
    copy_async(sa, s * 256u32 + t * 8u32, a, t / 2u32 * 64u32 + t % 2u32 * 8u32 + s * 16u32, 8);
    if t < 16u32 {
      copy_async(sb, s * 128u32 + t * 8u32, b, s * 128u32 + t * 8u32, 8);
    }
    async_commit();
  }
  for kb: u32 in 0u32 .. 4u32 {
    async_wait(1);
    barrier(local);
    let st: u32 = kb % 2u32;
    let fa: frag<a, m16n8k16, f16> = frag_load(sa, st * 256u32, 16u32, row);
    let fb: frag<b, m16n8k16, f16> = frag_load(sb, st * 128u32, 8u32, row);
    let r: frag<acc, m16n8k16, f32> = mma(fa, fb, acc);
    acc = r;
    barrier(local);
    if kb + 2u32 < 4u32 {
      let nx: u32 = kb + 2u32;
      copy_async(sa, st * 256u32 + t * 8u32, a, t / 2u32 * 64u32 + t % 2u32 * 8u32 + nx * 16u32, 8);
      if t < 16u32 {
        copy_async(sb, st * 128u32 + t * 8u32, b, nx * 128u32 + t * 8u32, 8);
      }
    }
    async_commit();
  }
  frag_store(d, 0u32, 8u32, row, acc);
}";
    let h =
        |v: &[f32]| Buffer::from_slice(&v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>());
    let mut bufs = vec![h(&a), h(&b), Buffer::zeroed(kiln_ir::Scalar::F32, m * n)];
    run_kernel(src, 32, &[Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)], &mut bufs).unwrap();
    // The same sums: each K step of 16 in order, each step adding its products in k order.
    let mut want = vec![0.0f32; m * n];
    for step in 0..kk / 16 {
        let at: Vec<f32> = (0..m * 16).map(|i| a[(i / 16) * kk + step * 16 + i % 16]).collect();
        let bt: Vec<f32> = (0..16 * n).map(|i| b[(step * 16 + i / n) * n + i % n]).collect();
        want = mma_reference(MatShape::M16N8K16, &at, &bt, &want);
    }
    assert_eq!(bufs[2].to_vec::<f32>().unwrap(), want);
}

#[test]
fn uncommitted_or_unwaited_copies_do_not_land() {
    // The copy is committed but waited for with one group allowed pending: not performed.
    let src = "kernel k(a: ptr<global, f32>, d: ptr<global, f32>) {
  local s: f32[128];
  let t: u32 = local_id(0);
  copy_async(s, t * 4u32, a, t * 4u32, 4);
  async_commit();
  async_wait(1);
  d[t] = s[t * 4u32];
  async_wait(0);
  d[t + 32u32] = s[t * 4u32];
}";
    let a: Vec<f32> = (0..128).map(|i| i as f32 + 1.0).collect();
    let mut bufs = vec![Buffer::from_slice(&a), Buffer::zeroed(kiln_ir::Scalar::F32, 64)];
    run_kernel(src, 32, &[Arg::Buffer(0), Arg::Buffer(1)], &mut bufs).unwrap();
    let d = bufs[1].to_vec::<f32>().unwrap();
    assert!(d[..32].iter().all(|&x| x == 0.0), "{d:?}");
    assert_eq!(d[32..], (0..32).map(|t| (t * 4 + 1) as f32).collect::<Vec<_>>()[..]);
}

const TILE: &str = "kernel k(a: ptr<global, f16>, d: ptr<global, f32>) {
  let t: u32 = local_id(0);
  let fa: frag<a, m16n8k16, f16> = frag_load(a, OFFSET, 16u32, row);
  let fb: frag<b, m16n8k16, f16> = frag_load(a, 0u32, 8u32, row);
  let z: frag<acc, m16n8k16, f32> = frag_fill(0.0f32);
  let r: frag<acc, m16n8k16, f32> = mma(fa, fb, z);
  GUARD
  frag_store(d, 0u32, 8u32, row, r);
}";

fn tile_run(offset: &str, guard: &str, local: u32) -> Result<(), String> {
    let src = TILE.replace("OFFSET", offset).replace("GUARD", guard);
    let mut bufs = vec![
        Buffer::from_slice(&vec![f16::from_f32(1.0); 512]),
        Buffer::zeroed(kiln_ir::Scalar::F32, 128),
    ];
    run_kernel(&src, local, &[Arg::Buffer(0), Arg::Buffer(1)], &mut bufs)
}

#[test]
fn cooperative_rules_are_checked_at_run_time() {
    assert_eq!(tile_run("0u32", "", 32), Ok(()));
    let e = tile_run("0u32", "", 16).unwrap_err();
    assert!(e.contains("multiple of 32 work-items"), "{e}");
    let e = tile_run("4u32", "", 32).unwrap_err();
    assert!(e.contains("misaligned `frag_load`"), "{e}");
    let e = tile_run("512u32", "", 32).unwrap_err();
    assert!(e.contains("out of bounds"), "{e}");
    // Work-items disagree on the offset.
    let e = tile_run("t / 16u32 * 8u32", "", 32).unwrap_err();
    assert!(e.contains("not executed uniformly by sub-group 0"), "{e}");
    // Half the sub-group skips an operation.
    let guard = "if t < 16u32 { let y: frag<acc, m16n8k16, f32> = frag_fill(1.0f32); }";
    let e = tile_run("0u32", guard, 32).unwrap_err();
    assert!(e.contains("not executed uniformly"), "{e}");
    // A whole sub-group skipping is fine: sub-group 1 of a 64-item group.
    let guard = "if t < 32u32 { let y: frag<acc, m16n8k16, f32> = frag_fill(1.0f32); }";
    assert_eq!(tile_run("0u32", guard, 64), Ok(()));
}

fn verify_error(body: &str) -> String {
    let src = format!(
        "kernel k(a: ptr<global, f16>, l: ptr<global, f32>, w: ptr<global, bf16>) {{\n{body}\n}}"
    );
    let d = check_source("t.kir", &src).expect_err("the verifier accepts it");
    let text = format!("{}", d[0]);
    assert!(text.contains("t.kir:"), "unlocated: {text}");
    text
}

#[test]
fn verifier_rules_are_located() {
    let e = verify_error("let f: frag<a, m16n8k16, f32> = frag_fill(0.0f32);");
    assert!(e.contains("`a` fragments hold f16 or bf16 elements") && e.contains("t.kir:2:"), "{e}");
    let e = verify_error("let f: frag<acc, m16n8k16, f16> = frag_load(a, 0u32, 8u32, row);");
    assert!(e.contains("`acc` fragments hold f32 elements"), "{e}");
    let e = verify_error(
        "let x: frag<a, m16n8k16, f16> = frag_load(a, 0u32, 16u32, row);
let y: frag<b, m16n16k16, f16> = frag_load(a, 0u32, 16u32, col);
let z: frag<acc, m16n8k16, f32> = frag_fill(0.0f32);
let r: frag<acc, m16n8k16, f32> = mma(x, y, z);",
    );
    assert!(e.contains("disagree in shape") && e.contains("t.kir:5:"), "{e}");
    let e = verify_error(
        "let x: frag<a, m16n8k16, f16> = frag_load(a, 0u32, 16u32, row);
let y: frag<b, m16n8k16, bf16> = frag_load(w, 0u32, 16u32, col);
let z: frag<acc, m16n8k16, f32> = frag_fill(0.0f32);
let r: frag<acc, m16n8k16, f32> = mma(x, y, z);",
    );
    assert!(e.contains("different element types"), "{e}");
    let e = verify_error("let x: frag<a, m16n8k16, bf16> = frag_load(a, 0u32, 16u32, row);");
    assert!(e.contains("whose elements are f16; the fragment holds bf16"), "{e}");
    let e = verify_error(
        "let x: frag<a, m16n8k16, f16> = frag_load(a, 0u32, 16u32, row);
frag_store(l, 0u32, 16u32, row, x);",
    );
    assert!(e.contains("`frag_store` stores accumulators"), "{e}");
    let e = verify_error(
        "let x: frag<acc, m16n8k16, f32> = frag_fill(0.0f32);
let y: frag<acc, m16n8k16, f32> = frag_fill(1.0f32);
let s: frag<acc, m16n8k16, f32> = true ? x : y;",
    );
    assert!(e.contains("fragments only move through variables"), "{e}");
    let e = verify_error("let x: frag<acc, m16n8k16, f32> = frag_load(l, 0i32, 16u32, row);");
    assert!(e.contains("of `frag_load` is i32, not u32"), "{e}");
    let e = verify_error("local s: f16[64];\ncopy_async(s, 0u32, a, 0u32, 3);");
    assert!(e.contains("a copy moves 4, 8 or 16 bytes"), "{e}");
    let e = verify_error("copy_async(a, 0u32, a, 0u32, 8);");
    assert!(e.contains("it needs local memory"), "{e}");
    let e = verify_error("let b: bf16 = w[0u32];\nlet c: bf16 = b + b;");
    assert!(e.contains("bf16 is a storage type"), "{e}");
}

#[test]
fn bf16_casts_round_once_to_nearest_even() {
    // 1 + 2^-8 is a tie: to even (1.0); 1 + 3*2^-8 is a tie: to even (1 + 2^-6).
    let src = "kernel k(x: ptr<global, f64>, y: ptr<global, bf16>, z: ptr<global, f32>) {
  let i: u32 = global_id(0);
  y[i] = x[i] as bf16;
  z[i] = y[i] as f32;
}";
    let xs = [
        1.0 + 2f64.powi(-8),
        1.0 + 3.0 * 2f64.powi(-8),
        1.0 + 2f64.powi(-8) + 2f64.powi(-40),
        1e39,
    ];
    let mut bufs = vec![
        Buffer::from_slice(&xs),
        Buffer::zeroed(kiln_ir::Scalar::BF16, 4),
        Buffer::zeroed(kiln_ir::Scalar::F32, 4),
    ];
    let m = parse_module(src).unwrap();
    verify_module(&m).unwrap();
    run(
        &m.kernels[0],
        &NdRange::new(&[4]).with_local(&[4]),
        &[Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)],
        &mut bufs,
    )
    .unwrap();
    let z = bufs[2].to_vec::<f32>().unwrap();
    assert_eq!(z, [1.0, 1.0 + 4.0 / 256.0, 1.0 + 2.0 / 256.0, f32::INFINITY]);
}

fn arb_call() -> impl Strategy<Value = String> {
    let role = prop_oneof![
        Just(("a", "f16")),
        Just(("a", "bf16")),
        Just(("b", "bf16")),
        Just(("b", "f16"))
    ];
    let shape = prop_oneof![Just("m16n8k16"), Just("m16n16k16")];
    let layout = prop_oneof![Just("row"), Just("col")];
    (role, shape.clone(), layout.clone(), layout, 0u32..4, 0u32..4, 0u8..4, shape).prop_map(
        |((r, e), s, l1, l2, o, st, w, s2)| {
            let p = if e == "f16" { "a" } else { "w" };
            format!(
                "let x: frag<{r}, {s}, {e}> = frag_load({p}, {o}u32 * 8u32, {}u32, {l1});
let c: frag<acc, {s2}, f32> = frag_fill({o}.5f32);
var v: frag<acc, {s2}, f32> = c;
v = c;
frag_store(l, {}u32, 16u32, {l2}, v);
copy_async(s, {o}u32, a, {st}u32 * 8u32, 8);
async_commit();
async_wait({w});",
                (st + 2) * 8,
                o * 8
            )
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// The text form of matrix calls and fragment types parses back to the same kernel, and
    /// printing that again gives the same text.
    #[test]
    fn matrix_text_round_trips(body in arb_call()) {
        let src = format!(
            "kernel k(a: ptr<global, f16>, l: ptr<global, f32>, w: ptr<global, bf16>) {{\n  local s: f16[64];\n{body}\n}}"
        );
        let m = parse_module(&src).unwrap();
        verify_module(&m).unwrap();
        let printed = m.to_string();
        let back = parse_module(&printed).unwrap();
        prop_assert_eq!(&back, &m);
        prop_assert_eq!(back.to_string(), printed);
    }
}

/// A word operand outside its set is an error saying which words were expected.
#[test]
fn word_operands_name_the_words_expected() {
    let src = "kernel k(p: ptr<global, f16>) #reqd_work_group_size(32, 1, 1) {
  let fa: frag<a, m16n8k16, f16> = frag_load(p, 0u32, 16u32, diagonal);
}";
    let err = kiln_ir::parse_module(src).unwrap_err().to_string();
    assert!(err.contains("expected the layout `row` or `col` in `frag_load`"), "{err}");
}
