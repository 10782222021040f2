//! `kiln graph FILE.toml [--dot OUT.dot] [--svg OUT.svg] [--verbose] [--explain] [--run]
//! [--device D] [--timeout SECS] [--max-steps N]`: a command graph described in TOML (kernels from a .kir
//! file, buffers, nodes, edges), validated, drawn and run. The format is documented in
//! docs/graphs.md; the device options are `kiln run`'s.

use kiln::runtime::QueueGraph;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use kiln::ir::{check_source, Scalar};
use kiln::runtime::graph::{Graph, GraphProperties, Node, NodeId};
use kiln::runtime::{AccessMode, AnyBuffer, Arg, Context, Device, NdRange, Queue, QueueOrder};

use super::buffers::{contents, new_buffer};
use super::device::{abandon_wait, DeviceArgs};
use super::run::show_buffer;
use super::value::{
    filled_bytes, generated_bytes, parse_scalar, push_le, reserve_bytes, BufferInit,
};
use super::{file_name, read_source, Error};

/// `kiln graph`'s arguments.
#[derive(Args, Debug)]
pub struct GraphArgs {
    /// The graph description (TOML; see docs/graphs.md).
    #[arg(value_name = "FILE.toml")]
    file: PathBuf,
    /// Write the graph in Graphviz's dot format.
    #[arg(long, value_name = "OUT.dot")]
    dot: Option<PathBuf>,
    /// Draw the graph as SVG (runs Graphviz's `dot`).
    #[arg(long, value_name = "OUT.svg")]
    svg: Option<PathBuf>,
    /// With --dot/--svg: nd-ranges, arguments and buffer accesses in the nodes.
    #[arg(long)]
    verbose: bool,
    /// Finalize and run the graph once, then print every buffer as `kiln run` does.
    #[arg(long)]
    run: bool,
    /// With --run: print every element of each buffer, not a summary.
    #[arg(long)]
    full: bool,
    /// Print every chain of kernels finalize considered for fusion (`fuse_chains`): fused,
    /// or why not, and for every buffer one kernel of the chain writes and another uses,
    /// each access and the verdicts, in the words of `kiln fuse --explain`.
    #[arg(long)]
    explain: bool,
    #[command(flatten)]
    device: DeviceArgs,
}

/// A TOML value as the text a command-line scalar would be.
fn scalar_text(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(format!("{f:?}")),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

struct Described {
    graph: Graph,
    buffers: Vec<(String, AnyBuffer)>,
}

/// An error for the first key of `t` not in `known` (a misspelt key must not be ignored).
fn known_keys(t: &toml::Value, known: &[&str], at: &str) -> Result<(), String> {
    match t.as_table().and_then(|t| t.keys().find(|k| !known.contains(&k.as_str()))) {
        Some(k) => Err(format!("{at}: unknown key `{k}` (known: {})", known.join(", "))),
        None => Ok(()),
    }
}

/// Builds the graph the description says, naming the key at fault in every error.
fn describe(ctx: &Context, path: &Path, text: &str) -> Result<Described, String> {
    let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| e.message().to_string())?;
    let top = ["kernels", "fuse_chains", "internalize", "buffers", "nodes", "edges"];
    known_keys(&toml::Value::Table(doc.clone()), &top, "the description")?;
    let flag = |k: &str| doc.get(k).and_then(toml::Value::as_bool).unwrap_or(false);
    let props = GraphProperties {
        fuse_chains: flag("fuse_chains"),
        internalize: flag("internalize"),
        no_cycle_check: false,
    };
    let kir = doc
        .get("kernels")
        .and_then(toml::Value::as_str)
        .ok_or("`kernels`: give the .kir file's path (relative to the description)")?;
    let kir_path = path.parent().unwrap_or(Path::new(".")).join(kir);
    let src = std::fs::read_to_string(&kir_path)
        .map_err(|e| format!("`kernels`: cannot read `{}`: {e}", kir_path.display()))?;
    let module = check_source(&file_name(&kir_path), &src)
        .map_err(|ds| ds.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n"))?;
    let prepared = ctx.prepare(&module, &[], "");
    let mut buffers: Vec<(String, AnyBuffer)> = Vec::new();
    if let Some(t) = doc.get("buffers") {
        let t = t.as_table().ok_or("`buffers`: expected a table of buffers")?;
        for (name, b) in t {
            let at = |why: &str| format!("buffer `{name}`: {why}");
            known_keys(b, &["type", "len", "init"], &at("keys"))?;
            let ty = b
                .get("type")
                .and_then(toml::Value::as_str)
                .ok_or_else(|| at("give its `type` (f32, i32, u32, ...)"))?;
            let elem = Scalar::from_name(ty).ok_or_else(|| at(&format!("unknown type `{ty}`")))?;
            let len = b
                .get("len")
                .and_then(toml::Value::as_integer)
                .and_then(|l| usize::try_from(l).ok())
                .ok_or_else(|| at("give its `len` (a non-negative integer)"))?;
            // Built at the element's size, under `kiln run`'s limit for generated buffers
            // (4 GiB), and refused with a message when the memory cannot be had.
            let bytes = match b.get("init") {
                None => generated_bytes(&BufferInit::Zeros(len), elem),
                Some(toml::Value::String(s)) if s == "iota" => {
                    generated_bytes(&BufferInit::Iota(len), elem)
                }
                Some(toml::Value::Array(a)) if a.len() == len => {
                    let mut bytes = reserve_bytes(len, elem).map_err(|e| at(&e))?;
                    for v in a {
                        let t = scalar_text(v)
                            .ok_or_else(|| at("`init` holds a value that is not a number"))?;
                        push_le(&mut bytes, parse_scalar(&t, elem).map_err(|e| at(&e))?);
                    }
                    Ok(bytes)
                }
                Some(v) => match scalar_text(v) {
                    Some(t) => filled_bytes(len, parse_scalar(&t, elem).map_err(|e| at(&e))?),
                    None => {
                        return Err(at(&format!(
                            "`init` must be \"iota\", one number or {len} numbers"
                        )))
                    }
                },
            }
            .map_err(|e| at(&e))?;
            buffers
                .push((name.clone(), AnyBuffer::new(new_buffer(elem, bytes).map_err(|e| at(&e))?)));
        }
    }
    let buffer = |n: &str, at: &str| {
        buffers
            .iter()
            .find(|(b, _)| b == n)
            .map(|(_, b)| b.clone())
            .ok_or_else(|| format!("{at}: no buffer `{n}`"))
    };
    let graph = Graph::new(ctx, props);
    let name_lines = node_name_lines(text);
    let mut names: Vec<(String, NodeId)> = Vec::new();
    let empty = Vec::new();
    let nodes = match doc.get("nodes") {
        Some(n) => n.as_array().ok_or("`nodes`: expected an array of tables ([[nodes]])")?,
        None => &empty,
    };
    for (i, n) in nodes.iter().enumerate() {
        let name =
            n.get("name").and_then(toml::Value::as_str).map_or(format!("{i}"), str::to_string);
        let at = format!("node `{name}`");
        let keys = ["name", "kernel", "global", "local", "args", "after", "fill", "value", "copy"];
        known_keys(n, &keys, &at)?;
        // `after` and `edges` name nodes: a second node of a name would be unreachable.
        if let Some(first) = names.iter().position(|(x, _)| *x == name) {
            let line = |j: usize| match name_lines.get(j).copied().flatten() {
                Some(l) => format!("line {l}"),
                None => format!("node {}", j + 1),
            };
            return Err(format!(
                "{}: {at} is defined twice (first at {}); node names must be unique, since \
                 `after` and `edges` refer to them",
                line(i),
                line(first)
            ));
        }
        let node_of = |s: &str, names: &[(String, NodeId)]| {
            names
                .iter()
                .find(|(x, _)| x == s)
                .map(|(_, id)| *id)
                .ok_or_else(|| format!("{at}: no node `{s}` before it"))
        };
        let mut after = Vec::new();
        if let Some(a) = n.get("after") {
            for d in a.as_array().ok_or_else(|| format!("{at}: `after` is a list of node names"))? {
                after.push(node_of(d.as_str().unwrap_or(""), &names)?);
            }
        }
        let node = if let Some(k) = n.get("kernel").and_then(toml::Value::as_str) {
            let kernel =
                module.kernel(k).ok_or_else(|| format!("{at}: no kernel `{k}` in `{kir}`"))?;
            let sizes = |key: &str| -> Result<Option<Vec<u32>>, String> {
                match n.get(key) {
                    None => Ok(None),
                    Some(v) => v
                        .as_array()
                        .and_then(|a| {
                            a.iter()
                                .map(|x| x.as_integer().and_then(|x| u32::try_from(x).ok()))
                                .collect()
                        })
                        .map(Some)
                        .ok_or_else(|| format!("{at}: `{key}` is a list of 1 to 3 sizes")),
                }
            };
            let global = sizes("global")?
                .filter(|g| (1..=3).contains(&g.len()))
                .ok_or_else(|| format!("{at}: give `global`, 1 to 3 sizes"))?;
            let mut range = NdRange::new(&global);
            if let Some(l) = sizes("local")? {
                range = range.with_local(&l);
            }
            let args = n
                .get("args")
                .and_then(toml::Value::as_array)
                .ok_or_else(|| format!("{at}: give `args`, one per parameter"))?;
            if args.len() != kernel.params().len() {
                return Err(format!(
                    "{at}: kernel `{k}` takes {} arguments, {} given",
                    kernel.params().len(),
                    args.len()
                ));
            }
            let mut kargs = Vec::new();
            for (p, a) in kernel.params().iter().zip(args) {
                let ty = p.ty();
                if ty.is_ptr() {
                    let b = buffer(
                        a.as_str().ok_or_else(|| {
                            format!("{at}: parameter `{}` takes a buffer name", p.name())
                        })?,
                        &at,
                    )?;
                    // Edges are derived as if the kernel read and wrote every buffer it takes.
                    kargs
                        .push(Arg::Buffer(kiln::runtime::Accessor::new(&b, AccessMode::ReadWrite)));
                } else {
                    let s = ty.scalar().ok_or_else(|| {
                        format!("{at}: parameter `{}` has no scalar type", p.name())
                    })?;
                    let t = scalar_text(a)
                        .ok_or_else(|| format!("{at}: parameter `{}` takes a number", p.name()))?;
                    kargs.push(Arg::Scalar(
                        parse_scalar(&t, s)
                            .map_err(|e| format!("{at}: parameter `{}`: {e}", p.name()))?,
                    ));
                }
            }
            Node::kernel_of(&prepared, k, range, kargs)
        } else if let Some(b) = n.get("fill").and_then(toml::Value::as_str) {
            let buf = buffer(b, &at)?;
            let t = n
                .get("value")
                .and_then(scalar_text)
                .ok_or_else(|| format!("{at}: give the fill `value`"))?;
            Node::fill(&buf, parse_scalar(&t, buf.elem()).map_err(|e| format!("{at}: {e}"))?)
        } else if let Some(c) = n.get("copy").and_then(toml::Value::as_array) {
            let [s, d] = c.as_slice() else {
                return Err(format!("{at}: `copy` is [source, destination]"));
            };
            Node::copy(
                &buffer(s.as_str().unwrap_or(""), &at)?,
                &buffer(d.as_str().unwrap_or(""), &at)?,
            )
        } else {
            return Err(format!(
                "{at}: give `kernel`, `fill` or `copy` (host tasks need Rust: see docs/graphs.md)"
            ));
        };
        let id = graph.add(node.named(name.clone()), &after).map_err(|e| e.to_string())?;
        names.push((name, id));
    }
    if let Some(edges) = doc.get("edges") {
        for e in edges.as_array().ok_or("`edges` is a list of [from, to] pairs")? {
            let pair: Vec<&str> = e
                .as_array()
                .map(|a| a.iter().filter_map(toml::Value::as_str).collect())
                .unwrap_or_default();
            let [from, to] = pair.as_slice() else {
                return Err(format!("edge {e}: expected [from, to] node names"));
            };
            let id = |s: &str| {
                names
                    .iter()
                    .find(|(x, _)| x == s)
                    .map(|(_, i)| *i)
                    .ok_or_else(|| format!("edge {e}: no node `{s}`"))
            };
            graph.make_edge(id(from)?, id(to)?).map_err(|e| e.to_string())?;
        }
    }
    Ok(Described { graph, buffers })
}

/// The line of each `[[nodes]]` entry's `name` (`None` where it has none), for messages.
fn node_name_lines(text: &str) -> Vec<Option<usize>> {
    use toml::de::{DeTable, DeValue};
    let Ok(doc) = DeTable::parse(text) else { return Vec::new() };
    let Some(DeValue::Array(nodes)) = doc.get_ref().get("nodes").map(|v| v.get_ref()) else {
        return Vec::new();
    };
    let line = |at: usize| text[..at.min(text.len())].matches('\n').count() + 1;
    nodes
        .iter()
        .map(|n| match n.get_ref() {
            DeValue::Table(t) => t.get("name").map(|v| line(v.span().start)),
            _ => None,
        })
        .collect()
}

pub fn main(a: &GraphArgs) -> Result<(), Error> {
    let text = read_source(&a.file)?;
    let (info, limits) = a.device.resolve();
    let device: Arc<dyn Device> = info.open(&limits).map_err(|e| Error::Message(e.to_string()))?;
    let ctx = Context::with_config(device, super::config().context_config());
    let d = describe(&ctx, &a.file, &text)
        .map_err(|m| Error::Message(format!("`{}`: {m}", a.file.display())))?;
    if let Some(p) = &a.dot {
        d.graph.print_dot(p, a.verbose).map_err(|e| Error::Message(e.to_string()))?;
    }
    if let Some(svg) = &a.svg {
        let out = std::process::Command::new("dot")
            .arg("-Tsvg")
            .arg("-o")
            .arg(svg)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().map(|mut i| i.write_all(d.graph.to_dot(a.verbose).as_bytes())).transpose()?;
                c.wait_with_output()
            })
            .map_err(|e| {
                Error::Message(format!(
                    "cannot run Graphviz's `dot` ({e}): install Graphviz (e.g. `apt install graphviz`) or write --dot and draw it elsewhere"
                ))
            })?;
        if !out.status.success() {
            return Err(Error::Message(format!("Graphviz's `dot` failed ({})", out.status)));
        }
    }
    // Finalizing checks what drawing does not: kernels resolve, no cycle, partitions.
    let exec = d.graph.finalize().map_err(|e| Error::Message(e.to_string()))?;
    if a.explain {
        let chains = exec.explain();
        let mut text: String = chains.iter().map(|c| format!("{c}\n")).collect();
        if chains.is_empty() {
            text = "no chain of kernels was considered for fusion (that needs `fuse_chains = \
                    true` and kernel nodes with equal nd-ranges, each after the one before)\n"
                .into();
        }
        // A long report piped into `head` is not an error.
        super::gen::write_stdout(&text)?;
    }
    if a.run {
        let q = Queue::new(&ctx, QueueOrder::InOrder);
        let event = q.submit_graph(&exec);
        // A device that cannot stop a launch itself is watched from the host, as by `kiln run`.
        let done = match limits.timeout.filter(|_| !info.stops_at_timeout) {
            Some(t) => event
                .wait_timeout(t)
                .unwrap_or_else(|| abandon_wait("the graph", t, &ctx.device().name())),
            None => event.wait(),
        };
        // What the on-disk cache refused or could not do (an item that does not
        // authenticate, a directory others can write), as `kiln run` prints it.
        ctx.save_driver_caches();
        for w in ctx.persistent_cache().map(|c| c.warnings()).unwrap_or_default() {
            eprintln!("kiln: warning: {w}");
        }
        done.map_err(|e| Error::Message(e.to_string()))?;
        for (name, b) in &d.buffers {
            let c = b.contents().map_err(|e| Error::Message(e.to_string()))?;
            outln!("{}", show_buffer(name, c.elem(), contents(&c), a.full));
        }
    }
    Ok(())
}
