//! Compiles a kernel, for one launch, into a flat program: instructions with jump targets,
//! variables resolved to slots, memory resolved to buffers or arrays, expressions flattened
//! into postfix code. Scalar arguments and uniform built-ins become constants.

use crate::expr::{BinOp, Builtin, Expr, ExprNode, Imm, Intrinsic, UnOp};
use crate::kernel::Kernel;
use crate::matrix::{FragRole, Layout, MatShape, MatrixOp};
use crate::stmt::{AtomicOp, FuncKind, Stmt, StmtNode};
use crate::types::{AddrSpace, Scalar, Type};
use crate::warpgroup::WgLayout;

use super::Arg;
use crate::eval as ops;
use crate::launch::Buffer;
use crate::launch::Launch;

/// Where a pointer variable's memory is.
#[derive(Clone, Copy, Debug)]
pub(super) enum Mem {
    /// `buffers[i]`, bound to a kernel parameter.
    Buffer(u32),
    /// The work-group's `i`-th local array.
    Local(u32),
    /// The work-item's `i`-th private array.
    Private(u32),
}

/// A pointer variable: its name (for messages) and its memory.
#[derive(Clone, Debug)]
pub(super) struct MemInfo {
    pub name: String,
    pub mem: Mem,
    /// For a buffer bound through a range ([`Arg::Range`]): its `(offset, len)`; indexes
    /// are relative to `offset` and bounded by `len`.
    pub window: Option<(usize, usize)>,
}

/// One postfix operation on the evaluation stack.
#[derive(Clone, Debug)]
pub(super) enum Op {
    Slot(u32),
    Const(Imm),
    LocalId(u8),
    GlobalId(u8),
    GroupId(u8),
    Unary(UnOp),
    Binary(BinOp),
    /// Integer-capable `/` or `%`: `exprs[i]` is the expression, for the error message.
    DivRem(BinOp, u32),
    Select,
    Cast(Scalar),
    /// Pops an index, pushes `mems[i][index]`.
    Load(u32),
    Intrinsic(Intrinsic, u8),
    /// Lane-wise operations on vectors of `lanes` lanes; a vector is `lanes` consecutive
    /// stack entries, lane 0 deepest.
    VUnary(UnOp, u8),
    VBinary(BinOp, u8),
    /// Lane-wise `/` or `%`: `exprs[i]` is the expression, for the error message.
    VDivRem(BinOp, u32, u8),
    /// Pops a vector, a vector and a bool condition (pushed in that order reversed).
    VSelect(u8),
    /// Pops a vector, a vector and a mask of as many lanes: lane `k` from the first vector
    /// where mask lane `k` is true, else from the second.
    VSelectMask(u8),
    /// `VCast(to, lanes)`: casts each lane to `to`.
    VCast(Scalar, u8),
    /// `VIntrinsic(f, arity, lanes)`.
    VIntrinsic(Intrinsic, u8, u8),
    /// Pops an index, pushes `lanes` elements of `mems[m]` from it on.
    VecLoad(u32, u8),
    /// `Extract(lane, lanes)`: pops a vector, pushes one lane.
    Extract(u8, u8),
    /// `Insert(lane, lanes)`: pops a scalar and a vector, pushes the vector with the lane set.
    Insert(u8, u8),
    /// Pops a scalar, pushes it `lanes` times.
    Broadcast(u8),
}

/// A range of [`Program::ops`] that evaluates one expression.
#[derive(Clone, Copy, Debug)]
pub(super) struct Code {
    pub start: u32,
    pub end: u32,
}

/// One instruction.
#[derive(Clone, Debug)]
pub(super) enum Inst {
    /// `slots[slot] = value` (let, var, assignment).
    Set { slot: u32, value: Code },
    /// `slots[slot..slot + lanes] = value`, a vector (let, var, assignment).
    SetVector { slot: u32, lanes: u8, value: Code },
    /// `mems[mem][index] = value`.
    Store { mem: u32, index: Code, value: Code },
    /// `mems[mem][index..index + lanes] = value`, a vector.
    VecStore { mem: u32, lanes: u8, index: Code, value: Code },
    /// A private array declaration: zero it.
    ZeroPrivate { arr: u32 },
    /// Jump to `target` unless `cond` is true.
    Branch { cond: Code, target: u32 },
    /// Jump to `target`.
    Jump { target: u32 },
    /// Loop entry: evaluate the bounds, jump to `exit` if there is no iteration, else set the
    /// counter to `lo` and remember the remaining trip count in loop state `lp`.
    ForInit { var: u32, lp: u32, lo: Code, hi: Code, step: Code, exit: u32 },
    /// Loop latch: if iterations remain, step the counter and jump to `body`.
    ForNext { var: u32, lp: u32, body: u32 },
    /// Barrier number `id` (in program order).
    Barrier { id: u32 },
    /// `frags[dst] = frags[src]` (let, var, assignment of a fragment).
    FragCopy { dst: u32, src: u32 },
    /// A cooperative matrix operation, number `site` in program order.
    Coop { site: u32, op: Coop },
    /// `copy_async`: `n` elements from `mems[src][si..]` to `mems[dst][di..]`.
    CopyAsync { dst: u32, di: Code, src: u32, si: Code, n: u8 },
    /// `async_commit()`.
    AsyncCommit,
    /// `async_wait(n)`.
    AsyncWait { n: u8 },
    /// `slots[slot] = frags[frag][index]` (`frag_elem`).
    FragElem { frag: u32, index: u8, slot: u32 },
    /// `tma_load`.
    Tma(Box<Tma>),
    /// A barrier-object operation on `mems[mem][index]` (`value`: the count, bytes or
    /// parity operand).
    Mbar { op: MatrixOp, mem: u32, index: Code, value: Option<Code> },
    /// An atomic on `mems[mem][index]`.
    Atomic {
        op: AtomicOp,
        mem: u32,
        index: Code,
        cmp: Option<Code>,
        value: Code,
        result: Option<u32>,
    },
}

/// A compiled `tma_load`: memories and operand codes.
#[derive(Clone, Debug)]
pub(super) struct Tma {
    pub dst: u32,
    pub di: Code,
    pub src: u32,
    /// Width, height, pitch, column, row.
    pub dims: [Code; 5],
    pub bar: u32,
    pub bi: Code,
    pub bx: crate::warpgroup::TmaBox,
}

/// A cooperative matrix operation (see [`crate::matrix`]); fragments are `frags` slots.
#[derive(Clone, Debug)]
pub(super) enum Coop {
    /// `frags[dst]` = the `rows`×`cols` tile at `mems[mem][offset..]`.
    Load { dst: u32, mem: u32, offset: Code, stride: Code, layout: Layout, rows: u32, cols: u32 },
    /// The tile `frags[src]` to `mems[mem][offset..]`.
    Store { src: u32, mem: u32, offset: Code, stride: Code, layout: Layout, rows: u32, cols: u32 },
    /// Every element of `frags[dst]` = `value`.
    Fill { dst: u32, value: Code },
    /// `frags[d] = frags[a] · frags[b] + frags[c]`.
    Mma { d: u32, a: u32, b: u32, c: u32, shape: MatShape },
    /// `wgmma`: `frags[d] += A·B` with A and B in local memory.
    Wgmma { d: u32, a: u32, ai: Code, b: u32, bi: Code, n: u16, sw: [WgLayout; 2] },
    /// `wgmma_fence`, `wgmma_commit`, `wgmma_wait`: only checked for uniformity.
    WgSync(&'static str),
    /// `setmaxnreg_inc`/`_dec(count)`: only checked for uniformity across the warpgroup.
    SetMaxNReg(&'static str, u16),
}

impl Coop {
    /// The operation's name in the text format.
    pub(super) fn name(&self) -> &'static str {
        match self {
            Coop::Load { .. } => "frag_load",
            Coop::Store { .. } => "frag_store",
            Coop::Fill { .. } => "frag_fill",
            Coop::Mma { .. } => "mma",
            Coop::Wgmma { .. } => "wgmma",
            Coop::WgSync(name) | Coop::SetMaxNReg(name, _) => name,
        }
    }
}

/// A compiled kernel, ready to run one launch.
#[derive(Debug)]
pub(super) struct Program {
    pub ops: Vec<Op>,
    pub insts: Vec<Inst>,
    pub mems: Vec<MemInfo>,
    /// Expressions named by error messages (divisions).
    pub exprs: Vec<Expr>,
    /// Names of for-loop counters, by loop state index.
    pub loop_vars: Vec<String>,
    /// Element type and length of each local array.
    pub locals: Vec<(Scalar, u32)>,
    /// Element type and length of each private array.
    pub privates: Vec<(Scalar, u32)>,
    pub n_slots: u32,
    pub n_barriers: u32,
    /// The element count of each fragment slot.
    pub frags: Vec<u32>,
    /// Cooperative matrix operations (sites), in program order.
    pub n_coop: u32,
    /// True if the kernel has warpgroup operations (work-groups of whole warpgroups).
    pub warpgroup: bool,
    /// True if a work-item may wait for others outside barriers (`mbar_wait`): each then
    /// keeps its own resumable state.
    pub blocking: bool,
}

enum Binding {
    Slot { slot: u32, mutable: bool },
    Frag { slot: u32, mutable: bool },
    Const(Imm),
    Mem(u32),
}

/// Deepest statement nesting accepted (deeper kernels are an error, not a stack overflow).
const MAX_NESTING: usize = 512;

struct Compiler<'a> {
    launch: &'a Launch,
    prog: Program,
    scope: Vec<(String, Binding)>,
    depth: usize,
}

/// Compiles `kernel` for `launch`, binding `args` (checked against the parameters and
/// `buffers`). Errors are messages about the launch or the kernel.
pub(super) fn compile(
    kernel: &Kernel,
    launch: &Launch,
    args: &[Arg],
    buffers: &[Buffer],
) -> Result<Program, String> {
    let mut c = Compiler {
        launch,
        prog: Program {
            ops: Vec::new(),
            insts: Vec::new(),
            mems: Vec::new(),
            exprs: Vec::new(),
            loop_vars: Vec::new(),
            locals: Vec::new(),
            privates: Vec::new(),
            n_slots: 0,
            n_barriers: 0,
            frags: Vec::new(),
            n_coop: 0,
            warpgroup: false,
            blocking: false,
        },
        scope: Vec::new(),
        depth: 0,
    };
    c.bind_args(kernel, args, buffers)?;
    c.scoped(kernel.body())?;
    Ok(c.prog)
}

impl Compiler<'_> {
    fn bind_args(
        &mut self,
        kernel: &Kernel,
        args: &[Arg],
        buffers: &[Buffer],
    ) -> Result<(), String> {
        crate::launch::check_args(kernel, args, buffers.len(), |&b| {
            buffers.get(b).map(|buf| (buf.elem(), buf.len()))
        })?;
        for (p, a) in kernel.params().iter().zip(args) {
            let name = p.name();
            let binding = match a {
                Arg::Scalar(v) => Binding::Const(normalize(*v)),
                Arg::Buffer(b) | Arg::Range { buffer: b, .. } => {
                    let m = self.add_mem(name, Mem::Buffer(*b as u32));
                    if let Arg::Range { offset, len, .. } = *a {
                        self.prog.mems[m as usize].window = Some((offset, len));
                    }
                    Binding::Mem(m)
                }
            };
            self.scope.push((name.to_string(), binding));
        }
        Ok(())
    }

    fn add_mem(&mut self, name: &str, mem: Mem) -> u32 {
        self.prog.mems.push(MemInfo { name: name.to_string(), mem, window: None });
        (self.prog.mems.len() - 1) as u32
    }

    fn new_slot(&mut self) -> u32 {
        self.new_slots(1)
    }

    /// `n` consecutive slots (a vector takes one per lane); the first one's number.
    fn new_slots(&mut self, n: u8) -> u32 {
        self.prog.n_slots += n as u32;
        self.prog.n_slots - n as u32
    }

    /// `slots[slot..] = value` for a value of type `ty`.
    fn set(&mut self, slot: u32, ty: Type, value: Code) {
        match ty {
            Type::Vector(_, lanes) => self.emit(Inst::SetVector { slot, lanes, value }),
            _ => self.emit(Inst::Set { slot, value }),
        };
    }

    fn lookup(&self, name: &str) -> Result<&Binding, String> {
        self.scope
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b)
            .ok_or_else(|| format!("ill-formed kernel: `{name}` is not in scope"))
    }

    fn mem_of(&self, name: &str) -> Result<u32, String> {
        match self.lookup(name)? {
            Binding::Mem(m) => Ok(*m),
            _ => Err(format!("ill-formed kernel: `{name}` is not a pointer")),
        }
    }

    fn bind(&mut self, name: &str, b: Binding) {
        self.scope.push((name.to_string(), b));
    }

    fn emit(&mut self, inst: Inst) -> u32 {
        self.prog.insts.push(inst);
        (self.prog.insts.len() - 1) as u32
    }

    fn here(&self) -> u32 {
        self.prog.insts.len() as u32
    }

    /// Compiles `e` to postfix code, without recursion (expressions may be deep).
    fn expr(&mut self, e: &Expr) -> Result<Code, String> {
        let start = self.prog.ops.len() as u32;
        let mut stack: Vec<(&Expr, bool)> = vec![(e, false)];
        while let Some((e, children_done)) = stack.pop() {
            if !children_done {
                stack.push((e, true));
                stack.extend(e.children().into_iter().rev().map(|c| (c, false)));
                continue;
            }
            let lanes = e.ty().lanes();
            let vector = e.ty().is_vector();
            let op = match e.node() {
                ExprNode::Var(v) => match self.lookup(v.name())? {
                    Binding::Slot { slot, .. } if vector => {
                        let slot = *slot;
                        for k in 0..lanes as u32 - 1 {
                            self.prog.ops.push(Op::Slot(slot + k));
                        }
                        Op::Slot(slot + lanes as u32 - 1)
                    }
                    Binding::Slot { slot, .. } => Op::Slot(*slot),
                    Binding::Const(c) => Op::Const(*c),
                    Binding::Frag { .. } => {
                        return Err(format!(
                            "ill-formed kernel: fragment `{}` used as a value",
                            v.name()
                        ))
                    }
                    Binding::Mem(_) => {
                        return Err(format!(
                            "ill-formed kernel: pointer `{}` used as a value",
                            v.name()
                        ))
                    }
                },
                ExprNode::Imm(i) => Op::Const(normalize(*i)),
                ExprNode::Unary { op, a } if a.ty().is_vector() => Op::VUnary(*op, lanes),
                ExprNode::Binary { op, a, .. } if a.ty().is_vector() => {
                    if op.is_logical() {
                        return Err(format!("ill-formed kernel: `{}` on vectors", op.symbol()));
                    }
                    if matches!(op, BinOp::Div | BinOp::Rem) {
                        self.prog.exprs.push(e.clone());
                        Op::VDivRem(*op, (self.prog.exprs.len() - 1) as u32, lanes)
                    } else {
                        Op::VBinary(*op, lanes)
                    }
                }
                ExprNode::Select { cond, .. } if vector && cond.ty().is_vector() => {
                    Op::VSelectMask(lanes)
                }
                ExprNode::Select { .. } if vector => Op::VSelect(lanes),
                ExprNode::Cast { to, a } if a.ty().is_vector() => Op::VCast(*to, lanes),
                ExprNode::Intrinsic { op, args } if vector => {
                    if args.len() != op.arity() {
                        return Err(format!("ill-formed kernel: `{}` arity", op.name()));
                    }
                    Op::VIntrinsic(*op, args.len() as u8, lanes)
                }
                ExprNode::VecLoad { buf, lanes, .. } => {
                    Op::VecLoad(self.mem_of(buf.name())?, *lanes)
                }
                ExprNode::Extract { a, lane } => {
                    let n = a.ty().lanes();
                    if *lane >= n || !a.ty().is_vector() {
                        return Err(format!("ill-formed kernel: lane {lane} of a {}", a.ty()));
                    }
                    Op::Extract(*lane, n)
                }
                ExprNode::Insert { a, lane, .. } => {
                    let n = a.ty().lanes();
                    if *lane >= n || !a.ty().is_vector() {
                        return Err(format!("ill-formed kernel: lane {lane} of a {}", a.ty()));
                    }
                    Op::Insert(*lane, n)
                }
                ExprNode::Vector { elems, .. } => {
                    if elems.len() == 1 {
                        Op::Broadcast(lanes)
                    } else if elems.len() == lanes as usize {
                        // The lanes are on the stack already, in order.
                        continue;
                    } else {
                        return Err(format!(
                            "ill-formed kernel: {} lanes for a {}",
                            elems.len(),
                            e.ty()
                        ));
                    }
                }
                ExprNode::Unary { op, .. } => Op::Unary(*op),
                ExprNode::Binary { op: op @ (BinOp::Div | BinOp::Rem), .. } => {
                    self.prog.exprs.push(e.clone());
                    Op::DivRem(*op, (self.prog.exprs.len() - 1) as u32)
                }
                ExprNode::Binary { op, .. } => Op::Binary(*op),
                ExprNode::Select { .. } => Op::Select,
                ExprNode::Cast { to, .. } => Op::Cast(*to),
                ExprNode::Load { buf, .. } => Op::Load(self.mem_of(buf.name())?),
                ExprNode::Builtin { kind, dim } => self.builtin(*kind, *dim)?,
                ExprNode::Intrinsic { op, args } => {
                    if args.len() != op.arity() {
                        return Err(format!(
                            "ill-formed kernel: `{}` takes {} arguments, not {}",
                            op.name(),
                            op.arity(),
                            args.len()
                        ));
                    }
                    Op::Intrinsic(*op, args.len() as u8)
                }
            };
            self.prog.ops.push(op);
        }
        Ok(Code { start, end: self.prog.ops.len() as u32 })
    }

    fn builtin(&self, kind: Builtin, dim: u8) -> Result<Op, String> {
        if dim > 2 {
            return Err(format!(
                "ill-formed kernel: `{}({dim})`: dimension must be 0, 1 or 2",
                kind.name()
            ));
        }
        let d = dim as usize;
        let l = self.launch;
        let c = |v: u32| Op::Const(Imm::Int(Scalar::U32, v as u64));
        Ok(match kind {
            Builtin::GlobalId => Op::GlobalId(dim),
            Builtin::LocalId => Op::LocalId(dim),
            Builtin::GroupId => Op::GroupId(dim),
            Builtin::GlobalSize => c(l.global[d]),
            Builtin::LocalSize => c(l.local[d]),
            Builtin::NumGroups => c(l.global[d] / l.local[d]),
            Builtin::GlobalOffset => c(l.offset[d]),
        })
    }

    /// Compiles a statement whose bindings end with it.
    fn scoped(&mut self, s: &Stmt) -> Result<(), String> {
        let mark = self.scope.len();
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(format!("statements nested more than {MAX_NESTING} deep"));
        }
        let r = self.stmt(s);
        self.depth -= 1;
        self.scope.truncate(mark);
        r
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), String> {
        match s.node() {
            StmtNode::Let { var, value } | StmtNode::Decl { var, init: value }
                if var.ty().frag().is_some() =>
            {
                let src = self.frag_of(value, var.ty())?;
                let dst = self.new_frag(var.ty())?;
                self.emit(Inst::FragCopy { dst, src });
                let mutable = matches!(s.node(), StmtNode::Decl { .. });
                self.bind(var.name(), Binding::Frag { slot: dst, mutable });
            }
            StmtNode::Assign { var, value } if var.ty().frag().is_some() => {
                let dst = match self.lookup(var.name())? {
                    Binding::Frag { slot, mutable: true } => *slot,
                    _ => {
                        return Err(format!(
                            "ill-formed kernel: assignment to `{}`, which is not a `var`",
                            var.name()
                        ))
                    }
                };
                let src = self.frag_of(value, var.ty())?;
                self.emit(Inst::FragCopy { dst, src });
            }
            StmtNode::Let { var, value } | StmtNode::Decl { var, init: value } => {
                if var.ty() != value.ty() {
                    return Err(format!(
                        "ill-formed kernel: `{}` is {} but its value is {}",
                        var.name(),
                        var.ty(),
                        value.ty()
                    ));
                }
                let code = self.expr(value)?;
                let slot = self.new_slots(var.ty().lanes());
                self.set(slot, var.ty(), code);
                let mutable = matches!(s.node(), StmtNode::Decl { .. });
                self.bind(var.name(), Binding::Slot { slot, mutable });
            }
            StmtNode::Assign { var, value } => {
                let slot = match self.lookup(var.name())? {
                    Binding::Slot { slot, mutable: true } => *slot,
                    _ => {
                        return Err(format!(
                            "ill-formed kernel: assignment to `{}`, which is not a `var`",
                            var.name()
                        ))
                    }
                };
                if var.ty() != value.ty() {
                    return Err(format!(
                        "ill-formed kernel: `{}` is {} but the value assigned is {}",
                        var.name(),
                        var.ty(),
                        value.ty()
                    ));
                }
                let code = self.expr(value)?;
                self.set(slot, var.ty(), code);
            }
            StmtNode::Store { buf, index, value } => {
                let mem = self.mem_of(buf.name())?;
                if buf.ty().addr_space() == Some(AddrSpace::Constant) {
                    return Err(format!(
                        "ill-formed kernel: store through constant pointer `{}`",
                        buf.name()
                    ));
                }
                let index = self.expr(index)?;
                let value = self.expr(value)?;
                self.emit(Inst::Store { mem, index, value });
            }
            StmtNode::VecStore { buf, index, value } => {
                let mem = self.mem_of(buf.name())?;
                let (Some(space), Type::Vector(elem, lanes)) = (buf.ty().addr_space(), value.ty())
                else {
                    return Err(format!(
                        "ill-formed kernel: vector store of a {} through `{}`",
                        value.ty(),
                        buf.name()
                    ));
                };
                if space == AddrSpace::Constant || buf.ty().elem() != Some(elem) {
                    return Err(format!(
                        "ill-formed kernel: vector store of a {} through `{}` ({})",
                        value.ty(),
                        buf.name(),
                        buf.ty()
                    ));
                }
                let index = self.expr(index)?;
                let value = self.expr(value)?;
                self.emit(Inst::VecStore { mem, lanes, index, value });
            }
            StmtNode::Alloc { var, count } => match var.ty() {
                Type::Ptr(AddrSpace::Local, elem) => {
                    self.prog.locals.push((elem, *count));
                    let m = self.add_mem(var.name(), Mem::Local(self.prog.locals.len() as u32 - 1));
                    self.bind(var.name(), Binding::Mem(m));
                }
                Type::Ptr(AddrSpace::Private, elem) => {
                    self.prog.privates.push((elem, *count));
                    let arr = self.prog.privates.len() as u32 - 1;
                    self.emit(Inst::ZeroPrivate { arr });
                    let m = self.add_mem(var.name(), Mem::Private(arr));
                    self.bind(var.name(), Binding::Mem(m));
                }
                t => {
                    return Err(format!(
                        "ill-formed kernel: array `{}` of type {t}: arrays are local or private",
                        var.name()
                    ))
                }
            },
            StmtNode::If { cond, then, otherwise } => {
                let cond = self.expr(cond)?;
                let branch = self.emit(Inst::Branch { cond, target: 0 });
                self.scoped(then)?;
                let target = match otherwise {
                    Some(o) => {
                        let jump = self.emit(Inst::Jump { target: 0 });
                        let else_start = self.here();
                        self.scoped(o)?;
                        let end = self.here();
                        self.patch(jump, end);
                        else_start
                    }
                    None => self.here(),
                };
                self.patch(branch, target);
            }
            StmtNode::For { var, lo, hi, step, body } => {
                if !var.ty().is_int() {
                    return Err(format!(
                        "ill-formed kernel: loop counter `{}` is a {}, not an integer",
                        var.name(),
                        var.ty()
                    ));
                }
                let lo = self.expr(lo)?;
                let hi = self.expr(hi)?;
                let step = self.expr(step)?;
                let slot = self.new_slot();
                let lp = self.prog.loop_vars.len() as u32;
                self.prog.loop_vars.push(var.name().to_string());
                let init = self.emit(Inst::ForInit { var: slot, lp, lo, hi, step, exit: 0 });
                let mark = self.scope.len();
                self.bind(var.name(), Binding::Slot { slot, mutable: false });
                let body_start = self.here();
                self.scoped(body)?;
                self.scope.truncate(mark);
                self.emit(Inst::ForNext { var: slot, lp, body: body_start });
                let exit = self.here();
                self.patch(init, exit);
            }
            StmtNode::While { cond, body } => {
                let top = self.here();
                let cond = self.expr(cond)?;
                let branch = self.emit(Inst::Branch { cond, target: 0 });
                self.scoped(body)?;
                self.emit(Inst::Jump { target: top });
                let exit = self.here();
                self.patch(branch, exit);
            }
            StmtNode::Block(stmts) => {
                let mark = self.scope.len();
                for s in stmts {
                    self.stmt_nested(s)?;
                }
                self.scope.truncate(mark);
            }
            StmtNode::Call { result, func, args } => {
                self.call(result.as_ref(), func.kind(), args)?
            }
        }
        Ok(())
    }

    /// A statement of a block: its bindings stay for the rest of the block.
    fn stmt_nested(&mut self, s: &Stmt) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(format!("statements nested more than {MAX_NESTING} deep"));
        }
        let r = self.stmt(s);
        self.depth -= 1;
        r
    }

    fn call(
        &mut self,
        result: Option<&crate::expr::Var>,
        kind: FuncKind,
        args: &[Expr],
    ) -> Result<(), String> {
        let name = match kind {
            FuncKind::Barrier(_) => "barrier",
            FuncKind::Fence(_) => "fence",
            FuncKind::Atomic(op) => op.name(),
            FuncKind::Matrix(op) => op.name(),
        };
        let op = match kind {
            FuncKind::Matrix(op) => return self.matrix(result, op, args),
            FuncKind::Barrier(_) | FuncKind::Fence(_) => {
                if !args.is_empty() || result.is_some() {
                    return Err(format!(
                        "ill-formed kernel: `{name}` takes no operands and yields no value"
                    ));
                }
                if matches!(kind, FuncKind::Barrier(_)) {
                    let id = self.prog.n_barriers;
                    self.prog.n_barriers += 1;
                    self.emit(Inst::Barrier { id });
                }
                return Ok(());
            }
            FuncKind::Atomic(op) => op,
        };
        let want = 2 + op.value_operands();
        if args.len() != want {
            return Err(format!(
                "ill-formed kernel: `{name}` takes {want} operands, not {}",
                args.len()
            ));
        }
        let Some(buf) = args[0].as_var() else {
            return Err(format!(
                "ill-formed kernel: the first operand of `{name}` must be a pointer variable"
            ));
        };
        let mem = self.mem_of(buf.name())?;
        let (space, elem) = match buf.ty() {
            Type::Ptr(s, e) => (s, e),
            t => {
                return Err(format!("ill-formed kernel: `{name}` on `{}` of type {t}", buf.name()))
            }
        };
        if space == AddrSpace::Constant {
            return Err(format!(
                "ill-formed kernel: `{name}` through constant pointer `{}`",
                buf.name()
            ));
        }
        if !ops::atomic_defined(op, elem) {
            return Err(format!("ill-formed kernel: `{name}` is not defined on {elem} elements"));
        }
        let index = self.expr(&args[1])?;
        let cmp = if op == AtomicOp::CmpXchg { Some(self.expr(&args[2])?) } else { None };
        let value = self.expr(&args[want - 1])?;
        let result = result.map(|r| (r, self.new_slot()));
        self.emit(Inst::Atomic { op, mem, index, cmp, value, result: result.map(|r| r.1) });
        if let Some((r, slot)) = result {
            self.bind(r.name(), Binding::Slot { slot, mutable: false });
        }
        Ok(())
    }

    fn patch(&mut self, at: u32, to: u32) {
        match &mut self.prog.insts[at as usize] {
            Inst::Branch { target, .. } | Inst::Jump { target } => *target = to,
            Inst::ForInit { exit, .. } => *exit = to,
            _ => {}
        }
    }
}

/// An immediate in canonical form (integers wrapped and extended, floats rounded), so that
/// hand-built `Imm` values with stray bits behave as their type says.
pub(super) fn normalize(i: Imm) -> Imm {
    match i {
        Imm::Int(t, bits) if t.is_int() => Imm::Int(t, crate::expr::canonical_int(t, bits)),
        Imm::Float(t, v) if t.is_float() => Imm::Float(t, crate::expr::round_float(t, v)),
        other => other,
    }
}

impl Compiler<'_> {
    /// A fresh fragment slot for a value of type `ty`.
    fn new_frag(&mut self, ty: Type) -> Result<u32, String> {
        let Type::Frag(f) = ty else {
            return Err(format!("ill-formed kernel: {ty} is not a fragment type"));
        };
        f.check().map_err(|m| format!("ill-formed kernel: {m}"))?;
        self.prog.frags.push(f.held() as u32);
        Ok(self.prog.frags.len() as u32 - 1)
    }

    /// The slot of fragment variable `e`, which must be of type `ty` (any fragment if `None`).
    fn frag_of(&self, e: &Expr, ty: impl Into<Option<Type>>) -> Result<u32, String> {
        let ty = ty.into();
        let bad = || format!("ill-formed kernel: {e} is not a fragment variable of the right type");
        let v = e.as_var().ok_or_else(bad)?;
        if ty.is_some_and(|t| t != v.ty()) {
            return Err(bad());
        }
        match self.lookup(v.name())? {
            Binding::Frag { slot, .. } => Ok(*slot),
            _ => Err(bad()),
        }
    }

    fn matrix(
        &mut self,
        result: Option<&crate::expr::Var>,
        op: MatrixOp,
        args: &[Expr],
    ) -> Result<(), String> {
        let name = op.name();
        if args.len() != op.arity() || result.is_some() != op.has_result() {
            return Err(format!("ill-formed kernel: `{name}` operands"));
        }
        if op.is_warpgroup() {
            self.prog.warpgroup |= op.is_cooperative();
            if let Some(coop) = self.warpgroup(result, op, args)? {
                let site = self.prog.n_coop;
                self.prog.n_coop += 1;
                self.emit(Inst::Coop { site, op: coop });
            }
            return Ok(());
        }
        let ptr = |c: &Self, e: &Expr| -> Result<u32, String> {
            let v = e.as_var().ok_or_else(|| {
                format!("ill-formed kernel: the memory operand of `{name}` is not a pointer")
            })?;
            c.mem_of(v.name())
        };
        let dst = match result {
            Some(r) => Some(self.new_frag(r.ty())?),
            None => None,
        };
        let frag_ty = result.map(|r| r.ty());
        let coop = match op {
            MatrixOp::Load(layout) => {
                let f = frag_ty.and_then(Type::frag).ok_or("ill-formed kernel: frag_load type")?;
                let (rows, cols) = f.dims();
                let mem = ptr(self, &args[0])?;
                let offset = self.expr(&args[1])?;
                let stride = self.expr(&args[2])?;
                Coop::Load { dst: dst.unwrap_or(0), mem, offset, stride, layout, rows, cols }
            }
            MatrixOp::Store(layout) => {
                let f = args[3].ty().frag().ok_or("ill-formed kernel: frag_store operand")?;
                if f.role != FragRole::Acc {
                    return Err(format!("ill-formed kernel: `frag_store` of {f}"));
                }
                let (rows, cols) = f.dims();
                let src = self.frag_of(&args[3], None)?;
                let mem = ptr(self, &args[0])?;
                let offset = self.expr(&args[1])?;
                let stride = self.expr(&args[2])?;
                Coop::Store { src, mem, offset, stride, layout, rows, cols }
            }
            MatrixOp::Fill => {
                let value = self.expr(&args[0])?;
                Coop::Fill { dst: dst.unwrap_or(0), value }
            }
            MatrixOp::Mma => {
                let f = frag_ty.and_then(Type::frag).ok_or("ill-formed kernel: mma type")?;
                let a = self.frag_of(&args[0], None)?;
                let b = self.frag_of(&args[1], None)?;
                let c = self.frag_of(&args[2], frag_ty)?;
                let shapes = [&args[0], &args[1]].map(|x| x.ty().frag().map(|g| (g.role, g.shape)));
                if shapes != [Some((FragRole::A, f.shape)), Some((FragRole::B, f.shape))]
                    || args[0].ty().frag().map(|g| g.elem) != args[1].ty().frag().map(|g| g.elem)
                {
                    return Err("ill-formed kernel: `mma` operand types".to_string());
                }
                Coop::Mma { d: dst.unwrap_or(0), a, b, c, shape: f.shape }
            }
            MatrixOp::CopyAsync(n) => {
                let dst = ptr(self, &args[0])?;
                let di = self.expr(&args[1])?;
                let src = ptr(self, &args[2])?;
                let si = self.expr(&args[3])?;
                self.emit(Inst::CopyAsync { dst, di, src, si, n });
                return Ok(());
            }
            MatrixOp::Commit => {
                self.emit(Inst::AsyncCommit);
                return Ok(());
            }
            MatrixOp::Wait(n) => {
                self.emit(Inst::AsyncWait { n });
                return Ok(());
            }
            _ => return Err(format!("ill-formed kernel: `{name}`")),
        };
        let site = self.prog.n_coop;
        self.prog.n_coop += 1;
        self.emit(Inst::Coop { site, op: coop });
        if let (Some(r), Some(slot)) = (result, dst) {
            self.bind(r.name(), Binding::Frag { slot, mutable: false });
        }
        Ok(())
    }

    /// A warpgroup-tier call: the cooperative operation to emit, if it is one (the others are
    /// emitted here).
    fn warpgroup(
        &mut self,
        result: Option<&crate::expr::Var>,
        op: MatrixOp,
        args: &[Expr],
    ) -> Result<Option<Coop>, String> {
        let name = op.name();
        let ptr = |c: &Self, e: &Expr| -> Result<u32, String> {
            let v = e.as_var().ok_or_else(|| {
                format!("ill-formed kernel: the memory operand of `{name}` is not a pointer")
            })?;
            c.mem_of(v.name())
        };
        Ok(Some(match op {
            MatrixOp::Wgmma(swa, swb) => {
                let f = args[0].ty().frag().ok_or("ill-formed kernel: wgmma accumulator")?;
                let MatShape::M64(n) = f.shape else {
                    return Err("ill-formed kernel: wgmma accumulator shape".into());
                };
                let d = self.frag_of(&args[0], None)?;
                let a = ptr(self, &args[1])?;
                let ai = self.expr(&args[2])?;
                let b = ptr(self, &args[3])?;
                let bi = self.expr(&args[4])?;
                Coop::Wgmma { d, a, ai, b, bi, n, sw: [swa, swb] }
            }
            MatrixOp::WgFence | MatrixOp::WgCommit | MatrixOp::WgWait(_) => Coop::WgSync(name),
            MatrixOp::SetMaxNReg { count, .. } => Coop::SetMaxNReg(name, count),
            MatrixOp::FragElem(index) => {
                let r = result.ok_or("ill-formed kernel: frag_elem without a result")?;
                let frag = self.frag_of(&args[0], None)?;
                let slot = self.new_slot();
                self.emit(Inst::FragElem { frag, index, slot });
                self.bind(r.name(), Binding::Slot { slot, mutable: false });
                return Ok(None);
            }
            MatrixOp::TmaLoad(bx) => {
                let dst = ptr(self, &args[0])?;
                let di = self.expr(&args[1])?;
                let src = ptr(self, &args[2])?;
                let mut dims = Vec::with_capacity(5);
                for a in &args[3..8] {
                    dims.push(self.expr(a)?);
                }
                let dims: [Code; 5] = dims.try_into().map_err(|_| "ill-formed kernel: tma_load")?;
                let bar = ptr(self, &args[8])?;
                let bi = self.expr(&args[9])?;
                self.emit(Inst::Tma(Box::new(Tma { dst, di, src, dims, bar, bi, bx })));
                return Ok(None);
            }
            _ => {
                let mem = ptr(self, &args[0])?;
                let index = self.expr(&args[1])?;
                let value = match args.get(2) {
                    Some(v) => Some(self.expr(v)?),
                    None => None,
                };
                self.prog.blocking |= op == MatrixOp::MbarWait;
                self.emit(Inst::Mbar { op, mem, index, value });
                return Ok(None);
            }
        }))
    }
}
