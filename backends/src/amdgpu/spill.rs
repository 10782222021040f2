//! Spilling, as LLVM's AMDGPU backend does it.
//!
//! * SGPRs go into VGPR lanes: a spilled scalar value lives in one lane of a "holder" VGPR
//!   (64 values per holder), written by `v_writelane_b32` after each definition and read by
//!   `v_readlane_b32` into a short-lived SGPR before each use. Both ignore exec, so the lanes
//!   keep their values in any control flow. Holders are allocated like any other VGPR.
//! * VGPRs go to scratch: a 4-byte slot of each lane's private segment, stored with
//!   `scratch_store_dword` after each definition and loaded with `scratch_load_dword` before
//!   each use. Both act on active lanes only, which is what a VGPR write does too. The
//!   kernel then sets `flat_scratch` from its init pair at entry; the slots are addressed
//!   from the wave's private segment offset (`s7`).

use std::collections::HashSet;

use super::mir::{Inst, MFunc, Opnd, PReg, RegClass, VReg, SCRATCH_OFFSET_SGPR};

/// Spill slots must lie below this byte offset (the instruction's offset field).
const MAX_OFFSET: u32 = 4096;

/// The state of spilling over repeated allocation attempts.
#[derive(Default)]
pub struct Spiller {
    /// Registers made by spilling (reload/store temporaries and holders): never spilled.
    pub fixed: HashSet<VReg>,
    holder: Option<(VReg, u32)>,
    /// Number of spilled values.
    pub count: usize,
    /// Scratch slots used by spilled VGPRs.
    slots: u32,
    /// Bytes of private arrays before the slots (set at the first spill).
    base: Option<u32>,
}

fn mentions(o: &Opnd, v: VReg) -> bool {
    matches!(o, Opnd::R(x) | Opnd::Half(x, _) if *x == v)
}

fn rename(o: &mut Opnd, v: VReg, t: VReg) {
    match o {
        Opnd::R(x) if *x == v => *x = t,
        Opnd::Half(x, _) if *x == v => *x = t,
        _ => {}
    }
}

impl Spiller {
    /// Spills `v` (SGPR or pair to VGPR lanes, VGPR to scratch), rewriting `f`; false when
    /// the scratch slots (below the 4096-byte instruction offset limit) are used up.
    pub fn spill(&mut self, f: &mut MFunc, v: VReg) -> bool {
        let class = f.vregs[v];
        if class == RegClass::V {
            let base = *self.base.get_or_insert(f.scratch_bytes.next_multiple_of(4));
            let at = base + 4 * self.slots;
            if at + 4 > MAX_OFFSET {
                return false;
            }
            let slot = at;
            self.slots += 1;
            f.scratch_bytes = at + 4;
            let base = Opnd::P(PReg::S(SCRATCH_OFFSET_SGPR));
            let off = Opnd::Offset(slot);
            self.rewrite(f, v, |t| {
                (
                    vec![
                        Inst {
                            op: "scratch_load_dword",
                            defs: vec![Opnd::R(t)],
                            uses: vec![Opnd::Text("off"), base.clone(), off.clone()],
                        },
                        Inst { op: "s_waitcnt", defs: vec![], uses: vec![Opnd::Text("vmcnt(0)")] },
                    ],
                    vec![Inst {
                        op: "scratch_store_dword",
                        defs: vec![],
                        uses: vec![Opnd::Text("off"), Opnd::R(t), base.clone(), off.clone()],
                    }],
                )
            });
            return true;
        }
        let n = if class == RegClass::S2 { 2 } else { 1 };
        let (h, lane) = match self.holder {
            Some((h, l)) if l + n <= 64 => (h, l),
            _ => {
                let h = f.vregs.push(RegClass::V);
                self.fixed.insert(h);
                (h, 0)
            }
        };
        self.holder = Some((h, lane + n));
        self.count += 1;
        let part = |t: VReg, k: u32| if n == 1 { Opnd::R(t) } else { Opnd::Half(t, k as u8) };
        self.rewrite(f, v, |t| {
            let reload = (0..n)
                .map(|k| Inst {
                    op: "v_readlane_b32",
                    defs: vec![part(t, k)],
                    uses: vec![Opnd::R(h), Opnd::Imm(lane + k)],
                })
                .collect();
            let store = (0..n)
                .map(|k| Inst {
                    op: "v_writelane_b32",
                    defs: vec![Opnd::R(h)],
                    uses: vec![part(t, k), Opnd::Imm(lane + k)],
                })
                .collect();
            (reload, store)
        });
        true
    }

    /// Replaces `v` in each instruction by a fresh temporary, with `code(t)`'s reload
    /// before uses and store after definitions.
    fn rewrite(&mut self, f: &mut MFunc, v: VReg, code: impl Fn(VReg) -> (Vec<Inst>, Vec<Inst>)) {
        let class = f.vregs[v];
        let old = std::mem::take(&mut f.insts);
        let mut map = Vec::with_capacity(old.len());
        for mut inst in old {
            let used = inst.uses.iter().any(|o| mentions(o, v));
            let defined = inst.defs.iter().any(|o| mentions(o, v));
            if !used && !defined {
                map.push(f.insts.len());
                f.insts.push(inst);
                continue;
            }
            let t = f.vregs.push(class);
            self.fixed.insert(t);
            let (reload, store) = code(t);
            if used {
                f.insts.extend(reload);
            }
            inst.uses.iter_mut().chain(inst.defs.iter_mut()).for_each(|o| rename(o, v, t));
            // A load's result is only there after the wait.
            let wait = if inst.op.starts_with("s_load") {
                Some("lgkmcnt(0)")
            } else if inst.op.starts_with("global_load") || inst.op.starts_with("flat_load") {
                Some("vmcnt(0)")
            } else if inst.op.starts_with("ds_") {
                Some("lgkmcnt(0)")
            } else {
                None
            };
            map.push(f.insts.len());
            f.insts.push(inst);
            if defined {
                if let Some(w) = wait {
                    f.insts.push(Inst { op: "s_waitcnt", defs: vec![], uses: vec![Opnd::Text(w)] });
                }
                f.insts.extend(store);
            }
        }
        for l in &mut f.loops {
            l.head = map[l.head];
            l.end = map[l.end];
        }
    }
}

impl Spiller {
    /// After allocation: with scratch memory in use (VGPR spills, private arrays), the entry
    /// sets `flat_scratch` from its init pair.
    pub fn finish(&self, f: &mut MFunc) {
        if f.scratch_bytes == 0 {
            return;
        }
        let set = |half: &'static str, from: u8| Inst {
            op: "s_mov_b32",
            defs: vec![Opnd::Text(half)],
            uses: vec![Opnd::P(PReg::S(from))],
        };
        f.insts.splice(0..0, [set("flat_scratch_lo", 2), set("flat_scratch_hi", 3)]);
    }
}
