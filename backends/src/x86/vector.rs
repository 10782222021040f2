//! Vector memory accesses (the GPU form of vector lowering, `VectorLowering::Memory`, which
//! the x86 target takes so that the alignment check survives): what reaches code generation
//! is `let t: f32x4 = vload4(p, i);`, lanes read as `extract(t, k)`, and
//! `vstore(p, i, f32x4(a, b, c, d))`; everything else is one scalar per lane already.
//!
//! A vector access is checked as the interpreter checks it, in its order: the first element
//! in bounds, the index a multiple of the lane count, the last lane in bounds (each a fault
//! with the interpreter's message), then one element access per lane. Each lane of a loaded
//! vector lives in its own frame slot, named `t#k` in scope (no IR name contains `#`).

use iced_x86::code_asm::*;
use kiln_ir::{Expr, ExprNode, Scalar, Var};

use super::gen::{AsmResult, Binding, Gen, Site};
use super::rt;

impl Gen {
    /// The scope name of lane `k` of vector variable `v`.
    fn lane_name(v: &Var, k: u8) -> String {
        format!("{}#{k}", v.name())
    }

    /// Checks the vector access of `lanes` lanes of memory `mem` at the index in `rax`
    /// (unless bounds checks are off) and leaves the memory's base in `rdx` and the index
    /// in `rax`.
    fn vector_address(
        &mut self,
        mem: u32,
        lanes: u8,
        what: &'static str,
        signed: bool,
    ) -> AsmResult<()> {
        self.address(mem, what, signed)?;
        if !self.checked {
            return Ok(());
        }
        let l = self.fault(rt::ERR_MISALIGNED, Site::Align { what, mem, lanes }, true);
        self.a.test(rax, (lanes - 1) as i32)?;
        self.a.jne(l)?;
        self.a.add(rax, (lanes - 1) as i32)?;
        self.address(mem, what, signed)?;
        self.a.sub(rax, (lanes - 1) as i32)
    }

    /// Loads `vloadN(buf, index)` into fresh frame slots, one per lane.
    pub(crate) fn vec_load(&mut self, buf: &Var, index: &Expr, lanes: u8) -> AsmResult<Vec<i32>> {
        let mem = self.lookup_mem(buf);
        self.expr(index)?;
        let signed = index.ty().scalar().is_some_and(Scalar::is_signed);
        self.vector_address(mem, lanes, "vector load", signed)?;
        let ix = self.new_slot();
        self.a.mov(qword_ptr(r13 + ix), rax)?;
        let mut slots = Vec::new();
        for k in 0..lanes as i32 {
            self.a.mov(rax, qword_ptr(r13 + ix))?;
            if k > 0 {
                self.a.add(rax, k)?;
            }
            self.load_element(mem)?;
            let s = self.new_slot();
            self.a.mov(qword_ptr(r13 + s), rax)?;
            slots.push(s);
        }
        Ok(slots)
    }

    /// The frame slots of the vector `e`: a vector load, or a variable bound to one.
    fn vec_slots(&mut self, e: &Expr) -> AsmResult<Vec<i32>> {
        match e.node() {
            ExprNode::VecLoad { buf, index, lanes } => self.vec_load(buf, index, *lanes),
            ExprNode::Var(v) => Ok((0..e.ty().lanes())
                .map(|k| match self.lookup_name(&Self::lane_name(v, k)) {
                    Some(Binding::Slot(s)) => *s,
                    // The verifier and the Memory lowering guarantee the lanes are bound.
                    _ => 0,
                })
                .collect()),
            // `compile_verified` applies the Memory lowering itself, which leaves no other
            // vector expression.
            _ => unreachable!("a vector expression outside the Memory lowering: {e}"),
        }
    }

    /// `let var = value;` for a vector `var`.
    pub(crate) fn vec_let(&mut self, var: &Var, value: &Expr) -> AsmResult<()> {
        let slots = self.vec_slots(value)?;
        for (k, s) in slots.into_iter().enumerate() {
            self.bind_name(Self::lane_name(var, k as u8), Binding::Slot(s));
        }
        Ok(())
    }

    /// `extract(a, lane)` into `rax`.
    pub(crate) fn extract(&mut self, a: &Expr, lane: u8) -> AsmResult<()> {
        let slots = self.vec_slots(a)?;
        let s = slots.get(lane as usize).copied().unwrap_or(0);
        self.a.mov(rax, qword_ptr(r13 + s))
    }

    /// `vstore(buf, index, value);`: the index, then every lane, then the checks and the
    /// element stores.
    pub(crate) fn vec_store(&mut self, buf: &Var, index: &Expr, value: &Expr) -> AsmResult<()> {
        let mem = self.lookup_mem(buf);
        let lanes = value.ty().lanes();
        self.expr(index)?;
        let ix = self.new_slot();
        self.a.mov(qword_ptr(r13 + ix), rax)?;
        let slots = match value.node() {
            ExprNode::Vector { elems, .. } => {
                let mut slots = Vec::new();
                for x in elems {
                    self.expr(x)?;
                    let s = self.new_slot();
                    self.a.mov(qword_ptr(r13 + s), rax)?;
                    slots.push(s);
                }
                if slots.len() == 1 {
                    vec![slots[0]; lanes as usize]
                } else {
                    slots
                }
            }
            _ => self.vec_slots(value)?,
        };
        self.a.mov(rax, qword_ptr(r13 + ix))?;
        let signed = index.ty().scalar().is_some_and(Scalar::is_signed);
        self.vector_address(mem, lanes, "vector store", signed)?;
        for (k, s) in slots.into_iter().enumerate() {
            self.a.mov(rax, qword_ptr(r13 + ix))?;
            if k > 0 {
                self.a.add(rax, k as i32)?;
            }
            self.a.mov(rcx, qword_ptr(r13 + s))?;
            self.store_element(mem)?;
        }
        Ok(())
    }
}
