//! The simulated cluster as a child process (`tikv-sim`), its control port,
//! and the layout it reports.
//!
//! The sim runs in its own process so the benchmark's CPU figures
//! (`getrusage(RUSAGE_SELF)`) cover the client alone; the sim's CPU is read
//! from `/proc/PID/stat`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tikv_plan::proto::{kvrpcpb, metapb};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// How long a sim may take to print its `pd=` line (3000 Regions included).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// A running `tikv-sim`; killed when dropped.
pub struct Sim {
    child: Child,
    /// The PD address the sim printed (`pd=ADDR`).
    pub pd: String,
    /// The control port address (`control=ADDR`).
    pub control: String,
}

impl Sim {
    /// Starts `tikv-sim --stores 3 --regions REGIONS` on free ports and waits
    /// until it listens.
    pub fn start(binary: &Path, regions: usize) -> Result<Sim, String> {
        let mut child = Command::new(binary)
            .args(["--stores", "3", "--regions", &regions.to_string()])
            .args(["--pd", "127.0.0.1:0", "--control", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        // Both pipes are drained for the sim's whole life so it never blocks
        // on a full pipe; the first line of each is passed back.
        let (control_tx, control_rx) = mpsc::channel();
        if let Some(stderr) = child.stderr.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(addr) = line.strip_prefix("control=") {
                        let _ = control_tx.send(addr.to_owned());
                    }
                }
            });
        }
        let (pd_tx, pd_rx) = mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let _ = pd_tx.send(line);
                }
            });
        }
        let mut sim = Sim {
            child,
            pd: String::new(),
            control: String::new(),
        };
        let line = pd_rx
            .recv_timeout(STARTUP_TIMEOUT)
            .map_err(|_| format!("tikv-sim printed no pd= line within {STARTUP_TIMEOUT:?}"))?;
        sim.pd = line
            .strip_prefix("pd=")
            .ok_or_else(|| format!("unexpected first line from tikv-sim: {line}"))?
            .to_owned();
        // The sim prints control= before pd=.
        sim.control = control_rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| "tikv-sim printed no control= line".to_owned())?;
        Ok(sim)
    }

    /// CPU time (user + system) the sim process has used so far.
    pub fn cpu_time(&self) -> Duration {
        process_cpu_time(self.child.id()).unwrap_or_default()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// User + system CPU time of process `pid` from `/proc/PID/stat` (fields 14
/// and 15, in clock ticks).
fn process_cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it follow
    // the last ')'. There, index 0 is field 3 (state).
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = u64::try_from(ticks).ok().filter(|t| *t > 0)?;
    Some(Duration::from_micros((utime + stime) * 1_000_000 / ticks))
}

/// CPU time (user + system) of this process, from `getrusage(RUSAGE_SELF)`.
pub fn own_cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is a valid value; getrusage only writes it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

/// A connection to the sim's control port (one command per line; answers
/// end with `ok ...` or `error: ...`).
pub struct Control {
    reader: AsyncBufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl Control {
    /// Connects to the control port.
    pub async fn connect(addr: &str) -> Result<Control, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("cannot reach the control port {addr}: {e}"))?;
        let (read, writer) = stream.into_split();
        Ok(Control {
            reader: AsyncBufReader::new(read),
            writer,
        })
    }

    /// Sends one command and returns its data lines (the final `ok` line
    /// excluded); an `error:` answer is an error.
    pub async fn command(&mut self, command: &str) -> Result<Vec<String>, String> {
        self.writer
            .write_all(format!("{command}\n").as_bytes())
            .await
            .map_err(|e| format!("control command {command:?}: {e}"))?;
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            let read = self
                .reader
                .read_line(&mut line)
                .await
                .map_err(|e| format!("control command {command:?}: {e}"))?;
            if read == 0 {
                return Err(format!("control command {command:?}: connection closed"));
            }
            let line = line.trim_end().to_owned();
            if line == "ok" || line.starts_with("ok ") {
                return Ok(lines);
            }
            if let Some(message) = line.strip_prefix("error:") {
                return Err(format!("control command {command:?}: {}", message.trim()));
            }
            lines.push(line);
        }
    }

    /// Sends several commands in one write and checks every answer: much
    /// faster than one round trip each for thousands of commands.
    pub async fn commands(&mut self, commands: &[String]) -> Result<(), String> {
        let mut text = String::new();
        for c in commands {
            text.push_str(c);
            text.push('\n');
        }
        self.writer
            .write_all(text.as_bytes())
            .await
            .map_err(|e| format!("control commands: {e}"))?;
        let mut answered = 0;
        while answered < commands.len() {
            let mut line = String::new();
            let read = self
                .reader
                .read_line(&mut line)
                .await
                .map_err(|e| format!("control commands: {e}"))?;
            if read == 0 {
                return Err("control commands: connection closed".to_owned());
            }
            let line = line.trim_end();
            if line == "ok" || line.starts_with("ok ") {
                answered += 1;
            } else if let Some(message) = line.strip_prefix("error:") {
                return Err(format!(
                    "control command {:?}: {}",
                    commands[answered],
                    message.trim()
                ));
            }
        }
        Ok(())
    }

    /// Every Region in key order.
    pub async fn regions(&mut self) -> Result<Vec<RegionLine>, String> {
        self.command("regions")
            .await?
            .iter()
            .map(|l| RegionLine::parse(l))
            .collect()
    }

    /// The store of the first Region's leader (the one Region of the
    /// single-Region comparisons).
    pub async fn first_leader_store(&mut self) -> Result<u64, String> {
        self.regions()
            .await?
            .first()
            .and_then(|r| r.leader)
            .map(|l| l.store_id)
            .ok_or_else(|| "the Region has no leader".to_owned())
    }

    /// Store id to address.
    pub async fn stores(&mut self) -> Result<Vec<(u64, String)>, String> {
        self.command("stores")
            .await?
            .iter()
            .map(|line| {
                let mut words = line.split_whitespace().skip(1);
                let id = words.next().and_then(|w| w.parse().ok());
                let addr = words.next();
                match (id, addr) {
                    (Some(id), Some(addr)) => Ok((id, addr.to_owned())),
                    _ => Err(format!("unexpected stores line: {line}")),
                }
            })
            .collect()
    }
}

/// A peer as the control port shows it: `PEER_ID@STORE_ID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerRef {
    /// The peer id.
    pub id: u64,
    /// The store it lives on.
    pub store_id: u64,
}

/// One line of the control port's `regions` answer.
#[derive(Debug, Clone)]
pub struct RegionLine {
    /// Region id.
    pub id: u64,
    /// Start key (raw bytes of the boundary, as stored).
    pub start: Vec<u8>,
    /// End key; empty for the last Region.
    pub end: Vec<u8>,
    /// Epoch version.
    pub version: u64,
    /// Epoch conf_ver.
    pub conf_ver: u64,
    /// The true leader, if any.
    pub leader: Option<PeerRef>,
    /// Every peer, in order.
    pub peers: Vec<PeerRef>,
}

impl RegionLine {
    /// The Region's leader and the `Context` of a request to it, filled
    /// by hand (Region id, epoch, leader peer): what the bare references
    /// send, with no routing of their own.
    pub fn leader_context(&self) -> Result<(PeerRef, kvrpcpb::Context), String> {
        let leader = self
            .leader
            .ok_or_else(|| format!("Region {} has no leader", self.id))?;
        let context = kvrpcpb::Context {
            region_id: self.id,
            region_epoch: Some(metapb::RegionEpoch {
                conf_ver: self.conf_ver,
                version: self.version,
            }),
            peer: Some(metapb::Peer {
                id: leader.id,
                store_id: leader.store_id,
                ..Default::default()
            }),
            ..Default::default()
        };
        Ok((leader, context))
    }

    fn parse(line: &str) -> Result<RegionLine, String> {
        let bad = || format!("unexpected regions line: {line}");
        let mut words = line.split_whitespace();
        if words.next() != Some("region") {
            return Err(bad());
        }
        let id = words.next().and_then(|w| w.parse().ok()).ok_or_else(bad)?;
        let mut region = RegionLine {
            id,
            start: Vec::new(),
            end: Vec::new(),
            version: 0,
            conf_ver: 0,
            leader: None,
            peers: Vec::new(),
        };
        for word in words {
            let (name, value) = word.split_once('=').ok_or_else(bad)?;
            match name {
                "start" => region.start = unescape(value).ok_or_else(bad)?,
                "end" => region.end = unescape(value).ok_or_else(bad)?,
                "version" => region.version = value.parse().map_err(|_| bad())?,
                "conf_ver" => region.conf_ver = value.parse().map_err(|_| bad())?,
                "leader" if value == "none" => region.leader = None,
                "leader" => region.leader = Some(parse_peer(value).ok_or_else(bad)?),
                "peers" => {
                    region.peers = value
                        .split(',')
                        .map(parse_peer)
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(bad)?
                }
                _ => {}
            }
        }
        Ok(region)
    }

    /// Whether `key` lies in this Region (raw byte order).
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && (self.end.is_empty() || key < self.end.as_slice())
    }

    /// The printable prefix every key of this Region may start with: the
    /// decoded start key (the sim splits at memcomparable encodings of one-
    /// or two-character keys), or `!!`, the lowest two printable
    /// characters, for the first Region (every split key is above it).
    pub fn key_prefix(&self) -> Result<Vec<u8>, String> {
        if self.start.is_empty() {
            return Ok(b"!!".to_vec());
        }
        // One 8-byte group then a marker byte 0xff - padding.
        let marker = *self.start.last().unwrap_or(&0);
        let padding = usize::from(0xff - marker);
        if self.start.len() != 9 || padding > 8 {
            return Err(format!(
                "Region {} starts at a key that is not a one-group memcomparable encoding",
                self.id
            ));
        }
        let mut prefix = self.start[..8 - padding].to_vec();
        // After a one-character start key the next split may be that
        // character and any second one: keep the keys right above it.
        if prefix.len() == 1 {
            prefix.push(b'!');
        }
        Ok(prefix)
    }
}

fn parse_peer(text: &str) -> Option<PeerRef> {
    // Learners and witnesses carry a "(...)" suffix; the sims here have none.
    let text = text.split('(').next()?;
    let (id, store) = text.split_once('@')?;
    Some(PeerRef {
        id: id.parse().ok()?,
        store_id: store.parse().ok()?,
    })
}

/// Undoes the control port's key escaping (`\xNN` for non-printable bytes).
fn unescape(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            let hex = std::str::from_utf8(bytes.get(i + 2..i + 4)?).ok()?;
            if bytes.get(i + 1) != Some(&b'x') {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_regions_line() {
        let r = RegionLine::parse(
            "region 1004 start=8P\\x00\\x00\\x00\\x00\\x00\\x00\\xf9 end= version=1 conf_ver=1 \
             leader=1005@2 pd_leader=1005@2 peers=1005@2,1006@3,1007@1",
        )
        .unwrap();
        assert_eq!(r.id, 1004);
        assert_eq!(r.start, b"8P\0\0\0\0\0\0\xf9".to_vec());
        assert!(r.end.is_empty());
        assert_eq!(
            r.leader,
            Some(PeerRef {
                id: 1005,
                store_id: 2
            })
        );
        assert_eq!(r.peers.len(), 3);
        assert_eq!(r.key_prefix().unwrap(), b"8P".to_vec());
        assert!(r.contains(b"8P0000000000001"));
        assert!(!r.contains(b"8O"));
        let one = RegionLine::parse(
            "region 1384 start=$\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\xf8 end=$$\\x00\\x00\\x00\\x00\\x00\\x00\\xf9 \
             version=1 conf_ver=1 leader=1385@1 pd_leader=1385@1 peers=1385@1",
        )
        .unwrap();
        assert_eq!(one.key_prefix().unwrap(), b"$!".to_vec());
        assert!(one.contains(&crate::workload::key(b"$!", 999)));
    }
}
