//! The crate's top-level modules import one another one way: the graph of
//! which top-level module names which (by `crate::…` and `super::…` paths in
//! code, comments and strings left out) has no cycle.
//!
//! It reads `src/` itself: each file's module is its path (`a/b.rs` and
//! `a/b/mod.rs` are `crate::a::b`; inline `mod x { … }` blocks count), each
//! path is resolved from there to an absolute one, and its first segment,
//! when it is a top-level module other than the file's own, is an edge.
//! `src/lib.rs` (the root) and `src/bin/` are not modules of the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Where an edge was seen: file and line.
type Seen = (PathBuf, usize);

/// The graph: for each top-level module, the ones it names, each with the
/// first place it does so.
type Graph = BTreeMap<String, BTreeMap<String, Seen>>;

/// The code of `src` with comments, string and character literals blanked
/// (to spaces; newlines kept, so lines still count).
fn code_only(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(k).copied().unwrap_or('\0');
        let prev_ident = i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
        if c[i] == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
                out.push(' ');
            }
        } else if c[i] == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if c[i] == 'r' && !prev_ident && (at(i + 1) == '"' || at(i + 1) == '#') {
            // A raw string r"…", r#"…"# (or an ident starting with r).
            let mut k = i + 1;
            while at(k) == '#' {
                k += 1;
            }
            if at(k) != '"' {
                out.push(c[i]);
                i += 1;
                continue;
            }
            let hashes = k - i - 1;
            let mut j = k + 1;
            while j < c.len() && !(c[j] == '"' && (1..=hashes).all(|h| at(j + h) == '#')) {
                j += 1;
            }
            let end = (j + 1 + hashes).min(c.len());
            for &ch in &c[i..end] {
                blank(&mut out, ch);
            }
            i = end;
        } else if c[i] == '"' {
            blank(&mut out, c[i]);
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            if i < c.len() {
                out.push(' ');
                i += 1;
            }
        } else if c[i] == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A character literal ('x', '\n', '\u{..}'); not a lifetime.
            let mut j = i + 1;
            if at(j) == '\\' {
                j += 2;
            } else {
                j += 1;
            }
            while j < c.len() && c[j] != '\'' {
                j += 1;
            }
            let end = (j + 1).min(c.len());
            for &ch in &c[i..end] {
                blank(&mut out, ch);
            }
            i = end;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// A token: an identifier, `::`, or one punctuation character; with its line.
fn tokens(code: &str) -> Vec<(String, usize)> {
    let c: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphanumeric() || ch == '_' || ch == '$' {
            let start = i;
            i += 1;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push((c[start..i].iter().collect(), line));
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push(("::".into(), line));
            i += 2;
        } else {
            out.push((ch.to_string(), line));
            i += 1;
        }
    }
    out
}

/// The absolute paths (segments from the crate root) that the code of the
/// module `module` names with `crate::` or `super::`, with their lines.
/// Group imports (`crate::{a::X, b}`) give one path per member.
fn paths(code: &str, module: &[String]) -> Vec<(Vec<String>, usize)> {
    let t = tokens(code);
    let tok = |k: usize| t.get(k).map_or("", |x| x.0.as_str());
    let mut out = Vec::new();
    // Inline modules: (name, brace depth outside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < t.len() {
        match tok(i) {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|m| m.1 == depth) {
                    inline.pop();
                }
            }
            "mod" if tok(i + 2) == "{" => inline.push((tok(i + 1).to_string(), depth)),
            "crate" | "$crate" | "super"
                if tok(i + 1) == "::" && tok(i.wrapping_sub(1)) != "::" =>
            {
                let mut base: Vec<String> = module.to_vec();
                base.extend(inline.iter().map(|m| m.0.clone()));
                let mut k = i;
                if tok(k) == "super" {
                    while tok(k) == "super" && tok(k + 1) == "::" {
                        base.pop();
                        k += 2;
                    }
                } else {
                    base.clear();
                    k += 2;
                }
                if tok(k) == "{" {
                    // The group's members: the first segment of each.
                    let mut d = 0;
                    let mut first = true;
                    while k < t.len() {
                        match tok(k) {
                            "{" => d += 1,
                            "}" => {
                                d -= 1;
                                if d == 0 {
                                    break;
                                }
                            }
                            "," if d == 1 => first = true,
                            s if d == 1 && first => {
                                first = false;
                                let mut p = base.clone();
                                p.push(s.to_string());
                                out.push((p, t[k].1));
                            }
                            _ => {}
                        }
                        k += 1;
                    }
                } else {
                    base.push(tok(k).to_string());
                    out.push((base, t[i].1));
                }
                i = k;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The `.rs` files under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module a file under `src` is: `a/b.rs` and `a/b/mod.rs` are `[a, b]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("a file under src");
    let mut m: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if m.last().is_some_and(|s| s == "mod") {
        m.pop();
    }
    m
}

/// The graph of the crate's top-level modules under `src`.
fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let files: Vec<(PathBuf, Vec<String>)> = files
        .into_iter()
        .map(|f| {
            let m = module_of(src, &f);
            (f, m)
        })
        .filter(|(_, m)| !m.is_empty() && m[0] != "bin" && m != &["lib"] && m != &["main"])
        .collect();
    let top: BTreeSet<String> = files.iter().map(|(_, m)| m[0].clone()).collect();
    let mut g: Graph = top.iter().map(|m| (m.clone(), BTreeMap::new())).collect();
    for (file, module) in &files {
        let text =
            fs::read_to_string(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        for (path, line) in paths(&code_only(&text), module) {
            let Some(to) = path.first() else { continue };
            if *to != module[0] && top.contains(to) {
                g.get_mut(&module[0])
                    .expect("every top-level module is in the graph")
                    .entry(to.clone())
                    .or_insert_with(|| (file.clone(), line));
            }
        }
    }
    g
}

/// A cycle of `g`, if it has one: its modules, the first repeated at the end.
fn cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit<'a>(
        g: &'a Graph,
        m: &'a str,
        done: &mut BTreeSet<&'a str>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| *p == m) {
            let mut c: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
            c.push(m.to_string());
            return Some(c);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m);
        for to in g[m].keys() {
            if let Some(c) = visit(g, to, done, path) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m);
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|m| visit(g, m, &mut done, &mut Vec::new()))
}

/// The graph, one module a line.
fn show(g: &Graph) -> String {
    g.iter()
        .map(|(m, to)| {
            let to: Vec<&str> = to.keys().map(String::as_str).collect();
            format!("  {m} -> {}\n", to.join(", "))
        })
        .collect()
}

#[test]
fn top_level_modules_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = graph(&src);
    println!("top-level module graph:\n{}", show(&g));
    // The scanner sees something: the assembly names the configuration.
    assert!(
        g.get("server").is_some_and(|to| to.contains_key("config")),
        "server -> config not found; the scanner is broken:\n{}",
        show(&g)
    );
    if let Some(c) = cycle(&g) {
        let steps: Vec<String> = c
            .windows(2)
            .map(|w| {
                let (file, line) = &g[&w[0]][&w[1]];
                let file = file.strip_prefix(&src).unwrap_or(file);
                format!("  {} -> {} ({}:{line})", w[0], w[1], file.display())
            })
            .collect();
        panic!(
            "top-level modules import in a circle: {}\n{}\nthe graph:\n{}",
            c.join(" -> "),
            steps.join("\n"),
            show(&g)
        );
    }
}

#[test]
fn the_scanner_reads_paths_not_comments_or_strings() {
    let code = code_only(
        "// crate::a::X\n/* crate::b */ let s = \"crate::c\"; let r = r#\"crate::d\"#;\n\
         let c = '\"'; use crate::{e::E, f}; fn g<'a>() { super::h::H; }\n\
         mod t { use super::super::i; }",
    );
    let found: Vec<(String, usize)> = paths(&code, &["m".to_string(), "n".to_string()])
        .into_iter()
        .map(|(p, l)| (p.join("::"), l))
        .collect();
    assert_eq!(
        found,
        [
            ("e".to_string(), 3),
            ("f".to_string(), 3),
            ("m::h".to_string(), 3),
            ("m::i".to_string(), 4),
        ]
    );
}
