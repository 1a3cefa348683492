//! Synchronous replicas: three members keeping two copies of every slot.
//! Under load recorded in a history, a member that owns slots is killed
//! (`kill -9`): its slots fail over to their backups, no acknowledged write
//! is lost and no read is stale. It comes back from its data dir without
//! its records, the group copies slots to it again, and then another member
//! is killed: still nothing lost. A rolling restart (SIGTERM, then the
//! member again from its data dir, one member at a time) loses nothing.
//! Writes in flight whose answers were lost with a killed member, sent
//! again to the backup promoted in its place, are not applied twice. A
//! drained primary waits for the writes waiting on a paused backup before
//! the group moves its slots: they are acknowledged once the backup
//! resumes, not failed.

use kvs_proto::{MemberId, RequestId};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvs_client::{ControlClient, OwnedReply};
use kvs_proto::control::{ControlReply, ControlRequest, GroupView};
use mlx5::sim::fabric::Fabric;

#[path = "support/history.rs"]
mod history;
#[path = "support/load.rs"]
mod load;
mod support;

use history::History;
use load::{load, read_back};
use support::{group_view, ServerProcess};

fn member(fabric: &str, dir: &Path, listen: &str, join: Option<SocketAddr>) -> ServerProcess {
    support::member_process_with(fabric, dir, listen, 2, join, &["--replicas", "2"])
}

fn wait(what: &str, most: Duration, done: impl FnMut() -> bool) -> Duration {
    test_support::wait_until(what, most, Duration::from_millis(5), done)
}

/// The view of the first member of `at` that answers with one.
fn view(cc: &mut ControlClient, at: &[SocketAddr]) -> Option<GroupView> {
    at.iter().find_map(|&a| group_view(cc, a))
}

/// Preloaded records: `p{i}`.
fn preloaded(i: u32) -> (String, Vec<u8>) {
    (
        format!("p{i}"),
        format!("{i}:{}", "y".repeat(200)).into_bytes(),
    )
}

/// Three member processes keeping two copies of every slot, spread by a
/// rebalance, with every copy ready, and `preload` records written.
struct Trio {
    fabric: String,
    /// Removed when the trio is dropped, after its processes.
    _root: test_support::TempDir,
    dirs: Vec<PathBuf>,
    addrs: [SocketAddr; 3],
    procs: [Option<ServerProcess>; 3],
    cc: ControlClient,
}

impl Trio {
    fn start(tag: &str, preload: u32) -> Trio {
        let fabric = format!("kvs-{tag}-{}", std::process::id());
        let root = support::temp_dir(tag);
        let dirs: Vec<PathBuf> = (0..3).map(|m| root.join(format!("m{m}"))).collect();
        let a = member(&fabric, &dirs[0], "127.0.0.1:0", None);
        let b = member(&fabric, &dirs[1], "127.0.0.1:0", Some(a.addr));
        let c = member(&fabric, &dirs[2], "127.0.0.1:0", Some(a.addr));
        let addrs = [a.addr, b.addr, c.addr];
        let mut cc = support::control_client(&fabric);
        wait(
            "three members under member 0",
            Duration::from_secs(20),
            || {
                group_view(&mut cc, addrs[0])
                    .is_some_and(|g| g.leader == Some(MemberId(0)) && g.members.len() == 3)
            },
        );
        let r = cc.request(addrs[0], &ControlRequest::Rebalance).unwrap();
        assert!(matches!(r, ControlReply::Started(_)), "{r:?}");
        let mut t = Trio {
            fabric,
            _root: root,
            dirs,
            addrs,
            procs: [Some(a), Some(b), Some(c)],
            cc,
        };
        wait("the rebalance", Duration::from_secs(60), || {
            support::member_status(&mut t.cc, addrs[0])
                .and_then(|s| s.migration)
                .is_some_and(|m| m.finished)
        });
        t.in_sync(&addrs);
        let mut loader = support::connect(addrs[0], &t.fabric, Default::default()).unwrap();
        for i in 0..preload {
            let (k, v) = preloaded(i);
            let r = loader.wait_for(|c, t| c.put(k.as_bytes(), &v, t));
            assert_eq!(r, Ok(OwnedReply::Done), "{k}");
        }
        t
    }

    /// Waits until every slot has its two copies, ready, as the members in
    /// `live` see it.
    fn in_sync(&mut self, live: &[SocketAddr]) {
        let t = Instant::now();
        let mut last = None;
        while !last.as_ref().is_some_and(|g: &GroupView| {
            g.replicas == 2
                && g.under_replicated_slots == 0
                && g.members.iter().all(|m| m.state == "up")
        }) {
            if t.elapsed() > Duration::from_secs(60) {
                let out: Vec<String> = self
                    .procs
                    .iter()
                    .flatten()
                    .map(ServerProcess::printed)
                    .collect();
                let short: Vec<String> =
                    support::connect(live[0], &self.fabric, Default::default())
                        .map(|c| {
                            let m = c.map().clone();
                            (0..m.slots())
                                .filter(|&s| m.backups(s).iter().all(|b| !b.ready))
                                .map(|s| {
                                    format!("{s}: {:?} {:?}", m.owner_of_slot(s), m.backups(s))
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                panic!(
                    "copies not ready within 60 s: {last:#?}\nshort: {short:?}\n{}",
                    out.join("\n---\n")
                );
            }
            std::thread::sleep(Duration::from_millis(5));
            last = view(&mut self.cc, live);
        }
    }

    /// Member `m` again, from its data dir.
    fn restart(&mut self, m: usize) {
        let at = self.addrs[m].to_string();
        self.procs[m] = Some(member(&self.fabric, &self.dirs[m], &at, None));
    }

    /// Checks every preloaded record and the history, through a new client.
    fn check(&mut self, h: &History, preload: u32, via: SocketAddr) -> history::Summary {
        let mut reader = match support::connect(via, &self.fabric, Default::default()) {
            Ok(c) => c,
            Err(e) => {
                let out: Vec<String> = self
                    .procs
                    .iter()
                    .flatten()
                    .map(ServerProcess::printed)
                    .collect();
                panic!("cannot connect to {via}: {e}\n{}", out.join("\n---\n"));
            }
        };
        let s = read_back(&mut reader, h, 200, (0..preload).map(preloaded));
        assert!(s.writes_ok > 200 && s.reads_ok > 200, "{s:?}");
        s
    }
}

impl Drop for Trio {
    fn drop(&mut self) {
        for p in &mut self.procs {
            drop(p.take());
        }
        Fabric::remove_if_unused(&self.fabric);
    }
}

/// Load on keys 0..200 from two clients through `via`, until `stop`.
fn start_load(
    h: &Arc<History>,
    via: SocketAddr,
    fabric: &str,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..2)
        .map(|t| {
            load(
                h.clone(),
                via,
                fabric.to_string(),
                t * 100,
                100,
                stop.clone(),
            )
        })
        .collect()
}

#[test]
fn killed_members_lose_no_acknowledged_write() {
    let preload = 2000;
    let mut t = Trio::start("replicas-kill", preload);
    let addrs = t.addrs;
    let h = Arc::new(History::new());
    let stop = Arc::new(AtomicBool::new(false));
    let loads = start_load(&h, addrs[0], &t.fabric, &stop);
    std::thread::sleep(Duration::from_millis(500));

    // Member 1 dies; the group fails its slots over to their backups.
    t.procs[1].as_mut().unwrap().kill9();
    let live = [addrs[0], addrs[2]];
    let failover = wait("member 1 failed over", Duration::from_secs(10), || {
        view(&mut t.cc, &live).is_some_and(|g| g.members[1].state == "failed")
    });
    std::thread::sleep(Duration::from_millis(1000));
    // Back without its records: it rejoins as itself and gets copies again.
    t.restart(1);
    t.in_sync(&addrs);
    std::thread::sleep(Duration::from_millis(500));
    // Then member 2 dies.
    t.procs[2].as_mut().unwrap().kill9();
    let live = [addrs[0], addrs[1]];
    wait("member 2 failed over", Duration::from_secs(10), || {
        view(&mut t.cc, &live).is_some_and(|g| g.members[2].state == "failed")
    });
    std::thread::sleep(Duration::from_millis(1000));
    stop.store(true, Ordering::Release);
    for l in loads {
        l.join().unwrap();
    }
    let s = t.check(&h, preload, addrs[0]);
    eprintln!("replicas: member 1 marked failed {failover:?} after its kill; history: {s:?}");
}

#[test]
fn a_rolling_restart_under_load_loses_nothing() {
    let preload = 1000;
    let mut t = Trio::start("replicas-roll", preload);
    let addrs = t.addrs;
    let h = Arc::new(History::new());
    let stop = Arc::new(AtomicBool::new(false));
    // The clients enter through member 0, which restarts last.
    let loads = start_load(&h, addrs[0], &t.fabric, &stop);
    std::thread::sleep(Duration::from_millis(300));
    let mut handed = Vec::new();
    for m in [1, 2, 0] {
        let took = Instant::now();
        let p = t.procs[m].as_mut().unwrap();
        assert!(
            p.term(Duration::from_secs(15)),
            "member {m} did not stop on SIGTERM"
        );
        handed.push(took.elapsed());
        let out = t.procs[m].take().unwrap().output();
        assert!(out.contains("handed its slots over"), "member {m}: {out}");
        t.restart(m);
        t.in_sync(&addrs);
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Release);
    for l in loads {
        l.join().unwrap();
    }
    let s = t.check(&h, preload, addrs[1]);
    eprintln!("rolling restart: stops took {handed:?}; history: {s:?}");
    // A handful of writes in flight when a member stopped may end without
    // an answer (the client does not send them again yet); never more.
    assert!(s.writes_unknown * 100 <= s.writes_ok, "{s:?}");
}

/// A raw connection's answers: each call's index and bytes.
type Answers = std::rc::Rc<std::cell::RefCell<Vec<(u32, Vec<u8>)>>>;
/// A raw connection's response callback.
type OnAnswer = Box<dyn FnMut(u32, Result<&[u8], copyrpc::CallFailed>)>;

/// A raw copyrpc connection to one worker, for requests kvs-client would
/// not send as they are: request ids the test chooses, sent again at will.
struct Raw {
    ctx: copyrpc::Context<u32, OnAnswer>,
    ep: copyrpc::EndpointId,
    _conn: copyrpc::conn::Connection,
    got: Answers,
}

impl Raw {
    fn connect(addr: SocketAddr, worker: u16, fabric: &str) -> Raw {
        let got: Answers = Default::default();
        let g = got.clone();
        let on_answer: OnAnswer = Box::new(move |i, r| {
            g.borrow_mut()
                .push((i, r.map(<[u8]>::to_vec).unwrap_or_default()))
        });
        let mut ctx = copyrpc::ContextBuilder::new()
            .ring_size(kvs_server::Config::default().ring_size)
            .build(&support::client_device(fabric), on_answer)
            .unwrap();
        let conn =
            copyrpc::conn::connect_with(addr, &mut ctx, &kvs_proto::hello(worker, None)).unwrap();
        Raw {
            ep: conn.endpoint(),
            _conn: conn,
            ctx,
            got,
        }
    }

    /// Sends every request at once, then waits for their answers' status
    /// bytes (in request order).
    fn call_all(&mut self, reqs: &[Vec<u8>]) -> Vec<u8> {
        self.send_all(reqs);
        self.answers(reqs.len())
    }

    /// Sends every request at once (numbered in order).
    fn send_all(&mut self, reqs: &[Vec<u8>]) {
        for (i, r) in reqs.iter().enumerate() {
            self.ctx.call(self.ep, r, 256, i as u32).unwrap();
        }
        self.ctx.poll();
    }

    /// Polls for `d`.
    fn poll_for(&mut self, d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {
            self.ctx.poll();
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Waits for the answers of the `n` requests sent: their status bytes,
    /// in request order.
    fn answers(&mut self, n: usize) -> Vec<u8> {
        let t = Instant::now();
        while self.got.borrow().len() < n {
            assert!(t.elapsed() < Duration::from_secs(10), "answers missing");
            self.ctx.poll();
        }
        let mut got = std::mem::take(&mut *self.got.borrow_mut());
        got.sort_by_key(|(i, _)| *i);
        got.into_iter()
            .map(|(_, b)| b.first().copied().unwrap_or(u8::MAX))
            .collect()
    }
}

/// A put of `v` to `k` routed by map `version`, with request id
/// `(client, q)`; `again`: marked as sent before.
fn put_with_id(k: &[u8], v: &[u8], version: u32, (client, q): (u64, u64), again: bool) -> Vec<u8> {
    use kvs_proto::proto::{add_request_id, write_request, Op, FLAG_RESENT};
    let mut req = Vec::new();
    write_request(&mut req, Op::Put, version, k, v, v.len() as u32, 0);
    add_request_id(&mut req, RequestId::new(client, q));
    if again {
        req[1] |= FLAG_RESENT;
    }
    req
}

#[test]
fn writes_in_flight_sent_again_after_a_failover_are_applied_once() {
    let mut t = Trio::start("replicas-dedup", 0);
    let addrs = t.addrs;
    let c = support::connect(addrs[0], &t.fabric, Default::default()).unwrap();
    let map = c.map().clone();
    drop(c);
    // A key of member 1 or 2 (member 0 leads the group and stays).
    let key = (0..)
        .map(|i| format!("hot{i}"))
        .find(|k| map.owner(k.as_bytes()).member != MemberId(0))
        .unwrap();
    let owner = map.owner(key.as_bytes());
    let m = owner.member.index();
    // One client's 40 writes of the key, all in flight at once, all
    // answered (so each is on the backup too).
    let id = |q| (0x5eed, q);
    let value = |q: u64| format!("v{q}").into_bytes();
    let mut raw = Raw::connect(addrs[m], owner.worker, &t.fabric);
    let first: Vec<_> = (1..=40)
        .map(|q| put_with_id(key.as_bytes(), &value(q), map.version(), id(q), false))
        .collect();
    assert!(raw.call_all(&first).iter().all(|&s| s == 0));
    drop(raw);
    // Its member dies; the group promotes the key's backup.
    t.procs[m].as_mut().unwrap().kill9();
    let live: Vec<SocketAddr> = (0..3).filter(|&i| i != m).map(|i| addrs[i]).collect();
    wait("the owner failed over", Duration::from_secs(10), || {
        view(&mut t.cc, &live).is_some_and(|g| g.members[m].state == "failed")
    });
    let mut reader = support::connect(addrs[0], &t.fabric, Default::default()).unwrap();
    let (map, now) = loop {
        let c = support::connect(addrs[0], &t.fabric, Default::default()).unwrap();
        let map = c.map().clone();
        let now = map.owner(key.as_bytes());
        if now.member != owner.member {
            break (map, now);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The client never got the answers of the older 24 (as if lost with
    // the member), and sends them again to the new primary.
    let mut raw = Raw::connect(addrs[now.member.index()], now.worker, &t.fabric);
    let again: Vec<_> = (1..=24)
        .map(|q| put_with_id(key.as_bytes(), &value(q), map.version(), id(q), true))
        .collect();
    let st = raw.call_all(&again);
    assert!(st.iter().all(|&s| s == 0), "{st:?}");
    let got = reader.wait_for(|c, t| c.get(key.as_bytes(), t)).unwrap();
    assert_eq!(
        got,
        OwnedReply::Value(value(40)),
        "an older write was applied again over the newest"
    );
}

#[test]
fn a_drain_waits_for_the_writes_waiting_on_a_paused_backup() {
    let mut t = Trio::start("replicas-drain", 0);
    let addrs = t.addrs;
    let c = support::connect(addrs[0], &t.fabric, Default::default()).unwrap();
    let map = c.map().clone();
    drop(c);
    // Keys of one worker of member 1 or 2 backed up by the other: member
    // 0 leads the group, and with the primary commits the drain while the
    // backup is paused.
    let backup_of = |k: &str| {
        let s = kvs_proto::shard::slot_of(k.as_bytes(), map.slots());
        map.backups(s).first().map(|b| b.owner.member)
    };
    let first = (0..)
        .map(|i| format!("drain{i}"))
        .find(|k| {
            map.owner(k.as_bytes()).member != MemberId(0)
                && backup_of(k).is_some_and(|b| b != MemberId(0))
        })
        .unwrap();
    let owner = map.owner(first.as_bytes());
    let (p, b) = (owner.member.index(), 3 - owner.member.index());
    let keys: Vec<String> = (0..)
        .map(|i| format!("drain{i}"))
        .filter(|k| map.owner(k.as_bytes()) == owner && backup_of(k) == Some(MemberId(b as u16)))
        .take(20)
        .collect();
    let value = |k: &str| format!("{k}:{}", "v".repeat(100)).into_bytes();
    let puts: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            put_with_id(
                k.as_bytes(),
                &value(k),
                map.version(),
                (0xd7a1, i as u64 + 1),
                false,
            )
        })
        .collect();
    let mut raw = Raw::connect(addrs[p], owner.worker, &t.fabric);
    // The backup stops; the writes reach the primary, which applies them
    // and waits for the backup; then the primary drains.
    t.procs[b].as_ref().unwrap().pause(true);
    raw.send_all(&puts);
    raw.poll_for(Duration::from_millis(50));
    let r = t.cc.request(addrs[p], &ControlRequest::Drain);
    assert!(matches!(r, Ok(ControlReply::Ok)), "{r:?}");
    raw.poll_for(Duration::from_millis(400));
    t.procs[b].as_ref().unwrap().pause(false);
    let st = raw.answers(puts.len());
    wait("the primary drained", Duration::from_secs(10), || {
        support::member_status(&mut t.cc, addrs[p]).is_some_and(|s| s.drained)
    });
    // Every write acknowledged reads back from the new primary.
    let mut reader = support::connect(addrs[0], &t.fabric, Default::default()).unwrap();
    for (k, &s) in keys.iter().zip(&st) {
        if s == 0 {
            let got = reader.wait_for(|c, t| c.get(k.as_bytes(), t)).unwrap();
            assert_eq!(
                got,
                OwnedReply::Value(value(k)),
                "{k} acknowledged, then lost"
            );
        }
    }
    let failed = st.iter().filter(|&&s| s != 0).count();
    assert!(
        failed == 0,
        "{failed} of {} writes waiting on the paused backup failed (status bytes {st:?}; \
         10 = UNAVAILABLE): the drain moved the slots before their backup answered",
        st.len()
    );
}
