//! The `tikv-sim` binary: starts, announces `pd=ADDR` on exactly one stdout
//! line, serves PD and stores, and obeys its control port.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use tikv_sim::proto::pdpb::pd_client::PdClient;
use tikv_sim::proto::tikvpb::tikv_client::TikvClient;
use tikv_sim::proto::{kvrpcpb, pdpb};

/// Kills the child when the test ends, even on failure.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends one control command and returns the answer's lines, the final
/// `ok`/`error` line last.
fn control(stream: &mut BufReader<TcpStream>, command: &str) -> Vec<String> {
    stream
        .get_mut()
        .write_all(format!("{command}\n").as_bytes())
        .unwrap();
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        assert!(stream.read_line(&mut line).unwrap() > 0, "control closed");
        let line = line.trim_end().to_owned();
        let last = line.starts_with("ok") || line.starts_with("error:");
        lines.push(line);
        if last {
            return lines;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tikv_sim_serves_and_obeys_its_control_port() {
    let child = Command::new(env!("CARGO_BIN_EXE_tikv-sim"))
        .args(["--stores", "3", "--regions", "4", "--pd", "127.0.0.1:0"])
        .args(["--control", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut running = Running(child);
    let mut stdout = BufReader::new(running.0.stdout.take().unwrap());
    let mut stderr = BufReader::new(running.0.stderr.take().unwrap());
    // Bounded: a binary that hangs before announcing itself fails the test.
    let (line, mut stdout) = {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let read = stdout.read_line(&mut line).map(|_| line);
            let _ = tx.send((read, stdout));
        });
        let (read, stdout) = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("tikv-sim printed no pd= line within 60 s");
        (read.unwrap(), stdout)
    };
    let pd = line
        .trim_end()
        .strip_prefix("pd=")
        .unwrap_or_else(|| {
            panic!(
                "{} printed {line:?} instead of pd=ADDR; if it exited at once, a build of \
                 another checkout sharing CARGO_TARGET_DIR may have replaced the binary",
                env!("CARGO_BIN_EXE_tikv-sim")
            )
        })
        .to_owned();
    assert!(pd.starts_with("127.0.0.1:") && !pd.ends_with(":0"), "{pd}");
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let control_addr = line.trim_end().strip_prefix("control=").unwrap().to_owned();

    // PD answers a standard bootstrap.
    let mut pd_client = PdClient::connect(format!("http://{pd}")).await.unwrap();
    let members = pd_client
        .get_members(pdpb::GetMembersRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_ne!(members.header.unwrap().cluster_id, 0);
    assert_eq!(
        members.leader.unwrap().client_urls,
        vec![format!("http://{pd}")]
    );
    let stores = pd_client
        .get_all_stores(pdpb::GetAllStoresRequest::default())
        .await
        .unwrap()
        .into_inner()
        .stores;
    assert_eq!(stores.len(), 3);

    let ctl_stream = TcpStream::connect(&control_addr).unwrap();
    // An upper bound, so a control port that stops answering fails the test
    // instead of hanging it.
    ctl_stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut ctl = BufReader::new(ctl_stream);
    let regions = control(&mut ctl, "regions");
    assert_eq!(regions.len(), 5, "{regions:?}");
    assert!(
        regions[0].starts_with("region 1000 start= end=8P\\x00\\x00\\x00\\x00\\x00\\x00\\xf9 "),
        "{regions:?}"
    );
    assert_eq!(regions[4], "ok");

    // Put through the leader of the Region of "a", via PD's answers.
    let region = pd_client
        .get_region(pdpb::GetRegionRequest {
            region_key: b"a".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let leader = region.leader.unwrap();
    let region = region.region.unwrap();
    let address = stores
        .iter()
        .find(|s| s.id == leader.store_id)
        .unwrap()
        .address
        .clone();
    let mut store = TikvClient::connect(format!("http://{address}"))
        .await
        .unwrap();
    let ctx = kvrpcpb::Context {
        region_id: region.id,
        region_epoch: region.region_epoch,
        peer: Some(leader),
        ..Default::default()
    };
    let put = store
        .raw_put(kvrpcpb::RawPutRequest {
            context: Some(ctx.clone()),
            key: b"a".to_vec(),
            value: b"1".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(put.region_error.is_none());

    // A transactional lock on "a" (its encoding lies in the same Region),
    // inspected from the control port.
    let prewrite = store
        .kv_prewrite(kvrpcpb::PrewriteRequest {
            context: Some(ctx.clone()),
            mutations: vec![kvrpcpb::Mutation {
                op: kvrpcpb::Op::Put as i32,
                key: b"a".to_vec(),
                value: b"t".to_vec(),
                assertion: 0,
            }],
            primary_lock: b"a".to_vec(),
            start_version: 42,
            lock_ttl: 3_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(prewrite.region_error.is_none() && prewrite.errors.is_empty());
    let lock_line = "lock key=a primary=a start_ts=42 type=put ttl=3000 for_update_ts=0 min_commit_ts=0 async_commit=false";
    assert_eq!(control(&mut ctl, "locks"), vec![lock_line, "ok"]);
    assert_eq!(control(&mut ctl, "locks b"), vec!["ok"]);
    assert_eq!(control(&mut ctl, "versions a"), vec![lock_line, "ok"]);
    assert_eq!(control(&mut ctl, "advance-clock 5000"), vec!["ok"]);
    assert_eq!(control(&mut ctl, "gc-safe-point"), vec!["ok 0"]);

    // Faults from the control port.
    assert_eq!(
        control(&mut ctl, &format!("busy {} 0", leader.store_id)),
        vec!["ok"]
    );
    let got = store
        .raw_get(kvrpcpb::RawGetRequest {
            context: Some(ctx.clone()),
            key: b"a".to_vec(),
            cf: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(got.region_error.unwrap().server_is_busy.is_some());
    assert_eq!(
        control(&mut ctl, &format!("busy {} off", leader.store_id)),
        vec!["ok"]
    );
    let counters = control(&mut ctl, &format!("counters {}", leader.store_id));
    assert!(
        counters.contains(&"raw_get server_is_busy 1".to_owned()),
        "{counters:?}"
    );
    assert!(
        counters.contains(&"raw_put ok 1".to_owned()),
        "{counters:?}"
    );
    assert!(
        counters.contains(&"kv_prewrite ok 1".to_owned()),
        "{counters:?}"
    );

    assert_eq!(
        control(&mut ctl, &format!("down {}", leader.store_id)),
        vec!["ok"]
    );
    assert!(TcpStream::connect(&address).is_err());
    assert_eq!(
        control(&mut ctl, &format!("up {}", leader.store_id)),
        vec!["ok"]
    );
    assert!(TcpStream::connect(&address).is_ok());

    let split = control(&mut ctl, "split 0x41");
    assert!(split[0].starts_with("ok "), "{split:?}");
    let stale = control(&mut ctl, &format!("cold {} not-leader-first", region.id));
    assert_eq!(stale, vec!["ok"]);
    let shown = control(&mut ctl, "region a");
    assert!(shown[0].contains("leader=none"), "{shown:?}");
    assert!(control(&mut ctl, "frobnicate")[0].starts_with("error:"));
    assert!(control(&mut ctl, "down 99")[0].starts_with("error:"));
    // An over-long line is refused and the connection closed, not buffered.
    let long = "x".repeat(10_000);
    let answer = control(&mut ctl, &long);
    assert!(answer[0].contains("at most 4096 bytes"), "{answer:?}");
    let mut after = String::new();
    assert_eq!(
        ctl.read_line(&mut after).unwrap_or(0),
        0,
        "closed: {after:?}"
    );

    // Exactly one line on stdout.
    running.0.kill().unwrap();
    running.0.wait().unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "");
}
