//! The repository's Markdown documents as pages of the `kiln` crate's docs (`cargo doc`):
//! README.md is the crate's front page and every other document a module of `kiln::guide`.
//! Their relative links point at files of the repository, which rustdoc's pages are not, so
//! each page is written with its links rewritten: a link to a document becomes an intra-doc
//! link to its page (rustdoc checks those), an image becomes a `data:` URL, and absolute URLs
//! and anchors stay. Shared by the build script, which writes the pages, and
//! `tests/docs.rs`, which checks that no link is left pointing nowhere.

use std::path::{Component, Path, PathBuf};

/// A document shown in the crate docs: its path in the repository and the Rust path of its
/// page.
pub struct Page {
    /// Its path in the repository, `/`-separated (`docs/fusion-queue.md`).
    pub file: String,
    /// Its page (`crate`, `crate::guide`, `crate::guide::fusion_queue`).
    pub item: String,
}

/// The documents shown in the crate docs: README.md, docs/README.md (the `guide` module's
/// own page), every other docs/*.md and examples/README.md.
pub fn pages(root: &Path) -> Vec<Page> {
    let page = |file: &str, item: &str| Page { file: file.into(), item: item.into() };
    let mut out = vec![page("README.md", "crate"), page("docs/README.md", "crate::guide")];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    docs.sort();
    for name in docs.iter().filter(|n| n.ends_with(".md") && *n != "README.md") {
        let module = name.trim_end_matches(".md").replace('-', "_");
        out.push(page(&format!("docs/{name}"), &format!("crate::guide::{module}")));
    }
    out.push(page("examples/README.md", "crate::guide::examples"));
    out
}

/// `text` (the document `file`) with every relative link rewritten for its page; the second
/// value lists the links that stay relative (a folder or a file with no page), which would
/// be dead there.
pub fn rewrite(root: &Path, file: &str, text: &str, pages: &[Page]) -> (String, Vec<String>) {
    let dir = Path::new(file).parent().unwrap_or(Path::new(""));
    let mut dead = Vec::new();
    let out = map_links(text, &mut |target| link_for(root, dir, target, pages, &mut dead));
    (out, dead)
}

/// The link targets of `text`, in order.
pub fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    map_links(text, &mut |target| {
        out.push(target.to_string());
        target.to_string()
    });
    out
}

/// `text` with the target of every link outside code replaced by what `f` makes of it.
fn map_links(text: &str, f: &mut dyn FnMut(&str) -> String) -> String {
    let mut out = String::with_capacity(text.len());
    let mut fence: Option<String> = None;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let ticks: String = trimmed.chars().take_while(|&c| c == '`').collect();
        match &fence {
            Some(open) if ticks.len() >= open.len() && trimmed[ticks.len()..].trim().is_empty() => {
                fence = None
            }
            Some(_) => {}
            None if ticks.len() >= 3 => fence = Some(ticks),
            None => {
                out.push_str(&map_line(line, f));
                continue;
            }
        }
        out.push_str(line);
    }
    out
}

/// The links of one line outside code blocks: `[text](target)` and `![alt](target)`, except
/// inside inline code.
fn map_line(line: &str, f: &mut dyn FnMut(&str) -> String) -> String {
    let mut out = String::new();
    let mut rest = line;
    let mut in_code = false;
    while let Some(i) = rest.find(['`', ']']) {
        let (head, tail) = rest.split_at(i);
        out.push_str(head);
        if let Some(after) = tail.strip_prefix('`') {
            in_code = !in_code;
            out.push('`');
            rest = after;
            continue;
        }
        let Some(end) = tail.strip_prefix("](").and_then(|t| t.find(')')).filter(|_| !in_code)
        else {
            out.push(']');
            rest = &tail[1..];
            continue;
        };
        let target = &tail[2..2 + end];
        out.push_str("](");
        out.push_str(&f(target));
        out.push(')');
        rest = &tail[3 + end..];
    }
    out.push_str(rest);
    out
}

/// What a link to `target`, written in a document in `dir`, becomes on its page.
fn link_for(
    root: &Path,
    dir: &Path,
    target: &str,
    pages: &[Page],
    dead: &mut Vec<String>,
) -> String {
    if target.starts_with('#') || target.contains("://") || target.starts_with("mailto:") {
        return target.to_string();
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, format!("#{a}")),
        None => (target, String::new()),
    };
    let file = normalize(&dir.join(path));
    let file_str = file.to_string_lossy().replace('\\', "/");
    if let Some(page) = pages.iter().find(|p| p.file == file_str) {
        return format!("{}{anchor}", page.item);
    }
    if let Some(mime) = image_type(&file_str) {
        if let Ok(bytes) = std::fs::read(root.join(&file)) {
            return format!("data:{mime};base64,{}", base64(&bytes));
        }
    }
    dead.push(target.to_string());
    target.to_string()
}

/// `path` without `.` and with each `..` applied.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The MIME type of an image file, by its name.
fn image_type(file: &str) -> Option<&'static str> {
    [(".svg", "image/svg+xml"), (".png", "image/png")]
        .into_iter()
        .find_map(|(ext, mime)| file.ends_with(ext).then_some(mime))
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> shift) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The anchor a heading line (`## Limits: deep and long inputs`) gets, on GitHub and in
/// rustdoc alike (`limits-deep-and-long-inputs`); `None` for a line that is not a heading.
pub fn heading_anchor(line: &str) -> Option<String> {
    let text = line.strip_prefix('#')?.trim_start_matches('#');
    if !text.starts_with(' ') {
        return None;
    }
    Some(
        text.trim()
            .chars()
            .filter_map(|c| match c {
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
                ' ' => Some('-'),
                _ => None,
            })
            .collect(),
    )
}

/// The repository path a link `target` written in document `file` leads to, and its anchor
/// (`None` for an absolute URL).
pub fn resolve(file: &str, target: &str) -> Option<(PathBuf, Option<String>)> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a.to_string())),
        None => (target, None),
    };
    if path.is_empty() {
        return Some((PathBuf::from(file), anchor));
    }
    Some((normalize(&Path::new(file).parent()?.join(path)), anchor))
}
