//! Launch and argument checks, with the interpreter's rules and messages (see
//! `kiln_ir::interp`'s "Execution model"), so that a launch the interpreter rejects is
//! rejected here with the same error.

use kiln_ir::launch::{default_local_size, Arg, NdRange};
use kiln_ir::{Kernel, Type};

use super::RawBuffer;

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

fn fmt3(v: [u32; 3]) -> String {
    format!("({}, {}, {})", v[0], v[1], v[2])
}

/// Checks `range` against `kernel` and fills in the local size (the interpreter's rules).
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

/// What one argument binds: a scalar's canonical bits, or a buffer index.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Bound {
    Scalar(u64),
    Buffer(usize),
}

/// Checks `args` against the kernel's parameters (the interpreter's rules and messages).
pub(crate) fn bind_args(
    kernel: &Kernel,
    args: &[Arg],
    buffers: &[RawBuffer],
) -> Result<Vec<Bound>, String> {
    let params = kernel.params();
    if args.len() != params.len() {
        return Err(format!(
            "the kernel takes {} argument{}, {} given",
            params.len(),
            if params.len() == 1 { "" } else { "s" },
            args.len()
        ));
    }
    let mut out = Vec::with_capacity(args.len());
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        let name = p.name();
        out.push(match (p.ty(), a) {
            (Type::Scalar(s), Arg::Scalar(v)) => {
                if v.scalar() != s {
                    return Err(format!(
                        "argument {i} (`{name}`) is a {s} but the value given is a {}",
                        v.scalar()
                    ));
                }
                Bound::Scalar(super::rt::bits_of(kiln_ir::eval::cast(s, *v)))
            }
            (Type::Ptr(_, elem), Arg::Buffer(b)) => {
                let Some(buf) = buffers.get(*b) else {
                    return Err(format!(
                        "argument {i} (`{name}`) binds buffer {b}, but only {} buffer{} given",
                        buffers.len(),
                        if buffers.len() == 1 { " is" } else { "s are" }
                    ));
                };
                if buf.elem != elem {
                    return Err(format!(
                        "argument {i} (`{name}`) is a {} but buffer {b} holds {} elements",
                        p.ty(),
                        buf.elem
                    ));
                }
                Bound::Buffer(*b)
            }
            (t, a) => {
                let kind = match a {
                    Arg::Scalar(_) => "a scalar",
                    Arg::Buffer(_) => "a buffer",
                };
                return Err(format!("argument {i} (`{name}`) is a {t} but {kind} was given"));
            }
        });
    }
    Ok(out)
}
