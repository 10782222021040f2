//! What the Vulkan device refuses before it builds or launches: a kernel that needs more
//! than the device has (bindings, push constants, shared and private memory, work-group
//! size), and a launch the interpreter would refuse; and how a launch with more work-groups
//! than one dispatch may have is split.

use super::*;

impl VulkanDevice {
    /// Rejects a kernel this device cannot take, naming the kernel and the limit.
    pub(super) fn check_kernel(
        &self,
        kernel: &Kernel,
        layout: &VulkanLayout,
    ) -> Result<(), String> {
        let l = &self.limits;
        let f = Footprint::of(kernel);
        let buffers = f.buffers as u64;
        let wg = kernel.attrs().reqd_work_group_size.unwrap_or([1, 1, 1]);
        let wg_items: u64 = wg.iter().map(|&x| x as u64).product();
        let device = "the device's";
        let checks = [
            (
                "storage buffers (pointer parameters)",
                buffers,
                l.max_per_stage_descriptor_storage_buffers.min(l.max_descriptor_set_storage_buffers)
                    as u64,
                "maxPerStageDescriptorStorageBuffers",
            ),
            (
                "push-constant bytes (scalar parameters)",
                layout.push_size as u64,
                l.max_push_constants_size as u64,
                "maxPushConstantsSize",
            ),
            (
                "shared (local array) bytes",
                f.local_bytes,
                l.max_compute_shared_memory_size as u64,
                "maxComputeSharedMemorySize",
            ),
            (
                "#reqd_work_group_size work-items",
                wg_items,
                l.max_compute_work_group_invocations as u64,
                "maxComputeWorkGroupInvocations",
            ),
        ];
        let on = |m: String| format!("kernel `{}` on {}: {m}", kernel.name(), self.name);
        for (what, need, limit, name) in checks {
            if need > limit {
                return Err(on(format!("{} ({name})", exceeded(what, need, limit, device))));
            }
        }
        for (d, (&w, &limit)) in wg.iter().zip(&l.max_compute_work_group_size).enumerate() {
            if w > limit {
                let what = format!("#reqd_work_group_size in dimension {d}");
                let m = exceeded(&what, w as u64, limit as u64, device);
                return Err(on(format!("{m} (maxComputeWorkGroupSize)")));
            }
        }
        if f.private_bytes > MAX_PRIVATE_BYTES {
            let m = exceeded(
                "private array bytes per work-item",
                f.private_bytes,
                MAX_PRIVATE_BYTES,
                "kiln's Vulkan",
            );
            return Err(on(m));
        }
        Ok(())
    }

    /// Rejects launches the device cannot take, with the limit named.
    pub(super) fn check_limits(
        &self,
        kernel: &Kernel,
        local: [u32; 3],
        push: u32,
    ) -> Result<(), DeviceError> {
        let l = &self.limits;
        let fail = |m: String| {
            Err(launch_err(format!("kernel `{}` on {}: {m}", kernel.name(), self.name)))
        };
        if push > l.max_push_constants_size {
            return fail(format!(
                "{push} bytes of push constants (scalar parameters) exceed the device's {}",
                l.max_push_constants_size
            ));
        }
        let n: u64 = local.iter().map(|&x| x as u64).product();
        if n > l.max_compute_work_group_invocations as u64 {
            return fail(format!(
                "work-group of {n} work-items exceeds the device's {}",
                l.max_compute_work_group_invocations
            ));
        }
        for (d, (&x, &limit)) in local.iter().zip(&l.max_compute_work_group_size).enumerate() {
            if x > limit {
                return fail(format!(
                    "local size {x} in dimension {d} exceeds the device's {limit}"
                ));
            }
        }
        Ok(())
    }
}

/// The launch checks of the interpreter that matter here; returns the work-group size.
pub(super) fn check_launch(
    kernel: &Kernel,
    range: &NdRange,
    args: &[Arg],
    buffers: &[(Scalar, usize)],
) -> Result<[u32; 3], DeviceError> {
    let fail = |m: String| Err(launch_err(format!("kernel `{}`: {m}", kernel.name())));
    if !(1..=3).contains(&range.dims) {
        return fail(format!("{} dimensions (1 to 3 supported)", range.dims));
    }
    let mut global = range.global;
    for g in global.iter_mut().skip(range.dims) {
        *g = 1;
    }
    // The interpreter's rule: ids are u32, and the device would wrap them silently.
    for (d, (&o, &g)) in range.offset.iter().zip(&global).enumerate().take(range.dims) {
        if o as u64 + g as u64 > 1 << 32 {
            return fail(format!(
                "global offset {o} + global size {g} in dimension {d} overflows the u32 ids"
            ));
        }
    }
    let local = match (range.local, kernel.attrs().reqd_work_group_size) {
        (Some(l), _) => {
            let mut l = l;
            for x in l.iter_mut().skip(range.dims) {
                *x = 1;
            }
            l
        }
        (None, Some(r)) => r,
        (None, None) => default_local_size(global),
    };
    if let Some(r) = kernel.attrs().reqd_work_group_size {
        if r != local {
            return fail(format!("local size {local:?} differs from #reqd_work_group_size {r:?}"));
        }
    }
    for d in 0..3 {
        if global[d] == 0 || local[d] == 0 || global[d] % local[d] >= 1 {
            return fail(format!(
                "global size {global:?} is not a non-zero multiple of local size {local:?}"
            ));
        }
    }
    if args.len() != kernel.params().len() {
        return fail(format!("{} arguments for {} parameters", args.len(), kernel.params().len()));
    }
    for (n, (p, a)) in kernel.params().iter().zip(args).enumerate() {
        match (p.ty(), a) {
            (Type::Ptr(_, elem), Arg::Buffer(i) | Arg::Range { buffer: i, .. }) => {
                match buffers.get(*i) {
                    Some(&(b, len)) if b == elem => {
                        kiln_ir::launch::check_range(n, p.name(), a, len).map_err(launch_err)?
                    }
                    Some((b, _)) => {
                        return fail(format!(
                            "`{}` wants {elem} elements, buffer {i} has {b}",
                            p.name()
                        ))
                    }
                    None => return fail(format!("buffer {i} for `{}` does not exist", p.name())),
                }
            }
            (Type::Scalar(s), Arg::Scalar(imm)) if imm.scalar() == s => {}
            _ => {
                return fail(format!(
                    "argument for `{}` does not match its type {}",
                    p.name(),
                    p.ty()
                ))
            }
        }
    }
    Ok(local)
}

/// The dispatches that cover `groups` work-groups when one dispatch may have at most `max`
/// per dimension: (base group, group count) pairs, dimension 0 fastest.
pub(super) fn split_groups(groups: [u32; 3], max: [u32; 3]) -> Vec<([u32; 3], [u32; 3])> {
    let chunks = |d: usize| {
        let m = max[d].max(1);
        (0..groups[d].div_ceil(m)).map(move |i| (i * m, (groups[d] - i * m).min(m)))
    };
    let mut out = Vec::new();
    for (bz, cz) in chunks(2) {
        for (by, cy) in chunks(1) {
            for (bx, cx) in chunks(0) {
                out.push(([bx, by, bz], [cx, cy, cz]));
            }
        }
    }
    out
}
