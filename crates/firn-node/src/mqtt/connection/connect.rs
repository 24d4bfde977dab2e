//! CONNECT: who the client signs in as, and the persistent session it takes up (and keeps
//! from expiring while connected).

use bytes::Bytes;
use tokio::time::Instant;

use super::{Connection, Persistent};
use crate::auth::Principal;
use crate::mqtt::counted;
use crate::mqtt::exactly_once::{self, Qos2Ids};
use crate::mqtt::queue::{self, QueueReader};
use crate::mqtt::session::{self, SESSION_EXPIRY_S_MAX, SessionRecord};
use crate::mqtt::wire::{self, Out, Refused};

impl Connection {
    /// Who the CONNECT signs in as: on a node with users, the user its name and password
    /// name; without users, anyone.
    pub(super) fn sign_in(&self, c: &wire::Connect) -> Result<Principal, Refused> {
        if c.client_id.is_empty() && !c.clean {
            // A session to come back to needs a name (3.1.1, 3.1.3-8).
            return Err(Refused::IdentifierRejected);
        }
        let Some(users) = self.router.kernel().users() else {
            return Ok(Principal::Open);
        };
        let Some(name) = &c.username else {
            return Err(Refused::NotAuthorized);
        };
        let password = c.password.clone().unwrap_or_default();
        users
            .login(name.as_bytes(), &password)
            .map(Principal::User)
            .map_err(|_| Refused::BadCredentials)
    }

    pub(super) async fn refuse_connect(&mut self, refused: Refused) -> Result<(), String> {
        let packet_bytes_max = self.settings.packet_bytes_max;
        self.send(Out::ConnAck {
            result: Err(refused),
            session_present: false,
            packet_bytes_max,
        })
        .await
    }

    /// On a node with users, refuses a client id whose persistent session belongs to another
    /// user (`Not authorized`), whatever the CONNECT asks: taking it over would close that
    /// user's connections and end the wait of its will, and a clean start would drop its
    /// session. Without users there are no owners.
    pub(super) async fn check_owner(&mut self, client: &str) -> Result<(), Refused> {
        if self.router.kernel().users().is_none() {
            return Ok(());
        }
        let existing = session::load(&self.router, client)
            .await
            .map_err(|_| Refused::Unavailable)?;
        let user = self.session.principal().user_name();
        match existing {
            Some(record) if record.user.as_deref() != user => Err(Refused::NotAuthorized),
            _ => Ok(()),
        }
    }

    /// Takes up `client`'s persistent session (true: it had one) or makes one, if the
    /// CONNECT asks for a session that outlives it; a clean one drops any it had.
    pub(super) async fn resume(
        &mut self,
        c: &wire::Connect,
        client: &str,
    ) -> Result<bool, Refused> {
        let expiry_s = match c.expiry_s {
            // 5.0: the client's interval, "never" (u32::MAX) included, within the bound.
            Some(s) => u64::from(s).min(SESSION_EXPIRY_S_MAX),
            None if !c.clean => SESSION_EXPIRY_S_MAX,
            None => 0,
        };
        let router = self.router.clone();
        if (c.clean || expiry_s == 0) && self.sessions.knows(client) {
            session::drop_session(&router, client)
                .await
                .map_err(|_| Refused::Unavailable)?;
            self.sessions.set(client, None);
        }
        if expiry_s == 0 {
            return Ok(false);
        }
        let user = self.session.principal().user_name().map(str::to_owned);
        let existing = match c.clean {
            true => None,
            false => session::load(&router, client)
                .await
                .map_err(|_| Refused::Unavailable)?,
        };
        if existing.as_ref().is_some_and(|r| r.user != user) {
            // A session is its user's: another signing in with its client id does not get
            // its messages.
            return Err(Refused::NotAuthorized);
        }
        if !self.sessions.has_room(client) {
            return Err(Refused::Unavailable);
        }
        let present = existing.is_some();
        let record = match existing {
            Some(existing) => SessionRecord {
                user,
                expiry_s,
                ..existing
            },
            None => SessionRecord {
                user,
                expiry_s,
                filters: Vec::new(),
                epoch: exactly_once::new_epoch(),
            },
        };
        queue::make(&router, client)
            .await
            .map_err(|_| Refused::Unavailable)?;
        session::save(&router, client, &record)
            .await
            .map_err(|_| Refused::Unavailable)?;
        self.sessions.set(client, Some(&record));
        for (filter, q) in &record.filters {
            self.filters.insert(filter.clone(), (*q, Bytes::new()));
        }
        let reader = QueueReader::start(router, client).map_err(|_| Refused::IdentifierRejected)?;
        let persistent = Persistent {
            client: client.to_owned(),
            qos2: Qos2Ids::new(client, record.epoch),
            record,
            reader,
            renew_at: Instant::now(),
        };
        let first_renewal = Instant::now() + persistent.renew_every();
        self.persistent = Some(Persistent {
            renew_at: first_renewal,
            ..persistent
        });
        counted(if present {
            "session_resumed"
        } else {
            "session_made"
        });
        Ok(present)
    }

    /// A 5.0 DISCONNECT's Session Expiry Interval: the session's expiry from now on (at most
    /// the bound; 0 ends it with the connection). MQTT 5.0 (3.14.2.2.2) makes a non-zero one
    /// after a CONNECT of 0 a protocol error: DISCONNECT 0x82, and the DISCONNECT is not
    /// taken as one (`Err`: the will is published).
    pub(super) async fn session_expires(&mut self, expiry_s: Option<u32>) -> Result<(), String> {
        let Some(expiry_s) = expiry_s else {
            return Ok(());
        };
        match self.persistent.as_mut() {
            Some(p) => p.record.expiry_s = u64::from(expiry_s).min(SESSION_EXPIRY_S_MAX),
            None if expiry_s == 0 => {}
            None => {
                self.send(Out::Disconnect(wire::Closing::ProtocolError))
                    .await?;
                return Err("a DISCONNECT gave a session expiry after a CONNECT of none".into());
            }
        }
        Ok(())
    }

    /// The connection ended: a persistent session's expiry counts from now; one of 0 (a
    /// DISCONNECT's) ends with it.
    // (`&mut self`: the connection is `Send` but not `Sync`.)
    pub(super) async fn session_ended(&mut self) {
        let Some(p) = &self.persistent else {
            return;
        };
        let ended = match p.record.expiry_s {
            0 => session::drop_session(&self.router, &p.client).await,
            s => session::renew(&self.router, &p.client, s).await,
        };
        match ended {
            Ok(()) if p.record.expiry_s == 0 => self.sessions.set(&p.client, None),
            Ok(()) => {}
            Err(e) => tracing::debug!(client = p.client, "an MQTT session's expiry: {e}"),
        }
    }

    /// Moves a connected persistent session's expiry along (in the background: a failed
    /// renewal is tried again at the next).
    pub(super) fn renew(&mut self) {
        let Some(p) = self.persistent.as_mut() else {
            return;
        };
        p.renew_at = Instant::now() + p.renew_every();
        let (router, client, expiry_s) = (self.router.clone(), p.client.clone(), p.record.expiry_s);
        tokio::spawn(async move {
            if let Err(e) = session::renew(&router, &client, expiry_s).await {
                tracing::debug!(client, "renewing an MQTT session's expiry: {e}");
            }
        });
    }
}
