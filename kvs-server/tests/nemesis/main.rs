//! The nemesis, as Jepsen runs one: a cluster of real kvs-server processes,
//! clients that read and write the same keys and record every operation,
//! and faults on a seeded schedule (`kill -9` and restart from the data
//! dir, SIGSTOP pauses shorter and longer than the failure timeout, a
//! member's port down, its paths to the others cut one way, its TCP cut,
//! SIGTERM, drains, migrations, rebalances, replica changes; and, where
//! the members keep their records on disk, `kill -9` of every member at
//! once). The recorded history is checked by stateright's
//! linearizability checker, a register per key; after the faults every key
//! is read once more, so an acknowledged write that was lost is an anomaly
//! too. Under `durability = "everysec"` a kill of every member may lose
//! the last second or so of acknowledged writes: those are measured
//! ([`loss`]), an older one fails the run, and the rest of the history is
//! checked as before.
//!
//! ```text
//! cargo test -p kvs-server --test nemesis                       # CI's runs
//! cargo test -p kvs-server --test nemesis -- --list             # the scenarios
//! cargo test -p kvs-server --test nemesis -- --scenario r2-crash --seed 7
//! cargo test --release -p kvs-server --test nemesis -- --minutes 60
//! ```
//! A failing run prints its scenario and seed; they replay its schedule.
//! docs/testing.md has the figures of a long run.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod check;
mod cluster;
mod faults;
mod history;
mod loss;
mod proxy;
#[path = "../support/mod.rs"]
mod support;
mod workload;

use cluster::Cluster;
use faults::{Kind, Nemesis};
use workload::{Clients, Shared};

/// A cluster and the faults played against it.
#[derive(Debug, Clone, Copy)]
struct Scenario {
    name: &'static str,
    what: &'static str,
    members: usize,
    replicas: u8,
    /// The members' `durability`: `none`, `everysec` or `always`.
    durability: &'static str,
    /// The faults, drawn with equal odds.
    faults: &'static [Kind],
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "r1-pause",
        what: "one copy: pauses, cuts and the operator's moves (no crash: one copy in memory dies with its member)",
        members: 3,
        replicas: 1,
        durability: "none",
        faults: &[Kind::PauseShort, Kind::PauseLong, Kind::Partition, Kind::Migrate, Kind::Rebalance],
    },
    Scenario {
        name: "r2-crash",
        what: "two copies: kill -9 (with a slow backup), pauses, SIGTERM",
        members: 3,
        replicas: 2,
        durability: "none",
        faults: &[Kind::Kill, Kind::KillSlowBackup, Kind::PauseShort, Kind::TermRestart],
    },
    Scenario {
        name: "r2-pause",
        what: "two copies: long pauses, cuts, drains with a slow backup, migrations",
        members: 3,
        replicas: 2,
        durability: "none",
        faults: &[Kind::PauseShort, Kind::PauseLong, Kind::Partition, Kind::Drain, Kind::Migrate],
    },
    Scenario {
        name: "r2-wipe",
        what: "two copies: data dirs wiped (kill -9, forget, join again empty), kills, SIGTERM",
        members: 3,
        replicas: 2,
        durability: "none",
        faults: &[Kind::Wipe, Kind::Kill, Kind::TermRestart, Kind::PauseShort],
    },
    Scenario {
        name: "r1-five",
        what: "five members, one copy: pauses, cuts (both ways, one way, TCP) and the operator's moves",
        members: 5,
        replicas: 1,
        durability: "none",
        faults: &[
            Kind::PauseShort,
            Kind::PauseLong,
            Kind::Partition,
            Kind::OneWay,
            Kind::TcpCut,
            Kind::PartitionTcp,
            Kind::Migrate,
            Kind::Rebalance,
        ],
    },
    Scenario {
        name: "r2-five",
        what: "five members, two copies: kills, wipes, pauses, cuts (both ways, one way, TCP), drains",
        members: 5,
        replicas: 2,
        durability: "none",
        faults: &[
            Kind::Kill,
            Kind::Wipe,
            Kind::PauseShort,
            Kind::PauseLong,
            Kind::Partition,
            Kind::OneWay,
            Kind::TcpCut,
            Kind::PartitionTcp,
            Kind::Drain,
            Kind::Rebalance,
        ],
    },
    Scenario {
        name: "r3-mixed",
        what: "five members, three copies: every fault, replica changes and rebalances",
        members: 5,
        replicas: 3,
        durability: "none",
        faults: &[
            Kind::Kill,
            Kind::KillSlowBackup,
            Kind::PauseShort,
            Kind::PauseLong,
            Kind::Partition,
            Kind::OneWay,
            Kind::TcpCut,
            Kind::PartitionTcp,
            Kind::TermRestart,
            Kind::Drain,
            Kind::Migrate,
            Kind::Rebalance,
            Kind::SetReplicas,
        ],
    },
    Scenario {
        name: "r1-killall",
        what: "one copy on disk (always): every member killed at once, kills, pauses, cuts, migrations, rebalances",
        members: 3,
        replicas: 1,
        durability: "always",
        faults: &[
            Kind::KillAll,
            Kind::Kill,
            Kind::PauseShort,
            Kind::PauseLong,
            Kind::Partition,
            Kind::Migrate,
            Kind::Rebalance,
        ],
    },
    Scenario {
        name: "r2-killall",
        what: "two copies on disk (always): every member killed at once, kills (with a slow backup), pauses, SIGTERM",
        members: 3,
        replicas: 2,
        durability: "always",
        faults: &[
            Kind::KillAll,
            Kind::Kill,
            Kind::KillSlowBackup,
            Kind::PauseShort,
            Kind::TermRestart,
        ],
    },
    Scenario {
        name: "r2-everysec",
        what: "two copies on disk (everysec): every member killed at once, kills, pauses; the loss measured",
        members: 3,
        replicas: 2,
        durability: "everysec",
        faults: &[Kind::KillAll, Kind::Kill, Kind::PauseShort],
    },
];

/// CI's runs: (scenario, seed), a few minutes in all. The kills of every
/// member under `always` (`r2-killall`, `r1-killall`) stand in for
/// `r2-crash` and `r1-pause`, whose faults they play too.
const CI_RUNS: &[(&str, u64)] = &[
    ("r2-killall", 1),
    ("r1-killall", 2),
    ("r2-pause", 3),
    ("r3-mixed", 4),
    ("r2-wipe", 5),
    ("r2-five", 6),
];

/// The command line.
#[derive(Debug)]
struct Args {
    scenario: Option<String>,
    seed: Option<u64>,
    minutes: Option<f64>,
    seconds: f64,
    clients: u32,
    list: bool,
}

/// Reads the command line; flags cargo's test runner passes along (and
/// a name filter) are ignored, so `cargo test --workspace -- ...` runs it.
fn args() -> Result<Args, String> {
    let mut a = Args {
        scenario: None,
        seed: None,
        minutes: None,
        seconds: 20.0,
        clients: 6,
        list: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match x.as_str() {
            "--scenario" => a.scenario = Some(val("--scenario")?),
            "--seed" => a.seed = Some(val("--seed")?.parse().map_err(|e| format!("--seed: {e}"))?),
            "--minutes" => {
                a.minutes = Some(
                    val("--minutes")?
                        .parse()
                        .map_err(|e| format!("--minutes: {e}"))?,
                )
            }
            "--seconds" => {
                a.seconds = val("--seconds")?
                    .parse()
                    .map_err(|e| format!("--seconds: {e}"))?
            }
            "--clients" => {
                a.clients = val("--clients")?
                    .parse()
                    .map_err(|e| format!("--clients: {e}"))?
            }
            "--list" => a.list = true,
            "--help" | "-h" => return Err(HELP.into()),
            _ => {}
        }
    }
    Ok(a)
}

const HELP: &str = "\
kvs-server's nemesis: faults against a cluster of real kvs-server processes,
the history checked for linearizability (stateright), a register per key.

  --list             the scenarios, and CI's runs
  --scenario NAME    run this scenario (with --seed: that one run)
  --seed N           the schedule's seed (a failing run prints it)
  --seconds S        how long faults are played per run (default 20)
  --minutes M        run scenarios and seeds in turn for M minutes
  --clients N        client threads (default 6)

With no flag it plays CI's runs.";

/// What one run found.
#[derive(Debug, Default)]
struct Outcome {
    ops: usize,
    unknown: usize,
    anomalies: usize,
    faults: std::collections::BTreeMap<Kind, u32>,
    failure: Option<String>,
    /// How long the check took, and its slowest key.
    check: Duration,
    slowest: Duration,
    /// What the kills of every member lost, if any struck.
    loss: Option<loss::Loss>,
}

/// The generators' state for `seed` (splitmix64's finalizer): test-support's
/// generator sets the lowest bit of its state, so seeds 2k and 2k+1 given
/// as they are would play the same schedule.
fn spread(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Plays `sc` with `seed` for `seconds` of faults.
fn run(sc: &Scenario, seed: u64, seconds: f64, clients: u32) -> Outcome {
    let mut out = Outcome::default();
    let tag = format!("{}-{seed}", sc.name);
    let mut c = match Cluster::start(&tag, sc.members, sc.replicas, sc.durability) {
        Ok(c) => c,
        Err(e) => {
            out.failure = Some(format!("the cluster did not start: {e}"));
            return out;
        }
    };
    let mut nemesis = Nemesis::new(spread(seed), sc.faults, sc.replicas);
    let sh = Arc::new(Shared {
        fabric: c.fabric.clone(),
        contacts: c.addrs(),
        clock: history::Clock::start(),
        group: AtomicU32::new(0),
        stop: AtomicBool::new(false),
        hold: nemesis.hold.clone(),
        next_process: AtomicU32::new(0),
        timeout: Duration::from_secs(3),
    });
    let clients = Clients::start(&sh, clients, spread(seed), Duration::from_millis(5));
    let rotate = {
        let sh = sh.clone();
        std::thread::spawn(move || {
            while !sh.stop.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(500));
                sh.group.fetch_add(1, Ordering::AcqRel);
            }
        })
    };
    let t = Instant::now();
    let at = || sh.clock.now();
    let mut failure = None;
    while t.elapsed().as_secs_f64() < seconds && failure.is_none() {
        std::thread::sleep(nemesis.gap());
        failure = nemesis.step(&mut c, at).err();
    }
    // Everything healed, the cluster must come back and keep serving.
    let healed = c.heal();
    if failure.is_none() {
        failure = healed
            .and_then(|()| c.wait_healthy(Duration::from_secs(120)))
            .err()
            .map(|e| format!("after healing: {e}"));
    }
    std::thread::sleep(Duration::from_millis(1000));
    sh.stop.store(true, Ordering::Release);
    let _ = rotate.join();
    let mut h = clients.join();
    let keys = 0..(sh.group.load(Ordering::Acquire) + 1) * workload::KEYS_PER_GROUP;
    sh.stop.store(false, Ordering::Release);
    let (finals, unread) = workload::final_reads(&sh, keys, Duration::from_secs(30));
    h.extend(finals);
    out.ops = h.len();
    out.unknown = h.iter().filter(|e| e.done.is_none()).count();
    out.faults = nemesis.played.clone();
    let mut problems = Vec::new();
    if !nemesis.kill_alls.is_empty() {
        let (l, forgiven) = lost(sc, &h, &nemesis.kill_alls, &mut problems);
        h = forgiven;
        out.loss = Some(l);
    }
    let checking = Instant::now();
    let report = check::check(&h, 2, Duration::from_secs(120));
    out.check = checking.elapsed();
    out.slowest = report.slowest;
    out.anomalies = report.anomalies.len();
    if let Some(f) = failure {
        problems.push(f);
    }
    if !unread.is_empty() {
        problems.push(format!("final reads failed: {unread:?}"));
    }
    for (k, ops) in report.anomalies.iter().take(3) {
        problems.push(format!(
            "key {}: not linearizable:\n{ops}",
            workload::key_name(*k)
        ));
    }
    if !report.unchecked.is_empty() {
        problems.push(format!(
            "keys the checker did not finish: {:?}",
            report.unchecked
        ));
    }
    if !problems.is_empty() {
        out.failure = Some(format!(
            "{}\n\nfaults:\n{}\n\nmember logs (tails):\n{}",
            problems.join("\n\n"),
            nemesis.log.join("\n"),
            c.tails(40)
        ));
    }
    out
}

/// What the kills of every member at `kills` lost in `h`, and the history
/// to check for linearizability: under `everysec`, the writes lost within
/// [`loss::EVERYSEC_BOUND`] of their kill count as writes of unknown
/// outcome, and an older one is a problem; under `always` every loss is
/// one (and an anomaly of the check).
fn lost(
    sc: &Scenario,
    h: &[history::Entry],
    kills: &[u64],
    problems: &mut Vec<String>,
) -> (loss::Loss, Vec<history::Entry>) {
    let l = loss::measure(h, kills);
    let (bound, forgiven) = if sc.durability == "everysec" {
        (loss::EVERYSEC_BOUND, loss::forgiven(h, &l.lost))
    } else {
        (Duration::ZERO, h.to_vec())
    };
    let old: Vec<String> = l
        .older_than(bound)
        .take(10)
        .map(|x| {
            format!(
                "{} = {} acknowledged {:.0} ms before its kill",
                workload::key_name(x.key),
                x.value,
                x.age.as_secs_f64() * 1e3
            )
        })
        .collect();
    if !old.is_empty() {
        problems.push(format!(
            "durability = {:?}: {}; lost older than {bound:?}: {}",
            sc.durability,
            l.line(),
            old.join(", ")
        ));
    }
    (l, forgiven)
}

/// The faults played, by kind, in a line.
fn fault_list(faults: &std::collections::BTreeMap<Kind, u32>) -> String {
    let v: Vec<String> = faults
        .iter()
        .map(|(k, n)| format!("{} {n}", k.name()))
        .collect();
    v.join(", ")
}

fn summary(sc: &Scenario, seed: u64, o: &Outcome, took: Duration) -> String {
    let loss = match &o.loss {
        Some(l) => format!("; {}", l.line()),
        None => String::new(),
    };
    format!(
        "nemesis {} seed {seed}: {} ops ({} unknown), {} anomalies, {:.0} s (checked in {:.1} s, \
         slowest key {:.2} s); faults: {}{loss}",
        sc.name,
        o.ops,
        o.unknown,
        o.anomalies,
        took.as_secs_f64(),
        o.check.as_secs_f64(),
        o.slowest.as_secs_f64(),
        fault_list(&o.faults)
    )
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) if e == HELP => {
            println!("{e}");
            return;
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    if a.list {
        for s in SCENARIOS {
            println!(
                "{:11} {} members, replicas {}, durability {}: {}",
                s.name, s.members, s.replicas, s.durability, s.what
            );
        }
        println!("CI runs: {CI_RUNS:?}");
        return;
    }
    if let Err(e) = check::self_test() {
        eprintln!("nemesis: the checker is broken: {e}");
        std::process::exit(1);
    }
    if let Err(e) = loss::self_test() {
        eprintln!("nemesis: the measure of lost writes is broken: {e}");
        std::process::exit(1);
    }
    let draw = |seed| test_support::Rng(spread(seed)).next();
    if (0..64).any(|k| draw(2 * k) == draw(2 * k + 1)) {
        eprintln!("nemesis: neighbouring seeds draw the same schedule");
        std::process::exit(1);
    }
    let find = |n: &str| SCENARIOS.iter().find(|s| s.name == n);
    let mut plan: Vec<(Scenario, u64)> = Vec::new();
    match (&a.scenario, a.seed) {
        (Some(n), seed) => match find(n) {
            Some(s) => plan.push((*s, seed.unwrap_or(1))),
            None => {
                eprintln!("no scenario {n} (--list names them)");
                std::process::exit(2);
            }
        },
        (None, Some(seed)) => plan.extend(SCENARIOS.iter().map(|s| (*s, seed))),
        (None, None) if a.minutes.is_none() => plan.extend(
            CI_RUNS
                .iter()
                .map(|(n, seed)| (*find(n).expect("a scenario"), *seed)),
        ),
        (None, None) => {}
    }
    let t = Instant::now();
    let (mut passed, mut failed, mut next) = (0, 0, 0u64);
    let mut totals = Outcome::default();
    loop {
        let (sc, seed) = match a.minutes {
            Some(m) if plan.is_empty() => {
                if t.elapsed().as_secs_f64() > m * 60.0 {
                    break;
                }
                next += 1;
                (
                    SCENARIOS[(next as usize - 1) % SCENARIOS.len()],
                    1000 + next,
                )
            }
            _ => match plan.pop() {
                Some(p) => p,
                None => break,
            },
        };
        let started = Instant::now();
        let o = run(&sc, seed, a.seconds, a.clients);
        eprintln!("{}", summary(&sc, seed, &o, started.elapsed()));
        totals.ops += o.ops;
        totals.unknown += o.unknown;
        totals.anomalies += o.anomalies;
        for (k, n) in &o.faults {
            *totals.faults.entry(*k).or_default() += n;
        }
        if let Some(l) = &o.loss {
            totals.loss.get_or_insert_with(Default::default).add(l);
        }
        match &o.failure {
            None => passed += 1,
            Some(why) => {
                failed += 1;
                eprintln!(
                    "nemesis {} seed {seed} FAILED:\n{why}\nreplay: cargo test -p kvs-server \
                     --test nemesis -- --scenario {} --seed {seed}",
                    sc.name, sc.name
                );
            }
        }
    }
    let loss = match &totals.loss {
        Some(l) => format!("; {}", l.line()),
        None => String::new(),
    };
    eprintln!(
        "nemesis: {} ops ({} unknown), {} anomalies in {:.0} s; faults: {}{loss}",
        totals.ops,
        totals.unknown,
        totals.anomalies,
        t.elapsed().as_secs_f64(),
        fault_list(&totals.faults)
    );
    println!("nemesis: {passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
