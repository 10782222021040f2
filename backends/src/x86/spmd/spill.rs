//! Expressions deeper than the temporaries: the values below a node spilled to frame slots.
//!
//! Expression code computes a node into `ymm{d}` with `ymm{d+1}..` as its temporaries,
//! `need` of them in all (Sethi-Ullman, [`V::need`]); the operands computed before it sit
//! in `ymm0..ymm{d-1}`. An operation computes its deeper operand first unless both can
//! fault, so most chains need two or three registers at any depth, but a chain whose
//! operands all can fault (`x[a] * (x[b] + x[c] * (...))`, each left operand first) needs
//! one more per level, and f64 values take two registers each.
//!
//! A statement's expression that needs more than [`TEMPS`] registers from where it starts
//! is generated in *deep* mode ([`V::deep_if`]): there a node at `ymm{d}` that needs more
//! than the `TEMPS - d` registers left stores `ymm0..ymm{d-1}` to frame slots, is computed
//! at `ymm0` with every temporary free (spilling again inside where it must), is moved to
//! `ymm{d}` (64-bit values: `ymm{d}`, `ymm{d+1}`) and the stored registers are loaded back.
//! Expressions that fit are generated exactly as before, and so is all of a statement
//! that fits (the mode is only switched on for the others).
//!
//! Why this is exact: the nodes are computed in the order they are without spilling (the
//! operand order is decided before, left first where both can fault, so a lane faulting in
//! both reports the interpreter's fault); a spill and its reload move bits, and no code of
//! the node writes the frame slots of the spills around it (each level of nested spills
//! takes slots above the ones in use). A fault in the spilled node narrows the alive mask
//! in its frame slot, as anywhere else, and the registers loaded back are the operands the
//! node's parent computed before it.

use iced_x86::code_asm::*;

use super::{no, R, TEMPS, V, YMM};

impl V {
    /// Runs `f` (the code of a statement's expression) in deep mode when `deep`: nodes that
    /// do not fit above their register spill those below (see the module's comment).
    pub(super) fn deep_if(&mut self, deep: bool, f: impl FnOnce(&mut Self) -> R<()>) -> R<()> {
        let outer = self.deep;
        self.deep |= deep;
        let r = f(self);
        self.deep = outer;
        r
    }

    /// True if a node needing `need` registers at `ymm{d}` must be computed through
    /// [`V::spilled`].
    pub(super) fn must_spill(&self, d: usize, need: impl FnOnce(&Self) -> usize) -> bool {
        self.deep && d > 0 && d + need(self) > TEMPS
    }

    /// Computes a node into `ymm{d}` (`wide` registers from there: 2 for 64-bit values) by
    /// `f`, which computes it at `ymm0`, with `ymm0..ymm{d-1}` stored to frame slots around
    /// it and loaded back after.
    pub(super) fn spilled(
        &mut self,
        d: usize,
        wide: usize,
        f: impl FnOnce(&mut Self) -> R<()>,
    ) -> R<()> {
        if d + wide > TEMPS {
            return no("internal: out of expression registers");
        }
        let base = self.spill_used;
        while self.spill_slots.len() < base + d {
            let s = self.slot();
            self.spill_slots.push(s);
        }
        for (r, &y) in YMM[..d].iter().enumerate() {
            self.a.vmovups(ymmword_ptr(r15 + self.spill_slots[base + r]), y)?;
        }
        self.spill_used = base + d;
        let r = f(self);
        self.spill_used = base;
        r?;
        // (From the top register down: `ymm{d+h}` never overwrites a result register still
        // to be moved, `d` being at least 1.)
        for h in (0..wide).rev() {
            self.a.vmovaps(YMM[d + h], YMM[h])?;
        }
        for (r, &y) in YMM[..d].iter().enumerate() {
            self.a.vmovups(y, ymmword_ptr(r15 + self.spill_slots[base + r]))?;
        }
        Ok(())
    }
}
