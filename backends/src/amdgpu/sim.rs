//! A wave64 simulator for the gfx9 subset kiln emits: SGPRs, VGPRs, exec, scc, scalar and
//! vector memory, local (LDS) memory, and barriers across the waves of a work-group. It runs
//! the allocated machine IR of a [`Compiled`] kernel over an nd-range.
//!
//! Memory map: pointer argument `v` (its buffer, or its range of one) lives at address
//! `(v + 1) << 32`, the kernarg segment at
//! `0xffff << 32`. Every access is bounds-checked; an access outside a buffer is an error.

use std::collections::HashMap;

use kiln_ir::launch::{default_local_size, Arg, Buffer, NdRange};
use kiln_ir::{Imm, Kernel};

use super::mir::{Inst, Opnd, PReg, GROUP_ID_SGPR};
use super::Compiled;

mod memory;
mod ops;
use ops::{salu, valu, vcmp};

const KARG: u64 = 0xffff << 32;
const LANES: usize = 64;
/// Most instructions one wave may execute (runaway loops become errors).
pub const STEP_LIMIT: u64 = 20_000_000;

struct Wave {
    s: [u32; 128],
    v: Vec<[u32; LANES]>,
    exec: u64,
    vcc: u64,
    scc: bool,
    /// Each lane's private segment (VGPR spill slots).
    private: Vec<Vec<u8>>,
    pc: usize,
    done: bool,
}

struct Mem<'a> {
    bufs: Vec<Vec<u8>>,
    /// The address spaces of the pointer arguments: `views[v]` is `(buffer, first byte, bytes)`
    /// and pointer argument `v` addresses it as `(v + 1) << 32` plus a byte offset, so that a
    /// ranged argument ([`Arg::Range`]) reaches its range only.
    views: Vec<(usize, usize, usize)>,
    karg: &'a [u8],
}

impl Mem<'_> {
    fn slot(&mut self, addr: u64, n: usize) -> Result<&mut [u8], String> {
        let (hi, lo) = (addr >> 32, (addr & 0xffff_ffff) as usize);
        let v = (hi as usize).wrapping_sub(1);
        let &(i, first, len) =
            self.views.get(v).ok_or_else(|| format!("address {addr:#x} maps to no buffer"))?;
        let buf =
            self.bufs.get_mut(i).ok_or_else(|| format!("address {addr:#x} maps to no buffer"))?;
        if lo + n > len {
            return Err(format!("access at byte {lo} of buffer {i} out of bounds ({len} bytes)"));
        }
        buf.get_mut(first + lo..first + lo + n)
            .ok_or_else(|| format!("access at byte {lo} of buffer {i} out of bounds ({len} bytes)"))
    }
    fn read(&mut self, addr: u64) -> Result<u32, String> {
        if addr & !0xffff_ffff == KARG {
            let lo = (addr & 0xffff_ffff) as usize;
            let s: [u8; 4] = self
                .karg
                .get(lo..lo + 4)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| format!("kernarg read at {lo:#x}"))?;
            return Ok(u32::from_le_bytes(s));
        }
        self.read_n(addr, 4).map(|v| v as u32)
    }
    /// Reads `n` bytes (1, 2, 4 or 8), zero-extended.
    fn read_n(&mut self, addr: u64, n: usize) -> Result<u64, String> {
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(self.slot(addr, n)?);
        Ok(u64::from_le_bytes(b))
    }
    fn write_n(&mut self, addr: u64, v: u64, n: usize) -> Result<(), String> {
        self.slot(addr, n)?.copy_from_slice(&v.to_le_bytes()[..n]);
        Ok(())
    }
}

#[allow(clippy::needless_range_loop)]
/// Runs a compiled kernel over `range` with the interpreter's argument conventions, updating
/// `buffers` in place.
pub fn run(
    c: &Compiled,
    kernel: &Kernel,
    range: &NdRange,
    args: &[Arg],
    buffers: &mut [Buffer],
) -> Result<(), String> {
    let f = &c.func;
    let local = range.local.unwrap_or_else(|| default_local_size(range.global));
    for d in 0..3 {
        if local[d] == 0 || !range.global[d].is_multiple_of(local[d]) {
            return Err("global size must be a multiple of the local size".into());
        }
    }
    // Kernarg segment.
    let mut karg = vec![0u8; f.kernarg_bytes as usize];
    let mut views = Vec::new();
    for (n, ((p, a), &off)) in kernel.params().iter().zip(args).zip(&f.param_offsets).enumerate() {
        let off = off as usize;
        match a {
            Arg::Buffer(_) | Arg::Range { .. } => {
                let b = a.buffer().copied().unwrap_or_default();
                let buf = buffers.get(b).ok_or_else(|| format!("argument {n}: no buffer {b}"))?;
                kiln_ir::launch::check_range(n, p.name(), a, buf.len())?;
                let size = buf.elem().size_bytes();
                let (first, len) = a.window(buf.len()).unwrap_or_default();
                views.push((b, first * size, len * size));
                karg[off..off + 8].copy_from_slice(&((views.len() as u64) << 32).to_le_bytes())
            }
            Arg::Scalar(imm) => {
                // 64-bit values take 8 bytes; the rest 4 (8/16-bit integers extended, f16
                // as its bits), as the backend's entry code reads them.
                let wide = p.ty().scalar().is_some_and(super::isel::is_wide);
                let bits = match imm {
                    Imm::Int(_, b) => *b,
                    _ => imm.to_bits(),
                };
                let n = if wide { 8 } else { 4 };
                karg[off..off + n].copy_from_slice(&bits.to_le_bytes()[..n]);
            }
        }
    }
    let h = f.hidden_offset as usize;
    for d in 0..3 {
        let vals = [range.offset[d], local[d], range.global[d], range.global[d] / local[d]];
        for (k, v) in vals.iter().enumerate() {
            let o = h + 4 * (3 * k + d);
            karg[o..o + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
    let labels: HashMap<&Opnd, usize> = f
        .insts
        .iter()
        .enumerate()
        .filter(|(_, i)| i.op == "label")
        .map(|(n, i)| (&i.uses[0], n))
        .collect();
    let mut mem =
        Mem { bufs: buffers.iter().map(|b| b.as_bytes().to_vec()).collect(), views, karg: &karg };
    let groups = [0, 1, 2].map(|d| range.global[d] / local[d]);
    let lanes = (local[0] * local[1] * local[2]) as usize;
    for gz in 0..groups[2] {
        for gy in 0..groups[1] {
            for gx in 0..groups[0] {
                let mut lds = vec![0u8; f.lds_bytes as usize];
                let mut waves: Vec<Wave> = (0..lanes.div_ceil(LANES))
                    .map(|w| {
                        let mut s = [0u32; 128];
                        s[0] = KARG as u32;
                        s[1] = (KARG >> 32) as u32;
                        // s[2:3] flat scratch init and s7 the wave's private segment offset
                        // stay 0: each lane's private segment is its own buffer here.
                        let g = GROUP_ID_SGPR as usize;
                        s[g..g + 3].copy_from_slice(&[gx, gy, gz]);
                        let mut v = vec![[0u32; LANES]; f.num_vgprs.max(3) as usize];
                        let mut exec = 0u64;
                        for l in 0..LANES {
                            let id = w * LANES + l;
                            if id < lanes {
                                exec |= 1 << l;
                                let id = id as u32;
                                v[0][l] = id % local[0];
                                v[1][l] = (id / local[0]) % local[1];
                                v[2][l] = id / (local[0] * local[1]);
                            }
                        }
                        Wave {
                            s,
                            v,
                            exec,
                            vcc: 0,
                            scc: false,
                            private: vec![vec![0; f.scratch_bytes as usize]; LANES],
                            pc: 0,
                            done: false,
                        }
                    })
                    .collect();
                loop {
                    let mut at_barrier = 0;
                    for w in waves.iter_mut().filter(|w| !w.done) {
                        if step_until_yield(w, &f.insts, &labels, &mut mem, &mut lds)? {
                            at_barrier += 1;
                        }
                    }
                    let live = waves.iter().filter(|w| !w.done).count();
                    if live == 0 {
                        break;
                    }
                    if at_barrier != live {
                        return Err("barrier not reached by every wave of a work-group".into());
                    }
                }
            }
        }
    }
    for (b, data) in buffers.iter_mut().zip(mem.bufs) {
        *b = Buffer::from_bytes(b.elem(), data).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn s32(w: &Wave, o: &Opnd) -> u32 {
    match o {
        Opnd::P(PReg::S(n)) => w.s[*n as usize],
        Opnd::Imm(x) => *x,
        Opnd::M0 => u32::MAX,
        _ => panic!("not a 32-bit scalar operand: {o:?}"),
    }
}

fn s64(w: &Wave, o: &Opnd) -> u64 {
    match o {
        Opnd::P(PReg::S2(n)) => w.s[*n as usize] as u64 | (w.s[*n as usize + 1] as u64) << 32,
        Opnd::Exec => w.exec,
        Opnd::Vcc => w.vcc,
        Opnd::Imm(x) => *x as i32 as i64 as u64,
        _ => panic!("not a 64-bit scalar operand: {o:?}"),
    }
}

fn set64(w: &mut Wave, o: &Opnd, v: u64) {
    match o {
        Opnd::P(PReg::S2(n)) => {
            w.s[*n as usize] = v as u32;
            w.s[*n as usize + 1] = (v >> 32) as u32;
        }
        Opnd::Exec => w.exec = v,
        Opnd::Vcc => w.vcc = v,
        _ => panic!("not a 64-bit destination: {o:?}"),
    }
}

fn lane(w: &Wave, o: &Opnd, l: usize) -> u32 {
    match o {
        Opnd::P(PReg::V(n)) => w.v[*n as usize][l],
        _ => s32(w, o),
    }
}

/// A lane's operand as 64 bits: pairs whole, 32-bit registers zero-extended, masks as the
/// lane's bit (for `v_cndmask`), immediates sign-extended.
fn lane64(w: &Wave, o: &Opnd, l: usize) -> u64 {
    match o {
        Opnd::P(PReg::V2(n)) => w.v[*n as usize][l] as u64 | (w.v[*n as usize + 1][l] as u64) << 32,
        Opnd::P(PReg::V(n)) => w.v[*n as usize][l] as u64,
        Opnd::P(PReg::S(n)) => w.s[*n as usize] as u64,
        Opnd::P(PReg::S2(_)) | Opnd::Vcc | Opnd::Exec => s64(w, o),
        Opnd::Imm(x) => *x as i32 as i64 as u64,
        _ => s32(w, o) as u64,
    }
}

/// Runs a wave until it reaches a barrier (returns true) or the end (false).
/// The destination of an instruction that must have one (selection always gives it one).
fn dest<'a>(d: Option<&'a Opnd>, op: &str) -> Result<&'a Opnd, String> {
    d.ok_or_else(|| format!("`{op}` without a destination"))
}

fn step_until_yield(
    w: &mut Wave,
    code: &[Inst],
    labels: &HashMap<&Opnd, usize>,
    mem: &mut Mem,
    lds: &mut [u8],
) -> Result<bool, String> {
    let mut steps = 0u64;
    loop {
        steps += 1;
        if steps > STEP_LIMIT {
            return Err("step limit exceeded".into());
        }
        let i = &code[w.pc];
        w.pc += 1;
        let u = &i.uses;
        let d = i.defs.first();
        let op = i.op;
        let set_s = |w: &mut Wave, v: u32| match d {
            Some(Opnd::P(PReg::S(n))) => w.s[*n as usize] = v,
            // flat_scratch: the simulator's private segments need no base.
            Some(Opnd::M0 | Opnd::Text(_)) => {}
            o => panic!("bad scalar destination {o:?} in {op}"),
        };
        if let Some(cmp) = op.strip_prefix("s_cmp_").and_then(|c| c.strip_suffix("_u64")) {
            let (a, b) = (s64(w, &u[0]), s64(w, &u[1]));
            w.scc = if cmp == "eq" { a == b } else { a != b };
            continue;
        }
        if let Some(cmp) = op.strip_prefix("s_cmp_") {
            let (a, b) = (s32(w, &u[0]), s32(w, &u[1]));
            let (ai, bi) = (a as i32, b as i32);
            w.scc = match cmp {
                "eq_u32" => a == b,
                "lg_u32" => a != b,
                "lt_u32" => a < b,
                "le_u32" => a <= b,
                "gt_u32" => a > b,
                "ge_u32" => a >= b,
                "lt_i32" => ai < bi,
                "le_i32" => ai <= bi,
                "gt_i32" => ai > bi,
                "ge_i32" => ai >= bi,
                _ => return Err(format!("simulator: unknown {op}")),
            };
            continue;
        }
        if let Some(cmp) = op.strip_prefix("v_cmp_") {
            let cmp = cmp.trim_end_matches("_e64");
            let mut m = 0u64;
            for l in 0..LANES {
                if w.exec >> l & 1 == 0 {
                    continue;
                }
                let (a, b) = (lane64(w, &u[0], l), lane64(w, &u[1], l));
                let r = vcmp(cmp, a, b).ok_or_else(|| format!("simulator: unknown {op}"))?;
                m |= u64::from(r) << l;
            }
            set64(w, dest(d, op)?, m);
            continue;
        }
        if let Some(k) = carry_op(op) {
            // 32-bit add/sub with carry out (and in) per lane, in vcc.
            let mut carry = 0u64;
            let Some(Opnd::P(PReg::V(dn))) = d else {
                return Err(format!("simulator: bad destination in {op}"));
            };
            for l in (0..LANES).filter(|l| w.exec >> l & 1 == 1) {
                let (a, b) = (lane(w, &u[0], l) as u64, lane(w, &u[1], l) as u64);
                let cin = u.get(2).map_or(0, |c| s64(w, c) >> l & 1);
                let (r, c) = if k == 0 {
                    let r = a + b + cin;
                    (r as u32, r >> 32)
                } else {
                    let r = a.wrapping_sub(b).wrapping_sub(cin);
                    (r as u32, u64::from(a < b + cin))
                };
                w.v[*dn as usize][l] = r;
                carry |= c << l;
            }
            w.vcc = (w.vcc & !w.exec) | carry;
            continue;
        }
        match op {
            "label" | "s_waitcnt" => {}
            "s_endpgm" => {
                w.done = true;
                return Ok(false);
            }
            "s_barrier" => return Ok(true),
            "s_branch" => w.pc = labels[&u[0]],
            "s_cbranch_scc0" if !w.scc => w.pc = labels[&u[0]],
            "s_cbranch_scc1" if w.scc => w.pc = labels[&u[0]],
            "s_cbranch_execz" if w.exec == 0 => w.pc = labels[&u[0]],
            "s_cbranch_scc0" | "s_cbranch_scc1" | "s_cbranch_execz" => {}
            "s_load_dword" => {
                let a = s64(w, &u[0]).wrapping_add(s32(w, &u[1]) as u64);
                let v = mem.read(a)?;
                set_s(w, v);
            }
            "s_load_dwordx2" => {
                let a = s64(w, &u[0]).wrapping_add(s32(w, &u[1]) as u64);
                let v = mem.read(a)? as u64 | (mem.read(a + 4)? as u64) << 32;
                set64(w, dest(d, op)?, v);
            }
            "s_mov_b64" => {
                let v = s64(w, &u[0]);
                set64(w, dest(d, op)?, v);
            }
            "s_and_saveexec_b64" | "s_or_saveexec_b64" => {
                let (src, old) = (s64(w, &u[0]), w.exec);
                w.exec = if op == "s_and_saveexec_b64" { src & old } else { src | old };
                w.scc = w.exec != 0;
                set64(w, dest(d, op)?, old);
            }
            "s_xor_b64" | "s_or_b64" | "s_andn2_b64" | "s_and_b64" => {
                let (a, b) = (s64(w, &u[0]), s64(w, &u[1]));
                let r = match op {
                    "s_xor_b64" => a ^ b,
                    "s_or_b64" => a | b,
                    "s_and_b64" => a & b,
                    _ => a & !b,
                };
                w.scc = r != 0;
                set64(w, dest(d, op)?, r);
            }
            // 32-bit add/sub with the carry/borrow in SCC.
            "s_add_u32" | "s_addc_u32" | "s_sub_u32" | "s_subb_u32" => {
                let (a, b) = (s32(w, &u[0]) as u64, s32(w, &u[1]) as u64);
                let cin = u64::from(matches!(op, "s_addc_u32" | "s_subb_u32") && w.scc);
                let (r, c) = if op.starts_with("s_add") {
                    let r = a + b + cin;
                    (r as u32, r >> 32 != 0)
                } else {
                    (a.wrapping_sub(b).wrapping_sub(cin) as u32, a < b + cin)
                };
                w.scc = c;
                set_s(w, r);
            }
            "s_lshl_b64" | "s_lshr_b64" | "s_ashr_i64" | "s_not_b64" | "s_cselect_b64" => {
                let a = s64(w, &u[0]);
                let r = match op {
                    "s_not_b64" => !a,
                    "s_cselect_b64" => {
                        if w.scc {
                            a
                        } else {
                            s64(w, &u[1])
                        }
                    }
                    _ => {
                        let n = s32(w, &u[1]) & 63;
                        match op {
                            "s_lshl_b64" => a << n,
                            "s_lshr_b64" => a >> n,
                            _ => ((a as i64) >> n) as u64,
                        }
                    }
                };
                if op != "s_cselect_b64" {
                    w.scc = r != 0;
                }
                set64(w, dest(d, op)?, r);
            }
            "s_cselect_b32" => {
                let v = if w.scc { s32(w, &u[0]) } else { s32(w, &u[1]) };
                set_s(w, v);
            }
            // Lane access ignores exec.
            "v_readlane_b32" => {
                let l = s32(w, &u[1]) as usize % LANES;
                let v = lane(w, &u[0], l);
                set_s(w, v);
            }
            "v_writelane_b32" => {
                let (Some(Opnd::P(PReg::V(h))), l) = (d, s32(w, &u[1]) as usize % LANES) else {
                    return Err(format!("simulator: bad destination in {op}"));
                };
                w.v[*h as usize][l] = s32(w, &u[0]);
            }
            "v_readfirstlane_b32" => {
                let l = if w.exec == 0 { 0 } else { w.exec.trailing_zeros() as usize };
                let v = lane(w, &u[0], l);
                set_s(w, v);
            }
            _ if memory::is_memory(op) => memory::exec(w, i, mem, lds)?,
            _ if op.starts_with("s_") => {
                let a = s32(w, &u[0]);
                let b = u.get(1).map(|o| s32(w, o)).unwrap_or(0);
                let r = match op {
                    "s_mov_b32" => a,
                    "s_not_b32" => !a,
                    _ => salu(op, a, b).ok_or_else(|| format!("simulator: unknown {op}"))?,
                };
                set_s(w, r);
            }
            _ if op.starts_with("v_")
                || op.starts_with("global_load")
                || op.starts_with("ds_read") =>
            {
                let (dn, pair) = match d {
                    Some(Opnd::P(PReg::V(n))) => (*n as usize, false),
                    Some(Opnd::P(PReg::V2(n))) => (*n as usize, true),
                    _ => return Err(format!("simulator: bad destination in {op}")),
                };
                for l in (0..LANES).filter(|l| w.exec >> l & 1 == 1) {
                    let a = lane64(w, &u[0], l);
                    let r = if op.starts_with("global_load") || op.starts_with("ds_read") {
                        let n = mem_width(op);
                        let raw = if op.starts_with("ds_") {
                            let a = a as u32 as usize;
                            let s = lds.get(a..a + n).ok_or("LDS read out of bounds")?;
                            let mut b = [0u8; 8];
                            b[..n].copy_from_slice(s);
                            u64::from_le_bytes(b)
                        } else {
                            mem.read_n(s64(w, &u[1]).wrapping_add(a as u32 as u64), n)?
                        };
                        // Sign-extending loads.
                        match op {
                            "global_load_sbyte" | "ds_read_i8" => {
                                raw as u8 as i8 as i32 as u32 as u64
                            }
                            "global_load_sshort" | "ds_read_i16" => {
                                raw as u16 as i16 as i32 as u32 as u64
                            }
                            _ => raw,
                        }
                    } else {
                        let b = u.get(1).map(|o| lane64(w, o, l)).unwrap_or(0);
                        let c = u.get(2).map(|o| match o {
                            Opnd::P(PReg::S2(_)) | Opnd::Vcc => s64(w, o) >> l & 1,
                            _ => lane64(w, o, l),
                        });
                        valu(op, a, b, c.unwrap_or(0))
                            .ok_or_else(|| format!("simulator: unknown {op}"))?
                    };
                    w.v[dn][l] = r as u32;
                    if pair {
                        w.v[dn + 1][l] = (r >> 32) as u32;
                    }
                }
            }
            _ => return Err(format!("simulator: unknown instruction {op}")),
        }
    }
}

/// 0 for the add-with-carry ops, 1 for the subtract-with-borrow ops.
fn carry_op(op: &str) -> Option<u8> {
    match op {
        "v_add_co_u32" | "v_addc_co_u32" => Some(0),
        "v_sub_co_u32" | "v_subb_co_u32" => Some(1),
        _ => None,
    }
}

/// Bytes moved by a memory instruction.
fn mem_width(op: &str) -> usize {
    if op.ends_with("byte") || op.ends_with("8") {
        1
    } else if op.ends_with("short") || op.ends_with("16") {
        2
    } else if op.ends_with("x2") || op.ends_with("b64") {
        8
    } else {
        4
    }
}
