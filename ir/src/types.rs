//! Scalar and pointer types, and the address spaces pointers live in.

use std::fmt;

pub use crate::matrix::Frag;

/// A scalar element type: what one register or one buffer element holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scalar {
    /// A truth value; not storable in buffers.
    Bool,
    /// 8-bit signed integer.
    I8,
    /// 16-bit signed integer.
    I16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// 8-bit unsigned integer.
    U8,
    /// 16-bit unsigned integer.
    U16,
    /// 32-bit unsigned integer.
    U32,
    /// 64-bit unsigned integer.
    U64,
    /// IEEE binary16; storage only (load, store, cast), no arithmetic.
    F16,
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
    /// bfloat16 (the top half of an IEEE binary32); storage only (load, store, cast), no
    /// arithmetic, like f16. Last, so that the indices of the older types stay as they were
    /// (on-disk signatures encode a type by its index in [`Scalar::ALL`]).
    BF16,
}

impl Scalar {
    /// Every scalar type, in declaration order.
    pub const ALL: [Scalar; 13] = [
        Scalar::Bool,
        Scalar::I8,
        Scalar::I16,
        Scalar::I32,
        Scalar::I64,
        Scalar::U8,
        Scalar::U16,
        Scalar::U32,
        Scalar::U64,
        Scalar::F16,
        Scalar::F32,
        Scalar::F64,
        Scalar::BF16,
    ];

    /// The integer types, signed then unsigned, narrowest first.
    pub const INTS: [Scalar; 8] = [
        Scalar::I8,
        Scalar::I16,
        Scalar::I32,
        Scalar::I64,
        Scalar::U8,
        Scalar::U16,
        Scalar::U32,
        Scalar::U64,
    ];

    /// The types arithmetic is defined on: the integers, then f32 and f64.
    pub const ARITH: [Scalar; 10] = [
        Scalar::I8,
        Scalar::I16,
        Scalar::I32,
        Scalar::I64,
        Scalar::U8,
        Scalar::U16,
        Scalar::U32,
        Scalar::U64,
        Scalar::F32,
        Scalar::F64,
    ];

    /// True for the signed and unsigned integer types.
    pub fn is_int(self) -> bool {
        self.is_signed() || self.is_unsigned()
    }

    /// True for i8..i64.
    pub fn is_signed(self) -> bool {
        matches!(self, Scalar::I8 | Scalar::I16 | Scalar::I32 | Scalar::I64)
    }

    /// True for u8..u64.
    pub fn is_unsigned(self) -> bool {
        matches!(self, Scalar::U8 | Scalar::U16 | Scalar::U32 | Scalar::U64)
    }

    /// True for f16, bf16, f32 and f64.
    pub fn is_float(self) -> bool {
        matches!(self, Scalar::F16 | Scalar::BF16 | Scalar::F32 | Scalar::F64)
    }

    /// True for the 16-bit float storage types f16 and bf16: loaded, stored and cast, never
    /// computed with.
    pub fn is_storage_float(self) -> bool {
        matches!(self, Scalar::F16 | Scalar::BF16)
    }

    /// True for types that arithmetic is defined on (integers, f32, f64; not bool, f16, bf16).
    pub fn is_arith(self) -> bool {
        self.is_int() || matches!(self, Scalar::F32 | Scalar::F64)
    }

    /// Width in bits (bool counts as 1).
    pub fn bits(self) -> u32 {
        match self {
            Scalar::Bool => 1,
            Scalar::I8 | Scalar::U8 => 8,
            Scalar::I16 | Scalar::U16 | Scalar::F16 | Scalar::BF16 => 16,
            Scalar::I32 | Scalar::U32 | Scalar::F32 => 32,
            Scalar::I64 | Scalar::U64 | Scalar::F64 => 64,
        }
    }

    /// Size of one element in a buffer, in bytes (bool is stored as one byte).
    pub fn size_bytes(self) -> usize {
        (self.bits() as usize).div_ceil(8)
    }

    /// The text-format name (`u32`, `f16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Scalar::Bool => "bool",
            Scalar::I8 => "i8",
            Scalar::I16 => "i16",
            Scalar::I32 => "i32",
            Scalar::I64 => "i64",
            Scalar::U8 => "u8",
            Scalar::U16 => "u16",
            Scalar::U32 => "u32",
            Scalar::U64 => "u64",
            Scalar::F16 => "f16",
            Scalar::BF16 => "bf16",
            Scalar::F32 => "f32",
            Scalar::F64 => "f64",
        }
    }

    /// Parses a text-format name.
    pub fn from_name(name: &str) -> Option<Scalar> {
        Scalar::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The smallest value of an integer type, as i128 (None for non-integers).
    pub fn int_min(self) -> Option<i128> {
        if self.is_signed() {
            Some(-(1i128 << (self.bits() - 1)))
        } else if self.is_unsigned() {
            Some(0)
        } else {
            None
        }
    }

    /// The largest value of an integer type, as i128 (None for non-integers).
    pub fn int_max(self) -> Option<i128> {
        if self.is_signed() {
            Some((1i128 << (self.bits() - 1)) - 1)
        } else if self.is_unsigned() {
            Some((1i128 << self.bits()) - 1)
        } else {
            None
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a pointer's memory lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddrSpace {
    /// Device memory visible to every work-item (kernel buffer arguments).
    Global,
    /// Memory shared by the work-items of one work-group.
    Local,
    /// Memory of a single work-item.
    Private,
    /// Read-only device memory.
    Constant,
    /// A pointer that may point into global, local or private memory.
    Generic,
}

impl AddrSpace {
    /// Every address space, in declaration order.
    pub const ALL: [AddrSpace; 5] = [
        AddrSpace::Global,
        AddrSpace::Local,
        AddrSpace::Private,
        AddrSpace::Constant,
        AddrSpace::Generic,
    ];

    /// The text-format name (`global`, `local`, ...).
    pub fn name(self) -> &'static str {
        match self {
            AddrSpace::Global => "global",
            AddrSpace::Local => "local",
            AddrSpace::Private => "private",
            AddrSpace::Constant => "constant",
            AddrSpace::Generic => "generic",
        }
    }

    /// Parses a text-format name.
    pub fn from_name(name: &str) -> Option<AddrSpace> {
        AddrSpace::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for AddrSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The type of a value: a scalar, a short vector of scalars, or a pointer to scalars in some
/// address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Type {
    /// A scalar value.
    Scalar(Scalar),
    /// A pointer to elements of the given scalar type.
    Ptr(AddrSpace, Scalar),
    /// A short vector `f32x4`: 2, 4 or 8 lanes (see [`VECTOR_LANES`]) of a storable scalar
    /// type (not `bool`). Arithmetic on vectors is lane-wise; memory holds vectors as
    /// contiguous elements (`vload4`, `vstore`).
    Vector(Scalar, u8),
    /// A matrix fragment `frag<role, shape, elem>` held by a sub-group ([`crate::matrix`]):
    /// only variables, `let`/`var`, assignments and the matrix calls take one.
    Frag(Frag),
}

/// The lane counts a vector type may have.
pub const VECTOR_LANES: [u8; 3] = [2, 4, 8];

impl Type {
    /// `bool`
    pub const BOOL: Type = Type::Scalar(Scalar::Bool);
    /// `i8`
    pub const I8: Type = Type::Scalar(Scalar::I8);
    /// `i16`
    pub const I16: Type = Type::Scalar(Scalar::I16);
    /// `i32`
    pub const I32: Type = Type::Scalar(Scalar::I32);
    /// `i64`
    pub const I64: Type = Type::Scalar(Scalar::I64);
    /// `u8`
    pub const U8: Type = Type::Scalar(Scalar::U8);
    /// `u16`
    pub const U16: Type = Type::Scalar(Scalar::U16);
    /// `u32`
    pub const U32: Type = Type::Scalar(Scalar::U32);
    /// `u64`
    pub const U64: Type = Type::Scalar(Scalar::U64);
    /// `f16`
    pub const F16: Type = Type::Scalar(Scalar::F16);
    /// `bf16`
    pub const BF16: Type = Type::Scalar(Scalar::BF16);
    /// `f32`
    pub const F32: Type = Type::Scalar(Scalar::F32);
    /// `f64`
    pub const F64: Type = Type::Scalar(Scalar::F64);

    /// A pointer type.
    pub fn ptr(space: AddrSpace, elem: Scalar) -> Type {
        Type::Ptr(space, elem)
    }

    /// A vector type of `lanes` lanes of `elem` (not checked: the verifier rejects lane
    /// counts outside [`VECTOR_LANES`] and `bool` lanes).
    pub fn vector(elem: Scalar, lanes: u8) -> Type {
        Type::Vector(elem, lanes)
    }

    /// The scalar, if this is a scalar type (vectors and pointers give `None`).
    pub fn scalar(self) -> Option<Scalar> {
        match self {
            Type::Scalar(s) => Some(s),
            Type::Ptr(..) | Type::Vector(..) | Type::Frag(_) => None,
        }
    }

    /// The pointee (element) type, if this is a pointer.
    pub fn elem(self) -> Option<Scalar> {
        match self {
            Type::Ptr(_, e) => Some(e),
            Type::Scalar(_) | Type::Vector(..) | Type::Frag(_) => None,
        }
    }

    /// The address space, if this is a pointer.
    pub fn addr_space(self) -> Option<AddrSpace> {
        match self {
            Type::Ptr(s, _) => Some(s),
            Type::Scalar(_) | Type::Vector(..) | Type::Frag(_) => None,
        }
    }

    /// True for vector types.
    pub fn is_vector(self) -> bool {
        matches!(self, Type::Vector(..))
    }

    /// The number of lanes: a vector's lane count, 1 for scalars and pointers.
    pub fn lanes(self) -> u8 {
        match self {
            Type::Vector(_, n) => n,
            _ => 1,
        }
    }

    /// The scalar of each lane: a scalar type itself, a vector's element type (`None` for
    /// pointers).
    pub fn lane_scalar(self) -> Option<Scalar> {
        match self {
            Type::Scalar(s) | Type::Vector(s, _) => Some(s),
            Type::Ptr(..) | Type::Frag(_) => None,
        }
    }

    /// Parses a text-format vector type name such as `f32x4`.
    pub fn vector_from_name(name: &str) -> Option<Type> {
        let (elem, lanes) = name.rsplit_once('x')?;
        let elem = Scalar::from_name(elem)?;
        let lanes: u8 = lanes.parse().ok()?;
        VECTOR_LANES.contains(&lanes).then_some(Type::Vector(elem, lanes))
    }

    /// `s` with as many lanes as `self` has: `s` itself unless `self` is a vector, whose
    /// lane-wise compares and casts yield vectors of `s`.
    pub fn with_lanes_of(self, s: Scalar) -> Type {
        match self {
            Type::Vector(_, n) => Type::Vector(s, n),
            _ => Type::Scalar(s),
        }
    }

    /// The fragment type, if this is one.
    pub fn frag(self) -> Option<Frag> {
        match self {
            Type::Frag(f) => Some(f),
            _ => None,
        }
    }

    /// True for pointer types.
    pub fn is_ptr(self) -> bool {
        matches!(self, Type::Ptr(..))
    }

    /// True for `bool`.
    pub fn is_bool(self) -> bool {
        self == Type::BOOL
    }

    /// True for scalar integer types.
    pub fn is_int(self) -> bool {
        self.scalar().is_some_and(Scalar::is_int)
    }

    /// True for scalar float types (f16, f32, f64).
    pub fn is_float(self) -> bool {
        self.scalar().is_some_and(Scalar::is_float)
    }

    /// True for scalar types arithmetic is defined on.
    pub fn is_arith(self) -> bool {
        self.scalar().is_some_and(Scalar::is_arith)
    }
}

impl From<Scalar> for Type {
    fn from(s: Scalar) -> Type {
        Type::Scalar(s)
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Scalar(s) => write!(f, "{s}"),
            Type::Ptr(space, elem) => write!(f, "ptr<{space}, {elem}>"),
            Type::Vector(elem, lanes) => write!(f, "{elem}x{lanes}"),
            Type::Frag(frag) => write!(f, "{frag}"),
        }
    }
}

/// `v` rounded once to the nearest f16 (ties to even), as kiln's semantics require.
///
/// `half::f16::from_f64` may convert through f32 (it does on CPUs with F16C), and that
/// double rounding gives a different f16 for some values, e.g. `65519.99999` becomes
/// infinity instead of 65504. NaNs keep their sign and the top payload bits, made quiet.
pub fn f16_from_f64(v: f64) -> half::f16 {
    half::f16::from_bits(narrow_from_f64(v, 10, 15))
}

/// `v` rounded once to the nearest bf16 (ties to even), as kiln's semantics require: from
/// f64 directly, never through f32 (which would round twice). NaNs keep their sign and the
/// top payload bits, made quiet.
pub fn bf16_from_f64(v: f64) -> half::bf16 {
    half::bf16::from_bits(narrow_from_f64(v, 7, 127))
}

/// The bits of `v` rounded once (ties to even) to a 16-bit binary float with `man` explicit
/// significand bits and largest exponent `emax` (f16: 10, 15; bf16: 7, 127).
fn narrow_from_f64(v: f64, man: i32, emax: i32) -> u16 {
    let bits = v.to_bits();
    let sign = ((bits >> 48) & 0x8000) as u16;
    let inf = (0x7fffu16 >> man) << man;
    if v.is_nan() {
        let payload = ((bits >> (52 - man)) as u16) & ((1 << man) - 1);
        return sign | inf | (1 << (man - 1)) | payload;
    }
    let a = v.abs();
    // 2^k for a normal f64 exponent k, exactly.
    let pow2 = |k: i32| f64::from_bits(((k + 1023) as u64) << 52);
    // Halfway between the largest finite value and 2^(emax+1); ties go to even: up.
    if a >= (2.0 - pow2(-(man + 1))) * pow2(emax) {
        return sign | inf;
    }
    let emin = 1 - emax;
    if a < pow2(emin) {
        // Subnormal (or zero): units of 2^(emin-man); a count of 2^man is the smallest
        // normal's encoding, so rounding up into the normal range needs no special case.
        return sign | (a * pow2(man - emin)).round_ties_even() as u16;
    }
    let mut e = ((a.to_bits() >> 52) as i32) - 1023;
    // The significand in units of the last place: [2^man, 2^(man+1)) before rounding.
    let mut m = (a * pow2(man - e)).round_ties_even() as u16;
    if m == 2 << man {
        m = 1 << man;
        e += 1;
    }
    sign | (((e + emax) as u16) << man) | (m - (1 << man))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in Scalar::ALL {
            assert_eq!(Scalar::from_name(s.name()), Some(s));
        }
        for a in AddrSpace::ALL {
            assert_eq!(AddrSpace::from_name(a.name()), Some(a));
        }
        assert_eq!(Type::ptr(AddrSpace::Global, Scalar::F32).to_string(), "ptr<global, f32>");
    }

    #[test]
    fn type_lists_agree_with_predicates() {
        let ints: Vec<Scalar> = Scalar::ALL.into_iter().filter(|s| s.is_int()).collect();
        let arith: Vec<Scalar> = Scalar::ALL.into_iter().filter(|s| s.is_arith()).collect();
        assert_eq!(ints, Scalar::INTS);
        assert_eq!(arith, Scalar::ARITH);
    }

    #[test]
    fn integer_ranges() {
        assert_eq!(Scalar::I8.int_min(), Some(-128));
        assert_eq!(Scalar::I8.int_max(), Some(127));
        assert_eq!(Scalar::U64.int_max(), Some(u64::MAX as i128));
        assert_eq!(Scalar::F32.int_max(), None);
    }

    #[test]
    fn f16_rounding_is_single() {
        use super::f16_from_f64;
        // Every f16 and every midpoint between neighbours (exact in f32, so half's
        // conversion from f32 rounds once and is the reference).
        for b in 0..=u16::MAX {
            let h = half::f16::from_bits(b);
            if h.is_nan() {
                assert!(f16_from_f64(h.to_f64()).is_nan());
                continue;
            }
            assert_eq!(f16_from_f64(h.to_f64()).to_bits(), b, "{h}");
            let next = half::f16::from_bits(b.wrapping_add(1));
            if b & 0x7fff < 0x7c00 && !next.is_nan() && next.to_f64().abs() > h.to_f64().abs() {
                let mid = (h.to_f64() + next.to_f64()) / 2.0;
                let want = half::f16::from_f32(mid as f32).to_bits();
                assert_eq!(f16_from_f64(mid).to_bits(), want, "midpoint {mid}");
            }
        }
        // Double rounding through f32 would give infinity and 1.0 here.
        assert_eq!(f16_from_f64(65519.99999).to_f64(), 65504.0);
        let above_tie = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(f16_from_f64(above_tie).to_f64(), 1.0 + 2f64.powi(-10));
        assert_eq!(f16_from_f64(-0.0).to_bits(), 0x8000);
        assert_eq!(f16_from_f64(1e-30).to_bits(), 0);
        assert_eq!(f16_from_f64(f64::NEG_INFINITY).to_bits(), 0xfc00);
        assert_eq!(f16_from_f64(2f64.powi(-25) * 1.5).to_bits(), 1);
    }

    #[test]
    fn bf16_rounding_is_single() {
        use super::bf16_from_f64;
        // Every bf16 and every midpoint (exact in f32, so rounding f32 bits by hand is the
        // reference: add 0x7fff plus the kept lowest bit, drop the low half).
        let from_f32 = |x: f32| {
            let b = x.to_bits();
            ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
        };
        for b in 0..=u16::MAX {
            let h = half::bf16::from_bits(b);
            if h.is_nan() {
                assert!(bf16_from_f64(h.to_f64()).is_nan());
                continue;
            }
            assert_eq!(bf16_from_f64(h.to_f64()).to_bits(), b, "{h}");
            let next = half::bf16::from_bits(b.wrapping_add(1));
            if b & 0x7fff < 0x7f80 && !next.is_nan() && next.to_f64().abs() > h.to_f64().abs() {
                let mid = (h.to_f64() + next.to_f64()) / 2.0;
                assert_eq!(bf16_from_f64(mid).to_bits(), from_f32(mid as f32), "midpoint {mid}");
            }
        }
        // Through f32 this would round twice: 1 + 2^-8 + 2^-30 goes to 1 + 2^-8 in f32,
        // a tie that goes to 1.0; once, it is above the tie and goes up.
        let above_tie = 1.0 + 2f64.powi(-8) + 2f64.powi(-30);
        assert_eq!(bf16_from_f64(above_tie).to_f64(), 1.0 + 2f64.powi(-7));
        assert_eq!(bf16_from_f64(-0.0).to_bits(), 0x8000);
        assert_eq!(bf16_from_f64(f64::MAX).to_bits(), 0x7f80);
        assert_eq!(bf16_from_f64(3.0e38).to_bits(), 0x7f62);
    }
}
