//! Long straight-line code through the passes (issue 12): `let-opt` used to inline a chain of
//! single-use lets into one expression as deep as the chain (and took quadratic time doing
//! it, restarting from the top of the block after every change); its output then could not
//! be printed in a form the parser reads back, and recursive walks overflowed the stack.

use kiln_ir::depth::{max_expr_depth, MAX_EXPR_DEPTH};
use kiln_ir::interp;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{parse_module, verify_kernel, AddrSpace, BinOp, Expr, Kernel, Scalar, Stmt};
use kiln_ir::{StmtNode, Type, Var};
use kiln_passes::let_opt::let_opt;

/// `let v1 = v0 op c; ...` over `x[g]`, `n` lets, then `x[g] = vn`.
fn chain(n: usize) -> Kernel {
    let x = Var::new("x", Type::ptr(AddrSpace::Global, Scalar::I32));
    let g = Var::new("g", Type::U32);
    let mut body = vec![Stmt::let_(&g, Expr::global_id(0))];
    let mut prev = Var::new("v0", Type::I32);
    body.push(Stmt::let_(&prev, x.load(&g)));
    for i in 1..=n {
        let v = Var::new(format!("v{i}"), Type::I32);
        let op = [BinOp::Add, BinOp::Mul, BinOp::Xor, BinOp::Sub][i % 4];
        body.push(Stmt::let_(&v, Expr::binary(op, prev.expr(), Expr::i32((i % 7) as i32 + 3))));
        prev = v;
    }
    body.push(Stmt::store(&x, &g, prev.expr()));
    Kernel::new("chain", vec![x], Stmt::block(body))
}

fn run(k: &Kernel, input: &[i32]) -> Vec<i32> {
    let mut bufs = vec![Buffer::from_slice(input)];
    interp::run(k, &NdRange::new(&[input.len() as u32]), &[Arg::Buffer(0)], &mut bufs).unwrap();
    bufs[0].to_vec().unwrap()
}

/// Issue 12, items 1 and 3: 10,000 chained lets come out of `let-opt` as lets of bounded
/// depth (not one 10,000-deep expression), meaning the same, printable and parsed back.
#[test]
fn let_opt_on_10000_chained_lets_keeps_depth_bounded() {
    let k = chain(10_000);
    let out = let_opt(&k);
    verify_kernel(&out).unwrap();
    assert!(max_expr_depth(out.body()) <= MAX_EXPR_DEPTH, "{}", max_expr_depth(out.body()));
    let StmtNode::Block(stmts) = out.body().node() else { panic!() };
    assert!(stmts.len() < 10_000 / 16, "lets were inlined ({} statements left)", stmts.len());
    let input = [5, -9, 1 << 20, i32::MIN];
    assert_eq!(run(&out, &input), run(&k, &input));
    let back = parse_module(&out.to_string()).unwrap();
    assert!(back.kernels[0].is_equal(&out));
}

/// The two sweeps reach the fixed point the old restart-from-the-top loop did: a dead let
/// whose only user was itself dead goes too (even one reading a mutable variable, which is
/// not inlined); a single use outside loops is inlined, one inside a loop is not.
#[test]
fn let_opt_cascades_removals_and_keeps_loop_uses() {
    let src = "kernel k(x: ptr<global, i32>, n: i32) {
  var m: i32 = n;
  let a: i32 = m + 1;
  let b: i32 = a * m;
  let c: i32 = n * 3;
  let d: i32 = c;
  for i: i32 in 0 .. 4 {
    x[i] = d + i;
  }
  m = 2;
  x[4] = m;
}
";
    let k = parse_module(src).unwrap().kernels.remove(0);
    let out = let_opt(&k);
    let text = out.to_string();
    assert!(!text.contains("let a") && !text.contains("let b"), "{text}");
    // `c` is used once, by `d`, outside the loop: inlined there; `d`'s one use is in the loop.
    assert!(text.contains("let d: i32 = n * 3;") && !text.contains("let c"), "{text}");
    assert!(text.contains("x[i] = d + i;"), "{text}");
}
