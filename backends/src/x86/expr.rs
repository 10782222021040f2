//! Expression code generation: every expression's value ends in `rax`, in canonical form
//! (integers sign- or zero-extended from their width, bools 0/1, floats their IEEE bits
//! zero-extended). Operands wait on the machine stack; floats pass through `xmm0`/`xmm1` for
//! the operation itself. Operations whose exact result is easiest to take from the interpreter
//! (most casts, float `min`/`max`, rounding and transcendental intrinsics, `fma`) call the
//! helpers in [`rt`](super::rt).

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Builtin, Expr, ExprNode, Imm, Intrinsic, Scalar, UnOp};

use super::gen::{AsmResult, Gen, Site};
use super::rt;

fn scalar(e: &Expr) -> Scalar {
    e.ty().scalar().unwrap_or(Scalar::I32)
}

impl Gen {
    /// Wraps `rax` to type `t`'s canonical form.
    pub(crate) fn canon(&mut self, t: Scalar) -> AsmResult<()> {
        match t {
            Scalar::I8 => self.a.movsx(rax, al),
            Scalar::I16 => self.a.movsx(rax, ax),
            Scalar::I32 => self.a.movsxd(rax, eax),
            Scalar::U8 => self.a.movzx(eax, al),
            Scalar::U16 | Scalar::F16 => self.a.movzx(eax, ax),
            Scalar::U32 | Scalar::F32 => self.a.mov(eax, eax),
            _ => Ok(()),
        }
    }

    /// Loads `e` into `rcx` without touching `rax` if it is a variable, constant or
    /// built-in (no operand needs the stack then); false otherwise.
    fn leaf_into_rcx(&mut self, e: &Expr) -> AsmResult<bool> {
        match e.node() {
            ExprNode::Var(v) => {
                let slot = self.lookup_slot(v);
                self.a.mov(rcx, qword_ptr(r13 + slot))?;
            }
            ExprNode::Imm(i) => {
                let bits = rt::bits_of(kiln_ir::eval::cast(i.scalar(), *i));
                self.a.mov(rcx, bits)?;
            }
            ExprNode::Builtin { .. } => {
                self.a.mov(rdx, rax)?;
                self.expr(e)?;
                self.a.mov(rcx, rax)?;
                self.a.mov(rax, rdx)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Evaluates `e` into `rax`.
    pub(crate) fn expr(&mut self, e: &Expr) -> AsmResult<()> {
        match e.node() {
            ExprNode::Var(v) => {
                let slot = self.lookup_slot(v);
                self.a.mov(rax, qword_ptr(r13 + slot))
            }
            ExprNode::Imm(i) => {
                let bits = rt::bits_of(kiln_ir::eval::cast(i.scalar(), *i));
                self.a.mov(rax, bits)
            }
            ExprNode::Builtin { kind, dim } => {
                let base = match kind {
                    Builtin::GlobalId => rt::OFF_GLOBAL_ID,
                    Builtin::LocalId => rt::OFF_LOCAL_ID,
                    Builtin::GroupId => rt::OFF_GROUP_ID,
                    Builtin::GlobalSize => rt::OFF_GLOBAL_SIZE,
                    Builtin::LocalSize => rt::OFF_LOCAL_SIZE,
                    Builtin::NumGroups => rt::OFF_NUM_GROUPS,
                    Builtin::GlobalOffset => rt::OFF_OFFSET,
                };
                self.a.mov(rax, qword_ptr(r12 + (base + 8 * (*dim as i32 % 3))))
            }
            ExprNode::Unary { op, a } => {
                self.expr(a)?;
                let t = scalar(a);
                match (op, t) {
                    (UnOp::Not, _) => self.a.xor(eax, 1),
                    (UnOp::Neg, Scalar::F32) => self.a.xor(eax, 0x8000_0000u32 as i32),
                    (UnOp::Neg, Scalar::F64) => self.a.btc(rax, 63),
                    (UnOp::Neg, _) => {
                        self.a.neg(rax)?;
                        self.canon(t)
                    }
                    (UnOp::BitNot, _) => {
                        self.a.not(rax)?;
                        self.canon(t)
                    }
                }
            }
            ExprNode::Binary { op, a, b } => {
                self.expr(a)?;
                if !self.leaf_into_rcx(b)? {
                    self.push(rax)?;
                    self.expr(b)?;
                    self.a.mov(rcx, rax)?;
                    self.pop(rax)?;
                }
                self.binary(*op, scalar(a), e)
            }
            ExprNode::Select { cond, a, b } => {
                self.expr(cond)?;
                self.push(rax)?;
                self.expr(a)?;
                self.push(rax)?;
                self.expr(b)?;
                self.a.mov(rcx, rax)?;
                self.pop(rdx)?;
                self.pop(rax)?;
                self.a.test(eax, eax)?;
                self.a.mov(rax, rcx)?;
                self.a.cmovne(rax, rdx)
            }
            ExprNode::Cast { to, a } => {
                self.expr(a)?;
                self.cast(scalar(a), *to)
            }
            ExprNode::Load { buf, index } => {
                let mem = self.lookup_mem(buf);
                self.expr(index)?;
                let signed = scalar(index).is_signed();
                self.address(mem, "load", signed)?;
                self.load_element(mem)
            }
            ExprNode::Intrinsic { op, args } => self.intrinsic(*op, args),
            ExprNode::Extract { a, lane } => self.extract(a, *lane),
            ExprNode::VecLoad { .. } | ExprNode::Insert { .. } | ExprNode::Vector { .. } => {
                // `compile_verified` applies the Memory lowering itself, which leaves vector
                // loads only as `let` values and lane reads, and vectors built only as stored
                // values.
                unreachable!("a vector expression outside the Memory lowering: {e}")
            }
        }
    }

    /// Stores `rcx` to element `rax` of memory `mem`, whose base is in `rdx`.
    pub(crate) fn store_element(&mut self, mem: u32) -> AsmResult<()> {
        let elem = self.mems[mem as usize].elem;
        let m = rdx + rax * elem.size_bytes() as u32;
        match elem.size_bytes() {
            1 => self.a.mov(byte_ptr(m), cl),
            2 => self.a.mov(word_ptr(m), cx),
            4 => self.a.mov(dword_ptr(m), ecx),
            _ => self.a.mov(qword_ptr(m), rcx),
        }
    }

    /// Loads element `rax` of memory `mem`, whose base is in `rdx`, into `rax` (in its
    /// canonical form).
    pub(crate) fn load_element(&mut self, mem: u32) -> AsmResult<()> {
        let elem = self.mems[mem as usize].elem;
        let m = rdx + rax * elem.size_bytes() as u32;
        match elem {
            Scalar::Bool => {
                self.a.movzx(eax, byte_ptr(m))?;
                self.a.test(eax, eax)?;
                self.a.setne(al)?;
                self.a.movzx(eax, al)
            }
            Scalar::I8 => self.a.movsx(rax, byte_ptr(m)),
            Scalar::U8 => self.a.movzx(eax, byte_ptr(m)),
            Scalar::I16 => self.a.movsx(rax, word_ptr(m)),
            Scalar::U16 | Scalar::F16 => self.a.movzx(eax, word_ptr(m)),
            Scalar::I32 => self.a.movsxd(rax, dword_ptr(m)),
            Scalar::U32 | Scalar::F32 => self.a.mov(eax, dword_ptr(m)),
            _ => self.a.mov(rax, qword_ptr(m)),
        }
    }

    /// `rax = rax op rcx` on operands of type `t`.
    fn binary(&mut self, op: BinOp, t: Scalar, e: &Expr) -> AsmResult<()> {
        if t == Scalar::Bool {
            return match op {
                BinOp::And | BinOp::LogicAnd => self.a.and(eax, ecx),
                BinOp::Or | BinOp::LogicOr => self.a.or(eax, ecx),
                BinOp::Xor | BinOp::Ne => self.a.xor(eax, ecx),
                _ => {
                    self.a.cmp(eax, ecx)?;
                    self.a.sete(al)?;
                    self.a.movzx(eax, al)
                }
            };
        }
        if t == Scalar::F32 || t == Scalar::F64 {
            return self.float_binary(op, t == Scalar::F64);
        }
        if !t.is_int() {
            return self.helper_binary(op, t);
        }
        let signed = t.is_signed();
        match op {
            BinOp::Add => self.a.add(rax, rcx)?,
            BinOp::Sub => self.a.sub(rax, rcx)?,
            BinOp::Mul => self.a.imul_2(rax, rcx)?,
            BinOp::And => return self.a.and(rax, rcx),
            BinOp::Or => return self.a.or(rax, rcx),
            BinOp::Xor => return self.a.xor(rax, rcx),
            BinOp::Shl | BinOp::Shr => {
                self.a.and(ecx, t.bits() as i32 - 1)?;
                match (op, signed) {
                    (BinOp::Shl, _) => self.a.shl(rax, cl)?,
                    (_, true) => return self.a.sar(rax, cl),
                    _ => return self.a.shr(rax, cl),
                }
            }
            BinOp::Div | BinOp::Rem => {
                let rem = op == BinOp::Rem;
                let zero =
                    self.fault(rt::ERR_DIV_ZERO, Site::Div { rem, expr: e.fault_site() }, false);
                self.a.test(rcx, rcx)?;
                self.a.je(zero)?;
                if signed {
                    let mut normal = self.a.create_label();
                    let mut done = self.a.create_label();
                    // Narrower types are sign-extended, so only i64 can overflow `idiv`:
                    // MIN / -1 wraps to MIN (its negation) and MIN % -1 is 0.
                    self.a.cmp(rcx, -1)?;
                    self.a.jne(normal)?;
                    if rem {
                        self.a.xor(eax, eax)?;
                    } else {
                        self.a.neg(rax)?;
                    }
                    self.a.jmp(done)?;
                    self.bind(&mut normal)?;
                    self.a.cqo()?;
                    self.a.idiv(rcx)?;
                    if rem {
                        self.a.mov(rax, rdx)?;
                    }
                    self.bind(&mut done)?;
                    self.a.nop()?;
                } else {
                    self.a.xor(edx, edx)?;
                    self.a.div(rcx)?;
                    if rem {
                        self.a.mov(rax, rdx)?;
                    }
                }
            }
            _ => {
                self.a.cmp(rax, rcx)?;
                match (op, signed) {
                    (BinOp::Eq, _) => self.a.sete(al)?,
                    (BinOp::Ne, _) => self.a.setne(al)?,
                    (BinOp::Lt, true) => self.a.setl(al)?,
                    (BinOp::Le, true) => self.a.setle(al)?,
                    (BinOp::Gt, true) => self.a.setg(al)?,
                    (BinOp::Ge, true) => self.a.setge(al)?,
                    (BinOp::Lt, false) => self.a.setb(al)?,
                    (BinOp::Le, false) => self.a.setbe(al)?,
                    (BinOp::Gt, false) => self.a.seta(al)?,
                    _ => self.a.setae(al)?,
                }
                return self.a.movzx(eax, al);
            }
        }
        self.canon(t)
    }

    fn float_binary(&mut self, op: BinOp, f64_: bool) -> AsmResult<()> {
        self.a.movq(xmm0, rax)?;
        self.a.movq(xmm1, rcx)?;
        let arith = |g: &mut Gen, op: BinOp| -> AsmResult<()> {
            match (op, f64_) {
                (BinOp::Add, false) => g.a.addss(xmm0, xmm1),
                (BinOp::Sub, false) => g.a.subss(xmm0, xmm1),
                (BinOp::Mul, false) => g.a.mulss(xmm0, xmm1),
                (BinOp::Div, false) => g.a.divss(xmm0, xmm1),
                (BinOp::Add, true) => g.a.addsd(xmm0, xmm1),
                (BinOp::Sub, true) => g.a.subsd(xmm0, xmm1),
                (BinOp::Mul, true) => g.a.mulsd(xmm0, xmm1),
                _ => g.a.divsd(xmm0, xmm1),
            }
        };
        let ucomi = |g: &mut Gen, x, y| if f64_ { g.a.ucomisd(x, y) } else { g.a.ucomiss(x, y) };
        match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => {
                arith(self, op)?;
                if f64_ {
                    self.a.movq(rax, xmm0)
                } else {
                    self.a.movd(eax, xmm0)
                }
            }
            BinOp::Eq | BinOp::Ne => {
                ucomi(self, xmm0, xmm1)?;
                // Unordered sets ZF and PF: equal only if ZF and not PF.
                if op == BinOp::Eq {
                    self.a.sete(al)?;
                    self.a.setnp(cl)?;
                    self.a.and(al, cl)?;
                } else {
                    self.a.setne(al)?;
                    self.a.setp(cl)?;
                    self.a.or(al, cl)?;
                }
                self.a.movzx(eax, al)
            }
            // a < b is b > a: `seta`/`setae` are false on unordered (CF set).
            BinOp::Lt | BinOp::Le => {
                ucomi(self, xmm1, xmm0)?;
                if op == BinOp::Lt {
                    self.a.seta(al)?
                } else {
                    self.a.setae(al)?
                }
                self.a.movzx(eax, al)
            }
            BinOp::Gt | BinOp::Ge => {
                ucomi(self, xmm0, xmm1)?;
                if op == BinOp::Gt {
                    self.a.seta(al)?
                } else {
                    self.a.setae(al)?
                }
                self.a.movzx(eax, al)
            }
            _ => self.helper_binary(op, if f64_ { Scalar::F64 } else { Scalar::F32 }),
        }
    }

    /// `rax = rax op rcx` through the interpreter's own scalar function.
    fn helper_binary(&mut self, op: BinOp, t: Scalar) -> AsmResult<()> {
        self.a.mov(rdx, rax)?;
        self.a.mov(rdi, rt::binop_id(op))?;
        self.a.mov(rsi, rt::scalar_id(t))?;
        self.call(rt::HELPER_BINARY)
    }

    /// `rax = rax as to`, `rax` holding a value of type `from`.
    fn cast(&mut self, from: Scalar, to: Scalar) -> AsmResult<()> {
        use Scalar::*;
        if from == to {
            return Ok(());
        }
        match (from, to) {
            (Bool, t) if t.is_int() => Ok(()),
            (f, t) if f.is_int() && t.is_int() => self.canon(t),
            (f, Bool) if f.is_int() => {
                self.a.test(rax, rax)?;
                self.a.setne(al)?;
                self.a.movzx(eax, al)
            }
            (F32, F64) => {
                self.a.movd(xmm0, eax)?;
                self.a.cvtss2sd(xmm0, xmm0)?;
                self.a.movq(rax, xmm0)
            }
            (F64, F32) => {
                self.a.movq(xmm0, rax)?;
                self.a.cvtsd2ss(xmm0, xmm0)?;
                self.a.movd(eax, xmm0)
            }
            // Every value of these types is exact in i64, and cvtsi2ss/sd from a 64-bit
            // register rounds once, to nearest even.
            (Bool | I8 | I16 | I32 | I64 | U8 | U16 | U32, F32) => {
                self.a.xorps(xmm0, xmm0)?;
                self.a.cvtsi2ss(xmm0, rax)?;
                self.a.movd(eax, xmm0)
            }
            (Bool | I8 | I16 | I32 | I64 | U8 | U16 | U32, F64) => {
                self.a.xorps(xmm0, xmm0)?;
                self.a.cvtsi2sd(xmm0, rax)?;
                self.a.movq(rax, xmm0)
            }
            _ => {
                self.a.mov(rdx, rax)?;
                self.a.mov(rdi, rt::scalar_id(from))?;
                self.a.mov(rsi, rt::scalar_id(to))?;
                self.call(rt::HELPER_CAST)
            }
        }
    }

    fn intrinsic(&mut self, op: Intrinsic, args: &[Expr]) -> AsmResult<()> {
        let Some(first) = args.first() else { return self.a.xor(eax, eax) };
        let t = scalar(first);
        for a in args {
            self.expr(a)?;
            self.push(rax)?;
        }
        // Operands: rax, rcx, rdx in order.
        match args.len() {
            1 => self.pop(rax)?,
            2 => {
                self.pop(rcx)?;
                self.pop(rax)?;
            }
            _ => {
                self.pop(rdx)?;
                self.pop(rcx)?;
                self.pop(rax)?;
            }
        }
        if t.is_int() {
            let s = t.is_signed();
            match op {
                Intrinsic::Min | Intrinsic::Max => {
                    self.a.cmp(rax, rcx)?;
                    match (op == Intrinsic::Min, s) {
                        (true, true) => self.a.cmovg(rax, rcx)?,
                        (true, false) => self.a.cmova(rax, rcx)?,
                        (false, true) => self.a.cmovl(rax, rcx)?,
                        (false, false) => self.a.cmovb(rax, rcx)?,
                    }
                    return Ok(());
                }
                Intrinsic::Abs => {
                    if s {
                        self.a.mov(rcx, rax)?;
                        self.a.neg(rax)?;
                        self.a.cmovs(rax, rcx)?;
                    }
                }
                Intrinsic::Mad => {
                    self.a.imul_2(rax, rcx)?;
                    self.a.add(rax, rdx)?;
                }
                Intrinsic::Add3 => {
                    self.a.add(rax, rcx)?;
                    self.a.add(rax, rdx)?;
                }
                _ => return self.helper_intrinsic(op, t),
            }
            return self.canon(t);
        }
        match (op, t) {
            (Intrinsic::Abs, Scalar::F32) => self.a.and(eax, 0x7fff_ffff),
            (Intrinsic::Abs, Scalar::F64) => self.a.btr(rax, 63),
            (Intrinsic::Sqrt, Scalar::F32) => {
                self.a.movd(xmm0, eax)?;
                self.a.sqrtss(xmm0, xmm0)?;
                self.a.movd(eax, xmm0)
            }
            (Intrinsic::Sqrt, Scalar::F64) => {
                self.a.movq(xmm0, rax)?;
                self.a.sqrtsd(xmm0, xmm0)?;
                self.a.movq(rax, xmm0)
            }
            _ => self.helper_intrinsic(op, t),
        }
    }

    /// `rax = op(rax, rcx, rdx)` through the interpreter's own function.
    fn helper_intrinsic(&mut self, op: Intrinsic, t: Scalar) -> AsmResult<()> {
        self.a.mov(r8, rdx)?;
        self.a.mov(rdx, rax)?;
        self.a.mov(rdi, rt::intrinsic_id(op))?;
        self.a.mov(rsi, rt::scalar_id(t))?;
        // rcx already holds the second operand.
        self.call(rt::HELPER_INTRINSIC)
    }
}

/// An immediate's bits as generated code holds them (for tests of the value form).
#[allow(dead_code)]
pub(crate) fn imm_bits(i: Imm) -> u64 {
    rt::bits_of(i)
}
