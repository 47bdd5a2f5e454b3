//! `tikv-sim`: runs a simulated TiKV cluster (one PD, N stores) on
//! 127.0.0.1 until killed, with a text control port for fault injection.
//!
//! ```text
//! tikv-sim [--stores N] [--regions R] [--replicas K] [--pd ADDR]
//!          [--pd-members M] [--control ADDR|off] [--api-version 1|2]
//!          [--keyspace NAME=ID]... [--tiflash-stores T] [--raft-tick-ms MS]
//! ```
//!
//! When ready it prints exactly one line on stdout, `pd=ADDR` (the PD
//! leader's real address), and the control address on stderr,
//! `control=ADDR`. See tikv-plan's docs/testing.md, "The simulated cluster: `tikv-sim`", and
//! `tikv_sim::control`.

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use tikv_sim::proto::kvrpcpb::ApiVersion;
use tikv_sim::{control, SimCluster};

const USAGE: &str = "usage: tikv-sim [--stores N] [--regions R] [--replicas K] [--pd ADDR] \
[--pd-members M] [--control ADDR|off] [--api-version 1|2] [--keyspace NAME=ID]... \
[--tiflash-stores T] [--raft-tick-ms MS]
  --stores N       number of TiKV stores, ids 1..=N (default 3)
  --regions R      Regions, splitting the printable key space evenly at
                   memcomparable-encoded keys, so raw and transactional
                   clients both work (default 1)
  --replicas K     voters per Region (default min(3, N))
  --pd ADDR        address of PD (default 127.0.0.1:2379; port 0 picks a free one)
  --pd-members M   PD members sharing the cluster (default 1; others on free ports)
  --control ADDR   control port for fault commands (default 127.0.0.1:0), or off
  --api-version V  API version of the stores, 1 or 2 (default 1; 2 for keyspace clients)
  --keyspace N=ID  a keyspace PD serves besides DEFAULT (id 0); repeatable
  --tiflash-stores T  TiFlash stores after the TiKV ones, ids N+1..=N+T, labelled
                   engine=tiflash, each with a learner of every Region; they answer
                   TiKV requests with gRPC Unimplemented (default 0)
  --raft-tick-ms MS  Raft's base tick: a dead store's Regions elect 10 to 20 ticks
                   after it dies (default 1000, TiKV's)";

#[derive(Debug)]
struct Options {
    stores: u64,
    regions: usize,
    replicas: Option<usize>,
    pd: SocketAddr,
    pd_members: usize,
    control: Option<SocketAddr>,
    api_version: ApiVersion,
    keyspaces: Vec<(String, u32)>,
    tiflash_stores: u64,
    raft_tick_ms: u64,
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut options = Options {
        stores: 3,
        regions: 1,
        replicas: None,
        pd: SocketAddr::from(([127, 0, 0, 1], 2379)),
        pd_members: 1,
        control: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        api_version: ApiVersion::V1,
        keyspaces: Vec::new(),
        tiflash_stores: 0,
        raft_tick_ms: 1000,
    };
    let mut args = args.peekable();
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            return Err(String::new());
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |what: &str| -> Result<u64, String> {
            value
                .parse()
                .map_err(|_| format!("{what} must be a number, not {value:?}"))
        };
        let address = || -> Result<SocketAddr, String> {
            value.parse().map_err(|_| {
                format!("{flag} must be an address like 127.0.0.1:2379, not {value:?}")
            })
        };
        match flag.as_str() {
            "--stores" => options.stores = number("--stores")?,
            "--tiflash-stores" => options.tiflash_stores = number("--tiflash-stores")?,
            "--raft-tick-ms" => options.raft_tick_ms = number("--raft-tick-ms")?.max(1),
            "--regions" => options.regions = number("--regions")? as usize,
            "--replicas" => options.replicas = Some(number("--replicas")? as usize),
            "--pd-members" => options.pd_members = number("--pd-members")? as usize,
            "--pd" => options.pd = address()?,
            "--control" if value == "off" => options.control = None,
            "--control" => options.control = Some(address()?),
            "--api-version" => {
                options.api_version = match value.as_str() {
                    "1" => ApiVersion::V1,
                    "2" => ApiVersion::V2,
                    _ => return Err(format!("--api-version must be 1 or 2, not {value:?}")),
                }
            }
            "--keyspace" => {
                let parsed = value
                    .split_once('=')
                    .and_then(|(name, id)| Some((name.to_owned(), id.parse::<u32>().ok()?)));
                match parsed {
                    Some(keyspace) => options.keyspaces.push(keyspace),
                    None => {
                        return Err(format!(
                            "--keyspace must be NAME=ID, like app=1, not {value:?}"
                        ))
                    }
                }
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    if options.stores == 0 || options.regions == 0 || options.pd_members == 0 {
        return Err("--stores, --regions and --pd-members must be at least 1".to_owned());
    }
    Ok(options)
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = match parse_args(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("tikv-sim: {message}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let replicas = options
        .replicas
        .unwrap_or_else(|| (options.stores as usize).min(3));
    let mut builder = SimCluster::builder().api_version(options.api_version);
    for (name, id) in &options.keyspaces {
        builder = builder.keyspace(name, *id);
    }
    let timing =
        tikv_sim::RaftTiming::scaled(std::time::Duration::from_millis(options.raft_tick_ms));
    let started = builder
        .raft_timing(timing)
        .stores(options.stores)
        .tiflash_stores(options.tiflash_stores)
        .replicas(replicas)
        .split_keys(control::even_split_keys(options.regions))
        .pd_addr(options.pd)
        .pd_members(options.pd_members)
        .start()
        .await;
    let cluster = match started {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("tikv-sim: cannot start the cluster: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(addr) = options.control {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                let bound = listener
                    .local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_default();
                eprintln!("control={bound}");
                tokio::spawn(control::serve(cluster.clone(), listener));
            }
            Err(e) => {
                eprintln!("tikv-sim: cannot open the control port {addr}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut stdout = std::io::stdout();
    if writeln!(stdout, "pd={}", cluster.pd_addr())
        .and_then(|_| stdout.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    // Runs until killed; the process exit closes every port.
    std::future::pending::<()>().await;
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> impl Iterator<Item = String> + '_ {
        s.split_whitespace().map(str::to_owned)
    }

    #[test]
    fn parses_the_documented_options() {
        let o = parse_args(args(
            "--stores 5 --regions 8 --pd 127.0.0.1:0 --control off",
        ))
        .unwrap();
        assert_eq!(o.stores, 5);
        assert_eq!(o.regions, 8);
        assert_eq!(o.pd.port(), 0);
        assert!(o.control.is_none());
        assert!(parse_args(args("--stores")).is_err());
        assert!(parse_args(args("--stores x")).is_err());
        assert!(parse_args(args("--bogus 1")).is_err());
        assert!(parse_args(args("--stores 0")).is_err());
        let o = parse_args(args("--api-version 2 --keyspace app=7 --keyspace b=8")).unwrap();
        assert_eq!(o.api_version, ApiVersion::V2);
        assert_eq!(
            o.keyspaces,
            vec![("app".to_owned(), 7), ("b".to_owned(), 8)]
        );
        assert!(parse_args(args("--api-version 3")).is_err());
        assert!(parse_args(args("--keyspace app")).is_err());
        assert_eq!(parse_args(args("")).unwrap().tiflash_stores, 0);
        assert_eq!(
            parse_args(args("--tiflash-stores 2"))
                .unwrap()
                .tiflash_stores,
            2
        );
    }
}
