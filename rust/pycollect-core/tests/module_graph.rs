//! Imports run one way: no circle of `crate::` paths between the top-level modules of the core
//! crate or of the bindings (`rust/pycollect-py`), whose sources this test reads.
//!
//! A module's arrows are the first segments of every `crate::` path in its files (`use`
//! declarations, `crate::{a, b::c}` groups and paths written inline alike, `#[cfg(test)]` code
//! included; comments are not read). A circle fails the test, naming its modules.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// The top-level module a file belongs to (`None` for `lib.rs`, the crate root).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).expect("under src");
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then(|| name.to_owned())
}

/// `text` without `//` and `/* */` comments (doc comments included).
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        rest = rest[start..]
            .find("*/")
            .map_or("", |end| &rest[start + end + 2..]);
    }
    out.push_str(rest);
    out.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn identifier(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The first segment of every `crate::` path in `code`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            continue; // `pycollect_core::...` is another crate
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::{c, d}}`: the first segment of each top-level entry.
            let mut depth = 0;
            let mut entry_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => entry_start = true,
                    c if entry_start && !c.is_whitespace() => {
                        entry_start = false;
                        found.insert(identifier(&group[i..]).to_owned());
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(identifier(rest).to_owned());
        }
    }
    found
}

fn module_graph(src: &Path) -> Graph {
    let mut graph = Graph::new();
    for file in rust_files(src) {
        let Some(module) = top_module(src, &file) else {
            continue;
        };
        let code = without_comments(&fs::read_to_string(&file).expect("read"));
        let targets = graph.entry(module.clone()).or_default();
        targets.extend(crate_paths(&code).into_iter().filter(|t| *t != module));
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for targets in graph.values_mut() {
        targets.retain(|t| modules.contains(t)); // `crate::VERSION` and other items of the root
    }
    graph
}

/// The circles of `graph`: strongly connected components of more than one module (Tarjan).
fn circles(graph: &Graph) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, node: &'a str) {
        let n = s.index.len();
        s.index.insert(node, n);
        s.low.insert(node, n);
        s.stack.push(node);
        for next in &s.graph[node] {
            let next = next.as_str();
            if !s.index.contains_key(next) {
                visit(s, next);
                let low = s.low[node].min(s.low[next]);
                s.low.insert(node, low);
            } else if s.stack.contains(&next) {
                let low = s.low[node].min(s.index[next]);
                s.low.insert(node, low);
            }
        }
        if s.low[node] == s.index[node] {
            let mut component = BTreeSet::new();
            while let Some(member) = s.stack.pop() {
                component.insert(member.to_owned());
                if member == node {
                    break;
                }
            }
            if component.len() > 1 {
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found
}

fn assert_no_circle(src: &Path) {
    let graph = module_graph(src);
    assert!(graph.len() > 5, "{}: too few modules found", src.display());
    let found = circles(&graph);
    assert!(
        found.is_empty(),
        "{}: modules that import each other, directly or through others: {found:?}\narrows: {graph:#?}",
        src.display()
    );
}

#[test]
fn the_core_crates_modules_import_one_way() {
    assert_no_circle(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
}

#[test]
fn the_bindings_modules_import_one_way() {
    assert_no_circle(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../pycollect-py/src"));
}

#[test]
fn a_circle_is_found() {
    let graph: Graph = [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]
        .into_iter()
        .fold(Graph::new(), |mut g, (from, to)| {
            g.entry(from.into()).or_default().insert(to.into());
            g.entry(to.into()).or_default();
            g
        });
    let expected: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
    assert_eq!(circles(&graph), vec![expected]);
    assert_eq!(
        crate_paths("use crate::{a, b::{c, d}};\nlet x = crate::e::f(); pycollect_core::g"),
        ["a", "b", "e"].map(String::from).into()
    );
}
