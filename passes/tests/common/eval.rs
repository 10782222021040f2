//! Evaluating an expression over variable values, the reference the simplifier tests compare
//! against (shared by `simplify.rs` and `simplify_gate.rs`).

use kiln_ir::eval;
use kiln_ir::{Expr, ExprNode, Imm, Scalar, Var};

/// Evaluates an expression over variable values; built-ins are fixed small numbers, loads
/// are unsupported.
pub fn eval(e: &Expr, env: &[(Var, Imm)]) -> Result<Imm, String> {
    let k = |x: &Expr| eval(x, env);
    match e.node() {
        ExprNode::Var(var) => {
            env.iter().find(|(w, _)| w == var).map(|x| x.1).ok_or("unbound".to_string())
        }
        ExprNode::Imm(i) => Ok(*i),
        ExprNode::Unary { op, a } => eval::unary(*op, k(a)?),
        ExprNode::Binary { op, a, b } => {
            let (a, b) = (k(a), k(b));
            eval::binary(*op, a?, b?)
        }
        ExprNode::Cast { to, a } => Ok(eval::cast(*to, k(a)?)),
        ExprNode::Select { cond, a, b } => {
            let (c, a, b) = (k(cond)?, k(a)?, k(b)?);
            Ok(if c == Imm::Bool(true) { a } else { b })
        }
        ExprNode::Intrinsic { op, args } => {
            let vals: Result<Vec<Imm>, String> = args.iter().map(k).collect();
            eval::intrinsic(*op, &vals?)
        }
        ExprNode::Builtin { dim, .. } => Ok(Imm::int(Scalar::U32, 5 + *dim as i128)),
        _ => Err("unsupported".into()),
    }
}

/// Equal values (NaNs equal each other), or both an error.
pub fn same(a: &Result<Imm, String>, b: &Result<Imm, String>) -> bool {
    match (a, b) {
        (Ok(x), Ok(y)) => {
            x == y || (x.as_f64().is_some_and(f64::is_nan) && y.as_f64().is_some_and(f64::is_nan))
        }
        (Err(_), Err(_)) => true,
        _ => false,
    }
}
