//! One driver thread: it opens its store ([`crate::db`]), keeps up to the
//! depth of operations in flight, drawing them from the workload, and times
//! each from submission to answer. The same loop serves every store.
//!
//! Each turn of the loop: end the phase early if its time is up or it was
//! interrupted; stop issuing if a connection was lost (here or in another
//! thread) and drain what is in flight; send the second halves of
//! read-modify-writes whose reads are back; issue new operations while there
//! is room and the target rate allows; wait for answers; hand progress over.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use copyrpc::clock::Clock;

use crate::db::{Answer, Db, Fields, Init, Lost, Refused, Target, UseDb};
use crate::measure::{Measurements, OpKind, Status};
use crate::phase::{Phase, Progress, RunError, RunOptions, DRAIN_LIMIT};
use crate::rng::Rng;
use crate::values::{fill_field, fill_record, record_ok};
use crate::workload::{CoreWorkload, Op, WorkloadThread};

/// The longest a driver thread sleeps waiting for answers: how late it sees
/// a stop request.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// What one driver thread does: its share of a phase.
#[derive(Clone, Copy)]
pub(crate) struct Job<'a> {
    pub wl: &'a CoreWorkload,
    pub phase: Phase,
    pub opts: &'a RunOptions,
    /// This thread's index, of `threads`.
    pub thread: usize,
    pub threads: usize,
    /// Operations (or records) to do.
    pub count: u64,
    pub progress: &'a Progress,
    /// Set when some thread lost its connection: stop issuing.
    pub stop: &'a AtomicBool,
    /// Times operations.
    pub clock: Clock,
}

/// What one driver thread did.
pub(crate) struct ThreadResult {
    /// Its measurements.
    pub m: Measurements,
    /// Operations it completed.
    pub ops: u64,
    /// The lost connection that stopped it, if one did.
    pub lost: Option<Lost>,
    /// The shard-map version its client ended with (kvs-server).
    pub map_version: Option<u32>,
}

/// One driver thread against `target`: its measurements, completed
/// operations and lost connection.
pub(crate) fn drive(job: Job<'_>, target: &Target) -> Result<ThreadResult, RunError> {
    let init = Init {
        wl: job.wl,
        opts: job.opts,
    };
    target
        .open(&init, Loop(job))
        .map_err(|why| RunError::Connect {
            thread: job.thread,
            why,
        })
}

/// The loop, run once the store is connected.
struct Loop<'a>(Job<'a>);

impl UseDb for Loop<'_> {
    type Output = ThreadResult;
    fn run<D: Db>(self, db: D) -> ThreadResult {
        Driver {
            db,
            b: Book::new(self.0),
        }
        .run()
    }
}

/// What a slot's operation is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Free,
    Read,
    Update,
    Insert(u64),
    Scan,
    /// Read-modify-write: the read, then the write.
    RmwRead,
    RmwWrite,
}

fn kind_of(w: Wait) -> OpKind {
    match w {
        Wait::Read => OpKind::Read,
        Wait::Update | Wait::RmwWrite => OpKind::Update,
        Wait::Insert(_) => OpKind::Insert,
        Wait::Scan => OpKind::Scan,
        Wait::RmwRead => OpKind::ReadModifyWrite,
        Wait::Free => OpKind::Read,
    }
}

/// An operation in flight (its tag is its index).
#[derive(Debug)]
struct Slot {
    wait: Wait,
    /// When the operation was issued ([`Clock::ticks`]).
    start: u64,
    /// When its current stage was (a read-modify-write's write).
    stage: u64,
    key: String,
    /// The field an update writes, or [`crate::workload::ALL_FIELDS`].
    field: usize,
    scan_len: usize,
}

/// A driver thread's store and its book of operations.
struct Driver<'a, D> {
    db: D,
    b: Book<'a>,
}

/// Everything of a driver thread but its store: the slots, the counts, the
/// measurements, and why it stops.
struct Book<'a> {
    job: Job<'a>,
    /// Operations to complete (lowered when time runs out).
    count: u64,
    st: WorkloadThread,
    rng: Rng,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Where values are written before they are submitted.
    value: Vec<u8>,
    /// Fields per record and bytes per field.
    layout: (usize, usize),
    m: Measurements,
    issued: u64,
    completed: u64,
    /// Completions already added to [`Progress::done`].
    reported: u64,
    /// Read-modify-writes whose read is back, waiting to send the write.
    rmw_next: Vec<u32>,
    /// A drawn operation the store had no room for yet.
    held: Option<u32>,
    per_thread_rate: Option<f64>,
    t0: Instant,
    last_handover: Instant,
    /// The connection this thread lost.
    lost: Option<Lost>,
    /// Since when it (or another thread's loss) stopped it.
    stopping: Option<Instant>,
}

impl<D: Db> Driver<'_, D> {
    fn run(mut self) -> ThreadResult {
        while self.b.completed < self.b.count {
            if self.b.out_of_time() {
                continue;
            }
            if self.b.drained(self.db.in_flight()) {
                break;
            }
            self.send_rmw_writes();
            self.issue();
            self.complete();
            self.b.hand_over(false);
        }
        self.b.hand_over(true);
        let b = self.b;
        ThreadResult {
            m: b.m,
            ops: b.completed,
            lost: b.lost,
            map_version: self.db.cleanup().map_version,
        }
    }

    /// Second halves of read-modify-writes first (their reads are done).
    fn send_rmw_writes(&mut self) {
        while let Some(&i) = self.b.rmw_next.last().filter(|_| self.b.stopping.is_none()) {
            match self.b.write(&mut self.db, i) {
                Ok(()) => {
                    self.b.rmw_next.pop();
                }
                Err(Refused::Busy) => break,
                Err(e) => {
                    self.b.rmw_next.pop();
                    self.b.unsent_rmw_write(i, e);
                }
            }
        }
    }

    /// Issues while there is room (and the target rate allows).
    fn issue(&mut self) {
        while self.b.may_issue() && (self.b.held.is_some() || !self.b.free.is_empty()) {
            if self.b.rate_says_wait() {
                break;
            }
            let i = match self.b.held.take() {
                Some(i) => i,
                None => self.b.draw(),
            };
            match self.b.submit(&mut self.db, i) {
                Ok(()) => self.b.issued += 1,
                Err(Refused::Busy) => {
                    self.b.held = Some(i);
                    break;
                }
                Err(e) => self.b.unsent(i, e),
            }
        }
    }

    /// Waits for answers while there is nothing to issue (the window is
    /// full, every operation is out, or the target rate says not yet);
    /// otherwise only looks.
    fn complete(&mut self) {
        let b = &mut self.b;
        let can_issue =
            b.may_issue() && (!b.free.is_empty() || (b.held.is_some() && self.db.in_flight() == 0));
        let timeout = match b.per_thread_rate {
            _ if !b.rmw_next.is_empty() => Duration::ZERO,
            Some(_) if can_issue => b.until_due().min(IDLE_WAIT),
            None if can_issue => Duration::ZERO,
            _ => IDLE_WAIT,
        };
        let clock = b.job.clock;
        if let Err(e) = self.db.wait(timeout, |i, a| b.answer(i, a, clock.ticks())) {
            b.lost.get_or_insert(e);
        }
    }
}

impl<'a> Book<'a> {
    fn new(job: Job<'a>) -> Self {
        let (nf, fl) = (job.wl.field_count(), job.wl.field_length());
        let depth = job.opts.depth.clamp(1, 1 << 16);
        let slots = (0..depth)
            .map(|_| Slot {
                wait: Wait::Free,
                start: 0,
                stage: 0,
                key: String::with_capacity(64),
                field: 0,
                scan_len: 0,
            })
            .collect();
        let mut m = Measurements::new();
        if !job.opts.status {
            m = m.without_intervals();
        }
        Book {
            count: job.count,
            st: job.wl.thread_state(job.thread, job.threads),
            rng: Rng::for_stream(job.opts.seed, job.thread as u64),
            slots,
            free: (0..depth as u32).rev().collect(),
            value: vec![0u8; (nf * fl).max(1)],
            layout: (nf, fl),
            m,
            issued: 0,
            completed: 0,
            reported: 0,
            rmw_next: Vec::with_capacity(depth),
            held: None,
            per_thread_rate: job.opts.target_ops.map(|t| t / job.threads as f64),
            t0: Instant::now(),
            last_handover: Instant::now(),
            lost: None,
            stopping: None,
            job,
        }
    }

    /// Out of time, or interrupted: what was issued is all there is.
    /// True when that just lowered the count.
    fn out_of_time(&mut self) -> bool {
        let opts = self.job.opts;
        let over = opts.max_time.is_some_and(|d| self.t0.elapsed() >= d)
            || opts.interrupt.load(Ordering::Relaxed);
        if over && self.count > self.issued {
            self.count = self.issued;
            return true;
        }
        false
    }

    /// Whether the thread is stopping (a lost connection, here or in
    /// another thread) and its operations in flight are done, or it has
    /// waited for them long enough.
    fn drained(&mut self, in_flight: usize) -> bool {
        if self.stopping.is_none() && (self.lost.is_some() || self.job.stop.load(Ordering::Relaxed))
        {
            self.job.stop.store(true, Ordering::Relaxed);
            self.stopping = Some(Instant::now());
        }
        // Only the operations in flight still complete (or fail).
        self.stopping
            .is_some_and(|t| in_flight == 0 || t.elapsed() >= DRAIN_LIMIT)
    }

    /// Whether new operations may start.
    fn may_issue(&self) -> bool {
        self.stopping.is_none() && self.lost.is_none() && self.issued < self.count
    }

    /// How long until the target rate allows the next operation.
    fn until_due(&self) -> Duration {
        match self.per_thread_rate {
            Some(rate) => (self.t0 + Duration::from_secs_f64(self.issued as f64 / rate))
                .saturating_duration_since(Instant::now()),
            None => Duration::ZERO,
        }
    }

    fn rate_says_wait(&self) -> bool {
        self.per_thread_rate.is_some() && !self.until_due().is_zero()
    }

    /// Draws the next operation into a free slot.
    fn draw(&mut self) -> u32 {
        let i = self.free.pop().expect("checked non-empty");
        let s = &mut self.slots[i as usize];
        s.wait = match self.job.phase {
            Phase::Load => Wait::Insert(self.st.next_load(&mut self.rng, &mut s.key)),
            Phase::Run => match self.st.next_op(&mut self.rng, &mut s.key) {
                Op::Read => Wait::Read,
                Op::Update { field } => {
                    s.field = field;
                    Wait::Update
                }
                Op::Insert { keynum } => Wait::Insert(keynum),
                Op::Scan { len } => {
                    s.scan_len = len;
                    Wait::Scan
                }
                Op::ReadModifyWrite { field } => {
                    s.field = field;
                    Wait::RmwRead
                }
            },
        };
        s.start = self.job.clock.ticks();
        s.stage = s.start;
        i
    }

    /// Submits slot `i`'s operation.
    #[inline]
    fn submit(&mut self, db: &mut impl Db, i: u32) -> Result<(), Refused> {
        let s = &self.slots[i as usize];
        match s.wait {
            Wait::Read | Wait::RmwRead => db.read(s.key.as_bytes(), i),
            Wait::Update => self.write(db, i),
            Wait::Insert(_) => {
                let key = s.key.as_bytes();
                let verify = self.job.opts.verify;
                fill_record(verify, &mut self.rng, key, self.layout, &mut self.value);
                db.insert(key, &self.value, i)
            }
            Wait::Scan => db.scan(s.key.as_bytes(), s.scan_len, i),
            Wait::RmwWrite | Wait::Free => unreachable!("never drawn"),
        }
    }

    /// Submits slot `i`'s write: its field, or (`writeallfields`) the whole
    /// record.
    #[inline]
    fn write(&mut self, db: &mut impl Db, i: u32) -> Result<(), Refused> {
        let s = &self.slots[i as usize];
        let (key, verify, (nf, fl)) = (s.key.as_bytes(), self.job.opts.verify, self.layout);
        let fields = if s.field < nf {
            let v = &mut self.value[..fl];
            fill_field(verify, &mut self.rng, key, s.field, v);
            Fields {
                first: s.field,
                data: v,
            }
        } else {
            fill_record(verify, &mut self.rng, key, self.layout, &mut self.value);
            Fields {
                first: 0,
                data: &self.value,
            }
        };
        db.update(key, fields, i)
    }

    /// Slot `i`'s operation was never sent: an error of its kind.
    fn unsent(&mut self, i: u32, why: Refused) {
        if let Refused::Lost(l) = why {
            self.lost.get_or_insert(l);
        }
        let s = &mut self.slots[i as usize];
        if let Wait::Insert(k) = s.wait {
            self.st.acknowledge(k);
        }
        self.m.record(kind_of(s.wait), Status::Error, 0);
        s.wait = Wait::Free;
        self.free.push(i);
        self.issued += 1;
        self.completed += 1;
    }

    /// The write of read-modify-write `i` was never sent.
    fn unsent_rmw_write(&mut self, i: u32, why: Refused) {
        if let Refused::Lost(l) = why {
            self.lost.get_or_insert(l);
        }
        self.m.record(OpKind::Update, Status::Error, 0);
        self.m.record_latency(OpKind::ReadModifyWrite, 0);
        self.slots[i as usize].wait = Wait::Free;
        self.free.push(i);
        self.completed += 1;
    }

    /// Slot `i`'s answer came at `now` ([`Clock::ticks`]).
    #[inline]
    fn answer(&mut self, i: u32, a: Answer<'_>, now: u64) {
        let s = &mut self.slots[i as usize];
        let clock = self.job.clock;
        let us = |t: u64| clock.ns_between(t, now) / 1000;
        let status = match a {
            Answer::Record(v)
                if self.job.opts.verify && !record_ok(s.key.as_bytes(), self.layout, v) =>
            {
                Status::UnexpectedState
            }
            Answer::Record(_) => Status::Ok,
            Answer::Done(st) => st,
            Answer::Lost(l) => {
                self.lost.get_or_insert(l);
                Status::Error
            }
        };
        match s.wait {
            Wait::RmwRead => {
                self.m.record(OpKind::Read, status, us(s.stage));
                if status == Status::Ok {
                    s.wait = Wait::RmwWrite;
                    s.stage = now;
                    self.rmw_next.push(i);
                    return;
                }
                // As Java's CoreWorkload: the read and the update carry
                // the return codes; READ-MODIFY-WRITE only the latency.
                self.m.record_latency(OpKind::ReadModifyWrite, us(s.start));
            }
            Wait::RmwWrite => {
                self.m.record(OpKind::Update, status, us(s.stage));
                self.m.record_latency(OpKind::ReadModifyWrite, us(s.start));
            }
            Wait::Insert(keynum) => {
                // As Java: acknowledged whatever the outcome, so one failed
                // insert does not hide every later key from readers.
                self.st.acknowledge(keynum);
                self.m.record(OpKind::Insert, status, us(s.start));
            }
            w => self.m.record(kind_of(w), status, us(s.start)),
        }
        s.wait = Wait::Free;
        self.free.push(i);
        self.completed += 1;
    }

    /// Adds the completions to the shared count every 256 (and at the end),
    /// and hands the interval measurements over about four times a second.
    fn hand_over(&mut self, last: bool) {
        let progress = self.job.progress;
        if last {
            progress
                .done
                .fetch_add(self.completed - self.reported, Ordering::Relaxed);
            if let Ok(mut g) = progress.interval.lock() {
                self.m.drain_interval_into(&mut g);
            }
            return;
        }
        if self.completed - self.reported >= 256 || self.completed == self.count {
            progress
                .done
                .fetch_add(self.completed - self.reported, Ordering::Relaxed);
            self.reported = self.completed;
            if self.job.opts.status
                && (self.last_handover.elapsed() >= Duration::from_millis(250)
                    || self.completed == self.count)
            {
                self.last_handover = Instant::now();
                if let Ok(mut g) = progress.interval.lock() {
                    self.m.drain_interval_into(&mut g);
                }
            }
        }
    }
}
