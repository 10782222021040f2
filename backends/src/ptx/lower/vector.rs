//! Vector values in the memory form ([`kiln_passes::vectors::VectorLowering::Memory`]): the
//! lanes of a vector live in one register each, and vector loads and stores become `ld.v2`
//! / `ld.v4` and `st.v2` / `st.v4` of at most 16 bytes each (`f32x8` is two `v4`s). Lane-wise
//! arithmetic is not lowered here: the build driver turns it into scalar code first.

use kiln_ir::{Expr, ExprNode, Scalar, Var};

use super::super::regs::{mem_ty, Class, Reg, Val};
use super::{st_ty, Binding, Lower, Mem, R};

/// Lanes per `ld`/`st` instruction: 16 bytes at most, and 4 lanes at most.
fn chunk(elem: Scalar) -> usize {
    (16 / elem.size_bytes().max(1)).clamp(1, 4)
}

impl Lower<'_> {
    /// The lanes of a vector expression, one value each.
    pub(super) fn vexpr(&mut self, e: &Expr) -> R<Vec<Val>> {
        match e.node() {
            ExprNode::Var(v) => match self.lookup(v.name())? {
                Binding::Vector(lanes) => Ok(lanes.clone()),
                _ => Err(format!("`{}` is not a vector", v.name())),
            },
            ExprNode::VecLoad { buf, index, lanes } => self.vload(buf, index, *lanes),
            ExprNode::Vector { elems, .. } if elems.len() == 1 => {
                let x = self.expr(&elems[0], None)?;
                let x = self.snapshot(x);
                Ok(vec![x; e.ty().lanes() as usize])
            }
            ExprNode::Vector { elems, .. } => elems
                .iter()
                .map(|x| {
                    let v = self.expr(x, None)?;
                    Ok(self.snapshot(v))
                })
                .collect(),
            ExprNode::Insert { a, lane, b } => {
                let mut lanes = self.vexpr(a)?;
                let x = self.expr(b, None)?;
                let x = self.snapshot(x);
                match lanes.get_mut(*lane as usize) {
                    Some(slot) => *slot = x,
                    None => return Err(format!("lane {lane} of {a}")),
                }
                Ok(lanes)
            }
            _ => Err(format!(
                "lane-wise vector operation `{e}`: lower vectors with \
                 kiln_passes::vectors::lower_vectors(.., Memory) first (the build driver does)"
            )),
        }
    }

    fn vector_mem(&self, buf: &Var) -> R<Mem> {
        let m = self.mem(buf.name())?;
        if m.elem == Scalar::Bool {
            return Err("bool elements in memory".into());
        }
        Ok(m)
    }

    /// `vloadN(buf, index)`: one `ld.vK` per chunk of lanes, each at its byte offset.
    fn vload(&mut self, buf: &Var, index: &Expr, lanes: u8) -> R<Vec<Val>> {
        let m = self.vector_mem(buf)?;
        let addr = self.addr(&m, index)?;
        let per = chunk(m.elem);
        let mut out = Vec::with_capacity(lanes as usize);
        for start in (0..lanes as usize).step_by(per) {
            let n = per.min(lanes as usize - start);
            let regs: Vec<_> = (0..n).map(|_| self.fresh(Class::of(m.elem))).collect();
            let list = RegList(&regs);
            let at = addr.plus(start * m.elem.size_bytes());
            if n == 1 {
                self.ins(format_args!("ld{}.{} {list}, {at}", m.space, mem_ty(m.elem)));
            } else {
                self.ins(format_args!("ld{}.v{n}.{} {{{list}}}, {at}", m.space, mem_ty(m.elem)));
            }
            out.extend(regs.into_iter().map(Val::Reg));
        }
        Ok(out)
    }

    /// `vstore(buf, index, value)`: one `st.vK` per chunk of lanes.
    pub(super) fn vstore(&mut self, buf: &Var, index: &Expr, value: &Expr) -> R<()> {
        let m = self.vector_mem(buf)?;
        let addr = self.addr(&m, index)?;
        let lanes = self.vexpr(value)?;
        let regs: Vec<_> = lanes.into_iter().map(|v| self.reg(v, Class::of(m.elem))).collect();
        let per = chunk(m.elem);
        for (c, part) in regs.chunks(per).enumerate() {
            let list = RegList(part);
            let at = addr.plus(c * per * m.elem.size_bytes());
            if part.len() == 1 {
                self.ins(format_args!("st{}.{} {at}, {list}", m.space, st_ty(m.elem)));
            } else {
                let n = part.len();
                self.ins(format_args!("st{}.v{n}.{} {at}, {{{list}}}", m.space, st_ty(m.elem)));
            }
        }
        Ok(())
    }
}

/// Registers written `a, b, c` (into the instruction, not through a `String` each).
struct RegList<'a>(&'a [Reg]);

impl std::fmt::Display for RegList<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            r.fmt(f)?;
        }
        Ok(())
    }
}
