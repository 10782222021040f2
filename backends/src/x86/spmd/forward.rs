//! Local-array values forwarded in registers in region code, when the code is generated.
//!
//! A tree reduction's rounds, unrolled (`known.rs`), each store `tile[lid]` at a constant
//! displacement and the next round loads what it stored: through memory every round waits
//! for the store-to-load forwarding of the round before (about five cycles a hop, more for
//! a load of part of a wider store), on a dependency chain of seven rounds per group that
//! the out-of-order window cannot hide behind other groups. Here a store at a constant
//! displacement also leaves its value in a spare register (`ymm8..ymm13`, where region
//! code keeps no `let` in force: a plain batch loop that puts names there, `saves.rs`,
//! forwards nothing), and a later load of bytes it covers takes them from there (a
//! register move, or a shift or lane extraction for a part): the memory is still stored,
//! so everything else reads what it always read.
//!
//! Why the values are the memory's: an entry says that bytes `disp..disp + bytes` of table
//! `t` hold the low `bytes` bytes of its register. Every store to a table either records
//! its entry after removing those it overlaps, or (any other form: masked, at a computed
//! index, narrow or 64-bit types, atomics, vector accesses) removes every entry; any label
//! (a point control may reach from elsewhere) removes every entry; and nothing else in
//! region code writes the registers while entries may exist (`let`s there live in frame
//! slots; a batch loop's top, a label, comes before its loads into `let` registers;
//! temporaries are `ymm0..ymm7`, the limit stub saves and restores `ymm8..ymm15` around
//! its call), except the names of a block that takes them while it lasts ([`V::block`]):
//! forwarding is off there, and every entry is forgotten where such a block starts.

use iced_x86::code_asm::*;

use super::{R, V, XMM, YMM};

/// The registers that hold forwarded values.
const FWD_REGS: std::ops::Range<usize> = 8..super::LID;

/// A forwarded store: table, byte displacement from its base, bytes valid, register.
#[derive(Clone, Copy)]
pub(super) struct Fwd {
    t: u32,
    disp: i32,
    bytes: u32,
    reg: usize,
}

impl V {
    /// Whether values are forwarded here: region code, which keeps no `let` registers.
    fn fwd_on(&self) -> bool {
        self.regions.is_some() && self.next_reg >= super::GID && self.vhomes.is_empty()
    }

    /// Forgets every forwarded value (code that may store to a local array, a label).
    pub(super) fn fwd_clear(&mut self) {
        self.fwd.clear();
    }

    /// Forgets the forwarded values of table `t` (a store to it of another form; local
    /// arrays and buffers never share memory, nor do two local arrays).
    pub(super) fn fwd_clear_table(&mut self, t: u32) {
        self.fwd.retain(|f| f.t != t);
    }

    /// After a store of `ymm0`'s low `bytes` bytes at displacement `disp` of table `t`:
    /// entries it overlaps are gone, and with `keep`, it is one (its value copied to a
    /// free register, else the oldest entry's).
    pub(super) fn fwd_stored(&mut self, t: u32, disp: i32, bytes: u32, keep: bool) -> R<()> {
        let end = disp + bytes as i32;
        self.fwd.retain(|f| f.t != t || f.disp + f.bytes as i32 <= disp || end <= f.disp);
        // (Only local arrays: buffers may be one memory under several names.)
        let local = self.mems.get(self.mem_of(t) as usize).is_some_and(|m| m.local.is_some());
        if !keep || !local || !self.fwd_on() {
            return Ok(());
        }
        let reg = match FWD_REGS.clone().find(|r| self.fwd.iter().all(|f| f.reg != *r)) {
            Some(r) => r,
            None => self.fwd.remove(0).reg,
        };
        self.a.vmovaps(YMM[reg], ymm0)?;
        self.fwd.push(Fwd { t, disp, bytes, reg });
        Ok(())
    }

    /// A load of `bytes` bytes at displacement `disp` of table `t` into `ymm{d}` (its low
    /// bytes; other lanes are inactive under the mask that narrows it) from a forwarded
    /// value that covers them, if one does: true if loaded.
    pub(super) fn fwd_load(&mut self, t: u32, disp: i32, bytes: u32, d: usize) -> R<bool> {
        if !self.fwd_on() {
            return Ok(false);
        }
        let Some(f) = self
            .fwd
            .iter()
            .rev()
            .find(|f| f.t == t && f.disp <= disp && disp + bytes as i32 <= f.disp + f.bytes as i32)
            .copied()
        else {
            return Ok(false);
        };
        let o = (disp - f.disp) as u32;
        match (o, bytes) {
            (0, 32) => self.a.vmovaps(YMM[d], YMM[f.reg])?,
            (0, _) => self.a.vmovaps(XMM[d], XMM[f.reg])?,
            (_, 32) => return Ok(false),
            (1..=15, _) if o + bytes <= 16 => self.a.vpsrldq(XMM[d], XMM[f.reg], o)?,
            (16, _) => self.a.vextractf128(XMM[d], YMM[f.reg], 1)?,
            (17..=31, _) => {
                self.a.vextractf128(XMM[d], YMM[f.reg], 1)?;
                self.a.vpsrldq(XMM[d], XMM[d], o - 16)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}
