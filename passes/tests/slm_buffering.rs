//! SLM buffering injection (`slm-buffer`), by hand: a single-buffered tiled loop becomes
//! double-buffered and computes the same (checked on the interpreter in both schedules),
//! and each condition of exactness, when broken, leaves the kernel alone. Generated GEMM
//! kernels are checked in kiln-gen's tests.

use kiln_ir::interp::{run_with, RunOptions};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{parse_module, verify_kernel, Kernel};
use kiln_passes::slm_buffering::{slm_buffer, slm_double_buffer, slm_triple_buffer};

/// A work-group of 4 sums 16 elements per step through a 4-element local tile; the tile is
/// masked past the input's end (18 elements).
const TILED: &str = "kernel k(x: ptr<global, i32>, o: ptr<global, i32>) {
  local t: i32[4];
  let l: u32 = local_id(0);
  var s: i32 = 0;
  for kt: u32 in 0u32 .. 5u32 {
    if kt * 4u32 + l < 18u32 { t[l] = x[kt * 4u32 + l]; } else { t[l] = 0; }
    barrier(local);
    for j: u32 in 0u32 .. 4u32 { s = s + t[j] * (l as i32 + 1); }
    barrier(local);
  }
  o[global_id(0)] = s;
}";

fn run(k: &Kernel, reverse: bool) -> Vec<i32> {
    let mut bufs = vec![
        Buffer::from_slice(&(0..20).map(|i| i * 3 - 7).collect::<Vec<i32>>()),
        Buffer::zeroed(kiln_ir::Scalar::I32, 8),
    ];
    let opts = RunOptions { reverse_order: reverse, ..RunOptions::default() };
    run_with(
        k,
        &NdRange::new(&[8]).with_local(&[4]),
        &[Arg::Buffer(0), Arg::Buffer(1)],
        &mut bufs,
        &opts,
    )
    .unwrap_or_else(|e| panic!("{e}\n{k}"));
    bufs[1].to_vec::<i32>().unwrap()
}

fn kernel(src: &str) -> Kernel {
    parse_module(src).unwrap_or_else(|e| panic!("{e}")).kernels.remove(0)
}

#[test]
fn tiled_loop_is_double_buffered_and_exact() {
    let k = kernel(TILED);
    let k2 = slm_double_buffer(&k);
    verify_kernel(&k2).unwrap_or_else(|e| panic!("{e:?}\n{k2}"));
    let out = k2.to_string();
    assert!(out.contains("local t: i32[8];"), "{out}");
    assert_eq!(out.matches("barrier(local)").count(), 2, "{out}");
    assert!(out.contains("let kt_slot: u32 = kt % 2;"), "{out}");
    let want = run(&k, false);
    assert_eq!(run(&k2, false), want);
    assert_eq!(run(&k2, true), want);
    assert!(slm_double_buffer(&k2).ptr_eq(&k2), "a second run changed it");
    assert!(parse_module(&out).unwrap().kernels[0].is_equal(&k2));
}

#[test]
fn tiled_loop_is_triple_buffered_and_exact() {
    let k = kernel(TILED);
    let k3 = slm_triple_buffer(&k);
    verify_kernel(&k3).unwrap_or_else(|e| panic!("{e:?}\n{k3}"));
    let out = k3.to_string();
    assert!(out.contains("local t: i32[12];"), "{out}");
    assert_eq!(out.matches("barrier(local)").count(), 2, "{out}");
    assert!(out.contains("let kt_slot: u32 = kt % 3;"), "{out}");
    assert!(out.contains("let kt_first1: u32 = 1;"), "{out}");
    let want = run(&k, false);
    assert_eq!(run(&k3, false), want);
    assert_eq!(run(&k3, true), want);
    assert!(parse_module(&out).unwrap().kernels[0].is_equal(&k3));
    // Loops of one and two steps: the prologue loads only the tiles that exist.
    for trips in [1, 2] {
        let src = TILED.replace("0u32 .. 5u32", &format!("0u32 .. {trips}u32"));
        let k = kernel(&src);
        let k3 = slm_triple_buffer(&k);
        assert!(!k3.ptr_eq(&k));
        assert_eq!(run(&k3, false), run(&k, false), "{k3}");
    }
    // Depths other than 2 and 3 leave the kernel alone.
    assert!(slm_buffer(&k, 4).ptr_eq(&k));
}

/// Each broken condition leaves the kernel as it is.
#[test]
fn unsafe_loops_are_left_alone() {
    let cases = [
        // The load's index depends on the step: later steps would see stale halves.
        (
            "index depends on kt",
            "t[l] = x[kt * 4u32 + l];",
            "t[(l + kt) % 4u32] = x[kt * 4u32 + l];",
        ),
        // The compute stores to global memory, which a moved-up load might read.
        ("compute stores globally", "s = s + t[j] * (l as i32 + 1);", "o[l] = t[j];"),
        // The load reads a var that the compute changes.
        ("load reads a var", "t[l] = x[kt * 4u32 + l];", "t[l] = s;"),
        // A masked copy whose branches write different elements.
        ("branches differ", "} else { t[l] = 0; }", "} else { t[0u32] = 0; }"),
        // The load reads the tile.
        ("load reads the tile", "t[l] = x[kt * 4u32 + l];", "t[l] = t[l] + 1;"),
        // A loop bound that is not constant.
        ("variable bound", "0u32 .. 5u32", "0u32 .. l"),
    ];
    for (why, from, to) in cases {
        assert!(TILED.contains(from), "{why}");
        let k = kernel(&TILED.replace(from, to));
        verify_kernel(&k).unwrap_or_else(|e| panic!("{why}: {e:?}"));
        assert!(slm_double_buffer(&k).ptr_eq(&k), "{why}: changed\n{}", slm_double_buffer(&k));
    }
    // The tile is used after the loop too.
    let k = kernel(&TILED.replace("o[global_id(0)] = s;", "o[global_id(0)] = s + t[0u32];"));
    assert!(slm_double_buffer(&k).ptr_eq(&k), "tile used after the loop");
    // One barrier only.
    let k = kernel(&TILED.replacen("    barrier(local);\n", "", 1));
    assert!(slm_double_buffer(&k).ptr_eq(&k), "single barrier");
}
