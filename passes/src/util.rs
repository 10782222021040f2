//! Helpers shared by the classic passes: variable uses, substitution, stability and constant
//! folding.

use hashbrown::{HashMap, HashSet};
use kiln_ir::eval;
use kiln_ir::expr::name_bit;
use kiln_ir::{
    walk_expr, walk_mutate_expr, walk_stmt, Expr, ExprNode, Imm, Kernel, Mutator, Stmt, StmtNode,
    Var, Visitor,
};

/// Counts references to the variable `name` (as a value, a load/store buffer or an
/// assignment target) in statements.
pub fn count_uses(stmts: &[Stmt], name: &str) -> usize {
    let mut n = 0;
    for s in stmts {
        for_each_reference(s, &mut |v| n += usize::from(v == name));
    }
    n
}

/// The variable expression node `e` itself refers to (not through its operands): a value,
/// or a load's buffer. With [`stmt_ref`], what every pass here counts as a reference.
pub fn expr_ref(e: &Expr) -> Option<&Var> {
    match e.node() {
        ExprNode::Var(v) | ExprNode::Load { buf: v, .. } | ExprNode::VecLoad { buf: v, .. } => {
            Some(v)
        }
        _ => None,
    }
}

/// The variable statement `s` itself refers to (not through its expressions or nested
/// statements): a store's buffer or an assignment's target.
pub fn stmt_ref(s: &Stmt) -> Option<&Var> {
    match s.node() {
        StmtNode::Store { buf: v, .. }
        | StmtNode::VecStore { buf: v, .. }
        | StmtNode::Assign { var: v, .. } => Some(v),
        _ => None,
    }
}

/// Calls `f` with the name of every reference to a variable in `s` ([`expr_ref`],
/// [`stmt_ref`]), as [`count_uses`] counts them.
pub fn for_each_reference(s: &Stmt, f: &mut dyn FnMut(&str)) {
    struct Refs<'f>(&'f mut dyn FnMut(&str));
    impl Visitor for Refs<'_> {
        fn visit_expr(&mut self, e: &Expr) {
            if let Some(v) = expr_ref(e) {
                (self.0)(v.name())
            }
            walk_expr(self, e)
        }
        fn visit_stmt(&mut self, s: &Stmt) {
            if let Some(v) = stmt_ref(s) {
                (self.0)(v.name())
            }
            walk_stmt(self, s)
        }
    }
    Refs(f).visit_stmt(s)
}

/// Names bound anywhere inside `s`, with how often each is bound.
pub fn bound_names(s: &Stmt) -> HashMap<String, usize> {
    struct B(HashMap<String, usize>);
    impl Visitor for B {
        fn visit_stmt(&mut self, s: &Stmt) {
            match s.node() {
                StmtNode::Let { var, .. }
                | StmtNode::Decl { var, .. }
                | StmtNode::Alloc { var, .. }
                | StmtNode::For { var, .. }
                | StmtNode::Call { result: Some(var), .. } => {
                    *self.0.entry(var.name().to_string()).or_default() += 1;
                }
                _ => {}
            }
            walk_stmt(self, s)
        }
    }
    let mut b = B(HashMap::new());
    b.visit_stmt(s);
    b.0
}

/// The names of variables that are ever assigned or declared mutable (`var`) in `s`.
pub fn mutable_names(s: &Stmt) -> HashSet<String> {
    struct M(HashSet<String>, SeenNames);
    impl Visitor for M {
        // Declarations and assignments are statements: expressions need no walk.
        fn visit_expr(&mut self, _: &Expr) {}
        fn visit_stmt(&mut self, s: &Stmt) {
            match s.node() {
                // Accumulators are assigned many times: no `String` for a name already in.
                StmtNode::Decl { var, .. } | StmtNode::Assign { var, .. }
                    if self.1.first(var) && !self.0.contains(var.name()) =>
                {
                    self.0.insert(var.name().to_string());
                }
                _ => {}
            }
            walk_stmt(self, s)
        }
    }
    let mut m = M(HashSet::new(), SeenNames::default());
    m.visit_stmt(s);
    m.0
}

/// A filter in front of a walk's set of names: a variable's uses share its name's
/// allocation, so a name allocation met again (an accumulator's thousandth assignment) is
/// mostly known without hashing and comparing its text. Only valid while the walked tree
/// (which keeps every name alive) is.
pub(crate) struct SeenNames {
    /// The last allocation met in each slot (by a hash of its address). No set of every
    /// allocation behind it: a generator's kernel spells each name in many allocations
    /// (hundreds of accumulators, each made again per unrolled copy), and hashing each into
    /// such a set cost more than asking the set of names, which the callers do anyway.
    recent: Box<[usize; SEEN_SLOTS]>,
}

/// The slots of [`SeenNames::recent`] (a power of two, room for a register block's names).
const SEEN_SLOTS: usize = 512;

impl Default for SeenNames {
    fn default() -> SeenNames {
        SeenNames { recent: Box::new([0; SEEN_SLOTS]) }
    }
}

impl SeenNames {
    /// False if `v`'s name allocation was met just before in its slot (then its name was
    /// seen); true otherwise, always the first time, when the name itself may or may not
    /// have been seen (the caller asks its set of names).
    pub(crate) fn first(&mut self, v: &kiln_ir::Var) -> bool {
        let addr = std::sync::Arc::as_ptr(v.name_arc()) as *const u8 as usize;
        // Fibonacci hashing: the address's low bits are the allocator's alignment.
        let slot = ((addr as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 55) as usize;
        let slot = &mut self.recent[slot & (SEEN_SLOTS - 1)];
        if *slot == addr {
            return false;
        }
        *slot = addr;
        true
    }
}

/// A set of variable names asked whether it holds a name ([`is_stable`]'s mutable variables).
pub trait NameSet {
    /// True if `name` is in the set.
    fn has(&self, name: &str) -> bool;
}

impl NameSet for HashSet<String> {
    fn has(&self, name: &str) -> bool {
        self.contains(name)
    }
}

/// The names of a kernel's mutable variables ([`mutable_names`]) with a filter in front:
/// the [`name_bit`]s of the names in the set, so that most names not in it (every `let` a
/// stability check meets) are answered without hashing a string. CSE asks this for every
/// variable of every expression it walks.
#[derive(Clone, Debug, Default)]
pub struct Mutable {
    names: HashSet<String>,
    /// The [`name_bit`]s of the names, or-ed.
    bits: u64,
}

impl Mutable {
    /// The set of `names`.
    pub fn new(names: HashSet<String>) -> Mutable {
        let bits = names.iter().fold(0, |b, n| b | name_bit(n));
        Mutable { names, bits }
    }

    /// The mutable variables of `s` ([`mutable_names`]).
    pub fn of(s: &Stmt) -> Mutable {
        Mutable::new(mutable_names(s))
    }

    /// True if `name` is in the set.
    pub fn contains(&self, name: &str) -> bool {
        self.bits & name_bit(name) != 0 && self.names.contains(name)
    }

    /// True for a scalar variable not in the set: a value [`is_stable`] accepts.
    pub fn stable_var(&self, v: &Var) -> bool {
        v.ty().scalar().is_some() && !self.contains(v.name())
    }

    /// The names, as a plain set.
    pub fn names(&self) -> &HashSet<String> {
        &self.names
    }
}

impl NameSet for Mutable {
    fn has(&self, name: &str) -> bool {
        self.contains(name)
    }
}

/// True if `e` may be evaluated anywhere else in its scope with the same result: no loads,
/// nothing that may fail, and only variables that are never assigned (not in `mutable`).
pub fn is_stable(e: &Expr, mutable: &impl NameSet) -> bool {
    if e.may_fail() {
        return false;
    }
    fn walk(e: &Expr, mutable: &impl NameSet) -> bool {
        match e.node() {
            ExprNode::Load { .. } | ExprNode::VecLoad { .. } => false,
            ExprNode::Var(v) => v.ty().scalar().is_some() && !mutable.has(v.name()),
            _ => e.operands().all(|c| walk(c, mutable)),
        }
    }
    walk(e, mutable)
}

/// The variable names `e` refers to.
pub fn free_names(e: &Expr, out: &mut HashSet<String>) {
    if let Some(v) = expr_ref(e) {
        out.insert(v.name().to_string());
    }
    for c in e.operands() {
        free_names(c, out);
    }
}

/// Replaces references to variables by expressions (by name).
pub struct Subst(pub HashMap<String, Expr>);

impl Mutator for Subst {
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        if let ExprNode::Var(v) = e.node() {
            if let Some(r) = self.0.get(v.name()) {
                return r.clone();
            }
        }
        walk_mutate_expr(self, e)
    }
}

/// Folds operators whose operands are all constants (bottom-up, interpreter semantics);
/// operations that would fail (division by zero) are left alone.
pub struct Folder;

/// Evaluates `e` if all its operands are constants.
pub fn fold_node(e: &Expr) -> Option<Imm> {
    let k = |x: &Expr| x.as_imm().copied();
    match e.node() {
        ExprNode::Unary { op, a } => eval::unary(*op, k(a)?).ok(),
        ExprNode::Binary { op, a, b } => eval::binary(*op, k(a)?, k(b)?).ok(),
        ExprNode::Cast { to, a } => Some(eval::cast(*to, k(a)?)),
        ExprNode::Select { cond, a, b } => {
            let (a, b) = (k(a)?, k(b)?);
            match k(cond)? {
                Imm::Bool(true) => Some(a),
                Imm::Bool(false) => Some(b),
                _ => None,
            }
        }
        ExprNode::Intrinsic { op, args } if !op.is_approximate() => {
            let vals: Option<Vec<Imm>> = args.iter().map(k).collect();
            eval::intrinsic(*op, &vals?).ok()
        }
        _ => None,
    }
}

impl Mutator for Folder {
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        let e2 = walk_mutate_expr(self, e);
        match fold_node(&e2) {
            Some(imm) if e2.ty().scalar() == Some(imm.scalar()) => Expr::imm(imm),
            _ => e2,
        }
    }
}

/// True if `s` holds statements (a block, a branch, a loop): what a mutator of blocks and
/// loops looks into; any other statement it gives back as it is.
pub(crate) fn has_nested(s: &Stmt) -> bool {
    matches!(
        s.node(),
        StmtNode::Block(_) | StmtNode::If { .. } | StmtNode::For { .. } | StmtNode::While { .. }
    )
}

/// The [`kiln_ir::Mutator`] methods of a pass that rewrites statements only (blocks, branches,
/// loops), written inside its `impl Mutator`: expressions and variables are never walked,
/// and a statement without nested statements ([`has_nested`]) stays as it is, unwalked.
/// Why: cloning, comparing and dropping a handle per operand, to rebuild nothing, was most
/// of such a pass's time over an unrolled kernel.
macro_rules! statements_only {
    () => {
        fn mutate_expr(&mut self, e: &kiln_ir::Expr) -> kiln_ir::Expr {
            e.clone()
        }

        fn mutate_expr_changed(&mut self, _: &kiln_ir::Expr) -> Option<kiln_ir::Expr> {
            None
        }

        fn mutate_var_changed(&mut self, _: &kiln_ir::Var) -> Option<kiln_ir::Var> {
            None
        }

        fn mutate_stmt_changed(&mut self, s: &kiln_ir::Stmt) -> Option<kiln_ir::Stmt> {
            if !$crate::util::has_nested(s) {
                return None;
            }
            let n = kiln_ir::Mutator::mutate_stmt(self, s);
            (!n.ptr_eq(s)).then_some(n)
        }
    };
}
pub(crate) use statements_only;

/// The variable statement `s` binds, assigns or stores through, if any: with the
/// parameters, every name a kernel that verifies refers to is one of these.
pub(crate) fn named_var(s: &Stmt) -> Option<&kiln_ir::Var> {
    match s.node() {
        StmtNode::Let { var, .. }
        | StmtNode::Decl { var, .. }
        | StmtNode::Alloc { var, .. }
        | StmtNode::For { var, .. }
        | StmtNode::Assign { var, .. }
        | StmtNode::Store { buf: var, .. }
        | StmtNode::VecStore { buf: var, .. }
        | StmtNode::Call { result: Some(var), .. } => Some(var),
        _ => None,
    }
}

/// The kernels of the repository's examples and pass filetests, with their files: what the
/// passes' own tests check their summaries over.
#[cfg(test)]
pub(crate) fn repository_kernels() -> Vec<(std::path::PathBuf, Kernel)> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut out = Vec::new();
    for dir in ["examples", "tests/filetests/passes"] {
        for f in std::fs::read_dir(format!("{root}/{dir}")).expect("directory").flatten() {
            if f.path().extension().is_none_or(|x| x != "kir") {
                continue;
            }
            let Ok(Ok(m)) = std::fs::read_to_string(f.path()).map(|s| kiln_ir::parse_module(&s))
            else {
                continue;
            };
            out.extend(m.kernels.iter().map(|k| (f.path(), k.clone())));
        }
    }
    out
}

/// Every statement of `s`, `s` and nested ones included, outermost first.
#[cfg(test)]
pub(crate) fn all_stmts(s: &Stmt) -> Vec<Stmt> {
    struct All(Vec<Stmt>);
    impl Visitor for All {
        fn visit_stmt(&mut self, s: &Stmt) {
            self.0.push(s.clone());
            walk_stmt(self, s);
        }
    }
    let mut all = All(Vec::new());
    all.visit_stmt(s);
    all.0
}

/// Every variable name bound or referred to in `k` (parameters included).
///
/// Only statements are walked: in a kernel that verifies, every name an expression refers
/// to is a parameter or bound by a statement, so the expressions (most of a big kernel)
/// add nothing. (The names a fresh-name search must avoid are those bound anywhere.)
pub fn all_names(k: &Kernel) -> HashSet<String> {
    names_where(k, |_| true)
}

/// The names of [`all_names`] that `keep` accepts: a fresh-name search whose candidates all
/// contain some text needs only the names that do (no `String` made for each of the
/// others, most of a kernel's).
pub fn names_where(k: &Kernel, keep: impl Fn(&str) -> bool) -> HashSet<String> {
    struct Names<F>(HashSet<String>, SeenNames, F);
    impl<F: Fn(&str) -> bool> Names<F> {
        /// Most assignments and stores repeat a name already in: look it up before making a
        /// `String`.
        fn add(&mut self, var: &kiln_ir::Var) {
            if self.1.first(var) && (self.2)(var.name()) && !self.0.contains(var.name()) {
                self.0.insert(var.name().to_string());
            }
        }
    }
    impl<F: Fn(&str) -> bool> Visitor for Names<F> {
        fn visit_expr(&mut self, _: &Expr) {}
        fn visit_stmt(&mut self, s: &Stmt) {
            if let Some(var) = named_var(s) {
                self.add(var);
            }
            walk_stmt(self, s)
        }
    }
    let params = k.params().iter().map(|p| p.name()).filter(|n| keep(n));
    let mut n = Names(params.map(str::to_string).collect(), SeenNames::default(), keep);
    n.visit_stmt(k.body());
    n.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slots never hide a new allocation: each one is first the first time it is met,
    /// with many more allocations than slots (so that they share slots), met in changing
    /// orders; an allocation met again right away (a clone of a variable shares its name's
    /// allocation) is not.
    #[test]
    fn seen_names_never_hide_a_new_allocation() {
        let vars: Vec<Var> =
            (0..4 * SEEN_SLOTS).map(|i| Var::new(format!("v{i}"), kiln_ir::Type::I32)).collect();
        let mut seen = SeenNames::default();
        let mut plain = HashSet::new();
        let mut hidden = 0;
        for round in 0..4 {
            for (_, v) in vars.iter().enumerate().filter(|(i, _)| (i + round) % 3 != 0) {
                let addr = std::sync::Arc::as_ptr(v.name_arc()) as *const u8 as usize;
                let first = seen.first(v);
                if plain.insert(addr) {
                    assert!(first, "a new allocation is met first");
                } else {
                    hidden += usize::from(!first);
                }
                assert!(!seen.first(&v.clone()));
            }
        }
        assert_eq!(plain.len(), vars.len());
        // Met again later, an allocation may or may not still hold its slot.
        assert!(hidden < plain.len(), "{hidden}");
    }

    /// The filter in front of the set never changes an answer: names that share a length or
    /// a first byte with a member, names that share neither, the empty name.
    #[test]
    fn mutable_answers_as_its_set() {
        let members = ["acc_0_0", "acc_7_15", "sa", "x", ""];
        let set: HashSet<String> = members.iter().map(|s| s.to_string()).collect();
        let m = Mutable::new(set.clone());
        let asked = [
            "acc_0_0", "acc_7_15", "sa", "x", "", "acc_0_1", "acc_9_15", "sb", "a_v0", "y", "m0",
            "b_at", "ab", "acc_0_00", "s", "xx",
        ];
        for n in asked {
            assert_eq!(m.contains(n), set.contains(n), "{n:?}");
            assert_eq!(m.has(n), set.has(n), "{n:?}");
        }
        let empty = Mutable::default();
        assert!(asked.iter().all(|n| !empty.contains(n)));
    }
}
