use std::io::{Cursor, Read};

use fatfs::{FileSystem, FsOptions};

use super::*;

const CMDLINE: &str =
    "console=ttyS0 metalherd.url=https://10.0.0.1:8443/boot?mac=52:54:00:12:34:56&token=s3cr3t=";

fn loader() -> Vec<u8> {
    let mut v = b"MZ systemd-boot".to_vec();
    v.resize(140_000, 0xAB);
    v
}

fn kernel() -> Vec<u8> {
    (0..3_000_000u32)
        .map(|i| {
            if i < 2 {
                b"MZ"[i as usize]
            } else {
                (i % 253) as u8
            }
        })
        .collect()
}

fn media<'a>(loader: &'a [u8], kernel: &'a [u8], cmdline: &'a str) -> BootMedia<'a> {
    BootMedia {
        loader,
        kernel,
        initrd: b"070701 an initrd",
        cmdline,
    }
}

fn le32(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize
}

/// The FAT image as the ISO's root directory record finds it.
fn boot_image(iso: &mut [u8]) -> &mut [u8] {
    let root = le32(iso, 16 * 2048 + 156 + 2) * 2048;
    let rec = root + 68; // past "." and ".."
    assert_eq!(&iso[rec + 33..rec + 46], b"EFIBOOT.IMG;1");
    let (lba, len) = (le32(iso, rec + 2), le32(iso, rec + 10));
    // The catalog's boot entry names the same place.
    let catalog = le32(iso, 17 * 2048 + 71) * 2048;
    assert_eq!(le32(iso, catalog + 32 + 8), lba);
    &mut iso[lba * 2048..lba * 2048 + len]
}

fn read(fat: &mut [u8], path: &str) -> Vec<u8> {
    let fs = FileSystem::new(Cursor::new(fat), FsOptions::new()).unwrap();
    let mut out = Vec::new();
    fs.root_dir()
        .open_file(path)
        .unwrap()
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[test]
fn the_image_holds_loader_config_kernel_and_initrd() {
    let (l, k) = (loader(), kernel());
    let m = media(&l, &k, CMDLINE);
    let mut iso = build_iso(&m).unwrap();
    assert_eq!(iso.len() % 2048, 0);
    let volume_sectors = le32(&iso, 16 * 2048 + 80);
    assert_eq!(volume_sectors * 2048, iso.len());
    let fat = boot_image(&mut iso);
    assert_eq!(read(fat, "EFI/BOOT/BOOTX64.EFI"), l);
    assert_eq!(read(fat, "vmlinuz"), k);
    assert_eq!(read(fat, "initrd"), m.initrd);
    assert_eq!(
        read(fat, "loader/loader.conf"),
        b"timeout 0\ndefault metalherd.conf\neditor no\n"
    );
    let entry = String::from_utf8(read(fat, "loader/entries/metalherd.conf")).unwrap();
    assert_eq!(
        entry,
        format!("title metalherd\nlinux /vmlinuz\ninitrd /initrd\noptions {CMDLINE}\n")
    );
}

#[test]
fn the_command_line_lands_verbatim_in_the_entry() {
    let (l, k) = (loader(), kernel());
    for cmdline in [
        "a=b&c=d?e=f#g;h|i'j\"k",
        "quiet",
        "x=\"quoted part\" y=1",
        "ünïcödé=ok",
    ] {
        let mut iso = build_iso(&media(&l, &k, cmdline)).unwrap();
        let entry = read(boot_image(&mut iso), "loader/entries/metalherd.conf");
        let line = format!("\noptions {cmdline}\n");
        assert!(
            entry.windows(line.len()).any(|w| w == line.as_bytes()),
            "{cmdline}"
        );
    }
}

#[test]
fn a_blank_command_line_gets_no_options_line() {
    let (l, k) = (loader(), kernel());
    for cmdline in ["", "   "] {
        let mut iso = build_iso(&media(&l, &k, cmdline)).unwrap();
        let entry = read(boot_image(&mut iso), "loader/entries/metalherd.conf");
        assert_eq!(entry, b"title metalherd\nlinux /vmlinuz\ninitrd /initrd\n");
    }
}

#[test]
fn command_lines_the_loader_would_change_are_refused() {
    use CmdlineProblem::*;
    let long = "x".repeat(MAX_CMDLINE + 1);
    let cases: [(&str, CmdlineProblem); 7] = [
        ("a=1\ninitrd /evil", ControlCharacter { code: 0x0A }),
        ("a=1\rb=2", ControlCharacter { code: 0x0D }),
        ("a=1\0b=2", ControlCharacter { code: 0 }),
        ("a=1\tb=2", ControlCharacter { code: 9 }),
        ("\"a=1 b=2\"", Quoted),
        (" \"a=1\"  ", Quoted),
        (
            &long,
            TooLong {
                len: MAX_CMDLINE + 1,
            },
        ),
    ];
    let (l, k) = (loader(), kernel());
    for (cmdline, problem) in cases {
        assert_eq!(check_cmdline(cmdline), Err(problem.clone()));
        match build_iso(&media(&l, &k, cmdline)) {
            Err(VmediaError::Cmdline(p)) => assert_eq!(p, problem),
            other => panic!("{cmdline:?}: {:?}", other.map(|v| v.len())),
        }
    }
    assert_eq!(check_cmdline(&"x".repeat(MAX_CMDLINE)), Ok(()));
    assert_eq!(
        check_cmdline(&format!(" {} ", "x".repeat(MAX_CMDLINE))),
        Ok(())
    );
    assert_eq!(check_cmdline("\""), Ok(()));
    assert_eq!(
        check_cmdline(" a=1 "),
        Ok(()),
        "edge spaces only get dropped"
    );
}

#[test]
fn errors_never_quote_the_command_line() {
    let e = build_iso(&media(&loader(), &kernel(), "token=s3cr3t\n")).unwrap_err();
    assert!(!e.to_string().contains("s3cr3t"), "{e}");
    assert!(e.to_string().contains("U+000A"), "{e}");
}

#[test]
fn empty_or_non_efi_inputs_are_refused() {
    let (l, k) = (loader(), kernel());
    assert!(matches!(
        build_iso(&media(b"", &k, "")),
        Err(VmediaError::Empty { what: "loader" })
    ));
    assert!(matches!(
        build_iso(&media(&l, b"\x7fELF", "")),
        Err(VmediaError::NotEfi { what: "kernel" })
    ));
    let mut m = media(&l, &k, "");
    m.initrd = b"";
    assert!(matches!(
        build_iso(&m),
        Err(VmediaError::Empty { what: "initrd" })
    ));
}

#[test]
fn same_media_same_bytes() {
    let (l, k) = (loader(), kernel());
    assert!(
        build_iso(&media(&l, &k, CMDLINE)).unwrap() == build_iso(&media(&l, &k, CMDLINE)).unwrap()
    );
}

#[test]
fn write_iso_file_writes_the_image_privately() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (l, k) = (loader(), kernel());
    let (lp, kp, ip) = (
        dir.path().join("l.efi"),
        dir.path().join("k"),
        dir.path().join("i"),
    );
    std::fs::write(&lp, &l).unwrap();
    std::fs::write(&kp, &k).unwrap();
    std::fs::write(&ip, b"070701 an initrd").unwrap();
    let out = dir.path().join("boot.iso");
    write_iso_file(&out, &lp, &kp, &ip, CMDLINE).unwrap();
    let written = std::fs::read(&out).unwrap();
    assert!(written == build_iso(&media(&l, &k, CMDLINE)).unwrap());
    let mode = std::fs::metadata(&out).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let missing = dir.path().join("nope");
    match write_iso_file(&out, &lp, &missing, &ip, CMDLINE) {
        Err(VmediaError::Read {
            what: "kernel",
            path,
            ..
        }) => assert_eq!(path, missing),
        other => panic!("{other:?}"),
    }
    // A failed build leaves the old image in place.
    assert!(std::fs::read(&out).unwrap() == written);
}
