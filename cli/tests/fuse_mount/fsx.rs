//! fsx (random reads, writes, truncates and maps checked against a model) and fio's
//! verifying jobs through the mount.

use super::*;

/// fsx-style: random writes, reads, truncates, reopens and fsyncs on one file through
/// two handles (one read-write, one read-only), every read and size checked against an
/// in-memory model; at the end the backing file must equal the model.
fn fsx(mnt: &Path, backing: &Path, seed: u64, ops: usize) -> Vec<String> {
    const MAX_LEN: u64 = 512 << 10;
    let path = mnt.join("fsx.bin");
    let mut model: Vec<u8> = Vec::new();
    let open_rw = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap()
    };
    let mut rw = open_rw();
    let mut ro = std::fs::File::open(&path).unwrap();
    let mut rng = Rng::new(seed);
    let mut log = Vec::new();
    for step in 0..ops {
        let op = rng.below(100);
        let context = |log: &Vec<String>| {
            format!(
                "seed {seed} step {step}; last ops:\n{}",
                log[log.len().saturating_sub(40)..].join("\n")
            )
        };
        match op {
            0..=39 => {
                let off = rng.below(MAX_LEN);
                let len = 1 + rng.below(64 << 10).min(MAX_LEN - off);
                let byte = rng.next_u64() as u8;
                let data: Vec<u8> = (0..len).map(|i| byte.wrapping_add(i as u8)).collect();
                rw.write_all_at(&data, off).unwrap();
                let end = (off + len) as usize;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].copy_from_slice(&data);
                log.push(format!("write {off} {len}"));
            }
            40..=74 => {
                let off = rng.below(model.len() as u64 + 4096);
                let len = 1 + rng.below(96 << 10);
                let file = if rng.below(2) == 0 { &ro } else { &rw };
                let mut buf = vec![0u8; len as usize];
                let mut got = 0;
                while got < buf.len() {
                    let n = file.read_at(&mut buf[got..], off + got as u64).unwrap();
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
                let want = model
                    .get(off as usize..(off as usize + len as usize).min(model.len()))
                    .unwrap_or(&[]);
                log.push(format!("read {off} {len} -> {got}"));
                if &buf[..got] != want {
                    let first = buf.iter().zip(want).position(|(a, b)| a != b);
                    if let Some(k) = first {
                        let upto = (k + 16).min(got);
                        let disk = std::fs::read(backing.join("fsx.bin")).unwrap_or_default();
                        let at = off as usize + k;
                        eprintln!(
                            "got {:?}\nwant {:?}\nbacking file {:?}",
                            &buf[k..upto],
                            &want[k..upto],
                            disk.get(at..at + (upto - k))
                        );
                    }
                    panic!(
                        "read {off}+{len}: got {got} bytes, model has {}; first difference at \
                         +{first:?}; {}",
                        want.len(),
                        context(&log)
                    );
                }
            }
            75..=84 => {
                let size = rng.below(MAX_LEN);
                rw.set_len(size).unwrap();
                model.resize(size as usize, 0);
                log.push(format!("truncate {size}"));
            }
            85..=89 => {
                rw.sync_all().unwrap();
                log.push("fsync".into());
            }
            90..=94 => {
                rw = open_rw();
                ro = std::fs::File::open(&path).unwrap();
                log.push("reopen".into());
            }
            _ => {
                let size = std::fs::metadata(&path).unwrap().len();
                log.push(format!("stat -> {size}"));
                assert_eq!(size, model.len() as u64, "{}", context(&log));
                let mut end = rw.try_clone().unwrap();
                assert_eq!(
                    end.seek(SeekFrom::End(0)).unwrap(),
                    model.len() as u64,
                    "{}",
                    context(&log)
                );
            }
        }
    }
    drop((rw, ro));
    let on_disk = std::fs::read(backing.join("fsx.bin")).unwrap();
    assert!(
        on_disk == model,
        "seed {seed}: backing file differs from the model ({} vs {} bytes)",
        on_disk.len(),
        model.len()
    );
    log
}

#[test]
fn fsx_agrees_with_the_host_filesystem_itself() {
    // The tester's own check: on a plain directory its model must hold.
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(fsx(dir.path(), dir.path(), 7, 1500).len(), 1500);
}

#[test]
fn fsx_random_io_matches_a_model_in_every_mode() {
    // Longer runs: WASM9P_FSX_OPS=100000 (and another WASM9P_FSX_SEED).
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let ops = env("WASM9P_FSX_OPS").unwrap_or(1500) as usize;
    let seed = env("WASM9P_FSX_SEED").unwrap_or(0x5eed_0000);
    // The same sequence on bind (the baseline through the same FUSE layer) and 9p.
    for mode in ["bind"].iter().chain(&MODES) {
        let dir = Tree::build(&[]);
        let mut m = Mounted::start(&embedded(dir.path(), mode));
        eprintln!("fsx on {mode}, seed {seed}, {ops} operations");
        let log = fsx(m.path(), dir.path(), seed, ops);
        assert_eq!(log.len(), ops);
        let (status, stderr) = m.stop();
        assert!(status.success(), "{mode}: {status} {stderr}");
    }
}

#[test]
fn fio_verifies_sequential_and_random_io() {
    let fio = Path::new("/usr/bin/fio");
    assert!(
        fio.exists(),
        "fio missing: apt-get install fio (scripts/test does)"
    );
    // fio writes its verify state files (`*-verify.state`) to its working directory:
    // a temporary one, so that none lands in the source tree.
    let work = tempfile::tempdir().unwrap();
    for mode in ["none", "loose"] {
        let dir = Tree::build(&[]);
        let mut m = Mounted::start(&embedded(dir.path(), mode));
        for (name, rw, bs, jobs) in [("seq", "write", "64k", "1"), ("rand", "randrw", "4k", "2")] {
            let out = Command::new(fio)
                .current_dir(work.path())
                .args([
                    &format!("--name={name}"),
                    &format!("--directory={}", m.path().display()),
                    &format!("--rw={rw}"),
                    &format!("--bs={bs}"),
                    "--size=8m",
                    "--verify=crc32c",
                    "--do_verify=1",
                    "--verify_fatal=1",
                    "--ioengine=psync",
                    &format!("--numjobs={jobs}"),
                    "--output-format=json",
                ])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "fio {name} on {mode}: {}\n{text}",
                String::from_utf8_lossy(&out.stderr)
            );
            let json: serde_json::Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("fio output: {e}\n{text}"));
            for job in json["jobs"].as_array().unwrap() {
                assert_eq!(job["error"].as_i64(), Some(0), "{mode} {name}: {job}");
                assert!(job["write"]["io_bytes"].as_u64().unwrap() > 0, "{job}");
            }
        }
        let (status, stderr) = m.stop();
        assert!(status.success(), "{mode}: {status} {stderr}");
    }
}
