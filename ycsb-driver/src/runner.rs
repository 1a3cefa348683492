//! Driver threads: each owns a kvs client (one copyrpc context, one endpoint
//! per server worker) and keeps up to `depth` operations in flight, drawing
//! them from the workload and timing each from submit to completion.
//!
//! A lost connection to the server ends the phase: the thread that sees it
//! stops issuing, the others stop too, each waits (at most [`DRAIN_LIMIT`])
//! for the operations it has in flight, and the phase reports what completed
//! together with the loss ([`PhaseResult::lost`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use copyrpc::clock::Clock;
use copyrpc::transport::{run_on_device_as, DeviceSpec, OnTransport, Transport, Wire};
use copyrpc::IdlePolicy;
use kvs_client::{AuthToken, Client, ClientOptions, KvError, Reply, SubmitError};
use mlx5::device::Context as Device;

use crate::measure::{Measurements, OpKind, Status};
use crate::rng::Rng;
use crate::workload::{CoreWorkload, Op};

/// What the driver threads run against.
#[derive(Debug, Clone)]
pub enum Target {
    /// A kvs-server.
    Kvs {
        /// The server's setup address.
        server: String,
        /// The RDMA device (`auto`: a NIC, else software device `sim0`).
        device: String,
        /// The software device's fabric.
        fabric: Option<String>,
        /// The token to present, for a server that requires one.
        auth_token: Option<AuthToken>,
        /// How long a request may take before it counts as an error.
        timeout: std::time::Duration,
        /// RC or DC, as the server's `transport`.
        transport: Wire,
    },
    /// A Redis server (`redis://host:port`), with Java YCSB's data model.
    Redis {
        /// The server's URL.
        url: String,
    },
}

/// Load or run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Insert the records.
    Load,
    /// The operation mix.
    Run,
}

/// Settings of one phase.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Driver threads.
    pub threads: usize,
    /// Operations each thread keeps in flight (1: Java YCSB's closed loop).
    pub depth: usize,
    /// Total operations per second to aim at (None: as fast as possible).
    pub target_ops: Option<f64>,
    /// Check every value read (Java's `dataintegrity`): values are a
    /// deterministic function of key and field.
    pub verify: bool,
    /// What a driver thread does while waiting for answers (kvs-server
    /// only): spin, then sleep (default), or spin only
    /// (`kvs.busy_poll=true`).
    pub idle: IdlePolicy,
    /// Seed of the threads' random streams.
    pub seed: u64,
    /// Java's `maxexecutiontime`: after this long, no new operation starts;
    /// those in flight finish (None: until the operation count is done).
    pub max_time: Option<Duration>,
    /// Set (by Ctrl-C) to end the phase early in the same way.
    pub interrupt: Arc<AtomicBool>,
    /// Status lines are printed: the threads hand their interval
    /// measurements over to [`Progress::interval`] (otherwise they keep run
    /// totals only, and record each sample once).
    pub status: bool,
}

/// Counters the status reporter reads while a phase runs.
#[derive(Debug, Default)]
pub struct Progress {
    /// Operations completed, all threads.
    pub done: AtomicU64,
    /// Interval measurements the threads hand over (about once a second).
    pub interval: Mutex<Measurements>,
    /// Set when every thread has finished.
    pub finished: AtomicBool,
}

/// What a phase produced.
#[derive(Debug)]
pub struct PhaseResult {
    /// All threads' measurements, merged.
    pub measurements: Measurements,
    /// Operations completed.
    pub operations: u64,
    /// Wall time of the phase.
    pub runtime: Duration,
    /// The lost connection that ended the phase early, if one did (the
    /// measurements cover what completed before).
    pub lost: Option<ConnectionLost>,
    /// The newest shard-map version a driver thread ended with (kvs-server).
    pub map_version: Option<u32>,
}

/// A driver thread's connection to the server was lost (the server died, or
/// closed or broke the connection).
#[derive(Debug, Clone, thiserror::Error)]
#[error("driver thread {thread} lost its connection to the server: {why}")]
pub struct ConnectionLost {
    /// Which thread saw it first.
    pub thread: usize,
    /// The error its request met.
    pub why: KvError,
}

/// How long threads stopping after a lost connection wait for their
/// operations in flight before they give up on them.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// The longest a driver thread sleeps waiting for answers: how late it sees
/// a stop request.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// What one driver thread did.
pub(crate) struct ThreadResult {
    /// Its measurements.
    pub m: Measurements,
    /// Operations it completed.
    pub ops: u64,
    /// The lost connection that stopped it, if one did.
    pub lost: Option<KvError>,
    /// The shard-map version its client ended with (kvs-server).
    pub map_version: Option<u32>,
}

/// Why a phase could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A driver thread could not connect.
    #[error("driver thread {thread}: {why}")]
    Connect {
        /// Which thread.
        thread: usize,
        /// Why.
        why: String,
    },
}

/// Runs `phase` of `wl` with `opts.threads` threads against `target`.
pub fn run_phase(
    wl: &Arc<CoreWorkload>,
    phase: Phase,
    target: &Target,
    opts: &RunOptions,
    progress: &Arc<Progress>,
) -> Result<PhaseResult, RunError> {
    let threads = opts.threads.max(1);
    let total = match phase {
        Phase::Load => wl.load_count(),
        Phase::Run => wl.operation_count(),
    };
    let start = Instant::now();
    let clock = Clock::new();
    // Set by a thread that lost its connection or could not connect: the
    // others stop too.
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let n = crate::workload::ops_for_thread(total, t, threads);
            let (wl, target, opts, progress, stop) = (
                wl.clone(),
                target.clone(),
                opts.clone(),
                progress.clone(),
                stop.clone(),
            );
            std::thread::Builder::new()
                .name(format!("ycsb-{t}"))
                .spawn(move || {
                    let job = Job {
                        wl: &wl,
                        phase,
                        opts: &opts,
                        thread: t,
                        threads,
                        count: n,
                        progress: &progress,
                        stop: &stop,
                        clock,
                    };
                    let r = drive(job, &target);
                    if !matches!(&r, Ok(ThreadResult { lost: None, .. })) {
                        stop.store(true, Ordering::Release);
                    }
                    r
                })
                .expect("spawn a driver thread")
        })
        .collect();
    let mut merged = Measurements::new();
    let mut ops = 0;
    let mut err = None;
    let mut lost = None;
    let mut map_version = None;
    for (t, h) in handles.into_iter().enumerate() {
        match h.join().expect("a driver thread panicked") {
            Ok(r) => {
                merged.merge(&r.m);
                ops += r.ops;
                if lost.is_none() {
                    lost = r.lost.map(|why| ConnectionLost { thread: t, why });
                }
                map_version = map_version.max(r.map_version);
            }
            Err(e) => err = Some(e),
        }
    }
    progress.finished.store(true, Ordering::Release);
    if let Some(e) = err {
        return Err(e);
    }
    Ok(PhaseResult {
        measurements: merged,
        operations: ops,
        runtime: start.elapsed(),
        lost,
        map_version,
    })
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

#[derive(Debug)]
struct Slot {
    wait: Wait,
    /// When the operation was issued ([`Clock::ticks`]).
    start: u64,
    /// When its current stage was (a read-modify-write's write).
    stage: u64,
    key: String,
    field: usize,
    scan_len: usize,
}

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

/// One driver thread; returns its measurements, completed operations and
/// lost connection.
fn drive(job: Job<'_>, target: &Target) -> Result<ThreadResult, RunError> {
    let Job { wl, thread, .. } = job;
    let fail = |why: String| RunError::Connect { thread, why };
    let (server, device, fabric, auth_token, timeout, wire) = match target {
        Target::Kvs {
            server,
            device,
            fabric,
            auth_token,
            timeout,
            transport,
        } => (server, device, fabric, auth_token, *timeout, *transport),
        Target::Redis { url } => {
            return crate::redis_db::drive(job, url).map(|(m, ops)| ThreadResult {
                m,
                ops,
                lost: None,
                map_version: None,
            })
        }
    };
    let spec = DeviceSpec {
        name: device,
        fabric: fabric.as_deref(),
        software: "sim0",
    };
    let dev = spec.open().map_err(|e| fail(e.to_string()))?;
    let nf = wl.field_count();
    let fl = wl.field_length();
    let record = nf * fl;
    let ring = 1u64 << 20;
    let copts = ClientOptions {
        ring_size: ring,
        value_allowance: record + 64,
        scan_allowance: (wl.max_scan_length() * (record + 64) + 64).min(ring as usize / 4 - 64),
        auth_token: auth_token.clone(),
        idle: job.opts.idle,
        timeout,
        ..ClientOptions::default()
    };
    run_on_device_as(dev, wire, KvsJob { job, server, copts })
        .map_err(|(_, e)| fail(e.to_string()))?
}

/// A driver thread against kvs-server, on the transport the device calls for.
struct KvsJob<'a> {
    job: Job<'a>,
    server: &'a str,
    copts: ClientOptions,
}

impl OnTransport for KvsJob<'_> {
    type Output = Result<ThreadResult, RunError>;
    fn run<X: Transport>(self, dev: Device) -> Self::Output {
        let thread = self.job.thread;
        let client: Client<u32, X> =
            Client::connect(self.server, &dev, self.copts).map_err(|e| RunError::Connect {
                thread,
                why: e.to_string(),
            })?;
        drive_on(client, self.job)
    }
}

/// [`drive`] with a connected client.
fn drive_on<X: Transport>(
    mut client: Client<u32, X>,
    job: Job<'_>,
) -> Result<ThreadResult, RunError> {
    let Job {
        wl,
        phase,
        opts,
        thread,
        threads,
        mut count,
        progress,
        stop,
        clock,
    } = job;
    let nf = wl.field_count();
    let fl = wl.field_length();
    let record = nf * fl;
    let mut st = wl.thread_state(thread, threads);
    let mut rng = Rng::for_stream(opts.seed, thread as u64);
    let depth = opts.depth.clamp(1, 1 << 16);
    let mut slots: Vec<Slot> = (0..depth)
        .map(|_| Slot {
            wait: Wait::Free,
            start: 0,
            stage: 0,
            key: String::with_capacity(64),
            field: 0,
            scan_len: 0,
        })
        .collect();
    let mut free: Vec<u32> = (0..depth as u32).rev().collect();
    let mut value = vec![0u8; record.max(1)];
    let mut m = Measurements::new();
    if !opts.status {
        m = m.without_intervals();
    }
    let (mut issued, mut completed, mut reported) = (0u64, 0u64, 0u64);
    // Read-modify-writes whose read is back, waiting to send the write.
    let mut rmw_next: Vec<u32> = Vec::with_capacity(depth);
    // A drawn operation the client had no room for yet.
    let mut held: Option<u32> = None;
    let per_thread_rate = opts.target_ops.map(|t| t / threads as f64);
    let t0 = Instant::now();
    let mut last_handover = Instant::now();
    let verify = opts.verify;
    // The connection this thread lost, and since when it (or another
    // thread's loss) stopped it.
    let mut lost: Option<KvError> = None;
    let mut stopping: Option<Instant> = None;
    while completed < count {
        // Out of time, or interrupted: what was issued is all there is.
        let over = opts.max_time.is_some_and(|d| t0.elapsed() >= d)
            || opts.interrupt.load(Ordering::Relaxed);
        if over && count > issued {
            count = issued;
            continue;
        }
        if stopping.is_none() && (lost.is_some() || stop.load(Ordering::Relaxed)) {
            stop.store(true, Ordering::Relaxed);
            stopping = Some(Instant::now());
        }
        if let Some(t) = stopping {
            // Only the operations in flight still complete (or fail).
            if client.in_flight() == 0 || t.elapsed() >= DRAIN_LIMIT {
                break;
            }
        }
        // Second halves of read-modify-writes first (their reads are done).
        while let Some(&i) = rmw_next.last().filter(|_| stopping.is_none()) {
            let s = &slots[i as usize];
            let key = s.key.as_bytes();
            fill_field(verify, &mut rng, key, s.field, &mut value[..fl]);
            match client.update_range(key, (s.field * fl) as u32, &value[..fl], i) {
                Ok(()) => {
                    rmw_next.pop();
                }
                Err(SubmitError::Busy(_)) => break,
                Err(e) => {
                    if let SubmitError::Closed(_, why) = e {
                        lost.get_or_insert(KvError::Failed(why));
                    }
                    rmw_next.pop();
                    let s = &mut slots[i as usize];
                    m.record(OpKind::Update, Status::Error, 0);
                    m.record_latency(OpKind::ReadModifyWrite, 0);
                    s.wait = Wait::Free;
                    free.push(i);
                    completed += 1;
                }
            }
        }
        // Issue while there is room (and the target rate allows).
        while stopping.is_none()
            && lost.is_none()
            && issued < count
            && (held.is_some() || !free.is_empty())
        {
            if let Some(rate) = per_thread_rate {
                let due = t0 + Duration::from_secs_f64(issued as f64 / rate);
                if Instant::now() < due {
                    break;
                }
            }
            let i = match held.take() {
                Some(i) => i,
                None => {
                    let i = free.pop().expect("checked non-empty");
                    let s = &mut slots[i as usize];
                    s.wait = match phase {
                        Phase::Load => Wait::Insert(st.next_load(&mut rng, &mut s.key)),
                        Phase::Run => match st.next_op(&mut rng, &mut s.key) {
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
                    s.start = clock.ticks();
                    s.stage = s.start;
                    i
                }
            };
            let s = &slots[i as usize];
            let key = s.key.as_bytes();
            let r = match s.wait {
                Wait::Read | Wait::RmwRead => client.get(key, i),
                Wait::Update if s.field < nf => {
                    fill_field(verify, &mut rng, key, s.field, &mut value[..fl]);
                    client.update_range(key, (s.field * fl) as u32, &value[..fl], i)
                }
                // writeallfields: the whole record.
                Wait::Update => {
                    fill_record(verify, &mut rng, key, nf, fl, &mut value);
                    client.update_range(key, 0, &value, i)
                }
                Wait::Insert(_) => {
                    fill_record(verify, &mut rng, key, nf, fl, &mut value);
                    client.put(key, &value, i)
                }
                Wait::Scan => client.scan(key, s.scan_len as u32, i),
                Wait::RmwWrite | Wait::Free => unreachable!("never drawn"),
            };
            match r {
                Ok(()) => issued += 1,
                Err(SubmitError::Busy(_)) => {
                    held = Some(i);
                    break;
                }
                Err(e) => {
                    if let SubmitError::Closed(_, why) = e {
                        lost.get_or_insert(KvError::Failed(why));
                    }
                    // Never sent: an error of its kind.
                    let s = &mut slots[i as usize];
                    if let Wait::Insert(k) = s.wait {
                        st.acknowledge(k);
                    }
                    m.record(kind_of(s.wait), Status::Error, 0);
                    s.wait = Wait::Free;
                    free.push(i);
                    issued += 1;
                    completed += 1;
                }
            }
        }
        // Complete: wait for answers while there is nothing to issue (the
        // window is full, every operation is out, or the target rate says
        // not yet); otherwise only look.
        let can_issue = stopping.is_none()
            && lost.is_none()
            && issued < count
            && (!free.is_empty() || (held.is_some() && client.in_flight() == 0));
        let timeout = match per_thread_rate {
            _ if !rmw_next.is_empty() => Duration::ZERO,
            Some(rate) if can_issue => (t0 + Duration::from_secs_f64(issued as f64 / rate))
                .saturating_duration_since(Instant::now())
                .min(IDLE_WAIT),
            None if can_issue => Duration::ZERO,
            _ => IDLE_WAIT,
        };
        let waited = client.wait(timeout, |i, r| {
            let s = &mut slots[i as usize];
            let now = clock.ticks();
            let us = |t: u64| clock.ns_between(t, now) / 1000;
            let status = match &r {
                Ok(Reply::NotFound) => Status::NotFound,
                Ok(Reply::Value(v)) if verify && !record_ok(s.key.as_bytes(), nf, fl, v) => {
                    Status::UnexpectedState
                }
                Ok(_) => Status::Ok,
                Err(KvError::Failed(why)) => {
                    lost.get_or_insert(KvError::Failed(why.clone()));
                    Status::Error
                }
                Err(_) => Status::Error,
            };
            match s.wait {
                Wait::RmwRead => {
                    m.record(OpKind::Read, status, us(s.stage));
                    if status == Status::Ok {
                        s.wait = Wait::RmwWrite;
                        s.stage = now;
                        rmw_next.push(i);
                        return;
                    }
                    // As Java's CoreWorkload: the read and the update carry
                    // the return codes; READ-MODIFY-WRITE only the latency.
                    m.record_latency(OpKind::ReadModifyWrite, us(s.start));
                }
                Wait::RmwWrite => {
                    m.record(OpKind::Update, status, us(s.stage));
                    m.record_latency(OpKind::ReadModifyWrite, us(s.start));
                }
                Wait::Insert(keynum) => {
                    // As Java: acknowledged whatever the outcome, so one failed
                    // insert does not hide every later key from readers.
                    st.acknowledge(keynum);
                    m.record(OpKind::Insert, status, us(s.start));
                }
                w => m.record(kind_of(w), status, us(s.start)),
            }
            s.wait = Wait::Free;
            free.push(i);
            completed += 1;
        });
        if let Err(e) = waited {
            lost.get_or_insert(KvError::Submit(format!("waiting for answers: {e}")));
        }
        if completed - reported >= 256 || completed == count {
            progress
                .done
                .fetch_add(completed - reported, Ordering::Relaxed);
            reported = completed;
            if opts.status
                && (last_handover.elapsed() >= Duration::from_millis(250) || completed == count)
            {
                last_handover = Instant::now();
                if let Ok(mut g) = progress.interval.lock() {
                    m.drain_interval_into(&mut g);
                }
            }
        }
    }
    progress
        .done
        .fetch_add(completed - reported, Ordering::Relaxed);
    if let Ok(mut g) = progress.interval.lock() {
        m.drain_interval_into(&mut g);
    }
    Ok(ThreadResult {
        m,
        ops: completed,
        lost,
        map_version: Some(client.map().version()),
    })
}

/// Bytes of field `f` of `key`'s record: a function of key and field when
/// verifying (so any later read can be checked), random printable otherwise.
pub(crate) fn fill_field(verify: bool, rng: &mut Rng, key: &[u8], f: usize, out: &mut [u8]) {
    if verify {
        deterministic_field(key, f, out);
    } else {
        crate::workload::fill_value(rng, out);
    }
}

fn fill_record(verify: bool, rng: &mut Rng, key: &[u8], nf: usize, fl: usize, out: &mut [u8]) {
    for f in 0..nf {
        fill_field(verify, rng, key, f, &mut out[f * fl..(f + 1) * fl]);
    }
}

/// Printable bytes from a hash of key and field.
fn deterministic_field(key: &[u8], f: usize, out: &mut [u8]) {
    deterministic_chunk(key, f, 0, out);
}

/// Whether a record read back is exactly what was written (compared in
/// chunks regenerated on the stack: no allocation).
fn record_ok(key: &[u8], nf: usize, fl: usize, v: &[u8]) -> bool {
    if v.len() != nf * fl {
        return false;
    }
    let mut want = [0u8; 256];
    (0..nf).all(|f| {
        v[f * fl..(f + 1) * fl]
            .chunks(want.len())
            .enumerate()
            .all(|(c, chunk)| {
                let w = &mut want[..chunk.len()];
                deterministic_chunk(key, f, c * 256, w);
                chunk == w
            })
    })
}

/// Bytes `from..from+out.len()` of [`deterministic_field`].
pub(crate) fn deterministic_chunk(key: &[u8], f: usize, from: usize, out: &mut [u8]) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key.iter().chain(&(f as u64).to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = h.wrapping_add(0x9e37_79b9_7f4a_7c15u64.wrapping_mul(from as u64));
    for b in out.iter_mut() {
        h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        *b = b' ' + ((z ^ (z >> 31)) % 95) as u8;
    }
}
