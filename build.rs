//! Writes the repository's documents as pages of the crate docs, their links rewritten for
//! rustdoc (see `build/doc_links.rs`): `OUT_DIR/README.md` (the front page, which src/lib.rs
//! includes), one page per document, and `OUT_DIR/guide.rs`, the `kiln::guide` module that
//! holds them.

use std::path::{Path, PathBuf};

#[path = "build/doc_links.rs"]
#[allow(dead_code)] // tests/docs.rs uses the rest
mod doc_links;

fn main() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    println!("cargo::rerun-if-changed=build/doc_links.rs");
    println!("cargo::rerun-if-changed=docs");
    println!("cargo::rerun-if-changed=examples/graph/chain.svg");
    let pages = doc_links::pages(&root);
    // The `guide` module's own page, then one module per other document.
    let (mut head, mut modules) = (String::new(), String::new());
    for page in &pages {
        println!("cargo::rerun-if-changed={}", page.file);
        let text = std::fs::read_to_string(root.join(&page.file)).unwrap_or_default();
        let (text, _) = doc_links::rewrite(&root, &page.file, &text, &pages);
        write(&out.join(&page.file), &text);
        let doc = format!("#[doc = include_str!(concat!(env!(\"OUT_DIR\"), \"/{}\"))]", page.file);
        if let Some(module) = page.item.strip_prefix("crate::guide::") {
            modules += &format!("    {doc}\n    pub mod {module} {{}}\n");
        } else if page.item == "crate::guide" {
            head = doc;
        }
    }
    // Only in the docs: the pages are documentation, not API.
    let guide = format!("{head}\n#[cfg(doc)]\npub mod guide {{\n{modules}}}\n");
    write(&out.join("guide.rs"), &guide);
}

fn write(path: &Path, text: &str) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("create a folder in OUT_DIR");
    }
    std::fs::write(path, text).expect("write to OUT_DIR");
}
