//! A device's port: its link model — a line rate and a one-way latency — and
//! its state, up or down.
//!
//! Off by default: a port without a model is as fast as memory, and the engine
//! then behaves exactly as without this module. With a model, a WQE's bytes
//! take `8 × bytes / rate` to leave the port, one transfer at a time in the
//! order the NICs execute them; its completions are held back until the bytes
//! could have crossed — the responder's receive CQE one latency after the last
//! byte left, the requester's CQE when the acknowledgement is back, one more
//! latency later. Data may land in the responder's memory earlier (as a
//! NIC's DMA may), but no completion reveals it early.
//!
//! The port's state lives in the fabric's registry, so every process sending
//! through a device shares its port. In inline mode times are
//! `CLOCK_MONOTONIC` nanoseconds, the same for every process of the host; in
//! deferred mode they are the scheduler's logical clock, so a seeded run
//! stays deterministic (a fabric then belongs to one deferred process).
//!
//! A port that is *down* (a pulled cable, a failed switch port) breaks every
//! path through it: a requester whose own port or whose responder's port is
//! down gets no acknowledgement, retries after each local ACK timeout and,
//! once `retry_cnt` retries went unanswered, completes the WQE with
//! TRANSPORT_RETRY_EXC_ERR and moves its QP to ERR (the engine's transport
//! retry, `engine::errors`). Nothing reaches the responder meanwhile. Work the
//! NICs executed before the port went down has crossed already (its held
//! completions still appear). Up again, the port carries new work; QPs that
//! went to ERR stay there.
//!
//! A path may also be cut one way only
//! ([`Fabric::set_path_down`](super::fabric::Fabric::set_path_down)): packets from port A to
//! port B are lost while B's reach A, as when a link or a switch drops one
//! direction. RC needs both ways, so every QP between A and B suffers, each
//! as its packets do: a request from A to B never arrives (as with a port
//! down); a request from B to A arrives and is executed at A — the data
//! written, the receive consumed, the atomic done — but its acknowledgement
//! (or READ response, or NAK) is lost, so B's WQE fails after its retries
//! all the same, with TRANSPORT_RETRY_EXC_ERR, although A did the work. Its
//! retries are duplicates that A answers without executing them again, so
//! a cut healed before they ran out completes the WQE once. While no port is
//! down and no path is cut, port state costs the engine two words read per
//! run.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::registry::{PortEntry, Registry, MAX_DEVS};

pub use crate::types::error::{LinkSpecError, LINKS_ENV};

/// A port's link model.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Link {
    /// Line rate in Gbit/s; `None`: unlimited.
    pub gbit_per_s: Option<f64>,
    /// One-way latency.
    pub latency: Duration,
}

impl Link {
    /// A link of `gbit_per_s` with no latency.
    pub fn rate(gbit_per_s: f64) -> Link {
        Link {
            gbit_per_s: Some(gbit_per_s),
            latency: Duration::ZERO,
        }
    }

    fn rate_mbps(&self) -> u64 {
        self.gbit_per_s
            .map_or(0, |g| ((g * 1000.0).round() as u64).max(1))
    }
}

/// Parses `sim0=24,sim1=8:2us` into (device, link) pairs.
pub(crate) fn parse_links(spec: &str) -> Result<Vec<(u32, Link)>, LinkSpecError> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let syntax = || LinkSpecError::Syntax(item.to_owned());
        let (dev, rest) = item.split_once('=').ok_or_else(syntax)?;
        let n: u32 = dev
            .strip_prefix("sim")
            .and_then(|n| n.parse().ok())
            .ok_or_else(syntax)?;
        if n as usize >= MAX_DEVS {
            return Err(LinkSpecError::Device(item.to_owned()));
        }
        let (rate, lat) = match rest.split_once(':') {
            Some((r, l)) => (r, Some(l)),
            None => (rest, None),
        };
        let gbps: f64 = rate
            .parse()
            .map_err(|_| LinkSpecError::Rate(item.to_owned()))?;
        if !(gbps.is_finite() && gbps > 0.0) {
            return Err(LinkSpecError::Rate(item.to_owned()));
        }
        let latency = match lat {
            None => Duration::ZERO,
            Some(l) => parse_duration(l).ok_or_else(syntax)?,
        };
        out.push((
            n,
            Link {
                gbit_per_s: Some(gbps),
                latency,
            },
        ));
    }
    Ok(out)
}

fn parse_duration(s: &str) -> Option<Duration> {
    let (num, scale) = if let Some(v) = s.strip_suffix("ns") {
        (v, 1)
    } else if let Some(v) = s.strip_suffix("us") {
        (v, 1_000)
    } else if let Some(v) = s.strip_suffix("ms") {
        (v, 1_000_000)
    } else {
        (s, 1)
    };
    let v: u64 = num.trim().parse().ok()?;
    Some(Duration::from_nanos(v.checked_mul(scale)?))
}

/// Sets (or with `None`, removes) device `dev`'s link model in `reg`.
pub(crate) fn set(reg: &Registry, dev: u32, link: Option<Link>) {
    let p = &reg.ports[dev as usize];
    let link = link.unwrap_or_default();
    let (rate, lat) = (link.rate_mbps(), link.latency.as_nanos() as u64);
    p.rate_mbps.store(rate, Ordering::Relaxed);
    p.latency_ns.store(lat, Ordering::Relaxed);
    let on = u32::from(rate != 0 || lat != 0);
    if p.modeled.swap(on, Ordering::AcqRel) != on {
        if on == 1 {
            reg.header.modeled_ports.fetch_add(1, Ordering::Release);
        } else {
            reg.header.modeled_ports.fetch_sub(1, Ordering::Release);
        }
    }
}

/// Device `dev`'s link model, if it has one.
pub(crate) fn get(reg: &Registry, dev: u32) -> Option<Link> {
    let p = &reg.ports[dev as usize];
    if p.modeled.load(Ordering::Acquire) == 0 {
        return None;
    }
    let rate = p.rate_mbps.load(Ordering::Relaxed);
    Some(Link {
        gbit_per_s: (rate != 0).then(|| rate as f64 / 1000.0),
        latency: Duration::from_nanos(p.latency_ns.load(Ordering::Relaxed)),
    })
}

/// Takes device `dev`'s port down (`down`) or up in `reg`.
pub(crate) fn set_down(reg: &Registry, dev: u32, down: bool) {
    let p = &reg.ports[dev as usize];
    let v = u32::from(down);
    // The process that changes the state counts it, once.
    if p.down.swap(v, Ordering::AcqRel) != v {
        if down {
            reg.header.down_ports.fetch_add(1, Ordering::Release);
        } else {
            reg.header.down_ports.fetch_sub(1, Ordering::Release);
        }
    }
}

/// Whether device `dev`'s port is down (a device the fabric cannot have is
/// not).
pub(crate) fn is_down(reg: &Registry, dev: u32) -> bool {
    reg.ports
        .get(dev as usize)
        .is_some_and(|p| p.down.load(Ordering::Acquire) != 0)
}

/// Cuts (`down`) or restores the one-way path from device `from` to device
/// `to` in `reg`: packets from `from`'s port to `to`'s are lost.
pub(crate) fn set_cut(reg: &Registry, from: u32, to: u32, down: bool) {
    let p = &reg.ports[from as usize];
    let bit = 1u32 << to;
    // The process that changes the state counts it, once.
    if down {
        if p.cut_to.fetch_or(bit, Ordering::AcqRel) & bit == 0 {
            reg.header.cut_paths.fetch_add(1, Ordering::Release);
        }
    } else if p.cut_to.fetch_and(!bit, Ordering::AcqRel) & bit != 0 {
        reg.header.cut_paths.fetch_sub(1, Ordering::Release);
    }
}

/// Whether the one-way path from device `from` to device `to` is cut
/// ([`set_cut`]; devices the fabric cannot have are not).
pub(crate) fn is_cut(reg: &Registry, from: u32, to: u32) -> bool {
    (to as usize) < MAX_DEVS
        && reg
            .ports
            .get(from as usize)
            .is_some_and(|p| p.cut_to.load(Ordering::Acquire) & (1 << to) != 0)
}

/// Whether packets from device `from` to device `to` are lost: either end's
/// port is down (a device's loopback to itself included), or that direction
/// is cut.
#[inline]
pub(crate) fn lost(reg: &Registry, from: u32, to: u32) -> bool {
    is_down(reg, from) || is_down(reg, to) || is_cut(reg, from, to)
}

/// Whether some port of `reg` is down or some path cut: while not, the
/// engine need not look at port state at all (read once per run).
#[inline]
pub(crate) fn any_broken(reg: &Registry) -> bool {
    reg.header.down_ports.load(Ordering::Relaxed) != 0
        || reg.header.cut_paths.load(Ordering::Relaxed) != 0
}

/// When a transfer's completions may appear (ns on the NIC's wire clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reveal {
    /// The responder's receive CQE.
    pub(crate) responder: u64,
    /// The requester's CQE.
    pub(crate) requester: u64,
}

/// A port with a link model.
pub(crate) struct Port<'a> {
    e: &'a PortEntry,
    rate_mbps: u64,
    latency_ns: u64,
}

impl<'a> Port<'a> {
    /// Device `dev`'s port, if it has a link model.
    #[inline]
    pub(crate) fn of(reg: &'a Registry, dev: u32) -> Option<Port<'a>> {
        let e = reg.ports.get(dev as usize)?;
        if e.modeled.load(Ordering::Acquire) == 0 {
            return None;
        }
        Some(Port {
            e,
            rate_mbps: e.rate_mbps.load(Ordering::Relaxed),
            latency_ns: e.latency_ns.load(Ordering::Relaxed),
        })
    }

    /// Queues `bytes` on the port no earlier than `now`; returns when the last
    /// byte has left. The port sends one transfer at a time, in the order they
    /// are queued.
    pub(crate) fn send(&self, now: u64, bytes: u64) -> u64 {
        let wire = if self.rate_mbps == 0 {
            0
        } else {
            // ns = bits / (Mbit/s) × 1000; u128 so that 2 GiB cannot overflow.
            (u128::from(bytes) * 8_000 / u128::from(self.rate_mbps)) as u64
        };
        let mut busy = self.e.busy_until_ns.load(Ordering::Relaxed);
        loop {
            let done = busy.max(now) + wire;
            match self.e.busy_until_ns.compare_exchange_weak(
                busy,
                done,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return done,
                Err(b) => busy = b,
            }
        }
    }

    /// A WRITE, SEND or atomic of `bytes` through this (the requester's)
    /// port, started at `now`.
    pub(crate) fn push(&self, now: u64, bytes: u64) -> Reveal {
        let done = self.send(now, bytes);
        Reveal {
            responder: done + self.latency_ns,
            requester: done + 2 * self.latency_ns,
        }
    }

    /// A READ of `bytes` answered through this (the responder's) port: the
    /// request takes `request_latency_ns` to arrive, the data one latency to
    /// come back after it left.
    pub(crate) fn pull(&self, now: u64, request_latency_ns: u64, bytes: u64) -> u64 {
        self.send(now + request_latency_ns, bytes) + self.latency_ns
    }

    /// The one-way latency in ns.
    pub(crate) fn latency_ns(&self) -> u64 {
        self.latency_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_say_why() {
        let l = parse_links("sim0=24, sim1=8:2us,sim3=100:500").unwrap();
        assert_eq!(l[0], (0, Link::rate(24.0)));
        assert_eq!(
            l[1],
            (
                1,
                Link {
                    gbit_per_s: Some(8.0),
                    latency: Duration::from_micros(2)
                }
            )
        );
        assert_eq!(l[2].1.latency, Duration::from_nanos(500));
        assert!(parse_links("").unwrap().is_empty());
        assert!(matches!(parse_links("sim0"), Err(LinkSpecError::Syntax(_))));
        assert!(matches!(
            parse_links("eth0=1"),
            Err(LinkSpecError::Syntax(_))
        ));
        assert!(matches!(
            parse_links("sim8=1"),
            Err(LinkSpecError::Device(_))
        ));
        assert!(matches!(
            parse_links("sim0=-1"),
            Err(LinkSpecError::Rate(_))
        ));
        assert!(matches!(
            parse_links("sim0=fast"),
            Err(LinkSpecError::Rate(_))
        ));
        assert!(matches!(
            parse_links("sim0=1:2xs"),
            Err(LinkSpecError::Syntax(_))
        ));
    }

    #[test]
    fn port_state_is_counted_once_per_change() {
        // SAFETY: all-zero bytes are a valid Registry of atomics (as a fresh
        // fabric's mapping is).
        let reg: Box<Registry> = unsafe { Box::new_zeroed().assume_init() };
        let downs = || reg.header.down_ports.load(Ordering::Relaxed);
        assert!(!is_down(&reg, 1) && downs() == 0);
        set_down(&reg, 1, true);
        set_down(&reg, 1, true);
        assert!(
            is_down(&reg, 1) && downs() == 1,
            "twice down is one port down"
        );
        set_down(&reg, 3, true);
        assert_eq!(downs(), 2);
        assert!(lost(&reg, 0, 1) && lost(&reg, 1, 0) && lost(&reg, 1, 1));
        assert!(!lost(&reg, 0, 2) && !lost(&reg, 2, 0));
        set_down(&reg, 1, false);
        set_down(&reg, 1, false);
        set_down(&reg, 0, false);
        assert!(
            !is_down(&reg, 1) && downs() == 1,
            "up twice, and a port never down"
        );
        assert!(!is_down(&reg, MAX_DEVS as u32));
        set_down(&reg, 3, false);
        assert_eq!(downs(), 0);
    }

    #[test]
    fn a_cut_is_one_way_and_counted_once_per_change() {
        // SAFETY: all-zero bytes are a valid Registry of atomics (as a fresh
        // fabric's mapping is).
        let reg: Box<Registry> = unsafe { Box::new_zeroed().assume_init() };
        let cuts = || reg.header.cut_paths.load(Ordering::Relaxed);
        assert!(!any_broken(&reg));
        set_cut(&reg, 2, 5, true);
        set_cut(&reg, 2, 5, true);
        assert_eq!(cuts(), 1, "twice cut is one cut");
        assert!(any_broken(&reg));
        assert!(is_cut(&reg, 2, 5) && lost(&reg, 2, 5));
        assert!(
            !is_cut(&reg, 5, 2) && !lost(&reg, 5, 2),
            "the other way works"
        );
        assert!(!lost(&reg, 2, 4) && !lost(&reg, 4, 5), "other paths work");
        set_cut(&reg, 5, 2, true);
        assert_eq!(cuts(), 2);
        assert!(lost(&reg, 5, 2));
        // Devices the fabric cannot have are never cut.
        assert!(!is_cut(&reg, MAX_DEVS as u32, 2) && !is_cut(&reg, 2, u32::MAX));
        set_cut(&reg, 2, 5, false);
        set_cut(&reg, 2, 5, false);
        set_cut(&reg, 0, 1, false);
        assert_eq!(cuts(), 1, "restored twice, and a path never cut");
        assert!(!lost(&reg, 2, 5) && lost(&reg, 5, 2));
        set_cut(&reg, 5, 2, false);
        assert!(cuts() == 0 && !any_broken(&reg));
        // A port down breaks both ways, as before.
        set_down(&reg, 5, true);
        assert!(any_broken(&reg) && lost(&reg, 2, 5) && lost(&reg, 5, 2));
        set_down(&reg, 5, false);
    }

    #[test]
    fn a_port_sends_one_transfer_at_a_time_at_its_rate() {
        let e = PortEntry::default();
        let p = Port {
            e: &e,
            rate_mbps: 8_000, // 8 Gbit/s: 1 byte per ns
            latency_ns: 100,
        };
        // Two transfers posted at once leave one after the other.
        assert_eq!(p.send(1_000, 4096), 5_096);
        let r = p.push(1_000, 4096);
        assert_eq!(r.responder, 9_192 + 100);
        assert_eq!(r.requester, 9_192 + 200);
        // An idle port starts at `now`.
        assert_eq!(p.send(100_000, 8), 100_008);
        // A READ's data leaves after the request arrived.
        assert_eq!(p.pull(200_000, 50, 1000), 201_050 + 100);
    }
}
