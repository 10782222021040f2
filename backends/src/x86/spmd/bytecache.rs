//! Byte loads in loops served from the dwords an earlier trip gathered: a search loop's
//! `text[base + k]` (`while k < len && !found`), each lane walking its own record one byte
//! per trip. A byte gather (`gather8.rs`) already reads the 4-byte-aligned dword around
//! each lane's byte; here, in a loop that writes no memory, each load site keeps the
//! dwords of its last gather and their offsets in two vector frame slots, and a trip whose
//! active lanes all want a byte of the dword they hold takes it from there (one compare and
//! a test) instead of gathering again: with the records' bases 4-byte aligned, three trips
//! in four. A trip where some lane wants another dword gathers as before and keeps the new
//! dwords and offsets in the gathering lanes. Without it each trip's gather sat on the
//! chain from one trip's match to the next trip's mask, and strfind ran at 0.14x the
//! scalar loop.
//!
//! Exactness. Every access is still checked before (faults, their lanes and order, as
//! the interpreter's), so the cache only replaces where the active lanes' in-bounds bytes
//! come from. A cached dword is what memory held when it was gathered, and it still holds
//! it: the loop (its condition, body and nested loops) has no store, atomic, barrier or
//! array of its own, so nothing this batch runs writes memory between the gather and the
//! reuse, and a write by another work-item to a byte this one reads, with no barrier
//! between, is a race, whose result is undefined. The offsets slot starts each entry of
//! the loop at `i32::MIN`, which no offset equals (an offset is an in-bounds index minus
//! at most 3, and lengths are below 2^31), so no dword from before the entry — memory
//! this batch may since have written — is reused. Inactive lanes get 0, as from a gather.

use iced_x86::code_asm::*;
use kiln_ir::{walk_expr, walk_stmt, Expr, ExprNode, Stmt, StmtNode, Visitor};

use super::narrow::narrow;
use super::{R, V, YMM};

/// The offset no cached dword has (see the module's notes).
const EMPTY: u32 = 0x8000_0000;

/// The byte-load sites of the loop being generated that keep their last gather.
pub(super) struct ByteCache {
    /// Per site: the table, the index, the slot of the cached dwords' offsets from the
    /// table's base, the slot of the dwords.
    sites: Vec<(u32, Expr, i32, i32)>,
    /// A slot keeping a refilling gather's lane mask (the gather clears its register).
    mask: i32,
}

/// What a loop holds that decides whether its byte loads can keep their dwords.
#[derive(Default)]
struct Scan {
    /// A statement that writes memory or declares an array.
    writes: bool,
    /// The 8-bit loads: buffer and index.
    loads: Vec<(kiln_ir::Var, Expr)>,
}

impl Visitor for Scan {
    fn visit_stmt(&mut self, s: &Stmt) {
        if matches!(
            s.node(),
            StmtNode::Store { .. }
                | StmtNode::VecStore { .. }
                | StmtNode::Call { .. }
                | StmtNode::Alloc { .. }
        ) {
            self.writes = true;
        }
        walk_stmt(self, s)
    }

    fn visit_expr(&mut self, e: &Expr) {
        if let ExprNode::Load { buf, index } = e.node() {
            if narrow(e.ty()).is_some_and(|(bits, _)| bits == 8)
                && !self.loads.iter().any(|(b, i)| b == buf && i == index)
            {
                self.loads.push((buf.clone(), index.clone()));
            }
        }
        walk_expr(self, e)
    }
}

impl V {
    /// At the entry of loop `s` (a `while` or `for`), outside any loop that already keeps
    /// its byte loads' dwords: if the loop writes no memory and loads bytes of buffers, a
    /// pair of slots per load site, their offsets emptied here. True if it opened a cache,
    /// which [`V::close_byte_cache`] ends after the loop.
    pub(super) fn open_byte_cache(&mut self, s: &Stmt) -> R<bool> {
        if self.byte_cache.is_some() {
            return Ok(false);
        }
        let mut scan = Scan::default();
        scan.visit_stmt(s);
        let sites: Vec<(u32, Expr)> = scan
            .loads
            .into_iter()
            .filter_map(|(buf, index)| Some((self.buf(&buf)?, index)))
            .collect();
        if scan.writes || sites.is_empty() {
            return Ok(false);
        }
        let empty = self.imm_slot(EMPTY);
        self.a.vmovups(ymm0, ymmword_ptr(r15 + empty))?;
        let mut cache = ByteCache { sites: Vec::new(), mask: self.slot() };
        for (t, index) in sites {
            let (off, dwords) = (self.slot(), self.slot());
            self.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
            cache.sites.push((t, index, off, dwords));
        }
        self.byte_cache = Some(cache);
        Ok(true)
    }

    /// Ends the cache [`V::open_byte_cache`] opened (`opened`) after its loop.
    pub(super) fn close_byte_cache(&mut self, opened: bool) {
        if opened {
            self.byte_cache = None;
        }
    }

    /// The bytes of table `t` at `index` (the byte offsets in `ymm{d}`, in bounds in the
    /// lanes of the mask in `ymm{d+1}`) from `base` into `ymm{d}`, as
    /// [`V::gather_bytes`] gives them, from the site's cached dwords where every active
    /// lane's is there. False (nothing emitted) if the site keeps no dwords.
    pub(super) fn cached_bytes(
        &mut self,
        base: AsmRegister64,
        t: u32,
        index: &Expr,
        d: usize,
        signed: bool,
    ) -> R<bool> {
        let Some(cache) = &self.byte_cache else { return Ok(false) };
        let Some(&(_, _, off, dwords)) =
            cache.sites.iter().find(|(tab, at, ..)| *tab == t && at == index)
        else {
            return Ok(false);
        };
        let keep = cache.mask;
        let (x, m, w) = (YMM[d], YMM[d + 1], YMM[d + 2]);
        self.byte_places(base, d)?;
        // Every active lane's dword cached: no lane of m where the offsets differ (ZF).
        // (The test flips `x` in place; the refill flips it back.)
        let mut hit = self.a.create_label();
        let mut done = self.a.create_label();
        self.a.vpxor(x, x, ymmword_ptr(r15 + off))?;
        self.a.vptest(x, m)?;
        self.a.je(hit)?;
        self.a.vpxor(x, x, ymmword_ptr(r15 + off))?;
        // Refill: the active lanes' offsets and gathered dwords replace theirs.
        self.byte_shifts(d)?;
        self.a.vmovups(w, ymmword_ptr(r15 + off))?;
        self.a.vblendvps(w, w, x, m)?;
        self.a.vmovups(ymmword_ptr(r15 + off), w)?;
        self.a.vmovups(ymmword_ptr(r15 + keep), m)?;
        self.a.vpxor(w, w, w)?;
        self.a.vpgatherdd_3(w, ymmword_ptr(base + x), m)?;
        self.a.vmovups(x, ymmword_ptr(r15 + keep))?;
        self.a.vmovups(m, ymmword_ptr(r15 + dwords))?;
        self.a.vblendvps(m, m, w, x)?;
        self.a.vmovups(ymmword_ptr(r15 + dwords), m)?;
        self.a.vpsrlvd(x, w, ymmword_ptr(r15 + self.tmp_v))?;
        self.a.jmp(done)?;
        // A hit: the shifts stay in `w` (no round trip through the frame on the chain from
        // one trip's counter to the next).
        self.bind(&mut hit)?;
        self.a.vpslld(w, w, 3)?;
        self.a.vpand(x, m, ymmword_ptr(r15 + dwords))?;
        self.a.vpsrlvd(x, x, w)?;
        self.bind(&mut done)?;
        self.byte_extend(d, signed)?;
        Ok(true)
    }
}
