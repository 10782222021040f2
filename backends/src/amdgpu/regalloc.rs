//! Linear-scan register allocation of SGPRs and VGPRs over the linear instruction order,
//! with live ranges stretched over loops. Out of registers, the value live furthest ahead is
//! spilled ([`super::spill`]: SGPRs to VGPR lanes, VGPRs to scratch memory) and allocation
//! starts over; only when nothing is spillable is it an error, never a panic.

use cranelift_entity::SecondaryMap;

use super::mir::{MFunc, Opnd, PReg, RegClass, VReg};
use super::spill::Spiller;
use super::Error;

enum Failure {
    /// Spill this SGPR (pair) and try again.
    Spill(VReg),
    Error(Error),
}

/// SGPRs reserved at entry: `s[0:1]` kernarg segment pointer, `s[2:3]` flat scratch init,
/// `s4..s6` work-group ids, `s7` the wave's private segment offset.
pub const FIRST_FREE_SGPR: u32 = 8;
/// SGPRs kiln allocates (`s0..s95`; the rest are left to vcc, flat scratch and xnack).
pub const MAX_SGPRS: u32 = 96;
/// VGPRs reserved at entry: `v0..v2` work-item ids.
pub const FIRST_FREE_VGPR: u32 = 3;
/// VGPRs per lane on gfx9.
pub const MAX_VGPRS: u32 = 256;

fn operands(f: &MFunc) -> impl Iterator<Item = (usize, VReg)> + '_ {
    f.insts.iter().enumerate().flat_map(|(i, inst)| {
        inst.defs.iter().chain(&inst.uses).filter_map(move |o| match o {
            Opnd::R(v) | Opnd::Half(v, _) => Some((i, *v)),
            _ => None,
        })
    })
}

/// Assigns physical registers and rewrites every operand; fills in the register counts.
pub fn allocate(f: &mut MFunc) -> Result<(), Error> {
    let mut spiller = Spiller::default();
    loop {
        match assign(f, &spiller) {
            Ok(()) => {
                spiller.finish(f);
                return Ok(());
            }
            Err(Failure::Spill(v)) => {
                if !spiller.spill(f, v) {
                    return Err(Error::RegisterPressure(format!(
                        "kernel `{}` needs more than the VGPRs and scratch spill slots kiln has",
                        f.name
                    )));
                }
            }
            Err(Failure::Error(e)) => return Err(e),
        }
    }
}

fn assign(f: &mut MFunc, spiller: &Spiller) -> Result<(), Failure> {
    let mut start: SecondaryMap<VReg, usize> = SecondaryMap::with_default(usize::MAX);
    let mut end: SecondaryMap<VReg, usize> = SecondaryMap::with_default(0);
    for (i, v) in operands(f) {
        start[v] = start[v].min(i);
        end[v] = end[v].max(i);
    }
    // A value live into a loop stays live through its back edge.
    let mut changed = true;
    while changed {
        changed = false;
        for l in &f.loops {
            for v in f.vregs.keys() {
                if start[v] < l.head && end[v] >= l.head && end[v] < l.end {
                    end[v] = l.end;
                    changed = true;
                }
            }
        }
    }
    let mut order: Vec<VReg> = f.vregs.keys().filter(|&v| start[v] != usize::MAX).collect();
    order.sort_by_key(|&v| start[v]);
    let mut sfree = vec![true; MAX_SGPRS as usize];
    let mut vfree = vec![true; MAX_VGPRS as usize];
    sfree[..FIRST_FREE_SGPR as usize].iter_mut().for_each(|x| *x = false);
    vfree[..FIRST_FREE_VGPR as usize].iter_mut().for_each(|x| *x = false);
    let mut active: Vec<VReg> = Vec::new();
    let mut assign: SecondaryMap<VReg, Option<PReg>> = SecondaryMap::new();
    let (mut smax, mut vmax) = (FIRST_FREE_SGPR, FIRST_FREE_VGPR);
    for v in order {
        active.retain(|&a| {
            if end[a] < start[v] {
                match assign[a] {
                    Some(PReg::S(n)) => sfree[n as usize] = true,
                    Some(PReg::S2(n)) => {
                        sfree[n as usize] = true;
                        sfree[n as usize + 1] = true;
                    }
                    Some(PReg::V(n)) => vfree[n as usize] = true,
                    Some(PReg::V2(n)) => vfree[n as usize..n as usize + 2].fill(true),
                    Some(PReg::V4(n)) => vfree[n as usize..n as usize + 4].fill(true),
                    None => {}
                }
                false
            } else {
                true
            }
        });
        let live = active.len() + 1;
        let p = match f.vregs[v] {
            RegClass::S => sfree.iter().position(|&x| x).map(|n| {
                sfree[n] = false;
                PReg::S(n as u8)
            }),
            RegClass::S2 => (0..MAX_SGPRS as usize - 1)
                .step_by(2)
                .find(|&n| sfree[n] && sfree[n + 1])
                .map(|n| {
                    sfree[n] = false;
                    sfree[n + 1] = false;
                    PReg::S2(n as u8)
                }),
            RegClass::V => vfree.iter().position(|&x| x).map(|n| {
                vfree[n] = false;
                PReg::V(n as u8)
            }),
            // gfx9 does not require 64-bit VGPR operands to be even-aligned.
            RegClass::V2 => {
                (0..MAX_VGPRS as usize - 1).find(|&n| vfree[n] && vfree[n + 1]).map(|n| {
                    vfree[n] = false;
                    vfree[n + 1] = false;
                    PReg::V2(n as u8)
                })
            }
            RegClass::V4 => {
                (0..MAX_VGPRS as usize - 3).find(|&n| vfree[n..n + 4].iter().all(|&x| x)).map(|n| {
                    vfree[n..n + 4].fill(false);
                    PReg::V4(n as u8)
                })
            }
        };
        let Some(p) = p else {
            let class = f.vregs[v];
            // Spill the value whose range ends furthest ahead: of the same class for SGPRs,
            // a single VGPR for any VGPR class (pairs and quads are not spilled).
            let want =
                if matches!(class, RegClass::S | RegClass::S2) { class } else { RegClass::V };
            let victim = active
                .iter()
                .chain([&v])
                .filter(|&&a| f.vregs[a] == want && !spiller.fixed.contains(&a))
                .max_by_key(|&&a| end[a]);
            if let Some(&victim) = victim {
                return Err(Failure::Spill(victim));
            }
            let (file, max) = match class {
                RegClass::V | RegClass::V2 | RegClass::V4 => ("VGPRs", MAX_VGPRS),
                _ => ("SGPRs", MAX_SGPRS),
            };
            return Err(Failure::Error(Error::RegisterPressure(format!(
                "kernel `{}` needs more than the {max} {file} available \
                 ({live} values live at once, none of them spillable)",
                f.name
            ))));
        };
        match p {
            PReg::S(n) => smax = smax.max(n as u32 + 1),
            PReg::S2(n) => smax = smax.max(n as u32 + 2),
            PReg::V(n) => vmax = vmax.max(n as u32 + 1),
            PReg::V2(n) => vmax = vmax.max(n as u32 + 2),
            PReg::V4(n) => vmax = vmax.max(n as u32 + 4),
        }
        assign[v] = Some(p);
        active.push(v);
    }
    for inst in &mut f.insts {
        for o in inst.defs.iter_mut().chain(inst.uses.iter_mut()) {
            match *o {
                Opnd::R(v) => *o = Opnd::P(assign[v].expect("every used register is assigned")),
                Opnd::Half(v, k) => {
                    *o = Opnd::P(match assign[v].expect("every used register is assigned") {
                        PReg::S2(n) => PReg::S(n + k),
                        PReg::V2(n) | PReg::V4(n) => PReg::V(n + k),
                        // Isel takes halves of 64-bit registers only.
                        p => p,
                    })
                }
                _ => {}
            }
        }
    }
    f.num_sgprs = smax;
    f.num_vgprs = vmax;
    Ok(())
}
