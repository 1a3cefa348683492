//! The slots a restarted worker keeps the records of while its member
//! rejoins, although its map no longer gives them to it.
//!
//! A member restarted from its data dir reads its control log, which may
//! be behind the group's: catching up, it applies the maps that marked it
//! failed and dropped its copies, before the one that makes it a backup
//! again. Dropping a slot's records there would throw away the copy that
//! could catch up on a few writes instead of being copied whole. So until
//! the group has applied this member's restart (and the map that places
//! its copies anew), the records of a slot it lost stay, not served; then
//! those of the slots it did not get back go.
//!
//! A member that drains to stop (SIGTERM) keeps the records of the copies
//! the drain takes away the same way, on disk, for the restarted member to
//! catch up on them. (`kvs-admin drain` leaves a running member empty.)

/// The slots kept (see the [module docs](self)).
#[derive(Debug, Default)]
pub(crate) struct Retained {
    /// Whether slots are kept: from a start that recovered records until
    /// the member's restart is applied.
    on: bool,
    slots: Vec<u32>,
}

impl Retained {
    /// Slots are kept if `on`.
    pub fn new(on: bool) -> Retained {
        Retained {
            on,
            slots: Vec::new(),
        }
    }

    /// Whether slots are kept now: from a start that recovered records
    /// until the member's restart is applied, and while it drains to stop.
    pub fn keeping(&self) -> bool {
        self.on
    }

    /// Slots are kept from now on (the member drains to stop).
    pub fn start(&mut self) {
        self.on = true;
    }

    /// Slot `slot` is no longer this worker's: whether its records stay
    /// (kept until [`end`](Self::end)) rather than go now.
    pub fn keep(&mut self, slot: u32) -> bool {
        if self.on && !self.slots.contains(&slot) {
            self.slots.push(slot);
        }
        self.on
    }

    /// Slot `slot` is this worker's again: whether its records were kept
    /// (and are not any more).
    pub fn release(&mut self, slot: u32) -> bool {
        let Some(i) = self.slots.iter().position(|&s| s == slot) else {
            return false;
        };
        self.slots.swap_remove(i);
        true
    }

    /// The member's restart is applied: nothing is kept from now on; the
    /// slots kept so far, whose records go.
    pub fn end(&mut self) -> Vec<u32> {
        self.on = false;
        std::mem::take(&mut self.slots)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_kept_only_while_on_and_given_back_or_ended() {
        let mut off = Retained::new(false);
        assert!(!off.keep(1));
        assert!(off.end().is_empty());

        let mut r = Retained::new(true);
        assert!(r.keep(1) && r.keep(2) && r.keep(1));
        assert!(r.release(2));
        assert!(!r.release(2));
        assert_eq!(r.end(), vec![1]);
        assert!(!r.keep(3), "ended");
        r.start();
        assert!(r.keep(3), "a drain");
    }
}
