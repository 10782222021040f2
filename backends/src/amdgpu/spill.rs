//! SGPR spilling into VGPR lanes, as LLVM's AMDGPU backend does: a spilled scalar value
//! lives in one lane of a "holder" VGPR (64 values per holder), written by
//! `v_writelane_b32` after each definition and read by `v_readlane_b32` into a short-lived
//! SGPR before each use. Both instructions ignore exec, so the lanes keep their values in
//! any control flow. The holder VGPRs take part in register allocation like any other.

use std::collections::HashSet;

use super::mir::{Inst, MFunc, Opnd, RegClass, VReg};

/// The state of spilling over repeated allocation attempts.
#[derive(Default)]
pub struct Spiller {
    /// Registers made by spilling (reload/store temporaries and holders): never spilled.
    pub fixed: HashSet<VReg>,
    holder: Option<(VReg, u32)>,
    /// Number of spilled values.
    pub count: usize,
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
    /// Spills the SGPR (or SGPR pair) `v` to VGPR lanes, rewriting `f`.
    pub fn spill(&mut self, f: &mut MFunc, v: VReg) {
        let class = f.vregs[v];
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
            if used {
                for k in 0..n {
                    f.insts.push(Inst {
                        op: "v_readlane_b32",
                        defs: vec![part(t, k)],
                        uses: vec![Opnd::R(h), Opnd::Imm(lane + k)],
                    });
                }
            }
            inst.uses.iter_mut().chain(inst.defs.iter_mut()).for_each(|o| rename(o, v, t));
            // A scalar load's result is only there after the wait.
            let load = inst.op.starts_with("s_load");
            map.push(f.insts.len());
            f.insts.push(inst);
            if defined {
                if load {
                    f.insts.push(Inst {
                        op: "s_waitcnt",
                        defs: vec![],
                        uses: vec![Opnd::Text("lgkmcnt(0)")],
                    });
                }
                for k in 0..n {
                    f.insts.push(Inst {
                        op: "v_writelane_b32",
                        defs: vec![Opnd::R(h)],
                        uses: vec![part(t, k), Opnd::Imm(lane + k)],
                    });
                }
            }
        }
        for l in &mut f.loops {
            l.head = map[l.head];
            l.end = map[l.end];
        }
    }
}
