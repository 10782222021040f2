//! The proof behind an epilogue fusion: every work-item of the producer and of the consumer
//! is walked over its concrete nd-range, evaluating only what decides where the watched
//! buffers are accessed (indices, the conditions and counted loops around the accesses);
//! values read from memory are unknown. A fact that depends on an unknown value is not
//! proven, and the fusion is refused; so is a range too large to walk within [`BUDGET`].

use hashbrown::{HashMap, HashSet};
use kiln_ir::launch::NdRange;
use kiln_ir::{eval, BinOp, Builtin, Expr, ExprNode, Imm, Stmt, StmtNode, Var, Visitor};

/// Evaluation steps (statements and expression nodes) one fusion's proofs may take, all
/// consumers together: a few seconds here (a 256 x 256 tensor-core GEMM with four
/// consumers takes 1.3 s). Larger ranges are refused by name.
pub(super) const BUDGET: u64 = 1 << 24;

/// One access to a watched buffer, as the walk reports it.
pub(super) struct Access<'a> {
    pub buf: &'a Var,
    pub index: &'a Expr,
    /// The element, when it does not depend on memory.
    pub at: Option<i128>,
    pub write: bool,
    /// False when a condition around it depends on memory (it may or may not run).
    pub definite: bool,
}

/// The addresses of the statements that contain an access to a watched buffer.
fn relevant(body: &Stmt, watched: &HashSet<String>) -> HashSet<usize> {
    struct Find<'w> {
        watched: &'w HashSet<String>,
        found: bool,
    }
    impl Visitor for Find<'_> {
        fn visit_expr(&mut self, e: &Expr) {
            match e.node() {
                ExprNode::Load { buf, .. } | ExprNode::VecLoad { buf, .. }
                    if self.watched.contains(buf.name()) =>
                {
                    self.found = true
                }
                // A division may fault: the walk evaluates it to see whether it can.
                ExprNode::Binary { op: BinOp::Div | BinOp::Rem, .. } if !e.ty().is_float() => {
                    self.found = true
                }
                _ => kiln_ir::walk_expr(self, e),
            }
        }
        fn visit_stmt(&mut self, s: &Stmt) {
            if let StmtNode::Store { buf, .. } | StmtNode::VecStore { buf, .. } = s.node() {
                self.found |= self.watched.contains(buf.name());
            }
            kiln_ir::walk_stmt(self, s)
        }
    }
    fn mark(s: &Stmt, watched: &HashSet<String>, out: &mut HashSet<usize>) -> bool {
        let mut any = false;
        let mut subs: Vec<&Stmt> = Vec::new();
        match s.node() {
            StmtNode::If { then, otherwise, .. } => {
                subs.push(then);
                subs.extend(otherwise);
            }
            StmtNode::For { body, .. } | StmtNode::While { body, .. } => subs.push(body),
            StmtNode::Block(ss) => subs.extend(ss),
            _ => {}
        }
        for sub in subs {
            any |= mark(sub, watched, out);
        }
        // The statement's own expressions (a condition, a loop bound, a store).
        let mut f = Find { watched, found: false };
        match s.node() {
            StmtNode::If { cond, .. } | StmtNode::While { cond, .. } => f.visit_expr(cond),
            StmtNode::For { lo, hi, step, .. } => {
                [lo, hi, step].iter().for_each(|e| f.visit_expr(e))
            }
            StmtNode::Block(_) => {}
            _ => f.visit_stmt(s),
        }
        any |= f.found;
        if any {
            out.insert(s.addr());
        }
        any
    }
    let mut out = HashSet::new();
    mark(body, watched, &mut out);
    out
}

/// A walk of one kernel body over every work-item of a range.
pub(super) struct Walk<'a, 'w> {
    range: &'w NdRange,
    watched: &'w HashSet<String>,
    relevant: HashSet<usize>,
    gid: [u32; 3],
    env: HashMap<&'a str, Vec<Option<Imm>>>,
    bound: Vec<&'a str>,
    pub steps: u64,
    /// The first integer division of the work-item walked last whose divisor is zero or
    /// not known (a fault it may raise).
    pub may_fault: Option<&'a Expr>,
}

impl<'a, 'w> Walk<'a, 'w> {
    /// A walk of `body` over `range`, reporting the accesses to the buffers named in
    /// `watched`.
    pub fn new(body: &'a Stmt, range: &'w NdRange, watched: &'w HashSet<String>) -> Walk<'a, 'w> {
        Walk {
            range,
            watched,
            relevant: relevant(body, watched),
            gid: [0; 3],
            env: HashMap::new(),
            bound: Vec::new(),
            steps: 0,
            may_fault: None,
        }
    }

    /// Every work-item's global id, dimension 0 fastest.
    pub fn items(range: &NdRange) -> impl Iterator<Item = [u32; 3]> + '_ {
        let (g, o) = (range.global, range.offset);
        (0..g[2]).flat_map(move |z| {
            (0..g[1]).flat_map(move |y| (0..g[0]).map(move |x| [o[0] + x, o[1] + y, o[2] + z]))
        })
    }

    /// Walks `body` for the work-item `gid`, calling `on` at each access to a watched buffer.
    pub fn run(
        &mut self,
        body: &'a Stmt,
        gid: [u32; 3],
        on: &mut dyn FnMut(Access<'a>) -> Result<(), String>,
    ) -> Result<(), String> {
        self.gid = gid;
        self.may_fault = None;
        // Every binding is popped when its block ends, so the map is empty of values here;
        // its entries (and their stacks' memory) are kept for the next work-item.
        self.bound.clear();
        let r = self.stmt(body, true, on);
        if r.is_err() {
            self.env.values_mut().for_each(Vec::clear);
        }
        r
    }

    fn bind(&mut self, v: &'a Var, val: Option<Imm>) {
        self.env.entry(v.name()).or_default().push(val);
        self.bound.push(v.name());
    }

    fn scoped(
        &mut self,
        s: &'a Stmt,
        definite: bool,
        on: &mut dyn FnMut(Access<'a>) -> Result<(), String>,
    ) -> Result<(), String> {
        let mark = self.bound.len();
        let r = self.stmt(s, definite, on);
        for name in self.bound.drain(mark..).rev() {
            if let Some(st) = self.env.get_mut(name) {
                st.pop();
            }
        }
        r
    }

    fn tick(&mut self) -> Result<(), String> {
        self.steps += 1;
        if self.steps > BUDGET {
            return Err(format!(
                "the nd-ranges are too large to prove the fusion by walking them (more than \
                 {BUDGET} steps)"
            ));
        }
        Ok(())
    }

    fn builtin(&self, kind: Builtin, d: usize) -> Option<Imm> {
        let r = self.range;
        let rel = self.gid[d] - r.offset[d];
        let v = match kind {
            Builtin::GlobalId => self.gid[d],
            Builtin::GlobalSize => r.global[d],
            Builtin::GlobalOffset => r.offset[d],
            Builtin::LocalSize => r.local?[d],
            Builtin::LocalId => rel % r.local?[d],
            Builtin::GroupId => rel / r.local?[d],
            Builtin::NumGroups => r.global[d] / r.local?[d],
        };
        Some(Imm::int(kiln_ir::Scalar::U32, v as i128))
    }

    fn expr(
        &mut self,
        e: &'a Expr,
        definite: bool,
        on: &mut dyn FnMut(Access<'a>) -> Result<(), String>,
    ) -> Result<Option<Imm>, String> {
        self.tick()?;
        Ok(match e.node() {
            ExprNode::Var(v) => self.env.get(v.name()).and_then(|s| s.last().copied()).flatten(),
            ExprNode::Imm(i) => Some(*i),
            ExprNode::Unary { op, a } => {
                self.expr(a, definite, on)?.and_then(|a| eval::unary(*op, a).ok())
            }
            ExprNode::Binary { op, a, b } => {
                let (a, b) = (self.expr(a, definite, on)?, self.expr(b, definite, on)?);
                let divides = matches!(op, BinOp::Div | BinOp::Rem) && !e.ty().is_float();
                if divides && self.may_fault.is_none() && b.is_none_or(|b| b.as_i128() == Some(0)) {
                    self.may_fault = Some(e);
                }
                a.zip(b).and_then(|(a, b)| eval::binary(*op, a, b).ok())
            }
            ExprNode::Select { cond, a, b } => {
                let c = self.expr(cond, definite, on)?;
                let (a, b) = (self.expr(a, definite, on)?, self.expr(b, definite, on)?);
                match c {
                    Some(Imm::Bool(true)) => a,
                    Some(Imm::Bool(false)) => b,
                    _ => None,
                }
            }
            ExprNode::Cast { to, a } => self.expr(a, definite, on)?.map(|a| eval::cast(*to, a)),
            ExprNode::Load { buf, index } => {
                let at = self.expr(index, definite, on)?.and_then(|i| i.as_i128());
                if self.watched.contains(buf.name()) {
                    on(Access { buf, index, at, write: false, definite })?;
                }
                None
            }
            ExprNode::VecLoad { buf, index, lanes } => {
                let at = self.expr(index, definite, on)?.and_then(|i| i.as_i128());
                if self.watched.contains(buf.name()) {
                    for l in 0..*lanes as i128 {
                        on(Access { buf, index, at: at.map(|a| a + l), write: false, definite })?;
                    }
                }
                None
            }
            ExprNode::Builtin { kind, dim } => self.builtin(*kind, *dim as usize),
            ExprNode::Intrinsic { op, args } => {
                let mut vals = Vec::with_capacity(args.len());
                for a in args {
                    vals.push(self.expr(a, definite, on)?);
                }
                let vals: Option<Vec<Imm>> = vals.into_iter().collect();
                vals.and_then(|v| eval::intrinsic(*op, &v).ok())
            }
            _ => {
                for c in e.children() {
                    self.expr(c, definite, on)?;
                }
                None
            }
        })
    }

    fn stmt(
        &mut self,
        s: &'a Stmt,
        definite: bool,
        on: &mut dyn FnMut(Access<'a>) -> Result<(), String>,
    ) -> Result<(), String> {
        self.tick()?;
        let relevant = self.relevant.contains(&s.addr());
        match s.node() {
            StmtNode::Let { var, value } => {
                // Only integers and bools can decide an access; others are skipped unless
                // they read a watched buffer.
                let v = if relevant || var.ty().scalar().is_some_and(|t| !t.is_float()) {
                    self.expr(value, definite, on)?
                } else {
                    None
                };
                self.bind(var, v);
            }
            StmtNode::Decl { var, init } => {
                if relevant {
                    self.expr(init, definite, on)?;
                }
                self.bind(var, None);
            }
            StmtNode::Assign { var, value } => {
                if relevant {
                    self.expr(value, definite, on)?;
                }
                if let Some(top) = self.env.get_mut(var.name()).and_then(|st| st.last_mut()) {
                    *top = None;
                }
            }
            StmtNode::Store { buf, index, value } | StmtNode::VecStore { buf, index, value }
                if relevant =>
            {
                let at = self.expr(index, definite, on)?.and_then(|i| i.as_i128());
                self.expr(value, definite, on)?;
                if self.watched.contains(buf.name()) {
                    let lanes = value.ty().lanes().max(1) as i128;
                    for l in 0..lanes {
                        on(Access { buf, index, at: at.map(|a| a + l), write: true, definite })?;
                    }
                }
            }
            StmtNode::Store { .. } | StmtNode::VecStore { .. } => {}
            StmtNode::Alloc { var, .. } => self.bind(var, None),
            StmtNode::If { cond, then, otherwise } if relevant => {
                match self.expr(cond, definite, on)? {
                    Some(Imm::Bool(true)) => self.scoped(then, definite, on)?,
                    Some(Imm::Bool(false)) => {
                        if let Some(o) = otherwise {
                            self.scoped(o, definite, on)?
                        }
                    }
                    // Unknown: either branch may run.
                    _ => {
                        self.scoped(then, false, on)?;
                        if let Some(o) = otherwise {
                            self.scoped(o, false, on)?
                        }
                    }
                }
            }
            StmtNode::For { var, lo, hi, step, body } if relevant => {
                let int = |w: &mut Self, e: &'a Expr, on: &mut dyn FnMut(Access<'a>) -> _| {
                    w.expr(e, definite, on).map(|v| v.and_then(|v| v.as_i128()))
                };
                let (l, h, st) = (int(self, lo, on)?, int(self, hi, on)?, int(self, step, on)?);
                let (Some(l), Some(h), Some(st)) = (l, h, st) else {
                    return Err(format!(
                        "the bounds of the loop over `{}` around an access depend on memory",
                        var.name()
                    ));
                };
                let ty = var.ty().scalar().unwrap_or(kiln_ir::Scalar::I32);
                let mut i = l;
                while st > 0 && i < h {
                    self.bind(var, Some(Imm::int(ty, i)));
                    let r = self.scoped(body, definite, on);
                    self.bound.pop();
                    if let Some(stack) = self.env.get_mut(var.name()) {
                        stack.pop();
                    }
                    r?;
                    i += st;
                }
            }
            StmtNode::While { .. } if relevant => {
                return Err("a `while` loop around an access is not walked".into())
            }
            StmtNode::Block(ss) => {
                if relevant {
                    let mark = self.bound.len();
                    for x in ss {
                        self.stmt(x, definite, on)?;
                    }
                    for name in self.bound.drain(mark..).rev() {
                        if let Some(st) = self.env.get_mut(name) {
                            st.pop();
                        }
                    }
                }
            }
            StmtNode::Call { result, args, .. } => {
                if relevant {
                    for a in args {
                        self.expr(a, definite, on)?;
                    }
                }
                if let Some(r) = result {
                    self.bind(r, None);
                }
            }
            StmtNode::If { .. } | StmtNode::For { .. } | StmtNode::While { .. } => {}
        }
        Ok(())
    }
}
