//! Async connection management in one process (feature `tokio`): what a dropped future
//! leaves behind. Devices on 127.78.17.x, UDP 4791 (the CM reaches a peer's device on its
//! own port).

use std::net::SocketAddr;
use std::time::Duration;

use softroce_emu::driver::DeviceConfig;
use softroce_verbs::cm::{CmFailure, ConnectOptions};
use softroce_verbs::{Context, Error, PreparedQueuePair, QpType};

/// A hang bound for each step, not a performance claim.
const BOUND: Duration = Duration::from_secs(20);

fn device(ip: &str) -> Context {
    let mut cfg = DeviceConfig::new("async-cm", ip.parse().unwrap());
    cfg.pcap = None;
    cfg.faults = None;
    cfg.cm_response_timeout = 14; // CM retries after 64 ms, not 4 s
    Context::open_emulated_with(cfg).unwrap()
}

fn qp(ctx: &Context) -> PreparedQueuePair {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4, None).unwrap();
    pd.create_qp(&cq, &cq, QpType::Rc).build().unwrap()
}

#[tokio::test]
async fn a_connect_abandoned_by_its_caller_is_withdrawn_and_the_server_learns_it() {
    let (server, client) = (device("127.78.17.21"), device("127.78.17.22"));
    let addr = SocketAddr::new("127.78.17.21".parse().unwrap(), 7471);
    let listener = server.connection_manager().unwrap().listen(addr).unwrap();
    let cm = client.connection_manager().unwrap();
    let options = ConnectOptions {
        timeout: BOUND,
        ..ConnectOptions::default()
    };
    // The server does not answer yet, so the caller gives up on the connect: the future is
    // dropped mid-wait, as a lost `select!` branch would be.
    let connect = cm.connect_async(qp(&client), addr, &options);
    let gave_up = tokio::time::timeout(Duration::from_millis(50), connect).await;
    assert!(
        gave_up.is_err(),
        "nobody accepted, so the connect could not finish"
    );

    // The request reached the server, but the client withdrew it (a REJ, as destroying a
    // connecting rdma_cm_id sends). Once the REJ is in, the request is no longer handed
    // out; if the server took it just before, accepting it fails and says why.
    match tokio::time::timeout(Duration::from_millis(300), listener.next_request()).await {
        Err(_) => {} // withdrawn before the server looked
        Ok(request) => {
            let err = request
                .unwrap()
                .accept_async(qp(&server), b"", Duration::from_secs(2))
                .await
                .expect_err("the client no longer wants this connection");
            assert!(
                matches!(err, Error::AcceptFailed { .. }),
                "an accept failure naming the peer, got {err}"
            );
        }
    }

    // A new attempt is unaffected.
    let connecting = cm.start_connect(qp(&client), addr, &options).unwrap();
    let request = tokio::time::timeout(BOUND, listener.next_request())
        .await
        .unwrap()
        .unwrap();
    let (accepted, connected) = tokio::join!(
        request.accept_async(qp(&server), b"", BOUND),
        connecting.finish()
    );
    let (accepted, connected) = (accepted.unwrap(), connected.unwrap());
    // The client hangs up while the server waits for it: both calls end.
    let (hung_up, saw_it) =
        tokio::join!(connected.disconnect_async(BOUND), accepted.disconnected());
    hung_up.unwrap();
    saw_it.unwrap();
}

#[tokio::test]
async fn a_request_for_a_port_nobody_listens_on_is_refused_without_waiting() {
    let (server, client) = (device("127.78.17.23"), device("127.78.17.24"));
    server.connection_manager().unwrap();
    let to = SocketAddr::new("127.78.17.23".parse().unwrap(), 7472);
    let err = client
        .connection_manager()
        .unwrap()
        .connect_async(qp(&client), to, &ConnectOptions::default())
        .await
        .expect_err("nobody listens");
    assert!(
        matches!(
            &err,
            Error::ConnectFailed {
                failure: CmFailure::Rejected { reason: 8, .. },
                ..
            }
        ),
        "{err}"
    );
}
