//! CUDA graphs: a command graph's device partition recorded once through the driver API
//! (`cuGraphCreate`; one kernel node per launch, one device-to-device memcpy node per copy,
//! memset nodes per fill, with edges from their dependencies; `cuGraphInstantiate`) and
//! replayed with one `cuGraphLaunch`. From sm_90 on, an edge between kernel nodes is
//! programmatic where the consumer waits for its producers itself (see
//! `with_grid_dependency`): the driver launches it before its producer has finished.

use std::ptr::null_mut;

use cudarc::driver::{result, sys};

use super::{check_recorded_ranges, device_ptr, driver, guarded, launch_shape};
use super::{CudaDevice, CudaKernel};
use super::{Params, Primary};
use crate::device::{handle_as, KeepAlive, RecordStep, Recording};
use crate::error::DeviceError;
use std::sync::Arc;

/// An instantiated CUDA graph and what its nodes point into.
pub(super) struct CudaGraph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    primary: Arc<Primary>,
    /// The kernels and memory the nodes name.
    _alive: KeepAlive,
}

// The graph handles are used only with their context made current on the calling thread,
// and one replay at a time (a command graph's runs are ordered).
unsafe impl Send for CudaGraph {}
unsafe impl Sync for CudaGraph {}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        let _ = guarded(|| {
            // SAFETY: destroys what `record` made, in its retained context, once replays in
            // flight have finished.
            unsafe {
                let _ = self.primary.current();
                let _ = result::ctx::synchronize();
                if !self.exec.is_null() {
                    let _ = sys::cuGraphExecDestroy(self.exec);
                }
                if !self.graph.is_null() {
                    let _ = sys::cuGraphDestroy(self.graph);
                }
            }
            Ok(())
        });
    }
}

impl Recording for CudaGraph {
    /// Launches the graph on the context's null stream and returns (see
    /// [`crate::Device::finish`]).
    fn replay(&self) -> Result<(), DeviceError> {
        guarded(|| {
            // SAFETY: an instantiated graph of the retained context, made current first;
            // every pointer its nodes hold is kept alive by `self`, whose drop waits for the
            // replays in flight. Launches of one graph on one stream are ordered.
            unsafe {
                self.primary.current()?;
                sys::cuGraphLaunch(self.exec, null_mut()).result().map_err(driver("cuGraphLaunch"))
            }
        })
    }
}

/// One step's node(s), checked and ready to add.
enum NodeIn {
    /// A kernel node (an empty node for an empty nd-range): the function, its grid and
    /// block, its bytes of dynamic shared memory, its parameters, and whether its edges
    /// from other kernel nodes may be programmatic (it waits for its producers itself).
    Kernel(sys::CUfunction, ([u32; 3], [u32; 3]), u32, Params, bool),
    /// A device-to-device memcpy node of `bytes` bytes.
    Copy { src: sys::CUdeviceptr, dst: sys::CUdeviceptr, bytes: usize },
    /// Memset nodes, independent of each other (an 8-byte value whose halves differ is two
    /// strided 4-byte memsets).
    Fill(Vec<sys::CUDA_MEMSET_NODE_PARAMS>),
    /// Nothing to do (an empty copy or fill), but still ordered.
    Empty,
}

/// The memset node parameters that fill `len` elements at `dst` with the value of bytes
/// `v` (1, 2, 4 or 8 of them).
fn memsets(
    dst: sys::CUdeviceptr,
    len: usize,
    v: &[u8],
) -> Option<Vec<sys::CUDA_MEMSET_NODE_PARAMS>> {
    let one = |dst, pitch, value, size, width, height| sys::CUDA_MEMSET_NODE_PARAMS {
        dst,
        pitch,
        value,
        elementSize: size,
        width,
        height,
    };
    let word = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    Some(match v.len() {
        1 => vec![one(dst, 0, v[0] as u32, 1, len, 1)],
        2 => vec![one(dst, 0, u16::from_le_bytes([v[0], v[1]]) as u32, 2, len, 1)],
        4 => vec![one(dst, 0, word(v), 4, len, 1)],
        8 if v[..4] == v[4..] => vec![one(dst, 0, word(v), 4, 2 * len, 1)],
        // Rows of one 4-byte word, 8 bytes apart: the low halves, then the high halves.
        8 => vec![one(dst, 8, word(&v[..4]), 4, 1, len), one(dst + 4, 8, word(&v[4..]), 4, 1, len)],
        _ => return None,
    })
}

/// The first driver with programmatic graph edges (`cuGraphAddDependencies_v2`): 12.3.
const PROGRAMMATIC_EDGES_DRIVER: i32 = 12030;

/// The edge from a kernel node to one that waits for it itself (`griddepcontrol.wait`):
/// satisfied once every block of the producer has released its dependents
/// (`griddepcontrol.launch_dependents`) or exited, before its writes are visible.
const PROGRAMMATIC_EDGE: sys::CUgraphEdgeData = sys::CUgraphEdgeData {
    from_port: sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC as u8,
    to_port: 0,
    type_: sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8,
    reserved: [0; 5],
};

/// Records `steps` as one CUDA graph: kernel, memcpy and memset nodes with edges from their
/// `after` lists. Every step is checked first (launches as [`crate::Device::run_resident`]
/// checks them), so a bad one fails before any driver call.
pub(super) fn record(dev: &CudaDevice, steps: &[RecordStep]) -> Result<CudaGraph, DeviceError> {
    // Programmatic edges (CUDA 12.3's edge data) between kernel nodes whose consumer waits
    // for its producers itself: the driver launches the consumer while the producer runs.
    let early = dev.sm >= 90 && dev.driver_version >= PROGRAMMATIC_EDGES_DRIVER;
    let mut nodes_in = Vec::with_capacity(steps.len());
    for (i, st) in steps.iter().enumerate() {
        if let Some(&j) = st.after().iter().find(|&&j| j >= i) {
            return Err(DeviceError::Launch(format!(
                "CUDA graph: step {i} is to run after step {j}, which is not before it"
            )));
        }
        nodes_in.push(match st {
            RecordStep::Launch(l) => {
                let k = handle_as::<CudaKernel>(&l.kernel, "kernel")?;
                if !k.maps.is_empty() {
                    return Err(DeviceError::Launch(format!(
                        "CUDA graph: kernel `{}` takes tensor maps, which recorded graphs do \
                         not encode yet; launch it eagerly",
                        k.signature.name()
                    )));
                }
                let shape = launch_shape(&k.signature, &l.range)?;
                check_recorded_ranges(&l.args, &l.buffers)?;
                let bufs = (l.buffers.iter())
                    .map(|b| Ok((device_ptr(b)?, (b.elem, b.len))))
                    .collect::<Result<Vec<_>, DeviceError>>()?;
                let mut params = Params::default();
                params.fill(&k.signature, &l.args, &bufs, &l.range)?;
                if shape.0.contains(&0) {
                    NodeIn::Empty
                } else {
                    NodeIn::Kernel(k.func, shape, k.shared, params, k.waits && early)
                }
            }
            RecordStep::Copy(c) => {
                if c.src.elem != c.dst.elem || c.src.len > c.dst.len {
                    return Err(DeviceError::Launch(
                        "CUDA graph: a copy's buffers differ in element type, or the \
                         destination is shorter"
                            .into(),
                    ));
                }
                let p = [device_ptr(&c.src)?, device_ptr(&c.dst)?];
                let bytes = c.src.len * c.src.elem.size_bytes();
                if bytes == 0 {
                    NodeIn::Empty
                } else {
                    NodeIn::Copy { src: p[0], dst: p[1], bytes }
                }
            }
            RecordStep::Fill(f) => {
                let p = [device_ptr(&f.dst)?];
                if f.value.len() != f.dst.elem.size_bytes() {
                    return Err(DeviceError::Launch(format!(
                        "CUDA graph: a fill value of {} bytes for {} elements",
                        f.value.len(),
                        f.dst.elem
                    )));
                }
                match memsets(p[0], f.dst.len, &f.value) {
                    _ if f.dst.len == 0 => NodeIn::Empty,
                    Some(m) => NodeIn::Fill(m),
                    None => {
                        return Err(DeviceError::Launch(format!(
                            "CUDA graph: no memset for {}-byte elements",
                            f.value.len()
                        )))
                    }
                }
            }
        });
    }
    guarded(|| {
        // SAFETY: the context is retained and made current; each node's parameters are
        // copied by the driver when the node is added (the arrays live until then); the
        // dependency arrays hold nodes of this graph; on an error `g`'s Drop destroys what
        // was made.
        unsafe {
            dev.primary.current()?;
            let mut g = CudaGraph {
                graph: null_mut(),
                exec: null_mut(),
                primary: dev.primary.clone(),
                _alive: KeepAlive::of(steps),
            };
            sys::cuGraphCreate(&mut g.graph, 0).result().map_err(driver("cuGraphCreate"))?;
            // Each step's nodes (a fill may have two; a later step depends on all), and
            // whether it is a kernel node.
            let mut nodes: Vec<Vec<sys::CUgraphNode>> = Vec::with_capacity(steps.len());
            let mut kernel: Vec<bool> = Vec::with_capacity(steps.len());
            for (st, node_in) in steps.iter().zip(nodes_in) {
                let waits = matches!(node_in, NodeIn::Kernel(.., true));
                kernel.push(matches!(node_in, NodeIn::Kernel(..)));
                // The edges from kernel nodes into a kernel that waits are added after the
                // node, programmatic; the others with it.
                let (early_deps, deps): (Vec<usize>, Vec<usize>) =
                    st.after().iter().partition(|&&j| waits && kernel[j]);
                let early_deps: Vec<sys::CUgraphNode> =
                    early_deps.iter().flat_map(|&j| nodes[j].iter().copied()).collect();
                let deps: Vec<sys::CUgraphNode> =
                    deps.iter().flat_map(|&j| nodes[j].iter().copied()).collect();
                let deps_ptr = if deps.is_empty() { std::ptr::null() } else { deps.as_ptr() };
                let mut made = Vec::new();
                let mut node: sys::CUgraphNode = null_mut();
                match node_in {
                    NodeIn::Empty => {
                        // Runs nothing, but still orders what depends on it.
                        sys::cuGraphAddEmptyNode(&mut node, g.graph, deps_ptr, deps.len())
                            .result()
                            .map_err(driver("cuGraphAddEmptyNode"))?;
                        made.push(node);
                    }
                    NodeIn::Kernel(func, (grid, block), shared, mut params, _) => {
                        let kparams = params.pointers();
                        let mut p: sys::CUDA_KERNEL_NODE_PARAMS = std::mem::zeroed();
                        p.func = func;
                        (p.gridDimX, p.gridDimY, p.gridDimZ) = (grid[0], grid[1], grid[2]);
                        (p.blockDimX, p.blockDimY, p.blockDimZ) = (block[0], block[1], block[2]);
                        p.sharedMemBytes = shared;
                        p.kernelParams = kparams.as_mut_ptr();
                        p.extra = null_mut();
                        sys::cuGraphAddKernelNode_v2(&mut node, g.graph, deps_ptr, deps.len(), &p)
                            .result()
                            .map_err(driver("cuGraphAddKernelNode"))?;
                        made.push(node);
                        if !early_deps.is_empty() {
                            let to = vec![node; early_deps.len()];
                            let edges = vec![PROGRAMMATIC_EDGE; early_deps.len()];
                            sys::cuGraphAddDependencies_v2(
                                g.graph,
                                early_deps.as_ptr(),
                                to.as_ptr(),
                                edges.as_ptr(),
                                early_deps.len(),
                            )
                            .result()
                            .map_err(driver("cuGraphAddDependencies"))?;
                        }
                    }
                    NodeIn::Copy { src, dst, bytes } => {
                        // Spelled out field by field: `CUmemorytype` has no zero value, so
                        // a zeroed struct would be undefined behaviour (Rust aborts on it).
                        let p = sys::CUDA_MEMCPY3D {
                            srcXInBytes: 0,
                            srcY: 0,
                            srcZ: 0,
                            srcLOD: 0,
                            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                            srcHost: std::ptr::null(),
                            srcDevice: src,
                            srcArray: null_mut(),
                            reserved0: null_mut(),
                            srcPitch: 0,
                            srcHeight: 0,
                            dstXInBytes: 0,
                            dstY: 0,
                            dstZ: 0,
                            dstLOD: 0,
                            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                            dstHost: null_mut(),
                            dstDevice: dst,
                            dstArray: null_mut(),
                            reserved1: null_mut(),
                            dstPitch: 0,
                            dstHeight: 0,
                            WidthInBytes: bytes,
                            Height: 1,
                            Depth: 1,
                        };
                        let ctx = dev.primary.ctx;
                        sys::cuGraphAddMemcpyNode(
                            &mut node,
                            g.graph,
                            deps_ptr,
                            deps.len(),
                            &p,
                            ctx,
                        )
                        .result()
                        .map_err(driver("cuGraphAddMemcpyNode"))?;
                        made.push(node);
                    }
                    NodeIn::Fill(ms) => {
                        for m in ms {
                            let ctx = dev.primary.ctx;
                            sys::cuGraphAddMemsetNode(
                                &mut node,
                                g.graph,
                                deps_ptr,
                                deps.len(),
                                &m,
                                ctx,
                            )
                            .result()
                            .map_err(driver("cuGraphAddMemsetNode"))?;
                            made.push(node);
                        }
                    }
                }
                nodes.push(made);
            }
            sys::cuGraphInstantiateWithFlags(&mut g.exec, g.graph, 0)
                .result()
                .map_err(driver("cuGraphInstantiate"))?;
            Ok(g)
        }
    })
}
