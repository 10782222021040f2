//! The cpu device's persistent worker pool: its threads are started once and kept across
//! launches, launches from several threads at once give the interpreter's buffers, a
//! faulting or timed-out launch leaves the pool working, and the device joins its threads
//! when dropped. The tests of this file take turns (they count the process's threads).

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{parse_module, Kernel, Scalar};
use kiln_runtime::device::cpu::CpuDevice;
use kiln_runtime::device::registry::OpenOptions;
use kiln_runtime::Device;

static TURN: Mutex<()> = Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

fn device(threads: usize, timeout: Option<Duration>) -> Option<CpuDevice> {
    let options = OpenOptions { threads: Some(threads), timeout, ..OpenOptions::default() };
    kiln_ir::testing::require("KILN_REQUIRE_TOOLS", CpuDevice::open(&options))
}

fn kernel(src: &str) -> Kernel {
    parse_module(src).unwrap().kernels.remove(0)
}

/// y[i] = x[i] * 3 + k, over work-groups of 8.
fn affine() -> Kernel {
    kernel(
        "kernel affine(x: ptr<global, i32>, y: ptr<global, i32>, k: i32) {
             let i: u32 = global_id(0); y[i] = x[i] * 3 + k; }",
    )
}

/// The process's threads that the cpu device started (Linux names them `kiln-cpu-N`).
fn pool_threads() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for t in std::fs::read_dir("/proc/self/task").expect("/proc/self/task lists threads") {
        let t = t.unwrap().path();
        let comm = std::fs::read_to_string(t.join("comm")).unwrap_or_default();
        if comm.starts_with("kiln-cpu") {
            out.insert(t.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    out
}

/// Runs `k` on the device and on the interpreter and checks they agree, errors included.
fn same_as_interpreter(
    dev: &CpuDevice,
    k: &Kernel,
    range: &NdRange,
    args: &[Arg],
    bufs: &[Buffer],
) {
    let mut want = bufs.to_vec();
    let expected = run(k, range, args, &mut want).map_err(|e| e.to_string());
    let mut got = bufs.to_vec();
    let actual = dev.build_and_run(k, range, args, &mut got).map_err(|e| e.to_string());
    match (expected, actual) {
        (Ok(()), Ok(())) => assert_eq!(want, got, "{}", k.name()),
        (Err(w), Err(g)) => assert!(g.ends_with(&w), "`{g}` is not `{w}`"),
        (w, g) => panic!("{}: interpreter {w:?}, cpu {g:?}", k.name()),
    }
}

#[test]
#[cfg(target_os = "linux")]
fn the_pool_threads_are_started_once_and_kept_across_launches() {
    let _t = turn();
    let Some(dev) = device(3, None) else { return };
    assert_eq!(dev.workers_started(), 0, "no launch yet, no thread");
    assert!(pool_threads().is_empty(), "{:?}", pool_threads());
    let k = affine();
    let x = Buffer::from_slice(&(0..512).collect::<Vec<i32>>());
    let range = NdRange::new(&[512]).with_local(&[8]);
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(7i32)];
    let mut first = None;
    for _ in 0..30 {
        same_as_interpreter(
            &dev,
            &k,
            &range,
            &args,
            &[x.clone(), Buffer::zeroed(Scalar::I32, 512)],
        );
        let now = pool_threads();
        // Two workers besides the launching thread, the same two after every launch.
        assert_eq!(now.len(), 2, "{now:?}");
        assert_eq!(dev.workers_started(), 2);
        assert_eq!(first.get_or_insert_with(|| now.clone()), &now);
    }
}

#[test]
fn many_launches_from_several_threads_on_one_device() {
    let _t = turn();
    let Some(dev) = device(4, None) else { return };
    let k = affine();
    let reduce = kiln_ir::testing::example_kernel("reduce");
    std::thread::scope(|s| {
        for t in 0..4i32 {
            let (dev, k, reduce) = (&dev, &k, &reduce);
            s.spawn(move || {
                for round in 0..25i32 {
                    let n = 8 * (1 + (t * 25 + round) as u32 % 64);
                    let x: Vec<i32> = (0..n as i32).map(|i| i * (t + 1) - round).collect();
                    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(round)];
                    let bufs = [Buffer::from_slice(&x), Buffer::zeroed(Scalar::I32, n as usize)];
                    let range = NdRange::new(&[n]).with_local(&[8]);
                    same_as_interpreter(dev, k, &range, &args, &bufs);
                    // Barriers and local memory: the rounds run on the pool's threads too.
                    let f: Vec<f32> = (0..256).map(|i| (i * (t + 1) + round) as f32).collect();
                    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(250u32)];
                    let bufs = [Buffer::from_slice(&f), Buffer::zeroed(Scalar::F32, 4)];
                    let range = NdRange::new(&[256]).with_local(&[64]);
                    same_as_interpreter(dev, reduce, &range, &args, &bufs);
                }
            });
        }
    });
}

#[test]
fn a_fault_in_one_launch_does_not_poison_the_pool() {
    let _t = turn();
    let Some(dev) = device(3, None) else { return };
    let k = affine();
    // More work-items than a launch runs on the calling thread: the pool's threads run it.
    let n = 8192;
    let range = NdRange::new(&[n as u32]).with_local(&[8]);
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(1i32)];
    let x = Buffer::from_slice(&(0..n as i32).collect::<Vec<i32>>());
    for short in [100usize, n - 1, 17, 5000] {
        // Too short an output: groups on several threads fault; the lowest one is reported,
        // as the interpreter reports it.
        same_as_interpreter(
            &dev,
            &k,
            &range,
            &args,
            &[x.clone(), Buffer::zeroed(Scalar::I32, short)],
        );
        same_as_interpreter(&dev, &k, &range, &args, &[x.clone(), Buffer::zeroed(Scalar::I32, n)]);
    }
    assert_eq!(dev.workers_started(), 2);
}

/// A histogram in local memory, added to the global bins with atomics.
fn histogram() -> Kernel {
    kernel(
        "kernel hist(x: ptr<global, u32>, h: ptr<global, u32>, n: u32) {
             local bins: u32[16];
             let l: u32 = local_id(0);
             if l < 16u32 { bins[l] = 0u32; }
             barrier(local);
             let i: u32 = global_id(0);
             if i < n { atomic_add(bins, x[i] & 15u32, 1u32); atomic_sub(h, 16u32 + (x[i] >> 28u32), 1u32); }
             barrier(local);
             if l < 16u32 { atomic_add(h, l, bins[l]); }
         }",
    )
}

#[test]
fn a_small_launch_runs_on_the_calling_thread() {
    let _t = turn();
    let Some(dev) = device(4, None) else { return };
    if !kiln_backends::x86::cpu_has("avx2") {
        // The count below is of groups run on the 8-lane code.
        kiln_ir::testing::skip("this CPU has no AVX2");
        return;
    }
    // Long enough per group (a loop) that the workers would take part if it were handed
    // to them.
    let k = kernel(
        "kernel mix(x: ptr<global, u32>) {
             let i: u32 = global_id(0);
             var h: u32 = x[i];
             for j: u32 in 0u32 .. 2000u32 { h = h * 747796405u32 + j; }
             x[i] = h; }",
    );
    let built = dev.build(&kiln_ir::Verified::kernel(k.clone()).unwrap(), &Default::default());
    let program = dev.load(&built.unwrap()).unwrap();
    let h = dev.kernel(&program, "mix").unwrap();
    let items = kiln_runtime::device::cpu::INLINE_ITEMS as u32;
    let range = NdRange::new(&[items]).with_local(&[64]);
    let x = Buffer::from_slice(&(0..items).collect::<Vec<u32>>());
    let mut want = vec![x.clone()];
    run(&k, &range, &[Arg::Buffer(0)], &mut want).unwrap();
    for _ in 0..10 {
        let mut bufs = vec![x.clone()];
        let before = kiln_runtime::device::cpu::lane_groups_on_this_thread();
        dev.run(&h, &range, &[Arg::Buffer(0)], &mut bufs).unwrap();
        // Every group here, none handed to the (started) workers.
        assert_eq!(kiln_runtime::device::cpu::lane_groups_on_this_thread() - before, 64);
        assert_eq!(bufs, want);
    }
    assert_eq!(dev.workers_started(), 3);
}

#[test]
fn atomics_on_buffers_agree_on_one_thread_and_on_many() {
    let _t = turn();
    let k = histogram();
    for (threads, n) in [(1usize, 20000u32), (3, 20000), (3, 1000)] {
        let Some(dev) = device(threads, None) else { return };
        let x: Vec<u32> = (0..n).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
        let range = NdRange::new(&[n.div_ceil(64) * 64]).with_local(&[64]);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n - 3)];
        let bufs = [Buffer::from_slice(&x), Buffer::zeroed(Scalar::U32, 32)];
        same_as_interpreter(&dev, &k, &range, &args, &bufs);
    }
}

#[test]
fn a_timeout_stops_a_kernel_and_the_pool_still_works() {
    let _t = turn();
    let Some(dev) = device(3, Some(Duration::from_millis(200))) else { return };
    let spin = kernel(
        "kernel spin(x: ptr<global, u32>) {
             var i: u32 = 0; while i < 10 { x[global_id(0)] = x[global_id(0)] + 1; } }",
    );
    let k = affine();
    let x = Buffer::from_slice(&(0..64).collect::<Vec<i32>>());
    for _ in 0..2 {
        let mut bufs = vec![Buffer::zeroed(Scalar::U32, 64)];
        let r = NdRange::new(&[64]).with_local(&[8]);
        let e = dev.build_and_run(&spin, &r, &[Arg::Buffer(0)], &mut bufs).unwrap_err();
        assert!(e.to_string().contains("spin"), "{e}");
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(-3i32)];
        let r = NdRange::new(&[64]).with_local(&[8]);
        same_as_interpreter(&dev, &k, &r, &args, &[x.clone(), Buffer::zeroed(Scalar::I32, 64)]);
    }
    assert_eq!(dev.workers_started(), 2);
}

#[test]
#[cfg(target_os = "linux")]
fn dropping_the_device_ends_its_threads() {
    let _t = turn();
    let Some(dev) = device(4, None) else { return };
    let k = affine();
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(0i32)];
    let mut bufs = vec![Buffer::zeroed(Scalar::I32, 64), Buffer::zeroed(Scalar::I32, 64)];
    dev.build_and_run(&k, &NdRange::new(&[64]).with_local(&[8]), &args, &mut bufs).unwrap();
    assert_eq!(pool_threads().len(), 3);
    drop(dev);
    // Joined threads have ended; the kernel may list an ended thread for a moment after,
    // so wait for the list to empty (it does at once when the threads were joined, and
    // never when they were left running).
    let mut left = pool_threads();
    for _ in 0..1000 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
        left = pool_threads();
    }
    assert!(left.is_empty(), "threads left running after the device was dropped: {left:?}");
}
