//! A compiled program as bytes, for a persistent cache: the machine code, its (empty)
//! relocation list, the CPU features it needs, and the tables a launch and its error
//! messages use (frame layout, memory table, fault sites, disassembly comments).
//!
//! **No relocations.** The code holds no absolute address: branches are `rel32` (the
//! encoder refuses anything else, RIP-relative operands included), runtime helpers are
//! called through the table in the run's context (`Ctx::helpers`), buffers and arrays are
//! reached through the context's memory table, and the lane-index constant of the vector
//! code lives in the vector frame. So the bytes run wherever they are mapped, and the
//! relocation list every code blob carries is empty; a loader refuses a non-empty one
//! (no producer makes them, so there is nothing it could correctly apply).
//!
//! **Both codes.** An image always carries the scalar code, even for a kernel with vector
//! code whose scalar code would otherwise be compiled at its first launch that needs it:
//! a loaded program has no kernel body to compile from, and it compiles nothing.
//!
//! Layout, little-endian; strings and byte strings as (u32 len, bytes):
//!
//! ```text
//! "KX86IMG9"  u64 checksum (FNV-1a 64 of everything after it)
//!             str kernel name; u32 params; u8 checked
//!             u32 features, each str                 (CPU features the code needs)
//!             u32 param slots, each i32 (i32::MIN: none)
//!             scalar code: bytes code; u32 relocations (0); mems; sites;
//!                          u64 frame_bytes; u64 local_bytes; u32 barriers;
//!                          u32 marks, each (u32 offset, str comment)
//!             u8 has vector code, then: bytes code; u32 relocations (0);
//!                          u64 vframe_bytes; u32 accessed, each u32; mems; u64 frame_bytes;
//!                          sites; u8 per_group; u8 rows; u64 local_bytes; u32 barriers;
//!                          u8 has region code, then the same fields again (its own
//!                          region flag 0)
//!             u8 has a reason for no vector code, then: str reason
//!             u32 summed parameters, each u32 (see `sums.rs`); u8 atomics only on them
//!             u8 counts straight into a buffer (`spmd/counted.rs`), then: u32 parameter;
//!                          u32 bins; bytes the counting program's own image
//!             u8 has the kernel's text, then: str the compiled kernel as `.kir` (a kernel
//!                          with region-loop code that fixes no group size and whose text is
//!                          all of it: no fault site named apart from its text), which a
//!                          launch's group size is compiled from ([`X86Program::for_group`])
//! mems:  u32 n, each: str name; u8 elem (index in Scalar::ALL);
//!        u8 0, u32 table index | u8 1, i32 frame offset, u32 count;
//!        u8 0 | u8 1, u32 parameter;  u8 0 | u8 1, u64 local offset, u32 count
//! sites: u32 n, each: u8 0, str access, u32 mem, u8 signed | u8 1, u8 rem, str expr
//!                   | u8 2, str var, u8 signed
//! ```
//!
//! Decoding checks the checksum first (a damaged image is refused before any of its code
//! is mapped), then every length and every index the launch code uses against the
//! tables it indexes: a bad image is an error, never a panic or a wild access. The
//! checksum guards against damage, not against someone who can write the cache directory
//! (who could as well replace the program using it).

use std::sync::OnceLock;

use kiln_ir::{AtomicOp, Kernel, Scalar, Stmt};

use super::gen::{Mark, MemInfo, MemKind, Site};
use super::rt::ExecCode;
use super::{ScalarCode, SpmdCode, X86Error, X86Program};

/// The image format; bumped whenever the code's contract with the driver changes (3: the
/// 8-lane code of kernels with barriers runs a row of batches per call; 4: a division site
/// holds its whole name, backticks included, since a lane's is ``a lane of `e` ``; 5: vector code
/// of kernels with barriers may carry region-loop code; 6: the parameters summed per thread
/// follow, as a loaded program has no body to find them in; 7: the program counting straight
/// into a buffer follows; 8: the kernel's text may follow), so that an older
/// cached image is refused rather than run by a driver that expects other code.
const MAGIC: &[u8; 8] = b"KX86IMG9";
/// The largest table size or byte count an image may declare (far above any real one).
const MAX_BYTES: u64 = 1 << 30;

/// FNV-1a, 64 bits: enough to catch damage, and needs no dependency.
fn checksum(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    /// Vector code, then its region code (see the layout above).
    fn spmd(&mut self, v: &SpmdCode) {
        self.bytes(v.code.bytes());
        self.u32(0);
        self.u64(v.vframe_bytes as u64);
        self.u32(v.accessed.len() as u32);
        v.accessed.iter().for_each(|&a| self.u32(a));
        self.mems(&v.mems);
        self.u64(v.frame_bytes as u64);
        self.sites(&v.sites);
        self.u8(v.per_group as u8);
        self.u8(v.rows as u8);
        self.u64(v.local_bytes as u64);
        self.u32(v.n_barriers);
        self.opt(v.regions.as_deref(), |w, v| w.spmd(v));
    }
    fn opt<T>(&mut self, v: Option<T>, f: impl FnOnce(&mut W, T)) {
        match v {
            Some(v) => {
                self.u8(1);
                f(self, v)
            }
            None => self.u8(0),
        }
    }
    fn mems(&mut self, mems: &[MemInfo]) {
        self.u32(mems.len() as u32);
        for m in mems {
            self.bytes(m.name.as_bytes());
            self.u8(Scalar::ALL.iter().position(|s| *s == m.elem).unwrap_or(0xff) as u8);
            match m.kind {
                MemKind::Table(t) => {
                    self.u8(0);
                    self.u32(t);
                }
                MemKind::Private { off, count } => {
                    self.u8(1);
                    self.u32(off as u32);
                    self.u32(count);
                }
            }
            self.opt(m.param, |w, p| w.u32(p as u32));
            self.opt(m.local, |w, (off, count)| {
                w.u64(off as u64);
                w.u32(count);
            });
        }
    }
    fn sites(&mut self, sites: &[Site]) {
        self.u32(sites.len() as u32);
        for s in sites {
            match s {
                Site::Access { what, mem, signed } => {
                    self.u8(0);
                    self.bytes(what.as_bytes());
                    self.u32(*mem);
                    self.u8(*signed as u8);
                }
                Site::Div { rem, expr } => {
                    self.u8(1);
                    self.u8(*rem as u8);
                    self.bytes(expr.as_bytes());
                }
                Site::ForStep { var, signed } => {
                    self.u8(2);
                    self.bytes(var.as_bytes());
                    self.u8(*signed as u8);
                }
                Site::Align { what, mem, lanes } => {
                    self.u8(3);
                    self.bytes(what.as_bytes());
                    self.u32(*mem);
                    self.u8(*lanes);
                }
            }
        }
    }
}

/// The access word generated code uses (`load`, `vector store`, an atomic's name), as the
/// static string sites hold.
fn access_word(what: &str) -> Res<&'static str> {
    ["load", "store", "vector load", "vector store"]
        .into_iter()
        .chain(AtomicOp::ALL.iter().map(|op| op.name()))
        .find(|w| *w == what)
        .ok_or(format!("unknown access `{what}`"))
}

/// A reader whose every read is bounds-checked.
struct R<'a>(&'a [u8]);

type Res<T> = Result<T, String>;

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Res<&'a [u8]> {
        if self.0.len() < n {
            return Err(format!("truncated: {n} bytes wanted, {} left", self.0.len()));
        }
        let (h, t) = self.0.split_at(n);
        self.0 = t;
        Ok(h)
    }
    fn u8(&mut self) -> Res<u8> {
        Ok(self.take(1)?[0])
    }
    fn flag(&mut self) -> Res<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!("bad flag byte {b}")),
        }
    }
    fn u32(&mut self) -> Res<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| "truncated")?))
    }
    fn u64(&mut self) -> Res<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| "truncated")?))
    }
    /// A count or size, refused above [`MAX_BYTES`].
    fn size(&mut self, what: &str) -> Res<usize> {
        let v = self.u64()?;
        if v > MAX_BYTES {
            return Err(format!("{what} of {v} bytes"));
        }
        Ok(v as usize)
    }
    fn bytes(&mut self) -> Res<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn str(&mut self) -> Res<String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|e| e.to_string())
    }
    fn mems(&mut self, params: usize) -> Res<Vec<MemInfo>> {
        let n = self.u32()?;
        let mut out = Vec::new();
        for _ in 0..n {
            let name = self.str()?;
            let e = self.u8()?;
            let elem = *Scalar::ALL.get(e as usize).ok_or(format!("bad element type {e}"))?;
            let kind = match self.u8()? {
                0 => {
                    let t = self.u32()?;
                    // The launch builds the table in this order (see the executor in kiln_runtime::device::cpu).
                    let next =
                        out.iter().filter(|m: &&MemInfo| matches!(m.kind, MemKind::Table(_)));
                    if t as usize != next.count() {
                        return Err(format!("`{name}`: table entry {t} out of order"));
                    }
                    MemKind::Table(t)
                }
                1 => MemKind::Private { off: self.u32()? as i32, count: self.u32()? },
                b => return Err(format!("`{name}`: bad memory kind {b}")),
            };
            let param = if self.flag()? { Some(self.u32()? as usize) } else { None };
            if param.is_some_and(|p| p >= params) {
                return Err(format!("`{name}`: parameter {param:?} of {params}"));
            }
            let local =
                if self.flag()? { Some((self.size("local offset")?, self.u32()?)) } else { None };
            out.push(MemInfo { name, elem, kind, param, local });
        }
        Ok(out)
    }
    fn sites(&mut self, mems: usize) -> Res<Vec<Site>> {
        let n = self.u32()?;
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(match self.u8()? {
                0 => {
                    let what = access_word(&self.str()?)?;
                    let mem = self.u32()?;
                    if mem as usize >= mems {
                        return Err(format!("site names memory {mem} of {mems}"));
                    }
                    Site::Access { what, mem, signed: self.flag()? }
                }
                3 => {
                    let what = access_word(&self.str()?)?;
                    let mem = self.u32()?;
                    if mem as usize >= mems {
                        return Err(format!("site names memory {mem} of {mems}"));
                    }
                    Site::Align { what, mem, lanes: self.u8()? }
                }
                1 => Site::Div { rem: self.flag()?, expr: self.str()? },
                2 => Site::ForStep { var: self.str()?, signed: self.flag()? },
                b => return Err(format!("bad site kind {b}")),
            });
        }
        Ok(out)
    }
    fn code(&mut self) -> Res<ExecCode> {
        let code = self.bytes()?;
        let relocs = self.u32()?;
        if relocs != 0 {
            return Err(format!(
                "{relocs} relocations: this backend's code is position-independent and no \
                 loader applies relocations"
            ));
        }
        ExecCode::new(code).map_err(|e| e.to_string())
    }
}

/// The frame size checks a launch relies on: whole words, at least one, and every scalar
/// parameter's slot inside it.
fn check_frame(frame_bytes: usize, slots: &[Option<i32>]) -> Res<()> {
    if frame_bytes == 0 || !frame_bytes.is_multiple_of(8) {
        return Err(format!("frame of {frame_bytes} bytes"));
    }
    match slots.iter().flatten().find(|&&s| s < 0 || s % 8 != 0 || s as usize + 8 > frame_bytes) {
        Some(s) => Err(format!("parameter slot {s} outside a frame of {frame_bytes} bytes")),
        None => Ok(()),
    }
}

/// Memory bound to a parameter is bound to a pointer parameter.
fn check_params(mems: &[MemInfo], sig: &Kernel) -> Res<()> {
    for m in mems {
        let Some(p) = m.param else { continue };
        if !matches!(sig.params()[p].ty(), kiln_ir::Type::Ptr(..)) {
            return Err(format!("memory `{}` bound to scalar parameter {p}", m.name));
        }
    }
    Ok(())
}

/// Each local array within the local block.
fn check_locals(mems: &[MemInfo], local_bytes: usize) -> Res<()> {
    for m in mems {
        if let Some((off, count)) = m.local {
            let end = off as u64 + count as u64 * m.elem.size_bytes() as u64;
            if end > local_bytes as u64 {
                return Err(format!("local array `{}` ends at {end}, past {local_bytes}", m.name));
            }
        }
    }
    Ok(())
}

impl X86Program {
    /// The CPU features the program's code needs beyond x86-64's baseline (SSE2): `avx2`
    /// when it has vector code, and `fma` when that has `fma` calls or `exp`, `log`, `sin`, `cos` (which use FMA).
    pub fn required_features(&self) -> Vec<&'static str> {
        match &self.spmd {
            Some(v) if v.fma => vec!["avx2", "fma"],
            Some(_) => vec!["avx2"],
            None => vec![],
        }
    }

    /// The program as bytes for [`X86Program::from_image`] (see the module docs of
    /// `image.rs` in the source for the layout): the scalar code (compiled now if it was not
    /// yet; an error if it cannot be), the vector code if any, an empty relocation list for
    /// each (the code is position-independent), the features it needs and its tables.
    pub fn to_image(&self) -> Result<Vec<u8>, crate::target::BackendError> {
        let sc = self.scalar().map_err(|e| e.into_backend(self.kernel.name()))?;
        let mut w = W(Vec::new());
        w.bytes(self.kernel.name().as_bytes());
        w.u32(self.kernel.params().len() as u32);
        w.u8(self.checked as u8);
        let features = self.required_features();
        w.u32(features.len() as u32);
        features.iter().for_each(|f| w.bytes(f.as_bytes()));
        w.u32(self.param_slots.len() as u32);
        self.param_slots.iter().for_each(|s| w.u32(s.unwrap_or(i32::MIN) as u32));
        w.bytes(sc.code.bytes());
        w.u32(0);
        w.mems(&sc.mems);
        w.sites(&sc.sites);
        w.u64(sc.frame_bytes as u64);
        w.u64(sc.local_bytes as u64);
        w.u32(sc.n_barriers);
        w.u32(sc.marks.len() as u32);
        for (off, m) in &sc.marks {
            w.u32(*off);
            w.bytes(m.to_string().as_bytes());
        }
        w.opt(self.spmd.as_ref(), |w, v| w.spmd(v));
        w.opt(self.no_spmd.as_ref(), |w, why| w.bytes(why.as_bytes()));
        let (summed, alone) = self.sums();
        w.u32(summed.len() as u32);
        summed.iter().for_each(|&p| w.u32(p as u32));
        w.u8(*alone as u8);
        let counted = match &self.counted {
            Some(c) => Some((c.param, c.bins, c.program.to_image()?)),
            None => None,
        };
        w.opt(counted, |w, (param, bins, image)| {
            w.u32(param as u32);
            w.u32(bins);
            w.bytes(&image);
        });
        let text = self.resizable_text();
        w.opt(text, |w, t| w.bytes(t.as_bytes()));
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&checksum(&w.0).to_le_bytes());
        out.extend_from_slice(&w.0);
        Ok(out)
    }

    /// A program from [`X86Program::to_image`]'s bytes, for the kernel `signature` (its
    /// name, parameters and attributes; the body is not needed and not kept: a loaded
    /// program compiles nothing, and [`X86Program::kernel`] returns the signature). The
    /// bytes are checked (checksum, then every length and table index), and the CPU must
    /// have every feature the code needs; the code is mapped writable, filled, then made
    /// executable. Any failure is an error naming it.
    pub fn from_image(
        signature: &Kernel,
        image: &[u8],
    ) -> Result<X86Program, crate::target::BackendError> {
        load(signature, image).map_err(|m| {
            X86Error::Unsupported(format!("cannot load the machine code image: {m}"))
                .into_backend(signature.name())
        })
    }
}

/// Whether this CPU has `feature`, one of the names [`X86Program::required_features`]
/// uses (`avx2`, `fma`); false for any other name and on other architectures.
pub fn cpu_has(feature: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        match feature {
            "avx2" => super::avx2(),
            "fma" => std::arch::is_x86_feature_detected!("fma"),
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = feature;
        false
    }
}

fn load(sig: &Kernel, image: &[u8]) -> Res<X86Program> {
    if !cfg!(target_arch = "x86_64") {
        return Err("this host is not x86-64".into());
    }
    let mut r = R(image);
    if r.take(MAGIC.len()).ok() != Some(&MAGIC[..]) {
        return Err("not an x86 code image (bad magic)".into());
    }
    let sum = r.u64()?;
    if checksum(r.0) != sum {
        return Err("checksum mismatch (damaged image)".into());
    }
    let name = r.str()?;
    let params = r.u32()? as usize;
    if name != sig.name() || params != sig.params().len() {
        return Err(format!(
            "image of kernel `{name}` with {params} parameters, for kernel `{}` with {}",
            sig.name(),
            sig.params().len()
        ));
    }
    let checked = r.flag()?;
    let mut fma = false;
    for _ in 0..r.u32()? {
        let f = r.str()?;
        if !cpu_has(&f) {
            return Err(format!("the code needs the CPU feature `{f}`, which this CPU lacks"));
        }
        fma |= f == "fma";
    }
    let n = r.u32()? as usize;
    if n != params {
        return Err(format!("{n} parameter slots for {params} parameters"));
    }
    let param_slots: Vec<Option<i32>> = (0..n)
        .map(|_| r.u32().map(|s| Some(s as i32).filter(|&s| s != i32::MIN)))
        .collect::<Res<_>>()?;
    // Scalar parameters only have slots, pointer ones only memory entries.
    for (p, s) in sig.params().iter().zip(&param_slots) {
        if s.is_some() != matches!(p.ty(), kiln_ir::Type::Scalar(_)) {
            return Err(format!("parameter `{}`: slot does not match its type", p.name()));
        }
    }
    let code = r.code()?;
    let mems = r.mems(params)?;
    check_params(&mems, sig)?;
    let sites = r.sites(mems.len())?;
    let frame_bytes = r.size("frame")?;
    let local_bytes = r.size("local block")?;
    let n_barriers = r.u32()?;
    check_frame(frame_bytes, &param_slots)?;
    check_locals(&mems, local_bytes)?;
    for m in &mems {
        if let MemKind::Private { off, count } = m.kind {
            let end = off as i64 + count as i64 * m.elem.size_bytes() as i64;
            if off < 0 || end > frame_bytes as i64 {
                return Err(format!("private array `{}` outside the frame", m.name));
            }
        }
    }
    let n_marks = r.u32()?;
    let mut marks = Vec::new();
    for _ in 0..n_marks {
        marks.push((r.u32()?, Mark::Text(r.str()?)));
    }
    let scalar = ScalarCode { code, mems, sites, frame_bytes, local_bytes, n_barriers, marks };
    let spmd = if r.flag()? {
        Some(read_spmd(&mut r, sig, params, &param_slots, fma, false)?)
    } else {
        None
    };
    let no_spmd = if r.flag()? { Some(r.str()?) } else { None };
    let mut summed = Vec::new();
    for _ in 0..r.u32()? {
        let p = r.u32()? as usize;
        let ok = sig.params().get(p).is_some_and(|x| {
            matches!(
                x.ty(),
                kiln_ir::Type::Ptr(kiln_ir::AddrSpace::Global, Scalar::I32 | Scalar::U32)
            )
        });
        if !ok || summed.contains(&p) {
            return Err(format!("summed parameter {p} is not a distinct 32-bit integer buffer"));
        }
        summed.push(p);
    }
    let alone = r.flag()?;
    let counted = if r.flag()? {
        let (param, bins) = (r.u32()? as usize, r.u32()?);
        let ok = sig.params().get(param).is_some_and(|x| {
            matches!(
                x.ty(),
                kiln_ir::Type::Ptr(kiln_ir::AddrSpace::Global, Scalar::I32 | Scalar::U32)
            )
        });
        if !ok || bins == 0 {
            return Err(format!("counted parameter {param} is not a 32-bit integer buffer"));
        }
        let program = load(sig, r.bytes()?).map_err(|m| format!("the counting program: {m}"))?;
        Some(Box::new(super::CountedCode { program, param, bins }))
    } else {
        None
    };
    // The kernel, where its text came along: a launch's group size is compiled from it.
    // (Without it, the signature alone: a body it came with is not this program's.)
    // (An image carries the text only for a program that may be resized.)
    let text = if r.flag()? { Some(kernel_of_text(sig, &r.str()?)?) } else { None };
    let resizable = text.is_some();
    let kernel = text.unwrap_or_else(|| {
        Kernel::with_attrs(sig.name(), sig.params().to_vec(), sig.attrs().clone(), Stmt::block([]))
    });
    if !r.0.is_empty() {
        return Err("trailing bytes".into());
    }
    let cell = OnceLock::new();
    let _ = cell.set(Ok(scalar));
    let sums = OnceLock::new();
    let _ = sums.set((summed, alone));
    Ok(X86Program {
        kernel,
        checked,
        param_slots,
        scalar: cell,
        spmd,
        no_spmd,
        sums,
        counted,
        fixed: Default::default(),
        resizable,
    })
}

/// The kernel of an image's text, as `sig` with the text's body: one kernel, verified, with
/// `sig`'s name and parameters and the attributes code generation reads (a fixed group
/// size, `#fast_math`) — an image for another signature is refused. (A signature keeps no
/// `#nd_range` or fusion record, which the x86 code does not read.)
fn kernel_of_text(sig: &Kernel, text: &str) -> Res<Kernel> {
    let m = kiln_ir::parse_module(text).map_err(|e| format!("the kernel's text: {e}"))?;
    let [k] = &m.kernels[..] else {
        return Err(format!("the kernel's text holds {} kernels", m.kernels.len()));
    };
    let (a, b) = (k.attrs(), sig.attrs());
    if k.name() != sig.name()
        || k.params() != sig.params()
        || a.reqd_work_group_size != b.reqd_work_group_size
        || a.fast_math != b.fast_math
    {
        return Err(format!("the kernel's text is not of `{}`'s signature", sig.name()));
    }
    kiln_ir::verify_kernel(k).map_err(|e| format!("the kernel's text does not verify: {e:?}"))?;
    Ok(Kernel::with_attrs(sig.name(), sig.params().to_vec(), b.clone(), k.body().clone()))
}

/// The vector code of an image (see the layout above); its region code follows it.
fn read_spmd(
    r: &mut R,
    sig: &Kernel,
    params: usize,
    param_slots: &[Option<i32>],
    fma: bool,
    nested: bool,
) -> Res<SpmdCode> {
    let code = r.code()?;
    let vframe_bytes = r.size("vector frame")?;
    if vframe_bytes < 32 {
        return Err(format!("vector frame of {vframe_bytes} bytes"));
    }
    let accessed: Vec<u32> = (0..r.u32()?).map(|_| r.u32()).collect::<Res<_>>()?;
    let mems = r.mems(params)?;
    check_params(&mems, sig)?;
    if mems.iter().any(|m| match m.kind {
        MemKind::Table(_) => m.param.is_none() == m.local.is_none(),
        // A private array holds eight lanes of each element in the vector frame.
        MemKind::Private { off, count } => {
            m.param.is_some()
                || m.local.is_some()
                || off < 0
                || off as u64 + count as u64 * 32 > vframe_bytes as u64
        }
    }) {
        return Err("vector code memory that is neither a buffer parameter, a local array \
             nor a private array in the vector frame"
            .into());
    }
    if let Some(a) = accessed.iter().find(|&&a| a as usize >= mems.len()) {
        return Err(format!("vector code accesses memory {a} of {}", mems.len()));
    }
    let frame_bytes = r.size("frame")?;
    check_frame(frame_bytes, param_slots)?;
    let sites = r.sites(mems.len())?;
    let per_group = r.flag()?;
    let rows = r.flag()?;
    let local_bytes = r.size("local arrays")?;
    let n_barriers = r.u32()?;
    if mems.iter().any(|m| {
        m.local.is_some_and(|(off, n)| off + n as usize * m.elem.size_bytes() > local_bytes)
    }) {
        return Err("vector code local array outside the local block".into());
    }
    if rows && n_barriers > 0 {
        return Err("vector code with barriers that runs every row of its group".into());
    }
    let regions = if r.flag()? {
        if nested || n_barriers == 0 {
            return Err("region code where there can be none".into());
        }
        Some(Box::new(read_spmd(r, sig, params, param_slots, fma, true)?))
    } else {
        None
    };
    Ok(SpmdCode {
        code,
        vframe_bytes,
        accessed,
        mems,
        frame_bytes,
        sites,
        per_group,
        local_bytes,
        n_barriers,
        fma,
        rows,
        regions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(src: &str) -> X86Program {
        let m = kiln_ir::parse_module(src).unwrap();
        super::super::compile(&m.kernels[0], &super::super::X86Options::default()).unwrap()
    }

    const SRC: &str = "kernel k(x: ptr<global, i32>, d: i32) {
        let i: u32 = global_id(0); x[i] = x[i] / d + x[i + 1]; }";

    /// Running a loaded program is the executor's test (runtime/tests/x86_image.rs); here,
    /// what it is made of.
    #[test]
    fn round_trip_keeps_both_codes_and_tables() {
        let vector = "kernel v(x: ptr<global, i32>, d: i32) {
            let i: u32 = global_id(0); x[i] = x[i] * d + 1; }";
        assert_eq!(program(vector).has_spmd(), cpu_has("avx2"));
        for src in [SRC, vector] {
            let p = program(src);
            let image = p.to_image().unwrap();
            let q = X86Program::from_image(p.kernel(), &image).unwrap();
            // Both codes are in the loaded program: it never compiles.
            assert!(q.scalar.get().is_some_and(|s| s.is_ok()));
            assert_eq!(q.code_bytes(), p.code_bytes());
            assert_eq!(q.has_spmd(), p.has_spmd());
            assert_eq!(q.required_features(), p.required_features());
            assert_eq!(q.disassemble(), p.disassemble());
            assert_eq!(q.param_slots(), p.param_slots());
        }
    }

    #[test]
    fn damaged_images_are_refused() {
        let p = program(SRC);
        let image = p.to_image().unwrap();
        for n in 0..image.len() {
            assert!(X86Program::from_image(p.kernel(), &image[..n]).is_err(), "cut at {n}");
        }
        for at in (0..image.len()).step_by(7) {
            let mut bad = image.clone();
            bad[at] ^= 0x40;
            let e = X86Program::from_image(p.kernel(), &bad).unwrap_err().to_string();
            assert!(e.contains("cannot load"), "{e}");
        }
        // Another kernel's signature, a nonzero relocation count (checksum made valid).
        let other = kiln_ir::parse_module("kernel j(x: ptr<global, i32>) {}").unwrap();
        let e = X86Program::from_image(&other.kernels[0], &image).unwrap_err().to_string();
        assert!(e.contains("image of kernel `k`"), "{e}");
    }

    /// Damage behind a valid checksum (as a buggy writer could make): every byte flipped
    /// and every value of the first bytes of the tables either loads or is an error, never a
    /// panic. (Only loaded, never run: a flipped code byte is just other code.)
    #[test]
    fn resealed_damage_never_panics() {
        let p = program(
            "kernel b(x: ptr<global, f32>, n: u32) { local t: f32[8]; private a: i32[3];
             let i: u32 = local_id(0); t[i] = x[global_id(0)]; barrier(local);
             a[1] = 2; x[global_id(0)] = t[7 - i] / n as f32 + (a[1] / n as i32) as f32; }",
        );
        let image = p.to_image().unwrap();
        let reseal = |mut b: Vec<u8>| {
            let sum = checksum(&b[16..]);
            b[8..16].copy_from_slice(&sum.to_le_bytes());
            b
        };
        let code_len = p.code_bytes().len();
        for at in 16..image.len() {
            for v in [image[at] ^ 0x01, image[at] ^ 0x80, 0, 0xff] {
                let mut bad = image.clone();
                bad[at] = v;
                let _ = X86Program::from_image(p.kernel(), &reseal(bad));
            }
        }
        assert!(code_len > 0);
        assert!(X86Program::from_image(p.kernel(), &reseal(image)).is_ok());
    }

    /// The code is position-independent: no RIP-relative operand (the encoder refuses
    /// them) and no 64-bit immediate or displacement that is a helper's address.
    #[test]
    fn code_holds_no_absolute_address() {
        let p = program(
            "kernel h(x: ptr<global, f32>, n: u32) { let i: u32 = global_id(0);
             var s: f32 = 0.0; for j: u32 in 0..n { s = s + sin(x[i]) + floor(x[j]); }
             x[i] = s; }",
        );
        let helpers = super::super::rt::helpers();
        let mut d = iced_x86::Decoder::new(64, p.code_bytes(), iced_x86::DecoderOptions::NONE);
        let mut n = 0;
        while d.can_decode() {
            let ins = d.decode();
            n += 1;
            assert!(!ins.is_ip_rel_memory_operand(), "{ins}");
            let imm = (0..ins.op_count())
                .filter(|&i| ins.op_kind(i) == iced_x86::OpKind::Immediate64)
                .map(|_| ins.immediate64());
            for v in imm.chain([ins.memory_displacement64()]) {
                assert!(!helpers.contains(&(v as usize)), "{ins} embeds a helper address");
            }
        }
        assert!(n > 20);
    }
}
