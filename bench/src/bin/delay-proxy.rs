//! `delay-proxy UPSTREAM MICROSECONDS`: a 9P proxy on 127.0.0.1 that holds every reply
//! from the `tcp:` server UPSTREAM for MICROSECONDS before passing it on, as a slow
//! link between the client and the server would (the build workload's `BENCH_DELAY_US`).
//! Prints `tcp:127.0.0.1:PORT` on stdout, then relays until killed. Replies are held
//! one after another (the proxy forwards in order), which a client with one request in
//! flight at a time, as `--jobs 1` mostly is, does not notice.

use std::process::ExitCode;
use std::time::Duration;

use wasm9p_tests::fault_proxy::{Direction, Fault, FaultProxy, Schedule};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(upstream), Some(delay), 2) = (args.first(), args.get(1), args.len()) else {
        eprintln!("usage: delay-proxy tcp:HOST:PORT MICROSECONDS");
        return ExitCode::from(2);
    };
    let Ok(upstream) = upstream.parse::<wasm9p_proto::Addr>() else {
        eprintln!("delay-proxy: {upstream:?} is not an address");
        return ExitCode::from(2);
    };
    let Ok(micros) = delay.parse::<u64>() else {
        eprintln!("delay-proxy: {delay:?} is not a number of microseconds");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("delay-proxy: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async {
        let schedule = Schedule {
            seed: 1,
            fault: Fault::Delay(Duration::from_micros(micros)),
            direction: Direction::Replies,
            every: 1,
            spare: 0,
        };
        let proxy = FaultProxy::start(&upstream, schedule).await;
        println!("{}", proxy.addr);
        std::future::pending::<()>().await;
    });
    ExitCode::SUCCESS
}
