//! Short vector types (`f32x4`, `i32x2`, ...): text round trip, verifier rules (including
//! provably misaligned accesses) and interpreter semantics against direct Rust computations.

use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{parse_module, verify::verify_module, Module};

fn parse(src: &str) -> Module {
    let m = parse_module(src).unwrap_or_else(|e| panic!("{e}"));
    let printed = m.to_string();
    let again = parse_module(&printed).unwrap_or_else(|e| panic!("{e}\n{printed}"));
    assert!(again.kernels[0].body().is_equal(m.kernels[0].body()), "{printed}");
    assert_eq!(again.to_string(), printed);
    m
}

fn errors(src: &str) -> String {
    let m = parse_module(src).unwrap_or_else(|e| panic!("{e}"));
    match verify_module(&m) {
        Ok(()) => String::new(),
        Err(e) => e.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n"),
    }
}

const AXPY4: &str = "kernel axpy4(x: ptr<global, f32>, y: ptr<global, f32>, a: f32) {
  let i: u32 = global_id(0) * 4u32;
  let xv: f32x4 = vload4(x, i);
  let yv: f32x4 = vload4(y, i);
  vstore(y, i, f32x4(a) * xv + yv);
}";

#[test]
fn axpy4_runs_lane_wise() {
    let m = parse(AXPY4);
    verify_module(&m).unwrap();
    let n = 64;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
    let y: Vec<f32> = (0..n).map(|i| 1.0 / (i as f32 + 1.0)).collect();
    let mut bufs = vec![Buffer::from_slice(&x), Buffer::from_slice(&y)];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(1.5f32)];
    run(&m.kernels[0], &NdRange::new(&[16]), &args, &mut bufs).unwrap();
    let want: Vec<f32> = x.iter().zip(&y).map(|(x, y)| 1.5 * x + y).collect();
    assert_eq!(bufs[1].to_vec::<f32>().unwrap(), want);
}

#[test]
fn lanes_extract_insert_broadcast_and_intrinsics() {
    let m = parse(
        "kernel k(x: ptr<global, i32>, out: ptr<global, i32>) {
  let v: i32x4 = vload4(x, 4u32);
  var w: i32x4 = insert(i32x4(7), 2, extract(v, 3) + 1);
  w = max(w, v) - i32x4(1, 2, 3, 4);
  let h: i32x2 = i32x2(extract(w, 0), extract(w, 1) * 2);
  vstore(out, 0u32, w);
  vstore(out, 4u32, h);
  out[6] = extract(true ? h : i32x2(0), 1) >> 1;
  vstore(out, 8u32, -(v << i32x4(1)) / i32x4(3) % i32x4(5));
}",
    );
    verify_module(&m).unwrap();
    let x: Vec<i32> = vec![0, 0, 0, 0, 9, -20, 3, 11];
    let mut bufs = vec![Buffer::from_slice(&x), Buffer::zeroed(kiln_ir::Scalar::I32, 12)];
    run(&m.kernels[0], &NdRange::new(&[1]), &[Arg::Buffer(0), Arg::Buffer(1)], &mut bufs).unwrap();
    let v = [9, -20, 3, 11];
    let w0 = [7, 7, 12, 7];
    let w: Vec<i32> = (0..4).map(|k| w0[k].max(v[k]) - (k as i32 + 1)).collect();
    let h = [w[0], w[1] * 2];
    let tail: Vec<i32> = v.iter().map(|x| -(x << 1) / 3 % 5).collect();
    let mut want = w.clone();
    want.extend(h);
    want.push(h[1] >> 1);
    want.push(0);
    want.extend(tail);
    assert_eq!(bufs[1].to_vec::<i32>().unwrap(), want);
}

#[test]
fn literals_take_lane_types_and_round_trip() {
    let m = parse(
        "kernel k(x: ptr<global, f64>) {
  let v: f64x2 = f64x2(1.5, 2.0);
  x[0] = extract(v, 0) + 1.0;
  vstore(x, 2u32, insert(v, 1, 0.25));
}",
    );
    verify_module(&m).unwrap();
    let text = m.to_string();
    assert!(text.contains("f64x2(1.5, 2.0)"), "{text}");
    assert!(text.contains("extract(v, 0) + 1.0"), "{text}");
    let mut bufs = vec![Buffer::zeroed(kiln_ir::Scalar::F64, 4)];
    run(&m.kernels[0], &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs).unwrap();
    assert_eq!(bufs[0].to_vec::<f64>().unwrap(), vec![2.5, 0.0, 1.5, 0.25]);
}

#[test]
fn verifier_rejects_ill_typed_vectors() {
    let cases = [
        ("let v: f32x4 = vload4(x, 2u32);", "misaligned vector load from `x`"),
        ("let v: f32x4 = vload4(x, 4u32 * global_id(0) + 6u32);", "is 2 more than a multiple"),
        ("vstore(x, 1u32, f32x2(1.0));", "misaligned vector store to `x`"),
        ("let v: f32x4 = f32x4(1.0, 2.0);", "takes one value (a broadcast) or 4 lanes"),
        ("let v: f32x4 = vload4(x, 0u32); let s: f32 = extract(v, 4);", "lane 4"),
        ("let v: f32x4 = vload4(x, 0u32); let b: bool = v < v;", "declared bool"),
        ("let v: f32x4 = vload4(x, 0u32); vstore(x, 0u32, v < v);", "a mask (boolx4)"),
        ("let v: f32x4 = vload4(x, 0u32); let m: boolx2 = boolx2(true); let w: f32x4 = m ? v : v;",
         "a mask of as many lanes"),
        ("let v: f32x4 = vload4(x, 0u32); let m: boolx4 = v < v && v > v;", "not bool"),
        ("let v: f32x4 = vload4(x, 0u32); x[0] = v;", "stored value"),
        ("let v: f32x4 = vload4(x, 0u32); let w: i32x4 = v;", "declared i32x4"),
        ("let v: f32x4 = vload4(x, 0u32); let w: f32x2 = v;", "declared f32x2"),
        ("let v: f32x4 = vload4(x, 0u32); let c: f32 = v as f32;", "declared f32"),
        ("let v: f32x4 = vload4(x, 0u32); let w: f32x4 = v + f32x4(1.0) * 2.0;", "different types"),
        ("vstore(x, 0u32, i32x2(1));", "holds f32 elements"),
        ("let v: f32x4 = vload4(x, 0u32); let w: f32x4 = insert(v, 0, 1i32);", "`insert` of"),
    ];
    for (body, want) in cases {
        let src = format!("kernel k(x: ptr<global, f32>) {{ {body} }}");
        let e = errors(&src);
        assert!(e.contains(want), "{body}: expected `{want}`, got:\n{e}");
    }
    let e = errors("kernel k(v: f32x4) { }");
    assert!(e.contains("is a vector"), "{e}");
    let e = errors(
        "kernel k(x: ptr<global, f16>) { let v: f16x2 = vload2(x, 0u32); let w: f16x2 = v + v; }",
    );
    assert!(e.contains("f16"), "{e}");
}

#[test]
fn masks_and_lane_wise_casts_print_parse_and_run() {
    let m = parse(
        "kernel k(x: ptr<global, f32>, n: ptr<global, i32>) {
  let v: f32x4 = vload4(x, 0u32);
  let m: boolx4 = v > f32x4(1.0) | !(v == f32x4(-2.5));
  let c: boolx4 = boolx4(false, true, extract(m, 0), true);
  vstore(n, 0u32, m & c ? v as i32 : i32x4(-1));
  vstore(x, 0u32, (vload4(n, 0u32) + i32x4(1)) as f32);
}",
    );
    verify_module(&m).unwrap();
    let text = m.to_string();
    assert!(text.contains("v as i32"), "{text}");
    let back = parse(&text);
    assert!(back.kernels[0].body().is_equal(m.kernels[0].body()), "{text}");
    let mut bufs = vec![
        Buffer::from_slice(&[3.75f32, -2.5, 0.5, 1.0]),
        Buffer::zeroed(kiln_ir::Scalar::I32, 4),
    ];
    run(&m.kernels[0], &NdRange::new(&[1]), &[Arg::Buffer(0), Arg::Buffer(1)], &mut bufs).unwrap();
    // m = [T, F, T, T]; c = [F, T, T, T]; m & c = [F, F, T, T].
    assert_eq!(bufs[1].to_vec::<i32>().unwrap(), vec![-1, -1, 0, 1]);
    assert_eq!(bufs[0].to_vec::<f32>().unwrap(), vec![0.0, 0.0, 1.0, 2.0]);
}

#[test]
fn unprovable_misalignment_and_overrun_are_interpreter_errors() {
    let m = parse(
        "kernel k(x: ptr<global, f32>, o: u32) {
  vstore(x, o, vload4(x, 0u32));
}",
    );
    verify_module(&m).unwrap();
    let mut bufs = vec![Buffer::zeroed(kiln_ir::Scalar::F32, 8)];
    let err =
        run(&m.kernels[0], &NdRange::new(&[1]), &[Arg::Buffer(0), Arg::scalar(2u32)], &mut bufs)
            .unwrap_err()
            .to_string();
    assert!(err.contains("misaligned vector store `x[2]` of 4 lanes"), "{err}");
    let mut bufs = vec![Buffer::zeroed(kiln_ir::Scalar::F32, 6)];
    let err =
        run(&m.kernels[0], &NdRange::new(&[1]), &[Arg::Buffer(0), Arg::scalar(4u32)], &mut bufs)
            .unwrap_err()
            .to_string();
    assert!(err.contains("out of bounds"), "{err}");
    run(&m.kernels[0], &NdRange::new(&[1]), &[Arg::Buffer(0), Arg::scalar(0u32)], &mut bufs)
        .unwrap();
}

#[test]
fn vector_type_names_are_reserved() {
    assert!(parse_module("kernel k(f32x4: u32) { }").is_err());
    assert!(!kiln_ir::parse::is_identifier("i32x8"));
    assert!(kiln_ir::parse::is_identifier("i32x3"));
}
