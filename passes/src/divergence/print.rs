//! `kiln divergence`: the kernel printed with each binding and branch annotated.

use std::fmt::Write;

use kiln_ir::{Kernel, Stmt, StmtNode};

use super::Divergence;

fn tag(d: bool) -> &'static str {
    if d {
        "divergent"
    } else {
        "uniform"
    }
}

/// Prints `kernel` in the text format with a trailing `// uniform` or `// divergent` on
/// every binding (`let`, `var`, assignment, call result, `for` counter) and on every
/// branch (`if` condition, loop exit).
pub fn annotate(kernel: &Kernel, div: &Divergence) -> String {
    let mut out = String::new();
    let params: Vec<String> =
        kernel.params().iter().map(|p| format!("{}: {}", p.name(), p.ty())).collect();
    let _ = writeln!(out, "kernel {}({}) {{", kernel.name(), params.join(", "));
    for s in kernel.body().stmts() {
        stmt(&mut out, s, div, 1);
    }
    out.push_str("}\n");
    out
}

fn stmt(out: &mut String, s: &Stmt, div: &Divergence, depth: usize) {
    let ind = "  ".repeat(depth);
    let block = |out: &mut String, b: &Stmt| {
        for c in b.stmts() {
            stmt(out, c, div, depth + 1);
        }
    };
    match s.node() {
        StmtNode::Block(v) => {
            let _ = writeln!(out, "{ind}{{");
            for c in v {
                stmt(out, c, div, depth + 1);
            }
            let _ = writeln!(out, "{ind}}}");
        }
        StmtNode::If { cond, then, otherwise } => {
            let d = div.branch_divergent(s).unwrap_or(true);
            let _ = writeln!(out, "{ind}if {cond} {{ // branch {}", tag(d));
            block(out, then);
            if let Some(o) = otherwise {
                let _ = writeln!(out, "{ind}}} else {{");
                if matches!(o.node(), StmtNode::If { .. }) {
                    stmt(out, o, div, depth + 1);
                } else {
                    block(out, o);
                }
            }
            let _ = writeln!(out, "{ind}}}");
        }
        StmtNode::While { cond, body } => {
            let d = div.branch_divergent(s).unwrap_or(true);
            let _ = writeln!(out, "{ind}while {cond} {{ // exit {}", tag(d));
            block(out, body);
            let _ = writeln!(out, "{ind}}}");
        }
        StmtNode::For { var, lo, hi, step, body } => {
            let d = div.branch_divergent(s).unwrap_or(true);
            let c = div.binding_divergent(s).unwrap_or(true);
            let _ = writeln!(
                out,
                "{ind}for {}: {} in {lo} .. {hi} step {step} {{ // {} {}, exit {}",
                var.name(),
                var.ty(),
                var.name(),
                tag(c),
                tag(d)
            );
            block(out, body);
            let _ = writeln!(out, "{ind}}}");
        }
        _ => {
            let text = s.to_string();
            let text = text.trim_end();
            match div.binding_divergent(s) {
                Some(d) => {
                    let _ = writeln!(out, "{ind}{text} // {}", tag(d));
                }
                None => {
                    let _ = writeln!(out, "{ind}{text}");
                }
            }
        }
    }
}
