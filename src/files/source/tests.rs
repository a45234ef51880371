//! Tests of the file sources: traversal refused, caching, overlays.

use super::*;

async fn read_all(src: &dyn FileSource, name: &str) -> Result<Vec<u8>, SourceError> {
    let mut h = src.open(name).await?;
    let mut all = Vec::new();
    let mut buf = vec![0u8; 1000];
    loop {
        let n = h.read(&mut buf).await.map_err(SourceError::Io)?;
        all.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            return Ok(all);
        }
    }
}

/// Read with [`FileHandle::next`], `len` bytes at a time.
async fn read_blocks(src: &dyn FileSource, name: &str, len: usize) -> Vec<u8> {
    let mut h = src.open(name).await.unwrap();
    let mut all = Vec::new();
    let mut scratch = vec![0u8; len];
    loop {
        let got = h.next(&mut scratch).await.unwrap();
        all.extend_from_slice(got);
        if got.len() < len {
            return all;
        }
    }
}

#[tokio::test]
async fn cached_files_follow_changes_on_disk() {
    let root = tempfile::tempdir().unwrap();
    let f = root.path().join("ipxe.efi");
    std::fs::write(&f, b"first").unwrap();
    let src = DirSource::new(root.path()).unwrap();
    assert_eq!(read_all(&src, "ipxe.efi").await.unwrap(), b"first");
    assert_eq!(read_blocks(&src, "ipxe.efi", 2).await, b"first");
    // Rewritten in place with another size.
    std::fs::write(&f, b"second!").unwrap();
    assert_eq!(read_all(&src, "ipxe.efi").await.unwrap(), b"second!");
    // Replaced by another file of the same size (a new inode).
    let tmp = root.path().join("tmp");
    std::fs::write(&tmp, b"third!!").unwrap();
    std::fs::rename(&tmp, &f).unwrap();
    assert_eq!(read_blocks(&src, "ipxe.efi", 3).await, b"third!!");
    // Removed: gone, whatever the cache holds.
    std::fs::remove_file(&f).unwrap();
    assert!(matches!(
        read_all(&src, "ipxe.efi").await,
        Err(SourceError::NotFound)
    ));
}

#[tokio::test]
async fn open_whole_answers_from_memory_within_the_window_then_looks_again() {
    let root = tempfile::tempdir().unwrap();
    let f = root.path().join("ipxe.efi");
    std::fs::write(&f, b"first").unwrap();
    let src = DirSource::new(root.path()).unwrap();
    let whole = |r: Result<(Opened, std::fs::Metadata), SourceError>| match r {
        Ok((Opened::Memory(b), _)) => Ok(b.to_vec()),
        Ok((Opened::Disk(_), _)) => panic!("a small file from disk"),
        Err(e) => Err(e),
    };
    assert_eq!(whole(src.open_whole("ipxe.efi").await).unwrap(), b"first");
    // Removed, but checked a moment ago: still answered from memory.
    std::fs::remove_file(&f).unwrap();
    assert_eq!(whole(src.open_whole("ipxe.efi").await).unwrap(), b"first");
    // Past the window the disk is looked at again.
    std::thread::sleep(REVALIDATE_AFTER + std::time::Duration::from_millis(50));
    assert!(matches!(
        whole(src.open_whole("ipxe.efi").await),
        Err(SourceError::NotFound)
    ));
    // Back, and a name that failed is not remembered as fresh.
    std::fs::write(&f, b"again").unwrap();
    assert_eq!(whole(src.open_whole("ipxe.efi").await).unwrap(), b"again");
}

#[test]
fn sanitize_refuses_escapes() {
    for bad in [
        "",
        "/",
        "/etc/passwd",
        "../x",
        "a/../../x",
        "a/..",
        "..",
        "a\\..\\x",
        "C:\\x",
        "a\0b",
        "a\nb",
        "./",
        ".hidden",
        "a/.git/config",
        "..a",
    ] {
        assert!(
            matches!(sanitize(bad), Err(SourceError::Forbidden)),
            "{bad:?}"
        );
    }
    assert_eq!(sanitize("a//b/./c").unwrap(), vec!["a", "b", "c"]);
    assert_eq!(sanitize("ipxe.efi").unwrap(), vec!["ipxe.efi"]);
    assert_eq!(sanitize("a../b..").unwrap(), vec!["a..", "b.."]);
    let long = "a".repeat(NAME_MAX + 1);
    assert!(matches!(sanitize(&long), Err(SourceError::Forbidden)));
    assert!(sanitize(&long[1..]).is_ok());
}

#[tokio::test]
async fn dir_source_serves_files_in_chunks_and_stays_inside() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"s3cret").unwrap();
    let root = tempfile::tempdir().unwrap();
    let big: Vec<u8> = (0..(CHUNK * 3 + 17)).map(|i| (i % 251) as u8).collect();
    std::fs::write(root.path().join("big.bin"), &big).unwrap();
    std::fs::create_dir(root.path().join("sub")).unwrap();
    std::fs::write(root.path().join("sub/a"), b"a").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("escape")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.path().join("escdir")).unwrap();
    std::os::unix::fs::symlink("sub/a", root.path().join("inside")).unwrap();
    // Chunked from disk, and whole from the cache (the second time).
    for limit in [0, CACHE_FILE_MAX, CACHE_FILE_MAX] {
        let src = DirSource::with_cache_limit(root.path(), limit).unwrap();
        serves_inside_only(&src, &big).await;
    }
}

async fn serves_inside_only(dir: &DirSource, big: &[u8]) {
    // What HTTP opens (to seek) passes the same checks as what TFTP reads.
    let (_, meta) = dir.open_file("sub//a").await.unwrap();
    assert_eq!(meta.len(), 1);
    assert!(dir.open_file("inside").await.is_ok());
    for (bad, forbidden) in [
        ("escape", true),
        ("escdir/secret", true),
        ("../secret", true),
        ("sub", false),
        ("missing", false),
    ] {
        match dir.open_file(bad).await {
            Err(SourceError::Forbidden) => assert!(forbidden, "{bad}"),
            Err(SourceError::NotFound) => assert!(!forbidden, "{bad}"),
            other => panic!("{bad}: {:?}", other.map(|_| ())),
        }
    }
    let src: &dyn FileSource = dir;
    assert_eq!(read_all(src, "big.bin").await.unwrap(), big);
    assert_eq!(read_blocks(src, "big.bin", 1468).await, big);
    assert_eq!(read_all(src, "sub//a").await.unwrap(), b"a");
    assert_eq!(read_all(src, "inside").await.unwrap(), b"a");
    assert!(matches!(
        read_all(src, "escape").await,
        Err(SourceError::Forbidden)
    ));
    assert!(matches!(
        read_all(src, "escdir/secret").await,
        Err(SourceError::Forbidden)
    ));
    assert!(matches!(
        read_all(src, "missing").await,
        Err(SourceError::NotFound)
    ));
    assert!(matches!(
        read_all(src, "sub").await,
        Err(SourceError::NotFound)
    ));
    let h = src.open("big.bin").await.unwrap();
    assert_eq!(h.size(), Some(big.len() as u64));
}

#[tokio::test]
async fn memory_files_overlay_a_directory() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("disk"), b"disk").unwrap();
    let mem = MemorySource::new();
    mem.insert("virtual/boot.ipxe", &b"#!ipxe\n"[..]);
    let src = Overlay {
        upper: Arc::new(mem),
        lower: Arc::new(DirSource::new(root.path()).unwrap()),
    };
    assert_eq!(
        read_all(&src, "virtual//boot.ipxe").await.unwrap(),
        b"#!ipxe\n"
    );
    assert_eq!(read_all(&src, "disk").await.unwrap(), b"disk");
    assert!(matches!(
        read_all(&src, "../disk").await,
        Err(SourceError::Forbidden)
    ));
}
