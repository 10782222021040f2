//! Atomics of several kinds on buffers whose indices differ modulo a power of two (per-bin
//! minima and maxima interleaved, `m[2 * b]` and `m[2 * b + 1]`): they never touch the same
//! element, so the 8-lane code runs them in batch order (`backends/src/x86/spmd/atomic.rs`).
//! Results and errors against the interpreter and the scalar code, with colliding bins,
//! parameters bound to the same buffer, guards and odd sizes; indices that may meet keep the
//! kernel on the scalar code.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, fallback, kernel, three_ways};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_runtime::device::cpu::{CpuRun, CpuRunOptions};

/// Keys with many collisions in `bins` bins, and values in the whole u32 range.
fn keys_vals(n: usize, bins: u32) -> (Vec<u32>, Vec<u32>) {
    let mut s = 0x1234_5678u32;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        s
    };
    let keys = (0..n).map(|_| next() % bins).collect();
    let vals = (0..n).map(|_| next()).collect();
    (keys, vals)
}

const MINMAX: &str =
    "kernel k(keys: ptr<global, u32>, vals: ptr<global, u32>, mm: ptr<global, u32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let b: u32 = keys[i] & 63;
    let v: u32 = vals[i];
    atomic_min(mm, 2 * b, v);
    atomic_max(mm, 2 * b + 1, v);
  }
}";

fn init_minmax(bins: usize) -> Vec<u32> {
    (0..2 * bins).map(|j| if j % 2 == 0 { u32::MAX } else { 0 }).collect()
}

#[test]
fn interleaved_minima_and_maxima_run_on_the_lanes_and_match() {
    let k = kernel(MINMAX);
    assert_eq!(fallback(&k), None);
    for (n, local) in [(1000usize, 64u32), (37, 8), (4099, 256), (8, 8)] {
        let (keys, vals) = keys_vals(n, 64);
        let bufs = vec![
            Buffer::from_slice(&keys),
            Buffer::from_slice(&vals),
            Buffer::from_slice(&init_minmax(64)),
        ];
        let range = NdRange::new(&[n.next_multiple_of(local as usize) as u32]).with_local(&[local]);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n as u32)];
        agree(&k, &range, &args, &bufs, &format!("n = {n}"));
    }
}

#[test]
fn an_index_past_the_end_is_the_interpreters_error() {
    let k = kernel(MINMAX);
    let (keys, vals) = keys_vals(300, 64);
    // 100 elements: bins from 50 on are out of bounds, the max's before the min's at 49.
    let bufs =
        vec![Buffer::from_slice(&keys), Buffer::from_slice(&vals), Buffer::from_slice(&[7u32; 99])];
    let range = NdRange::new(&[320]).with_local(&[64]);
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(300u32)];
    three_ways(&k, &range, &args, &bufs);
}

#[test]
fn two_parameters_bound_to_one_buffer_keep_their_residues() {
    // `lo` and `hi` may be the same buffer: equal indices are then the same element, and
    // the residues still keep the minima apart from the maxima; an exchange and a count
    // at residues 1 and 2 of 4 stay apart as well.
    let k = kernel(
        "kernel k(keys: ptr<global, u32>, vals: ptr<global, u32>, lo: ptr<global, u32>, hi: ptr<global, u32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let j: u32 = (keys[i] & 31) << 2;
    atomic_min(lo, j, vals[i]);
    atomic_max(hi, j | 3, vals[i]);
    atomic_xchg(lo, j + 1, i);
    atomic_add(hi, 4 * (keys[i] & 31) + 2, 1);
  }
}",
    );
    assert_eq!(fallback(&k), None);
    let n = 777usize;
    let (keys, vals) = keys_vals(n, 1 << 20);
    let init: Vec<u32> = (0..128).map(|j| if j % 4 == 0 { u32::MAX } else { 5 }).collect();
    let bufs =
        vec![Buffer::from_slice(&keys), Buffer::from_slice(&vals), Buffer::from_slice(&init)];
    let range = NdRange::new(&[800]).with_local(&[32]);
    for (lo, hi) in [(2usize, 2usize), (2, 3)] {
        let mut bufs = bufs.clone();
        bufs.push(Buffer::from_slice(&init));
        let args = [
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(lo),
            Arg::Buffer(hi),
            Arg::scalar(n as u32),
        ];
        agree(&k, &range, &args, &bufs, &format!("lo {lo}, hi {hi}"));
    }
}

#[test]
fn indices_that_may_meet_keep_the_scalar_code() {
    for (a, b) in [
        ("2 * b", "2 * b + 2"),
        ("2 * b", "b"),
        ("b << 1", "4 * b + 1 - 1"),
        ("2 * b", "2 * b + 1 + x"),
    ] {
        let src = format!(
            "kernel k(keys: ptr<global, u32>, vals: ptr<global, u32>, mm: ptr<global, u32>, n: u32, x: u32) {{
  let i: u32 = global_id(0);
  if i < n {{
    let b: u32 = keys[i] & 15;
    atomic_min(mm, {a}, vals[i]);
    atomic_max(mm, {b}, vals[i]);
  }}
}}"
        );
        let k = kernel(&src);
        if avx2() {
            assert!(fallback(&k).is_some(), "{a} and {b} may meet:\n{k}");
        }
        let n = 200usize;
        let (keys, vals) = keys_vals(n, 16);
        let bufs = vec![
            Buffer::from_slice(&keys),
            Buffer::from_slice(&vals),
            Buffer::from_slice(&[9u32; 64]),
        ];
        let range = NdRange::new(&[256]).with_local(&[64]);
        let args = [
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::scalar(n as u32),
            Arg::scalar(2u32),
        ];
        three_ways(&k, &range, &args, &bufs);
    }
}

/// On several threads, work-items of every group contend for the same few bins: results
/// must still be the interpreter's (min and max do not depend on the order), and a min or max
/// that leaves the element as read skips its locked write (the compare before
/// `lock cmpxchg`), which is what keeps contended bins from costing a locked write each.
#[test]
fn contended_bins_on_several_threads_match_and_skip_unchanged_writes() {
    if !avx2() {
        return kiln_ir::testing::skip("no AVX2: no 8-lane code");
    }
    let k = kernel(&MINMAX.replace("& 63", "& 3"));
    let p = compile(&k, &X86Options::default()).unwrap();
    assert!(p.has_spmd());
    let listing = x86_common::vector_listing(&k);
    let cas = listing.iter().position(|l| l.starts_with("lock cmpxchg")).expect("a CAS loop");
    assert!(
        listing[..cas].iter().rev().take(3).any(|l| l.starts_with("je ")),
        "no skip of an unchanged value before the locked write:\n{}",
        listing.join("\n")
    );
    let n = 20_011usize;
    let (keys, vals) = keys_vals(n, 4);
    let bufs = vec![
        Buffer::from_slice(&keys),
        Buffer::from_slice(&vals),
        Buffer::from_slice(&init_minmax(64)),
    ];
    let range = NdRange::new(&[n.next_multiple_of(64) as u32]).with_local(&[64]);
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n as u32)];
    let mut want = bufs.clone();
    kiln_ir::interp::run(&k, &range, &args, &mut want).unwrap();
    for threads in [2, 4] {
        let mut got = bufs.clone();
        p.run_parallel(&range, &args, &mut got, threads, &CpuRunOptions::default()).unwrap();
        kiln_ir::testing::results_match(&want, &got)
            .unwrap_or_else(|m| panic!("{threads} threads: {m}"));
    }
}
