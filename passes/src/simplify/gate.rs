//! When the e-graph is worth running: [`egg_may_help`] looks at the operator part of an
//! expression (what becomes e-graph nodes; loads, casts and other leaves are opaque) and
//! answers `false` only where no sequence of the rules in [`super::rules`] can reach a
//! strictly cheaper form, so skipping egg there loses nothing.
//!
//! Why `false` is safe. Every rule that can lower the cost needs one of:
//! - a unary operator (`-(-x)`, `!(a < b)`, `0 - x` written as a negation, ...), a `select`,
//!   `min` or `max` (their rules are cheap to trigger, so these always go to egg);
//! - a special integer or boolean constant (0, 1, -1, all ones, `true`/`false`). Float
//!   constants never count: the only float rules with constants are `x * 1.0`, `x / 1.0`,
//!   `x - (+0.0)` and `x + (-0.0)` (no reassociation), which the pre-pass has applied;
//!   `0.0 * x[i]` (a kernel's scale set to 0 by constant propagation) is already final;
//! - two constants that associativity, commutativity or distribution can bring together
//!   (for integers: two constants in one connected region of `+ - *` nodes, or of `/ %`
//!   nodes, or of one bitwise operator);
//! - an operand that occurs twice *within one scope* (`x - x`, `(x / c) * c + x % c`,
//!   factoring), see below;
//! - a work-item id together with its size (`local_id(d) < local_size(d)`).
//!
//! Without any of these, the operator part is a read-once formula over distinct leaves with
//! at most one constant per region, which commutativity, associativity and distribution
//! only rearrange at equal or higher cost.
//!
//! Scopes. The operator part splits into scopes: maximal connected sets of nodes of one
//! class, the classes being the ring and division operators together (`+ - *` negation,
//! `/ %`: the rules `(x / c) * c + x % c`, `x - x % c` and `x - (x / c) * c` span both),
//! `&`, `|`, `^`, and every other operator (shifts, comparisons, `&&`, `||`) a scope of its
//! own. An operand of a scope is a leaf, a constant, or a *unit*: an operator node of another
//! scope. Every rule's left-hand side lies within one scope, its variables matching operands
//! of that scope; so two occurrences of a leaf can only meet in a rule if they are operands
//! of one scope, or if two units of one scope become equal (congruence: `(a + b) >> 2` and
//! `(b + a) >> 2`). A unit only ever equals nodes of its own kind unless a rule inside its
//! own scope fires (a scope that gets no hit is only rearranged), and the kinds are coarse
//! (the ring and division class is one kind, `<` and `>` one, `<=` and `>=` one, since
//! rules turn one into the other). Nor does a rule that gets no hit change the set of leaves
//! a term holds (distribution copies one, factoring merges copies; only cancellation and
//! absorption drop one, and they need a hit): two units of one kind over the same leaves in
//! one scope count as an operand that occurs twice. Leaf sets are compared by a 128-bit
//! fingerprint (equal sets, equal fingerprints; a collision only sends one more expression
//! to egg). A leaf repeated in different scopes (`(i >> 2) * 40 + (i & 3) * 8`, the index
//! arithmetic of generated tiles) is no reason to build an e-graph, nor are two comparisons
//! of different values (`x < w && y < h`).
//!
//! An affine region (integer `+`, `-`, negation and multiplications by constants over atoms
//! that cannot fail, `affine::is_affine_region`) has been through the affine normal form
//! just before: its constants are folded, its equal terms merged, and its rebuilt form
//! is taken whenever cheaper, so its constants and negations count for nothing here (what
//! the ring rules could reach from it, the normal form has reached), except a negated
//! product by a constant, `-(x * c)`, which the rules fold into `x * -c`.
//! `tests/simplify_gate.rs` checks the claim on random expressions against full e-graph
//! runs. One known gap, older than scopes: a leading negated atom with a scaled term
//! (`-x - y * 3`, which egg turns into `y * -3 - x`, one node fewer) is left as it is; the
//! scope property test compares only the cases scopes decide (a leaf repeats).

use std::hash::Hash;

use hashbrown::HashSet;
use kiln_ir::{BinOp, Builtin, Expr, ExprNode, Imm, Scalar, UnOp};
use smallvec::SmallVec;

use super::affine;

use super::lang::is_operator;

/// Operator families whose constants rules can combine.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    Ring,
    DivRem,
    And,
    Or,
    Xor,
    /// Shifts, comparisons, logic: no rule combines their constants with anything.
    Other,
}

fn family(op: BinOp) -> Family {
    use BinOp::*;
    match op {
        Add | Sub | Mul => Family::Ring,
        Div | Rem => Family::DivRem,
        And => Family::And,
        Or => Family::Or,
        Xor => Family::Xor,
        _ => Family::Other,
    }
}

/// What [`scan`] can tell apart of a unit: its class, or its operator where no rule turns
/// it into another (comparisons by direction-free kind).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// `+ - *` negation `/ %` (rules turn `-` into `+` and `*`, and back).
    RingDiv,
    /// A bitwise, shift, comparison or logical operator (`<` stands for `>` too, `<=` for
    /// `>=`).
    Op(BinOp),
}

/// The kind of an operator node (see [`Kind`]); `None` for unary operators, `select`, `min`
/// and `max`, which are hits anyway.
fn kind(e: &Expr) -> Option<Kind> {
    match e.node() {
        ExprNode::Unary { op: UnOp::Neg, .. } => Some(Kind::RingDiv),
        ExprNode::Binary { op, .. } => Some(match family(*op) {
            Family::Ring | Family::DivRem => Kind::RingDiv,
            _ => Kind::Op(match op {
                BinOp::Gt => BinOp::Lt,
                BinOp::Ge => BinOp::Le,
                op => *op,
            }),
        }),
        _ => None,
    }
}

/// The scope class of a kind: nodes of one class joined by an edge share a scope; `None`
/// where every node is a scope of its own.
fn class(k: Kind) -> Option<Kind> {
    match k {
        Kind::RingDiv | Kind::Op(BinOp::And | BinOp::Or | BinOp::Xor) => Some(k),
        Kind::Op(_) => None,
    }
}

// The sets and lists on the stack for the usual few entries: a scan is made for every
// expression the simplifier looks at, and its allocations (each set grown and rehashed a few
// times, then freed) were most of what it cost.
#[derive(Default)]
struct Scan<'a> {
    /// Leaves by scope (borrowed from the scanned tree: no handle cloned per leaf).
    leaves: FewSet<(u32, &'a Expr)>,
    /// Units (operator operands of another scope) by scope, kind and leaf fingerprint.
    units: FewSet<(u32, Kind, u128)>,
    scopes: u32,
    builtins: SmallVec<[(Builtin, u8); 4]>,
    /// Constants seen per region, and whether the region is affine (its constants are
    /// settled by the normal form, [`super::affine`]).
    regions: SmallVec<[(u8, bool); 8]>,
    hit: bool,
}

/// A set listing its first members inline, hashed only once there are more.
struct FewSet<T> {
    few: SmallVec<[T; 16]>,
    many: HashSet<T>,
}

impl<T> Default for FewSet<T> {
    fn default() -> FewSet<T> {
        FewSet { few: SmallVec::new(), many: HashSet::new() }
    }
}

impl<T: Copy + Eq + Hash> FewSet<T> {
    /// Adds `x`; false if it was there already (as `HashSet::insert`).
    fn insert(&mut self, x: T) -> bool {
        if self.many.is_empty() {
            if self.few.contains(&x) {
                return false;
            }
            if self.few.len() < self.few.inline_size() {
                self.few.push(x);
                return true;
            }
            self.many.extend(self.few.drain(..));
        }
        self.many.insert(x)
    }
}

/// True if the e-graph might find something strictly cheaper than `e` at its top level (the
/// operator part; what is inside opaque leaves is simplified on its own).
pub fn egg_may_help(e: &Expr) -> bool {
    if !is_operator(e) {
        return false;
    }
    let mut s = Scan::default();
    let _ = scan(e, None, None, 0, &mut s);
    if s.hit {
        return true;
    }
    s.builtins.iter().any(|&(k, d)| {
        let partner = match k {
            Builtin::LocalId => Builtin::LocalSize,
            Builtin::GroupId => Builtin::NumGroups,
            _ => return false,
        };
        s.builtins.contains(&(partner, d))
    })
}

fn special(k: &Imm) -> bool {
    match *k {
        Imm::Bool(_) => true,
        Imm::Int(t, _) => {
            let v = k.as_i128();
            v == Some(0) || v == Some(1) || v == Some(-1) || v == t.int_max()
        }
        Imm::Float(..) => false,
    }
}

/// The scope that operator `e` belongs to, given its parent's scope and kind: the parent's
/// if both are of one class, else a new one (`e` is then a unit of the parent's scope).
/// Returns the scope and whether it is new.
fn scope_of(e: &Expr, parent: Option<(u32, Kind)>, s: &mut Scan<'_>) -> (u32, bool) {
    let Some(k) = kind(e) else { return (parent.map_or(0, |p| p.0), false) };
    match parent {
        Some((ps, pk)) if class(pk).is_some() && class(pk) == class(k) => (ps, false),
        _ => {
            s.scopes += 1;
            (s.scopes, true)
        }
    }
}

/// Two bits of a 128-bit set fingerprint for a leaf.
fn leaf_bits(e: &Expr) -> u128 {
    let mut h = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(e, &mut h);
    let h = std::hash::Hasher::finish(&h);
    (1u128 << (h & 127)) | (1u128 << ((h >> 7) & 127))
}

/// Scans `e`, whose parent (if any) is of kind `pkind` in scope `pscope` and in the constant
/// region `parent`. Returns the fingerprint of the leaves under `e` (see [`leaf_bits`]).
fn scan<'a>(
    e: &'a Expr,
    parent: Option<(Family, usize)>,
    pkind: Option<Kind>,
    pscope: u32,
    s: &mut Scan<'a>,
) -> u128 {
    if s.hit || e.as_imm().is_some() {
        return 0;
    }
    if !is_operator(e) {
        if let ExprNode::Builtin { kind, dim } = e.node() {
            s.builtins.push((*kind, *dim));
        }
        // A leaf repeated in its scope: cancellation, factoring or an index identity may
        // apply.
        if !s.leaves.insert((pscope, e)) {
            s.hit = true;
        }
        return leaf_bits(e);
    }
    let (scope, unit) = scope_of(e, pkind.map(|k| (pscope, k)), s);
    let my_kind = kind(e);
    let leaves = scan_operator(e, parent, my_kind, scope, s);
    if let (true, Some(_), Some(k)) = (unit, pkind, my_kind) {
        // Two units of one kind over the same leaves in a scope may become equal: as a
        // repeated operand.
        if !s.units.insert((pscope, k, leaves)) {
            s.hit = true;
        }
    }
    leaves
}

/// [`scan`] of the operands of operator `e` (of kind `my_kind`, in `scope`).
fn scan_operator<'a>(
    e: &'a Expr,
    parent: Option<(Family, usize)>,
    my_kind: Option<Kind>,
    scope: u32,
    s: &mut Scan<'a>,
) -> u128 {
    let in_affine = |p: Option<(Family, usize)>, s: &Scan<'_>| {
        p.is_some_and(|(f, r)| f == Family::Ring && s.regions[r].1)
    };
    let (op, a, b) = match e.node() {
        ExprNode::Binary { op, a, b } => (*op, a, b),
        // The normal form writes a lone subtracted term as `-(x * c)`, which egg folds into
        // the cheaper `x * -c`.
        ExprNode::Unary { op: UnOp::Neg, a }
            if matches!(a.node(), ExprNode::Binary { op: BinOp::Mul, a: x, b: y }
                if x.as_imm().is_some() || y.as_imm().is_some()) =>
        {
            s.hit = true;
            return 0;
        }
        // A negation inside an affine region is one of its terms' signs.
        ExprNode::Unary { op: UnOp::Neg, a } if in_affine(parent, s) => {
            return scan(a, parent, my_kind, scope, s);
        }
        ExprNode::Unary { op: UnOp::Neg, a } if affine::is_affine_region(e) => {
            s.regions.push((0, true));
            let region = Some((Family::Ring, s.regions.len() - 1));
            return scan(a, region, my_kind, scope, s);
        }
        _ => {
            // Unary operators, select, min and max.
            s.hit = true;
            return 0;
        }
    };
    let ty = a.ty().scalar().unwrap_or(Scalar::Bool);
    let region = if ty.is_int() {
        let fam = family(op);
        match parent {
            Some((f, r)) if f == fam && fam != Family::Other => Some((fam, r)),
            _ => {
                let affine = fam == Family::Ring && affine::is_affine_region(e);
                s.regions.push((0, affine));
                Some((fam, s.regions.len() - 1))
            }
        }
    } else {
        None
    };
    let affine = in_affine(region, s);
    let mut leaves = 0;
    for c in [a, b] {
        match c.as_imm() {
            // The normal form has folded, merged and dropped what these constants allow.
            Some(_) if affine => {}
            Some(k) if special(k) => s.hit = true,
            Some(_) => {
                if let Some((_, r)) = region {
                    s.regions[r].0 += 1;
                    if s.regions[r].0 >= 2 {
                        s.hit = true;
                    }
                }
            }
            None => leaves |= scan(c, region, my_kind, scope, s),
        }
    }
    leaves
}
