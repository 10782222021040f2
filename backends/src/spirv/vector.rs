//! Vector memory accesses (the GPU form of vector lowering, `VectorLowering::Memory`): what
//! reaches this module is `let t: f32x4 = vload4(p, i);`, lanes read as `extract(t, k)`,
//! and `vstore(p, i, f32x4(a, b, c, d))`; everything else is one scalar per lane already.
//!
//! A vector of 32- or 64-bit lanes in a Vulkan storage buffer is an `OpTypeVector` loaded
//! and stored whole: the buffer gets a second, aliased variable at the same descriptor
//! set and binding whose runtime array holds vectors (`ArrayStride` the vector's size),
//! and element index `i` (a multiple of the lane count, which the interpreter and the
//! bounds sanitizer enforce) is vector index `i / lanes`. Shader modules have vectors of
//! at most 4 components, so 8 lanes are two 4-lane vectors. Other accesses (8- and 16-bit
//! lanes, `local` and `private` arrays, the OpenCL flavour) are one scalar access per lane,
//! and their lanes stay scalars.

use rspirv::dr::{Instruction, Operand};
use rspirv::spirv::{Decoration, Op, StorageClass, Word};

use kiln_ir::{Expr, ExprNode, Scalar, Var};

use super::ctx::{self, Ctx};
use super::stmt::{Emitter, Mem, Val};
use super::Flavour;

type R<T> = Result<T, String>;

fn er(e: rspirv::dr::Error) -> String {
    e.to_string()
}

/// A vector value: `chunks` of `chunk` lanes each (`OpTypeVector`s), or, when `chunk` is
/// 1, one scalar id per lane.
#[derive(Clone, Debug)]
pub(crate) struct VecVal {
    pub chunks: Vec<Word>,
    pub chunk: u8,
    pub elem: Scalar,
}

impl Emitter {
    /// True when a vector access of `elem` lanes through `mem` is one vector access per
    /// chunk (see the module docs).
    fn whole(cx: &Ctx, mem: Mem, elem: Scalar) -> bool {
        cx.flavour == Flavour::Vulkan
            && matches!(mem, Mem::Storage(_))
            && ctx::mem_scalar(elem) == elem
            && matches!(elem.bits(), 32 | 64)
    }

    /// The aliased variable viewing storage buffer `var` as a runtime array of vectors of
    /// `n` lanes of `elem`, made on first use.
    pub(crate) fn vector_view(&mut self, cx: &mut Ctx, var: Word, elem: Scalar, n: u8) -> R<Word> {
        if let Some(&(.., v)) =
            self.vector_views.iter().find(|&&(b, e, k, _)| b == var && e == elem && k == n)
        {
            return Ok(v);
        }
        let binding = self
            .storage_bindings
            .iter()
            .find(|&&(v, _)| v == var)
            .map(|&(_, b)| b)
            .ok_or("vector access to a storage buffer without a binding")?;
        let et = cx.ty(elem);
        let vt = cx.b.type_vector(et, n as u32);
        let rt = cx.b.type_runtime_array(vt);
        let st = cx.b.type_struct([rt]);
        if !self.vector_structs.contains(&st) {
            self.vector_structs.push(st);
            let stride = elem.size_bytes() as u32 * n as u32;
            cx.b.decorate(rt, Decoration::ArrayStride, [Operand::LiteralBit32(stride)]);
            cx.b.decorate(st, Decoration::Block, []);
            cx.b.member_decorate(st, 0, Decoration::Offset, [Operand::LiteralBit32(0)]);
        }
        let pt = cx.ptr(StorageClass::StorageBuffer, st);
        // A module-level variable, made while a function body is being emitted (the
        // builder's `variable` would put it into the current block).
        let v = cx.b.id();
        let inst = Instruction::new(
            Op::Variable,
            Some(pt),
            Some(v),
            vec![Operand::StorageClass(StorageClass::StorageBuffer)],
        );
        cx.b.module_mut().types_global_values.push(inst);
        cx.b.decorate(v, Decoration::DescriptorSet, [Operand::LiteralBit32(0)]);
        cx.b.decorate(v, Decoration::Binding, [Operand::LiteralBit32(binding)]);
        cx.b.decorate(v, Decoration::Aliased, []);
        self.vector_views.push((var, elem, n, v));
        Ok(v)
    }

    /// Pointers to the `count` chunks of `chunk` lanes at element `index` of buffer `var`.
    fn chunk_ptrs(
        &mut self,
        cx: &mut Ctx,
        var: Word,
        elem: Scalar,
        index: &Expr,
        chunk: u8,
        count: u8,
    ) -> R<Vec<Word>> {
        let view = self.vector_view(cx, var, elem, chunk)?;
        let (ix, ity) = self.expr(cx, index)?;
        let ut = cx.ty(Scalar::U32);
        // In-bounds indices are non-negative and below 2^32 (as for scalar accesses).
        let ix = if ity.bits() == 32 { ix } else { cx.b.u_convert(ut, None, ix).map_err(er)? };
        let shift = cx.u32c(chunk.trailing_zeros());
        let first = cx.b.shift_right_logical(ut, None, ix, shift).map_err(er)?;
        let et = cx.ty(elem);
        let vt = cx.b.type_vector(et, chunk as u32);
        let pt = cx.ptr(StorageClass::StorageBuffer, vt);
        let zero = cx.u32c(0);
        let mut out = Vec::new();
        for c in 0..count as u32 {
            let at = if c == 0 {
                first
            } else {
                let k = cx.u32c(c);
                cx.b.i_add(ut, None, first, k).map_err(er)?
            };
            out.push(cx.b.access_chain(pt, None, view, [zero, at]).map_err(er)?);
        }
        Ok(out)
    }

    /// `vloadN(buf, index)`.
    pub(crate) fn vec_load(
        &mut self,
        cx: &mut Ctx,
        buf: &Var,
        index: &Expr,
        lanes: u8,
    ) -> R<VecVal> {
        let (mem, elem) = self.ptr_to(buf)?;
        if let (true, Mem::Storage(var)) = (Self::whole(cx, mem, elem), mem) {
            let chunk = lanes.min(4);
            let ptrs = self.chunk_ptrs(cx, var, elem, index, chunk, lanes / chunk)?;
            let et = cx.ty(elem);
            let vt = cx.b.type_vector(et, chunk as u32);
            let chunks = ptrs
                .into_iter()
                .map(|p| cx.b.load(vt, None, p, None, []).map_err(er))
                .collect::<R<Vec<Word>>>()?;
            return Ok(VecVal { chunks, chunk, elem });
        }
        let t = index.ty().scalar().unwrap_or(Scalar::U32);
        let mut chunks = Vec::new();
        for k in 0..lanes as i128 {
            let i = if k == 0 { index.clone() } else { index + Expr::int(t, k) };
            chunks.push(self.expr(cx, &Expr::load(buf, i))?.0);
        }
        Ok(VecVal { chunks, chunk: 1, elem })
    }

    /// The vector value of `e`: a vector load or a variable bound to one.
    pub(crate) fn vec_value(&mut self, cx: &mut Ctx, e: &Expr) -> R<VecVal> {
        match e.node() {
            ExprNode::VecLoad { buf, index, lanes } => self.vec_load(cx, buf, index, *lanes),
            ExprNode::Var(v) => match self.lookup(v)? {
                Val::Vector(i) => Ok(self.vectors[i].clone()),
                _ => Err(format!("`{}` is not a vector", v.name())),
            },
            _ => Err(super::VECTORS.into()),
        }
    }

    /// `extract(a, lane)`.
    pub(crate) fn extract(&mut self, cx: &mut Ctx, a: &Expr, lane: u8) -> R<Word> {
        let v = self.vec_value(cx, a)?;
        let c = v.chunks.get((lane / v.chunk) as usize).copied().ok_or("lane out of range")?;
        if v.chunk == 1 {
            return Ok(c);
        }
        let et = cx.ty(v.elem);
        cx.b.composite_extract(et, None, c, [(lane % v.chunk) as u32]).map_err(er)
    }

    /// The lanes of the stored value `e`, as scalar ids.
    fn lanes_of(&mut self, cx: &mut Ctx, e: &Expr) -> R<Vec<Word>> {
        let n = e.ty().lanes();
        match e.node() {
            ExprNode::Vector { elems, .. } => {
                let ids = elems.iter().map(|x| Ok(self.expr(cx, x)?.0)).collect::<R<Vec<_>>>()?;
                Ok(if ids.len() == 1 { vec![ids[0]; n as usize] } else { ids })
            }
            _ => (0..n).map(|k| self.extract(cx, e, k)).collect(),
        }
    }

    /// `vstore(buf, index, value);`
    pub(crate) fn vec_store(
        &mut self,
        cx: &mut Ctx,
        buf: &Var,
        index: &Expr,
        value: &Expr,
    ) -> R<()> {
        let (mem, elem) = self.ptr_to(buf)?;
        let ids = self.lanes_of(cx, value)?;
        let lanes = ids.len() as u8;
        if let (true, Mem::Storage(var)) = (Self::whole(cx, mem, elem), mem) {
            let chunk = lanes.min(4);
            let ptrs = self.chunk_ptrs(cx, var, elem, index, chunk, lanes / chunk)?;
            let et = cx.ty(elem);
            let vt = cx.b.type_vector(et, chunk as u32);
            for (p, lane_ids) in ptrs.into_iter().zip(ids.chunks(chunk as usize)) {
                let v = cx.b.composite_construct(vt, None, lane_ids.to_vec()).map_err(er)?;
                cx.b.store(p, v, None, []).map_err(er)?;
            }
            return Ok(());
        }
        let t = index.ty().scalar().unwrap_or(Scalar::U32);
        for (k, id) in ids.into_iter().enumerate() {
            let i = if k == 0 { index.clone() } else { index + Expr::int(t, k as i128) };
            let (p, _) = self.elem_ptr(cx, mem, elem, &i)?;
            let v = self.store_conv(cx, elem, id);
            cx.b.store(p, v, None, []).map_err(er)?;
        }
        Ok(())
    }
}
