//! CUDA graphs: a command graph's device partition recorded once through the driver API
//! (`cuGraphCreate`, one kernel node per launch with edges from its dependencies,
//! `cuGraphInstantiate`) and replayed with one `cuGraphLaunch`.

use std::ptr::null_mut;

use cudarc::driver::{result, sys};

use super::{check_args, device_ptrs, driver, guarded, launch_shape, CudaDevice, CudaKernel};
use super::{Params, Primary};
use crate::device::{handle_as, Handle, Memory, RecordLaunch, Recording};
use crate::error::DeviceError;
use kiln_ir::Scalar;
use std::sync::Arc;

/// An instantiated CUDA graph and what its nodes point into.
pub(super) struct CudaGraph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    primary: Arc<Primary>,
    /// The kernels (their modules stay loaded) and the buffers' memory (their addresses
    /// are baked into the nodes).
    _kernels: Vec<Handle>,
    _mems: Vec<Memory>,
}

// The graph handles are used only with their context made current on the calling thread,
// and one replay at a time (a command graph's runs are ordered).
unsafe impl Send for CudaGraph {}
unsafe impl Sync for CudaGraph {}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        let _ = guarded(|| {
            // SAFETY: destroys what `record` made, in its retained context; no replay is
            // running (replays wait for the graph to finish).
            unsafe {
                let _ = self.primary.current();
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
    fn replay(&self) -> Result<(), DeviceError> {
        guarded(|| {
            // SAFETY: an instantiated graph of the retained context, made current first;
            // every pointer its nodes hold is kept alive by `self`. The launch is waited for.
            unsafe {
                self.primary.current()?;
                sys::cuGraphLaunch(self.exec, null_mut())
                    .result()
                    .map_err(driver("cuGraphLaunch"))?;
                result::ctx::synchronize().map_err(driver("graph execution"))
            }
        })
    }
}

/// Records `launches` as one CUDA graph. Every launch is checked first as
/// [`crate::Device::run_resident`] checks it, so a bad one fails before any driver call.
pub(super) fn record(
    dev: &CudaDevice,
    launches: &[RecordLaunch],
) -> Result<CudaGraph, DeviceError> {
    let mut nodes_in = Vec::with_capacity(launches.len());
    for (i, l) in launches.iter().enumerate() {
        let k = handle_as::<CudaKernel>(&l.kernel, "kernel")?;
        let shape = launch_shape(&k.signature, &l.range)?;
        let elems: Vec<Scalar> = l.buffers.iter().map(|b| b.elem).collect();
        let scalars = check_args(&k.signature, &l.args, &elems)?;
        let ptrs = device_ptrs(&l.buffers)?;
        if let Some(&j) = l.after.iter().find(|&&j| j >= i) {
            return Err(DeviceError::Launch(format!(
                "CUDA graph: launch {i} is to run after launch {j}, which is not before it"
            )));
        }
        nodes_in.push((k.func, shape, Params { scalars, ptrs }));
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
                _kernels: launches.iter().map(|l| l.kernel.clone()).collect(),
                _mems: launches
                    .iter()
                    .flat_map(|l| l.buffers.iter().map(|b| b.mem.clone()))
                    .collect(),
            };
            sys::cuGraphCreate(&mut g.graph, 0).result().map_err(driver("cuGraphCreate"))?;
            let mut nodes: Vec<sys::CUgraphNode> = Vec::with_capacity(launches.len());
            for (l, (func, (grid, block), mut params)) in launches.iter().zip(nodes_in) {
                let deps: Vec<sys::CUgraphNode> = l.after.iter().map(|&j| nodes[j]).collect();
                let deps_ptr = if deps.is_empty() { std::ptr::null() } else { deps.as_ptr() };
                let mut node: sys::CUgraphNode = null_mut();
                if grid.contains(&0) {
                    // An empty nd-range runs nothing, but still orders what depends on it.
                    sys::cuGraphAddEmptyNode(&mut node, g.graph, deps_ptr, deps.len())
                        .result()
                        .map_err(driver("cuGraphAddEmptyNode"))?;
                } else {
                    let mut kparams = params.pointers(&l.args, &l.range);
                    let mut p: sys::CUDA_KERNEL_NODE_PARAMS = std::mem::zeroed();
                    p.func = func;
                    (p.gridDimX, p.gridDimY, p.gridDimZ) = (grid[0], grid[1], grid[2]);
                    (p.blockDimX, p.blockDimY, p.blockDimZ) = (block[0], block[1], block[2]);
                    p.sharedMemBytes = 0;
                    p.kernelParams = kparams.as_mut_ptr();
                    p.extra = null_mut();
                    sys::cuGraphAddKernelNode_v2(&mut node, g.graph, deps_ptr, deps.len(), &p)
                        .result()
                        .map_err(driver("cuGraphAddKernelNode"))?;
                }
                nodes.push(node);
            }
            sys::cuGraphInstantiateWithFlags(&mut g.exec, g.graph, 0)
                .result()
                .map_err(driver("cuGraphInstantiate"))?;
            Ok(g)
        }
    })
}
