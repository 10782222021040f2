//! Launch and argument checks, with the interpreter's rules and messages (see
//! `kiln_ir::interp`'s "Execution model"), so that a launch the interpreter rejects is
//! rejected here with the same error.

use kiln_ir::launch::Arg;
use kiln_ir::{Kernel, Type};

use super::exec::RawBuffer;

/// What one argument binds: a scalar's canonical bits, or a buffer index.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Bound {
    Scalar(u64),
    Buffer(usize),
    /// Elements `offset..offset + len` of a buffer (an [`Arg::Range`], checked in bounds).
    Range {
        buffer: usize,
        offset: usize,
        len: usize,
    },
}

/// Checks `args` against the kernel's parameters (the interpreter's rules and messages).
pub(crate) fn bind_args(
    kernel: &Kernel,
    args: &[Arg],
    buffers: &[RawBuffer],
) -> Result<Vec<Bound>, String> {
    // The one argument check of every layer, so that a bad launch reads the same here as on
    // the interpreter.
    kiln_ir::launch::check_args(kernel, args, buffers.len(), |&b| {
        buffers.get(b).map(|r| (r.elem, r.len))
    })
    .map_err(|e| e.to_string())?;
    let params = kernel.params();
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
                Bound::Scalar(kiln_backends::x86::abi::bits_of(kiln_ir::eval::cast(s, *v)))
            }
            (Type::Ptr(_, elem), Arg::Buffer(b) | Arg::Range { buffer: b, .. }) => {
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
                kiln_ir::launch::check_range(i, name, a, buf.len)?;
                match *a {
                    Arg::Range { buffer, offset, len } => Bound::Range { buffer, offset, len },
                    _ => Bound::Buffer(*b),
                }
            }
            (t, a) => {
                let kind = a.kind_word();
                return Err(format!("argument {i} (`{name}`) is a {t} but {kind} was given"));
            }
        });
    }
    Ok(out)
}
