//! What a kernel needs of a target's fixed resources (parameter space, shared and private
//! memory), so each backend and device can check its own limits before emitting or
//! building, and refuse by name instead of emitting output the target's assembler rejects,
//! truncating a size, or crashing a driver.
//!
//! Sizes are summed in `u64`: a kernel's declared arrays may exceed `u32` in total (each
//! array's element count is a `u32`), and that must be refused, never wrapped.

use kiln_ir::visit::{walk_stmt, Visitor};
use kiln_ir::{AddrSpace, Expr, Kernel, Stmt, StmtNode};

/// The resources a kernel asks for, from its signature and its array declarations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Parameters, pointers and scalars together.
    pub params: usize,
    /// Pointer parameters (each a buffer binding).
    pub buffers: usize,
    /// Bytes of `local` arrays: shared by a work-group.
    pub local_bytes: u64,
    /// Bytes of `private` arrays, each work-item's own: the sum over every declaration
    /// (an upper bound where two are never live together).
    pub private_bytes: u64,
}

impl Footprint {
    /// The footprint of `kernel`.
    pub fn of(kernel: &Kernel) -> Footprint {
        let mut arrays = Arrays::default();
        arrays.visit_stmt(kernel.body());
        let buffers = kernel.params().iter().filter(|p| p.ty().is_ptr()).count();
        Footprint {
            params: kernel.params().len(),
            buffers,
            local_bytes: arrays.local,
            private_bytes: arrays.private,
        }
    }
}

#[derive(Default)]
struct Arrays {
    local: u64,
    private: u64,
}

impl Visitor for Arrays {
    // Arrays are statements: the expressions need no walk.
    fn visit_expr(&mut self, _: &Expr) {}

    fn visit_stmt(&mut self, s: &Stmt) {
        if let StmtNode::Alloc { var, count } = s.node() {
            // `bool` elements are stored as bytes by every backend.
            let size = var.ty().elem().map_or(1, |e| e.size_bytes().max(1)) as u64;
            let bytes = size * (*count).max(1) as u64;
            match var.ty().addr_space() {
                Some(AddrSpace::Local) => self.local += bytes,
                _ => self.private += bytes,
            }
        }
        walk_stmt(self, s)
    }
}

/// The one message shape for an exceeded limit: what the kernel needs, the limit's value and
/// whose limit it is (`"the device's"`, `"PTX's"`, ...), so every target reads alike.
pub fn exceeded(what: &str, need: u64, limit: u64, whose: &str) -> String {
    format!("{what} ({need}) exceeds {whose} limit of {limit}")
}
