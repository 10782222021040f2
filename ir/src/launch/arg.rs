//! The one argument model: [`Arg`], what a launch passes for each kernel parameter, and
//! [`ArgError`], why an argument does not fit its parameter.
//!
//! Every layer uses the same type; only the way a buffer is named differs (the type
//! parameter `B`): an executor's index into its buffer list (`usize`, the default), the
//! runtime's accessor, the facade's buffer handle. [`check_args`] is the one check of
//! arguments against parameters, so a wrong argument reads alike whichever API it came
//! through.

use crate::expr::Imm;
use crate::kernel::Kernel;
use crate::types::{Scalar, Type};

use super::Element;

/// A kernel argument: a scalar value, a buffer, or a range of elements of a buffer. `B`
/// names the buffer: an index into the launch's buffer list for an executor (the
/// default), an accessor or buffer handle in the runtime and the facade.
///
/// ```
/// use kiln_ir::launch::Arg;
/// let args: Vec<Arg> = vec![Arg::Buffer(0), Arg::Range { buffer: 1, offset: 4, len: 4 }, 2.5f32.into()];
/// assert_eq!(args[2].imm().map(|v| v.scalar()), Some(kiln_ir::Scalar::F32));
/// assert_eq!(args[1].window(16), Some((4, 4)));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum Arg<B = usize> {
    /// A scalar parameter's value, of the parameter's type exactly (nothing is converted).
    Scalar(Imm),
    /// A pointer parameter bound to a whole buffer.
    Buffer(B),
    /// A pointer parameter bound to elements `offset..offset + len` of a buffer (a SYCL
    /// ranged accessor): the kernel sees a buffer of `len` elements whose index 0 is
    /// element `offset`; an index outside `0..len` is out of bounds even where the buffer
    /// goes on. The range must lie within the buffer ([`check_range`]).
    Range {
        /// The buffer.
        buffer: B,
        /// The first element bound, in elements.
        offset: usize,
        /// The number of elements bound.
        len: usize,
    },
}

/// How a layer names a buffer in an [`Arg`]: what makes two arguments the same one.
pub trait BufferRef: Clone {
    /// Whether `self` and `other` name the same buffer (not merely equal contents).
    fn same_buffer(&self, other: &Self) -> bool;

    /// The buffer's position in the launch's buffer list, where the name is one (an
    /// executor's arguments): argument messages then say which buffer.
    fn list_index(&self) -> Option<usize> {
        None
    }
}

impl BufferRef for usize {
    fn same_buffer(&self, other: &usize) -> bool {
        self == other
    }

    fn list_index(&self) -> Option<usize> {
        Some(*self)
    }
}

impl<B> Arg<B> {
    /// A scalar argument from a Rust value (`Arg::scalar(2.5f32)`).
    pub fn scalar<T: Element>(v: T) -> Arg<B> {
        Arg::Scalar(v.to_imm())
    }

    /// A scalar argument's value; `None` for a buffer.
    pub fn imm(&self) -> Option<Imm> {
        match self {
            Arg::Scalar(v) => Some(*v),
            _ => None,
        }
    }

    /// The buffer a pointer argument binds (whole or a range of it); `None` for a scalar.
    pub fn buffer(&self) -> Option<&B> {
        match self {
            Arg::Scalar(_) => None,
            Arg::Buffer(b) | Arg::Range { buffer: b, .. } => Some(b),
        }
    }

    /// The elements a pointer argument binds, as `(offset, len)`, given the length of its
    /// buffer: `(0, buffer_len)` for a whole buffer. `None` for a scalar.
    pub fn window(&self, buffer_len: usize) -> Option<(usize, usize)> {
        match self {
            Arg::Scalar(_) => None,
            Arg::Buffer(_) => Some((0, buffer_len)),
            Arg::Range { offset, len, .. } => Some((*offset, *len)),
        }
    }

    /// The range's offset, for a ranged argument ([`Arg::Range`]); `None` otherwise. Bounds
    /// messages use it to say that an index is relative to the range.
    pub fn range_offset(&self) -> Option<usize> {
        match self {
            Arg::Range { offset, .. } => Some(*offset),
            _ => None,
        }
    }

    /// A short word for its kind, in argument mismatch messages.
    pub fn kind_word(&self) -> &'static str {
        match self {
            Arg::Scalar(_) => "a scalar",
            Arg::Buffer(_) => "a buffer",
            Arg::Range { .. } => "a buffer range",
        }
    }

    /// The same argument with its buffer named another way (`f` maps the buffer): how a
    /// layer hands its arguments to the one below.
    pub fn map_buffer<C>(self, f: impl FnOnce(B) -> C) -> Arg<C> {
        match self {
            Arg::Scalar(v) => Arg::Scalar(v),
            Arg::Buffer(b) => Arg::Buffer(f(b)),
            Arg::Range { buffer, offset, len } => Arg::Range { buffer: f(buffer), offset, len },
        }
    }
}

impl<B: BufferRef> Arg<B> {
    /// Whether `self` and `other` are the same argument: bitwise equal scalars, the same
    /// buffer, or the same range of the same buffer (a range and its whole buffer, or two
    /// ranges of one buffer, are different arguments).
    pub fn same(&self, other: &Arg<B>) -> bool {
        match (self, other) {
            (Arg::Scalar(a), Arg::Scalar(b)) => a == b,
            (Arg::Buffer(a), Arg::Buffer(b)) => a.same_buffer(b),
            (
                Arg::Range { buffer: a, offset: o1, len: l1 },
                Arg::Range { buffer: b, offset: o2, len: l2 },
            ) => a.same_buffer(b) && (o1, l1) == (o2, l2),
            _ => false,
        }
    }
}

macro_rules! scalar_arg {
    ($($t:ty),*) => {$(
        /// A scalar argument of exactly this type.
        impl<B> From<$t> for Arg<B> {
            fn from(v: $t) -> Arg<B> {
                Arg::Scalar(v.to_imm())
            }
        }
    )*};
}
scalar_arg!(bool, i8, i16, i32, i64, u8, u16, u32, u64, half::f16, f32, f64);

/// What an argument is, as far as a parameter cares: what [`check_kinds`] checks. A typed
/// kernel handle describes its Rust signature this way before any value exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// A buffer (whole or a range) of these elements.
    Buffer(Scalar),
    /// A scalar of this type.
    Scalar(Scalar),
}

/// Why arguments do not fit a kernel's parameters: the one argument error of every layer
/// (executors, the runtime's queue and graphs, the facade). It names the argument by
/// position and parameter name; the layer reporting it adds the kernel or command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    /// Not one argument per parameter.
    Count {
        /// The kernel's parameters, as `name: type`.
        params: Vec<String>,
        /// The arguments given.
        given: usize,
    },
    /// A scalar of another type than the parameter's (kiln does not convert).
    ScalarType {
        /// The argument's position.
        index: usize,
        /// The parameter's name.
        param: String,
        /// The parameter's type.
        expected: Scalar,
        /// The value's type.
        given: Scalar,
    },
    /// A buffer of other elements than the pointer parameter's.
    BufferType {
        /// The argument's position.
        index: usize,
        /// The parameter's name.
        param: String,
        /// The parameter's type.
        expected: Type,
        /// The buffer's index in the launch's list, where there is one.
        buffer: Option<usize>,
        /// The buffer's element type.
        given: Scalar,
    },
    /// A scalar for a pointer or a buffer for a scalar.
    Kind {
        /// The argument's position.
        index: usize,
        /// The parameter's name.
        param: String,
        /// The parameter's type.
        expected: Type,
        /// What was given ([`Arg::kind_word`]).
        given: &'static str,
    },
    /// A buffer index past the launch's buffer list.
    NoBuffer {
        /// The argument's position.
        index: usize,
        /// The parameter's name.
        param: String,
        /// The index given.
        buffer: usize,
        /// How many buffers there are.
        buffers: usize,
    },
    /// A range that does not lie within its buffer.
    Range {
        /// The argument's position.
        index: usize,
        /// The parameter's name.
        param: String,
        /// The buffer's index in the launch's list.
        buffer: usize,
        /// The range's first element.
        offset: usize,
        /// The range's length.
        len: usize,
        /// The buffer's length.
        buffer_len: usize,
    },
}

impl ArgError {
    /// The parameter at fault; `None` for a wrong count.
    pub fn param(&self) -> Option<&str> {
        match self {
            ArgError::Count { .. } => None,
            ArgError::ScalarType { param, .. }
            | ArgError::BufferType { param, .. }
            | ArgError::Kind { param, .. }
            | ArgError::NoBuffer { param, .. }
            | ArgError::Range { param, .. } => Some(param),
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

impl std::fmt::Display for ArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArgError::Count { params, given } => write!(
                f,
                "the kernel takes {} argument{} ({}), {given} given",
                params.len(),
                plural(params.len()),
                params.join(", ")
            ),
            ArgError::ScalarType { index, param, expected, given } => write!(
                f,
                "argument {index} (`{param}`) is a {expected} but the value given is a {given}"
            ),
            ArgError::BufferType { index, param, expected, buffer: Some(b), given } => write!(
                f,
                "argument {index} (`{param}`) is a {expected} but buffer {b} holds {given} elements"
            ),
            ArgError::BufferType { index, param, expected, buffer: None, given } => write!(
                f,
                "argument {index} (`{param}`) is a {expected} but the buffer given holds {given} \
                 elements"
            ),
            ArgError::Kind { index, param, expected, given } => {
                write!(f, "argument {index} (`{param}`) is a {expected} but {given} was given")
            }
            ArgError::NoBuffer { index, param, buffer, buffers } => write!(
                f,
                "argument {index} (`{param}`) binds buffer {buffer}, but only {buffers} buffer{} \
                 given",
                if *buffers == 1 { " is" } else { "s are" }
            ),
            ArgError::Range { index, param, buffer, offset, len, buffer_len } => write!(
                f,
                "argument {index} (`{param}`) binds elements {offset}..{} (offset {offset}, length \
                 {len}) of buffer {buffer}, which has {buffer_len} element{}",
                *offset as u128 + *len as u128,
                plural(*buffer_len)
            ),
        }
    }
}

impl std::error::Error for ArgError {}

/// Executors whose launch errors are text take an argument error as its message.
impl From<ArgError> for String {
    fn from(e: ArgError) -> String {
        e.to_string()
    }
}

/// The error for `given` arguments to `kernel`.
fn count_error(kernel: &Kernel, given: usize) -> ArgError {
    let params = kernel.params().iter().map(|p| format!("{}: {}", p.name(), p.ty())).collect();
    ArgError::Count { params, given }
}

/// Checks argument `index` of kind `given` against parameter `p`.
fn check_kind(index: usize, p: &crate::expr::Var, given: ArgKind) -> Result<(), ArgError> {
    let param = || p.name().to_string();
    match (p.ty(), given) {
        (Type::Scalar(s), ArgKind::Scalar(g)) if g != s => {
            Err(ArgError::ScalarType { index, param: param(), expected: s, given: g })
        }
        (Type::Scalar(_), ArgKind::Scalar(_)) => Ok(()),
        (t @ Type::Ptr(_, elem), ArgKind::Buffer(g)) if g != elem => {
            Err(ArgError::BufferType { index, param: param(), expected: t, buffer: None, given: g })
        }
        (Type::Ptr(..), ArgKind::Buffer(_)) => Ok(()),
        (t, ArgKind::Scalar(_)) => {
            Err(ArgError::Kind { index, param: param(), expected: t, given: "a scalar" })
        }
        (t, ArgKind::Buffer(_)) => {
            Err(ArgError::Kind { index, param: param(), expected: t, given: "a buffer" })
        }
    }
}

/// Checks arguments of these kinds against `kernel`'s parameters: one per parameter, a
/// scalar of the parameter's type exactly, a buffer of the pointer's element type.
///
/// ```
/// use kiln_ir::launch::{check_kinds, ArgKind};
/// use kiln_ir::Scalar;
/// let m = kiln_ir::parse_module("kernel k(x: ptr<global, f32>, a: f32) { }").unwrap();
/// let k = &m.kernels[0];
/// assert!(check_kinds(k, &[ArgKind::Buffer(Scalar::F32), ArgKind::Scalar(Scalar::F32)]).is_ok());
/// let err = check_kinds(k, &[ArgKind::Buffer(Scalar::F32), ArgKind::Scalar(Scalar::F64)]);
/// assert_eq!(err.unwrap_err().to_string(), "argument 1 (`a`) is a f32 but the value given is a f64");
/// ```
pub fn check_kinds(kernel: &Kernel, args: &[ArgKind]) -> Result<(), ArgError> {
    let params = kernel.params();
    if args.len() != params.len() {
        return Err(count_error(kernel, args.len()));
    }
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        check_kind(i, p, *a)?;
    }
    Ok(())
}

/// Checks `args` against `kernel`'s parameters as [`check_kinds`] does, and each buffer
/// argument against its buffer: `buffer` gives a buffer's element type and length, `None`
/// where the launch has no such buffer (`buffers` buffers in all, for the message). A
/// range must lie within its buffer.
///
/// ```
/// use kiln_ir::launch::{check_args, Arg};
/// use kiln_ir::Scalar;
/// let m = kiln_ir::parse_module("kernel k(x: ptr<global, f32>) { }").unwrap();
/// let bufs = [(Scalar::F32, 8usize)];
/// let look = |b: &usize| bufs.get(*b).copied();
/// assert!(check_args(&m.kernels[0], &[Arg::Range { buffer: 0, offset: 4, len: 4 }], 1, look).is_ok());
/// let err = check_args(&m.kernels[0], &[Arg::Buffer(1)], 1, look).unwrap_err();
/// assert_eq!(err.to_string(), "argument 0 (`x`) binds buffer 1, but only 1 buffer is given");
/// ```
pub fn check_args<B: BufferRef>(
    kernel: &Kernel,
    args: &[Arg<B>],
    buffers: usize,
    buffer: impl Fn(&B) -> Option<(Scalar, usize)>,
) -> Result<(), ArgError> {
    let params = kernel.params();
    if args.len() != params.len() {
        return Err(count_error(kernel, args.len()));
    }
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        match a {
            Arg::Scalar(v) => check_kind(i, p, ArgKind::Scalar(v.scalar()))?,
            Arg::Buffer(b) | Arg::Range { buffer: b, .. } => {
                if !p.ty().is_ptr() {
                    return Err(ArgError::Kind {
                        index: i,
                        param: p.name().to_string(),
                        expected: p.ty(),
                        given: a.kind_word(),
                    });
                }
                // The index in messages: the position a buffer has in the launch's list
                // (executors), else the argument's own position.
                let at = b.list_index().unwrap_or(i);
                let Some((elem, len)) = buffer(b) else {
                    return Err(ArgError::NoBuffer {
                        index: i,
                        param: p.name().to_string(),
                        buffer: at,
                        buffers,
                    });
                };
                if let Err(ArgError::BufferType { index, param, expected, given, .. }) =
                    check_kind(i, p, ArgKind::Buffer(elem))
                {
                    let buffer = b.list_index();
                    return Err(ArgError::BufferType { index, param, expected, buffer, given });
                }
                if let Arg::Range { offset, len: n, .. } = *a {
                    if offset.checked_add(n).is_none_or(|end| end > len) {
                        return Err(ArgError::Range {
                            index: i,
                            param: p.name().to_string(),
                            buffer: at,
                            offset,
                            len: n,
                            buffer_len: len,
                        });
                    }
                }
            }
        }
    }
    Ok(())
}

/// Checks that argument `i` (parameter `name`), ranged as `arg` says, lies within its buffer
/// of `buffer_len` elements; the error names the argument, the buffer, the offset, the
/// length and the buffer's size. Every executor refuses an out-of-range [`Arg::Range`] with it.
///
/// ```
/// use kiln_ir::launch::{check_range, Arg};
/// assert!(check_range(0, "x", &Arg::Range { buffer: 1, offset: 4, len: 4 }, 8).is_ok());
/// assert_eq!(
///     check_range(0, "x", &Arg::Range { buffer: 1, offset: 6, len: 4 }, 8).unwrap_err().to_string(),
///     "argument 0 (`x`) binds elements 6..10 (offset 6, length 4) of buffer 1, which has 8 elements"
/// );
/// ```
pub fn check_range(i: usize, name: &str, arg: &Arg, buffer_len: usize) -> Result<(), ArgError> {
    if let Arg::Range { buffer, offset, len } = *arg {
        if offset.checked_add(len).is_none_or(|end| end > buffer_len) {
            return Err(ArgError::Range {
                index: i,
                param: name.to_string(),
                buffer,
                offset,
                len,
                buffer_len,
            });
        }
    }
    Ok(())
}
