//! The `unstable-internals` transport hook the deterministic simulation
//! uses: the clients built inside `with_transport` dial every channel, to
//! PD and to the stores, now and later, through it instead of TCP.
#![cfg(feature = "unstable-internals")]

use std::sync::{Arc, Mutex};

use tikv_plan::__internals::{with_transport, Io, Transport};
use tikv_plan::RawClient;
use tikv_sim::SimCluster;

#[tokio::test]
async fn clients_built_inside_with_transport_dial_through_it() {
    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(vec![b"m".to_vec()])
        .start()
        .await
        .unwrap();
    let pd = cluster.pd_endpoints()[0].clone();
    let dials: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = dials.clone();
    // "pd.sim" resolves nowhere: only this transport knows where it is.
    let transport = Transport::new(move |host, port| {
        let log = log.clone();
        let pd = pd.clone();
        Box::pin(async move {
            log.lock().unwrap().push(format!("{host}:{port}"));
            let target = if host == "pd.sim" {
                pd
            } else {
                format!("{host}:{port}")
            };
            let stream = tokio::net::TcpStream::connect(target).await?;
            Ok(Box::new(stream) as Box<dyn Io>)
        })
    });
    let client = with_transport(transport, RawClient::new(vec!["pd.sim:2379"]))
        .await
        .unwrap();
    assert_eq!(
        dials.lock().unwrap().first().map(String::as_str),
        Some("pd.sim:2379")
    );

    // Store channels open later, outside the scope, and still dial
    // through the transport the client was built with.
    for key in ["a", "z"] {
        client.put(key.to_owned(), key.to_owned()).await.unwrap();
        assert_eq!(
            client.get(key.to_owned()).await.unwrap(),
            Some(key.as_bytes().to_vec())
        );
    }
    let stores: Vec<String> = cluster
        .store_ids()
        .into_iter()
        .filter_map(|id| cluster.store_addr(id))
        .collect();
    let dialled = dials.lock().unwrap().clone();
    assert!(
        dialled.iter().any(|d| stores.contains(d)),
        "no store was dialled through the transport: {dialled:?}"
    );
    cluster.shutdown().await;
}
