//! Virtual registers: classes, naming, and PTX spellings of types and immediates.

use std::fmt;

use kiln_ir::{Imm, Scalar};

/// A register class: what PTX register type holds a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Class {
    /// `.pred`, for `bool`.
    Pred,
    /// `.b16`, for f16 bits.
    B16,
    /// `.b32`, for integers of 32 bits or fewer.
    B32,
    /// `.b64`, for 64-bit integers and addresses.
    B64,
    /// `.f32`.
    F32,
    /// `.f64`.
    F64,
}

impl Class {
    pub(super) const ALL: [Class; 6] =
        [Class::Pred, Class::B16, Class::B32, Class::B64, Class::F32, Class::F64];

    /// The class holding values of type `s`.
    pub(super) fn of(s: Scalar) -> Class {
        match s {
            Scalar::Bool => Class::Pred,
            Scalar::F16 | Scalar::BF16 => Class::B16,
            Scalar::F32 => Class::F32,
            Scalar::F64 => Class::F64,
            Scalar::I64 | Scalar::U64 => Class::B64,
            _ => Class::B32,
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Class::Pred => "%p",
            Class::B16 => "%h",
            Class::B32 => "%r",
            Class::B64 => "%rd",
            Class::F32 => "%f",
            Class::F64 => "%fd",
        }
    }

    fn decl_type(self) -> &'static str {
        match self {
            Class::Pred => ".pred",
            Class::B16 => ".b16",
            Class::B32 => ".b32",
            Class::B64 => ".b64",
            Class::F32 => ".f32",
            Class::F64 => ".f64",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A virtual register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Reg {
    pub(super) class: Class,
    pub(super) n: u32,
}

impl Reg {
    /// Appends the register's name to `out` (what `Display` writes, without a formatter).
    pub(super) fn push_to(self, out: &mut String) {
        // Byte by byte: a name is a few ASCII characters, and `push_str` of each piece was
        // a `memcpy` call (and a UTF-8 check of the digits), a tenth of an unrolled GEMM's
        // PTX emission. Each byte is masked to 7 bits (it is ASCII already): then the
        // compiler sees a one-byte character and pushes it without `push`'s UTF-8 length
        // test and encoding, most of what a name cost.
        for &b in self.class.prefix().as_bytes() {
            out.push(char::from(b & 0x7f));
        }
        let mut digits = [0u8; 10];
        for &b in decimal_digits(self.n, &mut digits) {
            out.push(char::from(b & 0x7f));
        }
    }
}

/// The ASCII digits of `n` in decimal, written into `buf` by hand.
fn decimal_digits(mut n: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
}

/// `n` in decimal, written into `buf` by hand (no padding or flags to look at).
fn decimal(n: u32, buf: &mut [u8; 10]) -> &str {
    // ASCII digits only.
    std::str::from_utf8(decimal_digits(n, buf)).unwrap_or("?")
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Written piecewise: registers are printed for every operand of every instruction.
        f.write_str(self.class.prefix())?;
        let mut digits = [0u8; 10];
        f.write_str(decimal(self.n, &mut digits))
    }
}

/// An operand: a register or an immediate (already spelled for PTX).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Val {
    Reg(Reg),
    Imm(Text),
}

impl fmt::Display for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Val::Reg(r) => r.fmt(f),
            Val::Imm(s) => f.write_str(s.as_str()),
        }
    }
}

/// The text of an immediate, kept inline: every operand that is a constant was a `String`
/// (an allocation, and another per copy of the operand). PTX immediates are at most 20
/// characters (`-9223372036854775808`; `0d` and 16 hex digits for an f64).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Text {
    len: u8,
    bytes: [u8; 23],
}

impl Text {
    /// `0`, as [`Text::of`] spells the integer 0.
    pub(super) const ZERO: Text = {
        let mut bytes = [0; 23];
        bytes[0] = b'0';
        Text { len: 1, bytes }
    };

    /// The text `x` displays as; `None` past 23 bytes.
    pub(super) fn of(x: impl fmt::Display) -> Option<Text> {
        use fmt::Write;
        let mut t = Text { len: 0, bytes: [0; 23] };
        write!(t, "{x}").ok()?;
        Some(t)
    }

    pub(super) fn as_str(&self) -> &str {
        // Only whole `&str`s are written in (`write_str`).
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

impl fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let at = self.len as usize;
        let end = at + s.len();
        if end > self.bytes.len() {
            return Err(fmt::Error);
        }
        self.bytes[at..end].copy_from_slice(s.as_bytes());
        self.len = end as u8;
        Ok(())
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// An immediate operand spelled as `x` displays (a number, a hex bit pattern).
pub(super) fn imm_val(x: impl fmt::Display) -> Val {
    Val::Imm(Text::of(x).expect("a PTX immediate fits 23 bytes"))
}

/// Hands out numbered registers per class and declares them.
#[derive(Default)]
pub(super) struct RegFile {
    next: [u32; 6],
}

impl RegFile {
    /// A fresh register of class `c`.
    pub(super) fn fresh(&mut self, c: Class) -> Reg {
        let n = &mut self.next[c.index()];
        *n += 1;
        Reg { class: c, n: *n }
    }

    /// `.reg` declarations for every class used.
    pub(super) fn declarations(&self) -> String {
        let mut s = String::new();
        for c in Class::ALL {
            let n = self.next[c.index()];
            if n > 0 {
                s.push_str(&format!("\t.reg {} {}<{}>;\n", c.decl_type(), c.prefix(), n + 1));
            }
        }
        s
    }
}

/// The PTX type for arithmetic on values of type `s` held in their register class
/// (8/16-bit integers compute as 32-bit).
pub(super) fn arith_ty(s: Scalar) -> &'static str {
    match s {
        Scalar::I8 | Scalar::I16 | Scalar::I32 => "s32",
        Scalar::U8 | Scalar::U16 | Scalar::U32 => "u32",
        Scalar::I64 => "s64",
        Scalar::U64 => "u64",
        Scalar::F16 => "f16",
        Scalar::BF16 => "bf16",
        Scalar::F32 => "f32",
        Scalar::F64 => "f64",
        Scalar::Bool => "pred",
    }
}

/// The untyped bit type of a register class (`b32`, `b64`, ...).
pub(super) fn bits_ty(s: Scalar) -> &'static str {
    match Class::of(s) {
        Class::Pred => "pred",
        Class::B16 => "b16",
        Class::B32 | Class::F32 => "b32",
        Class::B64 | Class::F64 => "b64",
    }
}

/// The PTX type of one element of type `s` in memory, for `ld`/`st`/`cvt`.
pub(super) fn mem_ty(s: Scalar) -> &'static str {
    match s {
        Scalar::I8 => "s8",
        Scalar::U8 | Scalar::Bool => "u8",
        Scalar::I16 => "s16",
        Scalar::U16 => "u16",
        Scalar::F16 | Scalar::BF16 => "b16",
        other => arith_ty(other),
    }
}

/// The PTX spelling of an immediate of type `s`, in the register class's view (8/16-bit
/// integers as their 32-bit extension, floats as exact hex bit patterns).
pub(super) fn imm(i: &Imm) -> Val {
    match *i {
        Imm::Bool(b) => imm_val(b as u8),
        Imm::Int(t, _) => {
            let v = i.as_i128().unwrap_or(0);
            if t.bits() < 64 {
                if t.is_signed() {
                    imm_val(v as i32)
                } else {
                    imm_val(v as u32)
                }
            } else if t.is_signed() {
                imm_val(v as i64)
            } else {
                imm_val(v as u64)
            }
        }
        Imm::Float(Scalar::F16 | Scalar::BF16, _) => imm_val(format_args!("0x{:04X}", i.to_bits())),
        Imm::Float(Scalar::F32, _) => imm_val(format_args!("0f{:08X}", i.to_bits())),
        Imm::Float(_, v) => imm_val(format_args!("0d{:016X}", v.to_bits())),
    }
}

/// A memory operand, `[base]` or `[base+off]` (a `struct`, not text: the address of every
/// access was a `String`, and vector accesses parsed it back to add a lane's offset).
#[derive(Clone, Copy, Debug)]
pub(super) struct Addr {
    base: Reg,
    off: i64,
    /// Whether `+off` is written even when it is 0 (a lane's offset added to a negative one).
    explicit: bool,
}

impl Addr {
    pub(super) fn new(base: Reg, off: i64) -> Addr {
        Addr { base, off, explicit: off != 0 }
    }

    /// This address `bytes` further on (`bytes` 0: the same operand).
    pub(super) fn plus(self, bytes: usize) -> Addr {
        if bytes == 0 {
            return self;
        }
        Addr { base: self.base, off: self.off + bytes as i64, explicit: true }
    }
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.explicit {
            write!(f, "[{}+{}]", self.base, self.off)
        } else {
            write!(f, "[{}]", self.base)
        }
    }
}
