//! How much of openraft's own warning a node's log shows. openraft warns on every failed
//! call to a peer — each heartbeat (ten a second), each replication try, each vote asked —
//! so a cluster's fresh start (its nodes come up one after another, and a node asks peers
//! not up yet) warned every time, and a node down for an hour wrote tens of thousands of
//! lines about it on each peer. These are expected while a peer is starting or down, and
//! Firn counts them (`firn_peer_calls_failed_total{peer,reason}`); so by default openraft's
//! warnings are left out for a node's first [`STARTING`] and after that shown at most once
//! per [`EVERY`] for each place in openraft's code that warns. `RUST_LOG` set by the operator
//! shows them all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::{Level, Metadata};
use tracing_subscriber::filter::{EnvFilter, FilterExt as _};
use tracing_subscriber::layer::Filter;

/// The node's log filter: `env` (the operator's `RUST_LOG`, or the default) and the thinning
/// of openraft's warnings, as one filter — so a place `env` turns off is off for good, decided
/// once when first reached, and never made (a span) or asked about again on each call.
pub fn filter<S>(env: EnvFilter, quiet: ConsensusWarnings) -> impl Filter<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let quiet = Arc::new(quiet);
    let places = quiet.clone();
    env.and(
        tracing_subscriber::filter::dynamic_filter_fn(move |meta, _| quiet.shown(meta))
            .with_callsite_filter(move |meta| places.interest(meta)),
    )
}

/// While a node starts, its peers start too: none of openraft's warnings then.
pub const STARTING: Duration = Duration::from_secs(10);
/// After that, one warning a place in openraft's code at most this often.
pub const EVERY: Duration = Duration::from_secs(30);

/// Decides, per event, whether an openraft warning is written (everything else is).
pub struct ConsensusWarnings {
    thin: bool,
    started: Instant,
    shown: Mutex<HashMap<tracing::callsite::Identifier, Instant>>,
}

impl ConsensusWarnings {
    /// `thin`: thin openraft's warnings out (off: show every one).
    pub fn new(thin: bool) -> Self {
        ConsensusWarnings {
            thin,
            started: Instant::now(),
            shown: Mutex::new(HashMap::new()),
        }
    }

    pub fn shown(&self, meta: &Metadata<'_>) -> bool {
        if !self.thinned(meta) {
            return true;
        }
        self.shown_at(meta, Instant::now())
    }

    /// What the filter decides of a place once, when it is first reached: every place but an
    /// openraft warning is always shown (as far as this filter goes), so the subscriber never
    /// asks again — nor makes the spans of places the other filters turn off, openraft's
    /// many debug spans among them, on each call (that asking was an eighth of a node's CPU
    /// under writes, measured).
    pub fn interest(&self, meta: &Metadata<'_>) -> tracing::subscriber::Interest {
        match self.thinned(meta) {
            true => tracing::subscriber::Interest::sometimes(),
            false => tracing::subscriber::Interest::always(),
        }
    }

    /// Whether `meta` is a place whose events are thinned out: an openraft warning.
    fn thinned(&self, meta: &Metadata<'_>) -> bool {
        self.thin
            && meta.is_event()
            && *meta.level() == Level::WARN
            && meta.target().starts_with("openraft")
    }

    fn shown_at(&self, meta: &Metadata<'_>, now: Instant) -> bool {
        if !self.thinned(meta) {
            return true;
        }
        if now.duration_since(self.started) < STARTING {
            return false;
        }
        let mut shown = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        match shown.get(&meta.callsite()) {
            Some(last) if now.duration_since(*last) < EVERY => false,
            _ => {
                shown.insert(meta.callsite(), now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captures the metadata of the events `f` emits.
    fn metas(f: impl FnOnce()) -> Vec<&'static Metadata<'static>> {
        use std::sync::{Arc, Mutex};
        struct Grab(Arc<Mutex<Vec<&'static Metadata<'static>>>>);
        impl tracing::Subscriber for Grab {
            fn enabled(&self, _: &Metadata<'_>) -> bool {
                true
            }
            fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
                tracing::span::Id::from_u64(1)
            }
            fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
            fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
            fn event(&self, e: &tracing::Event<'_>) {
                self.0.lock().unwrap().push(e.metadata());
            }
            fn enter(&self, _: &tracing::span::Id) {}
            fn exit(&self, _: &tracing::span::Id) {}
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        tracing::subscriber::with_default(Grab(seen.clone()), f);
        seen.lock().unwrap().clone()
    }

    /// The node's filter turns openraft's debug spans off for good — none is made — while
    /// Firn's own events and openraft's warnings (thinned) still reach the log.
    #[test]
    fn the_node_filter_makes_no_span_its_levels_turn_off() {
        use tracing_subscriber::Layer as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        let env = EnvFilter::new("info,openraft=warn");
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::sink)
                .with_filter(filter(env, ConsensusWarnings::new(true))),
        );
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::debug_span!(target: "openraft::core", "replicate");
            assert!(span.is_disabled(), "an openraft debug span was made");
            assert!(!tracing::enabled!(target: "openraft::core", Level::INFO));
            assert!(tracing::enabled!(target: "firn_node::cluster", Level::INFO));
            assert!(!tracing::enabled!(target: "firn_node::cluster", Level::DEBUG));
            assert!(tracing::enabled!(target: "openraft::core", Level::ERROR));
        });
    }

    #[test]
    fn openraft_warnings_are_held_back_while_starting_then_thinned_per_place() {
        let events = metas(|| {
            tracing::warn!(target: "openraft::core::heartbeat::worker", "peer down");
            tracing::warn!(target: "openraft::replication", "peer down");
            tracing::warn!(target: "firn_node::cluster", "ours");
            tracing::error!(target: "openraft::core", "an error");
        });
        let [heartbeat, replication, ours, error] = events[..] else {
            panic!("{} events", events.len())
        };
        let quiet = ConsensusWarnings::new(true);
        let t0 = quiet.started;
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Starting: none of openraft's warnings; everything else.
        assert!(!quiet.shown_at(heartbeat, at(1)));
        assert!(quiet.shown_at(ours, at(1)) && quiet.shown_at(error, at(1)));
        // Then one per place every 30 s.
        assert!(quiet.shown_at(heartbeat, at(11)));
        assert!(!quiet.shown_at(heartbeat, at(12)));
        assert!(quiet.shown_at(replication, at(12)));
        assert!(!quiet.shown_at(heartbeat, at(40)));
        assert!(quiet.shown_at(heartbeat, at(42)));
        // With RUST_LOG set by the operator: every one.
        let all = ConsensusWarnings::new(false);
        assert!(all.shown_at(heartbeat, all.started) && all.shown_at(heartbeat, all.started));
        // Only openraft's warnings are decided per event; every other place once for all.
        assert!(quiet.interest(heartbeat).is_sometimes());
        assert!(quiet.interest(ours).is_always() && quiet.interest(error).is_always());
        assert!(all.interest(heartbeat).is_always());
    }
}
