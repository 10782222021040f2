//! [`Arg`]: a kernel argument from Rust values, checked against the parameter it is for.

use half::f16;
use kiln_ir::{Imm, Kernel, Scalar, Type};
use kiln_passes::fusion::BindArg;
use kiln_runtime::{AnyBuffer, Buffer, Element};

use super::Error;

/// One kernel argument: a buffer (for a pointer parameter) or a scalar. Made with
/// [`args!`](crate::args) or `Arg::from`: from `&Buffer<T>` or `Buffer<T>` (the buffer
/// itself, not a copy) and from `bool`, `i8`..`i64`, `u8`..`u64`, `f16`, `f32`, `f64`.
/// A scalar keeps its Rust type: it must be the parameter's type exactly (`2.0f64` is not
/// an `f32`), so nothing is converted behind the caller's back.
///
/// ```
/// let x = kiln::Buffer::from_slice(&[1.0f32, 2.0]);
/// let args = kiln::args![&x, 2.0f32, 2u32];
/// assert_eq!(args.len(), 3);
/// assert!(matches!(args[0], kiln::Arg::Buffer(_)));
/// ```
#[derive(Clone, Debug)]
pub enum Arg {
    /// A buffer, shared with the caller: the kernel's writes are seen through it.
    Buffer(AnyBuffer),
    /// A scalar value, of its exact type.
    Scalar(Imm),
}

impl<T: Element> From<&Buffer<T>> for Arg {
    fn from(b: &Buffer<T>) -> Arg {
        Arg::Buffer(AnyBuffer::from(b))
    }
}

impl<T: Element> From<Buffer<T>> for Arg {
    fn from(b: Buffer<T>) -> Arg {
        Arg::Buffer(AnyBuffer::from(&b))
    }
}

impl From<&AnyBuffer> for Arg {
    fn from(b: &AnyBuffer) -> Arg {
        Arg::Buffer(b.clone())
    }
}

macro_rules! scalar_arg {
    ($($t:ty),*) => {$(
        impl From<$t> for Arg {
            fn from(v: $t) -> Arg {
                Arg::Scalar(v.to_imm())
            }
        }
    )*};
}
scalar_arg!(bool, i8, i16, i32, i64, u8, u16, u32, u64, f16, f32, f64);

impl BindArg for Arg {
    fn same(&self, other: &Arg) -> bool {
        match (self, other) {
            (Arg::Buffer(a), Arg::Buffer(b)) => a.same_buffer(b),
            (Arg::Scalar(a), Arg::Scalar(b)) => a == b,
            _ => false,
        }
    }

    fn scalar(&self) -> Option<Imm> {
        match self {
            Arg::Scalar(i) => Some(*i),
            Arg::Buffer(_) => None,
        }
    }
}

/// Arguments for [`Jit::launch`](crate::Jit::launch): `args![&x, &y, 2.0f32, n]` is
/// `vec![Arg::from(&x), Arg::from(&y), Arg::from(2.0f32), Arg::from(n)]`.
///
/// ```
/// let y = kiln::Buffer::<i32>::zeroed(4);
/// let a = kiln::args![&y, -1i32];
/// assert!(matches!(a[1], kiln::Arg::Scalar(_)));
/// ```
#[macro_export]
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        ::std::vec![$($crate::Arg::from($a)),*]
    };
}

/// What an argument is, as far as a parameter cares: a buffer of an element type or a
/// scalar of a type. Both the dynamic [`Arg`] list and the typed handle's tuple type
/// describe themselves this way, so one check serves both.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// A buffer of these elements.
    Buffer(Scalar),
    /// A scalar of this type.
    Scalar(Scalar),
}

impl Arg {
    fn kind(&self) -> ArgKind {
        match self {
            Arg::Buffer(b) => ArgKind::Buffer(b.elem()),
            Arg::Scalar(i) => ArgKind::Scalar(i.scalar()),
        }
    }
}

/// Checks `args` against `kernel`'s parameters: one each, buffers of the pointee type for
/// pointers, scalars of the exact type otherwise.
pub(crate) fn check_args(kernel: &Kernel, args: &[Arg]) -> Result<(), Error> {
    let kinds: Vec<ArgKind> = args.iter().map(Arg::kind).collect();
    check_kinds(kernel, &kinds)
}

/// Checks arguments of these kinds against `kernel`'s parameters (see [`check_args`]).
pub(crate) fn check_kinds(kernel: &Kernel, args: &[ArgKind]) -> Result<(), Error> {
    let params = kernel.params();
    let err = |param: Option<&str>, message: String| Error::Argument {
        kernel: kernel.name().to_string(),
        param: param.map(str::to_string),
        message,
    };
    if args.len() != params.len() {
        let names: Vec<String> =
            params.iter().map(|p| format!("{}: {}", p.name(), p.ty())).collect();
        return Err(err(
            None,
            format!(
                "takes {} argument{} ({}), {} given",
                params.len(),
                if params.len() == 1 { "" } else { "s" },
                names.join(", "),
                args.len()
            ),
        ));
    }
    for (p, a) in params.iter().zip(args) {
        let bad = |m: String| Err(err(Some(p.name()), m));
        match (p.ty(), *a) {
            (Type::Ptr(_, elem), ArgKind::Buffer(b)) if b != elem => {
                return bad(format!(
                    "expects a buffer of `{elem}` (`{}`), a buffer of `{b}` was given",
                    p.ty(),
                ))
            }
            (Type::Ptr(..), ArgKind::Scalar(s)) => {
                return bad(format!("expects a buffer (`{}`), a scalar `{s}` was given", p.ty()))
            }
            (Type::Scalar(s), ArgKind::Scalar(given)) if given != s => {
                return bad(format!(
                    "expects a scalar `{s}`, a scalar `{given}` was given (kiln does not convert)"
                ))
            }
            (Type::Scalar(s), ArgKind::Buffer(b)) => {
                return bad(format!("expects a scalar `{s}`, a buffer of `{b}` was given"))
            }
            _ => {}
        }
    }
    Ok(())
}
