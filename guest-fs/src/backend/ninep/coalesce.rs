//! Coalescing: concurrent askers of the same question share one request (what is
//! elsewhere called single-flight; not to be confused with a *flight*, the pipelined
//! batch of requests of `client::flight`).

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

/// Requests under way by key; whoever asks while one is on the wire waits for its
/// answer instead of sending another.
pub(super) struct Coalesced<K, V>(Mutex<HashMap<K, Arc<OnceCell<V>>>>);

impl<K, V> Default for Coalesced<K, V> {
    fn default() -> Self {
        Coalesced(Mutex::new(HashMap::new()))
    }
}

impl<K: Hash + Eq + Clone, V: Clone> Coalesced<K, V> {
    /// The answer to `key`: `work`'s, or that of the request already under way.
    pub(super) async fn run<F: Future<Output = V>>(&self, key: K, work: impl FnOnce() -> F) -> V {
        let pending = {
            let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(key.clone())
                .or_insert_with(|| Arc::new(OnceCell::new()))
                .clone()
        };
        let answer = pending.get_or_init(work).await.clone();
        // The first to finish retires the request (whoever started it may have been
        // cancelled); later askers go to the cache or start a new one.
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(&key).is_some_and(|f| Arc::ptr_eq(f, &pending)) {
            map.remove(&key);
        }
        answer
    }
}
