"""The references for kiln's launch-overhead benchmark (runtime/benches/launch.rs), measured
with cupy on the same GPU, and kiln's numbers held against them.

    python3 benches/gpu/launch_ref.py [--kiln FILE] [--reps R]

1. eager: 100 dependent launches of a tiny kernel (`x[i] = x[i] + i + 1` over 256 items in
   blocks of 32, kiln's `inc` in launch.rs, written in CUDA C and compiled by NVRTC through
   cupy.RawKernel) on one stream, then a synchronize: host time per kernel;
2. replay: a CUDA graph of 100 empty kernels captured from a stream, launched and
   synchronized: host time per node; and the same graph of the 100 `inc` launches.
3. replay with programmatic dependent launch (sm_90 and newer): the same two graphs built
   node by node through the driver API (ctypes), each kernel starting with
   `griddepcontrol.wait; griddepcontrol.launch_dependents;` as kiln's sm_90 kernels do, and
   every edge programmatic (`cuGraphAddDependencies_v2` with edge data), as kiln's CUDA
   graphs are: the hardware path's floor for a chain whose kernels read each other's writes.

Median of R (default 200) after warm-up, perf_counter, the clock kiln's Instant reads.
Before anything is timed, the `inc` chain's result is checked against numpy; a wrong one
fails the script, which then prints nothing else.

With --kiln FILE (the output of the launch bench, which prints lines
`per kernel: cuda (NAME): 100 dependent kernels eager E us, graph replay R us per node` and
the same for vulkan), the ratios against the references and issue 25's targets are printed:
CUDA eager <= 1.2x cupy's eager, CUDA replay <= 1.0 us per node, Vulkan eager <= 30 us per
kernel and replay <= 2 us per node.
"""
import argparse
import ctypes
import re
import sys
import time

import cupy as cp
import numpy as np

NODES = 100
ITEMS = 256
LOCAL = 32

SRC = r"""
extern "C" __global__ void inc(unsigned int* x) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    x[i] = x[i] + i + 1u;
}
extern "C" __global__ void empty() {}
"""


PDL_SRC = r"""
extern "C" __global__ void inc_pdl(unsigned int* x) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    x[i] = x[i] + i + 1u;
}
extern "C" __global__ void empty_pdl() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
"""


class KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2."""
    _fields_ = [
        ("func", ctypes.c_void_p),
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("sharedMemBytes", ctypes.c_uint),
        ("kernelParams", ctypes.POINTER(ctypes.c_void_p)),
        ("extra", ctypes.POINTER(ctypes.c_void_p)),
        ("kern", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
    ]


class EdgeData(ctypes.Structure):
    """CUgraphEdgeData."""
    _fields_ = [("from_port", ctypes.c_ubyte), ("to_port", ctypes.c_ubyte),
                ("type", ctypes.c_ubyte), ("reserved", ctypes.c_ubyte * 5)]


def pdl_graph(cu, func, grid, block, params):
    """An instantiated CUDA graph of NODES launches of `func`, each after the one before
    through a programmatic edge (port and type CU_GRAPH_*_PROGRAMMATIC = 1)."""
    def ok(r, what):
        if r != 0:
            raise RuntimeError(f"{what}: CUresult {r}")
    graph = ctypes.c_void_p()
    ok(cu.cuGraphCreate(ctypes.byref(graph), 0), "cuGraphCreate")
    p = KernelNodeParams()
    p.func = func
    p.grid[:] = list(grid) + [1] * (3 - len(grid))
    p.block[:] = list(block) + [1] * (3 - len(block))
    p.kernelParams = params
    prev = None
    edge = EdgeData(1, 0, 1)
    for _ in range(NODES):
        node = ctypes.c_void_p()
        ok(cu.cuGraphAddKernelNode_v2(ctypes.byref(node), graph, None, ctypes.c_size_t(0),
                                      ctypes.byref(p)), "cuGraphAddKernelNode")
        if prev is not None:
            ok(cu.cuGraphAddDependencies_v2(graph, ctypes.byref(prev), ctypes.byref(node),
                                            ctypes.byref(edge), ctypes.c_size_t(1)),
               "cuGraphAddDependencies_v2")
        prev = node
    exec_ = ctypes.c_void_p()
    ok(cu.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph, ctypes.c_ulonglong(0)),
       "cuGraphInstantiate")
    return exec_


def pdl_references(reps, stream, x, want):
    """Per-node replay costs of the programmatic-edge graphs of `inc_pdl` (its result
    checked first) and `empty_pdl`, or the reason they could not be measured."""
    major = cp.cuda.Device().compute_capability
    if int(major) < 90:
        return f"sm_{major} has no programmatic dependent launch"
    cu = ctypes.CDLL("libcuda.so.1")
    mod = cp.RawModule(code=PDL_SRC)
    inc, empty = mod.get_function("inc_pdl"), mod.get_function("empty_pdl")
    xp = ctypes.c_uint64(x.data.ptr)
    inc_params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(xp), ctypes.c_void_p))
    # The CUfunction handles (cupy's RawKernel holds its Function as `.kernel`).
    f_inc, f_empty = (getattr(f, "kernel", f).ptr for f in (inc, empty))
    g_inc = pdl_graph(cu, f_inc, (ITEMS // LOCAL,), (LOCAL,), inc_params)
    g_empty = pdl_graph(cu, f_empty, (1,), (1,), None)

    def replay(g):
        def run():
            r = cu.cuGraphLaunch(g, ctypes.c_void_p(stream.ptr))
            if r != 0:
                raise RuntimeError(f"cuGraphLaunch: CUresult {r}")
            stream.synchronize()
        return run

    x.fill(0)
    stream.synchronize()
    replay(g_inc)()
    if not np.array_equal(cp.asnumpy(x).astype(np.uint64), want % 2**32):
        return "the programmatic graph of the chain gave a wrong result; no numbers"
    return {
        "pdl_inc": median_us(replay(g_inc), reps) / NODES,
        "pdl_empty": median_us(replay(g_empty), reps) / NODES,
    }


def median_us(fn, reps, warm=5):
    for _ in range(warm):
        fn()
    t = []
    for _ in range(reps):
        s = time.perf_counter()
        fn()
        t.append((time.perf_counter() - s) * 1e6)
    return float(np.median(t))


def graph_of(stream, launch):
    """A CUDA graph of NODES launches of `launch`, captured from `stream`."""
    stream.begin_capture()
    for _ in range(NODES):
        launch()
    return stream.end_capture()


def references(reps):
    mod = cp.RawModule(code=SRC)
    inc, empty = mod.get_function("inc"), mod.get_function("empty")
    stream = cp.cuda.Stream(non_blocking=True)
    x = cp.zeros(ITEMS, dtype=cp.uint32)
    grid, block = (ITEMS // LOCAL,), (LOCAL,)

    # RawKernel launches on the current stream: every call below runs `with stream`.
    def inc_once():
        inc(grid, block, (x,))

    def eager():
        for _ in range(NODES):
            inc_once()
        stream.synchronize()

    # Checked before timing: 100 launches add 100 * (i + 1) to each element.
    with stream:
        eager()
    want = (np.arange(ITEMS, dtype=np.uint64) + 1) * NODES
    got = cp.asnumpy(x).astype(np.uint64)
    if not np.array_equal(got, want % 2**32):
        sys.exit("cupy eager chain: wrong result; no numbers")
    with stream:
        g_inc = graph_of(stream, inc_once)
        g_empty = graph_of(stream, lambda: empty((1,), (1,), ()))

    def replay(g):
        def run():
            g.launch(stream=stream)
            stream.synchronize()
        return run

    with stream:
        x.fill(0)
        replay(g_inc)()
        if not np.array_equal(cp.asnumpy(x).astype(np.uint64), want % 2**32):
            sys.exit("cupy graph of the chain: wrong result; no numbers")
        out = {
            "eager": median_us(eager, reps) / NODES,
            "graph_inc": median_us(replay(g_inc), reps) / NODES,
            "graph_empty": median_us(replay(g_empty), reps) / NODES,
        }
        try:
            out["pdl"] = pdl_references(reps, stream, x, want)
        except Exception as e:  # the other references stand; say why these are missing
            out["pdl"] = f"not measured: {e!r}"
        return out


LINE = re.compile(
    r"per kernel: (\w+) \((.*)\): 100 dependent kernels eager ([\d.]+) us, graph replay "
    r"([\d.]+) us per node"
)


def kiln_numbers(path):
    out = {}
    with open(path) as f:
        for line in f:
            m = LINE.search(line)
            if m:
                out[m.group(1)] = (m.group(2), float(m.group(3)), float(m.group(4)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", help="the launch bench's output")
    ap.add_argument("--reps", type=int, default=200)
    a = ap.parse_args()
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    ref = references(a.reps)
    print(f"reference ({dev}, cupy {cp.__version__}):")
    print(f"  cupy eager, 100 dependent tiny kernels + sync: {ref['eager']:.2f} us per kernel")
    print(f"  CUDA graph of the 100 kernels, replay + sync:  {ref['graph_inc']:.2f} us per node")
    print(f"  CUDA graph of 100 empty kernels, replay + sync: {ref['graph_empty']:.2f} us per node")
    pdl = ref["pdl"]
    if isinstance(pdl, dict):
        print(f"  the same with programmatic edges (griddepcontrol): the 100 kernels "
              f"{pdl['pdl_inc']:.2f} us per node, 100 empty kernels {pdl['pdl_empty']:.2f} us per node")
    else:
        print(f"  programmatic-edge graphs: {pdl}")
    if not a.kiln:
        return
    k = kiln_numbers(a.kiln)
    if not k:
        sys.exit(f"no `per kernel:` lines of a device in {a.kiln}")
    for kind, (name, eager, replay) in sorted(k.items()):
        print(f"kiln {kind} ({name}): eager {eager:.2f} us per kernel, replay {replay:.2f} us per node")
        if kind == "cuda":
            r = eager / ref["eager"]
            print(f"  eager / cupy eager: {r:.2f}x (target <= 1.2x: {'met' if r <= 1.2 else 'NOT met'})")
            print(f"  replay / empty-kernel graph: {replay / ref['graph_empty']:.2f}x; "
                  f"replay / graph of the same kernels: {replay / ref['graph_inc']:.2f}x "
                  f"(target <= 1.0 us per node: {'met' if replay <= 1.0 else 'NOT met'})")
            if isinstance(pdl, dict):
                print(f"  replay / programmatic graph of the same kernels: "
                      f"{replay / pdl['pdl_inc']:.2f}x")
        if kind == "vulkan":
            print(f"  eager target <= 30 us per kernel: {'met' if eager <= 30 else 'NOT met'}; "
                  f"replay target <= 2 us per node: {'met' if replay <= 2 else 'NOT met'}")


if __name__ == "__main__":
    main()
