//! Edge values through the AMDGPU backend: casts between every pair of scalar types and
//! integer division/remainder of every type, on extremes (MIN, MAX, -1, 0, NaN, infinities,
//! subnormals, values at the rounding boundaries), simulated against the interpreter and
//! assembled by llvm-mc.

use half::f16;
use kiln_backends::amdgpu::{compile, sim};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::{results_match, TestCase};
use kiln_ir::Scalar;

mod amdgpu_common;
use amdgpu_common::{assert_assembles, kernel};

const N: usize = 16;

/// 16 edge values of a type.
fn edges(t: Scalar) -> Buffer {
    macro_rules! ints {
        ($t:ty) => {{
            let v: Vec<$t> = vec![
                <$t>::MIN,
                <$t>::MAX,
                0,
                1,
                <$t>::MAX - 1,
                <$t>::MIN.wrapping_add(1),
                (<$t>::MAX / 2),
                (<$t>::MAX / 2).wrapping_add(1),
                3,
                7,
                <$t>::MIN.wrapping_sub(5),
                100 as $t,
                (<$t>::MAX / 3),
                <$t>::MAX.wrapping_mul(7),
                <$t>::MIN / 2,
                0x55 as $t,
            ];
            Buffer::from_slice(&v)
        }};
    }
    match t {
        Scalar::I8 => ints!(i8),
        Scalar::U8 => ints!(u8),
        Scalar::I16 => ints!(i16),
        Scalar::U16 => ints!(u16),
        Scalar::I32 => ints!(i32),
        Scalar::U32 => ints!(u32),
        Scalar::I64 => ints!(i64),
        Scalar::U64 => ints!(u64),
        Scalar::F32 => Buffer::from_slice(&[
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            2147483520.0,
            2147483648.0,
            -2147483904.0,
            4294967040.0,
            1e-45,
            -3.7,
            65519.0,
            65520.0,
            9.223372e18,
            -9.223373e18,
            1.8446743e19,
            300.5,
        ]),
        Scalar::F64 => Buffer::from_slice(&[
            f64::NAN,
            f64::INFINITY,
            -1e300,
            -0.0,
            2147483647.9,
            -2147483648.9,
            4294967295.5,
            9223372036854774784.0,
            9223372036854775808.0,
            -9223372036854777856.0,
            18446744073709549568.0,
            5e-324,
            1.0000000596046448,
            // Rounded once to f16 this is 65504; rounded through f32 first it would be inf.
            65519.99999,
            65519.0,
            1e-40,
            -255.99,
        ]),
        _ => Buffer::from_slice(
            &[
                0.0f32, -0.0, 1.5, 65504.0, -65504.0, 6e-8, 0.1, 2049.0, -7.5, 1e4, 3.0, 0.5, -1.0,
                255.9, 128.0, -129.0,
            ]
            .map(f16::from_f32),
        ),
    }
}

fn run(src: &str, bufs: Vec<Buffer>) {
    let k = kernel(src);
    let case = TestCase {
        kernel: k,
        range: NdRange::new(&[N as u32]).with_local(&[N as u32]),
        args: (0..bufs.len()).map(Arg::Buffer).collect(),
        buffers: bufs,
    };
    let c = compile(&case.kernel).unwrap_or_else(|e| panic!("{e}\n{src}"));
    assert_assembles(&c.asm);
    let want = case.run().unwrap();
    let mut got = case.buffers.clone();
    sim::run(&c, &case.kernel, &case.range, &case.args, &mut got).unwrap();
    if let Err(e) = results_match(&want, &got) {
        panic!("{e}\n{src}");
    }
}

const TYPES: [Scalar; 11] = [
    Scalar::I8,
    Scalar::U8,
    Scalar::I16,
    Scalar::U16,
    Scalar::I32,
    Scalar::U32,
    Scalar::I64,
    Scalar::U64,
    Scalar::F16,
    Scalar::F32,
    Scalar::F64,
];

#[test]
fn casts_between_every_pair_of_types() {
    for from in TYPES {
        let mut src = format!("kernel c(x: ptr<global, {from}>");
        for (j, to) in TYPES.iter().enumerate() {
            src.push_str(&format!(", o{j}: ptr<global, {to}>"));
        }
        src.push_str(", b: ptr<global, u32>) {\n let i: u32 = local_id(0);\n");
        for (j, to) in TYPES.iter().enumerate() {
            src.push_str(&format!(" o{j}[i] = x[i] as {to};\n"));
        }
        src.push_str(" b[i] = x[i] as bool as u32 + (x[i] as bool as f32) as u32 * 2;\n}\n");
        let mut bufs = vec![edges(from)];
        bufs.extend(TYPES.iter().map(|&t| Buffer::zeroed(t, N)));
        bufs.push(Buffer::zeroed(Scalar::U32, N));
        run(&src, bufs);
    }
}

#[test]
fn integer_division_of_every_type() {
    for t in &TYPES[..8] {
        let src = format!(
            "kernel d(x: ptr<global, {t}>, q: ptr<global, {t}>, r: ptr<global, {t}>) {{
                let i: u32 = local_id(0);
                let a: {t} = x[i];
                let b: {t} = x[(i * 7 + 3) % 16] | 1;
                q[i * 2] = a / b;
                r[i * 2] = a % b;
                q[i * 2 + 1] = b / (a | 1);
                r[i * 2 + 1] = b % (a | 1);
            }}"
        );
        run(&src, vec![edges(*t), Buffer::zeroed(*t, 2 * N), Buffer::zeroed(*t, 2 * N)]);
    }
}

/// Generic pointers use flat instructions on 64-bit addresses, for every element width.
#[test]
fn generic_pointers_use_flat_memory() {
    let src = "kernel g(a: ptr<generic, i8>, b: ptr<generic, u16>, c: ptr<generic, f64>, o: ptr<generic, f64>) {
        let i: u32 = local_id(0);
        o[i] = a[i] as f64 + b[i] as f64 * c[i];
        a[i] = (a[i] + 1) * 3;
        b[i] = b[i] ^ 0x8001;
    }";
    let c = compile(&kernel(src)).unwrap();
    for needle in ["flat_load_sbyte", "flat_load_ushort", "flat_load_dwordx2", "flat_store_dwordx2"]
    {
        assert!(c.asm.contains(needle), "missing {needle}:\n{}", c.asm);
    }
    run(
        src,
        vec![
            edges(Scalar::I8),
            edges(Scalar::U16),
            edges(Scalar::F64),
            Buffer::zeroed(Scalar::F64, N),
        ],
    );
}

/// `exp`, `log`, `sin`, `cos` are approximate (as in the IR): within a relative 1e-4 of the
/// interpreter (absolute near zero), on f32 and f64.
#[test]
fn transcendentals_are_close() {
    let src = "kernel t(x: ptr<global, f32>, y: ptr<global, f64>, o: ptr<global, f32>, p: ptr<global, f64>) {
        let i: u32 = local_id(0);
        o[i * 4] = exp(x[i]);
        o[i * 4 + 1] = log(abs(x[i]) + 0.5);
        o[i * 4 + 2] = sin(x[i]);
        o[i * 4 + 3] = cos(x[i]);
        p[i * 4] = exp(y[i]);
        p[i * 4 + 1] = log(abs(y[i]) + 0.5);
        p[i * 4 + 2] = sin(y[i]);
        p[i * 4 + 3] = cos(y[i]);
    }";
    let xs: Vec<f32> = (0..N).map(|i| i as f32 * 2.7 - 20.0).collect();
    let ys: Vec<f64> = (0..N).map(|i| i as f64 * 1.3 - 9.0).collect();
    let k = kernel(src);
    let case = TestCase {
        kernel: k,
        range: NdRange::new(&[N as u32]).with_local(&[N as u32]),
        args: (0..4).map(Arg::Buffer).collect(),
        buffers: vec![
            Buffer::from_slice(&xs),
            Buffer::from_slice(&ys),
            Buffer::zeroed(Scalar::F32, 4 * N),
            Buffer::zeroed(Scalar::F64, 4 * N),
        ],
    };
    let c = compile(&case.kernel).unwrap();
    assert_assembles(&c.asm);
    let want = case.run().unwrap();
    let mut got = case.buffers.clone();
    sim::run(&c, &case.kernel, &case.range, &case.args, &mut got).unwrap();
    for b in [2, 3] {
        for j in 0..4 * N {
            let (w, g) = (want[b].get(j).unwrap(), got[b].get(j).unwrap());
            let (w, g) = (w.as_f64().unwrap(), g.as_f64().unwrap());
            assert!((w - g).abs() <= 1e-4 * w.abs().max(1.0), "buffer {b}[{j}]: {g} vs {w}");
        }
    }
}

/// More uniform values live at once than there are SGPRs: they are spilled to VGPR lanes
/// (`v_writelane_b32` / `v_readlane_b32`) and the results still match, across a divergent
/// branch and a uniform loop.
#[test]
fn sgpr_pressure_spills_to_vgpr_lanes() {
    let mut src = String::from("kernel s(x: ptr<constant, u32>, o: ptr<global, u32>, n: u32) {\n");
    for i in 0..130 {
        src.push_str(&format!("let a{i}: u32 = x[{}] * n + {i};\n", i % 16));
    }
    src.push_str("var acc: u32 = 0;\nif local_id(0) % 3 == 1 {\n");
    for i in 0..130 {
        src.push_str(&format!("acc = acc + a{i} * {};\n", i + 1));
    }
    src.push_str("}\nfor j: u32 in 0 .. n % 4 + 1 {\n");
    for i in (0..130).rev() {
        src.push_str(&format!("acc = acc ^ (a{i} + j);\n"));
    }
    src.push_str("}\no[local_id(0)] = acc;\n}\n");
    let c = compile(&kernel(&src)).unwrap();
    assert!(c.asm.contains("v_writelane_b32") && c.asm.contains("v_readlane_b32"));
    let k = kernel(&src);
    let case = TestCase {
        kernel: k,
        range: NdRange::new(&[N as u32 * 2]).with_local(&[N as u32]),
        args: vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(7u32)],
        buffers: vec![edges(Scalar::U32), Buffer::zeroed(Scalar::U32, 2 * N)],
    };
    let want = case.run().unwrap();
    let mut got = case.buffers.clone();
    assert_assembles(&c.asm);
    sim::run(&c, &case.kernel, &case.range, &case.args, &mut got).unwrap();
    results_match(&want, &got).unwrap();
}

/// Uniform (SALU) 64-bit integer operations on edge values passed as kernel arguments.
#[test]
fn uniform_64_bit_operations() {
    for t in [Scalar::I64, Scalar::U64] {
        let src = format!(
            "kernel u(a: {t}, b: {t}, o: ptr<global, {t}>, f: ptr<global, u32>) {{
                let i: u32 = local_id(0);
                o[i * 9] = a + b;
                o[i * 9 + 1] = a - b;
                o[i * 9 + 2] = a * b;
                o[i * 9 + 3] = (a & b) ^ (a | ~b);
                o[i * 9 + 4] = a << b;
                o[i * 9 + 5] = a >> b;
                o[i * 9 + 6] = -a;
                o[i * 9 + 7] = a == b ? a / (b | 1) : a % (b | 1);
                o[i * 9 + 8] = a < b ? min(a, b) : max(a, b);
                f[i] = (a != b) as u32 + (a >= b) as u32 * 2;
            }}"
        );
        let vals = edges(t);
        for (x, y) in [(0, 1), (1, 0), (2, 13), (5, 6), (10, 9), (14, 14), (15, 3), (11, 2)] {
            let (a, b) = (vals.get(x).unwrap(), vals.get(y).unwrap());
            let case = TestCase {
                kernel: kernel(&src),
                range: NdRange::new(&[4]).with_local(&[4]),
                args: vec![Arg::Scalar(a), Arg::Scalar(b), Arg::Buffer(0), Arg::Buffer(1)],
                buffers: vec![Buffer::zeroed(t, 36), Buffer::zeroed(Scalar::U32, 4)],
            };
            let c = compile(&case.kernel).unwrap();
            assert!(c.asm.contains("s_addc_u32"), "{}", c.asm);
            let want = case.run().unwrap();
            let mut got = case.buffers.clone();
            sim::run(&c, &case.kernel, &case.range, &case.args, &mut got).unwrap();
            if let Err(e) = results_match(&want, &got) {
                panic!("{t} {a:?} {b:?}: {e}");
            }
        }
        assert_assembles(&compile(&kernel(&src)).unwrap().asm);
    }
}

/// Private arrays beyond the register-promotion size live in scratch memory: each lane its
/// own zeroed segment, every element width, dynamic divergent indices, stores under
/// divergent control flow.
#[test]
fn private_arrays_in_scratch() {
    let src = "kernel p(x: ptr<global, u32>, o: ptr<global, u32>, q: ptr<global, f64>) {
        private a: u32[40];
        private b: i8[13];
        private c: f64[9];
        private h: f16[7];
        let i: u32 = local_id(0);
        for j: u32 in 0 .. 40 {
            if (j + i) % 3 != 0 {
                a[(j * 7 + i) % 40] = x[j % 16] + j;
            }
        }
        b[i % 13] = (i * 37) as i8;
        c[i % 9] = i as f64 / 3.0;
        h[i % 7] = i as f16;
        o[i * 3] = a[(i * 5) % 40] + a[39 - i % 40];
        o[i * 3 + 1] = (b[i % 13] as i32 + b[(i + 1) % 13] as i32) as u32;
        o[i * 3 + 2] = h[i % 7] as u32 + h[(i + 3) % 7] as u32;
        q[i] = c[i % 9] + c[(i + 4) % 9];
    }";
    let c = compile(&kernel(src)).unwrap();
    for needle in [
        "scratch_store_dword ",
        "scratch_load_sbyte",
        "scratch_store_dwordx2",
        "scratch_load_ushort",
    ] {
        assert!(c.asm.contains(needle), "missing {needle}:\n{}", c.asm);
    }
    run(
        src,
        vec![
            edges(Scalar::U32),
            Buffer::zeroed(Scalar::U32, 3 * N),
            Buffer::zeroed(Scalar::F64, N),
        ],
    );
}

/// An out-of-bounds private index is an error in the simulator, as in the interpreter,
/// never a silent access to another lane's or array's memory.
#[test]
fn private_out_of_bounds_is_an_error() {
    let src = "kernel p(o: ptr<global, u32>) {
        private a: u32[10];
        o[local_id(0)] = a[local_id(0) * 1000];
    }";
    let k = kernel(src);
    let case = TestCase {
        kernel: k,
        range: NdRange::new(&[4]).with_local(&[4]),
        args: vec![Arg::Buffer(0)],
        buffers: vec![Buffer::zeroed(Scalar::U32, 4)],
    };
    assert!(case.run().is_err());
    let c = compile(&case.kernel).unwrap();
    let mut got = case.buffers.clone();
    let e = sim::run(&c, &case.kernel, &case.range, &case.args, &mut got).unwrap_err();
    assert!(e.contains("out of bounds"), "{e}");
}

/// The f32/f64 division and square-root sequences are correctly rounded: random bit
/// patterns over the whole exponent range (subnormal, overflowing and tie-prone results
/// included), bit-exact against the interpreter.
#[test]
fn division_and_sqrt_on_random_bits() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let n = 1024usize;
    // Mantissas random; exponents spread over the range, often near the extremes.
    let f64s = |next: &mut dyn FnMut() -> u64| -> Vec<f64> {
        (0..n)
            .map(|_| {
                let r = next();
                let e = match r % 4 {
                    0 => r >> 8 & 0x7ff,
                    1 => r >> 8 & 0x3f,
                    2 => 0x7ff - 1 - (r >> 8 & 0x3f),
                    _ => 1023 - 30 + (r >> 8 & 0x3f),
                };
                f64::from_bits((r & (1 << 63)) | e << 52 | (next() & ((1 << 52) - 1)))
            })
            .collect()
    };
    let (p, q) = (f64s(&mut next), f64s(&mut next));
    let x: Vec<f32> = (0..n).map(|_| f32::from_bits(next() as u32)).collect();
    let y: Vec<f32> = (0..n).map(|_| f32::from_bits(next() as u32)).collect();
    let src = "kernel d(p: ptr<global, f64>, q: ptr<global, f64>, x: ptr<global, f32>, y: ptr<global, f32>, r: ptr<global, f64>, o: ptr<global, f32>) {
        let i: u32 = global_id(0);
        r[i * 2] = p[i] / q[i];
        r[i * 2 + 1] = sqrt(abs(p[i]));
        o[i * 2] = x[i] / y[i];
        o[i * 2 + 1] = sqrt(abs(x[i]));
    }";
    let case = TestCase {
        kernel: kernel(src),
        range: NdRange::new(&[n as u32]).with_local(&[64]),
        args: (0..6).map(Arg::Buffer).collect(),
        buffers: vec![
            Buffer::from_slice(&p),
            Buffer::from_slice(&q),
            Buffer::from_slice(&x),
            Buffer::from_slice(&y),
            Buffer::zeroed(Scalar::F64, 2 * n),
            Buffer::zeroed(Scalar::F32, 2 * n),
        ],
    };
    let c = compile(&case.kernel).unwrap();
    let want = case.run().unwrap();
    let mut got = case.buffers.clone();
    sim::run(&c, &case.kernel, &case.range, &case.args, &mut got).unwrap();
    results_match(&want, &got).unwrap();
}
