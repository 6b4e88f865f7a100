//! The Remote Workers API (`google.devtools.remoteworkers.v1test2.Bots`) as a worker
//! speaks it to BuildGrid: one bot session, created once (again after the scheduler
//! restarts or forgets it), then updated in a long poll.
//!
//! - The bot's **platform properties** go in its primary device's properties, where
//!   BuildGrid matches them against an action's platform (`match-property-keys`);
//!   its **capacity** (leases at once) in the worker's `capacity` config.
//! - **Bot id**: the same across restarts of the worker (a new session for the same
//!   id makes BuildGrid requeue the leases the old one held at once).
//! - **Updates** carry the leases ([`crate::lease::Leases::report`]) and wait on the
//!   scheduler for at most [`Session::update`]'s `wait` (the gRPC deadline: BuildGrid
//!   answers within 80 % of it when it has nothing to give).

use std::path::Path;
use std::time::Duration;

use tonic::transport::Channel;

use crate::apis::workers::{
    self, bots_client::BotsClient, BotSession, BotStatus, CreateBotSessionRequest,
    UpdateBotSessionRequest,
};

/// Who the bot is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bot {
    /// Its id, the same across restarts.
    pub id: String,
    /// The instance it serves (the session's parent).
    pub instance: String,
    /// Its platform properties (key, value).
    pub properties: Vec<(String, String)>,
    /// Leases it runs at once.
    pub capacity: usize,
}

/// The platform properties a wasm worker announces by default.
pub const DEFAULT_PROPERTIES: [(&str, &str); 2] = [("OSFamily", "wasi"), ("ISA", "wasm32")];

impl Bot {
    /// The platform properties: [`DEFAULT_PROPERTIES`] with `given` over them (a key
    /// given replaces the default's value; several values of one key are all
    /// announced, each once).
    pub fn properties_over_defaults(given: &[(String, String)]) -> Vec<(String, String)> {
        let mut all: Vec<(String, String)> = DEFAULT_PROPERTIES
            .into_iter()
            .filter(|(key, _)| !given.iter().any(|(g, _)| g == key))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        for pair in given {
            if !all.contains(pair) {
                all.push(pair.clone());
            }
        }
        all
    }

    /// The id kept in `dir` (its file `bot-id`), made the first time (this host's
    /// name and a number of the moment): the same across restarts of the worker, so
    /// that a new session gets the leases a killed worker held requeued.
    pub fn kept_id(dir: &Path) -> Result<String, String> {
        let file = dir.join("bot-id");
        if let Ok(id) = std::fs::read_to_string(&file) {
            if !id.trim().is_empty() {
                return Ok(id.trim().to_owned());
            }
        }
        let host = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let id = format!(
            "wasm9p-{host}-{:x}",
            (nanos as u64) ^ u64::from(std::process::id())
        );
        std::fs::write(&file, format!("{id}\n"))
            .map_err(|e| format!("cannot keep the bot id in {}: {e}", file.display()))?;
        Ok(id)
    }

    fn worker(&self) -> workers::Worker {
        workers::Worker {
            devices: vec![workers::Device {
                handle: self.id.clone(),
                properties: self
                    .properties
                    .iter()
                    .map(|(key, value)| workers::device::Property {
                        key: key.clone(),
                        value: value.clone(),
                    })
                    .collect(),
            }],
            properties: Vec::new(),
            configs: vec![workers::worker::Config {
                key: "capacity".into(),
                value: self.capacity.to_string(),
            }],
        }
    }
}

/// A bot session with the scheduler.
pub struct Session {
    client: BotsClient<Channel>,
    session: BotSession,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("name", &self.session.name)
            .finish()
    }
}

impl Session {
    /// Creates a session for `bot` on `channel`: its leases are those the scheduler
    /// gives in its first answer (the returned session's).
    pub async fn create(
        channel: Channel,
        bot: &Bot,
        wait: Duration,
    ) -> Result<(Session, Vec<workers::Lease>), tonic::Status> {
        let mut client = BotsClient::new(channel).max_decoding_message_size(64 << 20);
        let mut request = tonic::Request::new(CreateBotSessionRequest {
            parent: bot.instance.clone(),
            bot_session: Some(BotSession {
                bot_id: bot.id.clone(),
                status: BotStatus::Ok as i32,
                worker: Some(bot.worker()),
                ..Default::default()
            }),
        });
        request.set_timeout(wait);
        let mut session = client.create_bot_session(request).await?.into_inner();
        let leases = std::mem::take(&mut session.leases);
        Ok((Session { client, session }, leases))
    }

    /// The session's name (from the scheduler).
    pub fn name(&self) -> &str {
        &self.session.name
    }

    /// Reports `leases` with the bot's `status`, waiting at most `wait` for the
    /// scheduler's answer: the leases it lists.
    pub async fn update(
        &mut self,
        status: BotStatus,
        leases: Vec<workers::Lease>,
        wait: Duration,
    ) -> Result<Vec<workers::Lease>, tonic::Status> {
        let mut session = self.session.clone();
        session.status = status as i32;
        session.leases = leases;
        let mut request = tonic::Request::new(UpdateBotSessionRequest {
            name: session.name.clone(),
            bot_session: Some(session),
            update_mask: None,
        });
        request.set_timeout(wait);
        let mut answer = self.client.update_bot_session(request).await?.into_inner();
        let leases = std::mem::take(&mut answer.leases);
        // The version and expiry the scheduler keeps go back in the next update.
        self.session = answer;
        Ok(leases)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_properties_replace_the_defaults_key_and_add_the_rest_once() {
        let given = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            Bot::properties_over_defaults(&[]),
            given(&[("OSFamily", "wasi"), ("ISA", "wasm32")])
        );
        assert_eq!(
            Bot::properties_over_defaults(&given(&[
                ("ISA", "wasm64"),
                ("pool", "a"),
                ("pool", "b"),
                ("pool", "a"),
            ])),
            given(&[
                ("OSFamily", "wasi"),
                ("ISA", "wasm64"),
                ("pool", "a"),
                ("pool", "b")
            ])
        );
    }

    #[test]
    fn the_bot_id_is_made_once_and_read_back_after() {
        let dir = tempfile::tempdir().unwrap();
        let id = Bot::kept_id(dir.path()).unwrap();
        assert!(id.starts_with("wasm9p-"), "{id}");
        assert_eq!(Bot::kept_id(dir.path()).unwrap(), id);
        std::fs::write(dir.path().join("bot-id"), "farm-7\n").unwrap();
        assert_eq!(Bot::kept_id(dir.path()).unwrap(), "farm-7");
        let gone = dir.path().join("no-such-dir");
        assert!(Bot::kept_id(&gone)
            .unwrap_err()
            .contains("cannot keep the bot id"));
    }

    #[test]
    fn properties_go_on_the_primary_device_and_capacity_in_the_configs() {
        let bot = Bot {
            id: "w1".into(),
            instance: "main".into(),
            properties: vec![
                ("OSFamily".into(), "wasi".into()),
                ("ISA".into(), "wasm32".into()),
            ],
            capacity: 2,
        };
        let worker = bot.worker();
        let device = &worker.devices[0];
        assert_eq!(device.properties.len(), 2);
        assert_eq!(device.properties[0].key, "OSFamily");
        assert_eq!(worker.configs[0].key, "capacity");
        assert_eq!(worker.configs[0].value, "2");
    }
}
