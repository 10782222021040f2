//! CSE on statements whose repeats include a load that may fail, evaluated after other
//! operands that may fail and that share a smaller repeat with the rest of the statement
//! (`select` evaluates both arms, so such a statement has them all at once). The failing
//! repeat's operands get `let`s first (`let cse2 = x[i]`), which makes a new repeat of
//! their own (`0.5 * cse2`): its `let` must come after `cse2`'s, not at the statement's
//! first `let` (where it read `cse2` before its binding: "use of unbound variable").
//! Each kernel's output verifies, and the interpreter gives the same buffers after CSE and
//! after the default pipeline as before. Random kernels of this shape: `differential.rs`.

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::{results_match, TestCase};
use kiln_ir::{parse_module, verify_kernel, Kernel, Scalar};
use kiln_passes::cse::cse;
use kiln_passes::pipeline::optimize;

/// `src`'s kernel `k(x: f32[], ix: u32[], o: f32[])` on 56 work-items, with 64-element
/// buffers `x[j] = j + 0.25`, `ix[j] = j` and `o` zeroed.
fn case(src: &str) -> TestCase {
    let kernel = parse_module(src).expect("parses").kernels.remove(0);
    let x: Vec<f32> = (0..64).map(|j| j as f32 + 0.25).collect();
    let ix: Vec<u32> = (0..64).collect();
    TestCase {
        kernel,
        range: NdRange::new(&[56]).with_local(&[8]),
        args: (0..3).map(Arg::Buffer).collect(),
        buffers: vec![
            Buffer::from_slice(&x),
            Buffer::from_slice(&ix),
            Buffer::zeroed(Scalar::F32, 64),
        ],
    }
}

/// Runs `f` on the case's kernel: the result verifies and the interpreter gives the same
/// buffers as on the input. Returns the printed result.
fn check(c: &TestCase, f: fn(&Kernel) -> Kernel) -> String {
    let want = c.run().expect("original runs");
    let k2 = f(&c.kernel);
    verify_kernel(&k2).unwrap_or_else(|e| panic!("output does not verify: {e:?}\n{k2}"));
    let got = c.run_kernel(&k2).unwrap_or_else(|e| panic!("{e}\n{k2}"));
    results_match(&want, &got)
        .unwrap_or_else(|m| panic!("{m}\n--- input\n{}\n--- output\n{k2}", c.kernel));
    k2.to_string()
}

/// Both checks, CSE alone and the default pipeline; returns CSE's output.
fn check_both(src: &str) -> String {
    let c = case(src);
    check(&c, optimize);
    check(&c, cse)
}

/// The smallest statement of the shape: `x[ix[i + 1]]` (the largest repeat, may fail) is
/// evaluated after `x[i]` and the `select`, which get `let`s first; `0.5 * x[i]` then
/// repeats in the `select`'s `let` and the statement.
#[test]
fn a_repeat_of_a_failing_repeats_operands_is_bound_after_them() {
    let out = check_both(
        "kernel k(x: ptr<global, f32>, ix: ptr<global, u32>, o: ptr<global, f32>) {
  let i: u32 = global_id(0);
  o[i] = x[i] + select(i < 3u32, 0.5 * x[i], 0.5) * x[ix[i + 1u32]] + (x[ix[i + 1u32]] + 0.5 * x[i]);
}",
    );
    let want = "kernel k(x: ptr<global, f32>, ix: ptr<global, u32>, o: ptr<global, f32>) {
  let i: u32 = global_id(0);
  let cse2: f32 = x[i];
  let cse3: f32 = 0.5 * cse2;
  let cse1: f32 = i < 3 ? cse3 : 0.5;
  let cse0: f32 = x[ix[i + 1]];
  o[i] = cse2 + cse1 * cse0 + (cse0 + cse3);
}";
    assert_eq!(out, want);
}

/// The same with a mutable variable in the new repeat: not stable, bound within the
/// statement only, and after `cse2` too.
#[test]
fn an_unstable_repeat_of_a_failing_repeats_operands_is_bound_after_them() {
    let out = check_both(
        "kernel k(x: ptr<global, f32>, ix: ptr<global, u32>, o: ptr<global, f32>) {
  let i: u32 = global_id(0);
  var s: f32 = 0.5;
  s = s + 1.0;
  o[i] = x[i] + select(i < 3u32, s * x[i], 0.5) * x[ix[i + 1u32]] + (x[ix[i + 1u32]] + s * x[i]);
}",
    );
    let (a, b) = (out.find("let cse2").expect("x[i] bound"), out.find("let cse3").expect("bound"));
    assert!(a < b, "{out}");
}

/// The kernel the bug was found with, reduced: the repeats in the condition and both arms
/// of a `select`.
#[test]
fn repeats_across_a_selects_condition_and_arms() {
    check_both(
        "kernel k(x: ptr<global, f32>, ix: ptr<global, u32>, o: ptr<global, f32>) {
  let i: u32 = global_id(0);
  o[i] = select(0.5 < (x[i] + (select(0.5 < 0.5, (0.5 * x[i]), 0.5) * x[ix[(i + 1u32) & 63u32]])), 0.5, (0.5 * (((x[ix[(i + 1u32) & 63u32]] - 0.5) + (0.5 * x[i])) * 0.5)));
}",
    );
    check_both(
        "kernel k(x: ptr<global, f32>, ix: ptr<global, u32>, o: ptr<global, f32>) {
  let i: u32 = global_id(0);
  o[i] = select(x[i] < 0.5 * x[i], x[ix[i + 1u32]], 0.5 * x[i] - x[ix[i + 1u32]]);
}",
    );
}

/// The kernel that gave wrong results on the CPU (release builds do not verify between
/// passes): `min` and `select`s around repeated `x[i]` and `x[ix[i] + 3]`.
#[test]
fn repeats_in_selects_and_min_keep_their_results() {
    check_both(
        "kernel k(x: ptr<global, f32>, ix: ptr<global, u32>, o: ptr<global, f32>) {
  let i: u32 = global_id(0);
  o[i] = ((0.5 + select((0.5 - x[i]) < 0.5, 0.5, 0.5)) + ((min((x[i] + x[ix[i] + 3u32]), x[ix[i] + 3u32]) + 0.5) + (0.5 + select(0.5 < x[i], (0.5 - x[i]), 0.5))));
}",
    );
}
