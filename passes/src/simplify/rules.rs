//! The simplifier's rewrite rules: each is an exact equivalence under kiln's semantics
//! (wrapping integers, truncating division, IEEE floats), *including errors*: a rule never
//! drops an operand that may fail (division/remainder by a possibly-zero value, a load that
//! may be out of bounds) and never introduces a division by a value not known to be non-zero.
//!
//! Float rules are only those exact bit-for-bit (up to NaN payloads): commutativity,
//! `x * 1.0`, `x / 1.0`, `x - (+0.0)`, `x + (-0.0)`, `-(-x)`. No reassociation, no `x + 0.0`
//! (wrong for -0.0), no `x * 0.0` (wrong for NaN, infinities and negative numbers), even
//! under `#fast_math`.
//!
//! Every rule is checked by `tests/rules.rs` on boundary values of all integer widths and
//! exhaustively at 8 bits.

use egg::{Applier, Id, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};
use kiln_ir::{Builtin, Imm, Scalar};

use super::lang::{KAnalysis, KGraph, Konst, Node};

/// What a rule's guard may know about the class a pattern variable matched.
#[derive(Clone, Copy, Debug)]
pub struct Info {
    /// The class's type.
    pub ty: Scalar,
    /// Its constant value, if known.
    pub konst: Option<Imm>,
    /// True if evaluating it may fail.
    pub may_fail: bool,
    /// The work-item built-in it is, if it is one.
    pub builtin: Option<(Builtin, u8)>,
}

/// Looks up a pattern variable (`"?a"`) of the current match.
pub type Look<'a> = &'a dyn Fn(&str) -> Info;

/// One rule: `lhs => rhs` when `guard` holds; `compute`, if any, supplies the constant bound
/// to `?k` in `rhs`.
pub struct RuleSpec {
    /// The rule's name.
    pub name: &'static str,
    /// The pattern to match.
    pub lhs: &'static str,
    /// The replacement.
    pub rhs: &'static str,
    /// When the rule applies.
    pub guard: fn(Look) -> bool,
    /// The constant `?k` of the replacement, if it has one.
    pub compute: Option<fn(Look) -> Option<Imm>>,
}

fn int(l: Look, v: &str) -> bool {
    l(v).ty.is_int()
}
fn num(l: Look, v: &str) -> bool {
    l(v).ty.is_arith()
}
fn safe(l: Look, v: &str) -> bool {
    !l(v).may_fail
}
fn konst(l: Look, v: &str) -> Option<i128> {
    l(v).konst.and_then(|k| k.as_i128())
}
fn is_int_const(l: Look, v: &str, want: i128) -> bool {
    int(l, v) && konst(l, v) == Some(want)
}
fn nonzero_const(l: Look, v: &str) -> bool {
    int(l, v) && konst(l, v).is_some_and(|k| k != 0)
}
fn is_float_bits(l: Look, v: &str, want: f64) -> bool {
    l(v).konst.and_then(|k| k.as_f64()).is_some_and(|x| x.to_bits() == want.to_bits())
}
fn is_one(l: Look, v: &str) -> bool {
    is_int_const(l, v, 1) || is_float_bits(l, v, 1.0)
}
fn all_ones(l: Look, v: &str) -> bool {
    let Some(k) = konst(l, v) else { return false };
    let ty = l(v).ty;
    (ty.is_signed() && k == -1) || (ty.is_unsigned() && Some(k) == ty.int_max())
}
fn int_k(l: Look, v: &str, k: i128) -> Option<Imm> {
    let ty = l(v).ty;
    ty.is_int().then(|| Imm::int(ty, k))
}
/// True if `?x < ?y` always holds because `?x` is `local_id(d)` and `?y` is `local_size(d)`
/// (or `group_id(d)` and `num_groups(d)`), for the same `d`.
pub fn id_below_size(l: Look) -> bool {
    match (l("?x").builtin, l("?y").builtin) {
        (Some((a, d)), Some((b, e))) => {
            d == e
                && matches!(
                    (a, b),
                    (Builtin::LocalId, Builtin::LocalSize) | (Builtin::GroupId, Builtin::NumGroups)
                )
        }
        _ => false,
    }
}
fn bool_k(b: bool) -> Option<Imm> {
    Some(Imm::Bool(b))
}

macro_rules! rule {
    ($name:literal, $lhs:literal => $rhs:literal, $guard:expr) => {
        RuleSpec { name: $name, lhs: $lhs, rhs: $rhs, guard: $guard, compute: None }
    };
    ($name:literal, $lhs:literal => $rhs:literal, $guard:expr, $k:expr) => {
        RuleSpec { name: $name, lhs: $lhs, rhs: $rhs, guard: $guard, compute: Some($k) }
    };
}

/// Every rule of the simplifier.
pub fn specs() -> Vec<RuleSpec> {
    vec![
        // Commutativity: exact for every type (IEEE + and * commute; min/max as defined).
        rule!("add-comm", "(+ ?a ?b)" => "(+ ?b ?a)", |_| true),
        rule!("mul-comm", "(* ?a ?b)" => "(* ?b ?a)", |_| true),
        rule!("and-comm", "(& ?a ?b)" => "(& ?b ?a)", |_| true),
        rule!("or-comm", "(| ?a ?b)" => "(| ?b ?a)", |_| true),
        rule!("xor-comm", "(^ ?a ?b)" => "(^ ?b ?a)", |_| true),
        rule!("eq-comm", "(== ?a ?b)" => "(== ?b ?a)", |_| true),
        rule!("ne-comm", "(!= ?a ?b)" => "(!= ?b ?a)", |_| true),
        rule!("land-comm", "(&& ?a ?b)" => "(&& ?b ?a)", |_| true),
        rule!("lor-comm", "(|| ?a ?b)" => "(|| ?b ?a)", |_| true),
        rule!("min-comm", "(min ?a ?b)" => "(min ?b ?a)", |_| true),
        rule!("max-comm", "(max ?a ?b)" => "(max ?b ?a)", |_| true),
        rule!("lt-gt", "(< ?a ?b)" => "(> ?b ?a)", |_| true),
        rule!("gt-lt", "(> ?a ?b)" => "(< ?b ?a)", |_| true),
        rule!("le-ge", "(<= ?a ?b)" => "(>= ?b ?a)", |_| true),
        rule!("ge-le", "(>= ?a ?b)" => "(<= ?b ?a)", |_| true),
        // Integer ring laws: exact modulo 2^n.
        rule!("add-assoc", "(+ (+ ?a ?b) ?c)" => "(+ ?a (+ ?b ?c))", |l| int(l, "?a")),
        rule!("add-assoc-r", "(+ ?a (+ ?b ?c))" => "(+ (+ ?a ?b) ?c)", |l| int(l, "?a")),
        rule!("mul-assoc", "(* (* ?a ?b) ?c)" => "(* ?a (* ?b ?c))", |l| int(l, "?a")),
        rule!("mul-assoc-r", "(* ?a (* ?b ?c))" => "(* (* ?a ?b) ?c)", |l| int(l, "?a")),
        rule!("sub-to-add", "(- ?a ?b)" => "(+ ?a (neg ?b))", |l| int(l, "?a")),
        rule!("add-neg-to-sub", "(+ ?a (neg ?b))" => "(- ?a ?b)", |l| int(l, "?a")),
        rule!("neg-add", "(neg (+ ?a ?b))" => "(+ (neg ?a) (neg ?b))", |l| int(l, "?a")),
        rule!("neg-mul", "(neg (* ?a ?b))" => "(* ?a (neg ?b))", |l| int(l, "?a")),
        rule!("mul-neg", "(* ?a (neg ?b))" => "(neg (* ?a ?b))", |l| int(l, "?a")),
        rule!("distribute", "(* ?a (+ ?b ?c))" => "(+ (* ?a ?b) (* ?a ?c))", |l| int(l, "?a")),
        rule!("factor", "(+ (* ?a ?b) (* ?a ?c))" => "(* ?a (+ ?b ?c))", |l| int(l, "?a")),
        rule!("factor-one", "(+ (* ?a ?c) ?a)" => "(* ?a ?k)",
            |l| int(l, "?a") && konst(l, "?c").is_some(),
            |l| int_k(l, "?c", konst(l, "?c")? + 1)),
        rule!("factor-neg-one", "(+ (* ?a ?c) (neg ?a))" => "(* ?a ?k)",
            |l| int(l, "?a") && konst(l, "?c").is_some(),
            |l| int_k(l, "?c", konst(l, "?c")? - 1)),
        rule!("double", "(+ ?a ?a)" => "(* ?a ?k)", |l| int(l, "?a"), |l| int_k(l, "?a", 2)),
        rule!("neg-neg", "(neg (neg ?a))" => "?a", |l| num(l, "?a")),
        // -1 of a signed type, the maximum of an unsigned one: both are -1 modulo 2^n.
        rule!("mul-minus-one", "(* ?a ?m)" => "(neg ?a)", |l| all_ones(l, "?m")),
        // Identities.
        rule!("add-zero", "(+ ?a ?z)" => "?a",
            |l| is_int_const(l, "?z", 0) || is_float_bits(l, "?z", -0.0)),
        rule!("sub-zero", "(- ?a ?z)" => "?a",
            |l| is_int_const(l, "?z", 0) || is_float_bits(l, "?z", 0.0)),
        rule!("zero-sub", "(- ?z ?a)" => "(neg ?a)", |l| is_int_const(l, "?z", 0)),
        rule!("mul-one", "(* ?a ?o)" => "?a", |l| is_one(l, "?o")),
        rule!("div-one", "(/ ?a ?o)" => "?a", |l| is_one(l, "?o")),
        rule!("mul-zero", "(* ?a ?z)" => "?z", |l| is_int_const(l, "?z", 0) && safe(l, "?a")),
        rule!("sub-self", "(- ?a ?a)" => "?k", |l| int(l, "?a") && safe(l, "?a"),
            |l| int_k(l, "?a", 0)),
        rule!("add-neg-self", "(+ ?a (neg ?a))" => "?k", |l| int(l, "?a") && safe(l, "?a"),
            |l| int_k(l, "?a", 0)),
        rule!("rem-one", "(% ?a ?o)" => "?k", |l| is_int_const(l, "?o", 1) && safe(l, "?a"),
            |l| int_k(l, "?a", 0)),
        rule!("div-self-const", "(/ ?c ?c)" => "?k", |l| nonzero_const(l, "?c"),
            |l| int_k(l, "?c", 1)),
        // Index identities of nd-range remapping (c a non-zero constant).
        rule!("div-mul-rem", "(+ (* (/ ?x ?c) ?c) (% ?x ?c))" => "?x",
            |l| nonzero_const(l, "?c")),
        rule!("rem-rem", "(% (% ?x ?c) ?c)" => "(% ?x ?c)", |l| nonzero_const(l, "?c")),
        rule!("sub-rem", "(- ?x (% ?x ?c))" => "(* (/ ?x ?c) ?c)", |l| nonzero_const(l, "?c")),
        rule!("sub-div", "(- ?x (* (/ ?x ?c) ?c))" => "(% ?x ?c)", |l| nonzero_const(l, "?c")),
        // Range facts of work-item ids (sizes are never zero in a valid launch).
        rule!("range-lt", "(< ?x ?y)" => "?k", id_below_size, |_| bool_k(true)),
        rule!("range-ge", "(>= ?x ?y)" => "?k", id_below_size, |_| bool_k(false)),
        rule!("range-rem", "(% ?x ?y)" => "?x", id_below_size),
        rule!("range-div", "(/ ?x ?y)" => "?k", id_below_size, |l| int_k(l, "?x", 0)),
        rule!("range-min", "(min ?x ?y)" => "?x", id_below_size),
        rule!("range-max", "(max ?x ?y)" => "?y", id_below_size),
        // Bitwise.
        rule!("and-self", "(& ?a ?a)" => "?a", |_| true),
        rule!("or-self", "(| ?a ?a)" => "?a", |_| true),
        rule!("xor-self", "(^ ?a ?a)" => "?k", |l| int(l, "?a") && safe(l, "?a"),
            |l| int_k(l, "?a", 0)),
        rule!("and-zero", "(& ?a ?z)" => "?z", |l| is_int_const(l, "?z", 0) && safe(l, "?a")),
        rule!("and-ones", "(& ?a ?m)" => "?a", |l| all_ones(l, "?m")),
        rule!("or-zero", "(| ?a ?z)" => "?a", |l| is_int_const(l, "?z", 0)),
        rule!("xor-zero", "(^ ?a ?z)" => "?a", |l| is_int_const(l, "?z", 0)),
        rule!("and-assoc", "(& (& ?a ?b) ?c)" => "(& ?a (& ?b ?c))", |l| int(l, "?a")),
        rule!("or-assoc", "(| (| ?a ?b) ?c)" => "(| ?a (| ?b ?c))", |l| int(l, "?a")),
        rule!("xor-assoc", "(^ (^ ?a ?b) ?c)" => "(^ ?a (^ ?b ?c))", |l| int(l, "?a")),
        rule!("not-not-int", "(~ (~ ?a))" => "?a", |_| true),
        rule!("shl-zero", "(<< ?a ?z)" => "?a", |l| is_int_const(l, "?z", 0)),
        rule!("shr-zero", "(>> ?a ?z)" => "?a", |l| is_int_const(l, "?z", 0)),
        // min / max.
        rule!("min-self", "(min ?a ?a)" => "?a", |_| true),
        rule!("max-self", "(max ?a ?a)" => "?a", |_| true),
        // Booleans and comparisons (integer comparisons only where NaN would differ).
        rule!("not-not", "(! (! ?a))" => "?a", |_| true),
        rule!("not-eq", "(! (== ?a ?b))" => "(!= ?a ?b)", |_| true),
        rule!("not-ne", "(! (!= ?a ?b))" => "(== ?a ?b)", |_| true),
        rule!("not-lt", "(! (< ?a ?b))" => "(>= ?a ?b)", |l| int(l, "?a")),
        rule!("not-le", "(! (<= ?a ?b))" => "(> ?a ?b)", |l| int(l, "?a")),
        rule!("eq-self", "(== ?a ?a)" => "?k", |l| !l("?a").ty.is_float() && safe(l, "?a"),
            |_| bool_k(true)),
        rule!("ne-self", "(!= ?a ?a)" => "?k", |l| !l("?a").ty.is_float() && safe(l, "?a"),
            |_| bool_k(false)),
        rule!("lt-self", "(< ?a ?a)" => "?k", |l| int(l, "?a") && safe(l, "?a"),
            |_| bool_k(false)),
        rule!("le-self", "(<= ?a ?a)" => "?k", |l| int(l, "?a") && safe(l, "?a"),
            |_| bool_k(true)),
        rule!("land-true", "(&& ?a ?t)" => "?a", |l| l("?t").konst == Some(Imm::Bool(true))),
        rule!("land-false", "(&& ?a ?f)" => "?f",
            |l| l("?f").konst == Some(Imm::Bool(false)) && safe(l, "?a")),
        rule!("lor-false", "(|| ?a ?f)" => "?a", |l| l("?f").konst == Some(Imm::Bool(false))),
        rule!("lor-true", "(|| ?a ?t)" => "?t",
            |l| l("?t").konst == Some(Imm::Bool(true)) && safe(l, "?a")),
        rule!("land-self", "(&& ?a ?a)" => "?a", |_| true),
        rule!("lor-self", "(|| ?a ?a)" => "?a", |_| true),
        // select.
        rule!("select-same", "(select ?c ?a ?a)" => "?a", |l| safe(l, "?c")),
        rule!("select-true", "(select ?c ?a ?b)" => "?a",
            |l| l("?c").konst == Some(Imm::Bool(true)) && safe(l, "?b")),
        rule!("select-false", "(select ?c ?a ?b)" => "?b",
            |l| l("?c").konst == Some(Imm::Bool(false)) && safe(l, "?a")),
        rule!("select-not", "(select (! ?c) ?a ?b)" => "(select ?c ?b ?a)", |_| true),
    ]
}

/// A rule's replacement with its guard and computed constant.
struct Guarded {
    /// The pattern variables of the rule's left side with their names, parsed once: a
    /// guard asks by name, and parsing a name interns it under a global lock.
    vars: Vec<(String, Var)>,
    rhs: Pattern<Node>,
    guard: fn(Look) -> bool,
    compute: Option<fn(Look) -> Option<Imm>>,
    k: Var,
}

impl Applier<Node, KAnalysis> for Guarded {
    fn apply_one(
        &self,
        egraph: &mut KGraph,
        eclass: Id,
        subst: &Subst,
        searcher_ast: Option<&PatternAst<Node>>,
        rule_name: Symbol,
    ) -> Vec<Id> {
        let computed = {
            let look = |name: &str| {
                let var = self.vars.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
                let data = var.and_then(|v| subst.get(v)).map(|&id| &egraph[id].data);
                match data {
                    Some(d) => {
                        Info { ty: d.ty, konst: d.konst, may_fail: d.may_fail, builtin: d.builtin }
                    }
                    // An unbound name: a guard asking for it is a bug; answer "unknown, may fail".
                    None => Info { ty: Scalar::Bool, konst: None, may_fail: true, builtin: None },
                }
            };
            if !(self.guard)(&look) {
                return vec![];
            }
            match self.compute {
                Some(f) => match f(&look) {
                    Some(k) => Some(k),
                    None => return vec![],
                },
                None => None,
            }
        };
        let mut subst = subst.clone();
        if let Some(k) = computed {
            let id = egraph.add(Node::Const(Konst(k)));
            subst.insert(self.k, id);
        }
        self.rhs.apply_one(egraph, eclass, &subst, searcher_ast, rule_name)
    }
}

/// The rules as egg rewrites. Patterns are static text: a malformed one is a bug in this file,
/// caught by the unit test below, and is skipped rather than panicking at run time.
pub fn rewrites() -> Vec<Rewrite<Node, KAnalysis>> {
    let k: Var = match "?k".parse() {
        Ok(k) => k,
        Err(_) => return vec![],
    };
    specs()
        .into_iter()
        .filter_map(|s| {
            let lhs: Pattern<Node> = s.lhs.parse().ok()?;
            let rhs: Pattern<Node> = s.rhs.parse().ok()?;
            let vars = lhs.vars().into_iter().map(|v| (v.to_string(), v)).collect();
            let applier = Guarded { vars, rhs, guard: s.guard, compute: s.compute, k };
            Rewrite::new(s.name, lhs, applier).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_rule_parses() {
        assert_eq!(super::rewrites().len(), super::specs().len());
    }
}
