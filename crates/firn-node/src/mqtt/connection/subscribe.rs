//! SUBSCRIBE and UNSUBSCRIBE: filters as publish/subscribe patterns (or a persistent
//! session's record), and the retained messages a new filter matches.

use bytes::Bytes;
use firn_model::{Access, CommitTs, Key, KvRead, ReadAt, ReadConsistency, Response, Scope};

use super::Connection;
use crate::mqtt::session::{self, SESSION_FILTERS_MAX};
use crate::mqtt::topic::{channel_glob, check_filter, fixed_prefix, matches};
use crate::mqtt::wire::{Out, Reason};
use crate::pubsub::Kind;

/// Retained messages a SUBSCRIBE sends at most (the newest of that many topics).
pub const RETAINED_PER_SUBSCRIBE_MAX: usize = 10_000;

/// Keys a retained-message scan reads a page.
const RETAINED_PAGE: usize = 1_000;

impl Connection {
    pub(super) async fn subscribe(
        &mut self,
        packet_id: u16,
        filters: Vec<(String, u8)>,
    ) -> Result<(), String> {
        let mut granted = Vec::with_capacity(filters.len());
        let mut retained = Vec::new();
        for (filter, asked) in filters {
            let outcome = self.listen(&filter, asked.min(1));
            if let Ok(q) = outcome {
                retained.push((filter, q));
            }
            granted.push(outcome);
        }
        self.save_filters().await?;
        // The retained messages are read as of now, once the filters listen: a message
        // written after this comes live (and only live), where a read of the newest values
        // running after the SUBACK would send one the client publishes on its SUBACK twice —
        // retained, and live. (A write acknowledged before now but not yet published on
        // its channel may still come both ways.)
        let at = match self.router.kernel().read_now() {
            Ok(now) => ReadAt::AsOf(CommitTs::end_of_micros(now.wall_us)),
            Err(_) => ReadAt::Latest,
        };
        self.send(Out::SubAck { packet_id, granted }).await?;
        for (filter, q) in retained {
            self.send_retained(&filter, q, at).await?;
        }
        Ok(())
    }

    /// Subscribes to one filter at QoS `q`.
    fn listen(&mut self, filter: &str, q: u8) -> Result<u8, Reason> {
        check_filter(filter).map_err(|_| Reason::TopicInvalid)?;
        let prefix = &self.settings.prefix;
        // Reading what the filter covers: the keys under its levels before a wildcard (a
        // topic above them that `#` matches too is checked as it comes, see `readable`).
        let before_wildcard = filter.find(['+', '#']).map_or(filter, |at| &filter[..at]);
        let reads = Bytes::from(format!("{prefix}{before_wildcard}"));
        self.session
            .authorize(&[Access::read(Scope::Prefix(reads))])
            .map_err(|_| Reason::NotAuthorized)?;
        if self.persistent.is_some() {
            // Delivered from the session's queue, not from publish/subscribe.
            if !self.filters.contains_key(filter) && self.filters.len() >= SESSION_FILTERS_MAX {
                return Err(Reason::QuotaExceeded);
            }
            self.filters.insert(filter.to_owned(), (q, Bytes::new()));
            return Ok(q);
        }
        let glob = channel_glob(prefix, filter);
        if !self.subscriber.subscribe(Kind::Pattern, glob.clone()) {
            return Err(Reason::QuotaExceeded);
        }
        self.filters.insert(filter.to_owned(), (q, glob));
        Ok(q)
    }

    pub(super) fn unsubscribe(&mut self, filter: &str) {
        let Some((_, glob)) = self.filters.remove(filter) else {
            return;
        };
        if self.persistent.is_some() {
            return;
        }
        if !self.filters.values().any(|(_, g)| *g == glob) {
            self.subscriber.unsubscribe(Kind::Pattern, &glob);
        }
    }

    /// The retained messages `filter` matches: the newest value of each live key under its
    /// fixed prefix whose topic it matches, a page of keys at a time.
    async fn send_retained(&mut self, filter: &str, q: u8, at: ReadAt) -> Result<(), String> {
        let prefix = self.settings.prefix.clone();
        let mut sent = 0;
        // `a/#` matches `a` too: the key above the subtree, read on its own.
        let parent = fixed_prefix(filter);
        if filter.ends_with("/#")
            && let Ok(key) = Key::new(Bytes::from(format!("{prefix}{parent}")))
            && self.readable(&key)
        {
            let get = KvRead::Get {
                key,
                at,
                consistency: ReadConsistency::Linearizable,
            };
            if let Ok(Response::Value(Some(v))) = self
                .session
                .run(&self.router, get.into())
                .await
                .map(|a| a.response)
                && let Some(payload) = v.value
            {
                self.send_publish(parent.to_owned(), payload, q, true)
                    .await?;
                sent += 1;
            }
        }
        let before_wildcard = filter.find(['+', '#']).map_or(filter, |at| &filter[..at]);
        let scan_prefix = Bytes::from(format!("{prefix}{before_wildcard}"));
        let mut cursor = None;
        loop {
            let scan = KvRead::Scan {
                prefix: scan_prefix.clone(),
                cursor,
                limit: RETAINED_PAGE,
                pattern: None,
                at,
                consistency: ReadConsistency::Linearizable,
            };
            let page = self.session.run(&self.router, scan.into()).await;
            let (keys, next) = match page.map(|a| a.response) {
                Ok(Response::Scan { keys, next_cursor }) => (keys, next_cursor),
                Ok(_) | Err(_) => return Ok(()),
            };
            for (key, version) in keys {
                let (Some(topic), Some(payload)) = (
                    std::str::from_utf8(key.as_bytes())
                        .ok()
                        .and_then(|k| k.strip_prefix(prefix.as_str())),
                    version.value,
                ) else {
                    continue;
                };
                if !matches(filter, topic)
                    || sent >= RETAINED_PER_SUBSCRIBE_MAX
                    || !self.readable(&key)
                {
                    continue;
                }
                let topic = topic.to_owned();
                self.send_publish(topic, payload, q, true).await?;
                sent += 1;
            }
            match next {
                Some(c) if sent < RETAINED_PER_SUBSCRIBE_MAX => cursor = Some(c),
                _ => return Ok(()),
            }
        }
    }

    /// A persistent session's filters, written to its record (and known here at once)
    /// before the SUBACK or UNSUBACK that tells the client.
    pub(super) async fn save_filters(&mut self) -> Result<(), String> {
        let Some(p) = self.persistent.as_mut() else {
            return Ok(());
        };
        p.record.filters = self
            .filters
            .iter()
            .map(|(f, (q, _))| (f.clone(), *q))
            .collect();
        session::save(&self.router, &p.client, &p.record)
            .await
            .map_err(|e| format!("writing the session's filters: {e}"))?;
        self.sessions.set(&p.client, Some(&p.record));
        Ok(())
    }
}
