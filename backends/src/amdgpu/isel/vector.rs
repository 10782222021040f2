//! Vector memory accesses (the GPU form of vector lowering, `VectorLowering::Memory`): what
//! reaches selection is `let t: f32x4 = vload4(p, i);`, lanes read as `extract(t, k)`, and
//! `vstore(p, i, f32x4(a, b, c, d))`; everything else is one scalar per lane already.
//!
//! Vectors of 32-bit lanes in global or constant buffers and local arrays move whole: 2
//! lanes with `global_load_dwordx2`/`ds_read_b64` into a VGPR pair, 4 lanes with
//! `global_load_dwordx4`/`ds_read_b128` into four consecutive VGPRs (8 lanes: two of
//! those), and the matching stores. Other lane types and memories (8/16/64-bit lanes,
//! generic pointers, private arrays) are one element access per lane.

use kiln_ir::{AddrSpace, Expr, ExprNode, Scalar, Var};

use super::{Isel, Val, VECTORS};
use crate::amdgpu::mir::{Opnd, RegClass};
use crate::amdgpu::Error;

/// Part `k` of a multi-register virtual register.
fn part(t: &Opnd, k: u8) -> Opnd {
    match t {
        Opnd::R(r) => Opnd::Half(*r, k),
        other => other.clone(),
    }
}

impl Isel<'_> {
    /// True when a vector access through `buf` moves whole (see the module docs).
    fn whole(&self, buf: &Var) -> bool {
        let elem = buf.ty().elem().unwrap_or(Scalar::Bool);
        let local = buf.ty().addr_space() == Some(AddrSpace::Local) && self.lds.contains_key(buf);
        let global = matches!(buf.ty().addr_space(), Some(AddrSpace::Global | AddrSpace::Constant))
            && self.params.contains_key(buf);
        elem.bits() == 32 && elem.is_arith() && (local || global)
    }

    /// The byte address operands of chunk `c` (of `chunk` lanes) at element `index`.
    fn chunk_address(
        &mut self,
        buf: &Var,
        index: &Expr,
        c: u32,
        chunk: u32,
    ) -> Result<Opnd, Error> {
        let base = if buf.ty().addr_space() == Some(AddrSpace::Local) { self.lds[buf] } else { 0 };
        self.offset(index, 4, base + c * chunk * 4, false)
    }

    /// `vloadN(buf, index)`: the lanes, each a value.
    pub(super) fn vec_load(
        &mut self,
        buf: &Var,
        index: &Expr,
        lanes: u8,
    ) -> Result<Vec<Val>, Error> {
        if !self.whole(buf) {
            let t = index.ty().scalar().unwrap_or(Scalar::U32);
            return (0..lanes as i128)
                .map(|k| {
                    let i = if k == 0 { index.clone() } else { index + Expr::int(t, k) };
                    self.load(buf, &i, false)
                })
                .collect();
        }
        let chunk = lanes.min(4) as u32;
        let local = buf.ty().addr_space() == Some(AddrSpace::Local);
        let (op, class) = match (chunk, local) {
            (2, false) => ("global_load_dwordx2", RegClass::V2),
            (2, true) => ("ds_read_b64", RegClass::V2),
            (_, false) => ("global_load_dwordx4", RegClass::V4),
            (_, true) => ("ds_read_b128", RegClass::V4),
        };
        let mut out = Vec::new();
        for c in 0..lanes as u32 / chunk {
            let a = self.chunk_address(buf, index, c, chunk)?;
            let d = self.vreg(class);
            if local {
                self.emit(op, vec![d.clone()], vec![a]);
                self.emit("s_waitcnt", vec![], vec![Opnd::Text("lgkmcnt(0)")]);
            } else {
                let (base, _) = self.params[buf].clone();
                self.emit(op, vec![d.clone()], vec![a, base]);
                self.emit("s_waitcnt", vec![], vec![Opnd::Text("vmcnt(0)")]);
            }
            // Each lane gets its own VGPR: the rest of selection works on single registers.
            for k in 0..chunk as u8 {
                let v = self.v();
                self.emit("v_mov_b32", vec![v.clone()], vec![part(&d, k)]);
                out.push(Val { o: v, s: false });
            }
        }
        Ok(out)
    }

    /// `extract(a, lane)`, where `a` is a vector load or a variable bound to one.
    pub(super) fn extract(&mut self, a: &Expr, lane: u8) -> Result<Val, Error> {
        let lanes = match a.node() {
            ExprNode::Var(v) => self.vecs.get(v).cloned(),
            ExprNode::VecLoad { buf, index, lanes } => Some(self.vec_load(buf, index, *lanes)?),
            _ => None,
        };
        lanes
            .and_then(|ls| ls.get(lane as usize).cloned())
            .ok_or_else(|| Error::Unsupported(VECTORS.into()))
    }

    /// The lanes of the stored value `e`.
    fn lanes_of(&mut self, e: &Expr) -> Result<Vec<Val>, Error> {
        let n = e.ty().lanes() as usize;
        match e.node() {
            ExprNode::Vector { elems, .. } => {
                let ls: Vec<Val> = elems.iter().map(|x| self.expr(x)).collect::<Result<_, _>>()?;
                Ok(if ls.len() == 1 { vec![ls[0].clone(); n] } else { ls })
            }
            _ => (0..n as u8).map(|k| self.extract(e, k)).collect(),
        }
    }

    /// `vstore(buf, index, value);`
    pub(super) fn vec_store(&mut self, buf: &Var, index: &Expr, value: &Expr) -> Result<(), Error> {
        if !self.whole(buf) {
            // One element store per lane, each lane evaluated first (as the interpreter
            // evaluates the whole value before storing).
            let ls = self.lanes_of(value)?;
            let t = index.ty().scalar().unwrap_or(Scalar::U32);
            for (k, x) in ls.into_iter().enumerate() {
                let i = if k == 0 { index.clone() } else { index + Expr::int(t, k as i128) };
                self.store_val(buf, &i, x)?;
            }
            return Ok(());
        }
        let ls = self.lanes_of(value)?;
        let lanes = ls.len() as u32;
        let chunk = lanes.min(4);
        let local = buf.ty().addr_space() == Some(AddrSpace::Local);
        let (op, class) = match (chunk, local) {
            (2, false) => ("global_store_dwordx2", RegClass::V2),
            (2, true) => ("ds_write_b64", RegClass::V2),
            (_, false) => ("global_store_dwordx4", RegClass::V4),
            (_, true) => ("ds_write_b128", RegClass::V4),
        };
        for (c, group) in ls.chunks(chunk as usize).enumerate() {
            let t = self.vreg(class);
            for (k, x) in group.iter().enumerate() {
                self.emit("v_mov_b32", vec![part(&t, k as u8)], vec![x.o.clone()]);
            }
            let a = self.chunk_address(buf, index, c as u32, chunk)?;
            if local {
                self.emit(op, vec![], vec![a, t]);
            } else {
                let (base, _) = self.params[buf].clone();
                self.emit(op, vec![], vec![a, t, base]);
            }
        }
        Ok(())
    }
}
