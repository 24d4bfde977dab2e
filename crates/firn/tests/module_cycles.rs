//! No import cycle between the top-level modules of firn-node, firn-raft or firn-store, as
//! Go refuses one between packages: a layer reaches the layers below it and never the other
//! way, so that a subsystem can be read, tested and replaced on its own
//! (docs/architecture.md, "Where new code goes"). A top-level module is `src/x.rs` or
//! `src/x/`; a reference is a `crate::x` path in its code (`use crate::{x, y::z}` included,
//! and `super::` paths that climb out of it), not in comments, doc comments or tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module → the other top-level modules its code names.
type Graph = BTreeMap<String, BTreeSet<String>>;

const CRATES: [&str; 3] = ["firn-node", "firn-raft", "firn-store"];

#[test]
fn no_crate_has_an_import_cycle_between_its_top_level_modules() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for name in CRATES {
        let graph = module_graph(&crates.join(name).join("src"));
        assert!(
            graph.len() > 3,
            "{name}: only {} top-level modules found; is the path right?",
            graph.len()
        );
        for cycle in cycles(&graph) {
            let edges: Vec<String> = cycle
                .iter()
                .map(|m| {
                    let into: Vec<&String> =
                        graph[m].iter().filter(|t| cycle.contains(t)).collect();
                    format!("{m} -> {into:?}")
                })
                .collect();
            found.push(format!("{name}: {}", edges.join("; ")));
        }
    }
    assert!(
        found.is_empty(),
        "import cycles between top-level modules (move what both sides need to the lower \
         one, or pass it in):\n{}",
        found.join("\n")
    );
}

/// The checker itself: it finds a cycle through `use crate::{…}` groups, `crate::` paths
/// and a `super::` path out of a nested module, and ignores comments and tests.
#[test]
fn the_checker_finds_a_cycle_and_ignores_comments_and_tests() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |path: &str, text: &str| {
        let path = src.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "pub mod a;\npub mod b;\npub mod c;\npub mod d;\n");
    write("a.rs", "use crate::{b::{X, Y}, c};\n");
    write(
        "b/mod.rs",
        "pub mod deep;\n// crate::d is only named in a comment\n",
    );
    write("b/deep.rs", "fn f() { super::super::c::g(); }\n");
    write("c.rs", "pub fn g() { let _ = crate::a::F; }\n");
    write(
        "d.rs",
        "/// [`crate::a`]\n#[cfg(test)]\nmod tests {\n    use crate::a;\n}\n",
    );
    write("b/tests.rs", "use crate::d;\n");
    let graph = module_graph(src);
    let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(graph["a"], names(&["b", "c"]));
    assert_eq!(graph["b"], names(&["c"]), "a super:: path out of b/deep.rs");
    assert_eq!(graph["c"], names(&["a"]));
    assert_eq!(
        graph["d"],
        names(&[]),
        "doc comments and tests are not references"
    );
    assert_eq!(
        cycles(&graph),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );

    write("c.rs", "pub fn g() {}\n");
    assert!(cycles(&module_graph(src)).is_empty());
}

/// Every top-level module of the crate whose sources are in `src`, with the modules it names.
fn module_graph(src: &Path) -> Graph {
    let mut graph: Graph = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() || (name != "lib" && name != "main" && is_rust(&path)) {
            graph.entry(name).or_default();
        }
    }
    let tops: BTreeSet<String> = graph.keys().cloned().collect();
    for file in rust_files(src) {
        let module = module_path(src, &file);
        let Some(top) = module.first().filter(|t| tops.contains(*t)) else {
            continue; // lib.rs, main.rs
        };
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        let named: BTreeSet<String> = references(&code, &module)
            .into_iter()
            .filter(|t| tops.contains(t) && t != top)
            .collect();
        graph.get_mut(top).unwrap().extend(named);
    }
    graph
}

fn is_rust(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "rs")
}

/// The `.rs` files under `dir`, leaving out `tests` folders.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                files.extend(rust_files(&path));
            }
        } else if is_rust(&path) {
            files.push(path);
        }
    }
    files
}

/// The module a file holds, from the crate root: `src/router/log/read.rs` is
/// `[router, log, read]`, `src/router/mod.rs` is `[router]`, `src/lib.rs` is `[]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_string());
    }
    parts
}

/// A file's code: without its `#[cfg(test)]` test module (to the end of the file, where
/// this code base keeps it) and without comments.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules `code`, in module `module`, names.
fn references(code: &str, module: &[String]) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        // Not `$crate::` nor part of a longer name (`firn_crate::`).
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            named.extend(group_heads(group));
        } else {
            named.insert(ident(rest));
        }
    }
    // `super::` paths that climb to the crate root.
    for (i, _) in code.match_indices("super::") {
        if code[..i].ends_with("super::") || code[..i].ends_with(|c: char| c.is_alphanumeric()) {
            continue;
        }
        let mut rest = &code[i..];
        let mut ups = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            ups += 1;
            rest = r;
        }
        if ups >= module.len() {
            named.insert(ident(rest));
        }
    }
    named
}

/// The first name of each element of a `{…}` use group (after its `{`).
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = vec![ident(group.trim_start())];
    let mut depth = 1;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => heads.push(ident(group[i + 1..].trim_start())),
            _ => {}
        }
    }
    heads
}

fn ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The cycles of `graph` (its strongly connected components of more than one module),
/// each sorted, in order of their first module.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    // Tarjan's algorithm.
    struct Walk<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found.sort();
    walk.found
}
