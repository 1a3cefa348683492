//! The faults the nemesis injects, drawn from a seeded generator: which
//! fault, on which member, for how long. The same seed draws the same
//! schedule (the processes' own timing still varies from run to run).
//!
//! The fault model is the store's promise: at most `replicas - 1` members
//! lose what they hold at once. So a fault that takes a member out (a kill,
//! a pause or a cut longer than the failure timeout, a stop, a drain, any
//! partition) waits until the cluster is healthy again (every member up,
//! none cut off, every copy ready) before it starts.
//!
//! Partitions come in four kinds: the member's port down (RDMA both ways,
//! clients included); its paths to the other members cut one way only
//! (outbound: what it sends is lost, what they send arrives; or inbound),
//! which breaks RC both ways but lets requests one way be executed
//! unacknowledged; its TCP cut (its proxies stall every connection and
//! forward no new one: setups, joins and reconnections stop, established
//! RDMA goes on); and the port down with its TCP cut, a host off the
//! network. Short pauses and the operator's requests (migrate,
//! rebalance, set replicas) do not wait: they land while the others play.
//!
//! One fault breaks the model on purpose: `kill -9` of every member at
//! once ([`Kind::KillAll`]), for scenarios whose members keep their
//! records on disk (`durability`): what they acknowledged must come back
//! from their logs, not from another copy. The times it struck are kept
//! ([`Nemesis::kill_alls`]) for the check of what it lost
//! ([`crate::loss`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kvs_proto::control::{ControlReply, ControlRequest};
use test_support::Rng;

use crate::cluster::Cluster;

/// The member failure timeout the members run with (the default).
pub const MEMBER_TIMEOUT: Duration = Duration::from_millis(1000);

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `kill -9`, down for a while, restarted from its data dir.
    Kill,
    /// A kill while another member (a backup) is paused briefly.
    KillSlowBackup,
    /// SIGSTOP shorter than the failure timeout.
    PauseShort,
    /// SIGSTOP longer than the failure timeout.
    PauseLong,
    /// The member's port down (both ways), for a while.
    Partition,
    /// The member's paths to every other member cut one way, for a while:
    /// outbound or inbound, as the seed draws.
    OneWay,
    /// The member's TCP (setup and bulk ports) cut, for a while.
    TcpCut,
    /// The member's port down and its TCP cut, for a while.
    PartitionTcp,
    /// SIGTERM (it hands its slots over), then restarted.
    TermRestart,
    /// `kill -9`, its data dir lost, forgotten, and joined again as a new
    /// member.
    Wipe,
    /// `kvs-admin drain` while another member is paused briefly, then a
    /// restart (a drained member takes nothing until it restarts).
    Drain,
    /// `kvs-admin migrate` of a random range to a random member.
    Migrate,
    /// `kvs-admin rebalance`.
    Rebalance,
    /// `kvs-admin set replicas`, between the scenario's count and one more
    /// (or one fewer).
    SetReplicas,
    /// `kill -9` of every member at once, down for a while, every one
    /// restarted from its data dir (in an order the seed draws).
    KillAll,
}

impl Kind {
    /// Whether it must wait for a healthy cluster (see the module docs).
    fn takes_a_member_out(self) -> bool {
        !matches!(
            self,
            Kind::PauseShort | Kind::Migrate | Kind::Rebalance | Kind::SetReplicas
        )
    }

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Kill => "kill -9",
            Kind::KillSlowBackup => "kill -9 with a slow backup",
            Kind::PauseShort => "short pause",
            Kind::PauseLong => "long pause",
            Kind::Partition => "partition",
            Kind::OneWay => "one-way partition",
            Kind::TcpCut => "TCP cut",
            Kind::PartitionTcp => "partition with TCP cut",
            Kind::TermRestart => "SIGTERM and restart",
            Kind::Wipe => "data dir wiped",
            Kind::Drain => "drain with a slow backup",
            Kind::Migrate => "migrate",
            Kind::Rebalance => "rebalance",
            Kind::SetReplicas => "set replicas",
            Kind::KillAll => "kill -9 of every member",
        }
    }
}

/// A duration between `lo` and `hi` ms.
fn ms(rng: &mut Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(lo + rng.below(hi - lo + 1))
}

/// A member other than `m`.
fn other(rng: &mut Rng, n: usize, m: usize) -> usize {
    (m + 1 + rng.below(n as u64 - 1) as usize) % n
}

/// The nemesis: a seeded schedule played against a cluster.
pub struct Nemesis {
    rng: Rng,
    kinds: Vec<Kind>,
    /// Faults played, by kind.
    pub played: BTreeMap<Kind, u32>,
    /// What it did, one line per fault, stamped with the history's clock.
    pub log: Vec<String>,
    /// When each kill of every member struck, in ns of the history's
    /// clock (just before the first SIGKILL).
    pub kill_alls: Vec<u64>,
    /// Set from a kill of every member until they are all started again
    /// (the clients hold their next operations).
    pub hold: Arc<AtomicBool>,
    /// The copies the cluster keeps now.
    replicas: u8,
    base_replicas: u8,
}

impl Nemesis {
    /// A nemesis drawing from `kinds` with `seed`.
    pub fn new(seed: u64, kinds: &[Kind], replicas: u8) -> Nemesis {
        Nemesis {
            rng: Rng(seed),
            kinds: kinds.to_vec(),
            played: BTreeMap::new(),
            log: Vec::new(),
            kill_alls: Vec::new(),
            hold: Arc::new(AtomicBool::new(false)),
            replicas,
            base_replicas: replicas,
        }
    }

    /// A gap between two faults.
    pub fn gap(&mut self) -> Duration {
        ms(&mut self.rng, 200, 1200)
    }

    /// Draws the next fault and plays it (waiting for a healthy cluster
    /// first when it takes a member out). `at`, the history's clock in ns,
    /// stamps the log.
    pub fn step(&mut self, c: &mut Cluster, at: impl Fn() -> u64) -> Result<(), String> {
        let mut kind = self.kinds[self.rng.below(self.kinds.len() as u64) as usize];
        // A scenario with kills of every member plays one by its third
        // fault at the latest, whatever the draws.
        let steps: u32 = self.played.values().sum();
        if steps >= 2
            && self.kinds.contains(&Kind::KillAll)
            && !self.played.contains_key(&Kind::KillAll)
        {
            kind = Kind::KillAll;
        }
        let n = c.members.len();
        let m = self.rng.below(n as u64) as usize;
        if kind.takes_a_member_out() {
            c.wait_healthy(Duration::from_secs(60))
                .map_err(|e| format!("before a {}: {e}", kind.name()))?;
        }
        let what = self.play(c, kind, m, &at)?;
        *self.played.entry(kind).or_default() += 1;
        self.log
            .push(format!("{:9.3} s  {what}", at() as f64 / 1e9));
        Ok(())
    }

    /// Every member killed at once, down for a while, and restarted from
    /// its data dir, one after the other from a member the seed draws.
    fn kill_all(&mut self, c: &mut Cluster, at: &impl Fn() -> u64) -> Result<String, String> {
        let n = c.members.len();
        let (down, first) = (
            ms(&mut self.rng, 100, 2000),
            self.rng.below(n as u64) as usize,
        );
        let struck = at();
        c.kill_all();
        self.hold.store(true, Ordering::Release);
        self.kill_alls.push(struck);
        std::thread::sleep(down);
        let restarted = (0..n).try_for_each(|i| c.restart((first + i) % n));
        self.hold.store(false, Ordering::Release);
        restarted?;
        Ok(format!(
            "kill -9 of every member at {:.3} s, restarted after {down:?} from member {first} on",
            struck as f64 / 1e9
        ))
    }

    fn play(
        &mut self,
        c: &mut Cluster,
        kind: Kind,
        m: usize,
        at: &impl Fn() -> u64,
    ) -> Result<String, String> {
        let n = c.members.len();
        let r = &mut self.rng;
        Ok(match kind {
            Kind::Kill => {
                let down = ms(r, 200, 3000);
                c.kill(m);
                std::thread::sleep(down);
                c.restart(m)?;
                format!("kill -9 member {m}, restarted after {down:?}")
            }
            Kind::KillSlowBackup => {
                let (b, slow) = (other(r, n, m), ms(r, 100, 700));
                c.pause(b, true);
                c.kill(m);
                std::thread::sleep(slow);
                c.pause(b, false);
                let down = ms(r, 500, 2000);
                std::thread::sleep(down);
                c.restart(m)?;
                format!("kill -9 member {m} with member {b} paused for {slow:?}, restarted after {down:?}")
            }
            Kind::PauseShort | Kind::PauseLong => {
                let d = if kind == Kind::PauseShort {
                    ms(r, 50, MEMBER_TIMEOUT.as_millis() as u64 * 3 / 5)
                } else {
                    ms(r, MEMBER_TIMEOUT.as_millis() as u64 * 3 / 2, 4000)
                };
                c.pause(m, true);
                std::thread::sleep(d);
                c.pause(m, false);
                format!("SIGSTOP member {m} for {d:?}")
            }
            Kind::Partition => {
                let d = ms(r, 200, 3000);
                c.port(m, true);
                std::thread::sleep(d);
                c.port(m, false);
                format!("port of member {m} down for {d:?}")
            }
            Kind::OneWay => {
                let (outbound, d) = (r.below(2) == 0, ms(r, 200, 3000));
                c.one_way(m, outbound, true);
                std::thread::sleep(d);
                c.one_way(m, outbound, false);
                let way = if outbound { "to" } else { "from" };
                format!("paths of member {m} {way} the others cut for {d:?}")
            }
            Kind::TcpCut => {
                let d = ms(r, 200, 5000);
                c.tcp(m, true);
                std::thread::sleep(d);
                c.tcp(m, false);
                format!("TCP of member {m} cut for {d:?}")
            }
            Kind::PartitionTcp => {
                let d = ms(r, 200, 3000);
                c.port(m, true);
                c.tcp(m, true);
                std::thread::sleep(d);
                c.tcp(m, false);
                c.port(m, false);
                format!("port of member {m} down and its TCP cut for {d:?}")
            }
            Kind::TermRestart => {
                let clean = c.term(m, Duration::from_secs(20));
                c.restart(m)?;
                format!("SIGTERM member {m} (exited by itself: {clean}), restarted")
            }
            Kind::Drain => self.drain(c, m)?,
            Kind::Wipe => {
                let old = c.members[m].id;
                let new = c.wipe(m)?;
                format!(
                    "kill -9 member {old}, its data dir wiped, forgotten, joined as member {new}"
                )
            }
            Kind::Migrate => self.migrate(c, m)?,
            Kind::Rebalance => format!(
                "rebalance: {}",
                answer(c.request(&ControlRequest::Rebalance))
            ),
            Kind::SetReplicas => {
                let max = n.min(3) as u8;
                let to = if self.replicas == self.base_replicas {
                    (self.base_replicas + 1).min(max).max(2)
                } else {
                    self.base_replicas
                };
                let a = answer(c.request(&ControlRequest::SetReplicas { replicas: to }));
                if a == "ok" {
                    self.replicas = to;
                    c.replicas = to;
                }
                format!("set replicas {to}: {a}")
            }
            Kind::KillAll => self.kill_all(c, at)?,
        })
    }

    fn drain(&mut self, c: &mut Cluster, m: usize) -> Result<String, String> {
        let n = c.members.len();
        let (b, slow) = (other(&mut self.rng, n, m), ms(&mut self.rng, 100, 600));
        let a = answer(c.request_to(m, &ControlRequest::Drain));
        c.pause(b, true);
        std::thread::sleep(slow);
        c.pause(b, false);
        c.wait(
            &format!("member {m} drained"),
            Duration::from_secs(60),
            |c| c.status(m).is_some_and(|s| s.drained),
        )?;
        let clean = c.term(m, Duration::from_secs(20));
        c.restart(m)?;
        Ok(format!(
            "drain member {m} ({a}) with member {b} paused for {slow:?}; SIGTERM \
             (exited by itself: {clean}), restarted"
        ))
    }

    fn migrate(&mut self, c: &mut Cluster, to: usize) -> Result<String, String> {
        let slots = 1024u32;
        let len = 1 + self.rng.below(u64::from(slots / 4)) as u32;
        let first = self.rng.below(u64::from(slots - len)) as u32;
        let to = c.members[to].id;
        let req = ControlRequest::Migrate {
            first,
            end: first + len,
            to,
        };
        Ok(format!(
            "migrate slots {first}..{} to member {to}: {}",
            first + len,
            answer(c.request(&req))
        ))
    }
}

/// A control answer in a word or a line.
fn answer(r: Result<ControlReply, String>) -> String {
    match r {
        Ok(ControlReply::Ok) => "ok".into(),
        Ok(ControlReply::Started(_)) => "started".into(),
        Ok(ControlReply::Error { message }) => format!("refused: {message}"),
        Ok(other) => format!("{other:?}"),
        Err(e) => format!("failed: {e}"),
    }
}
