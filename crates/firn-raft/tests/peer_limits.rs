//! The peer server bounds the node's own requests it handles for peers, without ever making
//! Raft messages wait behind them.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use firn_raft::peer::{
    AppHandler, PEER_APP_CONCURRENCY_MAX, PEER_APP_WAITING_MAX, PeerError, PeerPool, PeerRequest,
    PeerResponse, serve_peers,
};
use firn_raft::types::Vote;
use openraft::raft::VoteRequest;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Answers with the payload after `hold` (or at once once released), counting how many
/// run at once.
struct SlowApp {
    hold: Duration,
    release: watch::Sender<bool>,
    running: AtomicUsize,
    most_running: AtomicUsize,
}

impl SlowApp {
    fn new(hold: Duration) -> Arc<Self> {
        Arc::new(SlowApp {
            hold,
            release: watch::Sender::new(false),
            running: AtomicUsize::new(0),
            most_running: AtomicUsize::new(0),
        })
    }
}

/// The handler the server holds: the shared counters.
struct SlowAppHandler(Arc<SlowApp>);

impl AppHandler for SlowAppHandler {
    fn handle(&self, payload: Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send>> {
        let this = self.0.clone();
        Box::pin(async move {
            let now = this.running.fetch_add(1, Ordering::SeqCst) + 1;
            this.most_running.fetch_max(now, Ordering::SeqCst);
            let mut released = this.release.subscribe();
            let _ = tokio::time::timeout(this.hold, released.wait_for(|r| *r)).await;
            this.running.fetch_sub(1, Ordering::SeqCst);
            payload
        })
    }
}

/// A peer server on a free port running `app`, and a pool that reaches it as node 2.
async fn serve(app: Arc<SlowApp>) -> (Arc<PeerPool>, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(serve_peers(
        listener,
        Default::default(),
        Arc::new(SlowAppHandler(app)),
        stopped,
    ));
    let pool = PeerPool::new(1, HashMap::from([(2, addr)]));
    (Arc::new(pool), stop)
}

fn call_app(
    pool: &Arc<PeerPool>,
    i: usize,
) -> impl Future<Output = Result<PeerResponse, PeerError>> + use<> {
    let pool = pool.clone();
    async move {
        pool.call(
            2,
            PeerRequest::App(i.to_be_bytes().to_vec()),
            Duration::from_secs(30),
        )
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_the_bound_of_app_requests_run_at_once_and_the_rest_wait_their_turn() {
    let app = SlowApp::new(Duration::from_millis(300));
    let (pool, _stop) = serve(app.clone()).await;
    let calls = PEER_APP_CONCURRENCY_MAX + 200;
    let answers = futures::future::join_all((0..calls).map(|i| call_app(&pool, i))).await;
    for (i, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok(PeerResponse::App(payload)) => assert_eq!(payload, i.to_be_bytes()),
            other => panic!("call {i} answered {other:?}"),
        }
    }
    let most = app.most_running.load(Ordering::SeqCst);
    assert!(
        most <= PEER_APP_CONCURRENCY_MAX,
        "{most} App requests ran at once; the bound is {PEER_APP_CONCURRENCY_MAX}"
    );
    assert_eq!(
        most, PEER_APP_CONCURRENCY_MAX,
        "the bound was never reached"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_app_place_taken_raft_messages_are_answered_and_more_app_requests_are_busy() {
    let app = SlowApp::new(Duration::from_secs(20));
    let (pool, _stop) = serve(app.clone()).await;
    let places = PEER_APP_CONCURRENCY_MAX + PEER_APP_WAITING_MAX;
    let holding: Vec<_> = (0..places)
        .map(|i| tokio::spawn(call_app(&pool, i)))
        .collect();
    // Until every place is taken.
    while app.running.load(Ordering::SeqCst) < PEER_APP_CONCURRENCY_MAX {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    // A vote on the same connection is answered at once (this node holds no shard 7).
    let vote = PeerRequest::Vote {
        shard: 7,
        rpc: VoteRequest::new(Vote::new(1, 1), None),
    };
    // The App requests hold for 20 s: 2 s tells waiting behind them from a slow machine.
    let answered = tokio::time::timeout(
        Duration::from_secs(2),
        pool.call(2, vote, Duration::from_secs(5)),
    )
    .await
    .expect("a vote waited behind App requests");
    match answered {
        Err(PeerError::Remote(2, e)) => assert!(e.contains("no replica of shard 7"), "{e}"),
        other => panic!("the vote answered {other:?}"),
    }

    // One more App request is refused at once, as not handled.
    let refused = tokio::time::timeout(Duration::from_secs(2), call_app(&pool, places))
        .await
        .expect("an App request past the bound waited");
    match refused {
        Err(PeerError::Busy(2, e)) => assert!(e.contains("requests already run or wait"), "{e}"),
        other => panic!("an App request past the bound answered {other:?}"),
    }

    // Every admitted request is still answered.
    app.release.send_replace(true);
    for (i, call) in holding.into_iter().enumerate() {
        match call.await.unwrap() {
            Ok(PeerResponse::App(payload)) => assert_eq!(payload, i.to_be_bytes()),
            other => panic!("call {i} answered {other:?}"),
        }
    }
}
