//! The cluster under test: real kvs-server processes, one software device
//! each (so that one member's port can go down, or its paths to the others
//! be cut, alone), a data dir each, a TCP proxy each in front of its setup
//! and bulk ports (so that its TCP can be cut: `proxy`), and the operator's
//! control requests (what kvs-admin sends).
//!
//! Members advertise their proxies' addresses: clients and members reach
//! each other through them. The nemesis observes and commands the cluster
//! through the members' private addresses, past the proxies: the observer
//! is not part of the system, and a cut does not blind it.
// Shared with the tests that borrow the nemesis's parts.
#![allow(dead_code)]

use kvs_proto::MemberId;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kvs_client::{ControlClient, ControlOptions};
use kvs_proto::control::{ControlReply, ControlRequest, GroupView, MemberStatus};
use mlx5::sim::fabric::Fabric;

use crate::proxy::Proxy;
use crate::support::ServerProcess;

/// The devices members run on (`sim0` is the clients', `sim2` and `sim3`
/// carry bulk transfers).
const DEVICES: [u32; 5] = [1, 4, 5, 6, 7];

/// The IP members listen on, privately: their proxies listen on 127.0.0.1,
/// the address they advertise, so that a member's bulk port (bound on its
/// listening IP, reached at its advertised one) can have a proxy too.
const PRIVATE_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// A member's faults that cut it off (each undone by [`Cluster::heal`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cuts {
    /// Its port is down.
    pub port: bool,
    /// Its paths to every other member are cut (it sends, nobody hears).
    pub outbound: bool,
    /// The others' paths to it are cut (it hears nothing).
    pub inbound: bool,
    /// Its TCP proxies are cut.
    pub tcp: bool,
}

impl Cuts {
    /// Whether any is in force.
    pub fn any(self) -> bool {
        self != Cuts::default()
    }
}

/// One member.
pub struct Member {
    /// Its id in the cluster (a new one after its data dir was wiped).
    pub id: MemberId,
    /// Its software device.
    pub dev: u32,
    /// Its data dir.
    pub dir: PathBuf,
    /// Its address, the one it advertises: its setup proxy's (kept across
    /// restarts).
    pub addr: SocketAddr,
    /// Where it listens itself (kept across restarts): the observer's way in.
    pub listen: SocketAddr,
    /// Its setup port's proxy (at `addr`) and its bulk port's.
    pub proxies: [Proxy; 2],
    /// The process, while one runs.
    pub proc: Option<ServerProcess>,
    /// Whether it is stopped with SIGSTOP.
    pub paused: bool,
    /// What cuts it off now.
    pub cuts: Cuts,
    /// Everything its earlier processes printed.
    pub past_output: String,
    /// Whether a process of it has started: member 0's first start founds
    /// the cluster (`--bootstrap`), its restarts resume from its data dir.
    pub launched: bool,
}

/// The cluster.
pub struct Cluster {
    /// The software-device fabric.
    pub fabric: String,
    /// Removed when the cluster is dropped, after its processes.
    pub root: test_support::TempDir,
    /// The members, by id.
    pub members: Vec<Member>,
    /// Copies of each slot.
    pub replicas: u8,
    /// The members' `durability` (`none`, `everysec` or `always`).
    pub durability: &'static str,
    cc: ControlClient,
    fab: std::sync::Arc<Fabric>,
}

fn signal(p: &ServerProcess, sig: libc::c_int) {
    // SAFETY: kill(2) with the pid of a child this process spawned and has
    // not reaped (it is reaped only when its ServerProcess is dropped).
    unsafe {
        libc::kill(p.child.id() as libc::pid_t, sig);
    }
}

impl Cluster {
    /// Starts `n` members keeping `replicas` copies of each slot, their
    /// records' logs kept as `durability` says: member 0 founds the
    /// cluster, the others join it one at a time, the slots are spread
    /// over all of them, and every copy is made ready.
    pub fn start(
        tag: &str,
        n: usize,
        replicas: u8,
        durability: &'static str,
    ) -> Result<Cluster, String> {
        let fabric = test_support::unique_name("kvs-nemesis", tag);
        let root = test_support::TempDir::new("kvs-nemesis", tag);
        let opts = ControlOptions {
            setup_timeout: Duration::from_secs(2),
            call_timeout: Duration::from_secs(3),
            ..ControlOptions::default()
        };
        let dev = copyrpc::transport::DeviceSpec {
            name: "sim0",
            fabric: Some(&fabric),
            software: "sim0",
        }
        .open()
        .map_err(|e| format!("the clients' device: {e}"))?;
        let cc = ControlClient::new(&dev, opts).map_err(|e| e.to_string())?;
        let fab = Fabric::open(&fabric).map_err(|e| e.to_string())?;
        let mut c = Cluster {
            fabric,
            members: Vec::new(),
            root,
            replicas,
            durability,
            cc,
            fab,
        };
        if n > DEVICES.len() {
            return Err(format!("at most {} members", DEVICES.len()));
        }
        for (m, &dev) in DEVICES.iter().enumerate().take(n) {
            let dir = c.root.join(format!("m{m}"));
            let (listen, proxies) = addresses().map_err(|e| format!("member {m}'s ports: {e}"))?;
            c.members.push(Member {
                id: MemberId(m as u16),
                dev,
                dir,
                addr: proxies[0].addr(),
                listen,
                proxies,
                proc: None,
                paused: false,
                cuts: Cuts::default(),
                past_output: String::new(),
                launched: false,
            });
            c.launch(m, (m > 0).then_some(0))?;
            let want = m + 1;
            c.wait("the join", Duration::from_secs(30), |c| {
                c.view().is_some_and(|g| {
                    g.members.len() == want && g.members.iter().all(|x| x.state == "up")
                })
            })?;
        }
        c.request(&ControlRequest::Rebalance)?;
        c.wait("the first rebalance", Duration::from_secs(120), |c| {
            c.migration_finished()
        })?;
        c.wait_healthy(Duration::from_secs(120))?;
        Ok(c)
    }

    /// Starts member `m`'s process (at its private address, advertising
    /// its proxies', from its data dir), joining member `join` if its data
    /// dir is empty.
    fn launch(&mut self, m: usize, join: Option<usize>) -> Result<(), String> {
        let join = join.map(|j| self.members[j].addr.to_string());
        let me = &self.members[m];
        let dev = format!("sim{}", me.dev);
        let listen = me.listen.to_string();
        let advertise = me.addr.to_string();
        let bulk = me.proxies[1].addr().port().to_string();
        let replicas = self.replicas.to_string();
        let dir = me.dir.to_str().expect("a UTF-8 path").to_string();
        let mut args = vec![
            "--listen",
            &listen,
            "--advertise",
            &advertise,
            "--bulk-port",
            &bulk,
            "--device",
            &dev,
            "--fabric",
            &self.fabric,
            "--workers",
            "2",
            "--stats-interval",
            "0",
            "--data-dir",
            &dir,
            "--replicas",
            &replicas,
            "--durability",
            self.durability,
            // With records on disk, snapshots come every few tens of KiB
            // of writes: kills land during them, and restarts read them.
            "--auto-snapshot-min-size",
            "64K",
        ];
        match &join {
            Some(j) => args.extend(["--join", j]),
            None if !me.launched => args.push("--bootstrap"),
            None => {}
        }
        // A member that does not start fails the run, not the program.
        let p = std::panic::catch_unwind(|| ServerProcess::start(&args)).map_err(|e| {
            let why = e
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "it did not start".into());
            format!("member {m} did not start: {why}")
        })?;
        let me = &mut self.members[m];
        if p.addr != me.listen {
            return Err(format!(
                "member {m} listens at {}, not at {}",
                p.addr, me.listen
            ));
        }
        me.proc = Some(p);
        me.paused = false;
        me.launched = true;
        Ok(())
    }

    /// Every member's address.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.members.iter().map(|m| m.addr).collect()
    }

    /// The group as the first member that answers sees it.
    pub fn view(&mut self) -> Option<GroupView> {
        self.status_any().and_then(|s| s.group)
    }

    fn status_any(&mut self) -> Option<MemberStatus> {
        let addrs: Vec<SocketAddr> = self.live().map(|m| self.members[m].listen).collect();
        addrs
            .into_iter()
            .find_map(|a| match self.cc.request(a, &ControlRequest::Status) {
                Ok(ControlReply::Status(s)) => Some(s),
                _ => None,
            })
    }

    /// Member `m`'s own status, if it answers.
    pub fn status(&mut self, m: usize) -> Option<MemberStatus> {
        match self
            .cc
            .request(self.members[m].listen, &ControlRequest::Status)
        {
            Ok(ControlReply::Status(s)) => Some(s),
            _ => None,
        }
    }

    /// The members running, not paused and not cut off.
    pub fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.members.len()).filter(|&m| {
            let x = &self.members[m];
            x.proc.is_some() && !x.paused && !x.cuts.any()
        })
    }

    /// Sends `req` to the leader (trying every live member until one leads).
    pub fn request(&mut self, req: &ControlRequest) -> Result<ControlReply, String> {
        let t = Instant::now();
        let mut last = String::new();
        while t.elapsed() < Duration::from_secs(20) {
            // The leader's member id; a wiped member joined under a new one.
            let leader = self.view().and_then(|g| g.leader);
            let Some(l) = leader.and_then(|id| self.members.iter().position(|m| m.id == id)) else {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            match self.cc.request(self.members[l].listen, req) {
                Ok(ControlReply::NoLeader | ControlReply::NotYet { .. }) => {}
                Ok(ControlReply::Keeper { .. }) => {}
                Ok(r) => return Ok(r),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("{req:?}: no leader took it within 20 s ({last})"))
    }

    /// Sends `req` to member `m` itself.
    pub fn request_to(&mut self, m: usize, req: &ControlRequest) -> Result<ControlReply, String> {
        self.cc
            .request(self.members[m].listen, req)
            .map_err(|e| e.to_string())
    }

    /// Whether no migration runs (the last one finished).
    pub fn migration_finished(&mut self) -> bool {
        self.status_any()
            .is_some_and(|s| s.migration.is_none_or(|m| m.finished))
    }

    /// Whether every member is up, a leader leads, no migration runs and
    /// every slot has its copies, ready, as *every* member sees it: each
    /// holds its lease (a restarted member does so only once the group
    /// has applied its restart), and all serve by the same map, the same
    /// leader's. One member's view is not enough: a member that has not
    /// applied the latest entries (a restart that voided copies, say)
    /// still counts every copy ready, and a fault played on its word can
    /// take the last copy of a slot.
    pub fn healthy(&mut self) -> bool {
        let n = self.members.len();
        if self.live().count() != n {
            return false;
        }
        let mut seen: Option<(Option<MemberId>, u32)> = None;
        for m in 0..n {
            let Some(s) = self.status(m) else {
                return false;
            };
            let Some(g) = s.group.as_ref() else {
                return false;
            };
            let ok = g.lease
                && g.leader.is_some()
                && g.applied == g.commit
                && g.under_replicated_slots == 0
                && g.members
                    .iter()
                    .all(|m| m.state == "up" || m.state == "left")
                && s.migration.as_ref().is_none_or(|m| m.finished);
            if !ok || seen.is_some_and(|v| v != (g.leader, s.map_version)) {
                return false;
            }
            seen = Some((g.leader, s.map_version));
        }
        true
    }

    /// Waits until [`healthy`](Self::healthy), at most `most`.
    pub fn wait_healthy(&mut self, most: Duration) -> Result<(), String> {
        self.wait("a healthy cluster", most, |c| c.healthy())
    }

    /// Polls `done` every 20 ms for at most `most`.
    pub fn wait(
        &mut self,
        what: &str,
        most: Duration,
        mut done: impl FnMut(&mut Cluster) -> bool,
    ) -> Result<(), String> {
        let t = Instant::now();
        while !done(self) {
            if t.elapsed() > most {
                let v = self.view();
                return Err(format!("{what}: not within {most:?}; the group: {v:#?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// `kill -9` of member `m`.
    pub fn kill(&mut self, m: usize) {
        if let Some(mut p) = self.members[m].proc.take() {
            p.kill9();
            let out = p.output();
            self.members[m].past_output.push_str(&out);
        }
        self.members[m].paused = false;
    }

    /// `kill -9` of every member at once: SIGKILL goes to every process
    /// before any is waited for, so the members die within the signals'
    /// loop (microseconds) of each other, as at a power cut.
    pub fn kill_all(&mut self) {
        for m in &self.members {
            if let Some(p) = &m.proc {
                signal(p, libc::SIGKILL);
            }
        }
        for m in 0..self.members.len() {
            self.kill(m);
        }
    }

    /// SIGTERM to member `m` (it hands its slots over and exits); whether
    /// it exited within `within` (else it is killed).
    pub fn term(&mut self, m: usize, within: Duration) -> bool {
        let Some(mut p) = self.members[m].proc.take() else {
            return true;
        };
        let stopped = p.term(within);
        let out = p.output();
        self.members[m].past_output.push_str(&out);
        stopped
    }

    /// Member `m` again, from its data dir.
    pub fn restart(&mut self, m: usize) -> Result<(), String> {
        if self.members[m].proc.is_none() {
            self.launch(m, None)?;
        }
        Ok(())
    }

    /// Member `m` killed, its data dir lost: the group marks it failed and
    /// fails its slots over, the operator forgets it (`kvs-admin forget`),
    /// and it joins again, empty, as a new member at the same address.
    pub fn wipe(&mut self, m: usize) -> Result<MemberId, String> {
        self.kill(m);
        let old = self.members[m].id;
        self.wait(
            &format!("member {old} marked failed"),
            Duration::from_secs(20),
            |c| {
                c.view()
                    .is_some_and(|g| g.members.iter().any(|x| x.id == old && x.state == "failed"))
            },
        )?;
        // Forgetting waits until its slots have failed over.
        let forget = ControlRequest::Forget {
            member: old,
            force: false,
        };
        let t = Instant::now();
        loop {
            match self.request(&forget)? {
                ControlReply::Ok => break,
                r if t.elapsed() > Duration::from_secs(30) => {
                    return Err(format!("forget {old}: {r:?}"));
                }
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        let _ = std::fs::remove_dir_all(&self.members[m].dir);
        let via = self
            .live()
            .find(|&x| x != m)
            .ok_or("no live member to join")?;
        self.launch(m, Some(via))?;
        let addr = self.members[m].addr;
        self.wait(
            &format!("member at {addr} rejoined"),
            Duration::from_secs(30),
            |c| {
                c.view().is_some_and(|g| {
                    g.members
                        .iter()
                        .any(|x| x.addr == addr && x.id != old && x.state == "up")
                })
            },
        )?;
        let id = self.view().and_then(|g| {
            g.members
                .iter()
                .find(|x| x.addr == addr && x.id != old && x.state == "up")
                .map(|x| x.id)
        });
        self.members[m].id = id.ok_or("the rejoined member vanished")?;
        Ok(self.members[m].id)
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) to member `m`.
    pub fn pause(&mut self, m: usize, stop: bool) {
        if let Some(p) = &self.members[m].proc {
            signal(p, if stop { libc::SIGSTOP } else { libc::SIGCONT });
            self.members[m].paused = stop;
        }
    }

    /// Member `m`'s port down (`true`) or up.
    pub fn port(&mut self, m: usize, down: bool) {
        let _ = self.fab.set_port_down(self.members[m].dev, down);
        self.members[m].cuts.port = down;
    }

    /// Member `m`'s paths to every other member cut (`outbound`) or every
    /// other member's paths to it, one way (`down`), or restored.
    pub fn one_way(&mut self, m: usize, outbound: bool, down: bool) {
        let me = self.members[m].dev;
        for o in (0..self.members.len()).filter(|&o| o != m) {
            let other = self.members[o].dev;
            let (from, to) = if outbound { (me, other) } else { (other, me) };
            let _ = self.fab.set_path_down(from, to, down);
        }
        let c = &mut self.members[m].cuts;
        if outbound {
            c.outbound = down;
        } else {
            c.inbound = down;
        }
    }

    /// Member `m`'s TCP (its setup and bulk proxies) cut (`true`) or healed.
    pub fn tcp(&mut self, m: usize, cut: bool) {
        for p in &self.members[m].proxies {
            p.cut(cut);
        }
        self.members[m].cuts.tcp = cut;
    }

    /// Every fault undone: ports up, paths and TCP restored, paused
    /// members resumed, dead members restarted.
    pub fn heal(&mut self) -> Result<(), String> {
        let mut failures = Vec::new();
        for m in 0..self.members.len() {
            self.port(m, false);
            self.one_way(m, true, false);
            self.one_way(m, false, false);
            self.tcp(m, false);
            self.pause(m, false);
            if let Err(e) = self.restart(m) {
                failures.push(e);
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }

    /// The last `lines` lines every member printed, for a report.
    pub fn tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for (i, m) in self.members.iter().enumerate() {
            let mut all = m.past_output.clone();
            if let Some(p) = &m.proc {
                all.push_str(&p.printed());
            }
            let v: Vec<&str> = all.lines().collect();
            let from = v.len().saturating_sub(lines);
            out.push_str(&format!("--- member {i} ---\n{}\n", v[from..].join("\n")));
        }
        out
    }
}

/// A member's private address (a free port on [`PRIVATE_IP`]), and its
/// setup and bulk proxies on 127.0.0.1: the bulk proxy's port is the
/// member's bulk port, on its private IP.
fn addresses() -> std::io::Result<(SocketAddr, [Proxy; 2])> {
    let listen = std::net::TcpListener::bind(SocketAddr::new(PRIVATE_IP, 0))?.local_addr()?;
    let public: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    let setup = Proxy::start(public, |_| listen)?;
    // The bulk port the member binds on its private IP must be free there,
    // and the proxy's port is only known free on 127.0.0.1: a port the
    // members started so far listen on at the private IP (seen: "bulk_port
    // 127.0.0.2:43139: Address already in use"), or this member's own
    // setup port, is passed over.
    for _ in 0..100 {
        let bulk = Proxy::start(public, |at| SocketAddr::new(PRIVATE_IP, at.port()))?;
        let port = bulk.addr().port();
        if port != listen.port() && std::net::TcpListener::bind((PRIVATE_IP, port)).is_ok() {
            return Ok((listen, [setup, bulk]));
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        "no port free both on 127.0.0.1 and on the members' IP in 100 tries",
    ))
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for m in 0..self.members.len() {
            self.pause(m, false);
            drop(self.members[m].proc.take());
        }
        Fabric::remove_if_unused(&self.fabric);
    }
}
