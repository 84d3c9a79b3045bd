//! The floors of the sender's module doc, checked on its sources: every
//! `super::…` and `crate::sender::…` path of a file (in `use` items and in
//! code) must name a module of its own floor or below, the index included
//! in none, and no two modules may reach each other. A new module must be
//! given its floor here and in the doc.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
};

/// Each module of `sender` and its floor, as the module doc lists them.
const FLOORS: [(&str, u32); 32] = [
    ("error", 1),
    ("choices", 1),
    ("layout", 1),
    ("rate", 1),
    ("ends", 1),
    ("target", 1),
    ("landings", 1),
    ("spread", 1),
    ("local", 2),
    ("state", 2),
    ("attach", 2),
    ("plan", 3),
    ("config", 3),
    ("settings", 3),
    ("options", 3),
    ("maps", 4),
    ("grant", 4),
    ("binder", 5),
    ("detach", 5),
    ("summary", 6),
    ("replan", 6),
    ("watch", 6),
    ("audit", 6),
    ("bond_members", 6),
    ("mptcp", 6),
    ("local_end", 6),
    ("path_manager", 6),
    ("status", 7),
    ("resolve", 7),
    ("driver", 7),
    ("offline", 8),
    ("follow", 8),
];

fn floor(module: &str) -> Option<u32> {
    FLOORS.iter().find(|(m, _)| *m == module).map(|(_, f)| *f)
}

/// The text of `source` without its comment lines; inside an inline
/// `mod tests`, `super::` is the file itself, so it is dropped there.
fn code(source: &str) -> String {
    let text: Vec<&str> = source
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect();
    let text = text.join("\n");
    match text.find("mod tests {") {
        Some(at) => format!("{}{}", &text[..at], text[at..].replace("super::", "")),
        None => text,
    }
}

/// Splits `list` at the commas outside braces.
fn split_top(list: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in list.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// Every path a `use` tree (whitespace removed) names, as segments.
fn leaves(tree: &str, prefix: &[String]) -> Vec<Vec<String>> {
    let segments = |text: &str| -> Vec<String> {
        text.split("::")
            .filter(|s| !s.is_empty())
            .map(|s| s.split(" as ").next().unwrap_or(s).to_owned())
            .collect()
    };
    match (tree.find('{'), tree.rfind('}')) {
        (Some(open), Some(close)) => {
            let mut head = prefix.to_vec();
            head.extend(segments(&tree[..open]));
            split_top(&tree[open + 1..close])
                .into_iter()
                .flat_map(|part| leaves(part, &head))
                .collect()
        }
        _ => {
            let mut path = prefix.to_vec();
            path.extend(segments(tree));
            vec![path]
        }
    }
}

/// Every sender path of `code`: its `use` items' leaves (a `use` item
/// starts a line, as rustfmt writes it), and the paths written out in code.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut rest = String::new();
    let mut tree: Option<String> = None;
    for line in code.lines() {
        let trimmed = line.trim_start();
        let item = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|start| trimmed.strip_prefix(start));
        let text = match (&mut tree, item) {
            (Some(open), _) => {
                open.push_str(line);
                None
            }
            (None, Some(body)) => {
                tree = Some(body.to_owned());
                None
            }
            (None, None) => Some(line),
        };
        match text {
            Some(line) => {
                rest.push_str(line);
                rest.push('\n');
            }
            None => {
                if let Some(done) = tree.take_if(|t| t.contains(';')) {
                    let done: String = done
                        .split(';')
                        .next()
                        .unwrap_or_default()
                        .chars()
                        .filter(|c| !c.is_whitespace())
                        .collect();
                    found.extend(leaves(&done, &[]));
                }
            }
        }
    }
    let words = rest
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("super::") || w.starts_with("crate::sender::"));
    found.extend(words.map(|w| {
        w.split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }));
    found
}

/// The sender module `path` (segments after `crate::sender`, or after
/// `super::`s from `module`) names, when it names one other than `top`.
fn target(path: &[String], module: &[String], top: &str) -> Option<String> {
    let named = match path {
        [c, s, first, ..] if c == "crate" && s == "sender" => first.clone(),
        [first, ..] if first == "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let base = module.len().checked_sub(ups)?;
            match module[..base].first() {
                Some(inside) => inside.clone(),
                None => path.get(ups)?.clone(),
            }
        }
        _ => return None,
    };
    (named != top && named != "*" && named != "self").then_some(named)
}

/// Each sender source file: its path under `sender/` and its text.
fn sources(dir: &Path, under: &str, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .expect("the sender's sources")
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.path());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = format!("{under}{name}");
        if entry.path().is_dir() {
            sources(&entry.path(), &format!("{rel}/"), out);
        } else if let Some(stem) = rel.strip_suffix(".rs") {
            let text = fs::read_to_string(entry.path()).expect("a source file");
            out.push((stem.to_owned(), text));
        }
    }
}

#[test]
fn no_sender_module_imports_upward_or_in_a_circle() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sender");
    let mut files = Vec::new();
    sources(&dir, "", &mut files);
    let mut problems = Vec::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, text) in files.iter().filter(|(f, _)| f != "mod" && f != "layering") {
        let mut module: Vec<String> = file.split('/').map(str::to_owned).collect();
        if module.last().is_some_and(|m| m == "mod") {
            module.pop();
        }
        let top = module[0].clone();
        let Some(own) = floor(&top) else {
            problems.push(format!("{file}: module {top} has no floor"));
            continue;
        };
        for path in paths(&code(text)) {
            let Some(named) = target(&path, &module, &top) else {
                continue;
            };
            match floor(&named) {
                None => problems.push(format!(
                    "{file}: {} names no module of the sender (through the index?)",
                    path.join("::")
                )),
                Some(theirs) if theirs > own => problems.push(format!(
                    "{file}: {top} (floor {own}) imports {named} (floor {theirs})"
                )),
                Some(_) => {
                    edges.entry(top.clone()).or_default().insert(named);
                }
            }
        }
    }
    for (module, _) in FLOORS {
        let mut seen = BTreeSet::new();
        let mut stack = vec![module.to_owned()];
        while let Some(m) = stack.pop() {
            for next in edges.get(&m).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        if seen.contains(module) {
            problems.push(format!("{module} reaches itself"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The checker reads what it should: the modes stand on most floors.
    let imports: usize = edges.values().map(BTreeSet::len).sum();
    assert!(imports > 60, "too few imports found: {edges:?}");
}

/// The checker itself: each leaf of a `use` tree and each path written
/// out in code are read, and a file's own inline tests are not imports.
#[test]
fn the_checker_reads_use_trees_and_written_paths() {
    let code = code(
        "use super::{\n    binder::RunningBinder,\n    error::SenderError,\n};\n\
         fn f() {\n    super::replan::replan();\n}\n\
         #[cfg(test)]\nmod tests {\n    use super::*;\n}",
    );
    let named: Vec<String> = paths(&code)
        .iter()
        .filter_map(|p| target(p, &["plan".to_owned()], "plan"))
        .collect();
    assert_eq!(named, ["binder", "error", "replan"]);
    let nested = leaves("crate::{sender::{a::b,c},receiver_client}", &[]);
    assert_eq!(nested[0], ["crate", "sender", "a", "b"]);
    assert_eq!(nested[1], ["crate", "sender", "c"]);
    let inside = target(
        &["super".to_owned(), "machine".to_owned()],
        &["follow".to_owned(), "status".to_owned()],
        "follow",
    );
    assert_eq!(inside, None, "inside its own directory");
}
