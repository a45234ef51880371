//! The code's shape as CONVENTIONS asks for it, checked so it stays so:
//! small files, and the module seams that let the protocol subsystems become
//! crates of their own (they never reach into the controller or the store).

#![allow(clippy::panic)]

use std::path::{Path, PathBuf};

/// Past this many lines a file is split (CONVENTIONS: "past 600 split").
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
fn dhcp_never_imports_the_store() {
    // Discovered clients leave DHCP through a channel; the composition root
    // connects it to the store.
    let found = importers("src/dhcp", "crate::store");
    assert!(found.is_empty(), "src/dhcp imports the store: {found:?}");
}
