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

impl Bot {
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
