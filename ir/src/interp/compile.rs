//! Compiles a kernel, for one launch, into a flat program: instructions with jump targets,
//! variables resolved to slots, memory resolved to buffers or arrays, expressions flattened
//! into postfix code. Scalar arguments and uniform built-ins become constants.

use crate::expr::{BinOp, Builtin, Expr, ExprNode, Imm, Intrinsic, UnOp};
use crate::kernel::Kernel;
use crate::stmt::{AtomicOp, FuncKind, Stmt, StmtNode};
use crate::types::{AddrSpace, Scalar, Type};

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
}

enum Binding {
    Slot { slot: u32, mutable: bool },
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
        let params = kernel.params();
        if args.len() != params.len() {
            return Err(format!(
                "the kernel takes {} argument{}, {} given",
                params.len(),
                if params.len() == 1 { "" } else { "s" },
                args.len()
            ));
        }
        for (i, (p, a)) in params.iter().zip(args).enumerate() {
            let name = p.name();
            let binding = match (p.ty(), a) {
                (Type::Scalar(s), Arg::Scalar(v)) => {
                    if v.scalar() != s {
                        return Err(format!(
                            "argument {i} (`{name}`) is a {s} but the value given is a {}",
                            v.scalar()
                        ));
                    }
                    Binding::Const(normalize(*v))
                }
                (Type::Ptr(_, elem), Arg::Buffer(b) | Arg::Range { buffer: b, .. }) => {
                    let Some(buf) = buffers.get(*b) else {
                        return Err(format!(
                            "argument {i} (`{name}`) binds buffer {b}, but only {} buffer{} given",
                            buffers.len(),
                            if buffers.len() == 1 { " is" } else { "s are" }
                        ));
                    };
                    if buf.elem() != elem {
                        return Err(format!(
                            "argument {i} (`{name}`) is a {} but buffer {b} holds {} elements",
                            p.ty(),
                            buf.elem()
                        ));
                    }
                    crate::launch::check_range(i, name, a, buf.len())?;
                    let m = self.add_mem(name, Mem::Buffer(*b as u32));
                    if let Arg::Range { offset, len, .. } = *a {
                        self.prog.mems[m as usize].window = Some((offset, len));
                    }
                    Binding::Mem(m)
                }
                (t, a) => {
                    return Err(format!(
                        "argument {i} (`{name}`) is a {t} but {} was given",
                        a.kind_word()
                    ))
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
    fn matrix(
        &mut self,
        _result: Option<&crate::expr::Var>,
        op: crate::matrix::MatrixOp,
        _args: &[Expr],
    ) -> Result<(), String> {
        Err(format!("`{}` is not interpreted yet", op.name()))
    }
}
