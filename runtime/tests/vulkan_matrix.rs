//! Matrix operations on the Vulkan device (SPV_KHR_cooperative_matrix).
//!
//! * A device without cooperative matrices (lavapipe) refuses a kernel with them by name.
//! * `copy_async` pipelines (no fragments) run anywhere and give the interpreter's bits.
//! * The generator's tensor-core GEMM runs on a device that lists the products it needs
//!   (NVIDIA) and agrees with the interpreter within `MMA_TOLERANCE`; elsewhere it skips
//!   through the skip rule, unless `KILN_REQUIRE_COOP_MATRIX` is set (the GPU machine's run),
//!   when it fails.
//!
//! Without a Vulkan device at all the tests skip, unless `KILN_REQUIRE_TOOLS` is set (for the
//! GEMM, `KILN_REQUIRE_COOP_MATRIX`).

use std::sync::Arc;

use half::f16;
use kiln_gen::{TcConfig, TcGemmProblem};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::matrix::MMA_TOLERANCE;
use kiln_ir::{parse_module, Kernel, Scalar};
use kiln_runtime::device::vulkan::VulkanDevice;
use kiln_runtime::{Device, DeviceError};

fn vulkan() -> Option<Arc<VulkanDevice>> {
    let d = kiln_ir::testing::require("KILN_REQUIRE_TOOLS", VulkanDevice::open())?;
    eprintln!("Vulkan device: {d:?}; cooperative matrices: {:?}", d.cooperative_matrices());
    Some(Arc::new(d))
}

fn kernel(src: &str) -> Kernel {
    parse_module(src).unwrap_or_else(|e| panic!("{e}\n{src}")).kernels.remove(0)
}

/// One 16x8x16 product from global memory.
const MMA: &str = "kernel mma1(a: ptr<global, f16>, b: ptr<global, f16>, d: ptr<global, f32>) {
  let fa: frag<a, m16n8k16, f16> = frag_load(a, 0u32, 16u32, row);
  let fb: frag<b, m16n8k16, f16> = frag_load(b, 0u32, 8u32, row);
  let z: frag<acc, m16n8k16, f32> = frag_fill(0.0f32);
  let r: frag<acc, m16n8k16, f32> = mma(fa, fb, z);
  frag_store(d, 0u32, 8u32, row, r);
}";

#[test]
fn a_device_without_cooperative_matrices_refuses_them_by_name() {
    let Some(dev) = vulkan() else { return };
    let k = kernel(MMA);
    let mut bufs = vec![
        Buffer::from_slice(&vec![f16::from_f32(1.0); 256]),
        Buffer::from_slice(&vec![f16::from_f32(1.0); 128]),
        Buffer::zeroed(Scalar::F32, 128),
    ];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
    let r = dev.build_and_run(&k, &NdRange::new(&[32]).with_local(&[32]), &args, &mut bufs);
    if !dev.cooperative_matrices().is_empty() {
        // A device that offers them runs it (the GEMM test compares results).
        r.unwrap();
        assert_eq!(bufs[2].to_vec::<f32>().unwrap(), vec![16.0f32; 128]);
        return;
    }
    let e = r.expect_err("a device without cooperative matrices ran a kernel with them");
    assert!(matches!(e, DeviceError::Load { .. }), "{e:?}");
    let e = e.to_string();
    for words in [
        "kernel `mma1` uses cooperative matrices (SPV_KHR_cooperative_matrix",
        "m16n8k16 f16 x f16 + f32 -> f32",
        "offers none (no VK_KHR_cooperative_matrix",
    ] {
        assert!(e.contains(words), "`{words}` not in: {e}");
    }
}

/// A two-stage `copy_async` pipeline through local memory, with the tile reversed on the way
/// out: no fragment, so no cooperative matrix, and the device must give the interpreter's
/// bits (NaN payloads and signed zeros included).
#[test]
fn copy_async_pipelines_give_the_interpreters_bits() {
    let Some(dev) = vulkan() else { return };
    let k = kernel(
        "kernel pipe(a: ptr<global, f16>, b: ptr<global, f32>, d: ptr<global, f32>, e: ptr<global, f16>) {
  local sa: f16[1024];
  local sb: f32[512];
  let t: u32 = local_id(0);
  let g: u32 = group_id(0);
  copy_async(sa, t * 8u32, a, g * 1024u32 + t * 8u32, 8);
  async_commit();
  copy_async(sa, 512u32 + t * 8u32, a, g * 1024u32 + 512u32 + t * 8u32, 8);
  copy_async(sb, t * 4u32, b, g * 512u32 + t * 4u32, 4);
  copy_async(sb, 256u32 + t * 4u32, b, g * 512u32 + 256u32 + t * 4u32, 4);
  async_commit();
  async_wait(1);
  async_wait(0);
  barrier(local);
  for i: u32 in t .. 512u32 step 64u32 {
    d[g * 512u32 + i] = sb[511u32 - i];
    e[g * 1024u32 + i] = sa[1023u32 - i];
    e[g * 1024u32 + 512u32 + i] = sa[511u32 - i];
  }
}",
    );
    let groups = 3usize;
    let bits16: Vec<u16> =
        (0..1024 * groups as u32).map(|i| (i.wrapping_mul(40503) >> 3) as u16).collect();
    let bits32: Vec<u32> = (0..512 * groups as u32).map(|i| i.wrapping_mul(2654435761)).collect();
    let bufs = vec![
        Buffer::from_slice(&bits16.iter().map(|&b| f16::from_bits(b)).collect::<Vec<_>>()),
        Buffer::from_slice(&bits32.iter().map(|&b| f32::from_bits(b)).collect::<Vec<_>>()),
        Buffer::zeroed(Scalar::F32, 512 * groups),
        Buffer::zeroed(Scalar::F16, 1024 * groups),
    ];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3)];
    let range = NdRange::new(&[64 * groups as u32]).with_local(&[64]);
    let mut want = bufs.clone();
    kiln_ir::interp::run(&k, &range, &args, &mut want).unwrap();
    let mut got = bufs;
    dev.build_and_run(&k, &range, &args, &mut got).unwrap();
    for i in [2, 3] {
        assert_eq!(
            got[i].as_bytes(),
            want[i].as_bytes(),
            "buffer {i} differs from the interpreter's"
        );
    }
}

/// The GEMMs the device test runs (size, transpositions, blocking): odd sizes, every
/// layout, `m16n16k16` fragments and `m16n8k16` ones (a warp tile 8 wide).
fn gemms() -> Vec<(i64, i64, i64, bool, bool, TcConfig)> {
    let small =
        |bn, warps_m, warps_n| TcConfig { bm: 32, bn, warps_m, warps_n, ..TcConfig::default() };
    vec![
        (37, 29, 45, false, false, small(32, 1, 2)),
        (64, 64, 64, true, true, TcConfig::default()),
        (50, 24, 40, false, true, small(32, 2, 1)),
        (33, 40, 24, true, false, small(8, 2, 1)),
    ]
}

/// The same kernels as SPIR-V pass spirv-val, so what the device test runs is valid (this
/// part runs without cooperative matrices on the device).
#[test]
fn tc_gemm_spirv_validates() {
    let mut shapes = Vec::new();
    let val = kiln_ir::testing::tool("KILN_SPIRV_VAL");
    for (m, n, k, trans_a, trans_b, cfg) in gemms() {
        let mut p = TcGemmProblem::new(m, n, k, Scalar::F16);
        (p.trans_a, p.trans_b) = (trans_a, trans_b);
        let g = p.generate(&cfg).unwrap();
        let text = g.kernel.to_string();
        shapes.extend(["m16n8k16", "m16n16k16"].into_iter().filter(|s| text.contains(s)));
        let sm = kiln_backends::spirv::emit(&g.kernel, kiln_backends::spirv::Flavour::Vulkan)
            .unwrap_or_else(|e| panic!("{m}x{n}x{k} {cfg}: {e}"));
        let Some(val) = &val else { continue };
        if let Err(why) = sm.validate(val) {
            panic!("spirv-val rejects the {m}x{n}x{k} {cfg} GEMM: {why}");
        }
    }
    assert!(shapes.contains(&"m16n8k16") && shapes.contains(&"m16n16k16"), "{shapes:?}");
}

/// Values exact in f16 (multiples of 1/8 in [-2, 2)).
fn vals(n: usize, seed: u32) -> Vec<f16> {
    (0..n as u32)
        .map(|i| {
            let h = i.wrapping_mul(2654435761).wrapping_add(seed.wrapping_mul(40503)) >> 7;
            f16::from_f32((h % 32) as f32 / 8.0 - 2.0)
        })
        .collect()
}

/// The generator's tensor-core GEMM on the device against the interpreter: each element
/// within `MMA_TOLERANCE` of the sum of its products' magnitudes per 16-deep step (the
/// inputs are small multiples of 1/8, so in practice the sums are exact).
#[test]
fn tc_gemm_matches_the_interpreter_where_cooperative_matrices_are_offered() {
    // The GPU machine's run sets KILN_REQUIRE_COOP_MATRIX: no device there is a failure.
    let Some(dev) = kiln_ir::testing::require("KILN_REQUIRE_COOP_MATRIX", VulkanDevice::open())
    else {
        return;
    };
    let products = dev.cooperative_matrices();
    let offered = |shape: &str| {
        products.iter().any(|p| p.as_str() == format!("{shape} f16 x f16 + f32 -> f32"))
    };
    let found = if offered("m16n16k16") || offered("m16n8k16") {
        Ok(())
    } else {
        Err(format!(
            "Vulkan device {dev:?} offers neither f16 -> f32 product the GEMM uses (m16n16k16, \
             m16n8k16); it offers {products:?}"
        ))
    };
    if kiln_ir::testing::require("KILN_REQUIRE_COOP_MATRIX", found).is_none() {
        return;
    }
    for (m, n, k, trans_a, trans_b, cfg) in gemms() {
        let mut p = TcGemmProblem::new(m, n, k, Scalar::F16);
        (p.trans_a, p.trans_b) = (trans_a, trans_b);
        let g = p.generate(&cfg).unwrap();
        let text = g.kernel.to_string();
        let [ea, eb, ec] = g.buffer_elems;
        let (a, b) = (vals(ea, 1), vals(eb, 2));
        let bufs =
            vec![Buffer::from_slice(&a), Buffer::from_slice(&b), Buffer::zeroed(Scalar::F32, ec)];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
        let missing =
            ["m16n16k16", "m16n8k16"].into_iter().find(|s| text.contains(s) && !offered(s));
        if let Some(shape) = missing {
            // Not listed by this driver: refused, naming the product.
            let mut bufs = bufs;
            let e = dev.build_and_run(&g.kernel, &g.range(), &args, &mut bufs).unwrap_err();
            let e = e.to_string();
            assert!(e.contains(&format!("{shape} f16 x f16 + f32 -> f32")), "{e}");
            eprintln!("{m}x{n}x{k} {cfg}: refused as the device does not list {shape}: {e}");
            continue;
        }
        let mut want = bufs.clone();
        kiln_ir::interp::run(&g.kernel, &g.range(), &args, &mut want).unwrap();
        let mut got = bufs;
        dev.build_and_run(&g.kernel, &g.range(), &args, &mut got)
            .unwrap_or_else(|e| panic!("{m}x{n}x{k} {cfg}: {e}"));
        let (w, d) = (want[2].to_vec::<f32>().unwrap(), got[2].to_vec::<f32>().unwrap());
        let (m, n, k) = (m as usize, n as usize, k as usize);
        let at = |v: &[f16], r: usize, c: usize, rows: usize, cols: usize, t: bool| {
            if t {
                v[c * rows + r].to_f32()
            } else {
                v[r * cols + c].to_f32()
            }
        };
        for i in 0..m {
            for j in 0..n {
                let sum: f64 = (0..k)
                    .map(|kk| {
                        (at(&a, i, kk, m, k, trans_a) * at(&b, kk, j, k, n, trans_b)).abs() as f64
                    })
                    .sum();
                let bound = MMA_TOLERANCE * sum * k.div_ceil(16) as f64;
                let (x, y) = (w[i * n + j], d[i * n + j]);
                assert!(
                    ((x - y) as f64).abs() <= bound,
                    "{m}x{n}x{k} {cfg}: C[{i}][{j}]: device {y}, interpreter {x} (bound {bound})"
                );
            }
        }
    }
}

/// A blocking `BMxBN:WMxWN:BK:STAGES` (`128x128:2x4:32:2` is the default one).
// The update keeps the defaults of any field TcConfig gains.
#[allow(clippy::needless_update)]
fn parse_config(s: &str) -> TcConfig {
    let bad = || -> u32 { panic!("KILN_VK_TC_CONFIGS: `{s}` is not BMxBN:WMxWN:BK:STAGES") };
    let num = |p: &str| p.parse::<u32>().unwrap_or_else(|_| bad());
    let pair = |p: &str| p.split_once('x').map_or_else(|| (bad(), 0), |(a, b)| (num(a), num(b)));
    let parts: Vec<&str> = s.trim().split(':').collect();
    let &[block, warps, bk, stages] = &parts[..] else {
        bad();
        unreachable!()
    };
    let ((bm, bn), (warps_m, warps_n)) = (pair(block), pair(warps));
    TcConfig { bm, bn, bk: num(bk), warps_m, warps_n, stages: num(stages), ..TcConfig::default() }
}

/// Not a check: the time of the tensor-core GEMM on the Vulkan device, for
/// `benches/gpu/vk_tc.sh` (which times cuBLAS in the same run). Sizes from
/// `KILN_VK_TC_SIZES` (default `4096`), f16 inputs, f32 output, blockings from
/// `KILN_VK_TC_CONFIGS` (default the default one, whose local memory fits Vulkan's usual
/// 48 KiB). Buffers stay on the device; each launch is
/// waited for, the median of 10 after a warm-up. Every result is checked first: 256 sampled
/// elements against an f64 product on the host (the inputs' sums are exact in f32).
#[test]
#[ignore = "a benchmark for benches/gpu/vk_tc.sh: needs a Vulkan device with cooperative matrices"]
fn tc_gemm_speed() {
    use kiln_runtime::device::ResidentBuffer;
    let dev = VulkanDevice::open().expect("a Vulkan device");
    println!("device: {dev:?}; cooperative matrices: {:?}", dev.cooperative_matrices());
    let sizes = std::env::var("KILN_VK_TC_SIZES").unwrap_or_else(|_| "4096".into());
    let configs = std::env::var("KILN_VK_TC_CONFIGS").unwrap_or_default();
    let configs: Vec<TcConfig> = if configs.is_empty() {
        vec![TcConfig::default()]
    } else {
        configs.split(',').map(parse_config).collect()
    };
    let runs = sizes
        .split(',')
        .map(|s| s.trim().parse::<i64>().expect("KILN_VK_TC_SIZES"))
        .flat_map(|n| configs.iter().map(move |c| (n, *c)));
    for (n, cfg) in runs {
        let g = TcGemmProblem::new(n, n, n, Scalar::F16).generate(&cfg).unwrap();
        let module = kiln_ir::Verified::new(kiln_ir::Module::new(vec![g.kernel.clone()])).unwrap();
        let bin = dev.build(&module, &Default::default()).unwrap();
        let program = dev.load(&bin).unwrap();
        let kernel = dev.kernel(&program, g.kernel.name()).unwrap();
        let [ea, eb, ec] = g.buffer_elems;
        let (a, b) = (vals(ea, 1), vals(eb, 2));
        let host =
            [Buffer::from_slice(&a), Buffer::from_slice(&b), Buffer::zeroed(Scalar::F32, ec)];
        let resident: Vec<ResidentBuffer> = host
            .iter()
            .map(|h| {
                let mem = dev.alloc(h.as_bytes().len()).unwrap();
                mem.upload(h.as_bytes()).unwrap();
                ResidentBuffer { mem, elem: h.elem(), len: h.len() }
            })
            .collect();
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
        let launch = || {
            dev.run_resident(&kernel, &g.range(), &args, &resident).unwrap();
            assert!(dev.finish(None).unwrap(), "the device did not finish");
        };
        launch();
        let mut c = vec![0u8; ec * 4];
        resident[2].mem.download(&mut c).unwrap();
        let c: Vec<f32> = c.chunks(4).map(|w| f32::from_le_bytes(w.try_into().unwrap())).collect();
        let nu = n as usize;
        for s in 0..256usize {
            let (i, j) = ((s * 7919) % nu, (s * 104729 + 13) % nu);
            let want: f64 = (0..nu).map(|k| a[i * nu + k].to_f64() * b[k * nu + j].to_f64()).sum();
            assert_eq!(c[i * nu + j] as f64, want, "C[{i}][{j}] of the {n}^3 GEMM");
        }
        for _ in 0..3 {
            launch();
        }
        let mut times: Vec<f64> = (0..10)
            .map(|_| {
                let t = std::time::Instant::now();
                launch();
                t.elapsed().as_secs_f64()
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let t = times[times.len() / 2];
        let tflops = 2.0 * (n as f64).powi(3) / t / 1e12;
        println!("kiln vulkan tc-gemm f16 {n}^3 ({cfg}): {:.3} ms, {tflops:.1} TFLOP/s", t * 1e3);
    }
}
