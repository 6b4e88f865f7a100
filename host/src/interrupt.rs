//! Stopping a running guest from outside, promptly: wasmtime's epoch interruption.
//!
//! On an engine with epoch interruption (`wasm9p daemon --prompt-cancel` makes its
//! guests' engines so; it costs clang.wasm 12-15 % of its speed, BENCHMARKS.md
//! §7), compiled code checks the engine's epoch at function entries and loop heads.
//! One thread advances the epoch of every engine given to [`tick`] (the guest
//! engines, when made interruptible) every [`TICK`]. A guest given a cancel flag
//! ([`crate::p1::WasiP1CtxBuilder::cancel`]) gets a deadline one tick ahead and a
//! callback that, at each tick, traps if the flag is set and otherwise moves the
//! deadline on. So a
//! guest computing for seconds without a WASI call (clang generating code) stops
//! within a tick of being cancelled. A guest without a flag gets a deadline no tick
//! reaches, and costs nothing but the checks in its code. On an engine without epoch
//! interruption all of this is inert, and the flag is seen at the guest's calls only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmtime::{Engine, Store, UpdateDeadline};

/// How often the engines of cancellable guests advance their epoch.
pub const TICK: Duration = Duration::from_millis(10);

/// A deadline no ticking reaches (and far from overflowing the epoch counter).
const NEVER: u64 = 1 << 62;

/// Lets `flag` stop the guest of `store` within a [`TICK`] (a trap saying so), when
/// its engine has epoch interruption and is ticked ([`tick`]).
pub(crate) fn cancel_on<T>(store: &mut Store<T>, flag: Arc<AtomicBool>) {
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if flag.load(Ordering::Relaxed) {
            return Err(wasmtime::Error::msg(
                "cancelled: whoever started the guest went away",
            ));
        }
        Ok(UpdateDeadline::Continue(1))
    });
}

/// The guest of `store` is never interrupted (needed: an engine with epoch
/// interruption traps at once in a store without a deadline).
pub(crate) fn never<T>(store: &mut Store<T>) {
    store.set_epoch_deadline(NEVER);
}

/// Makes `engine`'s epoch advance every [`TICK`] from now on: for an engine with
/// epoch interruption (for any other it would only be wasted wake-ups).
pub fn tick(engine: &Engine) {
    static TICKED: Mutex<Vec<Engine>> = Mutex::new(Vec::new());
    let mut ticked = TICKED.lock().unwrap_or_else(|e| e.into_inner());
    if ticked.iter().any(|e| Engine::same(e, engine)) {
        return;
    }
    if ticked.is_empty() {
        let spawned = std::thread::Builder::new()
            .name("wasm9p-epoch".into())
            .spawn(|| loop {
                std::thread::sleep(TICK);
                for engine in TICKED.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                    engine.increment_epoch();
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("no epoch thread ({e}): cancelled guests stop at their next call");
            return;
        }
    }
    ticked.push(engine.clone());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancelled_loop_traps_and_an_uncancelled_one_runs_to_its_end() {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let engine = Engine::new(&config).unwrap();
        tick(&engine);
        let module = wasmtime::Module::new(
            &engine,
            r#"(module (func (export "spin") (param i32) (result i32)
                 (local i32)
                 (loop $l (local.set 1 (i32.add (local.get 1) (i32.const 1)))
                   (br_if $l (i32.lt_u (local.get 1) (local.get 0))))
                 (local.get 1)))"#,
        )
        .unwrap();
        let spin = |store: &mut Store<()>, n: i32| {
            let instance = wasmtime::Instance::new(&mut *store, &module, &[]).unwrap();
            let f = instance
                .get_typed_func::<i32, i32>(&mut *store, "spin")
                .unwrap();
            f.call(&mut *store, n)
        };
        let mut free = Store::new(&engine, ());
        never(&mut free);
        assert_eq!(spin(&mut free, 1000).unwrap(), 1000);

        let flag = Arc::new(AtomicBool::new(false));
        let mut watched = Store::new(&engine, ());
        cancel_on(&mut watched, Arc::clone(&flag));
        assert_eq!(spin(&mut watched, 1000).unwrap(), 1000);
        let setter = {
            let flag = Arc::clone(&flag);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                flag.store(true, Ordering::Relaxed);
            })
        };
        let err = spin(&mut watched, i32::MAX).unwrap_err();
        setter.join().unwrap();
        assert!(format!("{err:?}").contains("cancelled"), "{err:?}");
    }
}
