//! Graphviz output of a modifiable graph.

use std::fmt::Write;

use super::{NodeData, NodeKind};
use crate::buffer::arg_view;

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn describe(n: &NodeData, verbose: bool) -> String {
    let mut s = match &n.kind {
        NodeKind::Kernel { kernel, range, args } => {
            let mut s = format!("kernel `{}`", kernel.name());
            if verbose {
                let d = range.dims.clamp(1, 3);
                let _ = write!(s, "\\nglobal {:?}", &range.global[..d]);
                if let Some(l) = range.local {
                    let _ = write!(s, " local {:?}", &l[..d]);
                }
                if range.offset[..d].iter().any(|&o| o != 0) {
                    let _ = write!(s, " offset {:?}", &range.offset[..d]);
                }
                let a: Vec<String> = args
                    .iter()
                    .map(|a| match (a, arg_view(a)) {
                        (_, Some((b, Some((o, n))))) => format!("buffer #{}[{o}..{}]", b.id, o + n),
                        (_, Some((b, None))) => format!("buffer #{}", b.id),
                        (a, None) => {
                            a.imm().map(|v| kiln_ir::Expr::imm(v).to_string()).unwrap_or_default()
                        }
                    })
                    .collect();
                let _ = write!(s, "\\nargs: {}", a.join(", "));
            }
            s
        }
        NodeKind::Copy { src, dst } => format!("copy #{} -> #{}", src.buffer.id, dst.buffer.id),
        NodeKind::Fill { dst, value } => {
            format!("fill #{} with {}", dst.buffer.id, kiln_ir::Expr::imm(*value))
        }
        NodeKind::Host(_) | NodeKind::OnceHost => "host task".into(),
        NodeKind::Sub(nodes) => format!("sub-graph ({} nodes)", nodes.len()),
        NodeKind::Empty => "empty".into(),
    };
    if verbose && !n.accessors.is_empty() {
        let a: Vec<String> =
            n.accessors.iter().map(|a| format!("#{} {:?}", a.buffer.id, a.mode)).collect();
        let _ = write!(s, "\\naccess: {}", a.join(", "));
    }
    s
}

fn emit(out: &mut String, nodes: &[NodeData], prefix: &str, verbose: bool, depth: usize) {
    let pad = "  ".repeat(depth);
    for (i, n) in nodes.iter().enumerate() {
        let id = format!("{prefix}n{i}");
        if let (NodeKind::Sub(sub), true) = (&n.kind, verbose) {
            let _ = writeln!(out, "{pad}subgraph cluster_{id} {{");
            let _ = writeln!(out, "{pad}  label=\"{}\";", escape(&n.label(i)));
            emit(out, sub, &format!("{id}_"), verbose, depth + 1);
            let _ = writeln!(out, "{pad}  {id} [label=\"sub-graph\", shape=point];");
            let _ = writeln!(out, "{pad}}}");
        } else {
            let label = format!(
                "{}\\n{}",
                escape(&n.label(i)),
                escape(&describe(n, verbose)).replace("\\\\n", "\\n")
            );
            let shape = if matches!(n.kind, NodeKind::Host(_) | NodeKind::OnceHost) {
                "ellipse"
            } else {
                "box"
            };
            let _ = writeln!(out, "{pad}{id} [label=\"{label}\", shape={shape}];");
        }
    }
    for (i, n) in nodes.iter().enumerate() {
        for s in &n.succs {
            let _ = writeln!(out, "{pad}{prefix}n{i} -> {prefix}n{s};");
        }
    }
}

/// The dot text of a graph's nodes.
pub(crate) fn to_dot(nodes: &[NodeData], verbose: bool) -> String {
    let mut out = String::from("digraph kiln_graph {\n");
    emit(&mut out, nodes, "", verbose, 1);
    out.push_str("}\n");
    out
}
