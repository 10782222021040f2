//! Command-graph measurements on one device, every number against a reference measured in
//! the same run (benches/gpu/graph.py runs it on the GPU machine and compares with a
//! hand-built CUDA graph there):
//!
//! 1. `chain100`: a chain of 100 tiny kernels (`inc`, one work-item each, on one buffer):
//!    host time of 100 eager submissions on an in-order queue, and of one replay of the
//!    recorded graph: submission calls only (`submit`), and submission plus completion
//!    (`submit_wait`). Median of `--reps` after warm-up.
//! 2. `elementwise4`: `t1 = a * b; t2 = t1 + c; t3 = t2 * s; out = t3 - b` over `--elems`
//!    f32 (default 2^28) as a graph of four kernels, finalized without and with
//!    `fuse_chains` (+ `internalize`: t1..t3 never reach memory): replays (submit and wait; the
//!    buffers stay on the device between replays) alternate between the two graphs, median of
//!    `--reps` each. Both outputs are compared bit
//!    for bit with the host's arithmetic, and the run fails before any result is printed
//!    when one differs.
//!
//! ```text
//! cargo run --release -p kiln-runtime --example graph_bench -- --device cuda
//! ```
//!
//! Prints `RESULT <name> <value>` lines (times in microseconds) and the ratios.

use kiln_runtime::QueueGraph;
use std::time::{Duration, Instant};

use kiln_ir::parse_module;
use kiln_runtime::device::registry::{self, OpenOptions};
use kiln_runtime::graph::{ExecGraph, Graph, GraphProperties};
use kiln_runtime::{Arg, Buffer, Context, ContextConfig, KernelHandle, NdRange, Queue, QueueOrder};

const CHAIN: usize = 100;

/// The kernels, shared with benches/gpu/graph.py (which launches the same PTX through cupy).
const KERNELS: &str = include_str!("../../benches/gpu/graph.kir");

struct Args {
    device: String,
    elems: usize,
    reps: usize,
    skip_elementwise: bool,
}

fn args() -> Result<Args, String> {
    let mut a = Args { device: "cuda".into(), elems: 1 << 28, reps: 20, skip_elementwise: false };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = || it.next().ok_or(format!("{x} needs a value"));
        match x.as_str() {
            "--device" => a.device = val()?,
            "--elems" => a.elems = val()?.parse().map_err(|e| format!("--elems: {e}"))?,
            "--reps" => a.reps = val()?.parse().map_err(|e| format!("--reps: {e}"))?,
            "--skip-elementwise" => a.skip_elementwise = true,
            _ => {
                return Err(format!(
                    "unknown argument {x} (--device D --elems N --reps R --skip-elementwise)"
                ))
            }
        }
    }
    Ok(a)
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

fn result(name: &str, us: f64) {
    println!("RESULT {name} {us:.3}");
}

fn chain(q: &Queue, k: &KernelHandle, b: &Buffer<u32>) {
    for _ in 0..CHAIN {
        q.submit(|h| {
            let x = h.read_write(b);
            h.parallel_for(k, NdRange::new(&[1]), vec![Arg::from(x)]);
        });
    }
}

fn chain100(ctx: &Context, reps: usize) -> Result<(), String> {
    let m = parse_module(KERNELS).map_err(|e| e.to_string())?;
    let k = ctx.get_kernel(&m, "inc").map_err(|e| e.to_string())?;
    let q = Queue::new(ctx, QueueOrder::InOrder);
    let b = Buffer::<u32>::zeroed(1);
    let g = Graph::new(ctx, GraphProperties::default());
    q.begin_recording(&g).map_err(|e| e.to_string())?;
    chain(&q, &k, &b);
    q.end_recording().map_err(|e| e.to_string())?;
    let exec = g.finalize().map_err(|e| e.to_string())?;
    println!("chain100: {} device recording(s)", exec.device_recordings());
    let (mut es, mut ew, mut gs, mut gw) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps + 3 {
        let t = Instant::now();
        chain(&q, &k, &b);
        let submitted = t.elapsed();
        q.wait().map_err(|e| e.to_string())?;
        let done = t.elapsed();
        let t = Instant::now();
        let e = q.submit_graph(&exec);
        let g_submitted = t.elapsed();
        e.wait().map_err(|e| e.to_string())?;
        let g_done = t.elapsed();
        if rep >= 3 {
            es.push(submitted);
            ew.push(done);
            gs.push(g_submitted);
            gw.push(g_done);
        }
    }
    let want = ((reps + 3) * 2 * CHAIN) as u32;
    let got = b.read().map_err(|e| e.to_string())?;
    if got != [want] {
        return Err(format!("chain100: the buffer holds {got:?}, not {want}"));
    }
    let (es, ew, gs, gw) = (median(es), median(ew), median(gs), median(gw));
    result("chain100.eager.submit_us", es);
    result("chain100.eager.submit_wait_us", ew);
    result("chain100.graph.submit_us", gs);
    result("chain100.graph.submit_wait_us", gw);
    println!(
        "chain100: eager/graph host submit {:.1}x, submit+wait {:.1}x; graph {:.3} us/node submit+wait",
        es / gs,
        ew / gw,
        gw / CHAIN as f64
    );
    Ok(())
}

fn elementwise4(ctx: &Context, n: usize, reps: usize) -> Result<(), String> {
    let m = parse_module(KERNELS).map_err(|e| e.to_string())?;
    let k = |name: &str| ctx.get_kernel(&m, name).map_err(|e| e.to_string());
    let (k1, k2, k3, k4) = (k("k1")?, k("k2")?, k("k3")?, k("k4")?);
    // 256 work-items per group, as graph.py launches them (else the device's default).
    let r = NdRange::new(&[n as u32]);
    let r = if n.is_multiple_of(256) { r.with_local(&[256]) } else { r };
    let init =
        |s: f32| Buffer::from_slice(&(0..n).map(|i| (i % 1000) as f32 * s).collect::<Vec<_>>());
    let (a, b, c) = (init(0.5), init(0.25), init(2.0));
    let graph = |fuse: bool| -> Result<(ExecGraph, Buffer<f32>), String> {
        let (t1, t2, t3, out) = (
            Buffer::<f32>::zeroed(n),
            Buffer::<f32>::zeroed(n),
            Buffer::<f32>::zeroed(n),
            Buffer::<f32>::zeroed(n),
        );
        let props = GraphProperties { fuse_chains: fuse, internalize: fuse, ..Default::default() };
        let g = Graph::new(ctx, props);
        let q = Queue::new(ctx, QueueOrder::InOrder);
        q.begin_recording(&g).map_err(|e| e.to_string())?;
        q.submit(|h| {
            let args = vec![h.read(&a).into(), h.read(&b).into(), h.write(&t1).into()];
            h.parallel_for(&k1, r, args)
        });
        q.submit(|h| {
            let args = vec![h.read(&t1).into(), h.read(&c).into(), h.write(&t2).into()];
            h.parallel_for(&k2, r, args)
        });
        q.submit(|h| {
            let args = vec![h.read(&t2).into(), h.write(&t3).into(), Arg::scalar(1.5f32)];
            h.parallel_for(&k3, r, args)
        });
        q.submit(|h| {
            let args = vec![h.read(&t3).into(), h.read(&b).into(), h.write(&out).into()];
            h.parallel_for(&k4, r, args)
        });
        q.end_recording().map_err(|e| e.to_string())?;
        let exec = g.finalize().map_err(|e| e.to_string())?;
        Ok((exec, out))
    };
    let q = Queue::new(ctx, QueueOrder::InOrder);
    let mut times = [Vec::new(), Vec::new()];
    let mut graphs = Vec::new();
    for fuse in [false, true] {
        let (exec, out) = graph(fuse)?;
        println!(
            "elementwise4 fuse_chains={fuse}: {} fused chain(s), {} device recording(s)",
            exec.fused_chains(),
            exec.device_recordings()
        );
        if fuse && exec.fused_chains() != 1 {
            return Err("elementwise4: the chain did not fuse".into());
        }
        graphs.push((exec, out));
    }
    // Replays alternate between the two graphs, so that neither is measured in a warmer or
    // colder state of the device (clocks, caches, memory placement) than the other.
    for rep in 0..reps + 2 {
        for (f, (exec, _)) in graphs.iter().enumerate() {
            let t = Instant::now();
            q.submit_graph(exec).wait().map_err(|e| e.to_string())?;
            if rep >= 2 {
                times[f].push(t.elapsed());
            }
        }
    }
    let mut outs = Vec::new();
    for (_, out) in &graphs {
        outs.push(out.read().map_err(|e| e.to_string())?);
    }
    // Both against the host's arithmetic (one rounding per operation, as the kernels do).
    let (ha, hb, hc) = (
        a.read().map_err(|e| e.to_string())?,
        b.read().map_err(|e| e.to_string())?,
        c.read().map_err(|e| e.to_string())?,
    );
    let want = |i: usize| ((ha[i] * hb[i] + hc[i]) * 1.5f32 - hb[i]).to_bits();
    for (out, what) in outs.iter().zip(["unfused", "fused"]) {
        if let Some(i) = (0..n).find(|&i| out[i].to_bits() != want(i)) {
            return Err(format!(
                "elementwise4: the {what} graph's out[{i}] is {}, not {}",
                out[i],
                f32::from_bits(want(i))
            ));
        }
    }
    let [u, f] = times.map(median);
    result("elementwise4.unfused_us", u);
    result("elementwise4.fused_us", f);
    let gb = |us: f64, bytes: usize| (bytes * n) as f64 / us / 1e3;
    println!(
        "elementwise4 over {n} f32: unfused graph {:.3} ms ({:.0} GB/s of 44 B/elem), fused {:.3} ms ({:.0} GB/s of 16 B/elem): fused {:.2}x faster (target 2.4x)",
        u / 1e3,
        gb(u, 44),
        f / 1e3,
        gb(f, 16),
        u / f
    );
    Ok(())
}

fn main() {
    let run = || -> Result<(), String> {
        let a = args()?;
        let dev = registry::open(&a.device, &OpenOptions::default()).map_err(|e| e.to_string())?;
        println!("device: {} ({})", dev.name(), dev.version());
        let ctx = Context::with_config(dev, ContextConfig { workers: 2, ..Default::default() });
        chain100(&ctx, a.reps)?;
        if !a.skip_elementwise {
            elementwise4(&ctx, a.elems, a.reps)?;
        }
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("graph_bench: {e}");
        std::process::exit(1);
    }
}
