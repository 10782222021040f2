//! i64/u64 `/` and `%` of lanes by a constant (`backends/src/x86/spmd/div64const.rs`: a
//! 64-bit multiply by a magic number and shifts per lane instead of a `div`): results and
//! errors against the interpreter and the scalar code for constants of every class (±1,
//! powers of two, small, large, the top of the range, `i64::MIN`), dividends over the whole
//! range (multiples and their neighbours, the extremes, `i64::MIN / -1`), a constant 0 (the
//! interpreter's fault, as before), odd sizes and guards.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Imm, Scalar};

/// `n` dividends (bits) for `c`: the extremes, around its multiples, random ones.
fn dividends(signed: bool, c: u64, n: usize) -> Vec<u64> {
    let mut v = vec![0, 1, u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) - 1, c, c.wrapping_neg()];
    let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ c;
    while v.len() < n {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let r = s ^ (s >> 29);
        let r = r >> (r % 64);
        let q = if c == 0 {
            r
        } else if signed {
            (r as i64).wrapping_div(c as i64).wrapping_mul(c as i64) as u64
        } else {
            r / c * c
        };
        v.extend([r, q, q.wrapping_sub(1), q.wrapping_add(1), q.wrapping_neg()]);
    }
    v.truncate(n);
    v
}

fn check(ty: Scalar, c: u64, n: usize) {
    let signed = ty == Scalar::I64;
    let lit = if signed { format!("{}", c as i64) } else { format!("{c}") };
    let k = kernel(&format!(
        "kernel k(x: ptr<global, {ty}>, q: ptr<global, {ty}>, r: ptr<global, {ty}>, n: u32) {{
  let i: u32 = global_id(0);
  if i < n {{
    q[i] = x[i] / {lit}{ty};
    r[i] = x[i] % {lit}{ty};
  }}
}}"
    ));
    if avx2() && c != 0 {
        let l = vector_listing(&k);
        assert!(!l.iter().any(|l| l.starts_with("div ") || l.starts_with("idiv ")), "{ty} {c}");
    }
    let x = dividends(signed, c, n);
    let imms: Vec<Imm> = x.iter().map(|&v| Imm::Int(ty, v)).collect();
    let bufs =
        vec![Buffer::from_imms(ty, &imms).unwrap(), Buffer::zeroed(ty, n), Buffer::zeroed(ty, n)];
    let range = NdRange::new(&[n.next_multiple_of(32) as u32]).with_local(&[32]);
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n as u32)];
    agree(&k, &range, &args, &bufs, &format!("{ty} by {lit}, n {n}"));
}

#[test]
fn u64_lanes_divided_by_constants_match_the_interpreter() {
    let cs = [1u64, 2, 3, 7, 10, 1 << 32, (1 << 32) + 1, 1_000_000_007, 1 << 63, u64::MAX, 0];
    for (j, &c) in cs.iter().enumerate() {
        check(Scalar::U64, c, 301 + 2 * j);
    }
}

#[test]
fn i64_lanes_divided_by_constants_truncate_and_wrap_like_the_interpreter() {
    let cs = [1i64, -1, 2, -2, 3, -7, 10, -(1 << 40), i64::MAX, i64::MIN, i64::MIN + 1, 0];
    for (j, &c) in cs.iter().enumerate() {
        check(Scalar::I64, c as u64, 299 + 2 * j);
    }
}
