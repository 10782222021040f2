//! Groups of interleaved stores (`o[s * i + k]` for every k of 0..s, the element stores of a
//! `vstore`), which the 8-lane code writes as one transpose and `s` vector stores (32-bit
//! elements) or packed, shuffled bytes (8-bit at strides 2 to 4, 16-bit at stride 2) when
//! the span is in bounds, and store by store otherwise. Each case compares results and
//! errors with the interpreter and the scalar code: spans past the end (a lane's last
//! element faults, the group's first stores done), wrapping and negative indices, guards
//! and masks, odd sizes, shuffled orders, values that read the array (no group).
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vals, vector_listing};

use kiln_ir::launch::{Arg, NdRange};
use kiln_ir::Scalar;

fn elem(ty: &str) -> Scalar {
    Scalar::ALL.iter().copied().find(|e| e.to_string() == ty).unwrap()
}

/// The stores of a group of `o`, in `order`, with base `base` (`+ k` after it), each value
/// `v(k)`.
fn group(base: &str, order: &[u32], v: &dyn Fn(u32) -> String) -> String {
    order.iter().map(|&k| format!("o[{base} + {k}u32] = {};\n", v(k))).collect()
}

/// The launches of the tests: (n, global size, extra elements of `o` past `s * global`).
const SIZES: [(u32, u32, i64); 6] =
    [(37, 40, 0), (64, 64, 0), (64, 64, -1), (61, 64, 9), (8, 8, 0), (9, 16, -2)];

#[test]
fn dword_groups_agree_with_the_interpreter() {
    for ty in ["f32", "u32", "i32"] {
        for s in [2u32, 3, 4, 5, 8] {
            let fwd: Vec<u32> = (0..s).collect();
            let rev: Vec<u32> = (0..s).rev().collect();
            let v = |k: u32| format!("xv * {}{ty} + {k}{ty}", k + 2);
            // Guarded with a `let` base in order, unguarded inline in reverse order, a
            // uniform offset, under a divergent mask.
            let bodies = [
                format!("if i < n {{ let p: u32 = {s}u32 * i;\n{} }}", group("p", &fwd, &v)),
                group(&format!("i * {s}u32"), &rev, &v),
                format!("if i < n {{ {} }}", group(&format!("{s}u32 * i + b"), &fwd, &v)),
                format!("if (i & 2u32) == 0u32 {{ {} }}", group(&format!("{s}u32 * i"), &rev, &v)),
                group(&format!("{s}u32 * i"), &fwd, &|k| format!("x[i] + {k}{ty}")),
            ];
            for (f, body) in bodies.iter().enumerate() {
                let k = kernel(&format!(
                    "kernel k(o: ptr<global, {ty}>, x: ptr<global, {ty}>, n: u32, b: u32) {{
                       let i: u32 = global_id(0);
                       let xv: {ty} = x[i];
                       {body}
                     }}"
                ));
                for (n, global, extra) in SIZES {
                    for b in [0u32, 1, u32::MAX - 2] {
                        let len = (i64::from(s * global) + extra).max(1) as usize;
                        let args =
                            vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(b)];
                        let bufs = vec![vals(elem(ty), len, 1), vals(elem(ty), global as usize, 2)];
                        let what = format!("{ty} s={s} form={f} n={n} len={len} b={b}");
                        let r = NdRange::new(&[global]).with_local(&[8]);
                        agree(&k, &r, &args, &bufs, &what);
                    }
                }
                if f == 0 && matches!(s, 3 | 4) && avx2() {
                    // One span test per group: no masked or per-lane store in the unmasked
                    // batches (the tail's masked stores and the fallback remain).
                    let text = vector_listing(&k).join("\n");
                    let shuffle = if s == 4 { "vunpcklpd" } else { "vblendps" };
                    assert!(text.contains(shuffle), "{text}");
                }
            }
        }
    }
}

#[test]
fn signed_groups_fault_as_the_interpreter() {
    // `i32` indices: a negative base (the first lanes fault at their first store), a span
    // past the end, a store faulting between two of the group.
    let k = kernel(
        "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, b: i32) {
           let i: i32 = global_id(0) as i32;
           let p: i32 = 3 * i + b;
           let v: f32 = x[i];
           o[p] = v;
           o[p + 1] = v * 2.0;
           o[p + 2] = v + 1.0;
         }",
    );
    for (b, len) in [(0i32, 96usize), (-1, 96), (-3, 96), (-30, 200), (0, 95), (1, 96), (2, 300)] {
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(b)];
        let bufs = vec![vals(Scalar::F32, len, 1), vals(Scalar::F32, 32, 2)];
        agree(&k, &NdRange::new(&[32]), &args, &bufs, &format!("b={b} len={len}"));
    }
}

#[test]
fn vstores_agree_with_the_interpreter() {
    let premul = kernel(
        "kernel premul(px: ptr<global, f32>, out: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             let p: f32x4 = vload4(px, 4 * i);
             let a: f32 = extract(p, 3);
             let q: f32x4 = p * f32x4(a, a, a, 1.0);
             vstore(out, 4 * i, min(q, f32x4(1.0)));
           }
         }",
    );
    let pairs = kernel(
        "kernel pairs(x: ptr<global, i32>, out: ptr<global, i32>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             let v: i32 = x[i];
             vstore(out, 2 * i, i32x2(v + 1, v * 3));
           }
         }",
    );
    for n in [1u32, 7, 8, 9, 33, 100] {
        let r = NdRange::new(&[n.div_ceil(8) * 8]).with_local(&[8]);
        for extra in [0i64, -1, 3] {
            let len = |m: u32| (i64::from(m * n) + extra).max(1) as usize;
            let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
            let bufs = [vals(Scalar::F32, 4 * n as usize, 1), vals(Scalar::F32, len(4), 2)];
            agree(&premul, &r, &args, &bufs, &format!("premul {n} {extra}"));
            let bufs = [vals(Scalar::I32, n as usize, 1), vals(Scalar::I32, len(2), 2)];
            agree(&pairs, &r, &args, &bufs, &format!("pairs {n} {extra}"));
        }
    }
    if avx2() {
        let text = vector_listing(&premul).join("\n");
        assert!(text.contains("vunpcklpd") && text.contains("vperm2f128"), "{text}");
    } else {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
}

#[test]
fn narrow_groups_agree_with_the_interpreter() {
    // 8-bit groups at strides 2 to 4 and 16-bit ones at 2 (packed, shuffled), others store
    // by store; signed and unsigned, values over the whole range (wrapping casts).
    for (ty, strides) in
        [("u8", &[2u32, 3, 4, 5][..]), ("i8", &[2, 3, 4]), ("u16", &[2, 3]), ("i16", &[2])]
    {
        for &s in strides {
            let fwd: Vec<u32> = (0..s).collect();
            let mixed: Vec<u32> = (0..s).map(|k| (k + 1) % s).collect();
            let v = |k: u32| format!("(xv * {} + {k}) as {ty}", 37 + 64 * k);
            let bodies = [
                format!("if i < n {{ let p: u32 = {s}u32 * i;\n{} }}", group("p", &fwd, &v)),
                group(&format!("{s}u32 * i + b"), &mixed, &v),
                format!("if (i & 4u32) == 0u32 {{ {} }}", group(&format!("{s}u32 * i"), &fwd, &v)),
            ];
            for (f, body) in bodies.iter().enumerate() {
                let k = kernel(&format!(
                    "kernel k(o: ptr<global, {ty}>, x: ptr<global, i32>, n: u32, b: u32) {{
                       let i: u32 = global_id(0);
                       let xv: i32 = x[i];
                       {body}
                     }}"
                ));
                for (n, global, extra) in SIZES {
                    for b in [0u32, 2, u32::MAX] {
                        let len = (i64::from(s * global) + extra).max(1) as usize;
                        let args =
                            vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(b)];
                        let bufs =
                            vec![vals(elem(ty), len, 1), vals(Scalar::I32, global as usize, 2)];
                        let what = format!("{ty} s={s} form={f} n={n} len={len} b={b}");
                        let r = NdRange::new(&[global]).with_local(&[8]);
                        agree(&k, &r, &args, &bufs, &what);
                    }
                }
                if f == 0 && avx2() {
                    // The group's packed, shuffled store.
                    let text = vector_listing(&k).join("\n");
                    assert_eq!(
                        text.contains("vpshufb"),
                        s <= 4 && ty.ends_with('8') || s == 2,
                        "{text}"
                    );
                }
            }
        }
    }
    let yuv = kernel(
        "kernel yuv2rgb(yp: ptr<global, u8>, up: ptr<global, u8>, vp: ptr<global, u8>, rgb: ptr<global, u8>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             let c: i32 = 298 * (yp[i] as i32 - 16) + 128;
             let d: i32 = up[i] as i32 - 128;
             let e: i32 = vp[i] as i32 - 128;
             rgb[3 * i] = min(max(c + 409 * e >> 8, 0), 255) as u8;
             rgb[3 * i + 1] = min(max(c - 100 * d - 208 * e >> 8, 0), 255) as u8;
             rgb[3 * i + 2] = min(max(c + 516 * d >> 8, 0), 255) as u8;
           }
         }",
    );
    for n in [1u32, 5, 8, 11, 16, 40, 99] {
        let r = NdRange::new(&[n.div_ceil(8) * 8]).with_local(&[8]);
        let args: Vec<Arg> = (0..4).map(Arg::Buffer).chain([Arg::scalar(n)]).collect();
        let u8s = |len: u32, seed| vals(Scalar::U8, len as usize, seed);
        let bufs = [u8s(n, 1), u8s(n, 2), u8s(n, 3), u8s(3 * n, 4)];
        agree(&yuv, &r, &args, &bufs, &format!("yuv2rgb {n}"));
    }
    if avx2() {
        let text = vector_listing(&yuv).join("\n");
        assert!(text.contains("vpackuswb") && text.contains("vpermd"), "{text}");
    } else {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
}

#[test]
fn stores_reading_the_array_stay_in_order() {
    // A swap of each pair and a store whose value reads the element just written: the
    // second store must see the first (no group).
    let k = kernel(
        "kernel k(o: ptr<global, u32>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             let a: u32 = o[2 * i];
             o[2 * i] = o[2 * i + 1];
             o[2 * i + 1] = a;
             o[2 * i] = o[2 * i] + o[2 * i + 1] * 3;
             o[2 * i + 1] = o[2 * i] + 1;
           }
         }",
    );
    for (n, global, extra) in SIZES {
        let len = (i64::from(2 * global) + extra).max(1) as usize;
        let args = vec![Arg::Buffer(0), Arg::scalar(n)];
        let bufs = vec![vals(Scalar::U32, len, 1)];
        let r = NdRange::new(&[global]).with_local(&[8]);
        agree(&k, &r, &args, &bufs, &format!("n={n} len={len}"));
    }
}

#[test]
fn load_groups_agree_with_the_interpreter() {
    // `let`s of every element at strides 2 to 8 (one span test; a transpose at 2 and 4, else
    // the span's vectors permuted and blended per element), in order and
    // reversed, guarded, under a mask, bases that wrap, spans past the end
    // (the last lane's last element faults), used after a loop (registers or slots).
    for ty in ["f32", "u32", "i32"] {
        for s in 2u32..=8 {
            for rev in [false, true] {
                let order: Vec<u32> = if rev { (0..s).rev().collect() } else { (0..s).collect() };
                let lets: String =
                    order.iter().map(|k| format!("let a{k}: {ty} = x[p + {k}u32];\n")).collect();
                let sum = (1..s).fold("a0".to_string(), |e, k| format!("({e}) * 3{ty} + a{k}"));
                let k = kernel(&format!(
                    "kernel k(o: ptr<global, {ty}>, x: ptr<global, {ty}>, n: u32, b: u32) {{
                       let i: u32 = global_id(0);
                       if i < n {{
                         let p: u32 = {s}u32 * i + b;
                         {lets}
                         o[i] = {sum};
                       }}
                       if (i & 1u32) == 0u32 {{
                         let p: u32 = i * {s}u32;
                         {lets}
                         o[i] = o[i] + {sum};
                       }}
                     }}"
                ));
                for (n, global, extra) in SIZES {
                    for b in [0u32, 1, u32::MAX, u32::MAX - 8] {
                        let len = (i64::from(s * global) + extra).max(1) as usize;
                        let args =
                            vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(b)];
                        let bufs = vec![vals(elem(ty), global as usize, 1), vals(elem(ty), len, 2)];
                        let what = format!("{ty} s={s} rev={rev} n={n} len={len} b={b}");
                        let r = NdRange::new(&[global]).with_local(&[8]);
                        agree(&k, &r, &args, &bufs, &what);
                    }
                }
                if avx2() {
                    let text = vector_listing(&k).join("\n");
                    if matches!(s, 2 | 4) {
                        let shuffle = if s == 4 { "vunpckhpd" } else { "vshufps" };
                        assert!(text.contains(shuffle), "{text}");
                    } else {
                        // One span test for the group's `s` loads (a strided load alone
                        // tests its own span and permutes into `ymm0` once after it).
                        let test = format!("sub r11,{:X}h", 8 * s - 8);
                        let most = text
                            .split(&test)
                            .map(|seg| seg.matches("vpermps ymm0,ymm1,[").count())
                            .max();
                        assert_eq!(most, Some(s as usize), "s={s}\n{text}");
                    }
                }
            }
        }
    }
}

/// A small deterministic generator (the cases must be the same on every run).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn random_groups_agree_with_the_interpreter() {
    // Random element types, strides, orders, offsets, guards, bases and lengths; a load
    // group and a store group in one kernel.
    let mut g = Lcg(0x5eed_c034);
    for case in 0..120 {
        let ty = ["f32", "u32", "i32", "u8", "i8", "u16"][g.below(6) as usize];
        let narrow = ty.ends_with('8') || ty.ends_with("16");
        let s = 2 + g.below(if narrow { 3 } else { 7 }) as u32;
        let mut order: Vec<u32> = (0..s).collect();
        for k in (1..order.len()).rev() {
            order.swap(k, g.below(k as u64 + 1) as usize);
        }
        let o = g.below(3) as u32;
        let guard = ["i < n", "(i & 3u32) != 1u32", "true"][g.below(3) as usize];
        let lets: String = (0..s).map(|k| format!("let a{k}: {ty} = x[q + {k}u32];\n")).collect();
        let sum = (0..s).map(|k| format!("(a{k} as i32)")).collect::<Vec<_>>().join(" + ");
        let stores: String = order
            .iter()
            .map(|k| format!("o[p + {}u32] = (v * {} + {k}) as {ty};\n", k + o, 2 * k + 1))
            .collect();
        let k = kernel(&format!(
            "kernel k(o: ptr<global, {ty}>, x: ptr<global, {ty}>, n: u32, b: u32) {{
               let i: u32 = global_id(0);
               if {guard} {{
                 let q: u32 = i * {s}u32 + b;
                 {lets}
                 let v: i32 = {sum};
                 let p: u32 = {s}u32 * i + b;
                 {stores}
               }}
             }}"
        ));
        let global = 8 * (1 + g.below(5) as u32);
        let n = g.below(u64::from(global) + 2) as u32;
        let b = [0u32, 1, 2, u32::MAX, 5][g.below(5) as usize];
        let extra = g.below(8) as i64 - 3;
        let len = (i64::from(s * global + o) + extra).max(1) as usize;
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(b)];
        let bufs = vec![vals(elem(ty), len, 1), vals(elem(ty), len, 2)];
        let what = format!("case {case}: {ty} s={s} n={n} global={global} len={len} b={b}");
        agree(&k, &NdRange::new(&[global]).with_local(&[8]), &args, &bufs, &what);
    }
}

#[test]
fn let_bound_offsets_group_only_when_they_hold() {
    // `-O`'s `let q: u32 = p + 1;` groups with `p` (cmul's stores); a `var` changed after
    // the `let` does not.
    let cmul = kernel(
        "kernel k(c: ptr<global, f32>, a: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             let p: u32 = i << 1;
             let q: u32 = p + 1;
             let v: f32 = a[i];
             c[p] = v * 2.0;
             c[q] = v + 1.0;
           }
         }",
    );
    let moved = kernel(
        "kernel k(c: ptr<global, f32>, a: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             var p: u32 = i * 2u32;
             let q: u32 = p + 1;
             p = p + 2u32;
             let v: f32 = a[i];
             c[p] = v * 2.0;
             c[q] = v + 1.0;
           }
         }",
    );
    for n in [1u32, 8, 13, 40] {
        for extra in [0i64, -1, 2] {
            let r = NdRange::new(&[n.div_ceil(8) * 8]).with_local(&[8]);
            let len = (i64::from(2 * n.div_ceil(8) * 8) + extra).max(1) as usize;
            let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
            let bufs = [vals(Scalar::F32, len, 1), vals(Scalar::F32, n as usize, 2)];
            for (name, k) in [("cmul", &cmul), ("moved", &moved)] {
                agree(k, &r, &args, &bufs, &format!("{name} {n} {extra}"));
            }
        }
    }
    if avx2() {
        let text = vector_listing(&cmul).join("\n");
        assert!(text.contains("vunpcklps"), "{text}");
    } else {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
}
