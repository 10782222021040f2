//! Register allocation of the 8-lane code: the counters of uniform `for` loops and uniform
//! integer `var`s and `let`s live in the general-purpose registers no buffer takes (the
//! disassembly shows them there), spilled to their frame slots when none is left; nested
//! loops, counters near the ends of their types, in-place updates, faults inside loops
//! and random kernels with loops and `var`s of every type under every register pressure
//! (one to six buffers) agree with the scalar code and the interpreter, errors compared
//! word for word.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, kernel, three_ways, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;
use proptest::prelude::*;

fn i32s(n: usize, seed: i32) -> Buffer {
    Buffer::from_slice(&(0..n as i32).map(|i| (i * 37 + seed) % 101 - 50).collect::<Vec<_>>())
}

/// A kernel of two buffers leaves `rsi`, `rdi`, `r8` and `r9` free: its uniform `var`
/// (declared first) is `r9d`, updated in place, the counter of its uniform loop `r8`
/// (compared with the bound and stepped by immediates); no counter goes through the frame.
#[test]
fn uniform_counters_and_vars_live_in_registers() {
    if !avx2() {
        kiln_ir::testing::skip("no AVX2 on this CPU: no 8-lane code to inspect");
        return;
    }
    let k = kernel(
        "kernel k(o: ptr<global, u32>, a: ptr<global, u32>, n: u32) {
           let i: u32 = global_id(0);
           var acc: u32 = a[i];
           var h: u32 = 7u32;
           for j: u32 in 0u32 .. 100u32 step 3u32 {
             h = h + n;
             acc = acc * 3u32 + (h ^ j);
           }
           o[i] = acc;
         }",
    );
    let code = vector_listing(&k);
    let has = |p: &str| code.iter().any(|l| l.starts_with(p));
    let all = code.join("\n");
    assert!(has("cmp r8,64h"), "the counter is not compared in r8:\n{all}");
    assert!(has("add r8,3"), "the counter is not stepped in r8:\n{all}");
    assert!(has("add r9d,[r13"), "the var is not updated in r9d:\n{all}");
    assert!(!has("add qword ptr [r15"), "a counter in the frame:\n{all}");
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(0x9e37_79b9u32)];
    let bufs = [Buffer::zeroed(Scalar::U32, 40), i32s(40, 3)];
    assert!(three_ways(&k, &NdRange::new(&[40]).with_local(&[8]), &args, &bufs));
}

/// More loops and `var`s than free registers: six buffers leave none, two buffers four
/// (for five nested counters and three `var`s); the inner names spill to their slots and
/// every value is the interpreter's, with counters at the ends of their types (a `u32`
/// loop up to `u32::MAX`, an `i32` one from `i32::MIN`).
#[test]
fn register_pressure_spills_to_slots() {
    let body = "let i: u32 = global_id(0);
           var acc: i32 = 0i32;
           var u: i32 = n;
           var w: u32 = 1u32;
           for a0: u32 in 4294967290u32 .. 4294967295u32 step 2u32 {
             for a1: i32 in (0i32 - 2147483647i32 - 1i32) .. (0i32 - 2147483646i32) {
               for a2: i32 in 0i32 .. 2i32 {
                 for a3: u32 in w .. w + 2u32 {
                   for a4: i32 in n .. n + 2i32 {
                     u = u + a4 - a2;
                     w = w * 3u32 + a0;
                     acc = acc + (a1 >> 30i32) * u + (a3 as i32) + x[(i + a3) & 31u32];
                   }
                 }
               }
             }
           }
           o[i] = acc + (w as i32);";
    let two = format!("kernel k(o: ptr<global, i32>, x: ptr<global, i32>, n: i32) {{ {body} }}");
    let six = format!(
        "kernel k(o: ptr<global, i32>, x: ptr<global, i32>, n: i32, b2: ptr<global, i32>,
                  b3: ptr<global, i32>, b4: ptr<global, i32>, b5: ptr<global, i32>) {{
           b2[global_id(0)] = b3[global_id(0)] + b4[global_id(0)] + b5[global_id(0)];
           {body} }}"
    );
    let r = NdRange::new(&[24]).with_local(&[8]);
    for n in [5i32, -7, i32::MAX - 1] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        let bufs = [Buffer::zeroed(Scalar::I32, 24), i32s(32, 5)];
        assert_eq!(three_ways(&kernel(&two), &r, &args, &bufs), avx2(), "two, n = {n}");
        let mut args6 = args.to_vec();
        args6.extend((2..6).map(Arg::Buffer));
        let mut bufs6 = bufs.to_vec();
        bufs6.extend((0..4).map(|s| i32s(24, s)));
        assert_eq!(three_ways(&kernel(&six), &r, &args6, &bufs6), avx2(), "six, n = {n}");
    }
}

/// Faults inside loops whose counters and `var`s are in registers: some lanes fault on a
/// later iteration (the others run on), every lane faults (the loop stops), a divergent
/// division by zero in the body, and loops whose bodies cannot fault (their lanes are
/// tested once, before the loop) around ones that can.
#[test]
fn faults_inside_register_loops_are_the_interpreters() {
    let k = kernel(
        "kernel k(o: ptr<global, i32>, x: ptr<global, i32>, n: u32, d: i32) {
           let i: u32 = global_id(0);
           var acc: i32 = 0i32;
           var s: u32 = 0u32;
           for j: u32 in 0u32 .. n {
             s = s + 2u32;
             for q: u32 in 0u32 .. 3u32 { acc = acc + (q as i32) * 5i32; }
             acc = acc + x[i * j + s] / (d - (i as i32));
             while s > 1000u32 { s = s - 7u32; }
           }
           o[i] = acc;
         }",
    );
    let r = NdRange::new(&[32]).with_local(&[16]);
    // In bounds; out of bounds for high lanes at a later iteration; for every lane from
    // the first iteration on (no element at all past 2); a zero divisor in lane 5.
    for (n, len, d) in [(4u32, 200usize, 100i32), (9, 60, 100), (3, 2, 100), (2, 200, 5)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(d)];
        let bufs = [Buffer::zeroed(Scalar::I32, 32), i32s(len, 1)];
        assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "n {n}, len {len}, d {d}");
    }
}

/// A `var` or bound of `ty` (`i32`/`u32`) with a wrapping or sign-crossing constant.
fn arb_int(ty: &'static str) -> BoxedStrategy<String> {
    let leaves: Vec<String> =
        ["j", "u", "v", "n", "3", "2147483647"]
            .iter()
            .map(|l| {
                if l.chars().all(|c| c.is_ascii_digit()) {
                    format!("{l}{ty}")
                } else {
                    l.to_string()
                }
            })
            .collect();
    prop::sample::select(leaves)
        .prop_recursive(2, 6, 2, move |inner| {
            (inner.clone(), prop::sample::select(vec!["+", "-", "*", "^", "&", ">>"]), inner)
                .prop_map(|(a, op, b)| format!("({a} {op} {b})"))
        })
        .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]
    /// Random kernels with nested uniform loops (bounds from parameters, negative and
    /// empty ranges, steps of 1 to 3), uniform `var`s of both integer types updated in
    /// place and not, divergent `var`s of f32, i64 and f64, a divergent `while`, under one
    /// to six buffers.
    #[test]
    fn loops_with_vars_of_every_type_agree(
        ty in prop::sample::select(vec!["i32", "u32"]),
        e1 in arb_int("i32"), e2 in arb_int("i32"),
        step in 1u32..4,
        extra in 0usize..5,
        n in prop::sample::select(vec![0i32, 3, -2, 5]),
        hi in 0i32..4,
    ) {
        let (eu, ev) = if ty == "i32" { (e1.clone(), e2.clone()) } else {
            (e1.replace("i32", "u32"), e2.replace("i32", "u32"))
        };
        let bufs_decl: String = (0..extra).map(|b| format!(", b{b}: ptr<global, f32>")).collect();
        let bufs_use: String =
            (0..extra).map(|b| format!("fa = fa + b{b}[(i + k) & 15u32];")).collect();
        let k = kernel(&format!(
            "kernel k(o: ptr<global, f32>, oi: ptr<global, i64>, x: ptr<global, f32>,
                      n: {ty}{bufs_decl}) {{
               let i: u32 = global_id(0);
               var u: {ty} = n;
               var v: {ty} = 1{ty};
               var fa: f32 = x[i & 15u32];
               var la: i64 = i as i64;
               var da: f64 = 0.5;
               for j: {ty} in n .. n + {hi}{ty} step {step}{ty} {{
                 v = v + 1{ty};
                 for k: u32 in 0u32 .. 3u32 {{
                   u = {eu};
                   v = v ^ ({ev} & 7{ty});
                   la = la * 3i64 + (u as i64);
                   da = da * 1.5 + (v as f64);
                   {bufs_use}
                   if (i & 1u32) == 0u32 {{ fa = fa + x[(k + i) & 15u32]; }}
                 }}
                 var w: u32 = i;
                 while w > 2u32 {{ w = w - 3u32; la = la + 1i64; }}
               }}
               o[i] = fa + (u as f32) + (v as f32) + (da as f32);
               oi[i] = la;
             }}"
        ));
        let n_arg = if ty == "i32" { Arg::scalar(n) } else { Arg::scalar(n as u32) };
        let mut args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), n_arg];
        args.extend((0..extra).map(|b| Arg::Buffer(3 + b)));
        let xs: Vec<f32> = (0..16).map(|v| v as f32 * 0.75 - 4.0).collect();
        let mut bufs = vec![
            Buffer::zeroed(Scalar::F32, 24),
            Buffer::zeroed(Scalar::I64, 24),
            Buffer::from_slice(&xs),
        ];
        bufs.extend((0..extra).map(|_| Buffer::from_slice(&xs)));
        let has = three_ways(&k, &NdRange::new(&[24]).with_local(&[8]), &args, &bufs);
        prop_assert_eq!(has, avx2());
    }
}

/// Divergent loops keep their lane mask in a `let` register (`ymm13` here, after the
/// 64-bit `var`s' pairs `ymm8`/`ymm9` and `ymm10`/`ymm11` and `w`'s `ymm12`), a divergent
/// `for` its lanes' counter too (`ymm14`); the 64-bit `var`s are blended in their registers
/// under the loop's mask and never stored to the frame. A uniform loop whose body cannot
/// fault tests its lanes once, before the loop, not after each compare of its counter.
#[test]
fn loop_masks_and_64_bit_vars_live_in_registers() {
    if !avx2() {
        kiln_ir::testing::skip("no AVX2 on this CPU: no 8-lane code to inspect");
        return;
    }
    let k = kernel(
        "kernel k(o: ptr<global, f32>, oi: ptr<global, i64>, x: ptr<global, f32>, n: i32) {
           let i: u32 = global_id(0);
           var la: i64 = i as i64;
           var da: f64 = 0.5;
           var w: u32 = i;
           while w > 2u32 { w = w - 3u32; la = la + 1i64; da = da * 1.5; }
           for q: u32 in 0u32 .. i { la = la * 3i64; }
           for j: u32 in 0u32 .. 5u32 { da = da + 0.25; }
           o[i] = (da as f32) + x[i + 1u32];
           oi[i] = la;
         }",
    );
    let code = vector_listing(&k);
    let has = |p: &str| code.iter().any(|l| l.starts_with(p));
    let all = code.join("\n");
    assert!(has("vpand ymm0,ymm0,ymm13"), "the loop mask is not in ymm13:\n{all}");
    assert!(has("vblendvpd ymm8,ymm8,ymm0,ymm2"), "`la` is not blended in ymm8:\n{all}");
    assert!(has("vblendvpd ymm11,ymm11,ymm1,ymm3"), "`da` is not blended in ymm11:\n{all}");
    // (Its step of 1 adds in place: no lane's counter can wrap while it is in the loop.)
    assert!(has("vpaddd ymm14,ymm14,[r15"), "the lanes' counter is not in ymm14:\n{all}");
    assert!(!has("vmovupd [r15"), "a 64-bit var in the frame:\n{all}");
    // The uniform loop: its counter's compare and exit jump are followed by the body.
    let at = code.iter().position(|l| l.starts_with("cmp r")).expect("a uniform counter");
    assert!(!code[at + 2].starts_with("vmovups ymm1,[r15"), "a lane test in the loop:\n{all}");
    let r = NdRange::new(&[24]).with_local(&[8]);
    for len in [40usize, 20] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(3i32)];
        let bufs = [
            Buffer::zeroed(Scalar::F32, 24),
            Buffer::zeroed(Scalar::I64, 24),
            Buffer::from_slice(&(0..len).map(|v| v as f32).collect::<Vec<_>>()),
        ];
        assert!(three_ways(&k, &r, &args, &bufs), "x of {len}");
    }
}

/// Every in-place update of a uniform `var` in a register (`+ - & | ^` by a constant, a
/// parameter, another register `var`, a loop counter and itself), of both integer types,
/// with wrapping values, gives the interpreter's bits.
#[test]
fn in_place_updates_of_every_operation_agree() {
    for t in ["i32", "u32"] {
        let mut body = String::new();
        for op in ["+", "-", "&", "|", "^"] {
            for leaf in ["2147483647", "n", "v", "j", "u"] {
                let leaf = if leaf.starts_with('2') { format!("{leaf}{t}") } else { leaf.into() };
                body += &format!("u = u {op} {leaf}; v = v + (u ^ 1{t}); acc = acc ^ u;\n");
            }
        }
        let k = kernel(&format!(
            "kernel k(o: ptr<global, {t}>, a: ptr<global, {t}>, n: {t}) {{
               let i: u32 = global_id(0);
               var acc: {t} = a[i];
               var u: {t} = n;
               var v: {t} = 3{t};
               for j: {t} in 0{t} .. 3{t} {{ {body} }}
               o[i] = acc + u + v;
             }}"
        ));
        let r = NdRange::new(&[16]).with_local(&[8]);
        for n in [7i32, -123_456_789, i32::MIN] {
            let (n, o) = if t == "i32" {
                (Arg::scalar(n), Buffer::zeroed(Scalar::I32, 16))
            } else {
                (Arg::scalar(n as u32), Buffer::zeroed(Scalar::U32, 16))
            };
            let a = if t == "i32" {
                i32s(16, 9)
            } else {
                Buffer::from_slice(&(0..16u32).map(|x| x * 77 + 1).collect::<Vec<_>>())
            };
            let args = [Arg::Buffer(0), Arg::Buffer(1), n];
            assert_eq!(three_ways(&k, &r, &args, &[o, a]), avx2(), "{t}");
        }
    }
}

/// A divergent loop's mask takes the last free `let` register before the body's names
/// do: in a Mandelbrot loop with six names in `ymm8..ymm13` around it, the mask is `ymm14`
/// (the condition and the blends read it there) and the body's `xt` is spilled.
#[test]
fn the_loop_mask_comes_before_the_body_names() {
    if !avx2() {
        kiln_ir::testing::skip("no AVX2 on this CPU: no 8-lane code to inspect");
        return;
    }
    let k = kernel(
        "kernel k(out: ptr<global, u32>, xs: ptr<global, f32>, m: u32) {
           let px: u32 = global_id(0);
           let cx: f32 = xs[px];
           let cy: f32 = cx * 0.5;
           let cz: f32 = cy * 0.25;
           var x: f32 = 0.0;
           var y: f32 = 0.0;
           var it: u32 = 0u32;
           while it < m && x * x + y * y <= 4.0 {
             let xt: f32 = x * x - y * y + cx;
             y = 2.0 * x * y + cy + cz;
             x = xt;
             it = it + 1u32;
           }
           out[px] = it;
         }",
    );
    let code = vector_listing(&k);
    let all = code.join("\n");
    assert!(code.iter().any(|l| l == "vpand ymm0,ymm0,ymm14"), "no mask in ymm14:\n{all}");
    assert!(code.iter().any(|l| l == "vblendvps ymm11,ymm11,ymm0,ymm14"), "{all}");
    let xs: Vec<f32> = (0..32).map(|i| i as f32 * 0.1 - 2.0).collect();
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(50u32)];
    let bufs = [Buffer::zeroed(Scalar::U32, 32), Buffer::from_slice(&xs)];
    assert!(three_ways(&k, &NdRange::new(&[32]).with_local(&[8]), &args, &bufs));
}

/// More tables than base registers: the first five keep theirs and every access to another
/// table loads its base for itself. 2-D element-wise code over seven planes, strided
/// gathers and scatters, batch-uniform loads and stores, atomics, `u8` and `f64` tables, a
/// local array past the sixth table behind barriers and row loops all get 8-lane code and
/// agree with the scalar code and the interpreter, faults in the later tables included
/// (buffers one element short).
#[test]
fn kernels_with_more_tables_than_base_registers_agree() {
    let planes = "a: ptr<global, f32>, b: ptr<global, f32>, c: ptr<global, f32>, \
                  d: ptr<global, f32>, e: ptr<global, f32>, f: ptr<global, f32>";
    let kernels = [
        // 2-D element-wise over seven planes, the output last.
        format!(
            "kernel k({planes}, o: ptr<global, f32>, w: u32, h: u32) {{
               let x: u32 = global_id(0);
               let y: u32 = global_id(1);
               if x < w && y < h {{
                 let i: u32 = y * w + x;
                 o[i] = a[i] * b[i] + c[i] * d[i] + e[i] * f[i];
               }}
             }}"
        ),
        // Strided gathers and scatters, and batch-uniform loads and a store, in tables 7 to 10.
        format!(
            "kernel k({planes}, g: ptr<global, f32>, o: ptr<global, f32>, u: ptr<global, f32>, \
               v: ptr<global, f32>, w: u32, h: u32) {{
               let x: u32 = global_id(0);
               let y: u32 = global_id(1);
               if x < w {{
                 let j: u32 = (x * 3u32) % w + y * w;
                 o[j] = g[j] + a[j] - f[y * w + x] + u[y] + g[y];
                 if x == 5u32 {{ v[y] = o[j]; }}
               }}
             }}"
        ),
        // Atomics and u8, f64 tables past the sixth.
        format!(
            "kernel k({planes}, hist: ptr<global, u32>, q: ptr<global, u8>, \
               r: ptr<global, f64>, w: u32, h: u32) {{
               let x: u32 = global_id(0);
               let y: u32 = global_id(1);
               let i: u32 = y * w + x;
               if x < w {{
                 atomic_add(hist, (x + y) % 7u32, 1u32);
                 q[i] = q[i] + 3u8;
                 r[i] = r[i] * 2.0f64 + (a[i] as f64);
                 f[i] = e[i] + (q[i] as f32);
               }}
             }}"
        ),
        // A local array past the sixth table, behind barriers.
        format!(
            "kernel k({planes}, o: ptr<global, f32>, w: u32, h: u32) #reqd_work_group_size(8, 1, 1) {{
               local t: f32[8];
               let l: u32 = local_id(0);
               let x: u32 = global_id(0);
               let y: u32 = global_id(1);
               let i: u32 = y * w + x;
               t[l] = a[i] + b[i] + c[i] + d[i] + e[i] + f[i];
               barrier(local);
               o[i] = t[7u32 - l] + t[l];
             }}"
        ),
        // Row loops walking tables 7 and 8.
        format!(
            "kernel k({planes}, src: ptr<global, f32>, dst: ptr<global, f32>, w: u32, h: u32) {{
               let r: u32 = global_id(0) + global_id(1) * w;
               if r < h {{
                 var s: f32 = a[r] + f[r];
                 for j: u32 in 0 .. w {{
                   s = s + src[r * w + j];
                 }}
                 for j: u32 in 0 .. w {{
                   dst[r * w + j] = src[r * w + j] / s;
                 }}
               }}
             }}"
        ),
    ];
    let (w, h) = (16u32, 4u32);
    let n = (w * h) as usize;
    for (which, src) in kernels.iter().enumerate() {
        let k = kernel(src);
        assert_eq!(x86_common::fallback(&k), None, "kernel {which}: no 8-lane code");
        let params = k.params().len();
        for short in [None, Some(params - 3), Some(params - 4)] {
            let bufs: Vec<Buffer> = k
                .params()
                .iter()
                .enumerate()
                .filter_map(|(p, v)| {
                    let kiln_ir::Type::Ptr(_, e) = v.ty() else { return None };
                    let len = if Some(p) == short { n - 1 } else { n };
                    Some(match e {
                        Scalar::U32 => Buffer::zeroed(Scalar::U32, len),
                        Scalar::U8 => Buffer::from_slice(
                            &(0..len).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>(),
                        ),
                        Scalar::F64 => Buffer::from_slice(
                            &(0..len).map(|i| i as f64 * 0.25 - 3.0).collect::<Vec<_>>(),
                        ),
                        _ => x86_common::f32s(len, p as u32 + 1),
                    })
                })
                .collect();
            let mut args: Vec<Arg> = (0..bufs.len()).map(Arg::Buffer).collect();
            args.extend([Arg::scalar(w), Arg::scalar(h)]);
            let r = NdRange::new(&[w, h]).with_local(&[8, 1]);
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "kernel {which}, short {short:?}");
        }
    }
}
