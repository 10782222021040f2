//! A generated kernel built in process is the kernel its printed text parses to: the `-O`
//! pipeline and the backends give the same output for both. In process, the generator shares
//! node handles that the parser makes one per occurrence (`ix::c` hands out one handle per
//! constant value, an unrolled loop's copies share their statements), and nothing may read
//! that sharing as meaning: `kiln gen | kiln emit -O` and a program that generates and builds
//! in one process must get the same code.

use kiln_backends::{ptx, x86};
use kiln_gen::{GemmConfig, GemmProblem};
use kiln_ir::{parse_module, Kernel, Scalar};
use kiln_passes::pipeline::optimize;

/// The kernel `k`'s text parses to.
fn reparsed(k: &Kernel) -> Kernel {
    parse_module(&k.to_string()).expect("the generated text parses").kernels.remove(0)
}

#[test]
fn generated_kernels_build_as_their_text_does() {
    let square =
        GemmProblem { m: 256, n: 256, k: 256, trans_a: false, trans_b: false, ty: Scalar::F32 };
    let odd = GemmProblem { m: 100, n: 60, k: 36, trans_a: true, trans_b: false, ty: Scalar::F32 };
    #[allow(clippy::needless_update)]
    let tuned = GemmConfig {
        wg_m: 16,
        wg_n: 8,
        tm: 8,
        tn: 16,
        k_tile: 8,
        slm_depth: 2,
        unroll: true,
        vec: 4,
        ..GemmConfig::default()
    };
    let cases = [(square, tuned), (square, GemmConfig::default()), (odd, GemmConfig::default())];
    for (problem, cfg) in cases {
        let k = problem.generate(&cfg).expect("generates").kernel;
        let text = reparsed(&k);
        let (opt, opt_text) = (optimize(&k), optimize(&text));
        assert_eq!(opt.to_string(), opt_text.to_string(), "-O of {cfg}");
        let opts = ptx::Options::sm(90);
        let emit = |k: &Kernel| ptx::emit_kernel(k, &opts).expect("emits");
        assert_eq!(emit(&opt), emit(&opt_text), "PTX of {cfg}");
        let x = x86::X86Options::default();
        let code = |k: &Kernel| x86::compile(k, &x).expect("compiles").disassemble();
        assert_eq!(code(&opt), code(&opt_text), "x86 code of {cfg}");
    }
}
