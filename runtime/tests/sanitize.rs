//! `-fsanitize=bounds` through the runtime: deliberately bad kernels (out-of-bounds loads,
//! stores and atomics; misaligned and partly out-of-bounds vector accesses; 1-D and 2-D ranges; signed, 64-bit and loop-carried indices; local
//! and private arrays) are reported with the interpreter's exact message when they have one
//! violation, and with a real violation when they have several; in-bounds kernels (the
//! examples and random kernels) give the same buffers with and without the sanitizer; loops
//! that a driver stops early are reported.
//!
//! Every test runs on the interpreter executing the *sanitized* kernel (an [`IrDevice`] of
//! kind `Other`, so the context applies the rewrite: this checks the rewrite and the report
//! on every machine), on Vulkan (lavapipe in CI; skipped with a message without a device,
//! unless `KILN_REQUIRE_TOOLS` is set) and on CUDA (by hand on a GPU machine; skipped with a
//! message without one, unless `KILN_REQUIRE_CUDA` is set).

use kiln_runtime::QueueGraph;
use std::sync::Arc;

use kiln_ir::interp;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::{results_match, seeded_cases, GenConfig, STEP_LIMIT};
use kiln_ir::{parse_module, Kernel, Module};
use kiln_runtime::device::cuda::CudaDevice;
use kiln_runtime::device::vulkan::VulkanDevice;
use kiln_runtime::{
    interp_device, AccessMode, AnyBuffer, Context, ContextConfig, Device, DeviceError, DeviceKind,
    IrDevice, IrExecutor, Queue, QueueOrder, RuntimeError,
};

const SAN: &str = "-fsanitize=bounds";

/// The interpreter posing as a GPU: the context sanitizes its programs, and it runs the
/// rewritten kernels (which never go out of bounds themselves).
struct InterpAsGpu;

impl IrExecutor for InterpAsGpu {
    fn name(&self) -> String {
        "interp-as-gpu".into()
    }
    fn kind(&self) -> DeviceKind {
        DeviceKind::Other
    }
    fn version(&self) -> String {
        "1".into()
    }
    fn run(&self, k: &Kernel, r: &NdRange, a: &[Arg], b: &mut [Buffer]) -> Result<(), String> {
        // A sanitized kernel goes on after a violation, on zeros: bound its work as
        // generously as the generated kernels' own limit allows for their checks.
        let opts = interp::RunOptions::with_max_steps(20 * STEP_LIMIT);
        interp::run_with(k, r, a, b, &opts).map_err(|e| e.to_string())
    }
}

fn devices() -> Vec<Arc<dyn Device>> {
    let mut out: Vec<Arc<dyn Device>> = vec![Arc::new(IrDevice(InterpAsGpu))];
    if let Some(d) = kiln_ir::testing::optional("KILN_REQUIRE_TOOLS", VulkanDevice::open()) {
        out.push(Arc::new(d));
    }
    if let Some(d) = kiln_ir::testing::optional("KILN_REQUIRE_CUDA", CudaDevice::open()) {
        out.push(Arc::new(d));
    }
    out
}

fn kernel(src: &str) -> Kernel {
    parse_module(src).unwrap_or_else(|e| panic!("{e}\n{src}")).kernels.remove(0)
}

fn example(name: &str) -> Kernel {
    kiln_ir::testing::example_kernel(name)
}

/// Builds `k` with `options` through `ctx`'s cache and runs it on a queue, as an
/// application would; returns the final buffers or the launch's error.
fn launch(
    ctx: &Context,
    k: &Kernel,
    options: &str,
    range: &NdRange,
    args: &[Arg],
    bufs: &[Buffer],
) -> Result<Vec<Buffer>, DeviceError> {
    let p = ctx.build_program(&Module::new(vec![k.clone()]), &[], options)?;
    let kh = ctx.kernel(&p, k.name())?;
    let any: Vec<AnyBuffer> = bufs.iter().cloned().map(AnyBuffer::new).collect();
    let q = Queue::new(ctx, QueueOrder::InOrder);
    q.submit(|h| {
        let kargs = args
            .iter()
            .map(|a| match a {
                Arg::Scalar(v) => Arg::Scalar(*v),
                Arg::Buffer(i) => Arg::Buffer(h.access_any(&any[*i], AccessMode::ReadWrite)),
                Arg::Range { buffer, offset, len } => Arg::Buffer(
                    h.access_any(&any[*buffer], AccessMode::ReadWrite)
                        .with_range(*offset, *len)
                        .unwrap(),
                ),
            })
            .collect();
        h.parallel_for(&kh, *range, kargs);
    });
    match q.wait() {
        Ok(()) => Ok(any.iter().map(|b| b.contents().unwrap()).collect()),
        Err(RuntimeError::Kernel { source, .. }) => Err(source),
        Err(e) => panic!("{e}"),
    }
}

fn u32s(v: &[u32]) -> Buffer {
    Buffer::from_slice(v)
}

fn f32s(n: usize) -> Buffer {
    Buffer::from_slice(&(0..n).map(|i| i as f32 * 0.5 + 1.0).collect::<Vec<_>>())
}

/// A kernel with exactly one out-of-bounds access in its launch.
struct Bad {
    what: &'static str,
    kernel: Kernel,
    range: NdRange,
    args: Vec<Arg>,
    bufs: Vec<Buffer>,
}

fn bad_kernels() -> Vec<Bad> {
    let b = Arg::Buffer;
    vec![
        Bad {
            what: "load past the end",
            kernel: kernel(
                "kernel shift(x: ptr<global, f32>, y: ptr<global, f32>) {
                   let i: u32 = global_id(0);
                   y[i] = x[i + 1];
                 }",
            ),
            range: NdRange::new(&[8]).with_local(&[4]),
            args: vec![b(0), b(1)],
            bufs: vec![f32s(8), f32s(8)],
        },
        Bad {
            what: "store past the end (the issue's reduce with too small a `partial`)",
            kernel: example("reduce"),
            range: NdRange::new(&[192]),
            args: vec![b(0), b(1), Arg::scalar(192u32)],
            bufs: vec![f32s(192), f32s(2)],
        },
        Bad {
            what: "atomic with a data-dependent index",
            kernel: kernel(
                "kernel hist(bins: ptr<global, u32>, x: ptr<global, u32>) {
                   let i: u32 = global_id(0);
                   atomic_add(bins, x[i], 1u32);
                 }",
            ),
            range: NdRange::new(&[8]),
            args: vec![b(0), b(1)],
            bufs: vec![u32s(&[0; 4]), u32s(&[0, 1, 2, 3, 9, 1, 2, 0])],
        },
        Bad {
            what: "atomic whose result is used",
            kernel: kernel(
                "kernel slots(c: ptr<global, u32>, out: ptr<global, u32>) {
                   let i: u32 = global_id(0);
                   let old: u32 = atomic_xchg(c, i / 2, i);
                   out[i] = old + 1;
                 }",
            ),
            range: NdRange::new(&[7]).with_local(&[7]),
            args: vec![b(0), b(1)],
            bufs: vec![u32s(&[0; 3]), u32s(&[0; 7])],
        },
        Bad {
            what: "2-D store",
            kernel: kernel(
                "kernel grid(a: ptr<global, f32>, out: ptr<global, f32>, w: u32) {
                   let x: u32 = global_id(0);
                   let y: u32 = global_id(1);
                   out[y * w + x] = a[y * w + x] * 2.0;
                 }",
            ),
            range: NdRange::new(&[4, 3]).with_local(&[2, 1]),
            args: vec![b(0), b(1), Arg::scalar(4u32)],
            bufs: vec![f32s(12), f32s(11)],
        },
        Bad {
            what: "negative signed index",
            kernel: kernel(
                "kernel back(x: ptr<global, i32>, y: ptr<global, i32>) {
                   let i: i32 = global_id(0) as i32;
                   y[i] = x[i - 1] + 5i32;
                 }",
            ),
            range: NdRange::new(&[4]),
            args: vec![b(0), b(1)],
            bufs: vec![Buffer::from_slice(&[1i32, 2, 3, 4]), Buffer::from_slice(&[0i32; 4])],
        },
        Bad {
            what: "64-bit index above 2^32",
            kernel: kernel(
                "kernel far(x: ptr<global, u32>, y: ptr<global, u32>) {
                   let i: u32 = global_id(0);
                   y[i] = x[(i as u64) << 32u64];
                 }",
            ),
            range: NdRange::new(&[2]),
            args: vec![b(0), b(1)],
            bufs: vec![u32s(&[7, 8]), u32s(&[0, 0])],
        },
        Bad {
            what: "local array",
            kernel: kernel(
                "kernel rot(out: ptr<global, u32>) #reqd_work_group_size(4, 1, 1) {
                   local t: u32[4];
                   let l: u32 = local_id(0);
                   t[l] = l * 10;
                   barrier(local);
                   out[global_id(0)] = t[(l + 1) % 5];
                 }",
            ),
            range: NdRange::new(&[4]),
            args: vec![b(0)],
            bufs: vec![u32s(&[0; 4])],
        },
        Bad {
            what: "private array in a loop",
            kernel: kernel(
                "kernel fill(out: ptr<global, f32>) {
                   private p: f32[3];
                   for j: u32 in 0 .. 4 step 1 {
                     p[j] = j as f32;
                   }
                   out[0] = p[2];
                 }",
            ),
            range: NdRange::new(&[1]),
            args: vec![b(0)],
            bufs: vec![f32s(1)],
        },
        Bad {
            what: "load in a loop running one too far",
            kernel: kernel(
                "kernel sum(x: ptr<global, f32>, out: ptr<global, f32>, n: u32) {
                   var s: f32 = 0.0;
                   for j: u32 in 0 .. n + 1 step 1 {
                     s = s + x[j];
                   }
                   out[global_id(0)] = s;
                 }",
            ),
            range: NdRange::new(&[1]),
            args: vec![b(0), b(1), Arg::scalar(5u32)],
            bufs: vec![f32s(5), f32s(1)],
        },
        Bad {
            what: "load in a while condition",
            kernel: kernel(
                "kernel find(x: ptr<global, u32>, out: ptr<global, u32>) {
                   var i: u32 = 0;
                   while x[i] != 0 {
                     i = i + 1;
                   }
                   out[0] = i;
                 }",
            ),
            range: NdRange::new(&[1]),
            args: vec![b(0), b(1)],
            bufs: vec![u32s(&[3, 1, 4]), u32s(&[0])],
        },
        Bad {
            what: "misaligned vector load (an error the scalar lowering alone would lose)",
            kernel: kernel(
                "kernel vmis(x: ptr<global, f32>, y: ptr<global, f32>, o: u32) {
                   let g: u32 = global_id(0);
                   let i: u32 = g * 4u32 + (g == 1u32 ? o : 0u32);
                   vstore(y, g * 4u32, vload4(x, i) * f32x4(2.0));
                 }",
            ),
            range: NdRange::new(&[3]),
            args: vec![b(0), b(1), Arg::scalar(2u32)],
            bufs: vec![f32s(16), f32s(12)],
        },
        Bad {
            what: "misaligned vector store to a local array",
            kernel: kernel(
                "kernel vloc(out: ptr<global, i32>, o: u32) #reqd_work_group_size(2, 1, 1) {
                   local t: i32[8];
                   let l: u32 = local_id(0);
                   vstore(t, l * 4u32 + l * o, i32x4(l as i32));
                   barrier(local);
                   out[global_id(0)] = t[l];
                 }",
            ),
            range: NdRange::new(&[2]),
            args: vec![b(0), Arg::scalar(1u32)],
            bufs: vec![Buffer::from_slice(&[0i32; 2])],
        },
        Bad {
            what: "vector load whose last lane is past the end",
            kernel: kernel(
                "kernel vtail(x: ptr<global, u32>, y: ptr<global, u32>) {
                   let g: u32 = global_id(0);
                   vstore(y, g * 2u32, vload2(x, g * 2u32));
                 }",
            ),
            range: NdRange::new(&[3]),
            args: vec![b(0), b(1)],
            bufs: vec![u32s(&[1, 2, 3, 4, 5]), u32s(&[0; 6])],
        },
        Bad {
            what: "vector store starting past the end",
            kernel: kernel(
                "kernel vpast(y: ptr<global, f32>) {
                   vstore(y, global_id(0) * 4u32, f32x4(1.5));
                 }",
            ),
            range: NdRange::new(&[3]),
            args: vec![b(0)],
            bufs: vec![f32s(8)],
        },
        Bad {
            what: "load in an else-if condition",
            kernel: kernel(
                "kernel pick(x: ptr<global, u32>, out: ptr<global, u32>) {
                   let i: u32 = global_id(0);
                   if i == 0 {
                     out[i] = 1;
                   } else if x[i * 2] > 3 {
                     out[i] = 2;
                   } else {
                     out[i] = 3;
                   }
                 }",
            ),
            range: NdRange::new(&[3]),
            args: vec![b(0), b(1)],
            bufs: vec![u32s(&[1, 5, 9, 2]), u32s(&[0; 3])],
        },
    ]
}

/// The interpreter's error for a kernel with one violation.
fn interp_error(b: &Bad) -> String {
    let mut bufs = b.bufs.clone();
    match interp::run(&b.kernel, &b.range, &b.args, &mut bufs) {
        Err(e) => e.to_string(),
        Ok(()) => panic!("{}: the interpreter found no violation", b.what),
    }
}

#[test]
fn one_violation_is_reported_exactly_as_the_interpreter_reports_it() {
    let cases = bad_kernels();
    for dev in devices() {
        let ctx = Context::new(dev.clone());
        for b in &cases {
            let want = interp_error(b);
            assert!(
                want.contains("out of bounds") || want.contains("misaligned"),
                "{}: {want}",
                b.what
            );
            match launch(&ctx, &b.kernel, SAN, &b.range, &b.args, &b.bufs) {
                Err(DeviceError::Launch(got)) => {
                    assert_eq!(got, want, "{} on {}", b.what, dev.name())
                }
                other => panic!("{} on {}: {other:?}, want {want}", b.what, dev.name()),
            }
        }
    }
}

#[test]
fn the_interpreter_device_with_the_option_reports_the_same() {
    let ctx = Context::new(interp_device());
    for b in &bad_kernels() {
        let got = launch(&ctx, &b.kernel, SAN, &b.range, &b.args, &b.bufs).unwrap_err();
        assert_eq!(got.to_string(), interp_error(b), "{}", b.what);
    }
}

#[test]
fn with_many_violations_a_real_one_is_reported() {
    // Work-items 4..8 each load `x[i]` past the end of a 4-element `x`.
    let k = kernel(
        "kernel copy(x: ptr<global, u32>, y: ptr<global, u32>) {
           let i: u32 = global_id(0);
           y[i] = x[i];
         }",
    );
    let range = NdRange::new(&[8]).with_local(&[2]);
    let args = [Arg::Buffer(0), Arg::Buffer(1)];
    let bufs = [u32s(&[1, 2, 3, 4]), u32s(&[0; 8])];
    for dev in devices() {
        let ctx = Context::new(dev.clone());
        let got = launch(&ctx, &k, SAN, &range, &args, &bufs).unwrap_err().to_string();
        let real = (4..8).any(|i| {
            got == format!(
                "kernel `copy`, work-item ({i}, 0, 0): load `x[{i}]` out of bounds (buffer has 4 \
                 elements)"
            )
        });
        assert!(real, "{} reported {got}", dev.name());
    }
}

/// `n`-trip `for` and `while` loops, and a `for` loop of constant bounds (whose trip count
/// a driver's compiler knows); lavapipe stops each after 65,535 iterations.
fn spin_kernels() -> [Kernel; 3] {
    [
        kernel(
            "kernel spin_const(out: ptr<global, u32>, n: u32) {
               var s: u32 = 0;
               for i: u32 in 0 .. 70000 step 1 {
                 s = s + out[1];
               }
               out[0] = s;
             }",
        ),
        kernel(
            "kernel spin_for(out: ptr<global, u32>, n: u32) {
               var s: u32 = 0;
               for i: u32 in 0 .. n step 1 {
                 s = s + out[1];
               }
               out[0] = s;
             }",
        ),
        kernel(
            "kernel spin_while(out: ptr<global, u32>, n: u32) {
               var w: u32 = 0;
               while w < n {
                 w = w + out[1];
               }
               out[0] = w;
             }",
        ),
    ]
}

#[test]
fn loops_stopped_by_the_driver_are_reported() {
    let range = NdRange::new(&[1]);
    let args = [Arg::Buffer(0), Arg::scalar(70_000u32)];
    let bufs = [u32s(&[0, 1])];
    for dev in devices() {
        let ctx = Context::new(dev.clone());
        for k in spin_kernels() {
            let plain = launch(&ctx, &k, "", &range, &args, &bufs).unwrap();
            let trips = plain[0].to_vec::<u32>().unwrap()[0];
            let checked = launch(&ctx, &k, SAN, &range, &args, &bufs);
            if trips == 70_000 {
                // This device runs the loop to its end: nothing to report, same result.
                assert_eq!(checked.unwrap(), plain, "{} on {}", k.name(), dev.name());
            } else {
                let loop_text =
                    if k.name() != "spin_while" { "`for i` loop" } else { "`while w < n` loop" };
                let want = format!(
                    "kernel `{}`, work-item (0, 0, 0): {loop_text} stopped by the device after \
                     {trips} iterations with iterations left (a driver limit on loop trips); \
                     the results are incomplete",
                    k.name()
                );
                assert_eq!(checked.unwrap_err().to_string(), want, "on {}", dev.name());
            }
        }
    }
}

#[test]
fn lavapipe_really_stops_long_loops() {
    // The reason loops are checked at all: the driver cuts them silently. Should lavapipe
    // lift its cap, this fails, and the loop check's test above then tests nothing there.
    let Some(dev) = kiln_ir::testing::require("KILN_REQUIRE_TOOLS", VulkanDevice::open()) else {
        return;
    };
    if !dev.name().contains("llvmpipe") {
        kiln_ir::testing::skip(&format!("the Vulkan device is {}, not lavapipe", dev.name()));
        return;
    }
    let ctx = Context::new(Arc::new(dev));
    let bufs = [u32s(&[0, 1])];
    let args = [Arg::Buffer(0), Arg::scalar(70_000u32)];
    for k in spin_kernels() {
        let out = launch(&ctx, &k, "", &NdRange::new(&[1]), &args, &bufs).unwrap();
        assert_eq!(out[0].to_vec::<u32>().unwrap()[0], 65_535, "{}", k.name());
    }
}

/// `k` gives the same buffers with and without the sanitizer on every device.
fn same_with_and_without(
    ctx: &Context,
    k: &Kernel,
    range: &NdRange,
    args: &[Arg],
    bufs: &[Buffer],
) {
    let plain = launch(ctx, k, "", range, args, bufs);
    let checked = launch(ctx, k, SAN, range, args, bufs);
    match (plain, checked) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{k}"),
        (
            Err(DeviceError::Build { message: a, .. }),
            Err(DeviceError::Build { message: b, .. }),
        ) if a.contains("cannot be expressed") => {
            assert!(b.contains("cannot be expressed"), "{b}")
        }
        (a, b) => panic!("without: {a:?}\nwith: {b:?}\n{k}"),
    }
}

#[test]
fn in_bounds_examples_are_unchanged() {
    let saxpy = example("saxpy");
    let reduce = example("reduce");
    let stencil = example("stencil2d");
    let b = Arg::Buffer;
    for dev in devices() {
        let ctx = Context::new(dev);
        same_with_and_without(
            &ctx,
            &saxpy,
            &NdRange::new(&[100]).with_local(&[20]),
            &[b(0), b(1), Arg::scalar(2.5f32), Arg::scalar(97u32)],
            &[f32s(100), f32s(100)],
        );
        same_with_and_without(
            &ctx,
            &reduce,
            &NdRange::new(&[256]),
            &[b(0), b(1), Arg::scalar(250u32)],
            &[f32s(256), f32s(4)],
        );
        let n = stencil.params().len();
        assert_eq!(n, 4, "stencil2d's parameters changed: {stencil}");
        same_with_and_without(
            &ctx,
            &stencil,
            &NdRange::new(&[16, 8]).with_local(&[8, 2]),
            &[b(0), b(1), Arg::scalar(16u32), Arg::scalar(8u32)],
            &[f32s(128), f32s(128)],
        );
    }
}

#[test]
fn random_in_bounds_kernels_are_unchanged() {
    let cfg = GenConfig::default();
    let cases: Vec<_> = seeded_cases(0x5a11_7153_0b0d_5eed, &cfg).take(60).collect();
    for dev in devices() {
        let ctx = Context::new(dev.clone());
        let mut refused = 0;
        for (n, case) in cases.iter().enumerate() {
            let want = case.run().unwrap();
            let checked = launch(&ctx, &case.kernel, SAN, &case.range, &case.args, &case.buffers);
            match checked {
                Ok(got) if dev.kind() == DeviceKind::Other => {
                    // The interpreter runs the sanitized kernel: bit for bit.
                    assert_eq!(got, want, "case {n}\n{}", case.kernel)
                }
                Ok(got) => {
                    let plain =
                        launch(&ctx, &case.kernel, "", &case.range, &case.args, &case.buffers)
                            .unwrap();
                    assert_eq!(got, plain, "case {n} on {}\n{}", dev.name(), case.kernel);
                    results_match(&want, &got).unwrap();
                }
                Err(DeviceError::Build { message, .. })
                    if message.contains("cannot be expressed") =>
                {
                    refused += 1
                }
                Err(e) => panic!("case {n} on {}: {e}\n{}", dev.name(), case.kernel),
            }
        }
        // No case was refused on any device when this was written (lavapipe, the interpreter);
        // one is allowed (an f64 `fma`, which lavapipe cannot run exactly, in a changed
        // generator's draw). A device that starts refusing more fails here.
        eprintln!("{}: {refused} of {} refused", dev.name(), cases.len());
        assert!(refused <= 1, "{}: {refused} of {} refused", dev.name(), cases.len());
    }
}

#[test]
fn sanitized_programs_are_separate_cache_entries() {
    let k = example("saxpy");
    let m = Module::new(vec![k.clone()]);
    for dev in devices() {
        let ctx = Context::new(dev.clone());
        let plain = ctx.build_program(&m, &[], "").unwrap();
        let checked = ctx.build_program(&m, &[], SAN).unwrap();
        assert_ne!(plain.key.options, checked.key.options);
        assert_ne!(plain.binary, checked.binary, "on {}", dev.name());
        assert!(plain.sanitized.is_none() && checked.sanitized.is_some());
        let again = ctx.build_program(&m, &[], SAN).unwrap();
        assert_eq!(again.binary, checked.binary);
        let st = ctx.program_cache_stats();
        assert_eq!((st.builds, st.hits), (2, 1), "on {}", dev.name());
        // The option also comes from KILN_PROGRAM_BUILD_OPTIONS (here: the config field).
        let env = Context::with_config(
            dev.clone(),
            ContextConfig { env_build_options: SAN.into(), ..ContextConfig::default() },
        );
        let bad = &bad_kernels()[1];
        let got = launch(&env, &bad.kernel, "", &bad.range, &bad.args, &bad.bufs).unwrap_err();
        assert_eq!(got.to_string(), interp_error(bad));
    }
}

#[test]
fn a_sanitized_program_from_the_disk_cache_still_reports() {
    let dir = std::env::temp_dir().join(format!("kiln-sanitize-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bad = &bad_kernels()[0];
    for dev in devices() {
        let mut from_disk = Vec::new();
        for _ in 0..2 {
            let cfg = ContextConfig {
                persistent: Some(kiln_runtime::cache::PersistentCache::new(&dir)),
                ..ContextConfig::default()
            };
            let ctx = Context::with_config(dev.clone(), cfg);
            let p = ctx.build_program(&Module::new(vec![bad.kernel.clone()]), &[], SAN).unwrap();
            from_disk.push(p.from_disk);
            let got = launch(&ctx, &bad.kernel, SAN, &bad.range, &bad.args, &bad.bufs);
            assert_eq!(got.unwrap_err().to_string(), interp_error(bad), "on {}", dev.name());
        }
        assert_eq!(from_disk, [false, true], "on {}", dev.name());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn the_docs_rust_example_reports() {
    // docs/sanitize.md's example, launched.
    let module =
        kiln_ir::parse_module("kernel k(x: ptr<global, u32>) { x[global_id(0) + 1] = 7; }")
            .unwrap();
    for dev in devices() {
        let ctx = Context::new(dev.clone());
        let program = ctx.build_program(&module, &[], "-fsanitize=bounds").unwrap();
        let kernel = ctx.kernel(&program, "k").unwrap();
        let x = AnyBuffer::new(u32s(&[0; 4]));
        let q = Queue::new(&ctx, QueueOrder::InOrder);
        q.submit(|h| {
            let a = h.access_any(&x, AccessMode::ReadWrite);
            h.parallel_for(&kernel, NdRange::new(&[4]), vec![Arg::Buffer(a)]);
        });
        let Err(RuntimeError::Kernel { source: DeviceError::Launch(m), .. }) = q.wait() else {
            panic!("no violation reported on {}", dev.name())
        };
        assert_eq!(
            m,
            "kernel `k`, work-item (3, 0, 0): store `x[4]` out of bounds (buffer has 4 elements)"
        );
    }
}

#[test]
fn random_kernels_with_a_short_buffer_report_what_the_interpreter_reports() {
    // The interpreter running the sanitized kernel follows the interpreter's own schedule,
    // so even with many violations the first one recorded is the one the interpreter
    // stops at: the messages must be equal, whichever buffer is cut short.
    let ctx = Context::new(Arc::new(IrDevice(InterpAsGpu)));
    let (mut reported, mut clean) = (0, 0);
    for (n, case) in seeded_cases(0x0b0d_5eed_5a11_7153, &GenConfig::default()).take(80).enumerate()
    {
        for b in 0..case.buffers.len() {
            let mut bufs = case.buffers.clone();
            let old = &bufs[b];
            let keep = old.len() / 2 * old.elem().size_bytes();
            bufs[b] = Buffer::from_bytes(old.elem(), old.as_bytes()[..keep].to_vec()).unwrap();
            let mut want = bufs.clone();
            let opts = interp::RunOptions::with_max_steps(STEP_LIMIT);
            let expected =
                interp::run_with(&case.kernel, &case.range, &case.args, &mut want, &opts);
            let got = launch(&ctx, &case.kernel, SAN, &case.range, &case.args, &bufs);
            match (expected, got) {
                (Ok(()), Ok(got)) => {
                    assert_eq!(got, want, "case {n}, buffer {b}\n{}", case.kernel);
                    clean += 1;
                }
                (Err(e), Err(got)) if e.message.contains("out of bounds") => {
                    assert_eq!(
                        got.to_string(),
                        e.to_string(),
                        "case {n}, buffer {b}\n{}",
                        case.kernel
                    );
                    reported += 1;
                }
                (Err(e), _) if !e.message.contains("out of bounds") => {} // the step limit
                (e, g) => panic!(
                    "case {n}, buffer {b}: interpreter {e:?}, sanitized {g:?}\n{}",
                    case.kernel
                ),
            }
        }
    }
    eprintln!("{reported} short-buffer launches reported as the interpreter does, {clean} clean");
    assert!(reported >= 40, "only {reported} launches went out of bounds");
}

/// Bounds-checked launches in a command graph: on a device with memory of its own they are
/// recorded with the partition's other launches (one recording), and a replay reports the
/// violation of the node that made it, with the interpreter's message, after an earlier
/// replay in bounds (whose error buffers stayed zero) succeeded.
#[test]
fn graph_replays_report_the_violating_node() {
    use kiln_runtime::graph::{Graph, GraphProperties, Node};
    use kiln_runtime::Accessor;
    let src = "
kernel scatter(idx: ptr<global, u32>, x: ptr<global, u32>) {
  let i: u32 = global_id(0);
  x[idx[i]] = i + 1u32;
}
kernel inc(x: ptr<global, u32>) {
  let i: u32 = global_id(0);
  x[i] = x[i] + 1u32;
}";
    let m = parse_module(src).unwrap();
    for dev in devices() {
        let name = dev.name();
        let ctx = Context::new(dev.clone());
        let p = ctx.build_program(&m, &[], SAN).unwrap();
        let (ks, ki) = (ctx.kernel(&p, "scatter").unwrap(), ctx.kernel(&p, "inc").unwrap());
        let idx_t = kiln_runtime::Buffer::<u32>::from_slice(&[3, 2, 1, 0]);
        let idx = AnyBuffer::from(&idx_t);
        let x = AnyBuffer::new(u32s(&[0; 4]));
        let y = AnyBuffer::new(u32s(&[10; 4]));
        let acc = |b: &AnyBuffer, m| Arg::Buffer(Accessor::new(b, m));
        let g = Graph::new(&ctx, GraphProperties::default());
        let r = NdRange::new(&[4]);
        let a = g
            .add(Node::kernel(&ki, r, vec![acc(&y, AccessMode::ReadWrite)]).named("first"), &[])
            .unwrap();
        let s = Node::kernel(&ks, r, vec![acc(&idx, AccessMode::Read), acc(&x, AccessMode::Write)]);
        let b = g.add(s.named("scatter"), &[a]).unwrap();
        g.add(Node::kernel(&ki, r, vec![acc(&y, AccessMode::ReadWrite)]).named("last"), &[b])
            .unwrap();
        let exec = g.finalize().unwrap();
        let want_rec = usize::from(dev.memory_space().is_some());
        assert_eq!(exec.device_recordings(), want_rec, "{name}: one recording, checks included");
        let q = Queue::new(&ctx, QueueOrder::InOrder);
        q.submit_graph(&exec).wait().unwrap();
        assert_eq!(x.contents().unwrap(), u32s(&[4, 3, 2, 1]), "{name}");
        assert_eq!(y.contents().unwrap(), u32s(&[12; 4]), "{name}");
        // Out of bounds: the scatter node is named, with the interpreter's message.
        let bad = [3u32, 2, 9, 0];
        idx_t.write(&bad).unwrap();
        let mut bufs = vec![u32s(&bad), u32s(&[0; 4])];
        let k = m.kernels.iter().find(|k| k.name() == "scatter").unwrap();
        let want =
            interp::run(k, &NdRange::new(&[4]), &[Arg::Buffer(0), Arg::Buffer(1)], &mut bufs)
                .unwrap_err()
                .to_string();
        match q.submit_graph(&exec).wait() {
            Err(RuntimeError::Kernel { command, source: DeviceError::Launch(got) }) => {
                assert!(command.ends_with("`scatter`"), "{name}: {command}");
                assert_eq!(got, want, "{name}");
            }
            other => panic!("{name}: {other:?}, want {want}"),
        }
    }
}
