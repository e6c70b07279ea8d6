//! The tar reader and writer, on hand-made streams (old forms, hostile ones).

use super::*;

const BLOB: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// The hand-written ustar writer flowd used before the `tar` crate: its
/// archives must still import.
mod old_form {
    use super::BLOCK;

    fn octal(out: &mut [u8], v: u64) {
        let s = format!("{:0width$o}", v, width = out.len() - 1);
        let b = s.as_bytes();
        let n = b.len().min(out.len() - 1);
        out[..n].copy_from_slice(&b[b.len() - n..]);
        out[out.len() - 1] = 0;
    }

    /// A header with any type flag, so hostile entries can be made too.
    pub fn header(name: &str, size: u64, flag: u8) -> [u8; BLOCK] {
        let mut h = [0u8; BLOCK];
        let nb = name.as_bytes();
        h[..nb.len().min(100)].copy_from_slice(&nb[..nb.len().min(100)]);
        octal(&mut h[100..108], if flag == b'5' { 0o755 } else { 0o644 });
        octal(&mut h[108..116], 0);
        octal(&mut h[116..124], 0);
        octal(&mut h[124..136], size);
        octal(&mut h[136..148], 0);
        h[156] = flag;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
        let s = format!("{sum:06o}\0 ");
        h[148..156].copy_from_slice(s.as_bytes());
        h
    }

    pub fn append(out: &mut Vec<u8>, name: &str, data: &[u8], flag: u8) {
        out.extend_from_slice(&header(name, data.len() as u64, flag));
        out.extend_from_slice(data);
        let pad = (BLOCK - data.len() % BLOCK) % BLOCK;
        out.extend(std::iter::repeat_n(0u8, pad));
    }

    pub fn end(out: &mut Vec<u8>) {
        out.extend(std::iter::repeat_n(0u8, 2 * BLOCK));
    }
}

fn archive_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("history.jsonl"), "{\"n\":1}\n").unwrap();
    std::fs::write(d.path().join("host.jsonl"), "").unwrap();
    std::fs::create_dir(d.path().join("blobs")).unwrap();
    std::fs::write(d.path().join("blobs").join(BLOB), vec![7u8; 1500]).unwrap();
    d
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for n in sorted_names(dir, true).unwrap() {
        out.push((n.clone(), std::fs::read(dir.join(&n)).unwrap()));
    }
    for n in sorted_names(&dir.join("blobs"), false).unwrap() {
        out.push((
            format!("blobs/{n}"),
            std::fs::read(dir.join("blobs").join(&n)).unwrap(),
        ));
    }
    out
}

#[test]
fn pack_then_unpack_round_trips_and_is_deterministic() {
    let src = archive_dir();
    let tar = pack(src.path()).unwrap();
    assert_eq!(tar, pack(src.path()).unwrap());
    let dst = tempfile::tempdir().unwrap();
    unpack(&tar[..], dst.path()).unwrap();
    assert_eq!(files(dst.path()), files(src.path()));
}

#[test]
fn the_old_hand_written_form_still_unpacks() {
    let src = archive_dir();
    let mut tar = Vec::new();
    for (name, data) in files(src.path()) {
        if name.starts_with("blobs/") && !tar.windows(6).any(|w| w == b"blobs/") {
            old_form::append(&mut tar, "blobs/", &[], b'5');
        }
        old_form::append(&mut tar, &name, &data, b'0');
    }
    old_form::end(&mut tar);
    let dst = tempfile::tempdir().unwrap();
    unpack(&tar[..], dst.path()).unwrap();
    assert_eq!(files(dst.path()), files(src.path()));
}

/// A well-formed pax header of another tar tool (times, owner names) is
/// ignored: the entry it describes unpacks.
#[test]
fn well_formed_pax_headers_are_ignored() {
    let mut tar = Vec::new();
    old_form::append(
        &mut tar,
        "PaxHeaders/history.jsonl",
        b"30 mtime=1700000000.123456789\n15 uname=alice\n",
        b'x',
    );
    old_form::append(&mut tar, "history.jsonl", b"{}\n", b'0');
    old_form::end(&mut tar);
    let dst = tempfile::tempdir().unwrap();
    unpack(&tar[..], dst.path()).unwrap();
    assert_eq!(
        std::fs::read(dst.path().join("history.jsonl")).unwrap(),
        b"{}\n"
    );
}

/// Path traversal, links, other entry types, entries claiming more than
/// the stream, a cut stream and a bad checksum: each is refused, and nothing
/// is written outside the private directory (which import then drops).
#[test]
fn hostile_archives_are_refused() {
    let entry = |name: &str, flag: u8| {
        let mut t = Vec::new();
        old_form::append(&mut t, name, b"{}\n", flag);
        old_form::end(&mut t);
        t
    };
    let mut oversize = old_form::header("history.jsonl", 1 << 32, b'0').to_vec();
    oversize.extend(std::iter::repeat_n(0u8, 4 * BLOCK));
    let mut short = old_form::header("history.jsonl", 1 << 20, b'0').to_vec();
    short.extend(std::iter::repeat_n(0u8, 4 * BLOCK));
    let mut cut = Vec::new();
    old_form::append(&mut cut, "history.jsonl", b"{}\n", b'0');
    let mut bad_sum = entry("history.jsonl", b'0');
    bad_sum[0] = b'H';
    let mut symlink = old_form::header("history.jsonl", 0, b'2');
    symlink[157..162].copy_from_slice(b"/etc/");
    let sum: u64 = symlink
        .iter()
        .enumerate()
        .map(|(i, b)| {
            if (148..156).contains(&i) {
                32
            } else {
                u64::from(*b)
            }
        })
        .sum();
    symlink[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    let mut symlink = symlink.to_vec();
    old_form::end(&mut symlink);
    // A pax header (`x`, or `g`) with `records`, then history.jsonl.
    let pax = |flag: u8, records: &[u8]| {
        let mut t = Vec::new();
        old_form::append(&mut t, "PaxHeaders/history.jsonl", records, flag);
        old_form::append(&mut t, "history.jsonl", b"{}\n", b'0');
        old_form::end(&mut t);
        t
    };
    let mut pax_at_end = Vec::new();
    old_form::append(&mut pax_at_end, "history.jsonl", b"{}\n", b'0');
    old_form::append(&mut pax_at_end, "PaxHeaders/x", b"13 mtime=1.5\n", b'x');
    old_form::end(&mut pax_at_end);
    let mut two_pax = Vec::new();
    old_form::append(&mut two_pax, "PaxHeaders/a", b"13 mtime=1.5\n", b'x');
    old_form::append(&mut two_pax, "PaxHeaders/b", b"13 mtime=1.5\n", b'x');
    old_form::append(&mut two_pax, "history.jsonl", b"{}\n", b'0');
    old_form::end(&mut two_pax);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        // Issue 36: the crate skipped a malformed record.
        (
            "pax record of the wrong length",
            pax(b'x', b"99 mtime=1.5\n"),
        ),
        ("pax record shorter than said", pax(b'x', b"12 mtime=1.5\n")),
        ("pax record without key=value", pax(b'x', b"11 mtime15\n")),
        ("pax record without a length", pax(b'x', b"mtime=1.5\n")),
        ("pax length not decimal", pax(b'x', b"1a mtime=1\n")),
        ("pax record with an empty key", pax(b'x', b"9 =value\n")),
        ("pax record not UTF-8", pax(b'x', b"10 key=\xff\xfe\n")),
        ("global pax record malformed", pax(b'g', b"99 comment=x\n")),
        ("pax path", pax(b'x', b"18 path=flow.json\n")),
        ("pax size", pax(b'x', b"12 size=999\n")),
        ("pax sparse map", pax(b'x', b"23 GNU.sparse.map=0,10\n")),
        ("pax header describing no entry", pax_at_end),
        ("two pax headers in a row", two_pax),
        ("GNU long name", entry("././@LongLink", b'L')),
        ("parent path", entry("../history.jsonl", b'0')),
        ("absolute path", entry("/tmp/history.jsonl", b'0')),
        (
            "blob path traversal",
            entry(&format!("blobs/../{}", &BLOB[..61]), b'0'),
        ),
        ("other name", entry("flow.json", b'0')),
        ("symlink", symlink),
        ("hard link", entry("host.jsonl", b'1')),
        ("fifo", entry("host.jsonl", b'6')),
        ("other directory", entry("etc/", b'5')),
        ("oversize entry", oversize),
        ("entry longer than the stream", short),
        ("no end-of-archive blocks", cut),
        ("bad checksum", bad_sum),
        ("not a tar", b"not a tar".to_vec()),
    ];
    for (what, tar) in cases {
        let parent = tempfile::tempdir().unwrap();
        let dst = parent.path().join("a");
        std::fs::create_dir(&dst).unwrap();
        let detail = match unpack(&tar[..], &dst) {
            Ok(()) => panic!("{what}: accepted"),
            Err(UnpackError::Refused(d)) => d,
            Err(e) => panic!("{what}: {e}"),
        };
        assert!(
            detail.starts_with("not a run archive tar"),
            "{what}: {detail}"
        );
        if what.contains("pax") {
            assert!(detail.contains("pax"), "{what}: {detail}");
        }
        let beside = sorted_names(parent.path(), false).unwrap();
        assert_eq!(beside, ["a"], "{what}: wrote outside the directory");
    }
}

const RUN_A: &str = "run-01m979z4t4mca98a83en25qcst";
const RUN_B: &str = "run-01m979z5zx367wnsvgfmhbzp7g";

/// Every file under `dir`, by its path relative to `dir`.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// An archive of several runs packs to one directory per run (and the
/// signature at the top) and unpacks to the same tree; a signed archive of
/// one run carries signature.json beside history.jsonl.
#[test]
fn archives_of_several_runs_and_signatures_round_trip() {
    let root = tempfile::tempdir().unwrap();
    for run in [RUN_A, RUN_B] {
        let d = root.path().join(run);
        std::fs::create_dir_all(d.join("blobs")).unwrap();
        std::fs::write(d.join("history.jsonl"), format!("{run}\n")).unwrap();
        std::fs::write(d.join("host.jsonl"), "").unwrap();
        std::fs::write(d.join("blobs").join(BLOB), run).unwrap();
    }
    std::fs::write(root.path().join("signature.json"), "{}\n").unwrap();
    let tar = pack(root.path()).unwrap();
    assert_eq!(tar, pack(root.path()).unwrap(), "deterministic");
    let names: Vec<String> = tar::Archive::new(&tar[..])
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert_eq!(names[0], "signature.json");
    assert_eq!(names[1], format!("{RUN_A}/"));
    let dst = tempfile::tempdir().unwrap();
    unpack(&tar[..], dst.path()).unwrap();
    assert_eq!(tree(dst.path()), tree(root.path()));

    let one = archive_dir();
    let unsigned = pack(one.path()).unwrap();
    std::fs::write(one.path().join("signature.json"), "{}\n").unwrap();
    let signed = pack(one.path()).unwrap();
    assert!(signed.len() > unsigned.len());
    let dst = tempfile::tempdir().unwrap();
    unpack(&signed[..], dst.path()).unwrap();
    assert_eq!(tree(dst.path()), tree(one.path()));
}

/// The names of an archive of several runs extend the strict reader and
/// loosen nothing: the two forms never mix, a run directory is named by a
/// run id, and under it only a run's own names are taken.
#[test]
fn names_of_several_runs_are_as_strict_as_one() {
    let entries = |names: &[(&str, u8)]| {
        let mut t = Vec::new();
        for (n, flag) in names {
            let data: &[u8] = if *flag == b'5' { b"" } else { b"{}\n" };
            old_form::append(&mut t, n, data, *flag);
        }
        old_form::end(&mut t);
        t
    };
    let a_hist = format!("{RUN_A}/history.jsonl");
    let a_sig = format!("{RUN_A}/signature.json");
    let a_up = format!("{RUN_A}/../history.jsonl");
    let a_blob_short = format!("{RUN_A}/blobs/abc");
    let a_nested = format!("{RUN_A}/{RUN_B}/history.jsonl");
    let a_other = format!("{RUN_A}/flow.json");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "both forms",
            entries(&[("history.jsonl", b'0'), (&a_hist, b'0')]),
        ),
        (
            "both forms, the other way",
            entries(&[(&a_hist, b'0'), ("blobs/", b'5')]),
        ),
        ("a signature inside a run", entries(&[(&a_sig, b'0')])),
        ("a parent path in a run", entries(&[(&a_up, b'0')])),
        (
            "a short blob name in a run",
            entries(&[(&a_blob_short, b'0')]),
        ),
        ("a run inside a run", entries(&[(&a_nested, b'0')])),
        ("another name in a run", entries(&[(&a_other, b'0')])),
        (
            "a directory not named by a run id",
            entries(&[("run-nope/history.jsonl", b'0')]),
        ),
        (
            "a signature directory",
            entries(&[("signature.json/", b'5')]),
        ),
        ("a link to a run's history", entries(&[(&a_hist, b'1')])),
    ];
    for (what, tar) in cases {
        let parent = tempfile::tempdir().unwrap();
        let dst = parent.path().join("a");
        std::fs::create_dir(&dst).unwrap();
        match unpack(&tar[..], &dst) {
            Ok(()) => panic!("{what}: accepted"),
            Err(UnpackError::Refused(d)) => {
                assert!(d.starts_with("not a run archive tar"), "{what}: {d}")
            }
            Err(e) => panic!("{what}: {e}"),
        }
        let beside = sorted_names(parent.path(), false).unwrap();
        assert_eq!(beside, ["a"], "{what}: wrote outside the directory");
    }
}
