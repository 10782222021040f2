//! The one place the CLI moves element bytes into and out of interpreter buffers.

use kiln::ir::launch::Buffer;
use kiln::ir::Scalar;

/// A buffer of `elem`s holding `bytes` (little-endian, a whole number of elements).
pub fn new_buffer(elem: Scalar, bytes: Vec<u8>) -> Result<Buffer, String> {
    Buffer::from_bytes(elem, bytes).map_err(|e| e.to_string())
}

/// A buffer's elements as little-endian bytes.
pub fn contents(buf: &Buffer) -> &[u8] {
    buf.as_bytes()
}
