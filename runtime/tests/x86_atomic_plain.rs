//! Atomic `min`, `max`, `and`, `or` and `xor` at lane-varying indices where one thread runs
//! the launch: each lane's operation is a plain read-modify-write with the value loaded
//! once (`backends/src/x86/spmd/atomic.rs`, `atomic_lanes`). Results and errors against
//! the interpreter and the scalar code, signed and unsigned, with lanes of one batch on the
//! same element (few bins), guards over ranges rounded up to the group size, partial
//! batches, an index out of bounds in a later batch, and an atomic whose old value is used.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, three_ways, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};

/// Keys in `0..bins` (many repeats within a batch when `bins` is small) and values over
/// the whole 32-bit range.
fn keys_vals(n: usize, bins: u32, seed: u32) -> (Vec<u32>, Vec<u32>) {
    let mut s = seed | 1;
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

/// A kernel of two atomics of kinds `a` and `b` on interleaved elements `2 * k` and
/// `2 * k + 1` of `m`, values of type `ty`.
fn interleaved(a: &str, b: &str, ty: &str) -> kiln_ir::Kernel {
    x86_common::kernel(&format!(
        "kernel k(keys: ptr<global, u32>, vals: ptr<global, {ty}>, m: ptr<global, {ty}>, n: u32, bins: u32) {{
  let i: u32 = global_id(0);
  if i < n {{
    let k: u32 = keys[i] % bins;
    let v: {ty} = vals[i];
    atomic_{a}(m, 2 * k, v);
    atomic_{b}(m, 2 * k + 1, v);
  }}
}}"
    ))
}

/// Whether the vector listing has the plain form of each given instruction text.
fn uses(k: &kiln_ir::Kernel, wanted: &[&str]) {
    if !avx2() {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
        return;
    }
    let listing = vector_listing(k);
    for w in wanted {
        assert!(
            listing.iter().any(|l| l.starts_with(w) && (l.ends_with("r11d") || l.ends_with("eax"))),
            "no `{w}` of the plain lanes:\n{}",
            listing.join("\n")
        );
    }
}

fn buffers(keys: &[u32], vals: &[u32], init: &[u32], ty: &str) -> Vec<Buffer> {
    let as_ty = |x: &[u32]| match ty {
        "i32" => Buffer::from_slice(&x.iter().map(|&v| v as i32).collect::<Vec<_>>()),
        _ => Buffer::from_slice(x),
    };
    vec![Buffer::from_slice(keys), as_ty(vals), as_ty(init)]
}

fn run_sizes(k: &kiln_ir::Kernel, ty: &str, init_even: u32, init_odd: u32) {
    // (n, group size, bins): partial batches, odd sizes, one bin (every lane on one
    // element), a few bins (repeats in a batch) and many.
    for (n, local, bins) in
        [(1000usize, 64u32, 3u32), (37, 8, 1), (4099, 256, 1024), (8, 8, 2), (301, 16, 5)]
    {
        let (keys, vals) = keys_vals(n, 1 << 16, n as u32 * 31 + bins);
        let init: Vec<u32> =
            (0..2 * bins).map(|j| if j % 2 == 0 { init_even } else { init_odd }).collect();
        let bufs = buffers(&keys, &vals, &init, ty);
        let range = NdRange::new(&[n.next_multiple_of(local as usize) as u32]).with_local(&[local]);
        let args = [
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::scalar(n as u32),
            Arg::scalar(bins),
        ];
        agree(k, &range, &args, &bufs, &format!("n = {n}, bins = {bins}\n{k}"));
    }
}

#[test]
fn unsigned_minima_and_maxima_match() {
    let k = interleaved("min", "max", "u32");
    uses(&k, &["cmovb r11d", "cmova r11d"]);
    run_sizes(&k, "u32", u32::MAX, 0);
}

#[test]
fn signed_minima_and_maxima_match() {
    let k = interleaved("min", "max", "i32");
    uses(&k, &["cmovl r11d", "cmovg r11d"]);
    run_sizes(&k, "i32", i32::MAX as u32, i32::MIN as u32);
}

#[test]
fn bitwise_operations_match() {
    let k = interleaved("and", "or", "u32");
    uses(&k, &["and [", "or ["]);
    run_sizes(&k, "u32", u32::MAX, 0);
    let k = interleaved("xor", "xor", "u32");
    uses(&k, &["xor ["]);
    run_sizes(&k, "u32", 0x5555_5555, 7);
}

#[test]
fn an_index_past_the_end_in_a_later_batch_is_the_interpreters_error() {
    for (a, b) in [("min", "max"), ("and", "xor")] {
        let k = interleaved(a, b, "u32");
        // 60 bins, 101 elements: bin 50's max (element 101) is the first out of bounds;
        // the keys put the first such lane in a later batch.
        let n = 700usize;
        let (mut keys, vals) = keys_vals(n, 50, 9);
        keys[437] = 50;
        keys[600] = 59;
        let bufs = buffers(&keys, &vals, &[3u32; 101], "u32");
        let range = NdRange::new(&[704]).with_local(&[64]);
        let args = [
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::scalar(n as u32),
            Arg::scalar(60u32),
        ];
        assert_eq!(three_ways(&k, &range, &args, &bufs), avx2(), "{k}");
    }
}

#[test]
fn an_old_value_that_is_used_matches() {
    // One atomic whose result is stored: the old value of each lane, in lane order (the
    // memory-destination form, which has none, must not be used).
    for op in ["or", "max", "xor"] {
        let k = x86_common::kernel(&format!(
            "kernel k(keys: ptr<global, u32>, vals: ptr<global, u32>, m: ptr<global, u32>, old: ptr<global, u32>, n: u32) {{
  let i: u32 = global_id(0);
  if i < n {{
    let o: u32 = atomic_{op}(m, keys[i] % 3, vals[i]);
    old[i] = o;
  }}
}}"
        ));
        let n = 203usize;
        let (keys, vals) = keys_vals(n, 3, 77);
        let bufs = vec![
            Buffer::from_slice(&keys),
            Buffer::from_slice(&vals),
            Buffer::from_slice(&[1u32, 2, 3]),
            Buffer::zeroed(kiln_ir::Scalar::U32, n),
        ];
        let range = NdRange::new(&[208]).with_local(&[16]);
        let args =
            [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3), Arg::scalar(n as u32)];
        agree(&k, &range, &args, &bufs, op);
    }
}
