//! The code's shape as ARCHITECTURE.md describes it, checked so it stays so:
//! small files, and the module seams that let the protocol subsystems become
//! crates of their own (they never reach into the controller or the store).

#![allow(clippy::panic)]

use std::path::{Path, PathBuf};

/// Past this many lines a file is split by meaning (ARCHITECTURE.md).
const MAX_LINES: usize = 600;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn files_under(rel: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    rust_files(&root().join(rel), &mut out);
    assert!(!out.is_empty(), "no Rust files under {rel}: wrong root?");
    out
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn no_file_is_over_the_size_limit() {
    let mut long = Vec::new();
    for dir in ["src", "tests", "examples"] {
        for path in files_under(dir) {
            let lines = read(&path).lines().count();
            if lines > MAX_LINES {
                long.push(format!("{} ({lines} lines)", path.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines (split them): {long:#?}"
    );
}

/// Files under `module` that mention `forbidden` in a `use` or path.
fn importers(module: &str, forbidden: &str) -> Vec<String> {
    files_under(module)
        .into_iter()
        .filter(|p| {
            read(p)
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .any(|l| l.contains(forbidden))
        })
        .map(|p| p.display().to_string())
        .collect()
}

#[test]
fn protocol_subsystems_never_import_the_controller() {
    for module in ["src/dhcp", "src/tftp", "src/bmc", "src/ignition"] {
        let found = importers(module, "crate::controller");
        assert!(
            found.is_empty(),
            "{module} imports the controller: {found:?}"
        );
    }
}

#[test]
fn modules_live_where_their_names_say() {
    // A child module is a file under its parent's folder (`plan.rs` ->
    // `plan/batch.rs`, tests in `plan/tests.rs`), never a sibling pulled in
    // with `#[path]`. The store's suite is the one file compiled twice (by
    // the store's own tests and by tests/store_kubernetes.rs).
    let found: Vec<String> = importers("src", "#[path")
        .into_iter()
        .filter(|f| !f.ends_with("src/store/tests.rs"))
        .collect();
    assert!(found.is_empty(), "#[path] modules: {found:?}");
}

#[test]
fn no_import_runs_back_up() {
    // The web servers sit below the controllers: what boot HTTP and the
    // controller both need (progress keys, the pinned class, the default
    // install deadline) lives in src/api and src/store. The leader hands
    // the boot token key over through the data directory's file name
    // (src/datadir.rs), not through boot HTTP.
    for (module, upward) in [
        ("src/http", "crate::controller"),
        ("src/leader", "crate::http"),
    ] {
        let found = importers(module, upward);
        assert!(found.is_empty(), "{module} imports {upward}: {found:?}");
    }
}

#[test]
fn dhcp_never_imports_the_store() {
    // Discovered clients leave DHCP through a channel; the composition root
    // connects it to the store.
    let found = importers("src/dhcp", "crate::store");
    assert!(found.is_empty(), "src/dhcp imports the store: {found:?}");
}

#[test]
fn file_serving_stands_alone_and_has_the_only_path_check() {
    // TFTP and boot HTTP read files through src/files; it imports neither.
    for forbidden in [
        "crate::tftp",
        "crate::http",
        "crate::controller",
        "crate::store",
    ] {
        let found = importers("src/files", forbidden);
        assert!(found.is_empty(), "src/files imports {forbidden}: {found:?}");
    }
    // Resolving a requested name against the file system happens only there.
    for module in ["src/tftp", "src/http"] {
        let found = importers(module, "canonicalize");
        assert!(found.is_empty(), "{module} checks paths itself: {found:?}");
    }
}

#[test]
fn the_cli_never_imports_the_composition_root() {
    // app imports the CLI's argument types; the reverse would be a cycle.
    let found = importers("src/cli", "crate::app");
    assert!(found.is_empty(), "src/cli imports src/app: {found:?}");
}

/// Sibling modules of `dir` (files and subdirectories, `mod.rs` aside) and,
/// for each, the siblings it names: `super::x` from a file directly in
/// `dir`, `super::super::x` from one below, or `crate::<dir>::x` anywhere.
fn sibling_imports(dir: &str) -> Vec<(String, Vec<String>)> {
    let base = root().join(dir);
    let module_path = dir.trim_start_matches("src/").replace('/', "::");
    let mut names: Vec<String> = std::fs::read_dir(&base)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let stem = p.file_stem()?.to_str()?.to_string();
            (p.is_dir() || p.extension().is_some_and(|x| x == "rs")).then_some(stem)
        })
        .filter(|n| n != "mod" && n != "tests")
        .collect();
    names.sort();
    names.dedup();
    names
        .iter()
        .map(|name| {
            let mut files = Vec::new();
            let file = base.join(format!("{name}.rs"));
            if file.exists() {
                files.push((file, "super::"));
            }
            let sub = base.join(name);
            for f in std::fs::read_dir(&sub).into_iter().flatten().flatten() {
                let p = f.path();
                let up = if p.file_stem().is_some_and(|s| s == "mod") {
                    "super::"
                } else {
                    "super::super::"
                };
                if p.extension().is_some_and(|x| x == "rs") {
                    files.push((p, up));
                }
            }
            let text: Vec<(String, &str)> = files.iter().map(|(p, up)| (read(p), *up)).collect();
            let named = names
                .iter()
                .filter(|other| *other != name)
                .filter(|other| {
                    text.iter().any(|(t, up)| {
                        t.lines()
                            .filter(|l| !l.trim_start().starts_with("//"))
                            .any(|l| {
                                l.contains(&format!("crate::{module_path}::{other}::"))
                                    || l.contains(&format!("{up}{other}::"))
                                    || l.contains(&format!("{up}{other}}}"))
                                    || l.contains(&format!("{up}{other};"))
                                    || l.contains(&format!("{up}{other},"))
                            })
                    })
                })
                .cloned()
                .collect();
            (name.clone(), named)
        })
        .collect()
}

fn find_cycle(graph: &[(String, Vec<String>)]) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &[(String, Vec<String>)],
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == node) {
            let mut cycle = path[i..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.iter().any(|d| d == node) {
            return None;
        }
        path.push(node.to_string());
        let next = graph
            .iter()
            .find(|(n, _)| n == node)
            .map(|(_, e)| e.clone());
        for n in next.unwrap_or_default() {
            if let Some(c) = visit(&n, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.push(node.to_string());
        None
    }
    let mut done = Vec::new();
    for (n, _) in graph {
        if let Some(c) = visit(n, graph, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn the_store_has_no_import_cycle() {
    for dir in ["src/store", "src/store/embedded"] {
        let graph = sibling_imports(dir);
        assert!(graph.len() >= 2, "{dir}: {graph:?}");
        eprintln!("{dir}: {graph:?}");
        if let Some(cycle) = find_cycle(&graph) {
            panic!("{dir}: import cycle {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_cli_has_no_import_cycle() {
    // Each command's file depends on the shared pieces below it
    // (src/cli/kinds.rs, the client), and on another command's file only
    // to run that command.
    let graph = sibling_imports("src/cli");
    assert!(graph.len() >= 2, "src/cli: {graph:?}");
    if let Some(cycle) = find_cycle(&graph) {
        panic!("src/cli: import cycle {}", cycle.join(" -> "));
    }
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let g = |edges: &[(&str, &[&str])]| -> Vec<(String, Vec<String>)> {
        edges
            .iter()
            .map(|(n, e)| (n.to_string(), e.iter().map(|s| s.to_string()).collect()))
            .collect()
    };
    assert_eq!(
        find_cycle(&g(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"])])),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(
        find_cycle(&g(&[("a", &["b"]), ("b", &["c"]), ("c", &[])])),
        None
    );
}
