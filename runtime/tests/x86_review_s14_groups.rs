//! Adversarial review (session 14, issue 24) of the day's x86 changes, part two: programs
//! compiled for a launch's group size (`X86Program::for_group`, the cpu device's launches)
//! and the images that carry their kernel's text. Results and errors are the interpreter's
//! at every group size, from several threads at once, and for programs loaded from images
//! and from the device's persistent cache. Part one: `x86_review_s14.rs`.
#![cfg(target_arch = "x86_64")]

#[path = "common/temp_dir.rs"]
mod temp_dir;
mod x86_common;

use std::sync::Arc;

use x86_common::{agree, avx2, expect_fixed, f32s, kernel, three_ways, vals};

use kiln_backends::x86::{compile, X86Options, X86Program};
use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::results_match;
use kiln_ir::Scalar;
use kiln_runtime::device::cpu::CpuRun;

// ---------------------------------------------------------------------------------------
// Programs compiled for a launch's group size.

/// A kernel whose behaviour depends on `local_size(0)` in several ways: a loop bounded by
/// it, a tile size from it, a reduction whose stride starts from it, and the size stored.
const SIZED: &str = "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, w: ptr<global, u32>) {
    local t: f32[256];
    let l: u32 = local_id(0);
    let n: u32 = local_size(0);
    t[l] = x[global_id(0)];
    barrier(local);
    var acc: f32 = 0.0;
    for j: u32 in 0u32 .. n / 8u32 {
      acc = acc + t[(l + j * 8u32) % n];
    }
    barrier(local);
    t[l] = acc;
    var s: u32 = n / 2u32;
    while s > 0u32 {
      barrier(local);
      if l < s { t[l] = t[l] + t[l + s]; }
      s = s / 2u32;
    }
    barrier(local);
    if l == 0u32 { o[group_id(0)] = t[0]; }
    if l == n - 1u32 { w[group_id(0)] = n + l; }
  }";

/// [`SIZED`]'s arguments for `total` work-items in groups of `l` (the last group may be
/// partial): input data, a sum and a size per group.
fn sized_args(total: u32, l: u32) -> ([Arg; 3], Vec<Buffer>) {
    let groups = total.div_ceil(l) as usize;
    let bufs = vec![
        f32s(total as usize, l),
        Buffer::zeroed(Scalar::F32, groups),
        Buffer::zeroed(Scalar::U32, groups),
    ];
    ([Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)], bufs)
}

/// Group sizes 8, 16, 24 (not a power of two: the reduction skips a lane), 72, 256, a
/// non-multiple of 8, and more than 8 distinct sizes on one program (the ninth on the
/// general code), also back to the first ones.
#[test]
fn group_sizes_on_one_program() {
    let k = kernel(SIZED);
    expect_fixed(&k, 16);
    let p = compile(&k, &X86Options::default()).unwrap();
    let total = 2304u32; // a multiple of every size below
    let sizes = [8u32, 16, 24, 72, 256, 32, 48, 64, 128, 96, 12, 8, 256, 144, 24];
    for &l in &sizes {
        let (args, bufs) = sized_args(total, l);
        let r = NdRange::new(&[total]).with_local(&[l]);
        let mut want = bufs.clone();
        let wr = run(&k, &r, &args, &mut want);
        let mut got = bufs.clone();
        let gr = p.run(&r, &args, &mut got);
        assert_eq!(wr, gr, "local {l}");
        if let Err(m) = results_match(&want, &got) {
            panic!("local {l}: {m}");
        }
        if l <= 72 {
            agree(&k, &r, &args, &bufs, &format!("local {l}"));
        }
    }
}

/// Local sizes that are not `[L, 1, 1]` (2-D groups, 2-D ranges), and a 2-D range with
/// `[L, 1]` groups, on a kernel with region code that fixes no size.
#[test]
fn two_dimensional_ranges_and_groups() {
    let k = kernel(
        "kernel k(x: ptr<global, f32>, o: ptr<global, f32>) {
           local t: f32[64];
           let l: u32 = local_id(1) * local_size(0) + local_id(0);
           let g: u32 = global_id(1) * global_size(0) + global_id(0);
           t[l] = x[g];
           barrier(local);
           let m: u32 = local_size(0) * local_size(1);
           o[g] = t[(l + 1u32) % m] + t[l] * (local_size(0) as f32);
         }",
    );
    for (dims, local) in [
        (vec![32u32, 4], vec![8u32, 2]),
        (vec![32, 4], vec![16, 1]),
        (vec![48, 2], vec![24, 1]),
        (vec![16, 4], vec![8, 4]),
        (vec![64, 2], vec![32, 2]),
    ] {
        let n: u32 = dims.iter().product();
        let args = [Arg::Buffer(0), Arg::Buffer(1)];
        let bufs = [f32s(n as usize, 1), Buffer::zeroed(Scalar::F32, n as usize)];
        let r = NdRange::new(&dims).with_local(&local);
        three_ways(&k, &r, &args, &bufs);
    }
}

/// Faults whose site depends on the group size (a local index past a 32-element tile only
/// in groups of 40 or more, a division by `local_size(0) - 16`): the errors must be the
/// interpreter's at every size.
#[test]
fn faults_that_depend_on_the_group_size() {
    let k = kernel(
        "kernel k(x: ptr<global, i32>, o: ptr<global, i32>) {
           local t: i32[32];
           let l: u32 = local_id(0);
           if l < 32u32 { t[l] = x[global_id(0)]; }
           barrier(local);
           let n: u32 = local_size(0);
           var s: u32 = n / 2u32;
           while s > 0u32 {
             if l < s { t[l] = t[l] + t[l + s]; }
             barrier(local);
             s = s / 2u32;
           }
           if l == 0u32 { o[group_id(0)] = t[0] / (n as i32 - 16); }
         }",
    );
    expect_fixed(&k, 32);
    for l in [8u32, 16, 24, 32, 64, 40] {
        let total = 320u32;
        let args = [Arg::Buffer(0), Arg::Buffer(1)];
        let bufs = [vals(Scalar::I32, total as usize, l), Buffer::zeroed(Scalar::I32, 40)];
        let r = NdRange::new(&[total]).with_local(&[l]);
        three_ways(&k, &r, &args, &bufs);
    }
}

/// Atomics in a kernel compiled per group size: a histogram of `local_id(0) % 8` into a
/// local array, then added to a global one, and a global sum of the group sizes (all
/// `atomic_add`: mixed kinds would leave the kernel without 8-lane code).
#[test]
fn atomics_per_group_size() {
    let k = kernel(
        "kernel k(x: ptr<global, u32>, h: ptr<global, u32>, c: ptr<global, u32>) {
           local b: u32[8];
           let l: u32 = local_id(0);
           if l < 8u32 { b[l] = 0u32; }
           barrier(local);
           atomic_add(b, x[global_id(0)] % 8u32, 1u32);
           barrier(local);
           if l < 8u32 { atomic_add(h, l, b[l] + local_size(0)); }
           if l == 0u32 { atomic_add(c, 0u32, local_size(0)); }
         }",
    );
    expect_fixed(&k, 16);
    for l in [8u32, 16, 24, 256] {
        let total = 768u32;
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
        let bufs = [
            vals(Scalar::U32, total as usize, l),
            Buffer::zeroed(Scalar::U32, 8),
            Buffer::zeroed(Scalar::U32, 1),
        ];
        let r = NdRange::new(&[total]).with_local(&[l]);
        three_ways(&k, &r, &args, &bufs);
    }
}

/// Two threads launching the same program with different group sizes at once (the first
/// launch of each size compiles it): every result is the interpreter's.
#[test]
fn concurrent_launches_of_different_sizes() {
    let k = kernel(SIZED);
    let p = Arc::new(compile(&k, &X86Options::default()).unwrap());
    let total = 1536u32;
    let expected = |l: u32| {
        let groups = (total / l) as usize;
        let bufs = vec![
            f32s(total as usize, 7),
            Buffer::zeroed(Scalar::F32, groups),
            Buffer::zeroed(Scalar::U32, groups),
        ];
        let mut want = bufs.clone();
        let r = NdRange::new(&[total]).with_local(&[l]);
        run(&k, &r, &[Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)], &mut want).unwrap();
        (bufs, want)
    };
    let sizes = [8u32, 16, 24, 32, 48, 64, 96, 128];
    let cases: Vec<_> = sizes.iter().map(|&l| (l, expected(l))).collect();
    std::thread::scope(|s| {
        for chunk in cases.chunks(2) {
            for (l, (bufs, want)) in chunk {
                let p = Arc::clone(&p);
                s.spawn(move || {
                    for _ in 0..3 {
                        let mut got = bufs.clone();
                        let r = NdRange::new(&[total]).with_local(&[*l]);
                        p.run(&r, &[Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)], &mut got)
                            .unwrap();
                        if let Err(m) = results_match(want, &got) {
                            panic!("local {l}: {m}");
                        }
                    }
                });
            }
        }
    });
}

/// Programs loaded from images, with constants whose text must round-trip exactly (NaN
/// with a payload, -0.0, a subnormal, infinities, f64 and f16 values, a hex i32), compiled
/// per group size from the image's text: the same results as the original program and the
/// interpreter.
#[test]
fn images_with_awkward_constants() {
    let src = "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, h: ptr<global, f16>, d: ptr<global, f64>) {
        local t: f32[256];
        let l: u32 = local_id(0);
        let v: f32 = x[global_id(0)];
        t[l] = select(v > 1.0, -0.0, v) + 1e-45f32;
        barrier(local);
        var s: u32 = local_size(0) / 2u32;
        while s > 0u32 {
          if l < s { t[l] = t[l] + t[l + s] * 1.5e-40f32; }
          barrier(local);
          s = s / 2u32;
        }
        let qn: f32 = nanf32(0x7fc01234);
        let y: f32 = select(v < -2.0, qn, select(v > 4.0, -inf, t[l]));
        o[global_id(0)] = select(l == 0u32, t[0], y);
        h[global_id(0)] = (v * 0.1) as f16;
        if l == 1u32 { h[global_id(0)] = 6.0e-8f16; }
        if l == 2u32 { h[global_id(0)] = -65504f16; }
        d[global_id(0)] = (v as f64) * 0.1f64 + 4.9e-324f64 + ((0xfffffff0i32) as f64);
      }";
    let k = kernel(src);
    expect_fixed(&k, 16);
    for optimize in [false, true] {
        let p = compile(&k, &X86Options { optimize, ..X86Options::default() }).unwrap();
        let image = p.to_image().unwrap();
        let q = X86Program::from_image(p.kernel(), &image).unwrap();
        if avx2() {
            assert!(q.for_group([16, 1, 1]).is_some(), "optimize {optimize}");
        }
        for l in [8u32, 16, 32, 64] {
            let n = 256usize;
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3)];
            let bufs = vec![
                f32s(n, l),
                Buffer::zeroed(Scalar::F32, n),
                Buffer::zeroed(Scalar::F16, n),
                Buffer::zeroed(Scalar::F64, n),
            ];
            let r = NdRange::new(&[n as u32]).with_local(&[l]);
            let mut want = bufs.clone();
            run(&k, &r, &args, &mut want).unwrap();
            for (what, prog) in [("built", &p), ("loaded", &q)] {
                let mut got = bufs.clone();
                prog.run(&r, &args, &mut got).unwrap();
                if let Err(m) = results_match(&want, &got) {
                    panic!("{what} optimize {optimize} local {l}: {m}");
                }
                // Bit for bit (NaN payloads, -0.0) with the original program.
                if what == "loaded" {
                    let mut orig = bufs.clone();
                    p.run(&r, &args, &mut orig).unwrap();
                    assert_eq!(orig, got, "optimize {optimize} local {l}");
                }
            }
        }
    }
}

/// A damaged image (each byte of the text flipped in turn, sampled) is refused or, if it
/// loads, never runs another kernel: flips inside the text break the checksum.
#[test]
fn damaged_image_text_is_refused() {
    let k = kernel(SIZED);
    let p = compile(&k, &X86Options::default()).unwrap();
    let image = p.to_image().unwrap();
    let text = k.to_string();
    let Some(at) = image.windows(16).position(|w| w == &text.as_bytes()[..16]) else {
        assert!(!avx2(), "the image carries no text");
        return;
    };
    for i in (at..at + text.len()).step_by(7) {
        let mut bad = image.clone();
        bad[i] ^= 0x20;
        assert!(X86Program::from_image(p.kernel(), &bad).is_err(), "byte {i}");
    }
}

/// The text an image carries is the kernel as compiled: vector accesses lowered, a deep
/// expression split into `let`s of generated names. It must parse back as the same kernel
/// (the loaded program is compiled per group size from it) with the same results.
#[test]
fn image_text_of_lowered_vectors_and_deep_expressions() {
    let deep = (0..150).fold("v".to_string(), |e, i| format!("({e} + {}.0)", i % 7));
    let src = format!(
        "kernel k(x: ptr<global, f32>, o: ptr<global, f32>) {{
           local t: f32[256];
           let l: u32 = local_id(0);
           let v: f32 = x[global_id(0)];
           t[l] = {deep};
           barrier(local);
           if l < local_size(0) / 4u32 {{
             let q: f32x4 = vload4(t, l * 4u32);
             vstore(o, global_id(0) * 4u32, q * f32x4(2.0) + f32x4(extract(q, 3)));
           }}
         }}"
    );
    let k = kernel(&src);
    expect_fixed(&k, 16);
    for optimize in [false, true] {
        let p = compile(&k, &X86Options { optimize, ..X86Options::default() }).unwrap();
        let q = X86Program::from_image(p.kernel(), &p.to_image().unwrap()).unwrap();
        if avx2() {
            assert!(q.for_group([16, 1, 1]).is_some(), "optimize {optimize}");
        }
        for l in [8u32, 16, 32, 64] {
            let n = 128usize;
            let args = [Arg::Buffer(0), Arg::Buffer(1)];
            let bufs = vec![f32s(n, l), Buffer::zeroed(Scalar::F32, 4 * n)];
            let r = NdRange::new(&[n as u32]).with_local(&[l]);
            let mut want = bufs.clone();
            let wr = run(&k, &r, &args, &mut want);
            assert!(wr.is_ok(), "{wr:?}");
            for prog in [&p, &q] {
                let mut got = bufs.clone();
                assert_eq!(wr, prog.run(&r, &args, &mut got), "optimize {optimize} local {l}");
                if wr.is_ok() {
                    if let Err(m) = results_match(&want, &got) {
                        panic!("optimize {optimize} local {l}: {m}");
                    }
                }
            }
        }
    }
}

/// Through the cpu device and its persistent cache: a kernel built by one device is loaded
/// from disk by a fresh one (as in another process), whose launches of several group sizes
/// (each compiled from the image's text at its first launch) and of sizes it cannot
/// specialize give the interpreter's results, on two threads.
#[test]
fn device_programs_from_disk_specialize() {
    use kiln_runtime::cache::PersistentCache;
    use kiln_runtime::device::cpu::CpuDevice;
    use kiln_runtime::device::registry::OpenOptions;
    use kiln_runtime::{Context, ContextConfig, Device};
    let options = OpenOptions { threads: Some(2), ..OpenOptions::default() };
    let open =
        || kiln_ir::testing::require("KILN_REQUIRE_TOOLS", CpuDevice::open(&options)).map(Arc::new);
    let t = temp_dir::TempDir::new("rev14-persist");
    let context = |dev: &Arc<CpuDevice>| {
        let cfg = ContextConfig {
            persistent: Some(PersistentCache::new(&t.0)),
            workers: 1,
            ..Default::default()
        };
        Context::with_config(dev.clone(), cfg)
    };
    let module = kiln_ir::parse_module(SIZED).unwrap();
    let k = &module.kernels[0];
    let Some(first) = open() else { return };
    let p = context(&first).build_program(&module, &[], "").unwrap();
    assert!(!p.from_disk);
    let Some(second) = open() else { return };
    let ctx = context(&second);
    let p = ctx.build_program(&module, &[], "").unwrap();
    assert!(p.from_disk);
    let handle = second.kernel(&p.handle, k.name()).unwrap();
    let total = 4608u32;
    for l in [8u32, 16, 24, 72, 256, 12, 64, 16] {
        let (args, bufs) = sized_args(total, l);
        let r = NdRange::new(&[total]).with_local(&[l]);
        let mut want = bufs.clone();
        run(k, &r, &args, &mut want).unwrap();
        let mut got = bufs.clone();
        second.run(&handle, &r, &args, &mut got).unwrap();
        if let Err(m) = results_match(&want, &got) {
            panic!("local {l}: {m}");
        }
    }
}

/// Global sizes that are not a multiple of the group size (a last group shorter than the
/// others, or an error, as the interpreter says): a program compiled for the group size
/// must not assume every group is full.
#[test]
fn ragged_last_groups() {
    let k = kernel(SIZED);
    for (total, l) in [(100u32, 16u32), (72, 64), (40, 24), (264, 256), (20, 8)] {
        let (args, bufs) = sized_args(total, l);
        let r = NdRange::new(&[total]).with_local(&[l]);
        three_ways(&k, &r, &args, &bufs);
    }
}

/// Launches that leave the group size to the runtime: the size it picks is the
/// interpreter's, and the program compiled for it agrees.
#[test]
fn group_size_left_to_the_runtime() {
    let k = kernel(SIZED);
    for total in [64u32, 256, 1024, 96, 40] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
        let bufs = vec![
            f32s(total as usize, total),
            Buffer::zeroed(Scalar::F32, total as usize),
            Buffer::zeroed(Scalar::U32, total as usize),
        ];
        three_ways(&k, &NdRange::new(&[total]), &args, &bufs);
    }
}
