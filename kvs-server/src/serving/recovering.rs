//! A member that restarts from its data dir (`durability`) answers for
//! itself while its workers load their snapshots and replay their logs,
//! before it serves: this thread takes the setup socket meanwhile.
//!
//! On the control endpoint it answers status ([`ControlRequest::Status`]:
//! the member is recovering, and each worker's bytes read of its total)
//! and the map it will serve by ([`ControlRequest::Map`]); every other
//! control request gets [`ControlReply::Recovering`], and the control
//! group's messages and priority pulls `TryAgain` (the member takes no
//! part in the group until it serves, as before). A data connection is
//! refused at its setup, saying why. Nothing waits on the recovery: an
//! answer comes within a few milliseconds.
//!
//! Once every worker is ready it closes its connections (their clients
//! connect again, to the control thread) and hands the socket back, with
//! the setups still under way, for the acceptor ([`super::setup`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use copyrpc::conn::{Acceptor, Connection, PendingConnection};
use copyrpc::transport::{run_on_device_as, OnTransport, Transport};
use copyrpc::ContextBuilder;
use kvs_proto::control::{
    ControlReply, ControlRequest, MemberStatus, RecoveryProgress, WorkerStatus,
};
use kvs_proto::proto::{write_response, Op, Request, Status};
use kvs_proto::{ClusterId, MemberId, Owner, SetupAnswer, ShardMap};
use mlx5::device::Context as Device;

use super::setup::{admit, RefusalLog, Target, Tokens};
use crate::config::{Config, Durability};
use crate::start_error::StartError;
use crate::worker_stats::WorkerStats;

/// How long a turn waits for new connections before it looks at the
/// requests: about the longest an answer waits.
const TURN: Duration = Duration::from_millis(5);

/// What answers for a recovering member, as started.
pub(crate) struct Recovering {
    /// The setup socket, handed back at the end.
    pub acceptor: Acceptor,
    pub tokens: Tokens,
    pub cfg: Config,
    pub member: MemberId,
    pub cluster: ClusterId,
    /// The map the member starts with.
    pub map: ShardMap,
    /// The workers' counters: their recoveries' progress.
    pub stats: Vec<Arc<WorkerStats>>,
    /// Set when the workers are ready (or the start failed): the thread
    /// hands the socket back.
    pub done: Arc<AtomicBool>,
}

/// The setup socket while the workers start.
pub(crate) enum WhileRecovering {
    /// A thread answers for the member.
    Answering {
        thread: JoinHandle<Acceptor>,
        done: Arc<AtomicBool>,
    },
    /// Nothing to recover (no `durability`): the socket waits.
    Idle(Acceptor),
}

impl WhileRecovering {
    /// Answers for the member while its workers start if they have records
    /// to recover (`durability` with a `data_dir`); else leaves the socket
    /// as it is.
    pub(crate) fn start(r: Recovering) -> WhileRecovering {
        if r.cfg.data_dir.is_none() || r.cfg.durability == Durability::None {
            return WhileRecovering::Idle(r.acceptor);
        }
        let done = r.done.clone();
        let thread = std::thread::Builder::new()
            .name("kvs-recovering".into())
            .spawn(move || r.run_on_device())
            .expect("spawn the thread that answers while the workers recover");
        WhileRecovering::Answering { thread, done }
    }

    /// The workers are ready (or failed): the setup socket, back.
    pub(crate) fn finish(self) -> Result<Acceptor, StartError> {
        match self {
            WhileRecovering::Idle(a) => Ok(a),
            WhileRecovering::Answering { thread, done } => {
                done.store(true, Ordering::Release);
                thread.join().map_err(|_| {
                    StartError::Control(
                        "the thread that answered while the workers recovered panicked".into(),
                    )
                })
            }
        }
    }
}

impl Recovering {
    /// Opens the device and answers on its transport; without one, every
    /// connection is refused saying the member recovers.
    fn run_on_device(self) -> Acceptor {
        let wire = self.cfg.transport;
        let (r, e) = match self.cfg.device_spec().open() {
            Ok(dev) => match run_on_device_as(dev, wire, self) {
                Ok(a) => return a,
                Err(refused) => refused,
            },
            Err(e) => (self, e),
        };
        tracing::warn!("while the workers recover, status cannot be answered: {e}");
        r.refuse_all()
    }

    /// The workers' recoveries, each as far as it got.
    fn progress(&self) -> Vec<RecoveryProgress> {
        self.stats.iter().map(|s| s.recovery.progress()).collect()
    }

    /// What a refused connection is told.
    fn why(&self) -> String {
        let p = RecoveryProgress::sum(self.progress());
        format!(
            "member {} is recovering its records from its data dir ({} of {} bytes read, \
             {}%): it serves once they are loaded",
            self.member,
            p.read,
            p.total,
            p.percent()
        )
    }

    /// The member's status: recovering, each worker's progress and the
    /// slots the map gives it.
    fn status(&self) -> MemberStatus {
        let mut workers: Vec<WorkerStatus> = self
            .progress()
            .into_iter()
            .map(|p| WorkerStatus {
                recovering: Some(p),
                ..WorkerStatus::default()
            })
            .collect();
        for s in 0..self.map.slots() {
            let Owner { member, worker } = self.map.owner_of_slot(s);
            if member == self.member {
                if let Some(w) = workers.get_mut(usize::from(worker)) {
                    w.slots += 1;
                }
            }
        }
        MemberStatus {
            member: self.member,
            map_version: self.map.version(),
            workers,
            imports: Vec::new(),
            migration: None,
            held: (0, 0),
            group: None,
            drained: false,
            copies: Vec::new(),
            bulk_served: (0, 0),
            recovering: true,
        }
    }

    /// Connections whose setup record came: control connections are
    /// returned, the rest refused (a data connection, saying the member
    /// recovers; a bad hello or token, saying so).
    fn sort(
        &self,
        ready: &mut Vec<PendingConnection>,
        log: &mut RefusalLog,
    ) -> Vec<PendingConnection> {
        let mut control = Vec::new();
        for p in ready.drain(..) {
            match admit(p.private_data(), &self.tokens, self.stats.len()) {
                Ok(Target::Control) => control.push(p),
                Ok(Target::Worker(..)) => p.refuse(&self.why()),
                Err(why) => {
                    log.refused(p.peer_addr(), why);
                    p.refuse(&why.to_string());
                }
            }
        }
        control
    }

    /// Takes the setup records that come within a turn.
    fn take(&mut self, ready: &mut Vec<PendingConnection>, failed: &mut bool) {
        if let Err(e) = self.acceptor.poll(TURN, ready) {
            if !*failed {
                tracing::error!("waiting for connections: {e}");
            }
            *failed = true;
            std::thread::sleep(TURN);
        }
    }

    /// Without a context: every connection refused, until done.
    fn refuse_all(mut self) -> Acceptor {
        let (mut ready, mut log, mut failed) = (Vec::new(), RefusalLog::default(), false);
        while !self.done.load(Ordering::Acquire) {
            self.take(&mut ready, &mut failed);
            for p in self.sort(&mut ready, &mut log) {
                p.refuse(&self.why());
            }
            log.tick();
        }
        self.acceptor
    }

    /// Answers one request (its bytes `req`) into `out`.
    fn answer(&self, req: &[u8], max_response: usize, out: &mut Vec<u8>) {
        let r = match Request::new_checked(req) {
            Ok(r) => r,
            Err(e) => {
                return write_response(
                    out,
                    Status::BadRequest,
                    e.to_string().as_bytes(),
                    max_response,
                )
            }
        };
        let answer = match r.op() {
            Op::Control => match ControlRequest::decode(r.value()) {
                Ok(ControlRequest::Status) => ControlReply::Status(self.status()),
                Ok(ControlRequest::Map) => {
                    let mut map = Vec::new();
                    self.map.encode(&mut map);
                    ControlReply::Map { map }
                }
                Ok(_) => ControlReply::Recovering {
                    progress: RecoveryProgress::sum(self.progress()),
                },
                Err(e) => ControlReply::error(e.to_string()),
            },
            // The group's messages and priority pulls: not taken until the
            // member serves; their senders try again.
            Op::Raft | Op::Pull => {
                return write_response(out, Status::TryAgain, self.why().as_bytes(), max_response)
            }
            op => ControlReply::error(format!(
                "{op:?} is a worker's request, not a control request"
            )),
        };
        write_response(out, Status::Ok, &answer.encode(), max_response);
    }
}

impl OnTransport for Recovering {
    type Output = Acceptor;

    /// Each turn takes the setup records that came (control connections
    /// established, the rest refused) and answers the requests, until the
    /// workers are ready; then closes the connections and hands the
    /// socket back.
    fn run<T: Transport>(mut self, dev: Device) -> Acceptor {
        let built = ContextBuilder::new()
            .idle(self.cfg.idle_policy())
            .ring_size(1 << 20)
            .max_endpoints(64)
            .build_on::<T, _, _>(&dev, |_: u64, _| {});
        let mut ctx = match built {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("while the workers recover, status cannot be answered: {e}");
                return self.refuse_all();
            }
        };
        let answer = SetupAnswer {
            workers: self.cfg.workers,
            slots: self.map.slots(),
            member: self.member,
            cluster: self.cluster,
        }
        .encode();
        let mut conns: Vec<Connection> = Vec::new();
        let (mut ready, mut log, mut failed) = (Vec::new(), RefusalLog::default(), false);
        let mut out = Vec::new();
        let mut last_check = Instant::now();
        while !self.done.load(Ordering::Acquire) {
            self.take(&mut ready, &mut failed);
            for p in self.sort(&mut ready, &mut log) {
                match p.establish(&mut ctx, &answer) {
                    Ok(c) => conns.push(c),
                    Err(e) => tracing::warn!("a control connection failed: {e}"),
                }
            }
            log.tick();
            ctx.poll();
            while let Some(req) = ctx.recv() {
                let max = req.max_response();
                self.answer(ctx.request(&req).unwrap_or_default(), max, &mut out);
                let _ = ctx.reply(req, &out);
            }
            ctx.poll();
            if last_check.elapsed() >= Duration::from_millis(100) {
                last_check = Instant::now();
                conns.retain_mut(|c| {
                    let alive = c.check(&mut ctx);
                    if !alive {
                        ctx.remove(c.endpoint());
                    }
                    alive
                });
            }
        }
        for c in &mut conns {
            ctx.close(c.endpoint());
            c.check(&mut ctx);
        }
        ctx.poll();
        self.acceptor
    }
}
