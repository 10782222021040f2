//! Matrix operations in the interpreter: every work-item of a sub-group computes the whole
//! tile (the operands are equal across the sub-group, which a per-sub-group log of the
//! cooperative operations checks), and per-work-item queues of asynchronous copies.

use std::collections::VecDeque;

use crate::expr::Imm;
use crate::matrix::{mma_reference, Layout, FRAG_ALIGN};
use crate::types::Scalar;

use super::super::compile::{Code, Coop, MemInfo};
use super::{checked_index, Item, Machine};
use crate::launch::resolve::fmt3;

/// Work-items per sub-group.
pub(super) const SUB_GROUP: u64 = 32;

/// One issued `copy_async`: absolute element indices into the memories it names.
#[derive(Clone, Copy, Debug)]
pub(super) struct PendingCopy {
    dst: u32,
    dst_at: usize,
    src: u32,
    src_at: usize,
    n: u8,
}

/// A work-item's asynchronous copies: the open group and the committed ones, oldest first.
#[derive(Debug, Default)]
pub(super) struct AsyncState {
    open: Vec<PendingCopy>,
    committed: VecDeque<Vec<PendingCopy>>,
}

impl AsyncState {
    pub(super) fn clear(&mut self) {
        self.open.clear();
        self.committed.clear();
    }
}

/// What the first work-item of a sub-group to reach each cooperative operation did: the
/// site, its operands, and who it was.
#[derive(Debug, Default)]
pub(super) struct CoopLog {
    entries: Vec<(u32, [u64; 2], [u32; 3])>,
}

impl CoopLog {
    pub(super) fn clear(&mut self) {
        self.entries.clear();
    }
}

impl Machine<'_> {
    /// Records that `item` executes cooperative operation `site` with `key` operands, or
    /// fails if its sub-group executed something else there.
    fn coop_check(
        &mut self,
        item: &Item,
        site: u32,
        name: &str,
        key: [u64; 2],
    ) -> Result<(), String> {
        let sg = (item.linear / SUB_GROUP) as usize;
        let n = &mut self.coop_counts[item.linear as usize];
        let at = *n as usize;
        *n += 1;
        let log = &mut self.coop_logs[sg];
        match log.entries.get(at) {
            None => {
                log.entries.push((site, key, item.global_id));
                Ok(())
            }
            Some(&(s, k, _)) if s == site && k == key => Ok(()),
            Some(&(s, k, who)) => Err(format!(
                "matrix operation `{name}` is not executed uniformly by sub-group {sg} of \
                 work-group {}: this work-item's {} cooperative operation is #{} with operands \
                 {key:?}, work-item {}'s was #{} with operands {k:?} (all 32 work-items of a \
                 sub-group must execute the same matrix operations with equal operands)",
                fmt3(self.group_id),
                ordinal(at + 1),
                site + 1,
                fmt3(who),
                s + 1,
            )),
        }
    }

    /// After a work-group: every work-item of a sub-group executed as many cooperative
    /// operations as its sub-group's log holds.
    pub(super) fn coop_finish(&mut self) -> Result<(), String> {
        for (linear, &n) in self.coop_counts.iter().enumerate() {
            let log = &self.coop_logs[linear / SUB_GROUP as usize];
            if n as usize != log.entries.len() {
                let who = log.entries.get(n as usize).map(|e| e.2).unwrap_or([0; 3]);
                return Err(format!(
                    "matrix operations are not executed uniformly by sub-group {} of work-group \
                     {}: work-item {linear} of the group executed {n} cooperative operation{}, \
                     work-item {} executed {} (all 32 work-items of a sub-group must execute \
                     the same matrix operations)",
                    linear / SUB_GROUP as usize,
                    fmt3(self.group_id),
                    if n == 1 { "" } else { "s" },
                    fmt3(who),
                    log.entries.len()
                ));
            }
        }
        for n in &mut self.coop_counts {
            *n = 0;
        }
        for l in &mut self.coop_logs {
            l.clear();
        }
        Ok(())
    }

    /// A `u32` operand of a matrix operation.
    fn u32_operand(&self, code: Code, item: &Item, what: &str, name: &str) -> Result<u64, String> {
        match self.eval(code, item)? {
            Imm::Int(Scalar::U32, v) => Ok(v),
            v => Err(format!("{what} of `{name}` is a {}, not a u32", v.scalar())),
        }
    }

    /// The absolute element indices of a tile at `offset`/`stride`, each checked.
    #[allow(clippy::too_many_arguments)]
    fn tile_indices(
        &self,
        info: &MemInfo,
        item: &Item,
        name: &str,
        offset: u64,
        stride: u64,
        layout: Layout,
        rows: u32,
        cols: u32,
    ) -> Result<Vec<usize>, String> {
        if !offset.is_multiple_of(FRAG_ALIGN) || !stride.is_multiple_of(FRAG_ALIGN) {
            return Err(format!(
                "misaligned `{name}` on `{}`: offset {offset} and stride {stride} must be \
                 multiples of {FRAG_ALIGN}",
                info.name
            ));
        }
        let (_, base, len) = self.memory(info, item);
        let mut out = Vec::with_capacity((rows * cols) as usize);
        for r in 0..rows as u64 {
            for c in 0..cols as u64 {
                let i = offset as u128 + layout.index(r, c, stride) as u128;
                let i = Imm::Int(Scalar::U64, u64::try_from(i).unwrap_or(u64::MAX));
                out.push(base + checked_index(i, len, name, info)?);
            }
        }
        Ok(out)
    }

    /// Executes cooperative operation `op` (number `site`) for `item`.
    pub(super) fn coop(&mut self, item: &mut Item, site: u32, op: &Coop) -> Result<(), String> {
        let name = op.name();
        match op {
            Coop::Load { dst, mem, offset, stride, layout, rows, cols }
            | Coop::Store { src: dst, mem, offset, stride, layout, rows, cols } => {
                let o = self.u32_operand(*offset, item, "the offset", name)?;
                let s = self.u32_operand(*stride, item, "the stride", name)?;
                self.coop_check(item, site, name, [o, s])?;
                let info = &self.prog.mems[*mem as usize];
                let at = self.tile_indices(info, item, name, o, s, *layout, *rows, *cols)?;
                if let Coop::Load { .. } = op {
                    let (buf, _, _) = self.memory(info, item);
                    let tile: Vec<f32> = at.iter().map(|&i| to_f32(buf.read(i))).collect();
                    item.frags[*dst as usize] = tile;
                } else {
                    let tile = std::mem::take(&mut item.frags[*dst as usize]);
                    let (buf, _, _) = self.memory_mut(info, item);
                    if buf.elem() != Scalar::F32 {
                        return Err(format!("`frag_store` into `{}` of {}", info.name, buf.elem()));
                    }
                    for (&i, &v) in at.iter().zip(&tile) {
                        buf.write(i, Imm::from_bits(Scalar::F32, v.to_bits() as u64));
                    }
                    item.frags[*dst as usize] = tile;
                }
            }
            Coop::Fill { dst, value } => {
                let v = self.eval(*value, item)?;
                self.coop_check(item, site, name, [v.to_bits(), 0])?;
                let x = to_f32(v);
                let n = self.prog.frags[*dst as usize] as usize;
                item.frags[*dst as usize] = vec![x; n];
            }
            Coop::Wgmma { d, a, ai, b, bi, n, sw } => {
                self.coop_check(item, site, name, [0, 0])?;
                self.wgmma(item, site, (*d, *a, *ai, *b, *bi), *n, *sw)?;
            }
            Coop::WgSync(_) => self.coop_check(item, site, name, [0, 0])?,
            Coop::SetMaxNReg(_, count) => {
                self.coop_check(item, site, name, [*count as u64, 0])?;
                self.wg_uniform(item, site, [*count as u64, 0], name, |_, _| {
                    Ok((Vec::new(), Vec::new()))
                })?;
            }
            Coop::Mma { d, a, b, c, shape } => {
                self.coop_check(item, site, name, [0, 0])?;
                let f = |i: &u32| &item.frags[*i as usize];
                let r = mma_reference(*shape, f(a), f(b), f(c));
                item.frags[*d as usize] = r;
            }
        }
        Ok(())
    }

    /// `copy_async(dst, di, src, si, n)`: checks the copy and queues it in the open group.
    pub(super) fn copy_async(
        &mut self,
        item: &mut Item,
        (dst, di, src, si, n): (u32, Code, u32, Code, u8),
    ) -> Result<(), String> {
        let mut at = [0usize; 2];
        for (k, (mem, index)) in [(dst, di), (src, si)].into_iter().enumerate() {
            let i = self.eval(index, item)?;
            let info = &self.prog.mems[mem as usize];
            let (_, base, len) = self.memory(info, item);
            let first = checked_index(i, len, "copy_async", info)?;
            if !first.is_multiple_of(n as usize) {
                return Err(format!(
                    "misaligned `copy_async` at `{}[{first}]` of {n} elements: the index must be \
                     a multiple of {n}",
                    info.name
                ));
            }
            let last = Imm::Int(Scalar::U64, (first + n as usize - 1) as u64);
            checked_index(last, len, "copy_async", info)?;
            at[k] = base + first;
        }
        item.copies.open.push(PendingCopy { dst, dst_at: at[0], src, src_at: at[1], n });
        Ok(())
    }

    /// `async_commit()`.
    pub(super) fn async_commit(&mut self, item: &mut Item) {
        let group = std::mem::take(&mut item.copies.open);
        item.copies.committed.push_back(group);
    }

    /// `async_wait(n)`: performs the copies of all committed groups but the `n` newest.
    pub(super) fn async_wait(&mut self, item: &mut Item, n: u8) {
        while item.copies.committed.len() > n as usize {
            let group = item.copies.committed.pop_front().unwrap_or_default();
            for c in group {
                for k in 0..c.n as usize {
                    let v = {
                        let (buf, _, _) = self.memory(&self.prog.mems[c.src as usize], item);
                        buf.read(c.src_at + k)
                    };
                    let info = &self.prog.mems[c.dst as usize];
                    let (buf, _, _) = self.memory_mut(info, item);
                    buf.write(c.dst_at + k, v);
                }
            }
        }
    }
}

/// A fragment element: f16, bf16 and f32 values are exact in f32 (an f32 keeps its bits).
pub(super) fn to_f32(v: Imm) -> f32 {
    match v {
        Imm::Float(Scalar::F32, _) => f32::from_bits(v.to_bits() as u32),
        Imm::Float(_, x) => x as f32,
        _ => f32::NAN,
    }
}

fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}
