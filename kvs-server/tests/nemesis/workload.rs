//! The clients: threads that each run one operation at a time against the
//! cluster, reads and writes of the same few keys, and record them
//! ([`crate::history`]).
//!
//! All clients use the keys of the current *group* (a few keys); the
//! driver moves them to a fresh group every so often, so that no key's
//! history grows past what the checker searches in time (Jepsen's
//! independent keys). Each write stores a value no other write uses.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kvs_client::{Client, ClientOptions, KvError, OwnedReply};
use test_support::Rng;

use crate::history::{decode, encode, Clock, Entry, Key, Op, Process, Ret};

/// Keys per group.
pub const KEYS_PER_GROUP: u32 = 8;

/// What the clients share with the driver.
#[derive(Debug)]
pub struct Shared {
    /// The software-device fabric.
    pub fabric: String,
    /// Where a client may connect (every member's address).
    pub contacts: Vec<SocketAddr>,
    /// The clock of the history.
    pub clock: Clock,
    /// The current key group.
    pub group: AtomicU32,
    /// Set to stop the clients.
    pub stop: AtomicBool,
    /// Set while no member runs (every member killed, until all are
    /// started again): clients start no operation then, since every one
    /// would end unknown and only slow the check down.
    pub hold: Arc<AtomicBool>,
    /// The next process id.
    pub next_process: AtomicU32,
    /// How long an operation may take before its outcome is unknown.
    pub timeout: Duration,
}

impl Shared {
    /// A fresh process id.
    pub fn process(&self) -> Process {
        self.next_process.fetch_add(1, Ordering::Relaxed)
    }

    /// The keys of group `g`.
    pub fn keys_of(g: u32) -> std::ops::Range<Key> {
        g * KEYS_PER_GROUP..(g + 1) * KEYS_PER_GROUP
    }
}

/// The key's name in the store.
pub fn key_name(k: Key) -> String {
    format!("nemesis-{k}")
}

/// How a write's error counts: `true` if it certainly did nothing.
fn write_surely_failed(e: &KvError) -> bool {
    // Final answers that refuse the write, and refusals before sending.
    // Anything else (a timeout, a broken connection, no route after
    // retries, unavailable after retries) may follow an attempt that was
    // applied.
    matches!(
        e,
        KvError::TooLarge(_)
            | KvError::BadRequest(_)
            | KvError::OutOfMemory(_)
            | KvError::OutOfRange
            | KvError::Busy
    )
}

/// A client connected to some member, trying each in turn.
fn connect(sh: &Shared, rng: &mut Rng) -> Option<Client<u64>> {
    let dev = copyrpc::transport::DeviceSpec {
        name: "sim0",
        fabric: Some(&sh.fabric),
        software: "sim0",
    }
    .open()
    .ok()?;
    let opts = ClientOptions {
        timeout: sh.timeout,
        setup_timeout: Duration::from_secs(2),
        ..ClientOptions::default()
    };
    while !sh.stop.load(Ordering::Acquire) {
        let at = sh.contacts[rng.below(sh.contacts.len() as u64) as usize];
        match Client::connect(at, &dev, opts.clone()) {
            Ok(c) => return Some(c),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    None
}

/// One operation: what it returned, `Err(true)` when it surely did
/// nothing, `Err(false)` when its outcome is unknown.
fn run_op(c: &mut Client<u64>, key: Key, op: Op) -> Result<Ret, bool> {
    let name = key_name(key);
    match op {
        Op::Read => match c.wait_for(|c, t| c.get(name.as_bytes(), t)) {
            Ok(OwnedReply::Value(v)) => Ok(Ret::Read(Some(decode(&v).unwrap_or(u64::MAX)))),
            Ok(OwnedReply::NotFound) => Ok(Ret::Read(None)),
            // A read that failed changed nothing.
            _ => Err(true),
        },
        Op::Write(v) => match c.wait_for(|c, t| c.put(name.as_bytes(), &encode(v), t)) {
            Ok(OwnedReply::Done) => Ok(Ret::Written),
            Ok(_) => Err(false),
            Err(e) => Err(write_surely_failed(&e)),
        },
    }
}

/// Client `me`'s loop until `stop`: its operations, recorded.
pub fn client(sh: Arc<Shared>, me: u32, seed: u64, pace: Duration) -> Vec<Entry> {
    let mut rng = Rng(seed ^ (u64::from(me) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut out = Vec::new();
    let mut process = sh.process();
    let mut written = 0u64;
    let mut client = None;
    while !sh.stop.load(Ordering::Acquire) {
        if sh.hold.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let Some(c) = client.as_mut() else {
            client = connect(&sh, &mut rng);
            continue;
        };
        let g = sh.group.load(Ordering::Acquire);
        let key = Shared::keys_of(g).start + rng.below(u64::from(KEYS_PER_GROUP)) as u32;
        let op = if rng.below(2) == 0 {
            Op::Read
        } else {
            written += 1;
            Op::Write((u64::from(me) + 1) << 40 | written)
        };
        let invoked = sh.clock.now();
        let r = run_op(c, key, op);
        let completed = sh.clock.now();
        let mut entry = Entry {
            key,
            process,
            op,
            invoked,
            done: None,
        };
        match r {
            Ok(ret) => {
                entry.done = Some((completed, ret));
                out.push(entry);
            }
            Err(true) => {}
            Err(false) => {
                out.push(entry);
                process = sh.process();
                // A broken connection or a dead contact: start afresh.
                client = None;
            }
        }
        if !pace.is_zero() {
            std::thread::sleep(pace.mul_f64(0.5 + rng.below(1000) as f64 / 1000.0));
        }
    }
    out
}

/// One read of each key in `keys`, alone, after everything else: the
/// check that every acknowledged write is in the final state. Retries a
/// key whose read fails; after `most` in all, keys are no longer tried
/// (each failing read waits out the client's timeout: a cluster that
/// does not serve would otherwise hold the run for as many timeouts as
/// there are keys). The keys never read are returned as errors.
pub fn final_reads(
    sh: &Shared,
    keys: impl Iterator<Item = Key>,
    most: Duration,
) -> (Vec<Entry>, Vec<String>) {
    let mut rng = Rng(7);
    let (mut out, mut errors) = (Vec::new(), Vec::new());
    let Some(mut c) = connect(sh, &mut rng) else {
        return (out, vec!["no member took a connection".into()]);
    };
    let t = std::time::Instant::now();
    let mut untried = 0;
    for key in keys {
        if t.elapsed() >= most {
            untried += 1;
            continue;
        }
        loop {
            let invoked = sh.clock.now();
            match run_op(&mut c, key, Op::Read) {
                Ok(ret) => {
                    out.push(Entry {
                        key,
                        process: sh.process(),
                        op: Op::Read,
                        invoked,
                        done: Some((sh.clock.now(), ret)),
                    });
                    break;
                }
                Err(_) if t.elapsed() < most => {
                    std::thread::sleep(Duration::from_millis(50));
                    if let Some(n) = connect(sh, &mut rng) {
                        c = n;
                    }
                }
                Err(_) => {
                    errors.push(format!("{}: no read succeeded", key_name(key)));
                    break;
                }
            }
        }
    }
    if untried > 0 {
        errors.push(format!("{untried} more keys not tried within {most:?}"));
    }
    (out, errors)
}

/// The clients' threads, started.
pub struct Clients {
    threads: Vec<std::thread::JoinHandle<Vec<Entry>>>,
}

impl Clients {
    /// `n` clients, seeded from `seed`, each pausing about `pace` between
    /// operations.
    pub fn start(sh: &Arc<Shared>, n: u32, seed: u64, pace: Duration) -> Clients {
        let threads = (0..n)
            .map(|i| {
                let sh = sh.clone();
                std::thread::spawn(move || client(sh, i, seed, pace))
            })
            .collect();
        Clients { threads }
    }

    /// Stops them (`sh.stop` must be set) and returns their history.
    pub fn join(self) -> Vec<Entry> {
        let all = Mutex::new(Vec::new());
        for t in self.threads {
            if let Ok(h) = t.join() {
                all.lock().unwrap().extend(h);
            }
        }
        all.into_inner().unwrap()
    }
}
