//! Groups of interleaved 32-bit accesses at strides 9 to 16 (`loadgroup.rs`,
//! `storegroup.rs`): a 4x4 matrix's 16 elements per work-item, a record of 12 fields.
//!
//! Lane `l`'s `s` elements are one row of the span, from element `s * l`. The row is read
//! (written) in chunks of eight elements, at `8 * q` for `q < s / 8` and, where `s` is not
//! a multiple of 8, a last chunk at `s - 8` that overlaps the one before: never past the
//! row's own end, so never past the span's (which the group's one test proves in bounds).
//! The eight lanes' chunks at the same offset `c` are an 8x8 matrix whose transpose is the
//! eight values `c .. c + 8`, each a vector of the lanes' elements. Each half of it is
//! built from 16-byte loads (lanes `i` and `i + 4` in the two halves of one register,
//! `vinsertf128` from memory) and transposed within halves (`vunpck*ps`, `vunpck*pd`), and
//! the way back for stores (16-byte stores, `vextractf128` to memory). A value the
//! overlapping chunk holds again is taken once from loads, and stored twice (the same bits
//! to the same element, which is its lane's alone: no other effect can show).

use iced_x86::code_asm::*;

use super::{R, V, XMM, YMM};

/// The offsets in a row of stride `s` (9 to 16) of its chunks of eight elements.
pub(super) fn chunks(s: u32) -> Vec<u32> {
    let mut c: Vec<u32> = (0..s / 8).map(|q| 8 * q).collect();
    if !s.is_multiple_of(8) {
        c.push(s - 8);
    }
    c
}

/// The 4x4 transpose within each half of `ymm4..ymm7` (row `i` in `ymm{4 + i}`), back into
/// `ymm4..ymm7` (column `j` in `ymm{4 + j}`); `ymm0..ymm3` clobbered.
fn transpose4(a: &mut CodeAssembler) -> R<()> {
    a.vunpcklps(ymm0, ymm4, ymm5)?;
    a.vunpcklps(ymm1, ymm6, ymm7)?;
    a.vunpckhps(ymm2, ymm4, ymm5)?;
    a.vunpckhps(ymm3, ymm6, ymm7)?;
    a.vunpcklpd(ymm4, ymm0, ymm1)?;
    a.vunpckhpd(ymm5, ymm0, ymm1)?;
    a.vunpcklpd(ymm6, ymm2, ymm3)?;
    a.vunpckhpd(ymm7, ymm2, ymm3)?;
    Ok(())
}

impl V {
    /// The lanes' values at offsets `0 .. s` of the rows of stride `s` at `base + rax * 4`
    /// (in bounds), each handed once to `put` with its offset in `ymm4 + k % 4`; `put` may
    /// clobber `ymm0..ymm3` but no other vector register of the four.
    pub(super) fn rows_load(
        &mut self,
        base: AsmRegister64,
        s: u32,
        mut put: impl FnMut(&mut V, u32, AsmRegisterYmm) -> R<()>,
    ) -> R<()> {
        let mut have = 0u32;
        for c in chunks(s) {
            for h in [0, 4] {
                let at = |l: u32| base + rax * 4 + (4 * (s * l + c + h)) as i32;
                for i in 0..4u32 {
                    let (y, x) = (YMM[4 + i as usize], XMM[4 + i as usize]);
                    self.a.vmovups(x, xmmword_ptr(at(i)))?;
                    self.a.vinsertf128(y, y, xmmword_ptr(at(i + 4)), 1)?;
                }
                transpose4(&mut self.a)?;
                for j in 0..4u32 {
                    let k = c + h + j;
                    if have >> k & 1 == 0 {
                        have |= 1 << k;
                        put(self, k, YMM[4 + j as usize])?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Stores every lane's `s` values (value `k` a vector read by `get(k)`, into the given
    /// register, which is `ymm4 + k % 4`) to its row of stride `s` at `base + rax * 4` (in
    /// bounds; every lane active). `ymm0..ymm7` clobbered.
    pub(super) fn rows_store(
        &mut self,
        base: AsmRegister64,
        s: u32,
        mut get: impl FnMut(&mut V, u32, AsmRegisterYmm) -> R<()>,
    ) -> R<()> {
        for c in chunks(s) {
            for h in [0, 4] {
                for j in 0..4u32 {
                    get(self, c + h + j, YMM[4 + j as usize])?;
                }
                transpose4(&mut self.a)?;
                let at = |l: u32| base + rax * 4 + (4 * (s * l + c + h)) as i32;
                for i in 0..4u32 {
                    let (y, x) = (YMM[4 + i as usize], XMM[4 + i as usize]);
                    self.a.vmovups(xmmword_ptr(at(i)), x)?;
                    self.a.vextractf128(xmmword_ptr(at(i + 4)), y, 1)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every offset of a row is in some chunk, and no chunk reaches past the row.
    #[test]
    fn chunks_cover_each_row_and_stay_within_it() {
        for s in 9..=16u32 {
            let mut seen = 0u32;
            for c in chunks(s) {
                assert!(c + 8 <= s, "stride {s} chunk {c}");
                seen |= 0xff << c;
            }
            assert_eq!(seen, (1u32 << s) - 1, "stride {s}");
        }
    }
}
