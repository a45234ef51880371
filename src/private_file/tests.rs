use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use super::*;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// Files in `dir` other than `keep`.
fn others(dir: &Path, keep: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != keep)
        .collect()
}

#[test]
fn replace_writes_a_private_file_and_leaves_no_temporary() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ca.key");
    replace(&p, b"one").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"one");
    assert_eq!(mode(&p), 0o600);
    // A file someone loosened is replaced by a private one.
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    replace(&p, b"two").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"two");
    assert_eq!(mode(&p), 0o600);
    assert!(others(d.path(), "ca.key").is_empty());
}

#[test]
fn create_new_never_replaces() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("api-token");
    create_new(&p, b"first").unwrap();
    assert_eq!(mode(&p), 0o600);
    let e = create_new(&p, b"second").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    assert_eq!(std::fs::read(&p).unwrap(), b"first");
    assert!(others(d.path(), "api-token").is_empty());
}

#[test]
fn a_failed_write_leaves_nothing() {
    let d = tempfile::tempdir().unwrap();
    // The path is a directory: publishing fails after the temporary file
    // was written, and the temporary file goes.
    let p = d.path().join("busy");
    std::fs::create_dir(&p).unwrap();
    std::fs::write(p.join("inside"), b"x").unwrap();
    assert!(replace(&p, b"data").is_err());
    assert!(others(d.path(), "busy").is_empty());
    assert!(replace(&d.path().join("missing/dir/file"), b"data").is_err());
}

/// Two contents of 4 MiB each, every byte the same, so a torn file shows.
fn content(round: usize) -> Vec<u8> {
    vec![b'a' + (round % 2) as u8; 4 << 20]
}

/// Run by [`killed_writers_leave_the_old_or_the_new_file`] in a child
/// process: rewrites the file as fast as it can until it is killed.
#[test]
#[ignore = "the child of killed_writers_leave_the_old_or_the_new_file"]
fn writer_child() {
    let Some(p) = std::env::var_os("METALHERD_PRIVATE_FILE_CHILD") else {
        return;
    };
    let p = PathBuf::from(p);
    // Bounded: the parent kills it long before.
    for round in 0..10_000 {
        replace(&p, &content(round)).unwrap();
    }
}

#[test]
fn killed_writers_leave_the_old_or_the_new_file() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("state");
    replace(&p, &content(0)).unwrap();
    for kill_after_ms in [5, 20, 40, 75, 120, 200] {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "private_file::tests::writer_child"])
            .env("METALHERD_PRIVATE_FILE_CHILD", &p)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(kill_after_ms));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let got = std::fs::read(&p).unwrap();
        assert_eq!(got.len(), 4 << 20, "a torn file after {kill_after_ms} ms");
        assert!(
            got.iter().all(|b| *b == got[0]) && (got[0] == b'a' || got[0] == b'b'),
            "mixed contents after {kill_after_ms} ms"
        );
        assert_eq!(mode(&p), 0o600);
    }
    // What the killed writers left behind is recognised and removed; the
    // file itself stays.
    std::fs::write(d.path().join(".notours.tmp"), b"x").unwrap();
    remove_stale(d.path()).unwrap();
    let mut left = others(d.path(), "state");
    left.sort();
    assert_eq!(left, [".notours.tmp"]);
}

#[test]
fn temporary_names_are_recognised() {
    let d = Path::new("/data");
    let t = temp_name(d, Path::new("/data/ca.key"));
    assert!(is_temp_name(&t.file_name().unwrap().to_string_lossy()));
    for other in [
        "ca.key",
        ".ca.key",
        ".ca.key.tmp",
        ".ca.key.12.xyz.tmp",
        "..1.0123456789abcdef.tmp",
    ] {
        assert!(!is_temp_name(other), "{other}");
    }
}
