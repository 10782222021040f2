//! The launch interface: what a caller hands any executor of a kernel (the interpreter, a
//! device, a simulator): an [`NdRange`], one [`Arg`] per parameter, and host [`Buffer`]s that
//! pointer arguments index.
//!
//! These types belong to no executor: the interpreter, the passes that reason about launches
//! (fusion), the backends' simulators and the runtime's devices all take them from here.

mod arg;
mod buffer;
mod error;
pub(crate) mod resolve;

pub use arg::{check_args, check_kinds, check_range, Arg, ArgError, ArgKind, BufferRef};
pub use buffer::{Buffer, BufferError, Element};
pub use error::LaunchError;
pub use resolve::{resolve_launch, Launch};

/// An nd-range: 1 to 3 dimensions of global size, optional local size, and offset. A plain
/// value (`Copy`): one range may serve many launches. [`NdRange::new`] takes `u32` sizes (what
/// work-item ids are), [`NdRange::try_new`] any unsigned integer type.
///
/// ```
/// use kiln_ir::launch::NdRange;
/// let r = NdRange::new(&[8, 4]).with_local(&[4, 2]).with_offset(&[1, 0]);
/// assert_eq!((r.dims, r.global, r.local, r.offset), (2, [8, 4, 1], Some([4, 2, 1]), [1, 0, 0]));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NdRange {
    /// Number of dimensions, 1..=3.
    pub dims: usize,
    /// Global size per dimension (1 in unused dimensions).
    pub global: [u32; 3],
    /// Work-group size per dimension; `None` lets the device choose.
    pub local: Option<[u32; 3]>,
    /// Global offset per dimension (0 in unused dimensions).
    pub offset: [u32; 3],
}

/// Copies up to three entries of `v` over `fill`.
fn pad3(v: &[u32], fill: u32) -> [u32; 3] {
    let mut out = [fill; 3];
    for (o, x) in out.iter_mut().zip(v) {
        *o = *x;
    }
    out
}

impl NdRange {
    /// A range of the given global size, one entry per dimension, with no offset and the
    /// local size left to the device. A slice of length 0 or more than 3 gives a range that
    /// [`crate::interp::run`] rejects.
    pub fn new(global: &[u32]) -> NdRange {
        NdRange { dims: global.len(), global: pad3(global, 1), local: None, offset: [0; 3] }
    }

    /// A range of the given global size as [`NdRange::new`] makes it, from sizes of any
    /// unsigned integer type (a `usize` length, a `u64` count): refused, naming the
    /// dimension, where a size does not fit the 32 bits work-item ids have, or where there
    /// are not 1 to 3 dimensions.
    ///
    /// ```
    /// use kiln_ir::launch::NdRange;
    /// let len: usize = 1000;
    /// assert_eq!(NdRange::try_new(&[len, 2])?, NdRange::new(&[1000, 2]));
    /// let err = NdRange::try_new(&[1u64 << 32]).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "nd-range dimension 0: global size 4294967296 does not fit in 32 bits (at most 4294967295)"
    /// );
    /// # Ok::<(), kiln_ir::launch::RangeError>(())
    /// ```
    pub fn try_new<T: RangeSize>(global: &[T]) -> Result<NdRange, RangeError> {
        if !(1..=3).contains(&global.len()) {
            return Err(RangeError::Dims(global.len()));
        }
        let mut sizes = [1u32; 3];
        for (dim, (s, g)) in sizes.iter_mut().zip(global).enumerate() {
            let value = g.to_u64();
            *s = u32::try_from(value).map_err(|_| RangeError::TooLarge { dim, value })?;
        }
        Ok(NdRange::new(&sizes[..global.len()]))
    }

    /// The same range with the given work-group size (missing dimensions are 1).
    pub fn with_local(mut self, local: &[u32]) -> NdRange {
        self.local = Some(pad3(local, 1));
        self
    }

    /// The same range with the given global offset (missing dimensions are 0).
    pub fn with_offset(mut self, offset: &[u32]) -> NdRange {
        self.offset = pad3(offset, 0);
        self
    }

    /// The total number of work-items (the product of the used global sizes).
    pub fn work_items(&self) -> u64 {
        self.global.iter().take(self.dims.min(3)).map(|&g| g as u64).product()
    }
}

mod sealed {
    pub trait Sealed {}
}

/// An unsigned integer type a global size may be given in ([`NdRange::try_new`]): `u8`,
/// `u16`, `u32`, `u64`, `usize`. Sealed: kiln implements it for exactly these.
pub trait RangeSize: Copy + sealed::Sealed {
    /// The value, widened.
    fn to_u64(self) -> u64;
}

macro_rules! range_size {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl RangeSize for $t {
            fn to_u64(self) -> u64 {
                self as u64
            }
        }
    )*};
}
range_size!(u8, u16, u32, u64, usize);

/// A global size [`NdRange::try_new`] refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangeError {
    /// Not 1 to 3 dimensions; the count given.
    Dims(usize),
    /// A size past `u32::MAX`.
    TooLarge {
        /// The dimension, from 0.
        dim: usize,
        /// The size given.
        value: u64,
    },
}

impl std::fmt::Display for RangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RangeError::Dims(n) => write!(f, "an nd-range has 1 to 3 dimensions, {n} given"),
            RangeError::TooLarge { dim, value } => write!(
                f,
                "nd-range dimension {dim}: global size {value} does not fit in 32 bits (at most {})",
                u32::MAX
            ),
        }
    }
}

impl std::error::Error for RangeError {}

/// The parenthesis of an out-of-bounds message: what was accessed and how long it is, and
/// for a ranged buffer argument (`range_offset` given) that the index is relative to the
/// range's start. Shared by every executor and the sanitizer, so they report alike.
///
/// ```
/// use kiln_ir::launch::bounds_note;
/// assert_eq!(bounds_note("buffer", 1, None), "buffer has 1 element");
/// assert_eq!(
///     bounds_note("buffer", 4, Some(8)),
///     "buffer range has 4 elements, at offset 8 of its buffer; the index is relative to the range"
/// );
/// ```
pub fn bounds_note(kind: &str, len: u64, range_offset: Option<usize>) -> String {
    let s = if len == 1 { "" } else { "s" };
    match range_offset {
        None => format!("{kind} has {len} element{s}"),
        Some(o) => format!(
            "{kind} range has {len} element{s}, at offset {o} of its buffer; the index is \
             relative to the range"
        ),
    }
}

/// The local size used when none is given and the kernel has no `#reqd_work_group_size`:
/// dimension 0 gets the largest divisor of its global size that is at most 64 (1 for a
/// global size of 0), the other dimensions get 1.
///
/// ```
/// use kiln_ir::launch::default_local_size;
/// assert_eq!(default_local_size([1000, 7, 3]), [50, 1, 1]);
/// assert_eq!(default_local_size([256, 1, 1]), [64, 1, 1]);
/// assert_eq!(default_local_size([97, 1, 1]), [1, 1, 1]);
/// ```
pub fn default_local_size(global: [u32; 3]) -> [u32; 3] {
    let g = global[0];
    let l0 = (1..=g.min(64)).rev().find(|&l| g % l < 1).unwrap_or(1);
    [l0, 1, 1]
}
