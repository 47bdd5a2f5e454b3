//! docs/using.md's transactional example, kept compiling and passing. The
//! client-rust-style transactional program lives in the compatibility crate
//! (`compat/src/transactional.rs`, run by `cargo test -p tikv-plan-compat`).

use tikv_plan::{Result, TransactionClient};

/// docs/using.md's transactional example, kept compiling and passing.
#[tokio::test]
async fn readme_transaction_example() -> Result<()> {
    let cluster = tikv_sim::SimCluster::builder()
        .stores(1)
        .start()
        .await
        .expect("the simulated cluster starts");
    let client = TransactionClient::new(cluster.pd_endpoints()).await?;
    let mut txn = client.begin_optimistic().await?;
    let balance = txn.get("alice".to_owned()).await?;
    assert_eq!(balance, None);
    txn.put("alice".to_owned(), "70".to_owned()).await?;
    match txn.commit().await {
        Ok(commit_ts) => println!("committed at {commit_ts:?}"),
        Err(e) if e.is_undetermined() => println!("outcome unknown: {e}"),
        Err(e) => println!("not committed (locks rolled back): {e}"),
    }
    cluster.shutdown().await;
    Ok(())
}
