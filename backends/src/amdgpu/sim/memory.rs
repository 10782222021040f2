//! Simulation of the memory instructions beyond plain loads: stores, atomics (lanes take
//! their turns in order), flat (generic) accesses resolved through the memory map, and
//! scratch accesses to each lane's own private segment, bounds-checked.

use super::ops::atomic;
use super::{lane, lane64, mem_width, s32, s64, Mem, Wave, LANES};
use crate::amdgpu::mir::{Inst, Opnd, PReg};

/// True for the instructions [`exec`] runs.
pub(super) fn is_memory(op: &str) -> bool {
    is_quad(op)
        || op.starts_with("global_atomic")
        || op.contains("_rtn_")
        || op.starts_with("flat_")
        || op.starts_with("scratch_")
        || op.starts_with("global_store")
        || op.starts_with("ds_write")
}

/// Runs one memory instruction for the active lanes of `w`.
pub(super) fn exec(w: &mut Wave, i: &Inst, mem: &mut Mem, lds: &mut [u8]) -> Result<(), String> {
    let (op, u, d) = (i.op, &i.uses, i.defs.first());
    match op {
        _ if is_quad(op) => quad(w, op, u, d, mem, lds)?,
        _ if op.starts_with("global_atomic") || op.contains("_rtn_") => {
            let (dn, pair) = match d {
                Some(Opnd::P(PReg::V(n))) => (*n as usize, false),
                Some(Opnd::P(PReg::V2(n))) => (*n as usize, true),
                _ => return Err(format!("simulator: bad destination in {op}")),
            };
            let n = if pair { 8 } else { 4 };
            // Lanes take their turns in order, each read-modify-write atomic.
            for l in (0..LANES).filter(|l| w.exec >> l & 1 == 1) {
                let o = lane(w, &u[0], l);
                let (data, cmp) = if op.starts_with("ds_cmpst") {
                    (lane64(w, &u[2], l), Some(lane64(w, &u[1], l)))
                } else if let (true, Opnd::P(PReg::V2(r) | PReg::V4(r))) =
                    (op.contains("cmpswap"), &u[1])
                {
                    // The data tuple is {new, compare}, each 32 or 64 bits.
                    let k = n / 4;
                    let g = |i: usize| w.v[*r as usize + i][l] as u64;
                    let (new, c) =
                        if k == 1 { (g(0), g(1)) } else { (g(0) | g(1) << 32, g(2) | g(3) << 32) };
                    (new, Some(c))
                } else {
                    (lane64(w, &u[1], l), None)
                };
                let old = if op.starts_with("ds_") {
                    let s = lds
                        .get_mut(o as usize..o as usize + n)
                        .ok_or("LDS atomic out of bounds")?;
                    let mut b = [0u8; 8];
                    b[..n].copy_from_slice(s);
                    let old = u64::from_le_bytes(b);
                    let new = atomic(op, old, data, cmp)
                        .ok_or_else(|| format!("simulator: unknown {op}"))?;
                    s.copy_from_slice(&new.to_le_bytes()[..n]);
                    old
                } else {
                    let a = s64(w, &u[2]).wrapping_add(o as u64);
                    let old = mem.read_n(a, n)?;
                    let new = atomic(op, old, data, cmp)
                        .ok_or_else(|| format!("simulator: unknown {op}"))?;
                    mem.write_n(a, new, n)?;
                    old
                };
                w.v[dn][l] = old as u32;
                if pair {
                    w.v[dn + 1][l] = (old >> 32) as u32;
                }
            }
        }
        _ if op.starts_with("flat_") => {
            // Generic addresses: the memory map resolves them (global buffers only).
            let n = mem_width(op);
            let dst = match d {
                Some(Opnd::P(PReg::V(x))) => Some((*x as usize, false)),
                Some(Opnd::P(PReg::V2(x))) => Some((*x as usize, true)),
                _ => None,
            };
            for l in (0..LANES).filter(|l| w.exec >> l & 1 == 1) {
                let a = lane64(w, &u[0], l);
                if op.starts_with("flat_store") {
                    mem.write_n(a, lane64(w, &u[1], l), n)?;
                    continue;
                }
                let raw = mem.read_n(a, n)?;
                let r = match op {
                    "flat_load_sbyte" => raw as u8 as i8 as i32 as u32 as u64,
                    "flat_load_sshort" => raw as u16 as i16 as i32 as u32 as u64,
                    _ => raw,
                };
                let (dn, pair) =
                    dst.ok_or_else(|| format!("simulator: bad destination in {op}"))?;
                w.v[dn][l] = r as u32;
                if pair {
                    w.v[dn + 1][l] = (r >> 32) as u32;
                }
            }
        }
        _ if op.starts_with("scratch_") => {
            // Loads: [vaddr|off, saddr|off, offset]; stores: [vaddr|off, data, saddr|off,
            // offset]. The address is their sum in the lane's own private segment.
            let store = op.starts_with("scratch_store");
            let saddr = &u[if store { 2 } else { 1 }];
            let off = match u.last() {
                Some(Opnd::Offset(n)) => *n as usize,
                _ => 0,
            };
            let n = mem_width(op);
            for l in (0..LANES).filter(|l| w.exec >> l & 1 == 1) {
                let part = |o: &Opnd| match o {
                    Opnd::P(PReg::V(_)) => lane(w, o, l) as usize,
                    Opnd::P(PReg::S(_)) => s32(w, o) as usize,
                    _ => 0,
                };
                let at = part(&u[0]) + part(saddr) + off;
                let len = w.private[l].len();
                if at + n > len {
                    return Err(format!(
                        "private access of {n} bytes at {at} out of bounds ({len} bytes)"
                    ));
                }
                if store {
                    let x = lane64(w, &u[1], l);
                    w.private[l][at..at + n].copy_from_slice(&x.to_le_bytes()[..n]);
                    continue;
                }
                let mut b = [0u8; 8];
                b[..n].copy_from_slice(&w.private[l][at..at + n]);
                let raw = u64::from_le_bytes(b);
                let x = match op {
                    "scratch_load_sbyte" => raw as u8 as i8 as i32 as u32 as u64,
                    "scratch_load_sshort" => raw as u16 as i16 as i32 as u32 as u64,
                    _ => raw,
                };
                match d {
                    Some(Opnd::P(PReg::V(dn))) => w.v[*dn as usize][l] = x as u32,
                    Some(Opnd::P(PReg::V2(dn))) => {
                        w.v[*dn as usize][l] = x as u32;
                        w.v[*dn as usize + 1][l] = (x >> 32) as u32;
                    }
                    _ => return Err(format!("simulator: bad destination in {op}")),
                }
            }
        }
        _ if op.starts_with("global_store") || op.starts_with("ds_write") => {
            let n = mem_width(op);
            for l in (0..LANES).filter(|l| w.exec >> l & 1 == 1) {
                let (o, x) = (lane(w, &u[0], l), lane64(w, &u[1], l));
                if op.starts_with("ds_") {
                    let s =
                        lds.get_mut(o as usize..o as usize + n).ok_or("LDS write out of bounds")?;
                    s.copy_from_slice(&x.to_le_bytes()[..n]);
                } else {
                    mem.write_n(s64(w, &u[2]).wrapping_add(o as u64), x, n)?;
                }
            }
        }
        _ => return Err(format!("simulator: unknown instruction {op}")),
    }
    Ok(())
}

/// The 16-byte accesses of four consecutive VGPRs (vector loads and stores).
fn is_quad(op: &str) -> bool {
    matches!(op, "global_load_dwordx4" | "global_store_dwordx4" | "ds_read_b128" | "ds_write_b128")
}

/// Runs a 16-byte load or store: loads `[vaddr, saddr]` (global) or `[addr]` (LDS) into
/// `v[d:d+3]`; stores `[vaddr, data, saddr]` or `[addr, data]` from `v[data:data+3]`.
fn quad(
    w: &mut Wave,
    op: &str,
    u: &[Opnd],
    d: Option<&Opnd>,
    mem: &mut Mem,
    lds: &mut [u8],
) -> Result<(), String> {
    let store = op.contains("store") || op.contains("write");
    let local = op.starts_with("ds_");
    let regs = match (store, d, u.get(1)) {
        (false, Some(Opnd::P(PReg::V4(n))), _) | (true, _, Some(Opnd::P(PReg::V4(n)))) => {
            *n as usize
        }
        _ => return Err(format!("simulator: bad registers in {op}")),
    };
    for l in (0..LANES).filter(|l| w.exec >> l & 1 == 1) {
        let o = lane(w, &u[0], l);
        for k in 0..4usize {
            if local {
                let at = o as usize + 4 * k;
                let s = lds.get_mut(at..at + 4).ok_or("LDS access out of bounds")?;
                if store {
                    s.copy_from_slice(&w.v[regs + k][l].to_le_bytes());
                } else {
                    w.v[regs + k][l] = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                }
            } else {
                let base = s64(w, &u[if store { 2 } else { 1 }]);
                let a = base.wrapping_add(o as u64 + 4 * k as u64);
                if store {
                    mem.write_n(a, w.v[regs + k][l] as u64, 4)?;
                } else {
                    w.v[regs + k][l] = mem.read_n(a, 4)? as u32;
                }
            }
        }
    }
    Ok(())
}
