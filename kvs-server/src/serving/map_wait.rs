//! Replication messages that wait for a newer map. After a hand-over or a
//! failover, the new primary forwards writes under the map that made it
//! primary, and a backup that has not installed that map yet would refuse
//! them (its map names another primary): the write would count as missed,
//! and the backup would be copied anew for nothing. So a backup parks a
//! message whose sender's epoch is newer than its own map, with a copy of
//! its bytes (a request's payload is only readable until the next poll),
//! and handles the parked messages again, in the order they came, once it
//! installs a map. The control thread installs each committed map on every
//! worker within milliseconds; a message that waits [`MAX_WAIT`] anyway,
//! or arrives past [`MAX_PARKED`], is refused (FENCED) as before.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Messages parked at most.
const MAX_PARKED: usize = 4096;
/// How long a message waits for the map at most.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(1);

/// One parked message, answered through a `H` (copyrpc's `H`).
#[derive(Debug)]
pub(crate) struct ParkedMessage<H> {
    pub handle: H,
    /// The message's bytes.
    pub req: Vec<u8>,
    since: Instant,
}

/// The parked messages, oldest first (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct AwaitingMap<H> {
    parked: VecDeque<ParkedMessage<H>>,
    spare: Vec<Vec<u8>>,
}

impl<H> Default for AwaitingMap<H> {
    fn default() -> Self {
        AwaitingMap {
            parked: VecDeque::new(),
            spare: Vec::new(),
        }
    }
}

impl<H> AwaitingMap<H> {
    /// Whether any message waits.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.parked.is_empty()
    }

    /// Parks message `req` (answered through `handle`) at `now`; gives the
    /// handle back when too many wait (it is refused instead).
    pub fn park(&mut self, handle: H, req: &[u8], now: Instant) -> Result<(), H> {
        if self.parked.len() >= MAX_PARKED {
            return Err(handle);
        }
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(req);
        self.parked.push_back(ParkedMessage {
            handle,
            req: b,
            since: now,
        });
        Ok(())
    }

    /// Every parked message, oldest first, to be handled again (a new map
    /// is in); one that still waits is parked again through
    /// [`again`](Self::again).
    pub fn take_all(&mut self) -> VecDeque<ParkedMessage<H>> {
        std::mem::take(&mut self.parked)
    }

    /// Parks `m` again, keeping its age; gives its handle back when it has
    /// waited [`MAX_WAIT`] as of `now`.
    pub fn again(&mut self, m: ParkedMessage<H>, now: Instant) -> Result<(), H> {
        if now.duration_since(m.since) >= MAX_WAIT {
            self.spare.push(m.req);
            return Err(m.handle);
        }
        self.parked.push_back(m);
        Ok(())
    }

    /// The handles of the messages that have waited [`MAX_WAIT`] as of
    /// `now`, oldest first (every one behind them is younger).
    pub fn expired(&mut self, now: Instant) -> Vec<H> {
        let mut out = Vec::new();
        while self
            .parked
            .front()
            .is_some_and(|m| now.duration_since(m.since) >= MAX_WAIT)
        {
            let m = self.parked.pop_front().expect("checked");
            self.spare.push(m.req);
            out.push(m.handle);
        }
        out
    }

    /// A message's buffer, for reuse.
    pub fn recycle(&mut self, req: Vec<u8>) {
        self.spare.push(req);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_wait_in_order_and_not_forever() {
        let t0 = Instant::now();
        let mut w = AwaitingMap::<u32>::default();
        w.park(1, b"first", t0).unwrap();
        w.park(2, b"second", t0 + Duration::from_millis(10))
            .unwrap();
        let all = w.take_all();
        let order: Vec<u32> = all.iter().map(|m| m.handle).collect();
        assert_eq!(order, [1, 2]);
        assert!(w.is_empty());
        // Still waiting: parked again, in order, with their age.
        for m in all {
            w.again(m, t0 + Duration::from_millis(20)).unwrap();
        }
        assert_eq!(w.expired(t0 + MAX_WAIT), vec![1]);
        let late = w.take_all().pop_front().unwrap();
        assert_eq!(&late.req[..], b"second");
        assert_eq!(w.again(late, t0 + MAX_WAIT * 2).unwrap_err(), 2);
        assert!(w.is_empty());
        for i in 0..MAX_PARKED as u32 {
            w.park(i, b"x", t0).unwrap();
        }
        assert!(w.park(9, b"y", t0).is_err(), "too many wait");
    }
}
