//! Kernel arguments in the facade: the runtime's one argument type, [`Arg`], made from Rust
//! values with [`args!`](crate::args).

use kiln_ir::Kernel;
use kiln_runtime::Arg;

use super::Error;

/// Arguments for [`Jit::launch`](crate::Jit::launch): `args![&x, &y, 2.0f32, n]` is
/// `vec![Arg::from(&x), Arg::from(&y), Arg::from(2.0f32), Arg::from(n)]`. A buffer is bound
/// itself (not a copy): the kernel's writes are seen through it. A scalar keeps its Rust
/// type: it must be the parameter's type exactly (`2.0f64` is not an `f32`), so nothing is
/// converted behind the caller's back.
///
/// ```
/// let y = kiln::Buffer::<i32>::zeroed(4);
/// let a = kiln::args![&y, -1i32];
/// assert!(matches!(a[0], kiln::Arg::Buffer(_)));
/// assert_eq!(a[1].imm(), Some(kiln::ir::Imm::int(kiln::ir::Scalar::I32, -1)));
/// ```
#[macro_export]
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        ::std::vec![$(<$crate::Arg>::from($a)),*]
    };
}

/// Checks `args` against `kernel`'s parameters ([`kiln_runtime::check_kernel_args`], the
/// check every layer shares); the error names the kernel.
pub(crate) fn check_args(kernel: &Kernel, args: &[Arg]) -> Result<(), Error> {
    kiln_runtime::check_kernel_args(kernel, args)
        .map_err(|source| Error::Argument { kernel: kernel.name().to_string(), source })
}
