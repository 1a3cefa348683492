//! `kill -9` of any one member under load (issue 28): three member
//! processes keeping two copies of every slot (`replicas = 2`,
//! `member_timeout_ms = 500`), YCSB workload A with `dataintegrity=true`
//! against them, and beside it a recorder writing each of its keys' next
//! value and reading them back, every operation recorded in a history.
//! About 1 s into the run one member dies by SIGKILL: a member that is
//! only a backup, a primary that does not lead the control group, or the
//! control group's leader, each in a run of its own. In every run:
//!
//! - the driver reports every operation OK (none ERROR, every read
//!   verified);
//! - the history check passes: every acknowledged write reads back, no read
//!   is stale;
//! - a write on a slot the killed member held (as primary; as backup for
//!   the backup-only member) is acknowledged after the kill, and the time
//!   from the kill to the first one is printed.
//!
//! The runs take turns (a lock): on a CI machine of two cores, three
//! clusters at once would starve the members' heartbeats.

use kvs_proto::MemberId;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use kvs_client::{Client, ControlClient, ControlOptions, OwnedReply, ShardMap};
use kvs_proto::control::{ControlReply, ControlRequest, GroupView};
use kvs_proto::shard::slot_of;
use kvs_server::{Config, Server};
use mlx5::sim::fabric::Fabric;

#[path = "../../kvs-server/tests/support/history.rs"]
mod history;
mod support;

use history::{check, seq_of, value, History, Kind, Outcome};
use support::{ok_count, report_value};
use test_support::KillOnDrop;

/// Set in a child process: the fabric of the member it runs.
const CHILD_FABRIC: &str = "YCSB_FAILOVER_FABRIC";
/// Set in a child process: the member's data dir.
const CHILD_DIR: &str = "YCSB_FAILOVER_DIR";
/// Set in a child process that joins a cluster: a member's address.
const CHILD_JOIN: &str = "YCSB_FAILOVER_JOIN";
const SLOTS: u32 = 512;
/// YCSB records loaded.
const RECORDS: u64 = 2000;
/// The recorder's keys (`k0` … `k199`), in two threads of 100.
const KEYS: u32 = 200;
/// The run's length: about 1 s before the kill, the rest after it.
const RUN_SECONDS: u32 = 6;

/// One run at a time (see the module docs).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs in a child process only: a member that prints its address and
/// serves until it is killed.
#[test]
fn child_member() {
    let Ok(fabric) = std::env::var(CHILD_FABRIC) else {
        return;
    };
    // Its log on stderr, which the parent keeps and shows when a test fails.
    kvs_server::logging::init("info", kvs_server::logging::LogFormat::Plain).unwrap();
    let s = Server::start(Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        device: "sim1".into(),
        fabric: Some(fabric),
        workers: 2,
        slots: SLOTS,
        max_value: 4096,
        stats_interval_s: 0,
        replicas: 2,
        member_timeout_ms: 500,
        data_dir: Some(std::env::var(CHILD_DIR).unwrap().into()),
        join: std::env::var(CHILD_JOIN).ok(),
        // Member 0 founds the cluster.
        bootstrap: std::env::var(CHILD_JOIN).is_err(),
        ..Config::default()
    })
    .unwrap();
    println!("ADDR {}", s.addr());
    s.wait();
}

/// A member process, killed when dropped, and what it printed.
struct Member {
    child: Child,
    addr: SocketAddr,
    out: Arc<Mutex<String>>,
}

impl Member {
    fn start(fabric: &str, dir: &Path, join: Option<SocketAddr>) -> Member {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "child_member", "--nocapture", "--test-threads=1"])
            .env(CHILD_FABRIC, fabric)
            .env(CHILD_DIR, dir)
            .env_remove(CHILD_JOIN)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(j) = join {
            cmd.env(CHILD_JOIN, j.to_string());
        }
        let mut child = cmd.spawn().unwrap();
        let out = Arc::new(Mutex::new(String::new()));
        let mut stderr = child.stderr.take().unwrap();
        let o = out.clone();
        std::thread::spawn(move || {
            let mut b = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut b) {
                if n == 0 {
                    break;
                }
                o.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&b[..n]));
            }
        });
        let (tx, rx) = mpsc::channel::<SocketAddr>();
        let stdout = child.stdout.take().unwrap();
        let o = out.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                if let Some((_, a)) = l.split_once("ADDR ") {
                    let _ = tx.send(a.trim().parse().unwrap());
                }
                let mut g = o.lock().unwrap();
                g.push_str(&l);
                g.push('\n');
            }
        });
        let Ok(addr) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "a member never said where it listens: {}",
                out.lock().unwrap()
            );
        };
        Member { child, addr, out }
    }

    /// Kills it with SIGKILL and reaps it: once this returns, it is gone.
    fn kill9(&mut self) {
        test_support::kill9(&mut self.child);
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The recorder's threads, stopped and joined when dropped (when a test
/// fails too).
struct Recorders {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<Vec<String>>>,
}

impl Recorders {
    /// Stops them; the errors they got.
    fn stop(&mut self) -> Vec<String> {
        self.stop.store(true, Ordering::Release);
        let mut errors = Vec::new();
        for r in self.threads.drain(..) {
            match r.join() {
                Ok(e) => errors.extend(e),
                Err(_) if std::thread::panicking() => {}
                Err(_) => panic!("a recorder thread panicked"),
            }
        }
        errors
    }
}

impl Drop for Recorders {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Three members of a fresh fabric with fresh data dirs, joined to member 0,
/// and a control client.
struct Trio {
    fabric: String,
    root: PathBuf,
    members: Vec<Member>,
    cc: ControlClient,
}

impl Trio {
    fn start(tag: &str) -> Trio {
        let fabric = format!("ycsb-failover-{tag}-{}", std::process::id());
        let root = std::env::temp_dir().join(&fabric);
        let _ = std::fs::remove_dir_all(&root);
        let dir = |m: usize| {
            let d = root.join(format!("m{m}"));
            std::fs::create_dir_all(&d).unwrap();
            d
        };
        let a = Member::start(&fabric, &dir(0), None);
        let b = Member::start(&fabric, &dir(1), Some(a.addr));
        let c = Member::start(&fabric, &dir(2), Some(a.addr));
        let opts = ControlOptions {
            setup_timeout: Duration::from_secs(2),
            call_timeout: Duration::from_secs(3),
            ..ControlOptions::default()
        };
        let cc = ControlClient::new(&device(&fabric), opts).unwrap();
        let mut t = Trio {
            fabric,
            root,
            members: vec![a, b, c],
            cc,
        };
        t.settled();
        t
    }

    /// Waits until the three members are up and vote and the group has a
    /// leader (any: the group may elect another member as they join);
    /// returns the view.
    fn settled(&mut self) -> GroupView {
        let all = self.addrs();
        let mut last = None;
        wait(
            "three voting members and a leader",
            Duration::from_secs(30),
            || {
                last = self.view(&all).filter(|g| {
                    g.leader.is_some()
                        && g.members.len() == 3
                        && g.members.iter().all(|m| m.state == "up" && m.voter)
                });
                last.is_some()
            },
        );
        last.unwrap()
    }

    /// The leader, as the members that answer with the newest term see it.
    fn leader_now(&mut self) -> Option<MemberId> {
        let all = self.addrs();
        all.iter()
            .filter_map(|&a| self.view(&[a]))
            .filter(|g| g.leader.is_some())
            .max_by_key(|g| g.term)
            .and_then(|g| g.leader)
    }

    fn addrs(&self) -> Vec<SocketAddr> {
        self.members.iter().map(|m| m.addr).collect()
    }

    /// The group as the first member of `at` that answers sees it.
    fn view(&mut self, at: &[SocketAddr]) -> Option<GroupView> {
        at.iter()
            .find_map(|&a| match self.cc.request(a, &ControlRequest::Status) {
                Ok(ControlReply::Status(s)) => s.group,
                _ => None,
            })
    }

    /// The map of the member at `at`.
    fn map(&mut self, at: SocketAddr) -> ShardMap {
        match self.cc.request(at, &ControlRequest::Map).unwrap() {
            ControlReply::Map { map } => ShardMap::decode(&map).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    /// Runs a migration (or rebalance) at the leader to its end.
    fn migrate(&mut self, req: ControlRequest) {
        let all = self.addrs();
        let mut keeper = self.members[0].addr;
        let t = Instant::now();
        loop {
            if let Some(l) = self.view(&all).and_then(|g| g.leader) {
                keeper = all[l.index()];
            }
            match self.cc.request(keeper, &req) {
                Ok(ControlReply::Started(_)) => break,
                // The leader moved, or an election is under way.
                Ok(ControlReply::Keeper { .. } | ControlReply::NoLeader) => {}
                r => panic!("{req:?}: {r:?}"),
            }
            assert!(t.elapsed() < Duration::from_secs(10), "{req:?}: no leader");
            std::thread::sleep(Duration::from_millis(20));
        }
        let cc = &mut self.cc;
        wait("the migration", Duration::from_secs(60), || {
            match cc.request(keeper, &ControlRequest::Status) {
                Ok(ControlReply::Status(s)) => s.migration.is_some_and(|m| {
                    assert_eq!(m.error, None, "{req:?}");
                    m.finished
                }),
                _ => false,
            }
        });
    }

    /// Waits until every slot has its two copies, ready, every member up,
    /// and the members serve by one map; returns that map.
    fn in_sync(&mut self) -> ShardMap {
        let all = self.addrs();
        let t = Instant::now();
        loop {
            let v = self.view(&all);
            if v.as_ref().is_some_and(|g| {
                g.replicas == 2
                    && g.under_replicated_slots == 0
                    && g.members.iter().all(|m| m.state == "up")
            }) {
                let maps: Vec<ShardMap> = all.iter().map(|&a| self.map(a)).collect();
                if maps.windows(2).all(|w| w[0] == w[1]) {
                    let m = maps.into_iter().next().unwrap();
                    assert!((0..SLOTS).all(|s| {
                        let b = m.backups(s);
                        b.len() == 1 && b[0].ready && m.importing_from(s).is_none()
                    }));
                    return m;
                }
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "copies not ready within 60 s: {v:#?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Trio {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (i, m) in self.members.iter().enumerate() {
                eprintln!("--- member {i} printed:\n{}", m.out.lock().unwrap());
            }
        }
        self.members.clear();
        Fabric::remove_if_unused(&self.fabric);
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Software device `sim0` of `fabric`, the clients' device.
fn device(fabric: &str) -> mlx5::device::Context {
    copyrpc::transport::DeviceSpec {
        name: "sim0",
        fabric: Some(fabric),
        software: "sim0",
    }
    .open()
    .unwrap()
}

fn wait(what: &str, most: Duration, done: impl FnMut() -> bool) -> Duration {
    test_support::wait_until(what, most, Duration::from_millis(5), done)
}

fn key(k: u32) -> String {
    format!("k{k}")
}

/// The recorder: writes of each of keys `first..first+keys` in turn (its
/// next value), then reads of each, and so on until `stop`, from a client
/// of its own through `contact`, recorded in `h` (a write with no answer
/// is `Unknown`: it may have been applied). Returns the errors it got,
/// each with when (ms since the history began).
fn recorder(
    h: Arc<History>,
    contact: SocketAddr,
    fabric: String,
    first: u32,
    keys: u32,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut c = Client::<u64>::connect(contact, &device(&fabric), Default::default()).unwrap();
        let mut errors = Vec::new();
        let mut seq = vec![0u64; keys as usize];
        let mut i = 0u32;
        while !stop.load(Ordering::Acquire) {
            let k = first + i % keys;
            if (i / keys) % 2 == 0 {
                let s = &mut seq[(k - first) as usize];
                *s += 1;
                let t = h.now();
                let r = c.wait_for(|c, tag| c.put(key(k).as_bytes(), &value(k, *s), tag));
                let outcome = match r {
                    Ok(OwnedReply::Done) => Outcome::Ok,
                    other => {
                        errors.push(format!(
                            "{} ms: put {}: {other:?}",
                            h.now() / 1_000_000,
                            key(k)
                        ));
                        Outcome::Unknown
                    }
                };
                h.record(k, Kind::Write(*s), t, outcome);
            } else if let Err(e) = read(&mut c, &h, k) {
                errors.push(format!("{} ms: get {}: {e}", h.now() / 1_000_000, key(k)));
            }
            i += 1;
        }
        errors
    })
}

/// Reads key `k` through `c`, recorded in `h`; the error, if it failed.
fn read(c: &mut Client<u64>, h: &History, k: u32) -> Result<(), String> {
    let t = h.now();
    match c.wait_for(|c, tag| c.get(key(k).as_bytes(), tag)) {
        Ok(OwnedReply::Value(v)) => {
            let s = seq_of(k, &v).unwrap_or(u64::MAX);
            h.record(k, Kind::Read(Some(s)), t, Outcome::Ok);
            Ok(())
        }
        Ok(OwnedReply::NotFound) => {
            h.record(k, Kind::Read(None), t, Outcome::Ok);
            Ok(())
        }
        other => {
            h.record(k, Kind::Read(None), t, Outcome::Fail);
            Err(format!("{other:?}"))
        }
    }
}

fn driver(cmd: &str, fabric: &str, server: SocketAddr) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ycsb-driver"));
    c.args([cmd, "-P", "workloada", "-p"])
        .arg(format!("recordcount={RECORDS}"))
        .args(["-p", "dataintegrity=true", "-p", "fieldcount=4"])
        .args(["-p", "fieldlength=100", "-threads", "2", "--depth", "8"])
        .args(["--server", &server.to_string(), "-p"])
        .arg(format!("kvs.fabric={fabric}"))
        .args(["-p", "kvs.device=sim0"]);
    c
}

/// Which member dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Victim {
    /// A member that is primary of no slot and backup of some.
    BackupOnly,
    /// A primary that does not lead the control group.
    Primary,
    /// The control group's leader (a primary too).
    Leader,
}

fn kill_one_member_under_ycsb_load(victim: Victim) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tag = match victim {
        Victim::BackupOnly => "backup",
        Victim::Primary => "primary",
        Victim::Leader => "leader",
    };
    let mut t = Trio::start(tag);
    let addrs = t.addrs();
    // Who holds what. Until slots move, member 0 (which started the
    // cluster) is primary of all of them, backed up on member 1.
    let leader = t.settled().leader.unwrap();
    match victim {
        Victim::BackupOnly => {
            // Half of them to member x of 1 and 2, backed up on the next
            // member in ring order: member 0 when x is 2, 2 when x is 1.
            // Member 3 - x (1 or 2) then backs up some slots and owns
            // none; it is the one that does not lead.
            let x = if leader == MemberId(1) { 1 } else { 2 };
            let x = MemberId(x);
            t.migrate(ControlRequest::Migrate {
                first: 0,
                end: SLOTS / 2,
                to: x,
            });
        }
        Victim::Primary | Victim::Leader => t.migrate(ControlRequest::Rebalance),
    }
    let map = t.in_sync();
    let leader = t.settled().leader.unwrap();
    let owned: Vec<u32> = (0..3).map(|m| map.slots_of(MemberId(m))).collect();
    // The backup-only member, for that run.
    let backup_only = (0..3).map(MemberId).find(|&m| {
        owned[m.index()] == 0
            && (0..SLOTS).any(|s| map.backups(s).iter().any(|b| b.owner.member == m))
    });
    if victim == Victim::BackupOnly {
        assert!(
            backup_only.is_some_and(|b| b != leader),
            "no backup-only member but the leader {leader}: slots owned {owned:?}"
        );
    }
    // The driver and the recorder enter through a member that does not
    // lead, nor is the backup-only member.
    let contact = (0..3)
        .find(|&m| m != leader.index() && Some(MemberId(m as u16)) != backup_only)
        .unwrap();
    let slot = |k: u32| slot_of(key(k).as_bytes(), SLOTS);

    let load = support::output_within(&mut driver("load", &t.fabric, addrs[contact]), 120);
    let out = String::from_utf8_lossy(&load.stdout);
    assert!(
        load.status.success(),
        "{}\n{out}",
        String::from_utf8_lossy(&load.stderr)
    );
    assert_eq!(ok_count(&out, "INSERT"), RECORDS, "{out}");

    // The recorder and the run, both through the contact.
    let h = Arc::new(History::new());
    let stop = Arc::new(AtomicBool::new(false));
    let mut recorders = Recorders {
        stop: stop.clone(),
        threads: Vec::new(),
    };
    recorders.threads = (0..2)
        .map(|i| {
            recorder(
                h.clone(),
                addrs[contact],
                t.fabric.clone(),
                i * KEYS / 2,
                KEYS / 2,
                stop.clone(),
            )
        })
        .collect();
    let mut run = KillOnDrop(
        driver("run", &t.fabric, addrs[contact])
            .args(["-p", "operationcount=1000000000", "-p"])
            .arg(format!("maxexecutiontime={RUN_SECONDS}"))
            .args(["-s", "-p", "status.interval=1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let run = &mut run.0;
    let support::DriverOutput {
        status: going,
        stdout: out_reader,
        stderr: err_reader,
    } = support::read_driver(run);
    // The first status line: 1 s into the run.
    if going.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = run.kill();
        panic!("the driver never got going: {}", err_reader.join().unwrap());
    }

    // Who dies, picked now: the group may have elected another leader
    // since (a member a busy machine kept from answering in time).
    let mut now = None;
    wait("a leader", Duration::from_secs(10), || {
        now = t.leader_now();
        now.is_some()
    });
    let leader = now.unwrap();
    let dead: MemberId = match victim {
        Victim::BackupOnly => backup_only,
        Victim::Primary => (0..3)
            .map(MemberId)
            .filter(|&m| m != leader && owned[m.index()] > 0)
            .min_by_key(|&m| m.index() == contact),
        Victim::Leader => Some(leader),
    }
    .expect("a member to kill");
    let d = dead.index();
    let affected: Vec<u32> = (0..SLOTS)
        .filter(|&s| match victim {
            Victim::BackupOnly => map.backups(s).iter().any(|b| b.owner.member == dead),
            Victim::Primary | Victim::Leader => map.owner_of_slot(s).member == dead,
        })
        .collect();
    let mut is_affected = vec![false; SLOTS as usize];
    for &s in &affected {
        is_affected[s as usize] = true;
    }
    assert!(
        (0..KEYS).any(|k| is_affected[slot(k) as usize]),
        "no recorder key on a slot of member {dead}"
    );
    t.members[d].kill9();
    let killed = h.now();
    let live: Vec<SocketAddr> = (0..3).filter(|&m| m != d).map(|m| addrs[m]).collect();
    let marked = wait(
        &format!("member {dead} marked failed"),
        Duration::from_secs(10),
        || {
            t.view(&live)
                .is_some_and(|g| g.members[d].state == "failed" && g.leader.is_some())
        },
    );

    let ended = Instant::now();
    let status = loop {
        if let Some(s) = run.try_wait().unwrap() {
            break s;
        }
        if ended.elapsed() > Duration::from_secs(60) {
            let _ = run.kill();
            panic!(
                "the driver did not end within 60 s after the kill: {}",
                err_reader.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let rec_errors = recorders.stop();
    let out = out_reader.join().unwrap();
    let err = err_reader.join().unwrap();

    // The history, with a last read of every key through a new client.
    // (Retried: on a busy machine a setup may time out while the members
    // install the maps of the failover.)
    let mut reader = None;
    let mut tried = Vec::new();
    let start = Instant::now();
    while reader.is_none() {
        match Client::<u64>::connect(addrs[contact], &device(&t.fabric), Default::default()) {
            Ok(c) => reader = Some(c),
            Err(e) => {
                tried.push(e.to_string());
                // As `wait` polls: a refused connect fails at once.
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        assert!(
            reader.is_some() || start.elapsed() < Duration::from_secs(20),
            "a reader's connection: not within 20 s; tried {tried:?}"
        );
    }
    if !tried.is_empty() {
        eprintln!("failover: the reader connected after {tried:?}");
    }
    let mut reader = reader.unwrap();
    let last_reads: Vec<String> = (0..KEYS)
        .filter_map(|k| {
            read(&mut reader, &h, k)
                .err()
                .map(|e| format!("{}: {e}", key(k)))
        })
        .collect();
    drop(reader);
    let ops = h.ops();
    let checked = check(&ops);

    // From the kill to the first write on an affected slot sent after it
    // and acknowledged.
    let first_ack = ops
        .iter()
        .filter(|o| {
            matches!(o.kind, Kind::Write(_))
                && o.outcome == Outcome::Ok
                && o.invoked >= killed
                && is_affected[slot(o.key) as usize]
        })
        .map(|o| o.completed - killed)
        .min()
        .map(Duration::from_nanos);
    let role = match victim {
        Victim::BackupOnly => "backup-only member",
        Victim::Primary => "primary member",
        Victim::Leader => "control leader, member",
    };
    let reads = ok_count(&out, "READ");
    let updates = ok_count(&out, "UPDATE");
    let ycsb_errors: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("Return=") && !l.contains("Return=OK"))
        .collect();
    println!(
        "failover: killed the {role} {dead}{}{} ({} affected slots); marked failed after {} ms; \
         first acknowledged write on an affected slot after {}; ycsb {reads} reads and \
         {updates} updates OK, not OK: {ycsb_errors:?}; recorder: {} errors; history {:?}",
        if victim != Victim::Leader && dead == leader {
            ", leading the group"
        } else {
            ""
        },
        if d == contact {
            ", the clients' contact"
        } else {
            ""
        },
        affected.len(),
        marked.as_millis(),
        first_ack.map_or("never".into(), |d| format!("{} ms", d.as_millis())),
        rec_errors.len(),
        checked.as_ref().map_err(Vec::len),
    );
    if !rec_errors.is_empty() {
        println!(
            "failover: killed at {} ms; the recorder's first errors: {:#?}",
            killed / 1_000_000,
            &rec_errors[..rec_errors.len().min(5)]
        );
    }

    // The run: every operation OK, every read verified.
    assert!(status.success(), "{status}: {err}\n{out}");
    assert!(reads > 0 && updates > 0, "{out}");
    assert!(ycsb_errors.is_empty(), "{ycsb_errors:?}\n{err}\n{out}");
    assert_eq!(report_value(&out, "READ", "Operations"), reads, "{out}");
    assert_eq!(report_value(&out, "UPDATE", "Operations"), updates, "{out}");
    // Nothing lost, nothing stale, and every key readable at the end.
    let sum =
        checked.unwrap_or_else(|e| panic!("{} violations: {:#?}", e.len(), &e[..e.len().min(10)]));
    assert!(sum.writes_ok > 200 && sum.reads_ok > 200, "{sum:?}");
    assert!(last_reads.is_empty(), "{last_reads:#?}");
    // Writes on the killed member's slots go on.
    assert!(
        first_ack.is_some(),
        "no write on a slot member {dead} held was acknowledged after its kill: {sum:?}"
    );
}

#[test]
fn kill9_of_a_backup_only_member_under_ycsb_load_loses_nothing() {
    kill_one_member_under_ycsb_load(Victim::BackupOnly);
}

#[test]
fn kill9_of_a_primary_under_ycsb_load_loses_nothing() {
    kill_one_member_under_ycsb_load(Victim::Primary);
}

#[test]
fn kill9_of_the_control_leader_under_ycsb_load_loses_nothing() {
    kill_one_member_under_ycsb_load(Victim::Leader);
}
