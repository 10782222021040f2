//! Statements and the side-effecting operations ([`Func`]) that call statements invoke.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::expr::{Expr, Var};
use crate::matrix::MatrixOp;

/// Which memory a barrier or fence orders.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemFence {
    /// Orders work-group local memory.
    pub local: bool,
    /// Orders global memory.
    pub global: bool,
}

impl MemFence {
    /// Local memory only.
    pub const LOCAL: MemFence = MemFence { local: true, global: false };
    /// Global memory only.
    pub const GLOBAL: MemFence = MemFence { local: false, global: true };
    /// Both local and global memory.
    pub const BOTH: MemFence = MemFence { local: true, global: true };
}

impl fmt::Display for MemFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.local, self.global) {
            (true, true) => f.write_str("local, global"),
            (true, false) => f.write_str("local"),
            (false, true) => f.write_str("global"),
            (false, false) => Ok(()),
        }
    }
}

/// An atomic read-modify-write operation. Every atomic returns the element's old value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// `atomic_add(p, i, v)`: `p[i] += v` (integers wrap; f32 allowed)
    Add,
    /// `atomic_sub(p, i, v)`: `p[i] -= v`
    Sub,
    /// `atomic_min(p, i, v)`
    Min,
    /// `atomic_max(p, i, v)`
    Max,
    /// `atomic_and(p, i, v)`
    And,
    /// `atomic_or(p, i, v)`
    Or,
    /// `atomic_xor(p, i, v)`
    Xor,
    /// `atomic_xchg(p, i, v)`: `p[i] = v`
    Xchg,
    /// `atomic_cmpxchg(p, i, cmp, v)`: `if p[i] == cmp { p[i] = v }`
    CmpXchg,
}

impl AtomicOp {
    /// Every atomic operation.
    pub const ALL: [AtomicOp; 9] = [
        AtomicOp::Add,
        AtomicOp::Sub,
        AtomicOp::Min,
        AtomicOp::Max,
        AtomicOp::And,
        AtomicOp::Or,
        AtomicOp::Xor,
        AtomicOp::Xchg,
        AtomicOp::CmpXchg,
    ];

    /// The text-format name of the call.
    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::Add => "atomic_add",
            AtomicOp::Sub => "atomic_sub",
            AtomicOp::Min => "atomic_min",
            AtomicOp::Max => "atomic_max",
            AtomicOp::And => "atomic_and",
            AtomicOp::Or => "atomic_or",
            AtomicOp::Xor => "atomic_xor",
            AtomicOp::Xchg => "atomic_xchg",
            AtomicOp::CmpXchg => "atomic_cmpxchg",
        }
    }

    /// The number of value operands after the pointer and index (1, or 2 for cmpxchg).
    pub fn value_operands(self) -> usize {
        if self == AtomicOp::CmpXchg {
            2
        } else {
            1
        }
    }
}

/// The kinds of side-effecting operation a call statement can invoke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FuncKind {
    /// `barrier(local|global)`: every work-item of the work-group waits here, then the
    /// named memory is made consistent within the group. No operands.
    Barrier(MemFence),
    /// `fence(local|global)`: orders this work-item's memory operations. No operands.
    Fence(MemFence),
    /// An atomic on `p[i]`: operands `(p, i, v)` or `(p, i, cmp, v)`; yields the old value.
    Atomic(AtomicOp),
    /// A matrix operation ([`crate::matrix`]): fragment load, store, fill, `mma`, or an
    /// asynchronous copy and its commit and wait.
    Matrix(MatrixOp),
}

/// A named operation used by call statements, as oneDNN uses `func_t` for GPU constructs.
/// A cheap-to-clone handle; equality is structural.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Func(Arc<FuncKind>);

impl Func {
    /// Prints the operation as a call names it (`barrier(local | global)`, `atomic_add`) to
    /// stderr. Meant for debuggers: `call kiln_ir::stmt::Func::dump(&f)` in gdb.
    #[inline(never)]
    pub fn dump(&self) {
        eprintln!("{self}");
    }

    /// A handle for the given operation.
    pub fn new(kind: FuncKind) -> Func {
        Func(Arc::new(kind))
    }

    /// `barrier(fence)`
    pub fn barrier(fence: MemFence) -> Func {
        Func::new(FuncKind::Barrier(fence))
    }

    /// `fence(fence)`
    pub fn fence(fence: MemFence) -> Func {
        Func::new(FuncKind::Fence(fence))
    }

    /// An atomic operation.
    pub fn atomic(op: AtomicOp) -> Func {
        Func::new(FuncKind::Atomic(op))
    }

    /// What the operation is.
    pub fn kind(&self) -> FuncKind {
        *self.0
    }

    /// The call's name in the text format (`barrier`, `atomic_add`, ...).
    pub fn name(&self) -> &'static str {
        match self.kind() {
            FuncKind::Barrier(_) => "barrier",
            FuncKind::Fence(_) => "fence",
            FuncKind::Atomic(op) => op.name(),
            FuncKind::Matrix(op) => op.name(),
        }
    }

    /// True if calling it yields a value (atomics; fragment loads, fills and `mma`).
    pub fn has_result(&self) -> bool {
        match self.kind() {
            FuncKind::Atomic(_) => true,
            FuncKind::Matrix(op) => op.has_result(),
            FuncKind::Barrier(_) | FuncKind::Fence(_) => false,
        }
    }

    /// A matrix operation.
    pub fn matrix(op: MatrixOp) -> Func {
        Func::new(FuncKind::Matrix(op))
    }
}

impl fmt::Debug for Func {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Func({:?})", self.kind())
    }
}

/// The node kinds of a statement.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum StmtNode {
    /// `let v: T = value;` an immutable binding, in scope for the rest of the enclosing block.
    Let {
        /// The bound variable.
        var: Var,
        /// Its value.
        value: Expr,
    },
    /// `var v: T = init;` a mutable local, in scope for the rest of the enclosing block.
    Decl {
        /// The declared variable.
        var: Var,
        /// Its initial value.
        init: Expr,
    },
    /// `v = value;` assignment to a mutable local.
    Assign {
        /// The assigned variable (declared with `var`).
        var: Var,
        /// The new value.
        value: Expr,
    },
    /// `buf[index] = value;`
    Store {
        /// A pointer-typed variable.
        buf: Var,
        /// An integer element index.
        index: Expr,
        /// The stored value, of the pointer's element type.
        value: Expr,
    },
    /// `vstore(buf, index, value);` stores the vector `value` to the contiguous elements
    /// `buf[index] .. buf[index + lanes - 1]`; `index` must be a multiple of the lane count.
    VecStore {
        /// A pointer-typed variable.
        buf: Var,
        /// The integer element index of lane 0.
        index: Expr,
        /// The stored vector, of the pointer's element type.
        value: Expr,
    },
    /// `local v: T[count];` or `private v: T[count];` an array; `var` is a pointer of the
    /// matching address space. Local arrays are shared by a work-group and may only be
    /// declared at kernel scope; private arrays belong to one work-item. Contents start zeroed.
    Alloc {
        /// The array's pointer variable (`ptr<local, T>` or `ptr<private, T>`).
        var: Var,
        /// Number of elements.
        count: u32,
    },
    /// `if cond { then } else { otherwise }`
    If {
        /// The `bool` condition.
        cond: Expr,
        /// Runs when the condition is true.
        then: Stmt,
        /// Runs when it is false, if present.
        otherwise: Option<Stmt>,
    },
    /// `for var: T in lo .. hi step step { body }`: `lo`, `hi` and `step` are evaluated once,
    /// `step` must be positive, and `var` (immutable in the body) takes the values
    /// `lo, lo+step, ...` below `hi`, computed without wrapping.
    For {
        /// The loop counter.
        var: Var,
        /// First value.
        lo: Expr,
        /// Exclusive upper bound.
        hi: Expr,
        /// Positive increment.
        step: Expr,
        /// The loop body.
        body: Stmt,
    },
    /// `while cond { body }`
    While {
        /// The `bool` condition, evaluated before each iteration.
        cond: Expr,
        /// The loop body.
        body: Stmt,
    },
    /// `{ s1 s2 ... }` a sequence; bindings made in it end with it.
    Block(Vec<Stmt>),
    /// A call of a side-effecting operation, e.g. `barrier(local);` or
    /// `let old: u32 = atomic_add(counts, 0, 1u32);`.
    Call {
        /// The variable receiving the result (in scope for the rest of the block), if any.
        result: Option<Var>,
        /// The operation.
        func: Func,
        /// Its operands.
        args: Vec<Expr>,
    },
}

/// An immutable, reference-counted statement handle with structural equality.
#[derive(Clone)]
pub struct Stmt(Arc<StmtData>);

/// A statement node and what is kept about its tree.
pub(crate) struct StmtData {
    node: StmtNode,
    /// The depth of the deepest expression in the tree ([`crate::depth::max_expr_depth`]),
    /// kept so that the check every entry point makes ([`crate::depth::bound_kernel`],
    /// after every pass) is O(1) instead of a walk of every statement.
    depth: usize,
}

impl Stmt {
    /// Wraps a node.
    pub fn new(node: StmtNode) -> Stmt {
        // The nested statements' depths are kept: one look at each direct part.
        let depth = match &node {
            StmtNode::Let { value, .. } | StmtNode::Assign { value, .. } => value.depth(),
            StmtNode::Decl { init, .. } => init.depth(),
            StmtNode::Store { index, value, .. } | StmtNode::VecStore { index, value, .. } => {
                index.depth().max(value.depth())
            }
            StmtNode::If { cond, then, otherwise } => {
                cond.depth().max(then.0.depth).max(otherwise.as_ref().map_or(0, |o| o.0.depth))
            }
            StmtNode::While { cond, body } => cond.depth().max(body.0.depth),
            StmtNode::For { lo, hi, step, body, .. } => {
                lo.depth().max(hi.depth()).max(step.depth()).max(body.0.depth)
            }
            StmtNode::Call { args, .. } => args.iter().map(Expr::depth).max().unwrap_or(0),
            StmtNode::Alloc { .. } => 0,
            StmtNode::Block(stmts) => stmts.iter().map(|t| t.0.depth).max().unwrap_or(0),
        };
        Stmt(Arc::new(StmtData { node, depth }))
    }

    /// The node this handle points to.
    pub fn node(&self) -> &StmtNode {
        &self.0.node
    }

    /// The depth of the deepest expression in this statement and every statement nested in
    /// it (0 if there is none), in O(1).
    pub fn max_expr_depth(&self) -> usize {
        self.0.depth
    }

    /// The fence of a `barrier(...)` call statement; `None` for every other statement.
    pub fn barrier_fence(&self) -> Option<MemFence> {
        match self.node() {
            StmtNode::Call { func, .. } => match func.kind() {
                FuncKind::Barrier(fence) => Some(fence),
                _ => None,
            },
            _ => None,
        }
    }

    /// Structural equality (same as `==`).
    pub fn is_equal(&self, other: &Stmt) -> bool {
        self == other
    }

    /// True if both handles point to the same node.
    pub fn ptr_eq(&self, other: &Stmt) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// True if another handle to this node exists (the tree holds it more than once, or
    /// someone else holds it too): a walk may meet it again.
    pub(crate) fn is_shared(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }

    /// The address of the node, usable as an identity key for side tables (e.g. source spans).
    pub fn addr(&self) -> usize {
        Arc::as_ptr(&self.0) as *const () as usize
    }

    /// Prints the statement in the text format to stderr (for debuggers).
    #[inline(never)]
    pub fn dump(&self) {
        eprintln!("{self}");
    }

    /// `let var = value;`
    pub fn let_(var: &Var, value: impl Into<Expr>) -> Stmt {
        Stmt::new(StmtNode::Let { var: var.clone(), value: value.into() })
    }

    /// `var var = init;`
    pub fn decl(var: &Var, init: impl Into<Expr>) -> Stmt {
        Stmt::new(StmtNode::Decl { var: var.clone(), init: init.into() })
    }

    /// `var = value;`
    pub fn assign(var: &Var, value: impl Into<Expr>) -> Stmt {
        Stmt::new(StmtNode::Assign { var: var.clone(), value: value.into() })
    }

    /// `buf[index] = value;`
    pub fn store(buf: &Var, index: impl Into<Expr>, value: impl Into<Expr>) -> Stmt {
        Stmt::new(StmtNode::Store { buf: buf.clone(), index: index.into(), value: value.into() })
    }

    /// `vstore(buf, index, value);` a vector store of contiguous elements.
    pub fn vstore(buf: &Var, index: impl Into<Expr>, value: impl Into<Expr>) -> Stmt {
        Stmt::new(StmtNode::VecStore { buf: buf.clone(), index: index.into(), value: value.into() })
    }

    /// `local`/`private` array of `count` elements (the address space comes from `var`'s type).
    pub fn alloc(var: &Var, count: u32) -> Stmt {
        Stmt::new(StmtNode::Alloc { var: var.clone(), count })
    }

    /// `if cond { then }`
    pub fn if_(cond: impl Into<Expr>, then: Stmt) -> Stmt {
        Stmt::new(StmtNode::If { cond: cond.into(), then: then.into_block(), otherwise: None })
    }

    /// `if cond { then } else { otherwise }`; an `if` as `otherwise` is an `else if`.
    pub fn if_else(cond: impl Into<Expr>, then: Stmt, otherwise: Stmt) -> Stmt {
        let otherwise = if matches!(otherwise.node(), StmtNode::If { .. }) {
            otherwise
        } else {
            otherwise.into_block()
        };
        Stmt::new(StmtNode::If {
            cond: cond.into(),
            then: then.into_block(),
            otherwise: Some(otherwise),
        })
    }

    /// This statement if it is a block, else a block holding it. Bodies of `if`, `for`,
    /// `while` and kernels are blocks in canonical IR (what the builders and the parser make).
    pub fn into_block(self) -> Stmt {
        if matches!(self.node(), StmtNode::Block(_)) {
            self
        } else {
            Stmt::block([self])
        }
    }

    /// `for var in lo .. hi step step { body }`
    pub fn for_(
        var: &Var,
        lo: impl Into<Expr>,
        hi: impl Into<Expr>,
        step: impl Into<Expr>,
        body: Stmt,
    ) -> Stmt {
        Stmt::new(StmtNode::For {
            var: var.clone(),
            lo: lo.into(),
            hi: hi.into(),
            step: step.into(),
            body: body.into_block(),
        })
    }

    /// `while cond { body }`
    pub fn while_(cond: impl Into<Expr>, body: Stmt) -> Stmt {
        Stmt::new(StmtNode::While { cond: cond.into(), body: body.into_block() })
    }

    /// `{ stmts }`
    pub fn block(stmts: impl IntoIterator<Item = Stmt>) -> Stmt {
        Stmt::new(StmtNode::Block(stmts.into_iter().collect()))
    }

    /// A call statement without a result.
    pub fn call(func: Func, args: impl IntoIterator<Item = Expr>) -> Stmt {
        Stmt::new(StmtNode::Call { result: None, func, args: args.into_iter().collect() })
    }

    /// A call statement binding its result to `result`.
    pub fn call_into(result: &Var, func: Func, args: impl IntoIterator<Item = Expr>) -> Stmt {
        Stmt::new(StmtNode::Call {
            result: Some(result.clone()),
            func,
            args: args.into_iter().collect(),
        })
    }

    /// `barrier(fence);`
    pub fn barrier(fence: MemFence) -> Stmt {
        Stmt::call(Func::barrier(fence), [])
    }

    /// The statements of a block, or this statement alone.
    pub fn stmts(&self) -> &[Stmt] {
        match self.node() {
            StmtNode::Block(v) => v,
            _ => std::slice::from_ref(self),
        }
    }
}

impl PartialEq for Stmt {
    fn eq(&self, other: &Stmt) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.node == other.0.node
    }
}

impl Eq for Stmt {}

impl Hash for Stmt {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.node.hash(state)
    }
}

impl fmt::Debug for Stmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stmt({self})")
    }
}
