//! Errors of optimized x86 code quote the source as the interpreter does: a division by zero
//! names the division as written (`` `x[i] / a[(i + 1) % 8]` ``), not what the passes made
//! of it (`` `cse0 / a[i + 1 & 7]` ``), after CSE, constant propagation, `let` inlining,
//! unrolling and vector lowering; and when several loads of a work-item fail, it names
//! the one the source reaches first, though CSE and `mad` fusion reorder loads. Each case
//! compares the whole error (kernel, work-item, message) with the interpreter's on the
//! source kernel.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::kernel;

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::interp::run;
use kiln_ir::launch::LaunchError;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Kernel;
use kiln_passes::manager::PassManager;
use kiln_runtime::device::cpu::CpuRun;
use proptest::prelude::*;

/// Runs the source kernel `k` on the interpreter and `program` (built from `k` one way or
/// another) on x86; both must fail with the same error, which is returned.
fn same_error(
    k: &Kernel,
    program: &Kernel,
    opts: &X86Options,
    range: &NdRange,
    args: &[Arg],
    bufs: &[Buffer],
) -> LaunchError {
    let want = run(k, range, args, &mut bufs.to_vec()).expect_err("the case must fail");
    let p = compile(program, opts).unwrap_or_else(|e| panic!("{e}\n{program}"));
    let got = p.run(range, args, &mut bufs.to_vec());
    assert_eq!(got, Err(want.clone()), "\nsource:\n{k}\nbuilt:\n{program}");
    want
}

/// `k` optimized by x86 `-O` (scalar and 8-lane code), against the interpreter.
fn optimized_agrees(k: &Kernel, range: &NdRange, args: &[Arg], bufs: &[Buffer]) -> LaunchError {
    let mut last = None;
    for scalar in [true, false] {
        let opts = X86Options { optimize: true, scalar, ..X86Options::default() };
        last = Some(same_error(k, k, &opts, range, args, bufs));
    }
    last.unwrap()
}

fn i32s(v: &[i32]) -> Buffer {
    Buffer::from_slice(v)
}

#[test]
fn a_division_whose_operands_cse_binds_quotes_the_source() {
    // The case: `x[i]` and `a[(i + 1) % 8]` repeat, so CSE binds them and the
    // simplifier turns `% 8` into `& 7`.
    let k = kernel(
        "kernel k(x: ptr<global, i32>, a: ptr<global, i32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           o[i] = x[i] / a[(i + 1) % 8] + x[i] * a[(i + 1) % 8];
         }",
    );
    let opt = kiln_passes::pipeline::optimize(&k);
    assert!(!opt.to_string().contains("x[i] / a[(i + 1) % 8]"), "nothing rewritten:\n{opt}");
    let bufs = [i32s(&[5; 16]), i32s(&[1, 2, 3, 0, 4, 5, 6, 7]), i32s(&[0; 16])];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
    let e = optimized_agrees(&k, &NdRange::new(&[16]), &args, &bufs);
    assert_eq!(e.message, "integer division by zero in `x[i] / a[(i + 1) % 8]`");
    assert_eq!(e.work_item, Some([2, 0, 0]));
}

#[test]
fn a_division_constant_propagation_and_let_inlining_rewrite_quotes_the_source() {
    // `n` folds into the division, `d` is inlined, `r % d` is repeated: the division and
    // the remainder still name `n / d` and `r % d`.
    let k = kernel(
        "kernel k(a: ptr<global, i32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           let n: i32 = 100;
           let d: i32 = a[i] - 3;
           let q: i32 = n / d;
           let r: i32 = a[i] + 1;
           o[i] = q + r % d + r % d;
         }",
    );
    let args = [Arg::Buffer(0), Arg::Buffer(1)];
    let range = NdRange::new(&[8]);
    let e = optimized_agrees(&k, &range, &args, &[i32s(&[1, 2, 3, 4, 5, 6, 7, 8]), i32s(&[0; 8])]);
    assert_eq!(e.message, "integer division by zero in `n / d`");
    // A divisor that constant propagation makes `d * 0`, in a repeated remainder.
    let k2 = kernel(
        "kernel k(a: ptr<global, i32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           let d: i32 = a[i] - 3;
           let r: i32 = a[i] + 1;
           let z: i32 = 0;
           o[i] = r % (d * z) + r % (d * z);
         }",
    );
    let e = optimized_agrees(&k2, &range, &args, &[i32s(&[4; 8]), i32s(&[0; 8])]);
    assert_eq!(e.message, "integer remainder by zero in `r % (d * z)`");
}

#[test]
fn a_division_inside_an_unrolled_loop_quotes_the_source() {
    // Unrolling binds `j` to a constant in each copy, which constant propagation and the
    // simplifier fold into the copies (`a[3]`, `a[0]`): each still names the source.
    let k = kernel(
        "kernel k(a: ptr<global, i32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           var s: i32 = 1000 + i as i32;
           for j: u32 in 0 .. 4 {
             s = s / a[j] + s % a[(j + 1) % 4];
           }
           o[i] = s;
         }",
    );
    let unrolled = PassManager::from_names("unroll,constprop,simplify,cse,let-opt,dce")
        .unwrap()
        .run(&kiln_passes::origin::record_origins(&k))
        .unwrap();
    assert!(!unrolled.to_string().contains("for "), "not unrolled:\n{unrolled}");
    let args = [Arg::Buffer(0), Arg::Buffer(1)];
    let range = NdRange::new(&[4]);
    for (a, want) in [
        (&[0, 1, 2, 3], "integer division by zero in `s / a[j]`"),
        (&[1, 2, 3, 0], "integer remainder by zero in `s % a[(j + 1) % 4]`"),
    ] {
        let bufs = [i32s(a), i32s(&[0; 4])];
        for scalar in [true, false] {
            let opts = X86Options { scalar, ..X86Options::default() };
            let e = same_error(&k, &unrolled, &opts, &range, &args, &bufs);
            assert_eq!(e.message, want);
        }
        assert_eq!(optimized_agrees(&k, &range, &args, &bufs).message, want);
    }
}

#[test]
fn a_lane_of_a_vector_division_is_named_as_the_interpreter_names_it() {
    // Vector lowering makes one scalar division per lane; each is "a lane of" the source's.
    let k = kernel(
        "kernel k(a: ptr<global, i32>, b: ptr<global, i32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0) * 4u32;
           let v: i32x4 = vload4(a, i);
           let w: i32x4 = vload4(b, i);
           vstore(o, i, v / w + v % w);
         }",
    );
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
    let bufs =
        [i32s(&[7; 16]), i32s(&[1, 2, 3, 4, 5, 6, 0, 8, 1, 1, 1, 1, 1, 1, 1, 1]), i32s(&[0; 16])];
    let range = NdRange::new(&[4]);
    let e = same_error(&k, &k, &X86Options::default(), &range, &args, &bufs);
    assert_eq!(e.message, "integer division by zero in a lane of `v / w`");
    assert_eq!(e.work_item, Some([1, 0, 0]));
    optimized_agrees(&k, &range, &args, &bufs);
}

#[test]
fn the_first_failing_load_of_the_source_is_the_one_named() {
    // At work-items 4.., `c[i]` and `a[i]` are both out of bounds; the source loads `c`
    // first. CSE binds the repeated `a[i]` (it must bind `c[i]` ahead of it) and `c + a * b`
    // is a `mad(a, b, c)` candidate (which would load `a` first).
    let k = kernel(
        "kernel k(a: ptr<global, i32>, b: ptr<global, i32>, c: ptr<global, i32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           o[i] = c[i] + a[i] * a[i];
           o[i] = c[i] + a[i] * b[i];
         }",
    );
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3)];
    let bufs = [i32s(&[3; 4]), i32s(&[2; 8]), i32s(&[1; 4]), i32s(&[0; 8])];
    let e = optimized_agrees(&k, &NdRange::new(&[8]), &args, &bufs);
    assert_eq!(e.message, "load `c[4]` out of bounds (buffer has 4 elements)");
    // The second statement alone: only the `mad` reorders it.
    let k = kernel(
        "kernel k(a: ptr<global, i32>, b: ptr<global, i32>, c: ptr<global, i32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           o[i] = c[i] + a[i] * b[i];
         }",
    );
    let e = optimized_agrees(&k, &NdRange::new(&[8]), &args, &bufs);
    assert_eq!(e.message, "load `c[4]` out of bounds (buffer has 4 elements)");
}

/// A random `t` (`i32` or `u32`) expression over loads of two buffers (`c`, `e` or `d`,
/// `f`), `i` and constants, with every integer operator, division and remainder included.
fn arb_int(t: &'static str, depth: u32) -> BoxedStrategy<String> {
    let leaf = match t {
        "i32" => prop_oneof![
            Just("c[i]".to_string()),
            Just("e[i]".to_string()),
            Just("(i as i32)".to_string()),
            (-9i32..9).prop_map(|v| format!("({v})")),
        ]
        .boxed(),
        _ => prop_oneof![
            Just("d[i]".to_string()),
            Just("f[i]".to_string()),
            Just("i".to_string()),
            (0u32..9).prop_map(|v| format!("{v}u32")),
        ]
        .boxed(),
    };
    if depth == 0 {
        return leaf;
    }
    let ops = vec!["+", "-", "*", "/", "%", "&", "|"];
    prop_oneof![
        1 => leaf,
        3 => (arb_int(t, depth - 1), prop::sample::select(ops), arb_int(t, depth - 1))
            .prop_map(|(a, op, b)| format!("({a} {op} {b})")),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("X86_FAULT_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]
    /// Random kernels whose divisions fail on the zeros of the buffers, and whose loads fail
    /// past their ends (the buffers are shorter than the range, and of different lengths):
    /// plain, `-O` scalar and `-O` 8-lane code give the interpreter's whole error (and its
    /// buffers when there is none).
    #[test]
    fn random_failing_kernels_give_the_interpreters_error(
        iv in arb_int("i32", 3),
        uv in arb_int("u32", 3),
        wv in arb_int("i32", 2),
    ) {
        let k = kernel(&format!(
            "kernel k(c: ptr<global, i32>, e: ptr<global, i32>, d: ptr<global, u32>,
                      f: ptr<global, u32>, oi: ptr<global, i32>, ou: ptr<global, u32>) {{
               let i: u32 = global_id(0);
               oi[i] = {iv};
               ou[i] = {uv} + {uv};
               oi[i] = {wv} - {iv};
             }}"
        ));
        let vals = |n: i32, s: i32| (0..n).map(|i| (i * s) % 7 - 2).collect::<Vec<i32>>();
        let bufs = [
            Buffer::from_slice(&vals(40, 3)),
            Buffer::from_slice(&vals(36, 5)),
            Buffer::from_slice(&vals(44, 2).iter().map(|&v| v.unsigned_abs()).collect::<Vec<u32>>()),
            Buffer::from_slice(&vals(40, 4).iter().map(|&v| v.unsigned_abs()).collect::<Vec<u32>>()),
            Buffer::zeroed(kiln_ir::Scalar::I32, 48),
            Buffer::zeroed(kiln_ir::Scalar::U32, 48),
        ];
        let args: Vec<Arg> = (0..6).map(Arg::Buffer).collect();
        let range = NdRange::new(&[48]).with_local(&[8]);
        let mut want = bufs.to_vec();
        let want_r = run(&k, &range, &args, &mut want);
        for (optimize, scalar) in [(false, true), (true, true), (true, false)] {
            let p = compile(&k, &X86Options { optimize, scalar, ..X86Options::default() }).unwrap();
            let mut got = bufs.to_vec();
            let r = p.run(&range, &args, &mut got);
            prop_assert_eq!(&r, &want_r, "-O {} scalar {}\n{}", optimize, scalar, k);
            // After an error, lanes past the failing one may have stored (x86_common).
            if want_r.is_ok() {
                let m = kiln_ir::testing::results_match(&want, &got);
                prop_assert!(m.is_ok(), "{:?}\n{}", m, k);
            }
        }
    }
}
