//! client-rust's raw example as a program: `--pd HOST:PORT[,HOST:PORT]`
//! (and optionally `--ca`, `--cert`, `--key`) runs it against a cluster;
//! without `--pd` it starts an embedded simulated API v2 cluster first.

use tikv_plan_compat::raw_example::{run, CommandArgs};
use tikv_sim::SimCluster;

fn parse_args() -> CommandArgs {
    let mut args = CommandArgs::default();
    let mut words = std::env::args().skip(1);
    while let Some(flag) = words.next() {
        let value = words.next();
        match (flag.as_str(), value) {
            ("--pd", Some(v)) => args.pd = v.split(',').map(str::to_owned).collect(),
            ("--ca", Some(v)) => args.ca = Some(v.into()),
            ("--cert", Some(v)) => args.cert = Some(v.into()),
            ("--key", Some(v)) => args.key = Some(v.into()),
            (other, _) => {
                eprintln!("unknown or incomplete option {other}; use --pd, --ca, --cert, --key");
                std::process::exit(2);
            }
        }
    }
    args
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = parse_args();
    let _embedded = if args.pd.is_empty() {
        let cluster = SimCluster::builder()
            .stores(3)
            .api_version(tikv_sim::proto::kvrpcpb::ApiVersion::V2)
            .start()
            .await?;
        args.pd = cluster.pd_endpoints();
        Some(cluster)
    } else {
        None
    };
    Ok(run(args).await?)
}
