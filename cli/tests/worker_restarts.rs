//! `wasm9p worker` across restarts, on a farm of this binary's own (see `farm`; the
//! scheduler's restart would disturb other tests' actions): a worker restarted after
//! SIGKILL keeps its bot id and gets back the lease it held, and a worker whose
//! scheduler restarts says so, keeps going, and runs the next action.

mod farm;

use std::sync::Mutex;
use std::time::Duration;

use farm::{guest, stdout_of, Client, Farm, Root, Worker};
use wasm9p_remote::apis::v2;

/// One test at a time: the scheduler's restart stops every action in flight.
static TURN: Mutex<()> = Mutex::new(());

fn ok(client: &Client, response: &v2::ExecuteResponse) -> String {
    let status = response.status.clone().unwrap_or_default();
    assert_eq!(status.code, 0, "{}", status.message);
    stdout_of(client, response)
}

/// The bot id a worker's log names ("worker: bot ID for ...").
fn bot_id(log: &str) -> String {
    log.lines()
        .find_map(|l| l.strip_prefix("wasm9p: worker: bot "))
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no bot line in: {log}"))
        .to_owned()
}

#[test]
fn a_worker_restarted_after_sigkill_keeps_its_bot_id_and_runs_the_lease_it_held() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let farm = Farm::get();
    let pool = "again";
    let first = Worker::start(farm, pool, &["--jobs", "1"]);
    let id = bot_id(&first.log());
    let client = Client::new(farm);
    let root = Root::default().file("tool.wasm", guest(), true).make();
    client.upload(root.blobs.clone());
    let action = client.action(
        root.digest,
        &["tool.wasm", "sleep", "2"],
        &["out.txt"],
        pool,
        None,
    );
    let client = &client;
    std::thread::scope(|s| {
        let waiting = s.spawn(move || client.execute(action, |_| {}));
        while !first.is_running() {
            std::thread::sleep(Duration::from_millis(20));
        }
        // The only worker of its pool: the lease can only come back to it.
        let dir = first.kill();
        let again = Worker::start_in(farm, pool, &["--jobs", "1"], dir);
        assert_eq!(bot_id(&again.log()), id, "the same bot id after a restart");
        assert_eq!(ok(client, &waiting.join().unwrap()), "slept\n");
        assert_eq!(again.actions().len(), 1, "the restarted worker ran it");
    });
}

#[test]
fn a_worker_whose_scheduler_restarts_says_so_and_runs_the_next_action() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let farm = Farm::get();
    let pool = "restart";
    let worker = Worker::start(farm, pool, &["--jobs", "1"]);
    let client = Client::new(farm);
    let root = Root::default().file("tool.wasm", guest(), true).make();
    client.upload(root.blobs.clone());
    let run = |text: &str| {
        let action = client.action(
            root.digest,
            &["tool.wasm", "write", "out.txt", text],
            &["out.txt"],
            pool,
            None,
        );
        ok(&client, &client.execute(action, |_| {}))
    };
    assert_eq!(run("before"), "wrote out.txt\n");
    farm.restart_scheduler(|| {
        worker.wait_for_log("the scheduler does not answer", Duration::from_secs(60));
    });
    worker.wait_for_log("the scheduler answers again", Duration::from_secs(60));
    assert_eq!(run("after"), "wrote out.txt\n");
    assert_eq!(worker.actions().len(), 2, "{}", worker.log());
}
