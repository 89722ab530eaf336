//! The layers of `operator/src` import downward only (architecture.md):
//! `api` ← `protocol` ← `lifecycle`; `execution` beside `lifecycle`, never
//! importing it nor imported by it; `controller` on top. And no two sibling
//! modules import each other. Read from the source text: every `crate::` and
//! `super::` path outside comments and test modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every module of the crate (`a::b`) and its source, test modules left out.
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src") {
            let path: PathBuf = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(&root).expect("under src");
            let mut name = rel.with_extension("").display().to_string();
            if name.ends_with("/mod") {
                name.truncate(name.len() - 4);
            }
            if name.starts_with("bin/") || name == "lib" || name.ends_with("_tests") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("source");
            let code = text
                .split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap_or_default()
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            out.insert(name.replace('/', "::"), code);
        }
    }
    out
}

/// The modules `name` names through `crate::` and `super::` paths.
fn imports(name: &str, code: &str, all: &BTreeMap<String, String>) -> BTreeSet<String> {
    let parent = name.rsplit_once("::").map_or("", |(p, _)| p);
    let mut out = BTreeSet::new();
    for (prefix, base) in [("crate::", ""), ("super::", parent)] {
        for (i, _) in code.match_indices(prefix) {
            // `$crate::` in a macro is the crate too.
            if prefix == "super::" && code[..i].ends_with("super::") {
                continue;
            }
            let rest = &code[i + prefix.len()..];
            let path: String = rest
                .chars()
                .take_while(|c| {
                    c.is_ascii_lowercase() || *c == '_' || *c == ':' || c.is_ascii_digit()
                })
                .collect();
            let full = if base.is_empty() {
                path.trim_end_matches(':').to_string()
            } else {
                format!("{base}::{}", path.trim_end_matches(':'))
            };
            let parts: Vec<&str> = full.split("::").collect();
            let target = (1..=parts.len())
                .rev()
                .map(|k| parts[..k].join("::"))
                .find(|m| all.contains_key(m));
            if let Some(t) = target
                && t != name
                && !name.starts_with(&format!("{t}::"))
                && !t.starts_with(&format!("{name}::"))
            {
                out.insert(t);
            }
        }
    }
    out
}

fn top(m: &str) -> &str {
    m.split("::").next().unwrap_or(m)
}

#[test]
fn the_layers_import_downward_only_and_no_two_modules_import_each_other() {
    let all = modules();
    let edges: BTreeMap<String, BTreeSet<String>> = all
        .iter()
        .map(|(name, code)| (name.clone(), imports(name, code, &all)))
        .collect();
    let below: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("api", &[][..]),
        ("protocol", &["api"][..]),
        ("lifecycle", &["api", "protocol"][..]),
        ("execution", &["api", "protocol", "server"][..]),
    ]);
    let mut wrong = Vec::new();
    for (from, tos) in &edges {
        for to in tos {
            let (f, t) = (top(from), top(to));
            if let Some(allowed) = below.get(f)
                && f != t
                && !allowed.contains(&t)
            {
                wrong.push(format!("{from} imports {to}"));
            }
            if edges.get(to).is_some_and(|back| back.contains(from)) && from < to {
                wrong.push(format!("{from} and {to} import each other"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(
        edges["controller::pass"].contains("controller::family"),
        "the check reads the imports"
    );
}
