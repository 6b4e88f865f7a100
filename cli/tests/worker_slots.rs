//! `wasm9p worker` runs its guests in slot processes (`wasm9p worker-slot`), killed to
//! stop a guest: a component asleep past its timeout is stopped as a module is, a
//! slot that dies fails its own action alone, and a killed worker leaves no guest
//! running.

mod farm;

use std::time::{Duration, Instant};

use farm::{guest, Client, Farm, Root, Worker};
use wasm9p_remote::apis::v2;

const DEADLINE_EXCEEDED: i32 = 4;
const INTERNAL: i32 = 13;

fn status(response: &v2::ExecuteResponse) -> (i32, String) {
    let status = response.status.clone().unwrap_or_default();
    (status.code, status.message)
}

/// The processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so from the last ')'.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let mut fields = after.split(' ');
        let (state, ppid) = (fields.next(), fields.next());
        if state != Some("Z") && ppid == Some(pid.to_string().as_str()) {
            found.push(child);
        }
    }
    found
}

/// Whether process `pid` still runs (a zombie has ended).
fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat[stat.rfind(')').unwrap() + 2..].starts_with('Z'))
}

/// The slot processes of `worker` (its `wasm9p worker-slot` children).
fn slots(worker: &Worker) -> Vec<u32> {
    children(worker.pid())
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmd| cmd.split(|b| *b == 0).any(|arg| arg == b"worker-slot"))
        })
        .collect()
}

/// The slot of `worker` that runs a guest, once there is one: it has the guest's
/// stdout file open (`N.out` in the worker's directory for its slots).
fn running_slot(worker: &Worker) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let running: Vec<u32> = slots(worker)
            .into_iter()
            .filter(|pid| {
                std::fs::read_dir(format!("/proc/{pid}/fd"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                    .any(|target| {
                        let target = target.to_string_lossy();
                        target.contains("/wasm9p-worker-") && target.ends_with(".out")
                    })
            })
            .collect();
        match running[..] {
            [pid] => return pid,
            [] => assert!(Instant::now() < deadline, "no guest runs: {}", worker.log()),
            _ => panic!("one action, slots running guests: {running:?}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill(pid: u32) {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
}

#[test]
fn a_component_past_its_timeout_is_stopped_asleep_or_computing() {
    let farm = Farm::get();
    let pool = "slot-component";
    let _worker = Worker::start(farm, pool, &["--jobs", "1"]);
    let client = Client::new(farm);
    let module = wasm9p_tests::compile_c_guest(&wasm9p_tests::guest_source("farm_action.c"));
    let component = std::fs::read(wasm9p_tests::componentize(&module)).unwrap();
    let root = Root::default().file("tool.wasm", component, true).make();
    client.upload(root.blobs.clone());
    for argv in [&["tool.wasm", "sleep", "60"][..], &["tool.wasm", "spin"]] {
        let action = client.action(root.digest, argv, &[], pool, Some(Duration::from_secs(2)));
        let started = Instant::now();
        let response = client.execute(action, |_| {});
        let (code, message) = status(&response);
        assert_eq!(code, DEADLINE_EXCEEDED, "{argv:?}: {message}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{argv:?} ran on: {:?}",
            started.elapsed()
        );
    }
    let action = client.action(root.digest, &["tool.wasm", "sleep", "0"], &[], pool, None);
    let response = client.execute(action, |_| {});
    assert_eq!(status(&response).0, 0, "{}", status(&response).1);
    assert_eq!(farm::stdout_of(&client, &response), "slept\n");
}

#[test]
fn a_slot_that_dies_fails_its_action_alone_and_a_killed_worker_leaves_no_guest_running() {
    let farm = Farm::get();
    let pool = "slot-deaths";
    let worker = Worker::start(farm, pool, &["--jobs", "1"]);
    let client = Client::new(farm);
    let root = Root::default().file("tool.wasm", guest(), true).make();
    client.upload(root.blobs.clone());
    let client = &client;

    // The slot running a guest is killed from outside: the worker reports INTERNAL
    // and says why, BuildGrid retries the action (the worker's fault), and it runs on
    // a new slot.
    let action = client.action(
        root.digest,
        &["tool.wasm", "sleep", "3"],
        &["a"],
        pool,
        None,
    );
    std::thread::scope(|s| {
        let waiting = s.spawn(move || client.execute(action, |_| {}));
        let slot = [running_slot(&worker)];
        kill(slot[0]);
        let response = waiting.join().unwrap();
        let (code, message) = status(&response);
        assert_eq!(code, 0, "{message}");
        assert_eq!(farm::stdout_of(client, &response), "slept\n");
        let log = worker.log();
        assert!(
            log.contains(&format!(
                "code {INTERNAL}: the worker could not run the guest: the slot process {}",
                slot[0]
            )) && log.contains("SIGKILL"),
            "{log}"
        );
        assert_eq!(worker.actions().len(), 2, "run again: {log}");
        assert_ne!(slots(&worker), slot, "on a new slot");
    });
    // An idle slot that died is replaced, its next action none the worse.
    let idle = slots(&worker);
    assert_eq!(idle.len(), 1, "{idle:?}");
    kill(idle[0]);
    while runs(idle[0]) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let action = client.action(root.digest, &["tool.wasm", "exit", "0"], &["b"], pool, None);
    assert_eq!(status(&client.execute(action, |_| {})).0, 0);
    assert_eq!(worker.actions().len(), 3, "once: {}", worker.log());

    // The worker is killed while its guest computes: the guest's process ends too.
    let action = client.action(root.digest, &["tool.wasm", "spin"], &["c"], pool, None);
    let name = std::sync::Mutex::new(String::new());
    std::thread::scope(|s| {
        let name = &name;
        let waiting = s.spawn(move || client.execute(action, |n| *name.lock().unwrap() = n.into()));
        let slot = [running_slot(&worker)];
        drop(worker.kill());
        let deadline = Instant::now() + Duration::from_secs(10);
        while runs(slot[0]) {
            assert!(Instant::now() < deadline, "the guest's slot runs on");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The lease the killed worker held is the client's to take back.
        let deadline = Instant::now() + Duration::from_secs(30);
        let name = loop {
            let name = name.lock().unwrap().clone();
            if !name.is_empty() {
                break name;
            }
            assert!(Instant::now() < deadline, "the operation was never named");
            std::thread::sleep(Duration::from_millis(20));
        };
        client.cancel(&name);
        assert_ne!(status(&waiting.join().unwrap()).0, 0);
    });
}
