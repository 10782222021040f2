//! [`TypedKernel`]: a kernel whose parameter list is a Rust tuple type, checked once when the
//! handle is made, so that a launch with arguments of the wrong Rust type does not compile.

use std::marker::PhantomData;

use half::f16;
use kiln_ir::launch::NdRange;
use kiln_ir::Verified;
use kiln_runtime::{Arg, ArgKind, Buffer, Element};

use super::{find_kernel, only, Error, Jit, Launch};

mod sealed {
    /// Parameter types and signatures kiln defines.
    pub trait Sealed {}
    /// Argument tuples.
    pub trait SealedArgs {}
}

/// A Rust type that stands for one kernel parameter in a [`TypedKernel`]'s signature:
/// `&Buffer<T>` for a `ptr<_, T>` parameter, and `bool`, `i8`..`i64`, `u8`..`u64`, `f16`,
/// `f32`, `f64` for a scalar parameter of exactly that type. Sealed: kiln implements it for
/// exactly these.
pub trait ParamType: sealed::Sealed {
    /// Whether it is a buffer or a scalar, and of which kiln type.
    #[doc(hidden)]
    fn kind() -> ArgKind;
}

/// A value that may be passed for a parameter declared as `P` in a [`TypedKernel`]'s
/// signature: `P` itself for a scalar, and a `&Buffer<T>` of any lifetime for `&Buffer<T>`
/// (so a handle outlives the buffers of any one launch).
#[diagnostic::on_unimplemented(
    message = "a `{Self}` cannot be passed for a parameter the signature declares `{P}`",
    label = "the kernel's signature says `{P}` here",
    note = "kiln does not convert arguments: pass a `{P}` (a literal takes the signature's type)"
)]
pub trait ArgFor<P: ParamType>: sealed::Sealed {
    /// The argument, to go down the same launch path as [`crate::args!`]'s.
    #[doc(hidden)]
    fn into_arg(self) -> Arg;
}

impl<T: Element> sealed::Sealed for &Buffer<T> {}

impl<T: Element> ParamType for &Buffer<T> {
    fn kind() -> ArgKind {
        ArgKind::Buffer(T::SCALAR)
    }
}

impl<T: Element> ArgFor<&Buffer<T>> for &Buffer<T> {
    fn into_arg(self) -> Arg {
        Arg::from(self)
    }
}

macro_rules! scalar_param {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl ParamType for $t {
            fn kind() -> ArgKind {
                ArgKind::Scalar(<$t as Element>::SCALAR)
            }
        }
        impl ArgFor<$t> for $t {
            fn into_arg(self) -> Arg {
                Arg::from(self)
            }
        }
    )*};
}
scalar_param!(bool, i8, i16, i32, i64, u8, u16, u32, u64, f16, f32, f64);

/// A kernel signature: a tuple of [`ParamType`]s, one per parameter in order (`()` for a
/// kernel without parameters, up to 12 parameters).
pub trait Signature: sealed::Sealed {
    /// The parameters' kinds, in order.
    #[doc(hidden)]
    fn kinds() -> Vec<ArgKind>;
}

/// Arguments for a [`TypedKernel`] of signature `S`: a tuple of the same length whose
/// element `i` is an [`ArgFor`] the signature's element `i`.
#[diagnostic::on_unimplemented(
    message = "the arguments `{Self}` do not fit the kernel's signature `{S}`",
    note = "give a tuple with one argument per parameter of the signature, each of its type"
)]
pub trait ArgsFor<S: Signature>: sealed::SealedArgs {
    /// The arguments in order.
    #[doc(hidden)]
    fn into_args(self) -> Vec<Arg>;
}

macro_rules! tuple_signature {
    ($(($p:ident, $a:ident, $v:ident)),*) => {
        impl<$($p: ParamType),*> sealed::Sealed for ($($p,)*) {}
        impl<$($p: ParamType),*> Signature for ($($p,)*) {
            fn kinds() -> Vec<ArgKind> {
                vec![$($p::kind()),*]
            }
        }
        impl<$($a),*> sealed::SealedArgs for ($($a,)*) {}
        impl<$($p: ParamType, $a: ArgFor<$p>),*> ArgsFor<($($p,)*)> for ($($a,)*) {
            #[allow(clippy::unused_unit)]
            fn into_args(self) -> Vec<Arg> {
                let ($($v,)*) = self;
                vec![$($v.into_arg()),*]
            }
        }
    };
}
/// Implements the signature traits for the tuple of the given parameters and for each
/// shorter tuple, down to `()` (a tuple's type parameters' names do not matter).
macro_rules! tuple_signatures {
    () => { tuple_signature!(); };
    ($head:tt $(, $rest:tt)*) => {
        tuple_signature!($head $(, $rest)*);
        tuple_signatures!($($rest),*);
    };
}
tuple_signatures!(
    (P1, A1, a1),
    (P2, A2, a2),
    (P3, A3, a3),
    (P4, A4, a4),
    (P5, A5, a5),
    (P6, A6, a6),
    (P7, A7, a7),
    (P8, A8, a8),
    (P9, A9, a9),
    (P10, A10, a10),
    (P11, A11, a11),
    (P12, A12, a12)
);

/// A kernel of a module on a [`Jit`], with its parameter list as the Rust tuple type `S`,
/// checked against the kernel once by [`Jit::kernel`]. Its launches take a tuple of
/// arguments that the compiler checks against `S`, so they need no check of their own.
///
/// ```
/// use kiln::{Buffer, Device, Jit, NdRange};
///
/// let jit = Jit::new(Device::interp())?;
/// let module = jit.compile_source("saxpy.kir", include_str!("../../examples/saxpy.kir"))?;
/// let saxpy = jit.kernel::<(&Buffer<f32>, &Buffer<f32>, f32, u32)>(&module, "saxpy")?;
/// let (x, y) = (jit.buffer_from(&[1.0f32; 8]), jit.buffer_zeroed::<f32>(8));
/// saxpy.launch(NdRange::new(&[8]), (&x, &y, 2.0, 8))?.wait()?;
/// assert_eq!(y.read()?, vec![2.0; 8]);
/// # Ok::<(), kiln::Error>(())
/// ```
///
/// A scalar of another type than the signature's does not compile (no conversion, as with
/// [`crate::args!`], but found by the compiler):
///
/// ```compile_fail
/// # use kiln::{Buffer, Device, Jit, NdRange};
/// # let jit = Jit::new(Device::interp())?;
/// # let module = jit.compile_source("saxpy.kir", include_str!("../../examples/saxpy.kir"))?;
/// let saxpy = jit.kernel::<(&Buffer<f32>, &Buffer<f32>, f32, u32)>(&module, "saxpy")?;
/// let (x, y) = (jit.buffer_from(&[1.0f32; 8]), jit.buffer_zeroed::<f32>(8));
/// saxpy.launch(NdRange::new(&[8]), (&x, &y, 2.0f64, 8))?.wait()?;
/// # Ok::<(), kiln::Error>(())
/// ```
///
/// Nor does a buffer of another element type:
///
/// ```compile_fail
/// # use kiln::{Buffer, Device, Jit, NdRange};
/// # let jit = Jit::new(Device::interp())?;
/// # let module = jit.compile_source("saxpy.kir", include_str!("../../examples/saxpy.kir"))?;
/// let saxpy = jit.kernel::<(&Buffer<f32>, &Buffer<f32>, f32, u32)>(&module, "saxpy")?;
/// let (x, y) = (jit.buffer_from(&[1u32; 8]), jit.buffer_zeroed::<f32>(8));
/// saxpy.launch(NdRange::new(&[8]), (&x, &y, 2.0, 8))?.wait()?;
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct TypedKernel<'j, S: Signature> {
    jit: &'j Jit,
    /// The kernel alone (what is built), made once rather than per launch.
    module: Verified,
    signature: PhantomData<fn(S)>,
}

impl<S: Signature> std::fmt::Debug for TypedKernel<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedKernel")
            .field("kernel", &self.module.kernels[0].name())
            .field("signature", &std::any::type_name::<S>())
            .finish_non_exhaustive()
    }
}

impl<S: Signature> TypedKernel<'_, S> {
    /// Launches the kernel over `range` with `args`, one per parameter in the signature's
    /// order. The types were checked when the handle was made; a launch goes down the same
    /// path as [`Jit::launch`]'s.
    pub fn launch<A: ArgsFor<S>>(&self, range: NdRange, args: A) -> Result<Launch, Error> {
        self.jit.submit(&self.module, range, &args.into_args())
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        self.module.kernels[0].name()
    }
}

impl Jit {
    /// Kernel `name` of `module` as a [`TypedKernel`] whose launches take the Rust tuple type
    /// `S`: `&Buffer<T>` for a `ptr<_, T>` parameter, the scalar's own Rust type (`f32` for
    /// `f32`, ...) otherwise. `S` is checked against the kernel's parameters here, once: a
    /// wrong count or type is an [`Error::Argument`] naming the parameter, its type and the
    /// signature's.
    ///
    /// ```
    /// # use kiln::{Buffer, Device, Jit};
    /// # let jit = Jit::new(Device::interp())?;
    /// let module = jit.compile_source("saxpy.kir", include_str!("../../examples/saxpy.kir"))?;
    /// let err = jit.kernel::<(&Buffer<f32>, &Buffer<f32>, f64, u32)>(&module, "saxpy").unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "kernel `saxpy`: argument 2 (`a`) is a f32 but the value given is a f64"
    /// );
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn kernel<S: Signature>(
        &self,
        module: &Verified,
        name: &str,
    ) -> Result<TypedKernel<'_, S>, Error> {
        let kernel = find_kernel(module, name)?;
        kiln_ir::launch::check_kinds(kernel, &S::kinds())
            .map_err(|source| Error::Argument { kernel: name.to_string(), source })?;
        Ok(TypedKernel { jit: self, module: only(module, name), signature: PhantomData })
    }
}
