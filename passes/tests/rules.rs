//! Rule-level soundness: every simplifier rule's two sides are evaluated with the
//! interpreter's scalar semantics on the same values, errors included (an operand that may
//! fail is tried as an error), and must agree. Each rule is checked at every integer width on
//! all combinations of boundary values (0, 1, -1, 2, MIN, MAX, MIN+1, MAX-1) plus random
//! values, exhaustively over every pair of values at 8 bits (i8 and u8; a third variable
//! ranges over the boundary values), on float special values (f32, f64) and on bools.

use egg::{ENodeOrVar, Language, PatternAst, RecExpr, Var};
use kiln_ir::{Builtin, Imm, Scalar};
use kiln_passes::simplify::lang::{fold, Node};
use kiln_passes::simplify::rules::{specs, Info, RuleSpec};

type Val = Result<Imm, ()>;

struct Rule {
    spec: RuleSpec,
    lhs: PatternAst<Node>,
    rhs: PatternAst<Node>,
    vars: Vec<Var>,
    bool_vars: Vec<Var>,
}

fn parse(p: &str) -> PatternAst<Node> {
    p.parse::<RecExpr<ENodeOrVar<Node>>>().expect("rule pattern parses")
}

fn rules() -> Vec<Rule> {
    specs()
        .into_iter()
        .map(|spec| {
            let lhs = parse(spec.lhs);
            let rhs = parse(spec.rhs);
            let mut vars = Vec::new();
            let mut bool_vars = Vec::new();
            for n in lhs.as_ref() {
                if let ENodeOrVar::Var(v) = n {
                    if !vars.contains(v) {
                        vars.push(*v);
                    }
                }
                if let ENodeOrVar::ENode(node) = n {
                    let boolean: Vec<usize> = match node {
                        Node::LAnd(_) | Node::LOr(_) | Node::Not(_) => vec![0, 1],
                        Node::Select(_) => vec![0],
                        _ => vec![],
                    };
                    for (i, c) in node.children().iter().enumerate() {
                        if boolean.contains(&i) {
                            if let ENodeOrVar::Var(v) = &lhs[*c] {
                                bool_vars.push(*v);
                            }
                        }
                    }
                }
            }
            Rule { spec, lhs, rhs, vars, bool_vars }
        })
        .collect()
}

fn eval(p: &PatternAst<Node>, env: &[(Var, Val)]) -> Val {
    let mut vals: Vec<Val> = Vec::with_capacity(p.as_ref().len());
    for n in p.as_ref() {
        let v = match n {
            ENodeOrVar::Var(v) => env.iter().find(|(w, _)| w == v).map_or(Err(()), |x| x.1),
            ENodeOrVar::ENode(node) => {
                if node.children().iter().any(|c| vals[usize::from(*c)].is_err()) {
                    Err(())
                } else {
                    fold(node, |i| vals[usize::from(i)].ok()).ok_or(())
                }
            }
        };
        vals.push(v);
    }
    vals.pop().unwrap_or(Err(()))
}

fn same(a: Val, b: Val) -> bool {
    match (a, b) {
        (Ok(x), Ok(y)) => {
            x == y || (x.as_f64().is_some_and(f64::is_nan) && y.as_f64().is_some_and(f64::is_nan))
        }
        (Err(()), Err(())) => true,
        _ => false,
    }
}

/// Names of pattern variables the tests treat as matching a constant class.
fn is_const_var(v: &Var) -> bool {
    let s = v.to_string();
    ["?c", "?z", "?o", "?m", "?t", "?f"].contains(&s.as_str())
}

/// Checks one assignment (each value `Err` = an operand that fails). Returns whether the
/// rule applied.
fn check(rule: &Rule, ty: Scalar, env: &[(Var, Val)]) -> bool {
    let look = |name: &str| {
        let v: Var = name.parse().expect("var name");
        let val = env.iter().find(|(w, _)| *w == v).map(|x| x.1);
        let vty = if rule.bool_vars.contains(&v) { Scalar::Bool } else { ty };
        // Range rules: `?x` plays `local_id(0)` and `?y` `local_size(0)`.
        let builtin = match (rule.spec.name.starts_with("range-"), v.to_string().as_str()) {
            (true, "?x") => Some((Builtin::LocalId, 0)),
            (true, "?y") => Some((Builtin::LocalSize, 0)),
            _ => None,
        };
        match val {
            Some(Ok(k)) => Info {
                ty: vty,
                konst: if is_const_var(&v) { Some(k) } else { None },
                may_fail: false,
                builtin,
            },
            _ => Info { ty: vty, konst: None, may_fail: true, builtin },
        }
    };
    if rule.spec.name.starts_with("range-") {
        // Only assignments where the fact holds: u32 values with x < y.
        let get = |n: &str| {
            let v: Var = n.parse().expect("var");
            env.iter().find(|(w, _)| *w == v).and_then(|x| x.1.ok()).and_then(|k| k.as_i128())
        };
        match (get("?x"), get("?y")) {
            (Some(x), Some(y)) if ty == Scalar::U32 && x < y => {}
            _ => return false,
        }
    }
    if !(rule.spec.guard)(&look) {
        return false;
    }
    let mut env = env.to_vec();
    if let Some(f) = rule.spec.compute {
        match f(&look) {
            Some(k) => env.push(("?k".parse().expect("var"), Ok(k))),
            None => return false,
        }
    }
    let l = eval(&rule.lhs, &env);
    let r = eval(&rule.rhs, &env);
    assert!(
        same(l, r),
        "rule {} ({} => {}) is unsound at {ty}: {:?} gives {l:?} => {r:?}",
        rule.spec.name,
        rule.spec.lhs,
        rule.spec.rhs,
        env
    );
    true
}

fn boundary(ty: Scalar) -> Vec<Imm> {
    if ty == Scalar::Bool {
        return vec![Imm::Bool(false), Imm::Bool(true)];
    }
    if ty.is_float() {
        let vals = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            3.0,
            1e-310,
            f64::MAX,
        ];
        return vals.iter().map(|&v| Imm::float(ty, v)).collect();
    }
    let (lo, hi) = (ty.int_min().unwrap_or(0), ty.int_max().unwrap_or(0));
    [0, 1, -1, 2, lo, hi, lo + 1, hi - 1, 3, 7].iter().map(|&v| Imm::int(ty, v)).collect()
}

/// A small deterministic generator (no timing, no global state).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 11 ^ self.0 << 7
    }
}

fn value_for(rule: &Rule, v: &Var, x: Imm) -> Imm {
    if rule.bool_vars.contains(v) {
        match x {
            Imm::Bool(b) => Imm::Bool(b),
            _ => Imm::Bool(
                x.as_i128().is_some_and(|i| i & 1 == 1) || x.as_f64().is_some_and(|f| f != 0.0),
            ),
        }
    } else {
        x
    }
}

/// Every combination of `pool` values over the rule's variables (the first two from
/// `pool`, any further ones from `rest`), each also tried as a failing operand.
fn combos(rule: &Rule, ty: Scalar, pool: &[Imm], rest: &[Imm]) -> usize {
    let mut applied = 0;
    // Skip types the left side is not well-typed at (e.g. `&` on floats): with every operand
    // 1 (so every divisor is non-zero) it must evaluate.
    let one = if ty.is_float() {
        Imm::float(ty, 1.0)
    } else if ty.is_int() {
        Imm::int(ty, 1)
    } else {
        Imm::Bool(true)
    };
    let probe: Vec<(Var, Val)> =
        rule.vars.iter().map(|v| (*v, Ok(value_for(rule, v, one)))).collect();
    if eval(&rule.lhs, &probe).is_err() {
        return 0;
    }
    let n = rule.vars.len();
    let sizes: Vec<usize> =
        (0..n).map(|i| if i < 2 { pool.len() + 1 } else { rest.len() + 1 }).collect();
    let total: usize = sizes.iter().product();
    for mut idx in 0..total {
        let mut env = Vec::with_capacity(n);
        for (i, v) in rule.vars.iter().enumerate() {
            let j = idx % sizes[i];
            idx /= sizes[i];
            let src = if i < 2 { pool } else { rest };
            let val = if j == src.len() { Err(()) } else { Ok(value_for(rule, v, src[j])) };
            if val.is_err() && is_const_var(v) {
                env.clear();
                break;
            }
            env.push((*v, val));
        }
        if env.len() == n && check(rule, ty, &env) {
            applied += 1;
        }
    }
    applied
}

const INTS: [Scalar; 8] = Scalar::INTS;

#[test]
fn rules_hold_on_boundary_and_random_values_of_every_type() {
    let mut rng = Lcg(0x6b696c6e);
    for rule in rules() {
        let mut applied = 0;
        for ty in INTS.iter().copied().chain([Scalar::F32, Scalar::F64, Scalar::Bool]) {
            let b = boundary(ty);
            applied += combos(&rule, ty, &b, &b);
            if ty.is_int() {
                let random: Vec<Imm> =
                    (0..40).map(|_| Imm::int(ty, rng.next() as i64 as i128)).collect();
                let mixed: Vec<Imm> = random.iter().chain(&b).copied().collect();
                applied += combos(&rule, ty, &mixed, &b);
            }
        }
        assert!(applied > 0, "rule {} never applied in the test", rule.spec.name);
    }
}

#[test]
fn rules_hold_exhaustively_at_8_bits() {
    for rule in rules() {
        for ty in [Scalar::I8, Scalar::U8] {
            let all: Vec<Imm> = (0..256).map(|v| Imm::int(ty, v)).collect();
            combos(&rule, ty, &all, &boundary(ty));
        }
    }
}
