//! Single flights: concurrent askers of the same question share one request.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

/// Requests in flight by key; whoever asks while one is on the wire waits for its
/// answer instead of sending another.
pub(super) struct Flights<K, V>(Mutex<HashMap<K, Arc<OnceCell<V>>>>);

impl<K, V> Default for Flights<K, V> {
    fn default() -> Self {
        Flights(Mutex::new(HashMap::new()))
    }
}

impl<K: Hash + Eq + Clone, V: Clone> Flights<K, V> {
    /// The answer to `key`: `work`'s, or that of the flight already under way.
    pub(super) async fn run<F: Future<Output = V>>(&self, key: K, work: impl FnOnce() -> F) -> V {
        let flight = {
            let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(key.clone())
                .or_insert_with(|| Arc::new(OnceCell::new()))
                .clone()
        };
        let answer = flight.get_or_init(work).await.clone();
        // The first to finish retires the flight (whoever started it may have been
        // cancelled); later askers go to the cache or start a new one.
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(&key).is_some_and(|f| Arc::ptr_eq(f, &flight)) {
            map.remove(&key);
        }
        answer
    }
}
