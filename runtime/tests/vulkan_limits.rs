//! The Vulkan device's limits (issues 12 and 13): launches and kernels it cannot take are
//! refused with the limit named, never wrapped ids, driver crashes or hangs; launches with
//! more work-groups than one dispatch may have are split, reading every built-in as the
//! unsplit launch would.
//!
//! Without a Vulkan device the tests skip with a message, unless `KILN_REQUIRE_TOOLS` is
//! set (as `cargo xtask test` does), when they fail.

use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{parse_module, Kernel, Scalar};
use kiln_runtime::device::vulkan::{VulkanDevice, MAX_PRIVATE_BYTES};
use kiln_runtime::{Device, DeviceError};

fn device() -> Option<VulkanDevice> {
    let d = kiln_ir::testing::require("KILN_REQUIRE_TOOLS", VulkanDevice::open())?;
    eprintln!("vulkan device: {} ({})", d.name(), d.version());
    Some(d)
}

fn kernel(src: &str) -> Kernel {
    parse_module(src).unwrap_or_else(|e| panic!("{e}\n{src}")).kernels.remove(0)
}

fn build_error(dev: &VulkanDevice, k: &Kernel) -> String {
    let m = kiln_ir::Verified::kernel(k.clone()).expect("verifies");
    match dev.build(&m, &kiln_runtime::BuildOptions::default()) {
        Err(e @ DeviceError::Build { .. }) => e.to_string(),
        Err(e) => panic!("{}: not a build error: {e}", k.name()),
        Ok(_) => panic!("{}: built, but it exceeds a limit", k.name()),
    }
}

/// Issue 12: Vulkan wrapped the ids silently where the interpreter refuses.
#[test]
fn vulkan_offset_plus_global_overflow_is_refused() {
    let Some(dev) = device() else { return };
    let k = kernel("kernel ids(out: ptr<global, u32>) { out[0] = global_id(0); }");
    let range = NdRange::new(&[64]).with_offset(&[u32::MAX - 10]);
    let mut bufs = vec![Buffer::zeroed(Scalar::U32, 1)];
    let want = run(&k, &range, &[Arg::Buffer(0)], &mut bufs.clone()).unwrap_err().to_string();
    let got = dev.build_and_run(&k, &range, &[Arg::Buffer(0)], &mut bufs).unwrap_err();
    let msg = "overflows the u32 ids";
    assert!(want.contains(msg), "interpreter: {want}");
    assert!(got.to_string().contains(msg), "vulkan: {got}");
    assert_eq!(bufs[0].to_vec::<u32>().unwrap(), [0], "nothing ran");
    // The last id that fits still runs.
    let range = NdRange::new(&[64]).with_offset(&[u32::MAX - 63]);
    dev.build_and_run(&k, &range, &[Arg::Buffer(0)], &mut bufs).unwrap();
}

/// Issue 12: 34 or more buffer parameters crashed the driver.
#[test]
fn vulkan_too_many_storage_buffers_are_refused() {
    let Some(dev) = device() else { return };
    let n = dev.limits().max_per_stage_descriptor_storage_buffers.min(1000) as usize + 1;
    let params: Vec<String> = (0..n).map(|i| format!("b{i}: ptr<global, u32>")).collect();
    let k = kernel(&format!("kernel many({}) {{ b0[0] = 1; }}", params.join(", ")));
    let e = build_error(&dev, &k);
    assert!(e.contains("maxPerStageDescriptorStorageBuffers") && e.contains("`many`"), "{e}");
}

/// Issue 12: a local array over the device's shared memory crashed the driver.
#[test]
fn vulkan_huge_local_array_is_refused() {
    let Some(dev) = device() else { return };
    let n = dev.limits().max_compute_shared_memory_size / 4 + 1;
    let k = kernel(&format!(
        "kernel big(out: ptr<global, f32>) {{ local t: f32[{n}]; out[0] = t[0]; }}"
    ));
    let e = build_error(&dev, &k);
    assert!(e.contains("maxComputeSharedMemorySize") && e.contains("`big`"), "{e}");
}

/// Issue 12: a huge private array crashed the driver; refused by kiln's per-item limit.
#[test]
fn vulkan_huge_private_array_is_refused() {
    let Some(dev) = device() else { return };
    let n = MAX_PRIVATE_BYTES / 4 + 1;
    let k = kernel(&format!(
        "kernel big(out: ptr<global, u32>) {{ private t: u32[{n}]; out[0] = t[0]; }}"
    ));
    let e = build_error(&dev, &k);
    assert!(e.contains("private array bytes") && e.contains("`big`"), "{e}");
}

/// Issue 12: too many scalar parameters for the push-constant block are a build error.
#[test]
fn vulkan_push_constants_over_the_limit_are_refused() {
    let Some(dev) = device() else { return };
    // 32 bytes of launch fields, then one 4-byte slot per `u32`.
    let n = (dev.limits().max_push_constants_size as usize - 32) / 4 + 1;
    let params: Vec<String> = (0..n).map(|i| format!("s{i}: u32")).collect();
    let k = kernel(&format!(
        "kernel scalars(out: ptr<global, u32>, {}) {{ out[0] = s0; }}",
        params.join(", ")
    ));
    let e = build_error(&dev, &k);
    assert!(e.contains("maxPushConstantsSize") && e.contains("`scalars`"), "{e}");
    // One fewer fits, and every scalar arrives (packed slots, 64-bit ones aligned).
    let params: Vec<String> = (0..n - 3).map(|i| format!("s{i}: u32")).collect();
    let k = kernel(&format!(
        "kernel scalars(out: ptr<global, u32>, {}, w: u64) {{
           out[0] = {} + (w >> 32) as u32;
         }}",
        params.join(", "),
        (0..n - 3).map(|i| format!("s{i}")).collect::<Vec<_>>().join(" + ")
    ));
    let mut args = vec![Arg::Buffer(0)];
    args.extend((0..n - 3).map(|i| Arg::scalar(i as u32 * 3)));
    args.push(Arg::scalar(7u64 << 32 | 5));
    let range = NdRange::new(&[1]);
    let mut want = vec![Buffer::zeroed(Scalar::U32, 1)];
    run(&k, &range, &args, &mut want).unwrap();
    let mut got = vec![Buffer::zeroed(Scalar::U32, 1)];
    dev.build_and_run(&k, &range, &args, &mut got).unwrap();
    assert_eq!(got[0].to_vec::<u32>().unwrap(), want[0].to_vec::<u32>().unwrap());
}

/// Issue 12: a 100,000-element private array hung the driver (a store of a null constant of
/// the whole array); large private arrays are now zeroed by a loop, as the interpreter
/// zeroes them. This one is as large as the limit allows.
#[test]
fn vulkan_large_private_array_is_zeroed() {
    let Some(dev) = device() else { return };
    let n = MAX_PRIVATE_BYTES / 4;
    let k = kernel(&format!(
        "kernel zeroed(out: ptr<global, u32>) {{
           private t: u32[{n}];
           let i: u32 = global_id(0);
           t[i * 7] = i + 1;
           out[i] = t[i * 7] + t[i * 7 + 1] + t[{n} - 1 - i];
         }}"
    ));
    let range = NdRange::new(&[64]).with_local(&[16]);
    let mut want = vec![Buffer::from_slice(&[5u32; 64])];
    run(&k, &range, &[Arg::Buffer(0)], &mut want).unwrap();
    let mut got = vec![Buffer::from_slice(&[5u32; 64])];
    dev.build_and_run(&k, &range, &[Arg::Buffer(0)], &mut got).unwrap();
    assert_eq!(got[0].to_vec::<u32>().unwrap(), want[0].to_vec::<u32>().unwrap());
}

/// Every work-item built-in of dimension `d`, folded into one value that differs when any
/// of them reads differently.
const BUILTINS: &str = "global_id(D) * 3 + group_id(D) * 5 + num_groups(D) * 7 + \
     global_size(D) * 11 + local_id(D) * 13 + local_size(D) * 17 + global_offset(D) * 19";

fn builtins(d: usize) -> String {
    BUILTINS.replace('D', &d.to_string())
}

/// What [`BUILTINS`] reads in work-item `(group, local)` of a launch.
fn builtins_want(group: u64, local_id: u64, local: u64, groups: u64, offset: u64) -> u32 {
    let gid = offset + group * local + local_id;
    (gid * 3
        + group * 5
        + groups * 7
        + groups * local * 11
        + local_id * 13
        + local * 17
        + offset * 19) as u32
}

/// Issue 13: a 1-D launch of 2^n items at the default local size (64), more groups than one
/// dispatch may have: every item's built-ins read as in the unsplit launch, as a byte.
fn large_1d(dev: &VulkanDevice, log2: u32) {
    let n = 1u64 << log2;
    assert!(n / 64 > dev.limits().max_compute_work_group_count[0] as u64, "not split");
    let k = kernel(&format!(
        "kernel big(out: ptr<global, u8>) {{ out[global_id(0) - 3] = ({}) as u8; }}",
        builtins(0)
    ));
    let range = NdRange::new(&[n as u32]).with_offset(&[3]);
    let mut bufs = vec![Buffer::zeroed(Scalar::U8, n as usize)];
    dev.build_and_run(&k, &range, &[Arg::Buffer(0)], &mut bufs).unwrap();
    let got = bufs[0].to_vec::<u8>().unwrap();
    let groups = n / 64;
    for (i, &g) in got.iter().enumerate() {
        let i = i as u64;
        let want = builtins_want(i / 64, i % 64, 64, groups, 3) as u8;
        assert_eq!(g, want, "item {i} of 2^{log2}");
    }
}

#[test]
fn vulkan_large_range_2_24_is_split() {
    let Some(dev) = device() else { return };
    large_1d(&dev, 24);
}

#[test]
fn vulkan_large_range_2_26_is_split() {
    let Some(dev) = device() else { return };
    large_1d(&dev, 26);
}

/// Issue 13: a split in dimension 1 (2-D range, offset in both dimensions) reads both
/// dimensions' built-ins as the interpreter does.
#[test]
fn vulkan_split_launch_matches_the_interpreter_in_2d() {
    let Some(dev) = device() else { return };
    let rows = dev.limits().max_compute_work_group_count[1] as u64 * 2 + 6;
    let k = kernel(&format!(
        "kernel two(out: ptr<global, u32>) {{
           let r: u32 = global_id(1) - global_offset(1);
           let c: u32 = global_id(0) - global_offset(0);
           out[r * 2 + c] = ({}) ^ (({}) << 16);
         }}",
        builtins(0),
        builtins(1)
    ));
    let range = NdRange::new(&[2, rows as u32]).with_local(&[2, 1]).with_offset(&[5, 9]);
    let mut want = vec![Buffer::zeroed(Scalar::U32, 2 * rows as usize)];
    run(&k, &range, &[Arg::Buffer(0)], &mut want).unwrap();
    let mut got = vec![Buffer::zeroed(Scalar::U32, 2 * rows as usize)];
    dev.build_and_run(&k, &range, &[Arg::Buffer(0)], &mut got).unwrap();
    assert_eq!(got[0].to_vec::<u32>().unwrap(), want[0].to_vec::<u32>().unwrap());
}
