//! Atomics on global and local memory, returning the old value: gfx9 `global_atomic_*`
//! (with `glc`) and `ds_*_rtn_*`. gfx900 has no global f32 atomic add, so that one is a
//! compare-and-swap loop in which each lane retries until its swap succeeds.

use kiln_ir::{AddrSpace, AtomicOp, Expr, ExprNode, Scalar, Var};

use super::{hi, is_wide, lo, unsupported, Isel, Val};
use crate::amdgpu::mir::{Opnd, RegClass};
use crate::amdgpu::Error;

/// The gfx9 mnemonic of an atomic on `elem` in local (`ds`) or global memory.
fn mnemonic(op: AtomicOp, elem: Scalar, local: bool) -> &'static str {
    let w = is_wide(elem);
    let s = elem.is_signed();
    macro_rules! pick {
        ($l32:expr, $l64:expr, $g32:expr, $g64:expr) => {
            match (local, w) {
                (true, false) => $l32,
                (true, true) => $l64,
                (false, false) => $g32,
                (false, true) => $g64,
            }
        };
    }
    match op {
        AtomicOp::Add if elem == Scalar::F32 => "ds_add_rtn_f32",
        AtomicOp::Add => {
            pick!("ds_add_rtn_u32", "ds_add_rtn_u64", "global_atomic_add", "global_atomic_add_x2")
        }
        AtomicOp::Sub => {
            pick!("ds_sub_rtn_u32", "ds_sub_rtn_u64", "global_atomic_sub", "global_atomic_sub_x2")
        }
        AtomicOp::Min if s => {
            pick!("ds_min_rtn_i32", "ds_min_rtn_i64", "global_atomic_smin", "global_atomic_smin_x2")
        }
        AtomicOp::Min => {
            pick!("ds_min_rtn_u32", "ds_min_rtn_u64", "global_atomic_umin", "global_atomic_umin_x2")
        }
        AtomicOp::Max if s => {
            pick!("ds_max_rtn_i32", "ds_max_rtn_i64", "global_atomic_smax", "global_atomic_smax_x2")
        }
        AtomicOp::Max => {
            pick!("ds_max_rtn_u32", "ds_max_rtn_u64", "global_atomic_umax", "global_atomic_umax_x2")
        }
        AtomicOp::And => {
            pick!("ds_and_rtn_b32", "ds_and_rtn_b64", "global_atomic_and", "global_atomic_and_x2")
        }
        AtomicOp::Or => {
            pick!("ds_or_rtn_b32", "ds_or_rtn_b64", "global_atomic_or", "global_atomic_or_x2")
        }
        AtomicOp::Xor => {
            pick!("ds_xor_rtn_b32", "ds_xor_rtn_b64", "global_atomic_xor", "global_atomic_xor_x2")
        }
        AtomicOp::Xchg => pick!(
            "ds_wrxchg_rtn_b32",
            "ds_wrxchg_rtn_b64",
            "global_atomic_swap",
            "global_atomic_swap_x2"
        ),
        AtomicOp::CmpXchg => pick!(
            "ds_cmpst_rtn_b32",
            "ds_cmpst_rtn_b64",
            "global_atomic_cmpswap",
            "global_atomic_cmpswap_x2"
        ),
    }
}

impl Isel<'_> {
    pub(super) fn atomic(
        &mut self,
        op: AtomicOp,
        result: Option<&Var>,
        args: &[Expr],
    ) -> Result<(), Error> {
        let (Some(ExprNode::Var(buf)), Some(index), Some(value)) =
            (args.first().map(|a| a.node()), args.get(1), args.last())
        else {
            return unsupported(format!("`{}` without a buffer, index and value", op.name()));
        };
        let elem = buf.ty().elem().unwrap_or(Scalar::I32);
        let size = elem.size_bytes() as u32;
        let wide = is_wide(elem);
        let local = buf.ty().addr_space() == Some(AddrSpace::Local);
        let as_v = |me: &mut Self, x: Val| if wide { me.w(x) } else { me.vgpr(x) };
        let cmp = match (op, args.get(2)) {
            (AtomicOp::CmpXchg, Some(c)) => {
                let c = self.expr(c)?;
                Some(as_v(self, c))
            }
            _ => None,
        };
        let v = self.expr(value)?;
        let v = as_v(self, v);
        let d = if wide { self.v2() } else { self.v() };
        if local {
            let base = *self.lds.get(buf).ok_or_else(|| {
                Error::Unsupported(format!("atomic on `{}` (not a local array)", buf.name()))
            })?;
            let a = self.offset(index, size, base, false)?;
            let mut uses = vec![a];
            uses.extend(cmp);
            uses.push(v);
            self.emit(mnemonic(op, elem, true), vec![d.clone()], uses);
            self.emit("s_waitcnt", vec![], vec![Opnd::Text("lgkmcnt(0)")]);
        } else {
            let (base, _) =
                self.params.get(buf).cloned().ok_or_else(|| {
                    Error::Unsupported(format!("atomic through `{}`", buf.name()))
                })?;
            let o = self.offset(index, size, 0, false)?;
            if elem == Scalar::F32 {
                self.f32_add_loop(&d, &o, &v, &base);
            } else {
                let data = match cmp {
                    // The data tuple of a compare-and-swap is {new, compare}.
                    Some(c) if wide => {
                        let t = self.vreg(RegClass::V4);
                        let part = |k: u8| match &t {
                            Opnd::R(r) => Opnd::Half(*r, k),
                            other => other.clone(),
                        };
                        for (k, x) in [lo(&v), hi(&v), lo(&c), hi(&c)].into_iter().enumerate() {
                            self.emit("v_mov_b32", vec![part(k as u8)], vec![x]);
                        }
                        t
                    }
                    Some(c) => self.pair(v, c),
                    None => v,
                };
                self.emit(
                    mnemonic(op, elem, false),
                    vec![d.clone()],
                    vec![o, data, base, Opnd::Text(" glc")],
                );
                self.emit("s_waitcnt", vec![], vec![Opnd::Text("vmcnt(0)")]);
            }
        }
        if let Some(r) = result {
            self.env.insert(r.clone(), Val { o: d, s: false });
        }
        Ok(())
    }

    /// `d = old; mem += v` for f32 in global memory by a compare-and-swap loop: every lane
    /// retries with the value it saw until its swap succeeds.
    fn f32_add_loop(&mut self, d: &Opnd, off: &Opnd, v: &Opnd, base: &Opnd) {
        self.emit("global_load_dword", vec![d.clone()], vec![off.clone(), base.clone()]);
        self.emit("s_waitcnt", vec![], vec![Opnd::Text("vmcnt(0)")]);
        let pending = self.vv("v_mov_b32", vec![Opnd::Imm(1)]);
        let p = Val { o: pending.clone(), s: false };
        let (d, off, v, base) = (d.clone(), off.clone(), v.clone(), base.clone());
        let r = self.lower_loop(
            false,
            |_| Ok(p),
            |me| {
                let new = me.vv("v_add_f32", vec![d.clone(), v.clone()]);
                let data = me.pair(new, d.clone());
                let got = me.v();
                me.emit(
                    "global_atomic_cmpswap",
                    vec![got.clone()],
                    vec![off, data, base, Opnd::Text(" glc")],
                );
                me.emit("s_waitcnt", vec![], vec![Opnd::Text("vmcnt(0)")]);
                let m = me.mm("v_cmp_ne_u32_e64", vec![got.clone(), d.clone()]);
                me.emit(
                    "v_cndmask_b32_e64",
                    vec![pending.clone()],
                    vec![Opnd::Imm(0), Opnd::Imm(1), m],
                );
                me.emit("v_mov_b32", vec![d.clone()], vec![got]);
                Ok(())
            },
        );
        // The closures above cannot fail.
        debug_assert!(r.is_ok());
    }
}
