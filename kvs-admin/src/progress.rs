//! Following a migration at the keeper: its progress as a bar (redrawn on a
//! terminal, a line every few seconds otherwise), its rate and ETA, until it
//! ends.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kvs_proto::control::MigrationStatus;

use crate::admin::{Admin, Control};
use crate::error::AdminError;
use crate::render;

/// How often a line is written when stderr is not a terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// How a migration is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// How often the keeper is asked.
    pub poll: Duration,
    /// How long the keeper may fail to answer before kvs-admin stops
    /// following.
    pub patience: Duration,
}

impl Pace {
    /// Twice a second, for a minute of silence at most.
    pub const NORMAL: Pace = Pace {
        poll: Duration::from_millis(500),
        patience: Duration::from_secs(60),
    };
}
/// The bar's width in characters, brackets excluded.
const BAR: usize = 30;
/// The widest line redrawn in place (a wrapped line cannot be).
const TTY_WIDTH: usize = 79;

/// `[#####-----]`: `done` of `total` in `width` characters (full when there
/// is nothing to do).
pub fn bar(done: u64, total: u64, width: usize) -> String {
    let filled = if total == 0 {
        width
    } else {
        (u128::from(done.min(total)) * width as u128 / u128::from(total)) as usize
    };
    format!("[{}{}]", "#".repeat(filled), "-".repeat(width - filled))
}

/// The percentage done, rounded down (100 only when all is done).
pub fn percent(done: u64, total: u64) -> u64 {
    if total == 0 {
        100
    } else {
        (u128::from(done.min(total)) * 100 / u128::from(total)) as u64
    }
}

/// The seconds left at the pace so far, if there is a pace.
pub fn eta(done: u64, total: u64, seconds: f64) -> Option<f64> {
    if done == 0 || done >= total || !seconds.is_finite() || seconds <= 0.0 {
        return None;
    }
    Some((total - done) as f64 * seconds / done as f64)
}

/// One line of progress: bar, slots, bytes, rate, elapsed time, ETA.
pub fn summary(m: &MigrationStatus, width: usize) -> String {
    let (done, total) = (u64::from(m.slots_done), u64::from(m.slots_total));
    let mut s = format!(
        "{} {:>3}%  {done}/{total} slots",
        bar(done, total, width),
        percent(done, total)
    );
    if m.slots_moving > 0 && !m.finished {
        s.push_str(&format!(" ({} moving)", m.slots_moving));
    }
    s.push_str(&format!(
        ", {} in {} records, {}, {} elapsed",
        render::bytes(m.bytes),
        m.records,
        render::rate(m.bytes, m.seconds),
        render::duration(m.seconds)
    ));
    if !m.finished {
        if let Some(left) = eta(done, total, m.seconds) {
            s.push_str(&format!(", ETA {}", render::duration(left)));
        }
    }
    s
}

/// The line redrawn on a terminal: bar, slots, bytes, rate, ETA, at most
/// `max` characters.
pub fn compact(m: &MigrationStatus, max: usize) -> String {
    let (done, total) = (u64::from(m.slots_done), u64::from(m.slots_total));
    let mut s = format!(
        "{} {:>3}% {done}/{total} slots {} {}",
        bar(done, total, 20),
        percent(done, total),
        render::bytes(m.bytes),
        render::rate(m.bytes, m.seconds)
    );
    if let Some(left) = eta(done, total, m.seconds).filter(|_| !m.finished) {
        s.push_str(&format!(" ETA {}", render::duration(left)));
    }
    clip(&s, max)
}

/// `s` cut to at most `max` characters.
fn clip(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// Where progress goes: stderr, redrawn in place on a terminal, and a line
/// every few seconds otherwise.
#[derive(Debug)]
pub struct Display {
    tty: bool,
    last_plain: Option<Instant>,
    drawn: bool,
}

impl Display {
    /// Progress on this process's stderr.
    pub fn new() -> Display {
        Display {
            tty: std::io::stderr().is_terminal(),
            last_plain: None,
            drawn: false,
        }
    }

    /// Shows `m`'s progress, or a `trouble` line (a keeper that does not
    /// answer): now on a terminal, else if a line is due or `force`.
    fn show(&mut self, m: Result<&MigrationStatus, &str>, force: bool) {
        match m {
            Ok(m) => self.line(
                &compact(m, TTY_WIDTH),
                &format!("migration {}", summary(m, BAR)),
                force,
            ),
            Err(trouble) => self.line(trouble, trouble, force),
        }
    }

    /// Shows `tty` redrawn in place on a terminal (cut to its width), else
    /// `plain` on a line of its own if one is due or `force`.
    pub fn line(&mut self, tty: &str, plain: &str, force: bool) {
        let mut e = std::io::stderr().lock();
        if self.tty {
            let _ = write!(e, "\r{}\x1b[K", clip(tty, TTY_WIDTH));
            self.drawn = true;
        } else if force || self.last_plain.is_none_or(|t| t.elapsed() >= PLAIN_EVERY) {
            let _ = writeln!(e, "{plain}");
            self.last_plain = Some(Instant::now());
        }
        let _ = e.flush();
    }

    /// Ends the line being redrawn, so what follows starts on its own.
    pub fn done(&mut self) {
        if self.drawn {
            let _ = writeln!(std::io::stderr());
            self.drawn = false;
        }
    }
}

/// Asks for the migration's progress until it ends, showing it on stderr;
/// returns how it ended. The migration is the control group's replicated
/// state, so any member reports it: the keeper (the leader that started it)
/// is asked first, and while it does not answer (it died, and a new leader
/// carries the migration on) the other members in `others`, in turn.
pub fn follow<C: Control>(
    admin: &mut Admin<C>,
    keeper: SocketAddr,
    others: &[SocketAddr],
    pace: Pace,
) -> Result<MigrationStatus, AdminError> {
    let mut d = Display::new();
    let mut last_ok = Instant::now();
    let asked: Vec<SocketAddr> = std::iter::once(keeper)
        .chain(others.iter().copied().filter(|&a| a != keeper))
        .collect();
    let mut at = 0;
    loop {
        let t = Instant::now();
        let addr = asked[at];
        match admin.status(addr) {
            Ok(s) => {
                last_ok = Instant::now();
                let Some(m) = s.migration else {
                    d.done();
                    return Err(AdminError::MigrationGone { addr });
                };
                d.show(Ok(&m), m.finished);
                if m.finished {
                    d.done();
                    return Ok(m);
                }
            }
            Err(e) => {
                if last_ok.elapsed() >= pace.patience {
                    d.done();
                    return Err(AdminError::LostKeeper {
                        last: e.to_string(),
                    });
                }
                d.show(Err(&format!("{addr} not answering: {e}")), false);
                // The next member, at once: the one that does not answer
                // may have died.
                at = (at + 1) % asked.len();
                continue;
            }
        }
        std::thread::sleep(pace.poll.saturating_sub(t.elapsed()));
    }
}

/// How a migration that ended went: `Ok` when it moved everything.
pub fn outcome(m: &MigrationStatus) -> Result<(), AdminError> {
    if let Some(message) = &m.error {
        return Err(AdminError::MigrationFailed {
            done: m.slots_done,
            total: m.slots_total,
            message: message.clone(),
        });
    }
    if m.cancelled {
        return Err(AdminError::MigrationCancelled {
            done: m.slots_done,
            total: m.slots_total,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake;
    use kvs_client::ControlError;
    use kvs_proto::control::ControlRequest;
    use kvs_proto::MemberId;

    #[test]
    fn following_ends_with_the_migration_or_gives_up_with_a_reason() {
        let pace = Pace {
            poll: Duration::ZERO,
            patience: Duration::from_secs(60),
        };
        let keeper = fake::addr("10.0.0.1:7000");
        let mut steps = vec![
            fake::migration(64, 64, true),
            fake::migration(32, 64, false),
            fake::migration(0, 64, false),
        ];
        let mut a = fake::admin("10.0.0.1:7000", move |_, _| {
            Ok(fake::status(MemberId(0), steps.pop()))
        });
        let end = follow(&mut a, keeper, &[], pace).unwrap();
        assert_eq!((end.slots_done, end.finished), (64, true));
        assert_eq!(a.client().asked.len(), 3);
        assert!(a
            .client()
            .asked
            .iter()
            .all(|(at, r)| *at == keeper && *r == ControlRequest::Status));
        // The keeper has no migration to report (it restarted).
        let mut a = fake::admin("10.0.0.1:7000", |_, _| Ok(fake::status(MemberId(0), None)));
        assert!(matches!(
            follow(&mut a, keeper, &[], pace),
            Err(AdminError::MigrationGone { .. })
        ));
        // The keeper does not answer for longer than the patience.
        let mut a = fake::admin("10.0.0.1:7000", |addr, _| {
            Err(ControlError::Timeout {
                addr,
                after: Duration::from_secs(1),
            })
        });
        let e = follow(
            &mut a,
            keeper,
            &[],
            Pace {
                poll: Duration::from_millis(1),
                patience: Duration::from_millis(20),
            },
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "lost the keeper while following the migration: 10.0.0.1:7000: no answer"
            ),
            "{e}"
        );
        assert!(a.client().asked.len() > 1);
        // A keeper that comes back within the patience is followed on.
        let mut n = 0;
        let mut a = fake::admin("10.0.0.1:7000", move |addr, _| {
            n += 1;
            match n {
                1 | 2 => Err(ControlError::Timeout {
                    addr,
                    after: Duration::from_secs(1),
                }),
                _ => Ok(fake::status(MemberId(0), Some(fake::migration(8, 8, true)))),
            }
        });
        assert!(follow(&mut a, keeper, &[], pace).is_ok());
        // A keeper that died: the other members report the migration the
        // new leader carries on.
        let other = fake::addr("10.0.0.2:7000");
        let mut n = 0;
        let mut a = fake::admin("10.0.0.1:7000", move |addr, _| {
            n += 1;
            match (addr == keeper, n) {
                (true, _) => Err(ControlError::Timeout {
                    addr,
                    after: Duration::from_secs(1),
                }),
                (false, 2) => Ok(fake::status(
                    MemberId(1),
                    Some(fake::migration(4, 8, false)),
                )),
                (false, _) => Ok(fake::status(MemberId(1), Some(fake::migration(8, 8, true)))),
            }
        });
        let end = follow(&mut a, keeper, &[keeper, other], pace).unwrap();
        assert_eq!((end.slots_done, end.finished), (8, true));
        let at: Vec<SocketAddr> = a.client().asked.iter().map(|(at, _)| *at).collect();
        assert_eq!(at[..2], [keeper, other]);
        assert!(at[2..].iter().all(|&x| x == other), "{at:?}");
    }

    fn mig(done: u32, total: u32) -> MigrationStatus {
        MigrationStatus {
            moves: vec![(0, total, MemberId(1))],
            slots_total: total,
            slots_done: done,
            slots_moving: 16,
            records: 1000,
            bytes: 10_000_000,
            seconds: 4.0,
            started_ms: 0,
            finished: false,
            cancelled: false,
            error: None,
            stalled: None,
        }
    }

    #[test]
    fn bars_fill_in_proportion() {
        assert_eq!(bar(0, 10, 10), "[----------]");
        assert_eq!(bar(5, 10, 10), "[#####-----]");
        assert_eq!(bar(10, 10, 10), "[##########]");
        assert_eq!(bar(1, 3, 4), "[#---]");
        assert_eq!(bar(20, 10, 4), "[####]");
        assert_eq!(bar(0, 0, 4), "[####]");
        assert_eq!(bar(u64::MAX - 1, u64::MAX, 4), "[###-]");
        assert_eq!(percent(255, 256), 99);
        assert_eq!(percent(256, 256), 100);
        assert_eq!(percent(0, 0), 100);
    }

    #[test]
    fn the_eta_follows_the_pace_so_far() {
        assert_eq!(eta(64, 256, 4.0), Some(12.0));
        assert_eq!(eta(0, 256, 4.0), None);
        assert_eq!(eta(256, 256, 4.0), None);
        assert_eq!(eta(1, 2, 0.0), None);
    }

    #[test]
    fn a_summary_has_the_bar_rate_and_eta() {
        let s = summary(&mig(64, 256), 8);
        assert_eq!(
            s,
            "[##------]  25%  64/256 slots (16 moving), 9.54 MiB in 1000 records, \
             2.50 MB/s, 4.0s elapsed, ETA 12s"
        );
        let mut m = mig(256, 256);
        m.finished = true;
        let s = summary(&m, 8);
        assert!(s.starts_with("[########] 100%  256/256 slots, "), "{s}");
        assert!(!s.contains("ETA"), "{s}");
        assert!(!s.contains("moving"), "{s}");
    }

    #[test]
    fn the_terminal_line_is_short() {
        let s = compact(&mig(64, 256), TTY_WIDTH);
        assert_eq!(
            s,
            "[#####---------------]  25% 64/256 slots 9.54 MiB 2.50 MB/s ETA 12s"
        );
        let mut m = mig(u32::MAX / 2, u32::MAX);
        m.bytes = u64::MAX;
        m.seconds = 1e-9;
        assert!(compact(&m, TTY_WIDTH).chars().count() <= TTY_WIDTH);
        assert_eq!(compact(&m, 10), "[#########");
    }

    #[test]
    fn an_ended_migration_succeeded_only_if_neither_cancelled_nor_failed() {
        let mut m = mig(256, 256);
        m.finished = true;
        assert!(outcome(&m).is_ok());
        m.cancelled = true;
        m.slots_done = 64;
        assert_eq!(
            outcome(&m).unwrap_err().to_string(),
            "migration cancelled after 64 of 256 slots moved"
        );
        m.error = Some("member 1 went away".into());
        assert_eq!(
            outcome(&m).unwrap_err().to_string(),
            "migration failed after 64 of 256 slots: member 1 went away"
        );
    }
}
