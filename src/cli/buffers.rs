//! The one place the CLI moves element bytes into and out of interpreter buffers.
//!
//! Written against `kiln_ir::interp::Buffer::from_bytes(elem, Vec<u8>)` and
//! `Buffer::as_bytes(&self) -> &[u8]` (little-endian elements).

use kiln::ir::interp::Buffer;
use kiln::ir::Scalar;

/// A buffer of `elem`s holding `bytes` (little-endian, a whole number of elements).
pub fn new_buffer(elem: Scalar, bytes: Vec<u8>) -> Buffer {
    debug_assert_eq!(bytes.len() % elem.size_bytes(), 0);
    Buffer::from_bytes(elem, bytes)
}

/// A buffer's elements as little-endian bytes.
pub fn contents(buf: &Buffer) -> &[u8] {
    buf.as_bytes()
}

// TEMPORARY stand-in, until the interpreter that provides `Buffer::from_bytes` and
// `Buffer::as_bytes` is merged. Inherent methods take precedence over trait methods, so once
// the real ones exist the calls above resolve to them and this trait becomes dead code (the
// `dead_code` warning is the reminder to delete it). The stub `Buffer` exposes no way to set or
// read its contents, so only all-zero contents can be made here.
trait StubBufferBytes {
    fn from_bytes(elem: Scalar, data: Vec<u8>) -> Buffer;
    fn as_bytes(&self) -> &[u8];
}

impl StubBufferBytes for Buffer {
    fn from_bytes(elem: Scalar, data: Vec<u8>) -> Buffer {
        assert!(
            data.iter().all(|&b| b == 0),
            "this build's interpreter has no Buffer::from_bytes: only zeros:N buffers work"
        );
        Buffer::zeroed(elem, data.len() / elem.size_bytes())
    }

    fn as_bytes(&self) -> &[u8] {
        panic!("this build's interpreter has no Buffer::as_bytes")
    }
}
