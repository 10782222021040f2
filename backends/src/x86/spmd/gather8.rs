//! Gathers of 8-bit elements by one `vpgatherdd`: the aligned dword that holds each active
//! lane's byte, shifted right by the byte's place in it, then extended. A CRC's
//! `data[i * len + k]`, a wrapped neighbour `src[yu + xl]`: without this, each lane was one
//! `movzx` through the frame (eight tests and jumps, eight stores, a reload), which made
//! CRC-32 by table run at 0.6 of the scalar loop.
//!
//! Exactness: the lanes' indices are checked before (every active lane in bounds, faults as
//! the interpreter reports them), and masked-off lanes load nothing (a gather's masked
//! element is neither read nor faulted on) and get 0, as the per-lane code gives them. An
//! active lane reads the 4-byte-aligned dword around its byte: that dword lies in the page
//! of the byte (pages are 4096-byte aligned), so it cannot fault where the byte would not;
//! the bytes beside the element that come with it are shifted and masked out, so their
//! values (another element, or whatever follows the buffer) never reach the result.

use iced_x86::code_asm::*;

use super::scalar::low32;
use super::{R, V, XMM, YMM};

impl V {
    /// The bytes at the byte offsets in `ymm{d}` (in bounds in the lanes of the mask in
    /// `ymm{d+1}`) from `base` into `ymm{d}`, zero- or sign-extended to 32 bits; inactive
    /// lanes 0. `ymm{d+1}` and `ymm{d+2}` are clobbered.
    pub(super) fn gather_bytes(&mut self, base: AsmRegister64, d: usize, signed: bool) -> R<()> {
        let (x, m, t) = (YMM[d], YMM[d + 1], YMM[d + 2]);
        self.byte_places(base, d)?;
        self.byte_shifts(d)?;
        self.a.vpxor(t, t, t)?;
        self.a.vpgatherdd_3(t, ymmword_ptr(base + x), m)?;
        self.a.vpsrlvd(x, t, ymmword_ptr(r15 + self.tmp_v))?;
        self.byte_extend(d, signed)
    }

    /// The byte offsets in `ymm{d}` turned into the offsets from `base` of the aligned
    /// dwords that hold them, each byte's place in its dword (0 to 3) into `ymm{d+2}`.
    pub(super) fn byte_places(&mut self, base: AsmRegister64, d: usize) -> R<()> {
        let (x, t) = (YMM[d], YMM[d + 2]);
        // The byte's place in its aligned dword: (base + index) & 3, base's low bits added
        // to each index.
        self.a.mov(eax, low32(base))?;
        self.a.and(eax, 3)?;
        self.a.vmovd(XMM[d + 2], eax)?;
        self.a.vpbroadcastd(t, XMM[d + 2])?;
        self.a.vpaddd(t, t, x)?;
        let three = self.imm_slot(3);
        self.a.vpand(t, t, ymmword_ptr(r15 + three))?;
        // The dword's offset from base (index minus place, at least -3: the same page as
        // the buffer's first byte).
        self.a.vpsubd(x, x, t)?;
        Ok(())
    }

    /// The places in `ymm{d+2}` turned into shifts (bits), kept in the frame while
    /// `ymm{d+2}` gathers.
    pub(super) fn byte_shifts(&mut self, d: usize) -> R<()> {
        let t = YMM[d + 2];
        self.a.vpslld(t, t, 3)?;
        self.a.vmovups(ymmword_ptr(r15 + self.tmp_v), t)?;
        Ok(())
    }

    /// The bytes in the low bits of `ymm{d}` zero- or sign-extended to 32 bits.
    pub(super) fn byte_extend(&mut self, d: usize, signed: bool) -> R<()> {
        let x = YMM[d];
        if signed {
            self.a.vpslld(x, x, 24)?;
            self.a.vpsrad(x, x, 24)?;
        } else {
            let low = self.imm_slot(0xff);
            self.a.vpand(x, x, ymmword_ptr(r15 + low))?;
        }
        Ok(())
    }
}
