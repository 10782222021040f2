//! The e-graph language of the simplifier, its analysis (types, constants, "may fail") and
//! the conversions between kiln expressions and e-graph terms.
//!
//! Operators on scalars become e-graph nodes; everything else (variables, built-ins, loads,
//! casts and intrinsics other than `min`/`max`) becomes an opaque [`Node::Leaf`] whose
//! operands were simplified on their own first.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use egg::{Analysis, DidMerge, EGraph, Id, Language, RecExpr};
use kiln_ir::eval;
use kiln_ir::{BinOp, Builtin, Expr, ExprMap, ExprNode, Imm, Intrinsic, Scalar, UnOp};

/// A typed constant inside the e-graph (compared bitwise, like [`Imm`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Konst(pub Imm);

impl Konst {
    fn key(&self) -> (Scalar, u64) {
        match self.0 {
            Imm::Bool(b) => (Scalar::Bool, b as u64),
            Imm::Int(t, bits) => (t, bits),
            Imm::Float(t, v) => (t, v.to_bits()),
        }
    }
}

impl PartialOrd for Konst {
    fn partial_cmp(&self, other: &Konst) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Konst {
    fn cmp(&self, other: &Konst) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl fmt::Display for Konst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Expr::imm(self.0))
    }
}

impl FromStr for Konst {
    type Err = ();
    /// Constants never appear in rule patterns; rules that need one compute it.
    fn from_str(_: &str) -> Result<Konst, ()> {
        Err(())
    }
}

/// An opaque leaf: an index into [`KAnalysis::leaves`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Leaf(pub u32);

impl fmt::Display for Leaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

impl FromStr for Leaf {
    type Err = ();
    fn from_str(s: &str) -> Result<Leaf, ()> {
        s.strip_prefix('#').and_then(|n| n.parse().ok()).map(Leaf).ok_or(())
    }
}

/// The language, in its own module: `define_language!` cannot document its variants
/// (each variant is the operator its text names).
#[allow(missing_docs)]
mod node {
    use super::{Id, Konst, Leaf};
    use egg::define_language;

    define_language! {
        /// The simplifier's term language: kiln's pure scalar operators.
        pub enum Node {
            "+" = Add([Id; 2]),
            "-" = Sub([Id; 2]),
            "*" = Mul([Id; 2]),
            "/" = Div([Id; 2]),
            "%" = Rem([Id; 2]),
            "&" = And([Id; 2]),
            "|" = Or([Id; 2]),
            "^" = Xor([Id; 2]),
            "<<" = Shl([Id; 2]),
            ">>" = Shr([Id; 2]),
            "==" = Eq([Id; 2]),
            "!=" = Ne([Id; 2]),
            "<" = Lt([Id; 2]),
            "<=" = Le([Id; 2]),
            ">" = Gt([Id; 2]),
            ">=" = Ge([Id; 2]),
            "&&" = LAnd([Id; 2]),
            "||" = LOr([Id; 2]),
            "neg" = Neg([Id; 1]),
            "!" = Not([Id; 1]),
            "~" = BitNot([Id; 1]),
            "select" = Select([Id; 3]),
            "min" = Min([Id; 2]),
            "max" = Max([Id; 2]),
            Const(Konst),
            Leaf(Leaf),
        }
    }
}
pub use node::Node;

impl Node {
    /// The binary operator of a binary node.
    pub fn binop(&self) -> Option<(BinOp, [Id; 2])> {
        let op = match self {
            Node::Add(_) => BinOp::Add,
            Node::Sub(_) => BinOp::Sub,
            Node::Mul(_) => BinOp::Mul,
            Node::Div(_) => BinOp::Div,
            Node::Rem(_) => BinOp::Rem,
            Node::And(_) => BinOp::And,
            Node::Or(_) => BinOp::Or,
            Node::Xor(_) => BinOp::Xor,
            Node::Shl(_) => BinOp::Shl,
            Node::Shr(_) => BinOp::Shr,
            Node::Eq(_) => BinOp::Eq,
            Node::Ne(_) => BinOp::Ne,
            Node::Lt(_) => BinOp::Lt,
            Node::Le(_) => BinOp::Le,
            Node::Gt(_) => BinOp::Gt,
            Node::Ge(_) => BinOp::Ge,
            Node::LAnd(_) => BinOp::LogicAnd,
            Node::LOr(_) => BinOp::LogicOr,
            _ => return None,
        };
        match self {
            Node::Add(c) | Node::Sub(c) | Node::Mul(c) | Node::Div(c) | Node::Rem(c) => {
                Some((op, *c))
            }
            Node::And(c) | Node::Or(c) | Node::Xor(c) | Node::Shl(c) | Node::Shr(c) => {
                Some((op, *c))
            }
            Node::Eq(c) | Node::Ne(c) | Node::Lt(c) | Node::Le(c) | Node::Gt(c) | Node::Ge(c) => {
                Some((op, *c))
            }
            Node::LAnd(c) | Node::LOr(c) => Some((op, *c)),
            _ => None,
        }
    }

    /// The node for binary operator `op`.
    pub fn from_binop(op: BinOp, c: [Id; 2]) -> Node {
        match op {
            BinOp::Add => Node::Add(c),
            BinOp::Sub => Node::Sub(c),
            BinOp::Mul => Node::Mul(c),
            BinOp::Div => Node::Div(c),
            BinOp::Rem => Node::Rem(c),
            BinOp::And => Node::And(c),
            BinOp::Or => Node::Or(c),
            BinOp::Xor => Node::Xor(c),
            BinOp::Shl => Node::Shl(c),
            BinOp::Shr => Node::Shr(c),
            BinOp::Eq => Node::Eq(c),
            BinOp::Ne => Node::Ne(c),
            BinOp::Lt => Node::Lt(c),
            BinOp::Le => Node::Le(c),
            BinOp::Gt => Node::Gt(c),
            BinOp::Ge => Node::Ge(c),
            BinOp::LogicAnd => Node::LAnd(c),
            BinOp::LogicOr => Node::LOr(c),
        }
    }

    /// The unary operator of a unary node.
    pub fn unop(&self) -> Option<(UnOp, Id)> {
        match self {
            Node::Neg([a]) => Some((UnOp::Neg, *a)),
            Node::Not([a]) => Some((UnOp::Not, *a)),
            Node::BitNot([a]) => Some((UnOp::BitNot, *a)),
            _ => None,
        }
    }
}

/// Evaluates one operator node on constant operands with the interpreter's semantics.
/// `None` when an operand is unknown or the operation fails (e.g. division by zero).
pub fn fold(node: &Node, arg: impl Fn(Id) -> Option<Imm>) -> Option<Imm> {
    if let Some((op, [a, b])) = node.binop() {
        return eval::binary(op, arg(a)?, arg(b)?).ok();
    }
    if let Some((op, a)) = node.unop() {
        return eval::unary(op, arg(a)?).ok();
    }
    match node {
        Node::Select([c, a, b]) => {
            let (a, b) = (arg(*a)?, arg(*b)?);
            match arg(*c)? {
                Imm::Bool(true) => Some(a),
                Imm::Bool(false) => Some(b),
                _ => None,
            }
        }
        Node::Min([a, b]) => eval::intrinsic(Intrinsic::Min, &[arg(*a)?, arg(*b)?]).ok(),
        Node::Max([a, b]) => eval::intrinsic(Intrinsic::Max, &[arg(*a)?, arg(*b)?]).ok(),
        Node::Const(k) => Some(k.0),
        _ => None,
    }
}

/// What the analysis knows about an e-class.
#[derive(Clone, Debug, PartialEq)]
pub struct Data {
    /// The class's type (all members have it: rules preserve types).
    pub ty: Scalar,
    /// Its value, if constant.
    pub konst: Option<Imm>,
    /// True if evaluating it may be an error (division or remainder by a possibly-zero
    /// value, a load that may be out of bounds, or an operand that may fail).
    pub may_fail: bool,
    /// The work-item built-in this class is, if it is one (for range facts such as
    /// `local_id(d) < local_size(d)`).
    pub builtin: Option<(Builtin, u8)>,
}

/// The e-class analysis: types, constant folding and the "may fail" fact; it also owns the
/// table of opaque leaves.
#[derive(Default)]
pub struct KAnalysis {
    /// Opaque leaves: the expression and whether evaluating it may fail.
    pub leaves: Vec<(Expr, bool)>,
    index: ExprMap<u32>,
}

impl KAnalysis {
    /// The leaf for `e`, added if new.
    pub fn leaf(&mut self, e: &Expr, may_fail: bool) -> Leaf {
        if let Some(&i) = self.index.get(e) {
            return Leaf(i);
        }
        let i = self.leaves.len() as u32;
        self.leaves.push((e.clone(), may_fail));
        self.index.insert(e.clone(), i);
        Leaf(i)
    }
}

/// The e-graph the simplifier works on.
pub type KGraph = EGraph<Node, KAnalysis>;

fn scalar_of(e: &Expr) -> Scalar {
    e.ty().scalar().unwrap_or(Scalar::Bool)
}

impl Analysis<Node> for KAnalysis {
    type Data = Data;

    fn make(egraph: &mut KGraph, node: &Node) -> Data {
        let d = |i: &Id| &egraph[*i].data;
        let konst = fold(node, |i| egraph[i].data.konst);
        let child_fails = node.children().iter().any(|c| d(c).may_fail);
        let (ty, may_fail) = match node {
            Node::Const(k) => (k.0.scalar(), false),
            Node::Leaf(l) => match egraph.analysis.leaves.get(l.0 as usize) {
                Some((e, f)) => (scalar_of(e), *f),
                None => (Scalar::Bool, true),
            },
            Node::Div([a, b]) | Node::Rem([a, b]) => {
                let ty = d(a).ty;
                let divisor_ok = !ty.is_int() || d(b).konst.is_some_and(|k| !k.is_zero());
                (ty, child_fails || !divisor_ok)
            }
            Node::Select([_, a, _]) => (d(a).ty, child_fails),
            n => {
                let first = n.children()[0];
                let ty = match n.binop() {
                    Some((op, _)) if op.is_comparison() || op.is_logical() => Scalar::Bool,
                    _ if matches!(n, Node::Not(_)) => Scalar::Bool,
                    _ => d(&first).ty,
                };
                (ty, child_fails)
            }
        };
        let builtin = match node {
            Node::Leaf(l) => match egraph.analysis.leaves.get(l.0 as usize).map(|x| x.0.node()) {
                Some(ExprNode::Builtin { kind, dim }) => Some((*kind, *dim)),
                _ => None,
            },
            _ => None,
        };
        Data { ty, konst, may_fail: may_fail && konst.is_none(), builtin }
    }

    fn merge(&mut self, a: &mut Data, b: Data) -> DidMerge {
        debug_assert_eq!(a.ty, b.ty, "the simplifier merged classes of different types");
        let mut to_a = false;
        let mut to_b = false;
        match (a.konst, b.konst) {
            (None, Some(k)) => {
                a.konst = Some(k);
                to_a = true;
            }
            (Some(_), None) => to_b = true,
            _ => {}
        }
        if a.may_fail && !b.may_fail {
            a.may_fail = false;
            to_a = true;
        } else if !a.may_fail && b.may_fail {
            to_b = true;
        }
        match (a.builtin, b.builtin) {
            (None, Some(x)) => {
                a.builtin = Some(x);
                to_a = true;
            }
            (Some(_), None) => to_b = true,
            _ => {}
        }
        DidMerge(to_a, to_b)
    }

    fn modify(egraph: &mut KGraph, id: Id) {
        if let Some(k) = egraph[id].data.konst {
            let c = egraph.add(Node::Const(Konst(k)));
            egraph.union(id, c);
        }
    }
}

/// Converts an extracted term back into a kiln expression.
pub fn to_expr(rec: &RecExpr<Node>, leaves: &[(Expr, bool)]) -> Option<Expr> {
    let mut out: Vec<Expr> = Vec::with_capacity(rec.as_ref().len());
    for node in rec.as_ref() {
        let get = |i: &Id| out.get(usize::from(*i)).cloned();
        let e = if let Some((op, [a, b])) = node.binop() {
            Expr::binary(op, get(&a)?, get(&b)?)
        } else if let Some((op, a)) = node.unop() {
            Expr::unary(op, get(&a)?)
        } else {
            match node {
                Node::Select([c, a, b]) => Expr::select(get(c)?, get(a)?, get(b)?),
                Node::Min([a, b]) => Expr::intrinsic(Intrinsic::Min, [get(a)?, get(b)?]),
                Node::Max([a, b]) => Expr::intrinsic(Intrinsic::Max, [get(a)?, get(b)?]),
                Node::Const(k) => Expr::imm(k.0),
                Node::Leaf(l) => leaves.get(l.0 as usize)?.0.clone(),
                _ => return None,
            }
        };
        out.push(e);
    }
    out.pop()
}

/// True for the expression kinds that become e-graph operator nodes.
pub fn is_operator(e: &Expr) -> bool {
    match e.node() {
        // A division named by its source stays whole (see `crate::origin`).
        _ if e.origin().is_some() => false,
        ExprNode::Unary { a, .. } => a.ty().scalar().is_some_and(|s| s != Scalar::F16),
        ExprNode::Binary { a, .. } => a.ty().scalar().is_some_and(|s| s != Scalar::F16),
        ExprNode::Select { a, .. } => a.ty().scalar().is_some(),
        ExprNode::Intrinsic { op: Intrinsic::Min | Intrinsic::Max, args } => {
            args.len() == 2 && args[0].ty().scalar().is_some_and(|s| s != Scalar::F16)
        }
        _ => false,
    }
}
