//! The cluster under test: real kvs-server processes, one software device
//! each (so that one member's port can go down alone), a data dir each,
//! and the operator's control requests (what kvs-admin sends).
// Shared with the tests that borrow the nemesis's parts.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kvs_client::{ControlClient, ControlOptions};
use kvs_proto::control::{ControlReply, ControlRequest, GroupView, MemberStatus};
use mlx5::sim::fabric::Fabric;

use crate::support::ServerProcess;

/// The devices members run on (`sim0` is the clients', `sim2` and `sim3`
/// carry bulk transfers).
const DEVICES: [u32; 5] = [1, 4, 5, 6, 7];

/// One member.
pub struct Member {
    /// Its id in the cluster (a new one after its data dir was wiped).
    pub id: u16,
    /// Its software device.
    pub dev: u32,
    /// Its data dir.
    pub dir: PathBuf,
    /// Its setup address (kept across restarts).
    pub addr: SocketAddr,
    /// The process, while one runs.
    pub proc: Option<ServerProcess>,
    /// Whether it is stopped with SIGSTOP.
    pub paused: bool,
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
    /// Starts `n` members keeping `replicas` copies of each slot: member 0
    /// founds the cluster, the others join it one at a time, the slots are
    /// spread over all of them, and every copy is made ready.
    pub fn start(tag: &str, n: usize, replicas: u8) -> Result<Cluster, String> {
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
            cc,
            fab,
        };
        if n > DEVICES.len() {
            return Err(format!("at most {} members", DEVICES.len()));
        }
        for (m, &dev) in DEVICES.iter().enumerate().take(n) {
            let dir = c.root.join(format!("m{m}"));
            c.members.push(Member {
                id: m as u16,
                dev,
                dir,
                addr: "127.0.0.1:0".parse().unwrap(),
                proc: None,
                paused: false,
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

    /// Starts member `m`'s process (the first time on a free port, then at
    /// its address, from its data dir), joining member `join` if its data
    /// dir is empty.
    fn launch(&mut self, m: usize, join: Option<usize>) -> Result<(), String> {
        let join = join.map(|j| self.members[j].addr.to_string());
        let me = &self.members[m];
        let dev = format!("sim{}", me.dev);
        let addr = me.addr.to_string();
        let replicas = self.replicas.to_string();
        let dir = me.dir.to_str().expect("a UTF-8 path").to_string();
        let mut args = vec![
            "--listen",
            &addr,
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
        me.addr = p.addr;
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
        let addrs: Vec<SocketAddr> = self.live().map(|m| self.members[m].addr).collect();
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
            .request(self.members[m].addr, &ControlRequest::Status)
        {
            Ok(ControlReply::Status(s)) => Some(s),
            _ => None,
        }
    }

    /// The members running and not paused.
    pub fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.members.len())
            .filter(|&m| self.members[m].proc.is_some() && !self.members[m].paused)
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
            match self.cc.request(self.members[l].addr, req) {
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
            .request(self.members[m].addr, req)
            .map_err(|e| e.to_string())
    }

    /// Whether no migration runs (the last one finished).
    pub fn migration_finished(&mut self) -> bool {
        self.status_any()
            .is_some_and(|s| s.migration.is_none_or(|m| m.finished))
    }

    /// Whether every member is up, a leader leads, no migration runs and
    /// every slot has its copies, ready.
    pub fn healthy(&mut self) -> bool {
        let n = self.members.len();
        self.live().count() == n
            && self.view().is_some_and(|g| {
                g.leader.is_some()
                    && g.under_replicated_slots == 0
                    && g.members
                        .iter()
                        .all(|m| m.state == "up" || m.state == "left")
            })
            && self.migration_finished()
            && (0..n).all(|m| {
                self.status(m)
                    .is_some_and(|s| s.group.is_some_and(|g| g.lease))
            })
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
    pub fn wipe(&mut self, m: usize) -> Result<u16, String> {
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
    }

    /// Every fault undone: ports up, paused members resumed, dead members
    /// restarted.
    pub fn heal(&mut self) -> Result<(), String> {
        let mut failures = Vec::new();
        for m in 0..self.members.len() {
            self.port(m, false);
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

impl Drop for Cluster {
    fn drop(&mut self) {
        for m in 0..self.members.len() {
            self.pause(m, false);
            drop(self.members[m].proc.take());
        }
        Fabric::remove_if_unused(&self.fabric);
    }
}
