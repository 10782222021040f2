//! Host buffers: typed element storage that kernels read and write through pointer arguments.

use std::fmt;

use half::f16;

use crate::expr::{canonical_int, Imm};
use crate::types::Scalar;

/// A buffer's contents: elements of one scalar type, stored little-endian (`bool` as one byte,
/// 0 or 1; `f16` as IEEE binary16 bits).
///
/// ```
/// use kiln_ir::launch::Buffer;
/// use kiln_ir::{Imm, Scalar};
/// let mut b = Buffer::from_slice(&[1.0f32, 2.0, 3.0]);
/// assert_eq!(b.elem(), Scalar::F32);
/// b.set(1, Imm::float(Scalar::F32, 5.0)).unwrap();
/// assert_eq!(b.to_vec::<f32>(), Some(vec![1.0, 5.0, 3.0]));
/// assert_eq!(b.to_vec::<i32>(), None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffer {
    elem: Scalar,
    data: Vec<u8>,
}

/// A host-side buffer operation that does not fit the buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufferError {
    /// [`Buffer::from_bytes`] got a byte count that is not a multiple of the element size.
    BadLength {
        /// The element type.
        elem: Scalar,
        /// The number of bytes given.
        bytes: usize,
    },
    /// An element index at or past the end.
    OutOfBounds {
        /// The index.
        index: usize,
        /// The buffer's length in elements.
        len: usize,
    },
    /// A value whose type is not the buffer's element type.
    TypeMismatch {
        /// The buffer's element type.
        expected: Scalar,
        /// The value's type.
        found: Scalar,
    },
}

impl fmt::Display for BufferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BufferError::BadLength { elem, bytes } => write!(
                f,
                "{bytes} bytes is not a whole number of {elem} elements ({} bytes each)",
                elem.size_bytes()
            ),
            BufferError::OutOfBounds { index, len } => {
                write!(f, "index {index} out of bounds (buffer has {len} elements)")
            }
            BufferError::TypeMismatch { expected, found } => {
                write!(f, "a value of type {found} does not fit a buffer of {expected} elements")
            }
        }
    }
}

impl std::error::Error for BufferError {}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that is the host-side form of a buffer element: `i8`..`i64`, `u8`..`u64`,
/// [`half::f16`], `f32`, `f64` and `bool`. Sealed: kiln implements it for exactly these.
pub trait Element: Copy + sealed::Sealed {
    /// The kiln element type.
    const SCALAR: Scalar;
    /// The value as an immediate of type [`Element::SCALAR`].
    fn to_imm(self) -> Imm;
    /// The value of an immediate of type [`Element::SCALAR`] (None for another type).
    fn from_imm(imm: Imm) -> Option<Self>;
}

macro_rules! int_element {
    ($($t:ty => $s:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const SCALAR: Scalar = Scalar::$s;
            fn to_imm(self) -> Imm {
                Imm::Int(Scalar::$s, canonical_int(Scalar::$s, self as u64))
            }
            fn from_imm(imm: Imm) -> Option<$t> {
                match imm {
                    Imm::Int(Scalar::$s, bits) => Some(bits as $t),
                    _ => None,
                }
            }
        }
    )*};
}
int_element!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32,
    u64 => U64);

impl sealed::Sealed for f32 {}
impl Element for f32 {
    const SCALAR: Scalar = Scalar::F32;
    fn to_imm(self) -> Imm {
        Imm::from_bits(Scalar::F32, self.to_bits() as u64)
    }
    fn from_imm(imm: Imm) -> Option<f32> {
        match imm {
            Imm::Float(Scalar::F32, _) => Some(f32::from_bits(imm.to_bits() as u32)),
            _ => None,
        }
    }
}

impl sealed::Sealed for f64 {}
impl Element for f64 {
    const SCALAR: Scalar = Scalar::F64;
    fn to_imm(self) -> Imm {
        Imm::Float(Scalar::F64, self)
    }
    fn from_imm(imm: Imm) -> Option<f64> {
        match imm {
            Imm::Float(Scalar::F64, v) => Some(v),
            _ => None,
        }
    }
}

impl sealed::Sealed for half::bf16 {}
impl Element for half::bf16 {
    const SCALAR: Scalar = Scalar::BF16;
    fn to_imm(self) -> Imm {
        Imm::from_bits(Scalar::BF16, self.to_bits() as u64)
    }
    fn from_imm(imm: Imm) -> Option<half::bf16> {
        match imm {
            Imm::Float(Scalar::BF16, _) => Some(half::bf16::from_bits(imm.to_bits() as u16)),
            _ => None,
        }
    }
}

impl sealed::Sealed for f16 {}
impl Element for f16 {
    const SCALAR: Scalar = Scalar::F16;
    fn to_imm(self) -> Imm {
        Imm::from_bits(Scalar::F16, self.to_bits() as u64)
    }
    fn from_imm(imm: Imm) -> Option<f16> {
        match imm {
            Imm::Float(Scalar::F16, _) => Some(f16::from_bits(imm.to_bits() as u16)),
            _ => None,
        }
    }
}

impl sealed::Sealed for bool {}
impl Element for bool {
    const SCALAR: Scalar = Scalar::Bool;
    fn to_imm(self) -> Imm {
        Imm::Bool(self)
    }
    fn from_imm(imm: Imm) -> Option<bool> {
        match imm {
            Imm::Bool(b) => Some(b),
            _ => None,
        }
    }
}

impl Buffer {
    /// A zeroed buffer of `len` elements.
    pub fn zeroed(elem: Scalar, len: usize) -> Buffer {
        Buffer { elem, data: vec![0; len * elem.size_bytes()] }
    }

    /// A buffer holding a copy of `values`.
    pub fn from_slice<T: Element>(values: &[T]) -> Buffer {
        let mut b = Buffer::zeroed(T::SCALAR, values.len());
        for (i, v) in values.iter().enumerate() {
            b.write(i, v.to_imm());
        }
        b
    }

    /// A buffer of `elem` elements holding the given immediates (each must be of type `elem`).
    pub fn from_imms(elem: Scalar, values: &[Imm]) -> Result<Buffer, BufferError> {
        let mut b = Buffer::zeroed(elem, values.len());
        for (i, v) in values.iter().enumerate() {
            b.set(i, *v)?;
        }
        Ok(b)
    }

    /// A buffer over raw little-endian bytes; an error unless `data.len()` is a multiple of the
    /// element size.
    pub fn from_bytes(elem: Scalar, data: Vec<u8>) -> Result<Buffer, BufferError> {
        let n = elem.size_bytes();
        if data.len() / n * n != data.len() {
            return Err(BufferError::BadLength { elem, bytes: data.len() });
        }
        Ok(Buffer { elem, data })
    }

    /// The contents as Rust values; None unless `T` is the element type.
    pub fn to_vec<T: Element>(&self) -> Option<Vec<T>> {
        if T::SCALAR != self.elem {
            return None;
        }
        (0..self.len()).map(|i| T::from_imm(self.read(i))).collect()
    }

    /// The contents as immediates of the element type.
    pub fn to_imms(&self) -> Vec<Imm> {
        (0..self.len()).map(|i| self.read(i)).collect()
    }

    /// The raw little-endian bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }

    /// The raw little-endian bytes, writable (for backends that run kernels in place, such as
    /// the x86 JIT). Any byte pattern is a valid buffer: a `bool` byte other than 0 reads as
    /// `true`.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// The element type.
    pub fn elem(&self) -> Scalar {
        self.elem
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.data.len() / self.elem.size_bytes()
    }

    /// True if the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Element `i`, or None past the end.
    pub fn get(&self, i: usize) -> Option<Imm> {
        (i < self.len()).then(|| self.read(i))
    }

    /// Sets element `i` to `value`, which must have the element type (a float is rounded to
    /// the element's precision).
    pub fn set(&mut self, i: usize, value: Imm) -> Result<(), BufferError> {
        if value.scalar() != self.elem {
            return Err(BufferError::TypeMismatch { expected: self.elem, found: value.scalar() });
        }
        if i >= self.len() {
            return Err(BufferError::OutOfBounds { index: i, len: self.len() });
        }
        self.write(i, value);
        Ok(())
    }

    /// Sets every byte to zero.
    pub(crate) fn fill_zero(&mut self) {
        self.data.fill(0);
    }

    /// Element `i`; `i` must be in bounds.
    pub(crate) fn read(&self, i: usize) -> Imm {
        let n = self.elem.size_bytes();
        let b = &self.data[i * n..i * n + n];
        let mut raw = [0u8; 8];
        raw[..n].copy_from_slice(b);
        Imm::from_bits(self.elem, u64::from_le_bytes(raw))
    }

    /// Writes element `i`; `i` must be in bounds. A value of another type is converted by its
    /// bits (callers check types first).
    pub(crate) fn write(&mut self, i: usize, value: Imm) {
        let n = self.elem.size_bytes();
        let bits = match value {
            Imm::Bool(b) => b as u64,
            Imm::Int(_, bits) => bits,
            Imm::Float(_, v) => crate::expr::float_to_bits(self.elem, v),
        };
        self.data[i * n..i * n + n].copy_from_slice(&bits.to_le_bytes()[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_element_type() {
        assert_eq!(Buffer::from_slice(&[-1i8, 5]).to_vec::<i8>(), Some(vec![-1, 5]));
        assert_eq!(Buffer::from_slice(&[-300i16]).to_vec::<i16>(), Some(vec![-300]));
        assert_eq!(Buffer::from_slice(&[i32::MIN]).to_vec::<i32>(), Some(vec![i32::MIN]));
        assert_eq!(Buffer::from_slice(&[i64::MIN]).to_vec::<i64>(), Some(vec![i64::MIN]));
        assert_eq!(Buffer::from_slice(&[255u8]).to_vec::<u8>(), Some(vec![255]));
        assert_eq!(Buffer::from_slice(&[65535u16]).to_vec::<u16>(), Some(vec![65535]));
        assert_eq!(Buffer::from_slice(&[u32::MAX]).to_vec::<u32>(), Some(vec![u32::MAX]));
        assert_eq!(Buffer::from_slice(&[u64::MAX]).to_vec::<u64>(), Some(vec![u64::MAX]));
        let h = f16::from_f32(1.5);
        assert_eq!(Buffer::from_slice(&[h]).to_vec::<f16>(), Some(vec![h]));
        assert_eq!(Buffer::from_slice(&[-0.0f32]).as_bytes(), &(-0.0f32).to_le_bytes());
        assert_eq!(Buffer::from_slice(&[0.1f64]).to_vec::<f64>(), Some(vec![0.1]));
        assert_eq!(Buffer::from_slice(&[true, false]).to_vec::<bool>(), Some(vec![true, false]));
    }

    #[test]
    fn accessors_and_errors() {
        let mut b = Buffer::zeroed(Scalar::I16, 3);
        assert_eq!(
            (b.len(), b.elem(), b.as_bytes().len(), b.is_empty()),
            (3, Scalar::I16, 6, false)
        );
        assert_eq!(b.get(2), Some(Imm::int(Scalar::I16, 0)));
        assert_eq!(b.get(3), None);
        assert_eq!(b.set(1, Imm::int(Scalar::I16, -7)), Ok(()));
        assert_eq!(b.to_vec::<i16>(), Some(vec![0, -7, 0]));
        assert_eq!(
            b.set(3, Imm::int(Scalar::I16, 1)),
            Err(BufferError::OutOfBounds { index: 3, len: 3 })
        );
        let e = b.set(0, Imm::int(Scalar::I32, 1)).unwrap_err();
        assert_eq!(e.to_string(), "a value of type i32 does not fit a buffer of i16 elements");
        let e = Buffer::from_bytes(Scalar::F32, vec![0; 6]).unwrap_err();
        assert_eq!(e.to_string(), "6 bytes is not a whole number of f32 elements (4 bytes each)");
        let b = Buffer::from_bytes(Scalar::U16, vec![1, 2, 3, 4]).unwrap();
        assert_eq!(b.to_vec::<u16>(), Some(vec![0x0201, 0x0403]));
        assert_eq!(Buffer::from_imms(Scalar::U8, &[Imm::int(Scalar::U8, 9)]).unwrap().len(), 1);
    }
}
