//! Vector lowering: rewrites vector values (`f32x4`, ...) into one scalar per lane, for
//! targets whose instructions are scalar. Two forms ([`VectorLowering`]):
//!
//! * **Scalar**: no vector is left. A vector `let`/`var` becomes one binding per lane
//!   (`v_0`, `v_1`, ...), lane-wise operations become one operation per lane, `vload4(p, i)`
//!   becomes `p[i]`, `p[i + 1]`, ..., and `vstore` one store per lane. The pass
//!   `scalarize-vectors` gives this form.
//! * **Memory**: the same, except that memory accesses stay whole, since vector loads and
//!   stores are what GPUs have vector instructions for (`ld.global.v4.f32`), and what a
//!   checking target checks whole. Every backend takes this form. A `vloadN`
//!   becomes `let t: f32x4 = vload4(p, i);` whose lanes are read with `extract(t, k)`, and a
//!   `vstore` stores a vector built from its lanes, `vstore(p, i, f32x4(a, b, c, d))`.
//!
//! Exact: each lane computes what the interpreter computes for it, masks (`boolx4`, from
//! lane-wise compares) and lane-wise casts included. The scalar form cannot keep one check:
//! a misaligned vector access (an error in the interpreter) becomes element accesses that
//! succeed. That is why every backend takes the Memory form and checks (x86) or, under the
//! bounds sanitizer (`-fsanitize=bounds`, which checks alignment before this lowering runs),
//! reports vector accesses whole. Lanes are bound to `let`s before the statement that uses them
//! (a `while` condition that needs any is computed into a flag before the loop and at the end
//! of each iteration). Faults stay the interpreter's: an operand that may fault is bound ahead
//! of a later operand's `let`s, a vector operand's lanes ahead of the next operand's, and a
//! lane no one reads is still computed.

use hashbrown::{HashMap, HashSet};
use kiln_ir::{
    walk_mutate_expr, walk_stmt, Expr, ExprNode, Kernel, Mutator, Stmt, StmtNode, Type, Var,
    Visitor,
};
use smallvec::SmallVec;

use crate::util::all_names;

/// What a target does with vector values; the build driver applies [`lower_vectors`]
/// accordingly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VectorLowering {
    /// The target lowers every vector construct itself (the IR printer).
    Native,
    /// The target wants vector loads and stores, and scalar lanes otherwise (the GPU
    /// backends: PTX `ld.v4`, SPIR-V `OpTypeVector` accesses, AMDGPU `global_load_dwordx4`).
    Memory,
    /// The target wants no vectors at all (the `scalarize-vectors` pass).
    Scalar,
}

/// True if `k` has any vector-typed value, vector load or vector store.
pub fn uses_vectors(k: &Kernel) -> bool {
    // Statements only: each expression says in O(1) whether it holds a vector
    // (`Expr::has_vector`), so no expression tree is walked.
    struct Find(bool);
    impl Visitor for Find {
        fn visit_expr(&mut self, e: &Expr) {
            self.0 |= e.has_vector();
        }
        fn visit_stmt(&mut self, s: &Stmt) {
            if self.0 {
                return;
            }
            match s.node() {
                StmtNode::VecStore { .. } => self.0 = true,
                StmtNode::Let { var, .. } | StmtNode::Decl { var, .. } if var.ty().is_vector() => {
                    self.0 = true
                }
                _ => walk_stmt(self, s),
            }
        }
    }
    let mut f = Find(false);
    f.visit_stmt(k.body());
    f.0
}

/// True if `e` has no vector but lane reads of variables, `extract(v, k)`. O(1) for a tree
/// without vectors ([`Expr::has_vector`]), which is most of them.
fn lanes_of_vars(e: &Expr) -> bool {
    if !e.has_vector() {
        return true;
    }
    match e.node() {
        ExprNode::Extract { a, .. } => a.as_var().is_some(),
        _ if e.ty().is_vector() => false,
        _ => e.operands().all(lanes_of_vars),
    }
}

/// True if the statement `s`, taken alone, is in the memory form (statements inside it are
/// not looked at): a vector `let` is bound to a `vloadN`, a `vstore` stores a vector
/// variable or a vector built from one scalar per lane, and every other expression in it
/// holds vectors only as lane reads of variables. [`lower_vectors`] with
/// [`VectorLowering::Memory`] leaves such a statement as it is, but for the lane `let`s it
/// adds after a vector `let` and lane variables read in place of `extract`s.
pub fn stmt_in_memory_form(s: &Stmt) -> bool {
    match s.node() {
        StmtNode::Let { var, value } if var.ty().is_vector() => match value.node() {
            ExprNode::VecLoad { index, .. } => lanes_of_vars(index),
            _ => false,
        },
        StmtNode::Decl { var, .. } | StmtNode::Assign { var, .. } if var.ty().is_vector() => false,
        StmtNode::VecStore { index, value, .. } => {
            lanes_of_vars(index)
                && match value.node() {
                    ExprNode::Var(_) => true,
                    // One scalar per lane (a broadcast binds its scalar first).
                    ExprNode::Vector { elems, .. } => {
                        elems.len() > 1 && elems.iter().all(lanes_of_vars)
                    }
                    _ => false,
                }
        }
        StmtNode::Let { value: e, .. }
        | StmtNode::Decl { init: e, .. }
        | StmtNode::Assign { value: e, .. }
        | StmtNode::If { cond: e, .. }
        | StmtNode::While { cond: e, .. } => lanes_of_vars(e),
        StmtNode::Store { index, value, .. } => lanes_of_vars(index) && lanes_of_vars(value),
        StmtNode::For { lo, hi, step, .. } => [lo, hi, step].into_iter().all(lanes_of_vars),
        StmtNode::Call { args, .. } => args.iter().all(lanes_of_vars),
        StmtNode::Alloc { .. } | StmtNode::Block(_) => true,
    }
}

/// True if [`StmtLanes`] lowers `k` one statement at a time as [`lower_vectors`] with
/// [`VectorLowering::Memory`] lowers it whole: no vector is mutable (a `var` of vector type
/// becomes one `var` per lane, which later statements must find), and every statement with
/// statements inside (`if`, `for`, `while`) is itself in the memory form, so that only simple
/// statements (`let`, stores, calls, ...) are rewritten.
pub fn lowers_by_statement(k: &Kernel) -> bool {
    struct Check(bool);
    impl Visitor for Check {
        fn visit_expr(&mut self, _: &Expr) {}
        fn visit_stmt(&mut self, s: &Stmt) {
            if !self.0 {
                return;
            }
            match s.node() {
                StmtNode::Decl { var, .. } | StmtNode::Assign { var, .. }
                    if var.ty().is_vector() =>
                {
                    self.0 = false
                }
                StmtNode::If { .. } | StmtNode::For { .. } | StmtNode::While { .. } => {
                    self.0 = stmt_in_memory_form(s);
                    walk_stmt(self, s)
                }
                _ => walk_stmt(self, s),
            }
        }
    }
    let mut c = Check(true);
    c.visit_stmt(k.body());
    c.0
}

/// [`lower_vectors`] one simple statement at a time, for a backend that lowers the memory
/// form itself and walks the kernel anyway: it lowers the statements that are
/// [`stmt_in_memory_form`] as they are and asks for the others, instead of having the whole
/// kernel rebuilt (and freed) for a few statements (the GEMM's epilogue stores
/// `f32x4(alpha) * f32x4(...)`). For a kernel that [`lowers_by_statement`], the statements
/// [`StmtLanes::lower`] gives, in order, with the statements in the memory form between
/// them, compute what [`lower_vectors`]'s output computes, in the same order: only lanes of
/// vectors the backend bound itself are read as `extract(v, k)` instead of lane variables.
pub struct StmtLanes<'k> {
    kernel: &'k Kernel,
    /// Made at the first statement: most kernels never need it.
    inner: Option<Lower>,
}

impl<'k> StmtLanes<'k> {
    /// Lowering for the statements of `k`, in the memory form.
    pub fn new(k: &'k Kernel) -> StmtLanes<'k> {
        StmtLanes { kernel: k, inner: None }
    }

    /// The simple statement `s` (a `let`, `var`, assignment, store or call; not `if`, `for`,
    /// `while` or a block) in the memory form, preceded by the `let`s its lanes need; a
    /// vector `let` becomes one `let` per lane ([`StmtLanes::lanes_of`] names them).
    pub fn lower(&mut self, s: &Stmt) -> Vec<Stmt> {
        let kernel = self.kernel;
        let l = self.inner.get_or_insert_with(|| Lower {
            keep_memory: true,
            lanes: HashMap::new(),
            taken: HashSet::new(),
            names_of: Some(kernel.clone()),
            next: HashMap::new(),
        });
        let mut out = Vec::new();
        l.stmt(s, &mut out);
        out
    }

    /// Tells the lowering that the target bound the vector `let` named `name` itself (a
    /// statement in the memory form): a later statement reads its lanes from that binding,
    /// as `extract(name, k)`, not from lane variables of an earlier `let` of the same name.
    pub fn bound_by_target(&mut self, name: &str) {
        if let Some(l) = &mut self.inner {
            l.lanes.remove(name);
        }
    }

    /// The lane variables, as expressions, of the vector `let` named `name` that
    /// [`StmtLanes::lower`] lowered last.
    pub fn lanes_of(&self, name: &str) -> Option<&[Expr]> {
        self.inner.as_ref()?.lanes.get(name).map(Vec::as_slice)
    }
}

/// Lowers the vectors of `k` to the form `how` asks for (see the module docs); `k` itself
/// when it has no vectors or `how` is [`VectorLowering::Native`].
pub fn lower_vectors(k: &Kernel, how: VectorLowering) -> Kernel {
    if how == VectorLowering::Native || !uses_vectors(k) {
        return k.clone();
    }
    // Lanes and `let`-bound parts of a division still name it as the source did.
    let k = &crate::origin::record_origins(k);
    let mut l = Lower {
        keep_memory: how == VectorLowering::Memory,
        lanes: HashMap::new(),
        taken: all_names(k),
        names_of: None,
        next: HashMap::new(),
    };
    let body = l.block(k.body());
    Kernel::with_attrs(k.name(), k.params().to_vec(), k.attrs().clone(), body)
}

/// The pass `scalarize-vectors`: [`lower_vectors`] to the scalar form.
pub fn scalarize_vectors(k: &Kernel) -> Kernel {
    lower_vectors(k, VectorLowering::Scalar)
}

struct Lower {
    keep_memory: bool,
    /// Each vector variable's lane variables, as expressions: unrolled code reads the lanes
    /// of a loaded vector many times, and a new handle per read was much of this pass.
    lanes: HashMap<String, Vec<Expr>>,
    taken: HashSet<String>,
    /// The kernel whose names `taken` is still to hold: read at the first fresh name (a
    /// statement-at-a-time lowering often needs none, and the walk was a tenth of it).
    names_of: Option<Kernel>,
    /// Per base name, where [`Lower::fresh`]'s search for an unused suffix resumes.
    next: HashMap<String, usize>,
}

impl Lower {
    fn fresh(&mut self, base: &str, ty: Type) -> Var {
        // Names are never freed, so the smallest unused suffix of `base` never lies below
        // the last one handed out (searching from 0 each time was quadratic in the lanes
        // of a kernel, which share a few bases).
        if let Some(k) = self.names_of.take() {
            self.taken = all_names(&k);
        }
        let start = self.next.get(base).copied().unwrap_or(0);
        let (i, name) = (start..)
            .map(|i| (i, if i == 0 { base.to_string() } else { format!("{base}_{i}") }))
            .find(|(_, n)| !self.taken.contains(n))
            .unwrap_or_default();
        // A base seen before keeps its key (no `String` per lane).
        match self.next.get_mut(base) {
            Some(n) => *n = i + 1,
            None => {
                self.next.insert(base.to_string(), i + 1);
            }
        }
        let v = Var::new(&name, ty);
        self.taken.insert(name);
        v
    }

    /// `e` bound to a fresh `let` in `out` (unless it is a leaf already or there is no
    /// `out`: then it is repeated where used).
    fn bind(&mut self, e: Expr, base: &str, out: &mut Option<&mut Vec<Stmt>>) -> Expr {
        match (e.node(), out) {
            (ExprNode::Var(_) | ExprNode::Imm(_), _) | (_, None) => e,
            (_, Some(out)) => {
                let v = self.fresh(base, e.ty());
                out.push(Stmt::let_(&v, e));
                v.expr()
            }
        }
    }

    /// A store's lowered `index`, bound to a `let` placed at `mark` in `out` (ahead of the
    /// `let`s its value's lowering put there) when there are such `let`s and the index may
    /// fail: a store evaluates its index before its value (the interpreter's order), so
    /// where both fault the index's error is the one reported. Out-of-bounds errors quote
    /// the index's value, not its text, and a division keeps its origin, so the binding
    /// changes no message. A call's arguments (an atomic's index) are bound the same way.
    fn index_first(&mut self, index: Expr, mark: usize, out: &mut Vec<Stmt>) -> Expr {
        self.bind_at(index, "vi", mark, out)
    }

    /// `e`, evaluated where `out` had `mark` statements, bound to a `let` placed there when
    /// it may fail and a `let` added after `mark` may fail too: those `let`s run before the
    /// statement that holds `e`, and the interpreter evaluates `e` first, so where both fault
    /// `e`'s error is the one it reports. Errors quote values and origins, not names, so the
    /// binding changes no message.
    fn bind_at(&mut self, e: Expr, base: &str, mark: usize, out: &mut Vec<Stmt>) -> Expr {
        if !e.may_fail() || e.as_var().is_some() || !fails_after(out, mark) {
            return e;
        }
        let v = self.fresh(base, e.ty());
        out.insert(mark, Stmt::let_(&v, e));
        v.expr()
    }

    /// The scalar expressions `es` (a node's operands, in evaluation order) lowered, each
    /// bound as [`Lower::bind_at`] binds where a later one's lowering added `let`s: inline
    /// parts of later operands run after it anyway, in the statement.
    fn in_order(&mut self, es: &[&Expr], out: &mut Option<&mut Vec<Stmt>>) -> SmallVec<[Expr; 4]> {
        let mut new = SmallVec::<[Expr; 4]>::new();
        let mut marks = SmallVec::<[usize; 4]>::new();
        for e in es {
            new.push(self.scalar(e, out));
            marks.push(out.as_ref().map_or(0, |o| o.len()));
        }
        if let Some(out) = out {
            // Last first: a binding inserted at a later mark leaves the earlier ones.
            for (x, &mark) in new.iter_mut().zip(&marks).rev() {
                *x = self.bind_at(x.clone(), "vo", mark, out);
            }
        }
        new
    }

    /// The lanes `xs`, computed where `out` had `mark` statements, each one that may fail
    /// bound to a `let` placed there (in lane order) when what was lowered after them may
    /// fail: `later` lane expressions that stay inline, or `let`s added after `mark`. The
    /// interpreter computes an operand's lanes before the next operand's; a lane left inline
    /// would run after the later operand's `let`s and interleaved with its lanes.
    fn lanes_first(
        &mut self,
        xs: &mut [Expr],
        mark: Option<usize>,
        later: &[&[Expr]],
        out: &mut Option<&mut Vec<Stmt>>,
    ) {
        let (Some(mark), Some(out)) = (mark, out) else { return };
        let later_fails = later.iter().any(|l| l.iter().any(Expr::may_fail));
        if !later_fails && !fails_after(out, mark) {
            return;
        }
        let fallible = xs.iter_mut().filter(|x| x.may_fail() && x.as_var().is_none());
        for (at, x) in (mark..).zip(fallible) {
            let v = self.fresh("vo", x.ty());
            out.insert(at, Stmt::let_(&v, x.clone()));
            *x = v.expr();
        }
    }

    /// The lanes of the vector expression `e`, as scalar expressions.
    fn lanes(&mut self, e: &Expr, out: &mut Option<&mut Vec<Stmt>>) -> Vec<Expr> {
        let n = e.ty().lanes() as usize;
        match e.node() {
            ExprNode::Var(v) => match self.lanes.get(v.name()) {
                Some(ls) => ls.clone(),
                None => (0..n as u8).map(|k| e.extract(k)).collect(),
            },
            ExprNode::VecLoad { buf, index, lanes } => {
                let index = self.scalar(index, out);
                if self.keep_memory {
                    let load = self.bind(Expr::vload(buf, index, *lanes), "vl", out);
                    return (0..*lanes).map(|k| load.extract(k)).collect();
                }
                let index = self.bind(index, "vi", out);
                let t = index.ty().scalar().unwrap_or(kiln_ir::Scalar::U32);
                (0..*lanes as i128)
                    .map(|k| {
                        let i = if k == 0 { index.clone() } else { &index + Expr::int(t, k) };
                        buf.load(i)
                    })
                    .collect()
            }
            ExprNode::Insert { a, lane, b } => {
                let mut ls = self.lanes(a, out);
                // The lane replaced is still computed (and may fault) in the interpreter.
                if let (Some(x), Some(o)) = (ls.get_mut(*lane as usize), out.as_mut()) {
                    if x.may_fail() {
                        *x = self.bind(x.clone(), "vo", &mut Some(&mut **o));
                    }
                }
                let mark = out.as_ref().map(|o| o.len());
                let b = self.scalar(b, out);
                self.lanes_first(&mut ls, mark, &[std::slice::from_ref(&b)], out);
                if let Some(slot) = ls.get_mut(*lane as usize) {
                    *slot = b;
                }
                ls
            }
            ExprNode::Vector { elems, .. } if elems.len() == 1 => {
                let x = self.scalar(&elems[0], out);
                let x = self.bind(x, "vb", out);
                vec![x; n]
            }
            ExprNode::Vector { elems, .. } => {
                let elems: SmallVec<[&Expr; 4]> = elems.iter().collect();
                self.in_order(&elems, out).into_vec()
            }
            ExprNode::Unary { op, a } => {
                self.lanes(a, out).into_iter().map(|x| Expr::unary(*op, x)).collect()
            }
            ExprNode::Binary { op, a, b } => {
                let mut la = self.lanes(a, out);
                let mark = out.as_ref().map(|o| o.len());
                let lb = self.lanes(b, out);
                self.lanes_first(&mut la, mark, &[&lb], out);
                // Each lane of a division keeps its name, ``a lane of `v / w` ``.
                la.into_iter()
                    .zip(lb)
                    .map(|(x, y)| Expr::binary(*op, x, y).with_origin_of(e))
                    .collect()
            }
            ExprNode::Select { cond, a, b } if cond.ty().is_vector() => {
                // A mask: each lane picks by its own condition.
                let mut lc = self.lanes(cond, out);
                let mark_c = out.as_ref().map(|o| o.len());
                let mut la = self.lanes(a, out);
                let mark_a = out.as_ref().map(|o| o.len());
                let lb = self.lanes(b, out);
                self.lanes_first(&mut la, mark_a, &[&lb], out);
                self.lanes_first(&mut lc, mark_c, &[&la, &lb], out);
                lc.into_iter()
                    .zip(la.into_iter().zip(lb))
                    .map(|(c, (x, y))| Expr::select(c, x, y))
                    .collect()
            }
            ExprNode::Cast { to, a } => {
                self.lanes(a, out).into_iter().map(|x| x.cast(*to)).collect()
            }
            ExprNode::Select { cond, a, b } => {
                let c = self.scalar(cond, out);
                let c = self.bind(c, "vc", out);
                let mut la = self.lanes(a, out);
                let mark = out.as_ref().map(|o| o.len());
                let lb = self.lanes(b, out);
                self.lanes_first(&mut la, mark, &[&lb], out);
                la.into_iter().zip(lb).map(|(x, y)| Expr::select(c.clone(), x, y)).collect()
            }
            ExprNode::Intrinsic { op, args } => {
                let mut ls = Vec::with_capacity(args.len());
                let mut marks = Vec::with_capacity(args.len());
                for a in args {
                    ls.push(self.lanes(a, out));
                    marks.push(out.as_ref().map(|o| o.len()));
                }
                // Last first: a binding inserted at a later mark leaves the earlier ones.
                for k in (0..ls.len().saturating_sub(1)).rev() {
                    let (done, rest) = ls.split_at_mut(k + 1);
                    let later: Vec<&[Expr]> = rest.iter().map(Vec::as_slice).collect();
                    self.lanes_first(&mut done[k], marks[k], &later, out);
                }
                (0..n).map(|k| Expr::intrinsic(*op, ls.iter().map(|l| l[k].clone()))).collect()
            }
            // Nothing else has a vector type in a verified kernel.
            _ => (0..n as u8).map(|k| e.extract(k)).collect(),
        }
    }

    /// The scalar expression `e` with every vector inside it lowered.
    fn scalar(&mut self, e: &Expr, out: &mut Option<&mut Vec<Stmt>>) -> Expr {
        struct Scalars<'a, 'o, 'p>(&'a mut Lower, &'o mut Option<&'p mut Vec<Stmt>>);
        impl Mutator for Scalars<'_, '_, '_> {
            fn mutate_expr(&mut self, e: &Expr) -> Expr {
                if let ExprNode::Extract { a, lane } = e.node() {
                    // A lane of a lowered variable (the common case: unrolled code reading
                    // loaded vectors) is its lane variable, without listing every lane.
                    if let Some(v) = a.as_var().and_then(|v| self.0.lanes.get(v.name())) {
                        if let Some(x) = v.get(*lane as usize) {
                            return x.clone();
                        }
                    }
                    let mut ls = self.0.lanes(a, self.1);
                    // The interpreter computes the whole vector: a lane not read still faults.
                    let k = *lane as usize;
                    if let Some(out) = self.1 {
                        if ls.iter().enumerate().any(|(j, x)| j != k && x.may_fail()) {
                            for x in ls.iter_mut().filter(|x| x.may_fail()) {
                                *x = self.0.bind(x.clone(), "vo", &mut Some(&mut **out));
                            }
                        }
                    }
                    return ls.get(k).cloned().unwrap_or_else(|| e.clone());
                }
                let cs = e.children();
                if cs.len() > 1 && e.has_vector() {
                    let new = self.0.in_order(&cs, self.1);
                    return walk_mutate_expr(&mut Replace(new.into_iter()), e);
                }
                walk_mutate_expr(self, e)
            }
        }
        /// Gives the operands of the node it walks, in order.
        struct Replace(smallvec::IntoIter<[Expr; 4]>);
        impl Mutator for Replace {
            fn mutate_expr(&mut self, e: &Expr) -> Expr {
                self.0.next().unwrap_or_else(|| e.clone())
            }
        }
        if !has_vector(e) {
            return e.clone();
        }
        Scalars(self, out).mutate_expr(e)
    }

    /// A statement list with a statement's lets before it.
    fn block(&mut self, s: &Stmt) -> Stmt {
        let mut out = Vec::new();
        for t in s.stmts() {
            self.stmt(t, &mut out);
        }
        if out.len() == 1 && !matches!(s.node(), StmtNode::Block(_)) {
            out.remove(0)
        } else {
            Stmt::block(out)
        }
    }

    fn stmt(&mut self, s: &Stmt, out: &mut Vec<Stmt>) {
        match s.node() {
            StmtNode::Let { var, value } | StmtNode::Decl { var, init: value }
                if var.ty().is_vector() =>
            {
                let mutable = matches!(s.node(), StmtNode::Decl { .. });
                let ls = self.lanes(value, &mut Some(out));
                let elem = var.ty().lane_scalar().map_or(Type::U32, Type::Scalar);
                let vars: Vec<Var> = (0..ls.len())
                    .map(|k| self.fresh(&format!("{}_{k}", var.name()), elem))
                    .collect();
                for (v, x) in vars.iter().zip(ls) {
                    out.push(if mutable { Stmt::decl(v, x) } else { Stmt::let_(v, x) });
                }
                self.lanes.insert(var.name().to_string(), vars.iter().map(Var::expr).collect());
            }
            StmtNode::Assign { var, value } if var.ty().is_vector() => {
                // All lanes are computed before any is assigned: a lane may read another.
                let ls = self.lanes(value, &mut Some(out));
                let tmps: Vec<Expr> = ls
                    .into_iter()
                    .map(|x| {
                        if x.as_imm().is_some() {
                            return x;
                        }
                        // Variables too: a lane may be another lane of `var` itself.
                        let t = self.fresh("va", x.ty());
                        out.push(Stmt::let_(&t, x));
                        t.expr()
                    })
                    .collect();
                let vars = self.lanes.get(var.name()).cloned().unwrap_or_default();
                for (v, x) in vars.iter().filter_map(Expr::as_var).zip(tmps) {
                    out.push(Stmt::assign(v, x));
                }
            }
            StmtNode::VecStore { buf, index, value } => {
                let index = self.scalar(index, &mut Some(out));
                let mark = out.len();
                let ls = self.lanes(value, &mut Some(out));
                let index = self.index_first(index, mark, out);
                if self.keep_memory {
                    out.push(Stmt::vstore(buf, index, Expr::build_vector(ls)));
                    return;
                }
                let index = self.bind(index, "vi", &mut Some(out));
                let t = index.ty().scalar().unwrap_or(kiln_ir::Scalar::U32);
                let ls: Vec<Expr> =
                    ls.into_iter().map(|x| self.bind(x, "vs", &mut Some(out))).collect();
                for (k, x) in ls.into_iter().enumerate() {
                    let i = if k == 0 { index.clone() } else { &index + Expr::int(t, k as i128) };
                    out.push(Stmt::store(buf, i, x));
                }
            }
            // A statement without vectors is kept as it is, not rebuilt (the same handle, as
            // passes return for what they leave unchanged).
            StmtNode::Let { var, value } => {
                let v = self.scalar(value, &mut Some(out));
                out.push(if v.ptr_eq(value) { s.clone() } else { Stmt::let_(var, v) });
            }
            StmtNode::Decl { var, init } => {
                let v = self.scalar(init, &mut Some(out));
                out.push(if v.ptr_eq(init) { s.clone() } else { Stmt::decl(var, v) });
            }
            StmtNode::Assign { var, value } => {
                let v = self.scalar(value, &mut Some(out));
                out.push(if v.ptr_eq(value) { s.clone() } else { Stmt::assign(var, v) });
            }
            StmtNode::Store { buf, index, value } => {
                let i = self.scalar(index, &mut Some(out));
                let mark = out.len();
                let v = self.scalar(value, &mut Some(out));
                let i = self.index_first(i, mark, out);
                let same = i.ptr_eq(index) && v.ptr_eq(value);
                out.push(if same { s.clone() } else { Stmt::store(buf, i, v) });
            }
            StmtNode::Alloc { .. } => out.push(s.clone()),
            StmtNode::If { cond, then, otherwise } => {
                let c = self.scalar(cond, &mut Some(out));
                let then = self.block(then);
                let otherwise = otherwise.as_ref().map(|o| self.block(o));
                out.push(match otherwise {
                    Some(o) => Stmt::if_else(c, then, o),
                    None => Stmt::if_(c, then),
                });
            }
            StmtNode::For { var, lo, hi, step, body } => {
                let bounds = self.in_order(&[lo, hi, step], &mut Some(out));
                let (lo, hi, step) = (bounds[0].clone(), bounds[1].clone(), bounds[2].clone());
                let body = self.block(body);
                out.push(Stmt::for_(var, lo, hi, step, body));
            }
            StmtNode::While { cond, body } => {
                let mut pre = Vec::new();
                let c = self.scalar(cond, &mut Some(&mut pre));
                if pre.is_empty() {
                    let body = self.block(body);
                    out.push(Stmt::while_(c, body));
                    return;
                }
                // A condition that needs `let`s (a vector load, lanes computed only for
                // their faults) is evaluated before the loop and again after each iteration,
                // into a flag: repeating its lanes in place would drop or reorder faults. The
                // body stays a block of its own, so its names do not reach the condition.
                out.extend(pre);
                let flag = self.fresh("vw", c.ty());
                out.push(Stmt::decl(&flag, c));
                let mut stmts = vec![self.block(body)];
                let c = self.scalar(cond, &mut Some(&mut stmts));
                stmts.push(Stmt::assign(&flag, c));
                out.push(Stmt::while_(flag.expr(), Stmt::block(stmts)));
            }
            StmtNode::Block(_) => out.push(self.block(s)),
            StmtNode::Call { result, func, args } => {
                // Arguments are evaluated left to right (an atomic's index before its value).
                let mut ends = Vec::with_capacity(args.len());
                let mut args: Vec<Expr> = args
                    .iter()
                    .map(|a| {
                        let a = self.scalar(a, &mut Some(out));
                        ends.push(out.len());
                        a
                    })
                    .collect();
                // Last first: a binding inserted at a later mark leaves the earlier ones.
                for (a, &end) in args.iter_mut().zip(&ends).rev() {
                    *a = self.index_first(a.clone(), end, out);
                }
                out.push(match result {
                    Some(r) => Stmt::call_into(r, func.clone(), args),
                    None => Stmt::call(func.clone(), args),
                });
            }
        }
    }
}

/// True if a `let` in `out` after its first `mark` statements may fail.
fn fails_after(out: &[Stmt], mark: usize) -> bool {
    out.get(mark..).unwrap_or_default().iter().any(|s| match s.node() {
        StmtNode::Let { value, .. } => value.may_fail(),
        _ => true,
    })
}

/// True if `e` has a vector anywhere inside (a lane read is how a scalar holds one). O(1).
fn has_vector(e: &Expr) -> bool {
    e.has_vector()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lowered(src: &str, how: VectorLowering) -> String {
        let k = kiln_ir::parse_module(src).expect("parses").kernels.remove(0);
        lower_vectors(&k, how).to_string()
    }

    /// The index's load comes before the value's load in the lowered text.
    fn index_first(text: &str, value_load: &str) {
        let (i, v) = (text.find("xu["), text.find(value_load));
        assert!(i.is_some() && v.is_some() && i < v, "value before index:\n{text}");
    }

    #[test]
    fn a_store_index_that_may_fail_is_bound_before_the_value_lets() {
        let vstore = "kernel k(x: ptr<global, u32>, xu: ptr<global, u32>, o: ptr<global, u32>) {
               let i: u32 = global_id(0);
               vstore(o, (xu[i + 1u32] & 1u32) * 4u32, vload4(x, i / 6u32 * 8u32));
             }";
        index_first(&lowered(vstore, VectorLowering::Memory), "vload4(x");
        index_first(&lowered(vstore, VectorLowering::Scalar), "x[");
        let store = "kernel k(x: ptr<global, u32>, xu: ptr<global, u32>, o: ptr<global, u32>) {
               let i: u32 = global_id(0);
               o[xu[i + 1u32] & 7u32] = extract(vload4(x, i * 4u32), 1);
             }";
        index_first(&lowered(store, VectorLowering::Memory), "vload4(x");
    }

    #[test]
    fn an_index_that_cannot_fail_stays_in_the_store() {
        let src = "kernel k(x: ptr<global, u32>, o: ptr<global, u32>) {
               let i: u32 = global_id(0);
               vstore(o, i * 4u32, vload4(x, i * 4u32));
             }";
        let text = lowered(src, VectorLowering::Memory);
        assert!(!text.contains("let vi"), "{text}");
    }
}
