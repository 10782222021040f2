//! The disassembly `kiln emit --target x86` prints: iced-x86's Intel formatter, one block per
//! region, each IR statement as a comment above the code it became.

use iced_x86::{Decoder, DecoderOptions, Formatter, IntelFormatter};

/// Formats `code` (assembled at address 0), inserting `marks` (code offset, comment line).
pub(crate) fn disassemble(code: &[u8], marks: &[(u32, String)], name: &str) -> String {
    let mut out =
        format!("; kernel `{name}`: {} bytes of x86-64\n; region 0 (entry)\n", code.len());
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut fmt = IntelFormatter::new();
    let mut text = String::new();
    let mut m = 0;
    while decoder.can_decode() {
        let ins = decoder.decode();
        let ip = ins.ip() as u32;
        while m < marks.len() && marks[m].0 <= ip {
            out.push_str(&marks[m].1);
            out.push('\n');
            m += 1;
        }
        text.clear();
        fmt.format(&ins, &mut text);
        out.push_str(&format!("  {ip:06x}  {text}\n"));
    }
    out
}
