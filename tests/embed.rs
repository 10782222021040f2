//! Embedding kiln through the facade the way README shows it (source -> fuse -> launch ->
//! read back), on the interpreter and on Vulkan (lavapipe in CI), and the facade's refusals:
//! each names the kernel and parameter, none panics.
//!
//! Without a Vulkan device the Vulkan tests skip with a message, unless `KILN_REQUIRE_TOOLS`
//! is set, when they fail.

use kiln::{args, Device, Error, FusionSpec, Jit, NdRange, ParamRef, RangeSpec};

const CHAIN: &str = include_str!("../examples/fusion/chain.kir");
const CHAIN_SPEC: &str = include_str!("../examples/fusion/chain.toml");
const SAXPY: &str = include_str!("../examples/saxpy.kir");

fn vulkan() -> Option<Device> {
    kiln_ir::testing::require("KILN_REQUIRE_TOOLS", Device::vulkan())
}

/// The README's path: saxpy by name, then the chain fused and launched with the originals'
/// arguments; results against the values the kernels compute.
fn source_fuse_launch_read(device: Device) {
    let jit = Jit::new(device).unwrap();
    let module = jit.compile_source("saxpy.kir", SAXPY).unwrap();
    let n = 100u32;
    let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let x = jit.buffer_from(&xs);
    let y = jit.buffer_from(&vec![1.0f32; n as usize]);
    // A global size past n: the kernel's guard keeps the extra work-items out.
    jit.launch(&module, "saxpy", NdRange::new(&[128]), args![&x, &y, 3.0f32, n])
        .unwrap()
        .wait()
        .unwrap();
    let want: Vec<f32> = xs.iter().map(|x| 3.0 * x + 1.0).collect();
    assert_eq!(y.read().unwrap(), want);

    let chain = jit.compile_source("chain.kir", CHAIN).unwrap();
    let fused = jit.fuse(&chain, &FusionSpec::from_toml(CHAIN_SPEC).unwrap()).unwrap();
    assert!(fused.warnings().is_empty(), "{:?}", fused.warnings());
    let len = 64;
    let a = jit.buffer_from(&(0..len).map(|i| i as f32).collect::<Vec<_>>());
    let b = jit.buffer_from(&(0..len).map(|i| (i * 7 % 5) as f32).collect::<Vec<_>>());
    let c = jit.buffer_from(&(0..len).map(|i| 1.0 + (i % 3) as f32).collect::<Vec<_>>());
    let sentinel = vec![-9.0f32; len];
    let (t1, t2) = (jit.buffer_from(&sentinel), jit.buffer_from(&sentinel));
    let out = jit.buffer_zeroed::<f32>(len);
    jit.launch_fused(&fused, &[args![&a, &b, &t1], args![&t1, &c, &t2], args![&t2, &a, &out]])
        .unwrap()
        .wait()
        .unwrap();
    let (av, bv, cv) = (a.read().unwrap(), b.read().unwrap(), c.read().unwrap());
    let want: Vec<f32> = (0..len).map(|i| (av[i] + bv[i]) * cv[i] - av[i]).collect();
    assert_eq!(out.read().unwrap(), want);
    // Promoted intermediates are neither read nor written.
    assert_eq!(t1.read().unwrap(), sentinel);
    assert_eq!(t2.read().unwrap(), sentinel);
}

#[test]
fn embed_source_fuse_launch_read_interp() {
    source_fuse_launch_read(Device::interp());
}

#[test]
fn embed_source_fuse_launch_read_vulkan() {
    if let Some(d) = vulkan() {
        source_fuse_launch_read(d);
    }
}

/// Every element type a buffer can have goes through a kernel and back unchanged, plus one.
#[test]
fn embed_source_fuse_launch_read_cpu() {
    let Some(dev) = kiln_ir::testing::require("KILN_REQUIRE_TOOLS", Device::open("cpu")) else {
        return;
    };
    source_fuse_launch_read(dev);
}

/// On a GPU machine (by hand: CI has none); skipped without one unless `KILN_REQUIRE_CUDA`.
/// `Device::best()` on a machine with a software Vulkan driver (lavapipe in CI) and no
/// GPU: the cpu device, which outruns it, on x86-64. A machine with a GPU gets the GPU.
#[test]
fn best_device_is_a_gpu_else_the_cpu_device_never_lavapipe() {
    let best = Device::best();
    if let Some(cuda) = kiln_ir::testing::optional("KILN_REQUIRE_CUDA", Device::cuda()) {
        assert_eq!(best.kind(), cuda.kind(), "{best:?}");
        return;
    }
    let vk = kiln_ir::testing::optional("KILN_REQUIRE_TOOLS", Device::vulkan());
    match vk {
        Some(vk) if !vk.is_emulated() => {
            assert_eq!(best.name(), vk.name(), "a Vulkan GPU and no CUDA: {best:?}");
            return;
        }
        Some(vk) => eprintln!("{} is a software Vulkan driver", vk.name()),
        None => {}
    }
    assert_eq!(Device::cpu().is_ok(), cfg!(target_arch = "x86_64"));
    let want = Device::cpu().map_or(kiln::runtime::DeviceKind::Interp, |d| d.kind());
    assert_eq!(best.kind(), want, "{best:?}");
}

/// A module is verified once, by `compile_source`: launching it, preparing it and fusing
/// and launching its kernels hand the `Verified` module down to the device's build, which
/// does not verify it again. (On the cpu device: the interpreter's program is kiln text,
/// which its `load` parses and checks again, as bytes that may come from disk.)
#[test]
fn a_verified_module_is_not_verified_again_on_its_way_to_the_device() {
    use kiln::ir::verify::modules_verified;
    let Some(dev) = kiln_ir::testing::require("KILN_REQUIRE_TOOLS", Device::cpu()) else {
        return;
    };
    let jit = Jit::new(dev).unwrap();
    let start = modules_verified();
    let m = jit.compile_source("saxpy.kir", SAXPY).unwrap();
    let chain = jit.compile_source("chain.kir", CHAIN).unwrap();
    assert_eq!(modules_verified(), start + 2);
    let (x, y) = (jit.buffer_from(&[1.0f32; 8]), jit.buffer_zeroed::<f32>(8));
    jit.prepare(&m, "saxpy").unwrap();
    jit.launch(&m, "saxpy", NdRange::new(&[8]), args![&x, &y, 2.0f32, 8u32])
        .unwrap()
        .wait()
        .unwrap();
    let fused = jit.fuse(&chain, &FusionSpec::from_toml(CHAIN_SPEC).unwrap()).unwrap();
    let bufs: Vec<_> = (0..6).map(|_| jit.buffer_from(&[1.0f32; 64])).collect();
    let [a, b, c, t1, t2, out] = &bufs[..] else { unreachable!() };
    jit.launch_fused(&fused, &[args![a, b, t1], args![t1, c, t2], args![t2, a, out]])
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(y.read().unwrap(), vec![2.0; 8]);
    assert_eq!(out.read().unwrap(), vec![1.0; 64]);
    assert_eq!(modules_verified(), start + 2, "a build verified a module again");
}

#[test]
fn embed_source_fuse_launch_read_cuda() {
    let Some(dev) = kiln_ir::testing::require("KILN_REQUIRE_CUDA", Device::cuda()) else {
        return;
    };
    source_fuse_launch_read(dev);
}

#[test]
fn typed_buffers_round_trip_through_a_kernel() {
    let jit = Jit::new(Device::interp()).unwrap();
    macro_rules! round_trip {
        ($t:ty, $name:literal, $vals:expr, $one:expr) => {{
            let src = format!(
                "kernel inc(b: ptr<global, {0}>, one: {0}) {{ let i: u32 = global_id(0); \
                 b[i] = b[i] + one; }}",
                $name
            );
            let m = jit.compile_source("inc.kir", &src).unwrap();
            let vals: Vec<$t> = $vals;
            let b = jit.buffer_from(&vals);
            let one: $t = $one;
            jit.launch(&m, "inc", NdRange::new(&[vals.len() as u32]), args![&b, one])
                .unwrap()
                .wait()
                .unwrap();
            let want: Vec<$t> = vals.iter().map(|v| *v + one).collect();
            assert_eq!(b.read().unwrap(), want, "{}", $name);
        }};
    }
    round_trip!(i8, "i8", vec![-128, 0, 5], 1);
    round_trip!(i16, "i16", vec![-300, 7], 1);
    round_trip!(i32, "i32", vec![-1, 41], 1);
    round_trip!(i64, "i64", vec![-(1 << 40), 3], 1);
    round_trip!(u8, "u8", vec![0, 254], 1);
    round_trip!(u16, "u16", vec![65534], 1);
    round_trip!(u32, "u32", vec![1 << 31], 1);
    round_trip!(u64, "u64", vec![1 << 63], 1);
    round_trip!(f32, "f32", vec![0.5, -2.25], 1.0);
    round_trip!(f64, "f64", vec![1e300, -0.125], 1.0);
    // f16 is a storage type: the kernel computes in f32.
    let m = jit
        .compile_source(
            "inc16.kir",
            "kernel inc(b: ptr<global, f16>, one: f16) { let i: u32 = global_id(0); \
             b[i] = (b[i] as f32 + one as f32) as f16; }",
        )
        .unwrap();
    let b = jit.buffer_from(&[half::f16::from_f32(0.5), half::f16::from_f32(-3.0)]);
    jit.launch(&m, "inc", NdRange::new(&[2]), args![&b, half::f16::ONE]).unwrap().wait().unwrap();
    assert_eq!(b.read().unwrap(), vec![half::f16::from_f32(1.5), half::f16::from_f32(-2.0)]);
}

fn argument_error(e: Error) -> (String, Option<String>, String) {
    let text = e.to_string();
    match e {
        Error::Argument { kernel, source } => (kernel, source.param().map(String::from), text),
        other => panic!("expected an argument error, got {other:?}"),
    }
}

fn saxpy_jit() -> (Jit, kiln::ir::Verified) {
    let jit = Jit::new(Device::interp()).unwrap();
    let m = jit.compile_source("saxpy.kir", SAXPY).unwrap();
    (jit, m)
}

#[test]
fn launch_with_a_missing_argument_names_the_parameters() {
    let (jit, m) = saxpy_jit();
    let (x, y) = (jit.buffer_zeroed::<f32>(4), jit.buffer_zeroed::<f32>(4));
    let e = jit.launch(&m, "saxpy", NdRange::new(&[4]), args![&x, &y, 2.0f32]).unwrap_err();
    let (kernel, param, text) = argument_error(e);
    assert_eq!((kernel.as_str(), param), ("saxpy", None));
    assert_eq!(
        text,
        "kernel `saxpy`: the kernel takes 4 arguments (x: ptr<global, f32>, y: ptr<global, f32>, \
         a: f32, n: u32), 3 given"
    );
}

#[test]
fn launch_with_a_buffer_of_the_wrong_type_names_the_parameter() {
    let (jit, m) = saxpy_jit();
    let (x, y) = (jit.buffer_zeroed::<f32>(4), jit.buffer_zeroed::<i32>(4));
    let e = jit.launch(&m, "saxpy", NdRange::new(&[4]), args![&x, &y, 2.0f32, 4u32]).unwrap_err();
    let (_, param, text) = argument_error(e);
    assert_eq!(param.as_deref(), Some("y"));
    assert!(
        text.contains("is a ptr<global, f32>") && text.contains("holds i32 elements"),
        "{text}"
    );
}

#[test]
fn launch_with_a_scalar_for_a_buffer_names_the_parameter() {
    let (jit, m) = saxpy_jit();
    let y = jit.buffer_zeroed::<f32>(4);
    let e =
        jit.launch(&m, "saxpy", NdRange::new(&[4]), args![1.0f32, &y, 2.0f32, 4u32]).unwrap_err();
    let (_, param, text) = argument_error(e);
    assert_eq!(param.as_deref(), Some("x"));
    assert!(text.contains("is a ptr<global, f32> but a scalar was given"), "{text}");
}

#[test]
fn launch_with_a_buffer_for_a_scalar_names_the_parameter() {
    let (jit, m) = saxpy_jit();
    let (x, y) = (jit.buffer_zeroed::<f32>(4), jit.buffer_zeroed::<f32>(4));
    let e = jit.launch(&m, "saxpy", NdRange::new(&[4]), args![&x, &y, &x, 4u32]).unwrap_err();
    assert_eq!(argument_error(e).1.as_deref(), Some("a"));
}

#[test]
fn launch_with_a_scalar_of_another_type_is_not_converted() {
    let (jit, m) = saxpy_jit();
    let (x, y) = (jit.buffer_zeroed::<f32>(4), jit.buffer_zeroed::<f32>(4));
    // 4i32 for n: u32 would be a silent reinterpretation.
    let e = jit.launch(&m, "saxpy", NdRange::new(&[4]), args![&x, &y, 2.0f32, 4i32]).unwrap_err();
    assert_eq!(argument_error(e).1.as_deref(), Some("n"));
    assert_eq!(y.read().unwrap(), vec![0.0; 4], "nothing ran");
}

#[test]
fn launch_of_an_unknown_kernel_lists_the_kernels() {
    let (jit, m) = saxpy_jit();
    let e = jit.launch(&m, "sxpy", NdRange::new(&[4]), args![]).unwrap_err();
    assert_eq!(e.to_string(), "no kernel named `sxpy` (kernels: saxpy)");
}

#[test]
fn compile_errors_are_located() {
    let jit = Jit::new(Device::interp()).unwrap();
    let e = jit.compile_source("bad.kir", "kernel k(b: ptr<global, f32>) {\n  b[0] = q;\n}\n");
    let text = e.unwrap_err().to_string();
    assert!(text.contains("--> bad.kir:2:10"), "{text}");
    assert!(text.contains('^'), "a caret under the error: {text}");
}

fn chain(jit: &Jit) -> kiln::Fused {
    let m = jit.compile_source("chain.kir", CHAIN).unwrap();
    jit.fuse(&m, &FusionSpec::from_toml(CHAIN_SPEC).unwrap()).unwrap()
}

#[test]
fn fused_launch_with_different_buffers_for_identical_parameters_is_refused() {
    let jit = Jit::new(Device::interp()).unwrap();
    let f = chain(&jit);
    let v: Vec<_> = (0..7).map(|_| jit.buffer_zeroed::<f32>(64)).collect();
    // a of add (entry 0) and a of sub (entry 2) were fused as one parameter.
    let e = jit
        .launch_fused(
            &f,
            &[args![&v[0], &v[1], &v[2]], args![&v[2], &v[3], &v[4]], args![&v[4], &v[5], &v[6]]],
        )
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::Bind(_)), "{e:?}");
    assert!(
        text.contains("kernel `sub` parameter `a`") && text.contains("`add` parameter `a`"),
        "{text}"
    );
}

#[test]
fn fused_launch_checks_arguments_against_the_original_kernels() {
    let jit = Jit::new(Device::interp()).unwrap();
    let f = chain(&jit);
    let b = jit.buffer_zeroed::<f32>(64);
    let e = jit
        .launch_fused(&f, &[args![&b, &b, &b], args![&b, 1.0f32, &b], args![&b, &b, &b]])
        .unwrap_err();
    let (kernel, param, _) = argument_error(e);
    assert_eq!((kernel.as_str(), param.as_deref()), ("mul", Some("c")));
    let e = jit.launch_fused(&f, &[args![&b, &b, &b], args![&b, &b, &b]]).unwrap_err();
    assert_eq!(e.to_string(), "2 argument lists given for a fusion of 3 kernels (one per entry)");
}

#[test]
fn fused_launch_with_another_value_for_a_constant_is_refused() {
    let jit = Jit::new(Device::interp()).unwrap();
    let m = jit.compile_source("saxpy.kir", SAXPY).unwrap();
    let spec = FusionSpec {
        name: "twice".into(),
        kernels: vec!["saxpy".into(), "saxpy".into()],
        ndranges: vec![RangeSpec::new(&[4]), RangeSpec::new(&[4])],
        identical: vec![vec![ParamRef::new(0, 1), ParamRef::new(1, 1)]],
        constants: vec![kiln::passes::fusion::Constant {
            param: ParamRef::new(0, 2),
            value: kiln::passes::fusion::ConstValue::Float(2.0),
        }],
        ..Default::default()
    };
    let f = jit.fuse(&m, &spec).unwrap();
    let (x, y) = (jit.buffer_from(&[1.0f32; 4]), jit.buffer_zeroed::<f32>(4));
    let e = jit
        .launch_fused(&f, &[args![&x, &y, 3.0f32, 4u32], args![&x, &y, 1.0f32, 4u32]])
        .unwrap_err();
    assert!(e.to_string().contains("parameter `a` was fused as the constant"), "{e}");
    // With the constant's own value it runs: y = 2*1 + 0, then y = 1*1 + 2.
    jit.launch_fused(&f, &[args![&x, &y, 2.0f32, 4u32], args![&x, &y, 1.0f32, 4u32]])
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(y.read().unwrap(), vec![3.0; 4]);
}

#[test]
fn a_failing_kernel_is_an_error_from_wait_naming_it() {
    let jit = Jit::new(Device::interp()).unwrap();
    let (x, y) = (jit.buffer_zeroed::<f32>(2), jit.buffer_zeroed::<f32>(2));
    let m = jit.compile_source("saxpy.kir", SAXPY).unwrap();
    // n = 8 with buffers of 2: the interpreter catches the out-of-bounds access.
    let e =
        jit.launch(&m, "saxpy", NdRange::new(&[8]), args![&x, &y, 2.0f32, 8u32]).unwrap().wait();
    let e = e.unwrap_err();
    assert!(matches!(e, Error::Launch { ref kernel, .. } if kernel == "saxpy"), "{e:?}");
    assert!(e.to_string().contains("out of bounds"), "{e}");
}

/// A buffer too short for the launch, on a GPU: with `-fsanitize=bounds` an error from
/// wait() naming the kernel, not a wrong result.
#[test]
fn short_buffer_is_an_error_with_bounds_checks_vulkan() {
    let Some(d) = vulkan() else { return };
    let jit = Jit::new(d).unwrap().with_options("-fsanitize=bounds");
    let m = jit.compile_source("saxpy.kir", SAXPY).unwrap();
    let (x, y) = (jit.buffer_zeroed::<f32>(2), jit.buffer_zeroed::<f32>(8));
    let e =
        jit.launch(&m, "saxpy", NdRange::new(&[8]), args![&x, &y, 2.0f32, 8u32]).unwrap().wait();
    let e = e.unwrap_err();
    assert!(matches!(e, Error::Launch { ref kernel, .. } if kernel == "saxpy"), "{e:?}");
    assert!(e.to_string().contains("out of bounds"), "{e}");
}

/// Issue 25: launching a kernel the Jit launched before takes its device kernel from the Jit:
/// the module is not printed and hashed into a program-cache key again (the program cache
/// sees no lookup), and every launch still runs.
#[test]
fn repeated_launches_skip_the_program_cache_lookup() {
    let jit = Jit::new(Device::interp()).unwrap();
    let src = "kernel inc(b: ptr<global, i32>) { let i: u32 = global_id(0); b[i] = b[i] + 1; }";
    let module = jit.compile_source("inc.kir", src).unwrap();
    let b = jit.buffer_zeroed::<i32>(4);
    jit.launch(&module, "inc", NdRange::new(&[4]), args![&b]).unwrap().wait().unwrap();
    let before = jit.context().program_cache_stats();
    for _ in 0..10 {
        jit.launch(&module, "inc", NdRange::new(&[4]), args![&b]).unwrap().wait().unwrap();
    }
    let after = jit.context().program_cache_stats();
    assert_eq!((after.hits, after.misses), (before.hits, before.misses), "{before:?} {after:?}");
    assert_eq!(b.read().unwrap(), vec![11; 4]);
    // The same source compiled again is another module: looked up (a hit), not rebuilt.
    let again = jit.compile_source("inc.kir", src).unwrap();
    jit.launch(&again, "inc", NdRange::new(&[4]), args![&b]).unwrap().wait().unwrap();
    let last = jit.context().program_cache_stats();
    assert_eq!((last.hits, last.builds), (after.hits + 1, after.builds), "{last:?}");
}
