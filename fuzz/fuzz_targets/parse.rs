//! Arbitrary bytes into the parser and verifier: no input may panic. Whatever parses must
//! print to text that parses back to an equal module, and printing that is a fixed point.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    if let Err(diags) = kiln_ir::check_source("fuzz.kir", src) {
        for d in diags {
            let _ = d.to_string();
        }
    }
    let module = match kiln_ir::parse_module(src) {
        Ok(m) => m,
        Err(d) => {
            let _ = d.to_string();
            return;
        }
    };
    let text = module.to_string();
    let again = kiln_ir::parse_module(&text)
        .unwrap_or_else(|d| panic!("printed module does not parse:\n{d}\n--- printed:\n{text}"));
    assert!(
        again.is_equal(&module),
        "print/parse changed the module\n--- input:\n{src}\n--- printed:\n{text}\n--- reprinted:\n{again}"
    );
    assert_eq!(again.to_string(), text, "printing is not a fixed point");
});
