//! The warpgroup tier in the interpreter (see [`crate::warpgroup`]): `wgmma` on each
//! work-item's share of the accumulator, with the factors read once per warpgroup (by the
//! first of its work-items to issue the operation, which is when the hardware's collective
//! operation reads them too), `tma_load` performed when issued, and barrier objects kept in
//! their `u64` ([`Mbar`]).

use crate::expr::Imm;
use crate::types::Scalar;
use crate::warpgroup::{acc_coords, Mbar, WgLayout, WARPGROUP};

use super::super::compile::{Code, MemInfo, Tma};
use super::{checked_index, Item, Machine};
use crate::matrix::MatrixOp;

/// The factors one `wgmma` of a warpgroup read: its site and offsets, A (64x16) and B
/// (16xN), row-major, as f32.
#[derive(Debug)]
pub(super) struct WgSnap {
    site: u32,
    at: [u64; 2],
    a: Vec<f32>,
    b: Vec<f32>,
}

/// What a `mbar_wait` found.
pub(super) enum Waited {
    Done,
    Blocked,
}

impl Machine<'_> {
    /// A `u32` operand.
    fn wg_u32(&self, code: Code, item: &Item, what: &str, name: &str) -> Result<u64, String> {
        match self.eval(code, item)? {
            Imm::Int(Scalar::U32, v) => Ok(v),
            v => Err(format!("{what} of `{name}` is a {}, not a u32", v.scalar())),
        }
    }

    /// Reads the `rows x 16` factor at element `start` of `info` laid out as `sw`, as f32,
    /// row-major.
    fn wg_factor(
        &self,
        info: &MemInfo,
        item: &Item,
        sw: WgLayout,
        start: u64,
        rows: u64,
    ) -> Result<Vec<f32>, String> {
        let (buf, base, len) = self.memory(info, item);
        let es = buf.elem().size_bytes() as u64;
        sw.check_start(start, es).map_err(|m| format!("`wgmma` on `{}`: {m}", info.name))?;
        let mut out = Vec::with_capacity(rows as usize * 16);
        for r in 0..rows {
            for k in 0..16 {
                let i = sw.index(start, r, k, es);
                let i = Imm::Int(Scalar::U64, i);
                let at = base + checked_index(i, len, "wgmma", info)?;
                out.push(super::matrix::to_f32(buf.read(at)));
            }
        }
        Ok(out)
    }

    /// Checks that `item`'s next warpgroup-wide operation (`wgmma`, `setmaxnreg_*`) is the
    /// one its warpgroup executed there (site `site` with operands `at`), recording it with
    /// the factors `read` gives when `item` is the first to get there: the (warpgroup, index)
    /// of its record.
    pub(super) fn wg_uniform(
        &mut self,
        item: &mut Item,
        site: u32,
        at: [u64; 2],
        name: &str,
        read: impl FnOnce(&Self, &Item) -> Result<(Vec<f32>, Vec<f32>), String>,
    ) -> Result<(usize, usize), String> {
        let wg = (item.linear / WARPGROUP) as usize;
        let nth = item.wg_count as usize;
        item.wg_count += 1;
        if self.wg_snaps[wg].len() == nth {
            let (a, b) = read(self, item)?;
            self.wg_snaps[wg].push(WgSnap { site, at, a, b });
        }
        let snap = &self.wg_snaps[wg][nth];
        if snap.site != site || snap.at != at {
            return Err(format!(
                "`{name}` is not executed uniformly by warpgroup {wg}: this work-item's {} \
                 warpgroup operation is #{} with operands {at:?}, its warpgroup's was #{} with \
                 operands {:?} (all 128 work-items of a warpgroup execute the same `wgmma`s and \
                 `setmaxnreg`s with equal operands)",
                nth + 1,
                site + 1,
                snap.site + 1,
                snap.at
            ));
        }
        Ok((wg, nth))
    }

    /// `wgmma`: this work-item's elements of `frags[d]` plus A·B, each summed in increasing k
    /// with one rounding per addition (as `mma`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn wgmma(
        &mut self,
        item: &mut Item,
        site: u32,
        (d, a, ai, b, bi): (u32, u32, Code, u32, Code),
        n: u16,
        sw: [WgLayout; 2],
    ) -> Result<(), String> {
        let ai = self.wg_u32(ai, item, "the offset of A", "wgmma")?;
        let bi = self.wg_u32(bi, item, "the offset of B", "wgmma")?;
        let snap = self.wg_uniform(item, site, [ai, bi], "wgmma", |m, item| {
            let fa = m.wg_factor(&m.prog.mems[a as usize], item, sw[0], ai, 64)?;
            let fb = m.wg_factor(&m.prog.mems[b as usize], item, sw[1], bi, n as u64)?;
            Ok((fa, fb))
        })?;
        let (sa, sb) = (&self.wg_snaps[snap.0][snap.1].a, &self.wg_snaps[snap.0][snap.1].b);
        let t = (item.linear % WARPGROUP) as u32;
        let acc = &mut item.frags[d as usize];
        for (i, x) in acc.iter_mut().enumerate() {
            let (r, c) = acc_coords(t, i as u32);
            let mut s = *x;
            for k in 0..16 {
                s += sa[r as usize * 16 + k] * sb[c as usize * 16 + k];
            }
            *x = s;
        }
        Ok(())
    }

    /// `frag_elem`.
    pub(super) fn frag_elem(&self, item: &mut Item, frag: u32, index: u8, slot: u32) {
        let v = item.frags[frag as usize][index as usize];
        item.slots[slot as usize] = Imm::from_bits(Scalar::F32, v.to_bits() as u64);
    }

    /// The barrier object at `mems[mem][index]`: its absolute element index.
    fn mbar_at(&self, item: &Item, mem: u32, index: Code, name: &str) -> Result<usize, String> {
        let i = self.eval(index, item)?;
        let info = &self.prog.mems[mem as usize];
        let (_, base, len) = self.memory(info, item);
        Ok(base + checked_index(i, len, name, info)?)
    }

    fn mbar_update(
        &mut self,
        item: &mut Item,
        mem: u32,
        at: usize,
        f: impl FnOnce(&mut Mbar) -> Result<(), String>,
    ) -> Result<(), String> {
        let info = &self.prog.mems[mem as usize];
        let (buf, _, _) = self.memory_mut(info, item);
        let mut m = Mbar::decode(buf.read(at).to_bits());
        f(&mut m).map_err(|e| format!("{e} (`{}[{}]`)", info.name, at))?;
        buf.write(at, Imm::Int(Scalar::U64, m.encode()));
        Ok(())
    }

    /// A barrier-object operation; `mbar_wait` reports whether its phase has completed.
    pub(super) fn mbar(
        &mut self,
        item: &mut Item,
        op: MatrixOp,
        mem: u32,
        index: Code,
        value: Option<Code>,
    ) -> Result<Waited, String> {
        let name = op.name();
        let at = self.mbar_at(item, mem, index, name)?;
        let v = match value {
            Some(c) => self.wg_u32(c, item, "the last operand", name)?,
            None => 0,
        };
        match op {
            MatrixOp::MbarInit => {
                if !(1..=crate::warpgroup::MBAR_MAX_COUNT as u64).contains(&v) {
                    return Err(format!(
                        "`mbar_init` with count {v}: a barrier object expects 1 to {} arrivals",
                        crate::warpgroup::MBAR_MAX_COUNT
                    ));
                }
                self.mbar_update(item, mem, at, |m| {
                    *m = Mbar::new(v as u32);
                    Ok(())
                })?
            }
            MatrixOp::MbarArrive => self.mbar_update(item, mem, at, |m| m.arrive(0))?,
            MatrixOp::MbarExpectTx => self.mbar_update(item, mem, at, |m| m.arrive(v))?,
            _ => {
                let info = &self.prog.mems[mem as usize];
                let (buf, _, _) = self.memory(info, item);
                let m = Mbar::decode(buf.read(at).to_bits());
                if m.expected == 0 {
                    return Err(format!(
                        "`mbar_wait` on `{}[{at}]`, which `mbar_init` never initialized",
                        info.name
                    ));
                }
                return Ok(if m.done(v & 1 == 1) { Waited::Done } else { Waited::Blocked });
            }
        }
        Ok(Waited::Done)
    }

    /// `tma_load`: copies the box now (zeros outside the tensor) and completes its bytes.
    pub(super) fn tma(&mut self, item: &mut Item, t: &Tma) -> Result<(), String> {
        let name = "tma_load";
        let what = ["the width", "the height", "the pitch", "the column", "the row"];
        let mut d = [0u64; 5];
        for k in 0..5 {
            d[k] = self.wg_u32(t.dims[k], item, what[k], name)?;
        }
        let [width, height, pitch, x, y] = d;
        let di = self.wg_u32(t.di, item, "the destination index", name)?;
        let bx = t.bx;
        let src_info = &self.prog.mems[t.src as usize];
        let dst_info = &self.prog.mems[t.dst as usize];
        let es = self.memory(dst_info, item).0.elem().size_bytes() as u64;
        if width > pitch || !(pitch * es).is_multiple_of(16) {
            return Err(format!(
                "`tma_load` from `{}`: the pitch ({pitch} elements) must be at least the width \
                 ({width}) and a multiple of 16 bytes",
                src_info.name
            ));
        }
        let align = bx.swizzle.repeat().max(128);
        if !(di * es).is_multiple_of(align) {
            return Err(format!(
                "misaligned `tma_load` into `{}[{di}]`: the box must start on a {align}-byte \
                 boundary of the array",
                dst_info.name
            ));
        }
        let mut vals = Vec::with_capacity(bx.w as usize * bx.h as usize);
        {
            let (buf, base, len) = self.memory(src_info, item);
            for r in 0..bx.h as u64 {
                for c in 0..bx.w as u64 {
                    let (gx, gy) = (x + c, y + r);
                    if gx < width && gy < height {
                        let i = Imm::Int(Scalar::U64, gy * pitch + gx);
                        vals.push(buf.read(base + checked_index(i, len, name, src_info)?));
                    } else {
                        vals.push(Imm::from_bits(buf.elem(), 0));
                    }
                }
            }
        }
        {
            let (buf, base, len) = self.memory_mut(dst_info, item);
            for (k, v) in vals.into_iter().enumerate() {
                let l = bx.swizzle.apply(k as u64 * es) / es;
                let i = Imm::Int(Scalar::U64, di + l);
                let at = base + checked_index(i, len, name, dst_info)?;
                buf.write(at, v);
            }
        }
        let at = self.mbar_at(item, t.bar, t.bi, name)?;
        self.mbar_update(item, t.bar, at, |m| m.complete_tx(bx.bytes(es)))
    }
}
