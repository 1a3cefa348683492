//! Reads of a key whose write still awaits its backups: a primary may not
//! answer them with that value (a failover could take it back) nor with
//! the one before (the store keeps only the newest). Rather than answer
//! TRY_AGAIN and have the client come back after a backoff, the worker
//! parks such a read, with a copy of its bytes (a request's payload is only
//! readable until the next poll) in a buffer reused from one read to the
//! next, and handles it again once no write of its key is in flight: a
//! backup's round trip later, not a client's backoff.
//!
//! A read that finds a newer write in flight each time it is handled
//! again (a key written without pause) is answered TRY_AGAIN after
//! [`MAX_ROUNDS`]; past [`MAX_PARKED`] reads, new ones are too.

/// Reads parked at most; more are answered TRY_AGAIN.
const MAX_PARKED: usize = 4096;
/// Times a read is parked again before it is answered TRY_AGAIN.
const MAX_ROUNDS: u8 = 8;

/// One parked read, answered through a `H` (copyrpc's `H`).
#[derive(Debug)]
pub(crate) struct ParkedRead<H> {
    /// The fingerprint of its key.
    pub fp: u64,
    pub handle: H,
    /// The request's bytes.
    pub req: Vec<u8>,
    rounds: u8,
}

/// The parked reads (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct ReadsWaiting<H> {
    parked: Vec<ParkedRead<H>>,
    spare: Vec<Vec<u8>>,
}

impl<H> Default for ReadsWaiting<H> {
    fn default() -> Self {
        ReadsWaiting {
            parked: Vec::new(),
            spare: Vec::new(),
        }
    }
}

impl<H> ReadsWaiting<H> {
    /// Whether any read waits.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.parked.is_empty()
    }

    /// Parks the read `req` (answered through `handle`) of the key of
    /// fingerprint `fp`; gives the handle back when it must be answered
    /// TRY_AGAIN instead (too many parked).
    pub fn park(&mut self, fp: u64, handle: H, req: &[u8]) -> Result<(), H> {
        if self.parked.len() >= MAX_PARKED {
            return Err(handle);
        }
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(req);
        self.parked.push(ParkedRead {
            fp,
            handle,
            req: b,
            rounds: 0,
        });
        Ok(())
    }

    /// Moves the reads whose key `in_flight` no longer says is written into
    /// `due`, to be handled again.
    pub fn take_due(&mut self, in_flight: impl Fn(u64) -> bool, due: &mut Vec<ParkedRead<H>>) {
        let mut i = 0;
        while i < self.parked.len() {
            if in_flight(self.parked[i].fp) {
                i += 1;
            } else {
                due.push(self.parked.swap_remove(i));
            }
        }
    }

    /// A read handled again found a newer write of its key in flight: parked
    /// once more, unless it has waited [`MAX_ROUNDS`] times (or too many
    /// wait); then its handle comes back, to be answered TRY_AGAIN.
    pub fn again(&mut self, mut r: ParkedRead<H>) -> Result<(), H> {
        if r.rounds >= MAX_ROUNDS || self.parked.len() >= MAX_PARKED {
            self.spare.push(r.req);
            return Err(r.handle);
        }
        r.rounds += 1;
        self.parked.push(r);
        Ok(())
    }

    /// A read's buffer, for reuse.
    pub fn recycle(&mut self, req: Vec<u8>) {
        self.spare.push(req);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_waits_until_its_key_is_written_and_not_forever() {
        let mut w = ReadsWaiting::<u32>::default();
        w.park(7, 1, b"read k").unwrap();
        w.park(9, 2, b"read j").unwrap();
        let mut due = Vec::new();
        w.take_due(|fp| fp == 7, &mut due);
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].handle, &due[0].req[..]), (2, &b"read j"[..]));
        // Key 7 is written again and again: parked anew, up to the limit.
        let mut r = {
            due.clear();
            w.take_due(|_| false, &mut due);
            due.pop().unwrap()
        };
        assert_eq!(r.handle, 1);
        for _ in 0..MAX_ROUNDS {
            w.again(r).unwrap();
            due.clear();
            w.take_due(|_| false, &mut due);
            r = due.pop().unwrap();
        }
        assert_eq!(w.again(r).unwrap_err(), 1, "answered TRY_AGAIN at last");
        assert!(w.is_empty());
        // Buffers are reused.
        w.park(1, 3, b"x").unwrap();
        assert!(w.spare.len() <= 1);
        for i in 0..MAX_PARKED as u32 {
            let _ = w.park(1, i, b"y");
        }
        assert!(w.park(1, 99, b"z").is_err(), "too many wait");
    }
}
