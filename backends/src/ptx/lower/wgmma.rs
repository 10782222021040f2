//! The warpgroup (sm_90a) tier: `wgmma.mma_async` with shared-memory matrix descriptors,
//! `cp.async.bulk.tensor` (TMA) completing on `mbarrier` objects, and the `mbarrier`
//! operations. A warpgroup accumulator `m64nNk16` is `N / 2` `.f32` registers per lane, in
//! the order of `kiln_ir::warpgroup::acc_coords` (PTX ISA, "wgmma .m64nNk16 register
//! fragment D").
//!
//! Descriptors (PTX ISA, "Matrix Descriptor Format"): bits 0-13 the start address >> 4,
//! 16-29 the leading byte offset >> 4, 32-45 the stride byte offset >> 4, 62-63 the swizzle
//! mode (1: 128-byte, 2: 64-byte, 3: 32-byte). K-major factors: leading offset unused (1),
//! stride offset 8 rows of the swizzle span (`8 S`). MN-major factors ("Major-ness supported
//! by strides"): the leading offset is the distance between groups of `S` bytes of M (or N)
//! elements (the IR's `_mn<L>`), the stride offset that between groups of 8 k rows (`8 S`:
//! the IR's k rows are `S` bytes apart), and the instruction's `imm-trans-a`/`imm-trans-b`
//! is 1. The IR's local-memory layouts are those of arrays
//! aligned to the swizzle repeat, which the backend guarantees by aligning every local array
//! of such kernels to 1024 bytes.
//!
//! `tma_load` reads a tensor map (`CUtensorMap`, 128 bytes, encoded by the host with
//! `cuTensorMapEncodeTiled`) through a hidden `.u64` parameter holding its global address,
//! one per distinct (tensor, box, swizzle), after the offset parameters; a line
//! `// kiln.tensor_map <kernel> <n> <tensor param> <elem> <width> <height> <pitch> <box w>
//! <box h> <swizzle>` tells launchers what to encode (elements; pitch in elements).

use kiln_ir::matrix::{MatShape, MatrixOp};
use kiln_ir::warpgroup::{Major, Swizzle, TmaBox, WgLayout};
use kiln_ir::{Expr, Scalar, Var};

use super::{Binding, Lower, Mem, R};
use crate::ptx::regs::{Class, Reg, Val};

/// A tensor map the kernel takes as a hidden parameter.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct TensorMap {
    /// The tensor's parameter name.
    pub src: String,
    pub elem: Scalar,
    /// Width, height, pitch (elements).
    pub dims: [u64; 3],
    pub bx: TmaBox,
    /// The register holding the map's address.
    pub reg: Reg,
}

/// The swizzle-mode field of a descriptor.
fn mode(sw: Swizzle) -> u64 {
    match sw {
        Swizzle::B128 => 1,
        Swizzle::B64 => 2,
        Swizzle::B32 => 3,
        Swizzle::None => 0,
    }
}

impl Lower<'_> {
    /// The 32-bit shared-window address of element `index` of local array `m`.
    fn shared_addr(&mut self, m: &Mem, index: &Expr) -> R<Reg> {
        if m.space != ".shared" {
            return Err("ill-formed kernel: a warpgroup operand is not a local array".into());
        }
        let base = self.fresh(Class::B32);
        self.ins(format_args!("cvt.u32.u64 {base}, {}", m.base));
        let v = self.expr(index, None)?;
        let i = self.reg(v, Class::B32);
        let a = self.fresh(Class::B32);
        self.ins(format_args!("mad.lo.u32 {a}, {i}, {}, {base}", m.elem.size_bytes()));
        Ok(a)
    }

    /// A shared-memory matrix descriptor for a factor at `addr` laid out as `l`.
    fn descriptor(&mut self, addr: Reg, l: WgLayout) -> Reg {
        let d = self.fresh(Class::B64);
        self.ins(format_args!("cvt.u64.u32 {d}, {addr}"));
        self.ins(format_args!("shr.u64 {d}, {d}, 4"));
        self.ins(format_args!("and.b64 {d}, {d}, 16383"));
        let sw = l.swizzle;
        let lead = match l.major {
            Major::K => 1,
            Major::Mn(stride) => stride as u64 >> 4,
        };
        let hi = (lead << 16) | (((8 * sw.span()) >> 4) << 32) | (mode(sw) << 62);
        self.ins(format_args!("or.b64 {d}, {d}, {hi}"));
        d
    }

    fn mem_arg(&self, e: &Expr) -> R<Mem> {
        let v = e.as_var().ok_or("ill-formed kernel: a warpgroup memory operand")?;
        self.mem(v.name())
    }

    /// A warpgroup-tier call.
    pub(super) fn warpgroup(&mut self, op: MatrixOp, result: Option<&Var>, args: &[Expr]) -> R<()> {
        match op {
            MatrixOp::Wgmma(swa, swb) => {
                let f = args[0].ty().frag().ok_or("ill-formed kernel: wgmma accumulator")?;
                let MatShape::M64(n) = f.shape else {
                    return Err("ill-formed kernel: wgmma accumulator shape".into());
                };
                let d = self.frag_regs(&args[0])?;
                let (ma, mb) = (self.mem_arg(&args[1])?, self.mem_arg(&args[3])?);
                let t = if ma.elem == Scalar::BF16 { "bf16" } else { "f16" };
                let aa = self.shared_addr(&ma, &args[2])?;
                let ba = self.shared_addr(&mb, &args[4])?;
                let da = self.descriptor(aa, swa);
                let db = self.descriptor(ba, swb);
                let list = d.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ");
                let p = self.fresh(Class::Pred);
                self.ins(format_args!("setp.eq.u32 {p}, 0, 0"));
                let tnsp = |l: WgLayout| matches!(l.major, Major::Mn(_)) as u8;
                let (ta, tb) = (tnsp(swa), tnsp(swb));
                self.ins(format_args!(
                    "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{list}}}, {da}, {db}, {p}, 1, 1, {ta}, {tb}"
                ));
            }
            MatrixOp::WgFence => self.ins(format_args!("wgmma.fence.sync.aligned")),
            MatrixOp::WgCommit => self.ins(format_args!("wgmma.commit_group.sync.aligned")),
            MatrixOp::WgWait(n) => self.ins(format_args!("wgmma.wait_group.sync.aligned {n}")),
            MatrixOp::SetMaxNReg { inc, count } => {
                self.setmaxnreg = true;
                let dir = if inc { "inc" } else { "dec" };
                self.ins(format_args!("setmaxnreg.{dir}.sync.aligned.u32 {count}"));
            }
            MatrixOp::FragElem(i) => {
                let r = result.ok_or("ill-formed kernel: frag_elem without a result")?;
                let regs = self.frag_regs(&args[0])?;
                let src = *regs.get(i as usize).ok_or("ill-formed kernel: frag_elem index")?;
                let d = self.fresh(Class::F32);
                self.ins(format_args!("mov.f32 {d}, {src}"));
                self.bind(r.name_arc(), Binding::Val(Val::Reg(d)));
            }
            MatrixOp::TmaLoad(bx) => {
                let dst = self.mem_arg(&args[0])?;
                let src = args[2].as_var().ok_or("ill-formed kernel: tma_load source")?;
                let mut dims = [0u64; 3];
                for (k, d) in dims.iter_mut().enumerate() {
                    *d = args[3 + k].as_imm().and_then(|i| i.as_i128()).ok_or_else(|| {
                        format!(
                            "`tma_load` from `{}` with a run-time width, height or pitch: on PTX \
                             they are encoded into the tensor map by the host, so they must be \
                             constants",
                            src.name()
                        )
                    })? as u64;
                }
                let map = self.tensor_map(src.name(), dst.elem, dims, bx);
                let da = self.shared_addr(&dst, &args[1])?;
                let x = self.expr(&args[6], None)?;
                let x = self.reg(x, Class::B32);
                let y = self.expr(&args[7], None)?;
                let y = self.reg(y, Class::B32);
                let bar = self.mem_arg(&args[8])?;
                let ba = self.shared_addr(&bar, &args[9])?;
                self.ins(format_args!(
                    "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [{da}], [{map}, {{{x}, {y}}}], [{ba}]"
                ));
            }
            MatrixOp::MbarInit
            | MatrixOp::MbarArrive
            | MatrixOp::MbarExpectTx
            | MatrixOp::MbarWait => {
                let bar = self.mem_arg(&args[0])?;
                let a = self.shared_addr(&bar, &args[1])?;
                let v = match args.get(2) {
                    Some(e) => {
                        let v = self.expr(e, None)?;
                        Some(self.reg(v, Class::B32))
                    }
                    None => None,
                };
                let v = v.map(|r| r.to_string()).unwrap_or_default();
                let state = self.fresh(Class::B64);
                match op {
                    MatrixOp::MbarInit => {
                        self.ins(format_args!("mbarrier.init.shared::cta.b64 [{a}], {v}"));
                        self.ins(format_args!("fence.mbarrier_init.release.cluster"));
                    }
                    MatrixOp::MbarArrive => {
                        self.ins(format_args!("mbarrier.arrive.shared::cta.b64 {state}, [{a}]"))
                    }
                    MatrixOp::MbarExpectTx => self.ins(format_args!(
                        "mbarrier.arrive.expect_tx.shared::cta.b64 {state}, [{a}], {v}"
                    )),
                    _ => {
                        let top = self.label();
                        let p = self.fresh(Class::Pred);
                        self.place(&top);
                        self.ins(format_args!(
                            "mbarrier.try_wait.parity.shared::cta.b64 {p}, [{a}], {v}"
                        ));
                        self.ins(format_args!("@!{p} bra {top}"));
                    }
                }
            }
            _ => return Err(format!("ill-formed kernel: `{}`", op.name())),
        }
        Ok(())
    }

    /// The register holding the address of the tensor map for (`src`, box), made a hidden
    /// parameter the first time.
    fn tensor_map(&mut self, src: &str, elem: Scalar, dims: [u64; 3], bx: TmaBox) -> Reg {
        if let Some(m) = self
            .tmaps
            .iter()
            .find(|m| m.src == src && m.dims == dims && m.bx == bx && m.elem == elem)
        {
            return m.reg;
        }
        let reg = self.fresh(Class::B64);
        let pname = format!("{}_tmap_{}", self.kernel.name(), self.tmaps.len());
        self.entry.push_str(&format!("\tld.param.u64 {reg}, [{pname}];\n"));
        self.tmaps.push(TensorMap { src: src.to_string(), elem, dims, bx, reg });
        reg
    }
}

/// The hidden parameters and the launcher lines of a kernel's tensor maps.
pub(super) fn tensor_map_decls(kernel: &str, maps: &[TensorMap]) -> (Vec<String>, String) {
    let mut params = Vec::new();
    let mut lines = String::new();
    for (j, m) in maps.iter().enumerate() {
        params.push(format!("\t.param .u64 {kernel}_tmap_{j}"));
        lines.push_str(&format!(
            "// kiln.tensor_map {kernel} {j} {} {} {} {} {} {} {} {}\n",
            m.src, m.elem, m.dims[0], m.dims[1], m.dims[2], m.bx.w, m.bx.h, m.bx.swizzle
        ));
    }
    (params, lines)
}
