//! Statement code generation: one function runs one work-item from its resume point (the
//! start, or just after a barrier) to the next barrier or the end.
//!
//! Every IR value lives in the work-item's frame (`r13`), so a barrier is a return to the
//! driver and resuming is a jump to the label after it: loop counters, `var`s and private
//! arrays are all in the frame and survive. Registers hold values only within one statement.
//! `r12` points at the [`Ctx`](super::rt::Ctx), `r14` at its memory table.

use iced_x86::code_asm::*;
use kiln_ir::{AddrSpace, AtomicOp, Expr, FuncKind, Scalar, Stmt, StmtNode, Type, Var};

use super::rt;

pub(crate) type AsmResult<T> = Result<T, IcedError>;

/// Where a memory object's elements are.
#[derive(Clone, Copy, Debug)]
pub enum MemKind {
    /// Entry of the context's memory table (global parameters, local arrays).
    Table(u32),
    /// In the work-item's frame: `count` elements at byte offset `off`.
    #[allow(missing_docs)]
    Private { off: i32, count: u32 },
}

/// A memory object the kernel names.
#[derive(Clone, Debug)]
pub struct MemInfo {
    /// The name the kernel gives it.
    pub name: String,
    /// Its element type.
    pub elem: Scalar,
    /// Where its elements are.
    pub kind: MemKind,
    /// For global parameters, the parameter's position.
    pub param: Option<usize>,
    /// For local arrays, the byte offset in the group's local block and the element count.
    pub local: Option<(usize, u32)>,
}

impl MemInfo {
    /// The interpreter's word for the memory in error messages.
    pub fn kind_word(&self) -> &'static str {
        match (self.param, self.kind) {
            (Some(_), _) => "buffer",
            (None, MemKind::Table(_)) => "local array",
            (None, MemKind::Private { .. }) => "private array",
        }
    }
}

/// A place in the code that can fault, for the error message.
#[derive(Clone, Debug)]
#[allow(missing_docs)] // the variants' fields are named in their docs
pub enum Site {
    /// A load, store or atomic (`what`) of memory `mem`, with an index of signed type or not.
    Access { what: &'static str, mem: u32, signed: bool },
    /// An integer division or remainder; `expr` names it as the interpreter does
    /// ([`kiln_ir::Expr::fault_site`]: its source where the optimizer recorded it).
    Div { rem: bool, expr: String },
    /// A `for` loop's step.
    ForStep { var: String, signed: bool },
    /// The alignment of a vector access (`what`) of `lanes` lanes to memory `mem`.
    Align { what: &'static str, mem: u32, lanes: u8 },
}

/// A comment of the disassembly: where a statement's code or a region starts.
#[derive(Clone, Debug)]
pub(crate) enum Mark {
    Stmt(Stmt),
    /// The region after barrier `k` (numbered from 1).
    Region(u32),
    /// A comment as it was rendered when the program was built (a program loaded from an
    /// image: see image.rs).
    Text(String),
}

impl std::fmt::Display for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mark::Stmt(s) => {
                let text = s.to_string();
                write!(f, "    ; {}", text.lines().next().unwrap_or("").trim())
            }
            Mark::Region(k) => write!(f, "; region {k} (after barrier #{k})"),
            Mark::Text(t) => f.write_str(t),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Binding {
    Slot(i32),
    Mem(u32),
}

/// Out-of-line code reached on a fault.
enum Stub {
    Fault { code: u64, site: u64, with_value: bool },
    Limit { back: CodeLabel },
}

/// What [`Gen::finish`] returns: the assembler with the whole function, and its tables.
pub(crate) struct Generated {
    pub asm: CodeAssembler,
    pub mems: Vec<MemInfo>,
    pub sites: Vec<Site>,
    pub frame_bytes: usize,
    pub local_bytes: usize,
    pub n_barriers: u32,
    /// (instruction index, what starts there) for the disassembly's comments.
    pub marks: Vec<(usize, Mark)>,
}

pub(crate) struct Gen {
    pub(crate) a: CodeAssembler,
    scope: Vec<(String, Binding)>,
    pub(crate) mems: Vec<MemInfo>,
    pub(crate) sites: Vec<Site>,
    stubs: Vec<(CodeLabel, Stub)>,
    resume: Vec<CodeLabel>,
    next_barrier: usize,
    epilogue: CodeLabel,
    /// Bytes pushed on the machine stack by the expression being generated (for call
    /// alignment).
    pub(crate) depth: u32,
    next_slot: i32,
    next_private: i32,
    local_bytes: usize,
    pub(crate) checked: bool,
    marks: Vec<(usize, Mark)>,
    last_label_at: Option<usize>,
    /// The private arrays' bytes when they exceed [`MAX_FRAME`]: the code is then never run
    /// (the driver's memory limit refuses the launch), and the arrays get no real offsets.
    oversize: Option<usize>,
}

/// The size of one private array region in the frame, 8-byte aligned.
pub(crate) fn array_bytes(elem: Scalar, count: u32) -> usize {
    (count as usize * elem.size_bytes()).div_ceil(8) * 8
}

/// Bytes of private arrays a statement declares, in total (each declaration gets its own
/// region).
fn private_bytes(s: &Stmt) -> usize {
    match s.node() {
        StmtNode::Alloc { var, count } if var.ty().addr_space() == Some(AddrSpace::Private) => {
            array_bytes(var.ty().elem().unwrap_or(Scalar::U8), *count)
        }
        StmtNode::If { then, otherwise, .. } => {
            private_bytes(then) + otherwise.as_ref().map_or(0, private_bytes)
        }
        StmtNode::For { body, .. } | StmtNode::While { body, .. } => private_bytes(body),
        StmtNode::Block(v) => v.iter().map(private_bytes).sum(),
        _ => 0,
    }
}

/// The most bytes of private arrays a work-item may have (the launch's memory limit): frames
/// are addressed with 32-bit displacements.
const MAX_FRAME: usize = 1 << 30;

/// The deepest statement nesting compiled (the interpreter's limit): code generation
/// recurses over statements.
pub(crate) const MAX_NESTING: usize = 512;

/// How deeply statements nest in `s`, counting at most to `MAX_NESTING + 1`.
pub(crate) fn nesting(s: &Stmt, depth: usize) -> usize {
    if depth > MAX_NESTING {
        return depth;
    }
    let inner = |s: &Stmt| nesting(s, depth + 1);
    match s.node() {
        StmtNode::If { then, otherwise, .. } => {
            inner(then).max(otherwise.as_ref().map_or(depth, inner))
        }
        StmtNode::For { body, .. } | StmtNode::While { body, .. } => inner(body),
        StmtNode::Block(v) => v.iter().map(inner).max().unwrap_or(depth),
        _ => depth,
    }
}

impl Gen {
    /// A generator for `kernel`'s body; `checked` keeps bounds checks.
    pub fn new(params: &[Var], body: &Stmt, checked: bool) -> AsmResult<Gen> {
        let mut a = CodeAssembler::new(64)?;
        let epilogue = a.create_label();
        let privates = private_bytes(body);
        let mut g = Gen {
            a,
            scope: Vec::new(),
            mems: Vec::new(),
            sites: Vec::new(),
            stubs: Vec::new(),
            resume: Vec::new(),
            next_barrier: 0,
            epilogue,
            depth: 0,
            next_slot: 8 + if privates > MAX_FRAME { 0 } else { privates as i32 },
            oversize: (privates > MAX_FRAME).then_some(privates),
            next_private: 8,
            local_bytes: 0,
            checked,
            marks: Vec::new(),
            last_label_at: None,
        };
        for (i, p) in params.iter().enumerate() {
            let b = match p.ty() {
                Type::Ptr(_, elem) => {
                    let t = g.mems.len() as u32;
                    g.mems.push(MemInfo {
                        name: p.name().to_string(),
                        elem,
                        kind: MemKind::Table(t),
                        param: Some(i),
                        local: None,
                    });
                    Binding::Mem(t)
                }
                Type::Scalar(_) | Type::Vector(..) | Type::Frag(_) => Binding::Slot(g.new_slot()),
            };
            g.scope.push((p.name().to_string(), b));
        }
        Ok(g)
    }

    /// The frame offsets of the scalar parameters, in order (the driver stores arguments there).
    pub fn param_slots(&self) -> Vec<Option<i32>> {
        self.scope
            .iter()
            .map(|(_, b)| match b {
                Binding::Slot(s) => Some(*s),
                Binding::Mem(_) => None,
            })
            .collect()
    }

    pub(crate) fn new_slot(&mut self) -> i32 {
        let s = self.next_slot;
        self.next_slot += 8;
        s
    }

    /// Places `label` at the next instruction (a `nop` separates two labels at one place).
    pub(crate) fn bind(&mut self, label: &mut CodeLabel) -> AsmResult<()> {
        let here = self.a.instructions().len();
        if self.last_label_at == Some(here) {
            self.a.nop()?;
        }
        self.last_label_at = Some(self.a.instructions().len());
        self.a.set_label(label)
    }

    /// A label for out-of-line code reporting a fault at `site` (with `rax` as the value).
    pub(crate) fn fault(&mut self, code: u64, site: Site, with_value: bool) -> CodeLabel {
        self.sites.push(site);
        let l = self.a.create_label();
        let site = self.sites.len() as u64 - 1;
        self.stubs.push((l, Stub::Fault { code, site, with_value }));
        l
    }

    pub(crate) fn lookup_slot(&self, v: &Var) -> i32 {
        match self.lookup(v) {
            Some(Binding::Slot(s)) => *s,
            // The verifier guarantees scalars in scope; a frame word is a safe fallback.
            _ => 0,
        }
    }

    pub(crate) fn lookup_mem(&self, v: &Var) -> u32 {
        match self.lookup(v) {
            Some(Binding::Mem(m)) => *m,
            _ => 0,
        }
    }

    fn lookup(&self, v: &Var) -> Option<&Binding> {
        self.lookup_name(v.name())
    }

    /// What the name `name` is bound to in scope.
    pub(crate) fn lookup_name(&self, name: &str) -> Option<&Binding> {
        self.scope.iter().rev().find(|(n, _)| n == name).map(|(_, b)| b)
    }

    /// Binds `name` in the current scope.
    pub(crate) fn bind_name(&mut self, name: String, b: Binding) {
        self.scope.push((name, b));
    }

    pub(crate) fn push(&mut self, r: AsmRegister64) -> AsmResult<()> {
        self.depth += 8;
        self.a.push(r)
    }

    pub(crate) fn pop(&mut self, r: AsmRegister64) -> AsmResult<()> {
        self.depth -= 8;
        self.a.pop(r)
    }

    /// Calls helper `h` (an index into the context's helper table; arguments already in the
    /// System V registers), keeping `rsp` 16-aligned. Through the table, the code holds no
    /// absolute address: its bytes mean the same in any process.
    pub(crate) fn call(&mut self, h: usize) -> AsmResult<()> {
        let pad = !self.depth.is_multiple_of(16);
        if pad {
            self.a.sub(rsp, 8)?;
        }
        self.a.call(qword_ptr(r12 + (rt::OFF_HELPERS + 8 * h as i32)))?;
        if pad {
            self.a.add(rsp, 8)?;
        }
        Ok(())
    }

    /// Generates the body and returns the finished function.
    pub fn finish(mut self, body: &Stmt) -> AsmResult<Generated> {
        // Prologue: six pushes plus the return address leave rsp 16-aligned after `sub 8`.
        self.a.push(rbp)?;
        self.a.mov(rbp, rsp)?;
        self.a.push(rbx)?;
        self.a.push(r12)?;
        self.a.push(r13)?;
        self.a.push(r14)?;
        self.a.push(r15)?;
        self.a.sub(rsp, 8)?;
        self.a.mov(r12, rdi)?;
        self.a.mov(r13, rsi)?;
        self.a.mov(r14, qword_ptr(r12 + rt::OFF_MEMS))?;
        // Resume dispatch: the frame's first word is 0 at the start, k + 1 after barrier k.
        let n = count_barriers(body);
        let mut resume: Vec<CodeLabel> = (0..n).map(|_| self.a.create_label()).collect();
        if n > 0 {
            self.a.mov(rax, qword_ptr(r13))?;
            for (k, l) in resume.iter().enumerate() {
                self.a.cmp(rax, k as i32 + 1)?;
                self.a.je(*l)?;
            }
        }
        self.resume = std::mem::take(&mut resume);
        if n == 0 {
            // No barriers: this call runs every work-item of the group, keeping the ids in
            // the context current (dimension 0 fastest) so that faults name the work-item.
            let mut top = self.a.create_label();
            let mut done = self.a.create_label();
            self.a.xor(r15d, r15d)?;
            self.bind(&mut top)?;
            self.stmt(body)?;
            self.a.inc(r15)?;
            self.a.cmp(r15, qword_ptr(r12 + rt::OFF_ITEMS))?;
            self.a.jae(done)?;
            for d in 0..3 {
                let mut carry = self.a.create_label();
                let lid = r12 + (rt::OFF_LOCAL_ID + 8 * d);
                let gid = r12 + (rt::OFF_GLOBAL_ID + 8 * d);
                self.a.mov(rax, qword_ptr(lid))?;
                self.a.inc(rax)?;
                self.a.cmp(rax, qword_ptr(r12 + (rt::OFF_LOCAL_SIZE + 8 * d)))?;
                self.a.je(carry)?;
                self.a.mov(qword_ptr(lid), rax)?;
                self.a.inc(qword_ptr(gid))?;
                self.a.jmp(top)?;
                self.bind(&mut carry)?;
                self.a.mov(qword_ptr(lid), 0)?;
                self.a.mov(rax, qword_ptr(r12 + (rt::OFF_BASE + 8 * d)))?;
                self.a.mov(qword_ptr(gid), rax)?;
            }
            self.a.jmp(top)?;
            self.bind(&mut done)?;
        } else {
            self.stmt(body)?;
        }
        self.a.xor(eax, eax)?;
        let mut epi = self.epilogue;
        self.bind(&mut epi)?;
        self.a.lea(rsp, qword_ptr(rbp - 40))?;
        self.a.pop(r15)?;
        self.a.pop(r14)?;
        self.a.pop(r13)?;
        self.a.pop(r12)?;
        self.a.pop(rbx)?;
        self.a.pop(rbp)?;
        self.a.ret()?;
        let stubs = std::mem::take(&mut self.stubs);
        for (mut l, stub) in stubs {
            self.bind(&mut l)?;
            match stub {
                Stub::Fault { code, site, with_value } => {
                    if with_value {
                        self.a.mov(qword_ptr(r12 + rt::OFF_ERR_VAL), rax)?;
                    }
                    self.a.mov(qword_ptr(r12 + rt::OFF_ERR_CODE), code as i32)?;
                    self.a.mov(rax, site)?;
                    self.a.mov(qword_ptr(r12 + rt::OFF_ERR_SITE), rax)?;
                    self.a.mov(rax, rt::STOP_ERROR)?;
                    self.a.jmp(self.epilogue)?;
                }
                Stub::Limit { back } => {
                    // Reached from statement level only, where rsp is 16-aligned.
                    self.a.mov(rdi, r12)?;
                    self.a
                        .call(qword_ptr(r12 + (rt::OFF_HELPERS + 8 * rt::HELPER_LIMIT as i32)))?;
                    self.a.test(rax, rax)?;
                    self.a.je(back)?;
                    self.a.mov(rax, rt::STOP_ERROR)?;
                    self.a.jmp(self.epilogue)?;
                }
            }
        }
        let frame_bytes = (self.next_slot as usize + self.oversize.unwrap_or(0)).div_ceil(16) * 16;
        Ok(Generated {
            asm: self.a,
            mems: self.mems,
            sites: self.sites,
            frame_bytes,
            local_bytes: self.local_bytes,
            n_barriers: n,
            marks: self.marks,
        })
    }

    /// A loop back-edge: counts down the budget and asks [`rt::limit_hit`] when it runs out.
    fn back_edge(&mut self) -> AsmResult<()> {
        let slow = self.a.create_label();
        let mut back = self.a.create_label();
        self.a.dec(qword_ptr(r12 + rt::OFF_BUDGET))?;
        self.a.je(slow)?;
        self.bind(&mut back)?;
        self.stubs.push((slow, Stub::Limit { back }));
        Ok(())
    }

    fn mark(&mut self, s: &Stmt) {
        // Printed only when the disassembly is asked for (printing is not free).
        self.marks.push((self.a.instructions().len(), Mark::Stmt(s.clone())));
    }

    fn scoped(&mut self, s: &Stmt) -> AsmResult<()> {
        let mark = self.scope.len();
        self.stmt(s)?;
        self.scope.truncate(mark);
        Ok(())
    }

    fn store_slot(&mut self, slot: i32) -> AsmResult<()> {
        self.a.mov(qword_ptr(r13 + slot), rax)
    }

    fn stmt(&mut self, s: &Stmt) -> AsmResult<()> {
        if !matches!(s.node(), StmtNode::Block(_)) {
            self.mark(s);
        }
        match s.node() {
            StmtNode::Let { var, value } if var.ty().is_vector() => self.vec_let(var, value)?,
            StmtNode::Let { var, value } | StmtNode::Decl { var, init: value } => {
                self.expr(value)?;
                let slot = self.new_slot();
                self.store_slot(slot)?;
                self.scope.push((var.name().to_string(), Binding::Slot(slot)));
            }
            StmtNode::Assign { var, value } => {
                self.expr(value)?;
                let slot = self.lookup_slot(var);
                self.store_slot(slot)?;
            }
            StmtNode::VecStore { buf, index, value } => self.vec_store(buf, index, value)?,
            StmtNode::Store { buf, index, value } => {
                let mem = self.lookup_mem(buf);
                self.expr(index)?;
                self.push(rax)?;
                self.expr(value)?;
                self.a.mov(rcx, rax)?;
                self.pop(rax)?;
                let signed = index.ty().scalar().is_some_and(Scalar::is_signed);
                self.address(mem, "store", signed)?;
                self.store_element(mem)?;
            }
            StmtNode::Alloc { var, count } => self.alloc(var, *count)?,
            StmtNode::If { cond, then, otherwise } => {
                self.expr(cond)?;
                let mut else_l = self.a.create_label();
                let mut end = self.a.create_label();
                self.a.test(eax, eax)?;
                self.a.je(else_l)?;
                self.scoped(then)?;
                if let Some(o) = otherwise {
                    self.a.jmp(end)?;
                    self.bind(&mut else_l)?;
                    self.scoped(o)?;
                } else {
                    self.bind(&mut else_l)?;
                }
                self.bind(&mut end)?;
                self.a.nop()?;
            }
            StmtNode::For { var, lo, hi, step, body } => self.for_loop(var, lo, hi, step, body)?,
            StmtNode::While { cond, body } => {
                let mut top = self.a.create_label();
                let mut exit = self.a.create_label();
                self.bind(&mut top)?;
                self.expr(cond)?;
                self.a.test(eax, eax)?;
                self.a.je(exit)?;
                self.scoped(body)?;
                self.back_edge()?;
                self.a.jmp(top)?;
                self.bind(&mut exit)?;
                self.a.nop()?;
            }
            StmtNode::Block(stmts) => {
                let mark = self.scope.len();
                for s in stmts {
                    self.stmt(s)?;
                }
                self.scope.truncate(mark);
            }
            StmtNode::Call { result, func, args } => match func.kind() {
                FuncKind::Barrier(_) => {
                    // Numbered in program order from 0, as the interpreter numbers them.
                    let id = self.next_barrier as i32;
                    self.next_barrier += 1;
                    let mut l = self.resume[id as usize];
                    self.a.mov(qword_ptr(r13), id + 1)?;
                    self.a.mov(eax, id + 1)?;
                    self.a.jmp(self.epilogue)?;
                    self.bind(&mut l)?;
                    let at = self.a.instructions().len();
                    self.marks.push((at, Mark::Region(id as u32 + 1)));
                    self.a.nop()?;
                }
                FuncKind::Fence(_) => {}
                FuncKind::Atomic(op) => self.atomic(op, result.as_ref(), args)?,
                // Refused by name before code generation (`compile_inner`).
                FuncKind::Matrix(_) => {}
            },
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn for_loop(
        &mut self,
        var: &Var,
        lo: &Expr,
        hi: &Expr,
        step: &Expr,
        body: &Stmt,
    ) -> AsmResult<()> {
        let t = var.ty().scalar().unwrap_or(Scalar::I32);
        let signed = t.is_signed();
        self.expr(lo)?;
        self.push(rax)?;
        self.expr(hi)?;
        self.push(rax)?;
        self.expr(step)?;
        self.a.mov(rcx, rax)?;
        self.pop(rdx)?;
        self.pop(r8)?;
        let bad = self.fault(
            rt::ERR_FOR_STEP,
            Site::ForStep { var: var.name().to_string(), signed },
            true,
        );
        self.a.test(rax, rax)?;
        if signed {
            self.a.jle(bad)?;
        } else {
            self.a.je(bad)?;
        }
        let (counter, left, step_slot) = (self.new_slot(), self.new_slot(), self.new_slot());
        let mut exit = self.a.create_label();
        let mut top = self.a.create_label();
        self.a.mov(qword_ptr(r13 + step_slot), rcx)?;
        self.a.cmp(rdx, r8)?;
        if signed {
            self.a.jle(exit)?;
        } else {
            self.a.jbe(exit)?;
        }
        self.a.mov(qword_ptr(r13 + counter), r8)?;
        // Trips - 1 = (hi - lo - 1) / step, exact in u64 (hi > lo, step > 0), no overflow.
        self.a.mov(rax, rdx)?;
        self.a.sub(rax, r8)?;
        self.a.dec(rax)?;
        self.a.xor(edx, edx)?;
        self.a.div(rcx)?;
        self.a.mov(qword_ptr(r13 + left), rax)?;
        self.bind(&mut top)?;
        let mark = self.scope.len();
        self.scope.push((var.name().to_string(), Binding::Slot(counter)));
        self.scoped(body)?;
        self.scope.truncate(mark);
        self.a.mov(rax, qword_ptr(r13 + left))?;
        self.a.test(rax, rax)?;
        self.a.je(exit)?;
        self.a.dec(rax)?;
        self.a.mov(qword_ptr(r13 + left), rax)?;
        self.a.mov(rax, qword_ptr(r13 + counter))?;
        self.a.add(rax, qword_ptr(r13 + step_slot))?;
        self.canon(t)?;
        self.a.mov(qword_ptr(r13 + counter), rax)?;
        self.back_edge()?;
        self.a.jmp(top)?;
        self.bind(&mut exit)?;
        self.a.nop()
    }

    /// Computes the address base of `mem` into `rdx` for the index in `rax`, checking the
    /// index first unless bounds checks are off.
    pub(crate) fn address(&mut self, mem: u32, what: &'static str, signed: bool) -> AsmResult<()> {
        let kind = self.mems[mem as usize].kind;
        let site = Site::Access { what, mem, signed };
        match kind {
            MemKind::Table(t) => {
                let t = t as i32 * 16;
                if self.checked {
                    let l = self.fault(rt::ERR_OOB, site, true);
                    // Unsigned: a negative signed index is huge and fails too.
                    self.a.cmp(rax, qword_ptr(r14 + (t + 8)))?;
                    self.a.jae(l)?;
                }
                self.a.mov(rdx, qword_ptr(r14 + t))?;
            }
            MemKind::Private { off, count } => {
                if self.checked {
                    let l = self.fault(rt::ERR_OOB, site, true);
                    if count <= i32::MAX as u32 {
                        self.a.cmp(rax, count as i32)?;
                    } else {
                        self.a.mov(rdx, count as u64)?;
                        self.a.cmp(rax, rdx)?;
                    }
                    self.a.jae(l)?;
                }
                self.a.lea(rdx, qword_ptr(r13 + off))?;
            }
        }
        Ok(())
    }

    fn alloc(&mut self, var: &Var, count: u32) -> AsmResult<()> {
        let (space, elem) = match var.ty() {
            Type::Ptr(s, e) => (s, e),
            Type::Scalar(_) | Type::Vector(..) | Type::Frag(_) => return Ok(()),
        };
        let bytes = array_bytes(elem, count);
        let m = self.mems.len() as u32;
        if space == AddrSpace::Local {
            let t = self.mems.iter().filter(|m| matches!(m.kind, MemKind::Table(_))).count();
            let off = self.local_bytes;
            self.local_bytes += bytes;
            self.mems.push(MemInfo {
                name: var.name().to_string(),
                elem,
                kind: MemKind::Table(t as u32),
                param: None,
                local: Some((off, count)),
            });
        } else {
            let off = self.next_private;
            if self.oversize.is_none() {
                self.next_private += bytes as i32;
            }
            self.mems.push(MemInfo {
                name: var.name().to_string(),
                elem,
                kind: MemKind::Private { off, count },
                param: None,
                local: None,
            });
            // Zeroed each time the declaration runs, as the interpreter does.
            self.a.lea(rdi, qword_ptr(r13 + off))?;
            self.a.mov(rcx, bytes as u64)?;
            self.a.xor(eax, eax)?;
            self.a.rep().stosb()?;
        }
        self.scope.push((var.name().to_string(), Binding::Mem(m)));
        Ok(())
    }

    fn atomic(&mut self, op: AtomicOp, result: Option<&Var>, args: &[Expr]) -> AsmResult<()> {
        let Some(buf) = args.first().and_then(Expr::as_var) else { return Ok(()) };
        let mem = self.lookup_mem(buf);
        let elem = self.mems[mem as usize].elem;
        let cas = op == AtomicOp::CmpXchg;
        let index = &args[1];
        self.expr(index)?;
        self.push(rax)?;
        if cas {
            self.expr(&args[2])?;
            self.push(rax)?;
        }
        self.expr(&args[args.len() - 1])?;
        self.a.mov(rcx, rax)?;
        if cas {
            self.pop(r8)?;
        }
        self.pop(rax)?;
        let signed = index.ty().scalar().is_some_and(Scalar::is_signed);
        self.address(mem, op.name(), signed)?;
        let wide = elem.size_bytes() == 8;
        self.a.lea(rdi, qword_ptr(rdx + rax * elem.size_bytes() as u32))?;
        // Every atomic is lock-prefixed: global buffers may be shared with groups running on
        // other threads.
        match op {
            AtomicOp::Add | AtomicOp::Sub if elem.is_int() => {
                self.a.mov(rax, rcx)?;
                if op == AtomicOp::Sub {
                    self.a.neg(rax)?;
                }
                if wide {
                    self.a.lock().xadd(qword_ptr(rdi), rax)?;
                } else {
                    self.a.lock().xadd(dword_ptr(rdi), eax)?;
                }
            }
            AtomicOp::Xchg => {
                if wide {
                    self.a.xchg(qword_ptr(rdi), rcx)?;
                } else {
                    self.a.xchg(dword_ptr(rdi), ecx)?;
                }
                self.a.mov(rax, rcx)?;
            }
            AtomicOp::CmpXchg => {
                self.a.mov(rax, r8)?;
                if wide {
                    self.a.lock().cmpxchg(qword_ptr(rdi), rcx)?;
                } else {
                    self.a.lock().cmpxchg(dword_ptr(rdi), ecx)?;
                }
            }
            _ => {
                // Compare-and-swap loop: rax = old, r9 = new.
                let mut retry = self.a.create_label();
                if wide {
                    self.a.mov(rax, qword_ptr(rdi))?;
                } else {
                    self.a.mov(eax, dword_ptr(rdi))?;
                }
                self.bind(&mut retry)?;
                self.a.mov(r9, rax)?;
                let s = elem.is_signed();
                match op {
                    AtomicOp::And => self.a.and(r9, rcx)?,
                    AtomicOp::Or => self.a.or(r9, rcx)?,
                    AtomicOp::Xor => self.a.xor(r9, rcx)?,
                    AtomicOp::Add | AtomicOp::Sub => {
                        // f32 add (the only float atomic).
                        self.a.movd(xmm0, eax)?;
                        self.a.movd(xmm1, ecx)?;
                        self.a.addss(xmm0, xmm1)?;
                        self.a.movd(r9d, xmm0)?;
                    }
                    AtomicOp::Min | AtomicOp::Max => {
                        let min = op == AtomicOp::Min;
                        if wide {
                            self.a.cmp(r9, rcx)?;
                            match (min, s) {
                                (true, true) => self.a.cmovg(r9, rcx)?,
                                (true, false) => self.a.cmova(r9, rcx)?,
                                (false, true) => self.a.cmovl(r9, rcx)?,
                                (false, false) => self.a.cmovb(r9, rcx)?,
                            }
                        } else {
                            self.a.cmp(r9d, ecx)?;
                            match (min, s) {
                                (true, true) => self.a.cmovg(r9d, ecx)?,
                                (true, false) => self.a.cmova(r9d, ecx)?,
                                (false, true) => self.a.cmovl(r9d, ecx)?,
                                (false, false) => self.a.cmovb(r9d, ecx)?,
                            }
                        }
                    }
                    AtomicOp::Xchg | AtomicOp::CmpXchg => {}
                }
                if wide {
                    self.a.lock().cmpxchg(qword_ptr(rdi), r9)?;
                } else {
                    self.a.lock().cmpxchg(dword_ptr(rdi), r9d)?;
                }
                self.a.jne(retry)?;
            }
        }
        self.canon(elem)?;
        if let Some(r) = result {
            let slot = self.new_slot();
            self.store_slot(slot)?;
            self.scope.push((r.name().to_string(), Binding::Slot(slot)));
        }
        Ok(())
    }
}

/// The number of barrier statements in `s`.
pub(crate) fn count_barriers(s: &Stmt) -> u32 {
    match s.node() {
        StmtNode::Call { .. } => s.barrier_fence().is_some() as u32,
        StmtNode::If { then, otherwise, .. } => {
            count_barriers(then) + otherwise.as_ref().map_or(0, count_barriers)
        }
        StmtNode::For { body, .. } | StmtNode::While { body, .. } => count_barriers(body),
        StmtNode::Block(v) => v.iter().map(count_barriers).sum(),
        _ => 0,
    }
}
