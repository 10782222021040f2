//! Resolving an [`NdRange`] against a kernel: the launch checks every executor shares.

use crate::kernel::Kernel;

use super::{default_local_size, NdRange};

/// A checked launch: every dimension filled in (unused ones are size 1, offset 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Global size per dimension.
    pub global: [u32; 3],
    /// Work-group size per dimension.
    pub local: [u32; 3],
    /// Global offset per dimension.
    pub offset: [u32; 3],
}

impl Launch {
    /// Work-groups per dimension.
    pub fn groups(&self) -> [u32; 3] {
        std::array::from_fn(|d| self.global[d] / self.local[d])
    }

    /// The number of work-groups.
    pub fn group_count(&self) -> u64 {
        self.groups().iter().map(|&g| g as u64).product()
    }

    /// Work-items per work-group.
    pub fn group_size(&self) -> u64 {
        self.local.iter().map(|&l| l as u64).product()
    }
}

/// `(x, y, z)`, as launch messages write a size or an id.
pub(crate) fn fmt3(v: [u32; 3]) -> String {
    format!("({}, {}, {})", v[0], v[1], v[2])
}

/// Checks `range` against `kernel` and fills in the local size: the rules every executor
/// applies (see `crate::interp`'s "Execution model"), with the interpreter's messages.
pub fn resolve_launch(kernel: &Kernel, range: &NdRange) -> Result<Launch, String> {
    let dims = range.dims;
    if !(1..=3).contains(&dims) {
        return Err(format!("an nd-range has 1 to 3 dimensions, not {dims}"));
    }
    let mut global = [1u32; 3];
    let mut offset = [0u32; 3];
    for d in 0..dims {
        if range.global[d] == 0 {
            return Err(format!("the global size is zero in dimension {d}"));
        }
        global[d] = range.global[d];
        offset[d] = range.offset[d];
        if offset[d] as u64 + global[d] as u64 > 1 << 32 {
            return Err(format!(
                "global offset {} + global size {} in dimension {d} overflows the u32 ids",
                offset[d], global[d]
            ));
        }
    }
    let reqd = kernel.attrs().reqd_work_group_size;
    let local = match (range.local, reqd) {
        (Some(l), _) => {
            let mut local = [1u32; 3];
            for d in 0..dims {
                if l[d] == 0 {
                    return Err(format!("the local size is zero in dimension {d}"));
                }
                local[d] = l[d];
            }
            local
        }
        (None, Some(r)) => r,
        (None, None) => default_local_size(global),
    };
    if let Some(r) = reqd {
        if local != r {
            return Err(format!(
                "local size {} does not match the kernel's #reqd_work_group_size{}",
                fmt3(local),
                fmt3(r)
            ));
        }
    }
    for d in 0..3 {
        if local[d] == 0 || global[d] % local[d] != 0 {
            return Err(format!(
                "the global size {} is not a multiple of the local size {} in dimension {d}",
                global[d], local[d]
            ));
        }
    }
    Ok(Launch { global, local, offset })
}
