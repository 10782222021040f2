//! The cpu device's persistent-cache items hold machine code: a program built by one
//! context loads in a fresh one (a new device, as in another process) from disk without
//! generating any code, and runs as the interpreter does; a damaged item is refused and
//! rebuilt; an item built for CPU features a device does not use is a miss there.
//!
//! The tests share a lock: the first counts the machine code this process generates,
//! which the others would disturb.

use std::sync::{Arc, Mutex};

use kiln_backends::x86;
use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::{example_source, results_match};
use kiln_ir::{parse_module, Module, Scalar};
use kiln_runtime::cache::PersistentCache;
use kiln_runtime::device::cpu::CpuDevice;
use kiln_runtime::device::registry::OpenOptions;
use kiln_runtime::{Context, ContextConfig, Device, DeviceError};

#[path = "common/temp_dir.rs"]
mod temp_dir;
use temp_dir::TempDir;

static SERIAL: Mutex<()> = Mutex::new(());

fn device() -> Option<Arc<CpuDevice>> {
    let options = OpenOptions { threads: Some(2), ..OpenOptions::default() };
    kiln_ir::testing::require("KILN_REQUIRE_TOOLS", CpuDevice::open(&options)).map(Arc::new)
}

fn context(dev: &Arc<CpuDevice>, dir: &std::path::Path) -> Context {
    let cfg = ContextConfig {
        persistent: Some(PersistentCache::new(dir)),
        workers: 1,
        ..Default::default()
    };
    Context::with_config(dev.clone(), cfg)
}

fn floats(n: usize, seed: f32) -> Buffer {
    Buffer::from_slice(&(0..n).map(|i| (i as f32 * 0.37 + seed).sin() * 10.0).collect::<Vec<_>>())
}

/// A launch: module, range, arguments, buffers.
type Case = (Module, NdRange, Vec<Arg>, Vec<Buffer>);

/// Kernels of every code shape: vector code (whole batches and a ragged range, which
/// needs the scalar code), barriers and local memory, 2-D, divergence, and faults whose
/// messages come from the stored site tables.
fn cases() -> Vec<Case> {
    let m = |name: &str| parse_module(&example_source(name)).unwrap();
    let saxpy = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(2.5f32), Arg::scalar(1000u32)];
    let reduce = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(250u32)];
    let div = parse_module(
        "kernel dv(x: ptr<global, i32>, d: i32) { let i: u32 = global_id(0); x[i] = x[i] / d; }",
    )
    .unwrap();
    let ints = Buffer::from_slice(&(0..64).map(|i| i * 3 - 50).collect::<Vec<i32>>());
    let u32s = |n: u32| Buffer::from_slice(&(0..n).map(|i| i * 7 + 3).collect::<Vec<_>>());
    vec![
        (
            m("saxpy"),
            NdRange::new(&[1024]),
            saxpy.to_vec(),
            vec![floats(1024, 0.0), floats(1024, 1.0)],
        ),
        (
            m("saxpy"),
            NdRange::new(&[100]),
            saxpy.to_vec(),
            vec![floats(100, 0.0), floats(100, 1.0)],
        ),
        (
            m("reduce"),
            NdRange::new(&[256]).with_local(&[64]),
            reduce.clone(),
            vec![floats(256, 2.0), Buffer::zeroed(Scalar::F32, 4)],
        ),
        (
            m("reduce"),
            NdRange::new(&[256]).with_local(&[64]),
            reduce,
            vec![floats(256, 2.0), Buffer::zeroed(Scalar::F32, 2)],
        ),
        (
            m("stencil2d"),
            NdRange::new(&[16, 12]),
            vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(16u32), Arg::scalar(12u32)],
            vec![floats(192, 3.0), Buffer::zeroed(Scalar::F32, 192)],
        ),
        (
            m("divergent"),
            NdRange::new(&[64]),
            vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(60u32)],
            vec![u32s(64), Buffer::zeroed(Scalar::U32, 64), u32s(64)],
        ),
        (
            div.clone(),
            NdRange::new(&[64]),
            vec![Arg::Buffer(0), Arg::scalar(7i32)],
            vec![ints.clone()],
        ),
        (div, NdRange::new(&[64]), vec![Arg::Buffer(0), Arg::scalar(0i32)], vec![ints]),
    ]
}

/// Runs the loaded program's kernel on the device and compares with the interpreter
/// (buffers bit for bit, or the interpreter's error word for word).
fn check(dev: &CpuDevice, program: &kiln_runtime::Program, case: &Case) {
    let (module, range, args, bufs) = case;
    let k = &module.kernels[0];
    let mut want = bufs.clone();
    let expected = run(k, range, args, &mut want).map_err(|e| e.to_string());
    let handle = dev.kernel(&program.handle, k.name()).unwrap();
    let mut got = bufs.clone();
    let actual = dev.run(&handle, range, args, &mut got).map_err(|e| e.to_string());
    match (expected, actual) {
        (Ok(()), Ok(())) => {
            results_match(&want, &got).unwrap_or_else(|e| panic!("{}: {e}", k.name()))
        }
        (Err(w), Err(g)) => assert!(g.ends_with(&w), "{}: `{g}` is not `{w}`", k.name()),
        (w, g) => panic!("{}: interpreter {w:?}, cpu {g:?}", k.name()),
    }
}

#[test]
fn machine_code_loads_from_disk_without_compiling() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(first) = device() else { return };
    let t = TempDir::new("cpu-persist");
    let cases = cases();
    let ctx = context(&first, &t.0);
    for (module, ..) in &cases {
        let p = ctx.build_program(module, &[], "").unwrap();
        assert!(!p.from_disk);
    }
    // saxpy, reduce, stencil2d, divergent, dv: each compiled once (the rest are hits).
    assert_eq!(first.kernels_compiled(), 5);
    drop(ctx);
    // A fresh device and context over the same directory: every program from disk, and
    // no machine code generated for loading or running them (ragged ranges and faults
    // included, which need the scalar code a fresh build compiles lazily).
    let Some(second) = device() else { return };
    let ctx = context(&second, &t.0);
    let generated = x86::codes_generated();
    for case in &cases {
        let p = ctx.build_program(&case.0, &[], "").unwrap();
        assert!(p.from_disk, "{} was not a disk hit", case.0.kernels[0].name());
        check(&second, &p, case);
    }
    assert_eq!(x86::codes_generated(), generated, "loading or running generated code");
    assert_eq!(second.kernels_compiled(), 0);
    assert!(ctx.persistent_cache().unwrap().warnings().is_empty());
}

#[test]
fn a_damaged_item_is_refused_and_rebuilt() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dev) = device() else { return };
    let t = TempDir::new("cpu-damaged");
    let case = cases().swap_remove(2);
    let good = context(&dev, &t.0).build_program(&case.0, &[], "").unwrap();
    let bin = good.binary.to_vec();
    // Every truncation and a flipped byte anywhere in the machine code or its tables is a
    // load error (the image's checksum, then its structure), never a panic or a run.
    for cut in 0..bin.len() {
        let e = dev.load(&bin[..cut]).err().unwrap_or_else(|| panic!("cut at {cut} loads"));
        assert!(matches!(e, DeviceError::Load { .. }), "{e}");
    }
    for at in (0..bin.len()).step_by(5) {
        let mut bad = bin.clone();
        bad[at] ^= 0x10;
        if let Ok(h) = dev.load(&bad) {
            // Only a byte of the container's names or signature can leave a loadable
            // binary (the code and its tables are checksummed); it still runs correctly
            // or is refused at the launch.
            assert!(
                at < bin.len() - good_image_len(&bin),
                "byte {at} of the image flipped and it loaded"
            );
            drop(h);
        }
    }
    // Valid container, damaged image, stored under the program's key: the context
    // refuses it (one warning naming the damage), rebuilds and replaces it.
    let mut bad = bin.clone();
    let last = bad.len() - 3;
    bad[last] ^= 0xff;
    let t = TempDir::new("cpu-damaged-item");
    let cache = PersistentCache::new(&t.0);
    cache.put(&good.key.disk_key(), &bad);
    assert_eq!(cache.get(&good.key.disk_key()), Some(bad));
    let ctx = context(&dev, &t.0);
    let p = ctx.build_program(&case.0, &[], "").unwrap();
    assert!(!p.from_disk);
    let w = ctx.persistent_cache().unwrap().warnings();
    assert!(w.iter().any(|w| w.contains("checksum")), "{w:?}");
    check(&dev, &p, &case);
    let p = context(&dev, &t.0).build_program(&case.0, &[], "").unwrap();
    assert!(p.from_disk, "the rebuilt item replaced the damaged one");
    check(&dev, &p, &case);
}

/// The bytes of the binary's last blob (the x86 image, which ends the container).
fn good_image_len(bin: &[u8]) -> usize {
    // (The magic without its format version, which changes.)
    let at = bin.windows(7).rposition(|w| w == b"KX86IMG").expect("an image");
    bin.len() - at
}

#[test]
fn a_feature_mismatch_is_a_miss() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(full) = device() else { return };
    let t = TempDir::new("cpu-features");
    let case = cases().swap_remove(0);
    let built = context(&full, &t.0).build_program(&case.0, &[], "").unwrap();
    // A device that does not use AVX2 (as on a CPU without it) has another key: a miss,
    // then its own build, with the interpreter's results.
    let Some(scalar) = device() else { return };
    let scalar = Arc::new(Arc::into_inner(scalar).unwrap().scalar_only());
    assert_ne!(scalar.version(), full.version());
    let p = context(&scalar, &t.0).build_program(&case.0, &[], "").unwrap();
    assert!(!p.from_disk);
    assert_eq!(scalar.kernels_compiled(), 1);
    check(&scalar, &p, &case);
    // The item itself also says what it needs: loading vector code there is refused.
    if x86::cpu_has("avx2") {
        let Err(e) = scalar.load(&built.binary) else {
            panic!("vector code loads on a scalar device")
        };
        assert!(e.to_string().contains("avx2"), "{e}");
    }
    // Both items stay, each a hit for its own device.
    assert!(context(&scalar, &t.0).build_program(&case.0, &[], "").unwrap().from_disk);
    assert!(context(&full, &t.0).build_program(&case.0, &[], "").unwrap().from_disk);
}
