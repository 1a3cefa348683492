//! Members of one control group stepped in one thread: a simulated clock,
//! messages carried at once between members that are alive and not cut
//! off, members killed (their group dropped, as `kill -9` leaves the data
//! dir) and restarted from their data dirs. Messages can also be held in
//! flight (for a paused member, a deaf one, or by a filter) and delivered
//! late, in the order they were sent.

#![allow(dead_code)]

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kvs_control::{Applied, ClusterState, Command, Event, Founding, Group, GroupConfig, Identity};
use kvs_proto::{MemberId, ShardMap};
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};
use test_support::TempDir;

pub fn addr(member: MemberId) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], 7000 + member.0))
}

pub const SLOTS: u32 = 256;

/// Whether the transport loses a message (sender, receiver, bytes).
pub type Lose = dyn FnMut(MemberId, MemberId, &[u8]) -> bool;

/// The group's members, their data dirs and the simulated clock.
pub struct Net {
    _root: TempDir,
    pub dirs: Vec<PathBuf>,
    pub groups: Vec<Option<Group>>,
    pub cfg: GroupConfig,
    pub now: Instant,
    /// Members cut off: nothing reaches them or leaves them.
    pub cut: HashSet<MemberId>,
    /// Every event, with the member and the time it happened at.
    pub events: Vec<(MemberId, Instant, Event)>,
    /// The largest message the transport carries: a larger one is not
    /// delivered, and its sender hears that the peer is unreachable (as a
    /// control connection refuses a request that can never fit its ring).
    pub max_message: Option<usize>,
    /// Messages the transport loses without a word, as a peer's full
    /// queue drops them: those for which this says yes (sender, receiver,
    /// bytes).
    pub lose: Option<Box<Lose>>,
    /// Whether the sender of a message [`Net::lose`] loses hears that its
    /// peer is unreachable (as when a link fails), rather than nothing.
    pub report_lost: bool,
    /// Members paused (SIGSTOP): not ticked or polled, and what is sent to
    /// them is held, not lost.
    pub paused: HashSet<MemberId>,
    /// Members that send but do not receive: what is sent to them is held.
    pub deaf: HashSet<MemberId>,
    /// Holds a message in flight when it says so.
    pub hold: Option<Box<Hold>>,
    /// Messages held in flight, in the order they were sent.
    pub held: Vec<Held>,
}

/// Whether to hold a message (from, to, the message) in flight.
pub type Hold = dyn Fn(MemberId, MemberId, &Message) -> bool;

/// A message held in flight.
pub struct Held {
    pub from: MemberId,
    pub to: MemberId,
    /// When it was sent.
    pub sent: Instant,
    pub bytes: Vec<u8>,
}

impl Held {
    pub fn message(&self) -> Message {
        Message::parse_from_bytes(&self.bytes).unwrap()
    }

    /// Whether it carries log entries or a snapshot (not a bare heartbeat
    /// or a commit index).
    pub fn carries_entries(&self) -> bool {
        let m = self.message();
        match m.get_msg_type() {
            MessageType::MsgAppend => !m.entries.is_empty(),
            MessageType::MsgSnapshot => true,
            _ => false,
        }
    }
}

impl Net {
    /// A cluster of `n` members (the first bootstraps, the others join in
    /// turn), `control_voters` of them voters.
    pub fn new(n: u16, control_voters: u16, cfg: GroupConfig) -> Net {
        Net::with_slots(n, control_voters, cfg, SLOTS)
    }

    /// [`Net::new`] with a map of `slots` slots.
    pub fn with_slots(n: u16, control_voters: u16, cfg: GroupConfig, slots: u32) -> Net {
        let root = TempDir::new("kvs-control-it", "net");
        let now = Instant::now();
        let dir0 = root.path().join("m0");
        let map = ShardMap::single(addr(MemberId(0)), slots, 2).unwrap();
        let founding = Founding {
            control_voters,
            replicas: 1,
            zone: None,
            member_timeout_ms: None,
        };
        let g0 = Group::bootstrap(&dir0, map, founding, cfg, now).unwrap();
        let mut net = Net {
            dirs: vec![dir0],
            groups: vec![Some(g0)],
            _root: root,
            cfg,
            now,
            cut: HashSet::new(),
            events: Vec::new(),
            max_message: None,
            lose: None,
            report_lost: false,
            paused: HashSet::new(),
            deaf: HashSet::new(),
            hold: None,
            held: Vec::new(),
        };
        net.run_until(Duration::from_secs(5), |n| n.leader() == Some(MemberId(0)))
            .expect("the first member leads");
        for _ in 1..n {
            net.join();
        }
        // The leader makes voters of learners one at a time.
        net.run_until(Duration::from_secs(5), |n| {
            let l = n.leader().unwrap_or(MemberId(0));
            n.all_agree() && n.state(l).is_some_and(|s| s.voter_change(l).is_none())
        })
        .expect("the voters settle");
        net
    }

    /// A new member joins through the leader: the leader proposes it, the
    /// member stores the id it is given and starts with an empty log.
    pub fn join(&mut self) -> MemberId {
        self.join_late_with(Duration::ZERO, self.cfg)
    }

    /// [`Net::join`] for a member started with timing `cfg` of its own.
    pub fn join_with(&mut self, cfg: GroupConfig) -> MemberId {
        self.join_late_with(Duration::ZERO, cfg)
    }

    /// Joins a new member whose process starts `late` after the leader
    /// applied its join (a loaded machine, a slow start): nothing reaches
    /// it until then.
    pub fn join_late(&mut self, late: Duration) -> MemberId {
        self.join_late_with(late, self.cfg)
    }

    fn join_late_with(&mut self, late: Duration, cfg: GroupConfig) -> MemberId {
        let l = self.leader().expect("a leader to join through");
        let next = MemberId(self.groups.len() as u16);
        let id = self
            .group(l)
            .propose_join(addr(next), 2, 9000 + next.0, None)
            .unwrap();
        assert_eq!(id, next);
        let cluster_id = self.group(l).cluster_id();
        let dir = self._root.path().join(format!("m{id}"));
        Identity {
            cluster_id,
            member: id,
        }
        .store(&dir)
        .unwrap();
        self.dirs.push(dir.clone());
        self.groups.push(None);
        self.run_for(late);
        let (g, _) = Group::open(&dir, cfg, self.now).unwrap();
        self.groups[id.index()] = Some(g);
        self.run_until(Duration::from_secs(5), |n| {
            n.all_agree() && n.state(id).is_some()
        })
        .expect("the new member gets the state");
        id
    }

    pub fn group(&mut self, m: MemberId) -> &mut Group {
        self.groups[m.index()].as_mut().expect("a live member")
    }

    pub fn state(&self, m: MemberId) -> Option<&ClusterState> {
        self.groups[m.index()].as_ref()?.state()
    }

    pub fn alive(&self) -> impl Iterator<Item = MemberId> + '_ {
        (0..self.groups.len() as u16)
            .map(MemberId)
            .filter(|&m| self.groups[m.index()].is_some())
    }

    /// The live member that leads in the highest term, if any.
    pub fn leader(&self) -> Option<MemberId> {
        self.alive()
            .filter(|&m| {
                let g = self.groups[m.index()].as_ref().unwrap();
                g.is_leader()
            })
            .max_by_key(|&m| self.groups[m.index()].as_ref().unwrap().status().term)
    }

    /// Whether every live member that is not cut off applied the same state.
    pub fn all_agree(&self) -> bool {
        let states: Vec<Option<&ClusterState>> = self
            .alive()
            .filter(|m| !self.cut.contains(m))
            .map(|m| self.state(m))
            .collect();
        states.iter().all(|s| s.is_some() && *s == states[0])
    }

    pub fn kill(&mut self, m: MemberId) {
        self.groups[m.index()] = None;
    }

    pub fn restart(&mut self, m: MemberId) {
        self.restart_with(m, self.cfg);
    }

    /// [`Net::restart`] with timing `cfg` of its own.
    pub fn restart_with(&mut self, m: MemberId, cfg: GroupConfig) {
        let (g, _) = Group::open(&self.dirs[m.index()], cfg, self.now).unwrap();
        self.groups[m.index()] = Some(g);
    }

    /// One tick of time: every live member that is not paused ticks and
    /// polls, and messages are carried until none is left.
    pub fn step(&mut self) {
        self.now += self.cfg.tick;
        let now = self.now;
        for m in self
            .alive()
            .filter(|m| !self.paused.contains(m))
            .collect::<Vec<_>>()
        {
            let g = self.group(m);
            g.tick(now);
            g.poll(now).unwrap();
        }
        for _ in 0..50 {
            let mut moved = false;
            for m in self
                .alive()
                .filter(|m| !self.paused.contains(m))
                .collect::<Vec<_>>()
            {
                let out = self.group(m).take_outgoing();
                for o in out {
                    if self.max_message.is_some_and(|most| o.bytes.len() > most) {
                        self.group(m).unreachable(o.to);
                        continue;
                    }
                    if self
                        .lose
                        .as_mut()
                        .is_some_and(|lose| lose(m, o.to, &o.bytes))
                    {
                        if self.report_lost {
                            self.group(m).unreachable(o.to);
                        }
                        continue;
                    }
                    let delivered = !self.cut.contains(&m)
                        && !self.cut.contains(&o.to)
                        && self.groups.get(o.to.index()).is_some_and(|g| g.is_some());
                    if !delivered {
                        continue;
                    }
                    if self.holds(m, o.to, &o.bytes) {
                        self.held.push(Held {
                            from: m,
                            to: o.to,
                            sent: now,
                            bytes: o.bytes,
                        });
                        continue;
                    }
                    moved = true;
                    let g = self.group(o.to);
                    g.step(m, &o.bytes, now).unwrap();
                    g.poll(now).unwrap();
                }
            }
            if !moved {
                break;
            }
        }
        self.take_events();
    }

    fn holds(&self, from: MemberId, to: MemberId, bytes: &[u8]) -> bool {
        self.paused.contains(&to)
            || self.deaf.contains(&to)
            || self
                .hold
                .as_ref()
                .is_some_and(|h| h(from, to, &Message::parse_from_bytes(bytes).unwrap()))
    }

    fn take_events(&mut self) {
        let now = self.now;
        for m in self.alive().collect::<Vec<_>>() {
            for e in self.group(m).take_events() {
                self.events.push((m, now, e));
            }
        }
    }

    /// Delivers now, in the order they were sent, the first `n` messages
    /// held for `to`; what they make it send waits for the next step.
    pub fn release(&mut self, to: MemberId, n: usize) {
        let now = self.now;
        let mut left = n;
        let held = std::mem::take(&mut self.held);
        for h in held {
            if h.to == to && left > 0 {
                left -= 1;
                let g = self.group(to);
                g.step(h.from, &h.bytes, now).unwrap();
                g.poll(now).unwrap();
            } else {
                self.held.push(h);
            }
        }
        self.take_events();
    }

    /// The messages held for `to`.
    pub fn held_for(&self, to: MemberId) -> impl Iterator<Item = &Held> + '_ {
        self.held.iter().filter(move |h| h.to == to)
    }

    /// Whether member `m` may serve now.
    pub fn leased(&self, m: MemberId) -> bool {
        self.groups[m.index()]
            .as_ref()
            .is_some_and(|g| g.lease_valid(self.now))
    }

    /// Steps until `done` holds; the simulated time it took, or `None`
    /// after `most`.
    pub fn run_until(&mut self, most: Duration, done: impl Fn(&Net) -> bool) -> Option<Duration> {
        let start = self.now;
        while self.now.duration_since(start) <= most {
            if done(self) {
                return Some(self.now.duration_since(start));
            }
            self.step();
        }
        None
    }

    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.step();
        }
    }

    /// The leader's proposal of a map in which `slots` belong to `to`.
    pub fn move_slots(&mut self, slots: std::ops::Range<u32>, to: MemberId) -> u32 {
        let l = self.leader().expect("a leader");
        let mut m = self.state(l).unwrap().map().clone();
        m.assign(slots, to, None).unwrap();
        m.set_version(m.version() + 1);
        let mut b = Vec::new();
        m.encode(&mut b);
        self.group(l).propose(&Command::Map { map: b }).unwrap();
        m.version()
    }

    /// When member `m` applied something matching `what`, first.
    pub fn applied_at(&self, m: MemberId, what: &Applied) -> Option<Instant> {
        self.events
            .iter()
            .find(|(who, _, e)| *who == m && matches!(e, Event::Applied(_, a) if a == what))
            .map(|(_, t, _)| *t)
    }
}
