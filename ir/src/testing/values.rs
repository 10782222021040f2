//! The choice stream every generator draws from, and random scalar values and buffers.

use crate::expr::Imm;
use crate::launch::Buffer;
use crate::types::Scalar;

/// A stream of random choices that generators draw from.
///
/// Generation is a pure function of the stream, so any source of numbers (a proptest
/// `Vec<u32>`, a fuzzer's bytes) gives a valid result; past the end the stream yields 0. Every
/// generator here makes choice 0 its simplest option (a leaf, a constant 0, no more
/// statements), so shrinking the stream toward zeros and shortening it shrinks the output.
#[derive(Clone, Debug)]
pub struct Choices<'a> {
    data: &'a [u32],
    pos: usize,
}

impl<'a> Choices<'a> {
    /// A stream over `data`.
    pub fn new(data: &'a [u32]) -> Choices<'a> {
        Choices { data, pos: 0 }
    }

    /// The next raw choice (0 once the stream is exhausted).
    pub fn next_u32(&mut self) -> u32 {
        let v = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        v
    }

    /// A 64-bit choice from two raw ones.
    pub fn next_u64(&mut self) -> u64 {
        let hi = self.next_u32() as u64;
        (hi << 32) | self.next_u32() as u64
    }

    /// A number in `0..n` (0 when `n <= 1`).
    pub fn below(&mut self, n: usize) -> usize {
        if n <= 1 {
            // Still consume, so the positions of later choices do not depend on `n`.
            self.next_u32();
            return 0;
        }
        (self.next_u32() as usize) % n
    }

    /// True with probability `percent`% (false on choice 0).
    pub fn chance(&mut self, percent: u32) -> bool {
        (self.below(100) as u32) >= 100 - percent.min(100)
    }

    /// An index into `weights`, chosen with probability proportional to each weight; choice 0
    /// picks the first option with a non-zero weight.
    pub fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u32 = weights.iter().sum();
        if total == 0 {
            self.next_u32();
            return 0;
        }
        let mut r = self.next_u32() % total;
        for (i, &w) in weights.iter().enumerate() {
            if r < w {
                return i;
            }
            r -= w;
        }
        0
    }

    /// A number of choices consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }
}

/// Splits bytes (e.g. a fuzzer's input) into a choice stream's numbers.
pub fn choices_from_bytes(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks(4)
        .map(|c| {
            let mut b = [0u8; 4];
            b[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(b)
        })
        .collect()
}

/// A random value of type `ty`: often an edge case (0, ±1, the type's limits, -0.0), often a
/// small number, sometimes arbitrary bits. Floats are always finite; choice 0 gives zero.
pub fn gen_imm(c: &mut Choices<'_>, ty: Scalar) -> Imm {
    match ty {
        Scalar::Bool => Imm::Bool(c.below(2) == 1),
        t if t.is_int() => {
            let (min, max) = (t.int_min().unwrap_or(0), t.int_max().unwrap_or(0));
            let v: i128 = match c.weighted(&[2, 6, 3, 3]) {
                0 => 0,
                1 => c.below(33) as i128 - if t.is_signed() { 16 } else { 0 },
                2 => [min, max, min + 1, max - 1, -1, 1, 2, max / 2][c.below(8)],
                _ => c.next_u64() as i128,
            };
            Imm::int(t, v)
        }
        t => {
            let v = match c.weighted(&[2, 5, 4, 2, 1, 2]) {
                0 => 0.0,
                1 => c.below(41) as f64 - 20.0,
                2 => (c.below(2001) as f64 - 1000.0) / 64.0,
                3 => -0.0,
                4 => [1e30, -1e30, 65504.0, 1e-30, f64::EPSILON, 16777217.0][c.below(6)],
                _ => {
                    let bits = c.next_u64();
                    match t {
                        Scalar::F16 => half::f16::from_bits(bits as u16).to_f64(),
                        Scalar::F32 => f32::from_bits(bits as u32) as f64,
                        _ => f64::from_bits(bits),
                    }
                }
            };
            let v = if v.is_finite() { v } else { 1.5 };
            let r = Imm::float(t, v);
            // Rounding to f16 can overflow to infinity: keep buffers finite.
            if r.as_f64().is_some_and(f64::is_finite) {
                r
            } else {
                Imm::float(t, 2.5)
            }
        }
    }
}

/// A buffer of `len` random elements of type `elem` (see [`gen_imm`]).
pub fn gen_buffer(c: &mut Choices<'_>, elem: Scalar, len: usize) -> Buffer {
    let vals: Vec<Imm> = (0..len).map(|_| gen_imm(c, elem)).collect();
    Buffer::from_imms(elem, &vals).unwrap_or_else(|_| Buffer::zeroed(elem, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhausted_streams_give_the_simplest_choice() {
        let mut c = Choices::new(&[]);
        assert_eq!(c.below(10), 0);
        assert!(!c.chance(99));
        assert_eq!(c.weighted(&[0, 3, 1]), 1);
        assert_eq!(gen_imm(&mut c, Scalar::I32), Imm::int(Scalar::I32, 0));
        assert_eq!(gen_imm(&mut c, Scalar::F32), Imm::float(Scalar::F32, 0.0));
        assert_eq!(c.position(), 5);
    }

    #[test]
    fn random_floats_are_finite() {
        let data: Vec<u32> =
            (0..20_000u32).map(|i| i.wrapping_mul(2654435761).rotate_left(7)).collect();
        let mut c = Choices::new(&data);
        for _ in 0..2000 {
            for t in [Scalar::F16, Scalar::F32, Scalar::F64] {
                assert!(gen_imm(&mut c, t).as_f64().unwrap().is_finite());
            }
        }
        assert_eq!(choices_from_bytes(&[1, 0, 0, 0, 2]), vec![1, 2]);
    }
}
