//! The write path's accounting, with no I/O: the writes waiting for their
//! backups' answers, which backups each one counts on, and when and how
//! each is settled. The forwarder ([`super::write_path`]) does the sending
//! and the answering; this table decides.
//!
//! Call order, per write: [`add`](PendingWrites::add); for each backup it
//! is sent to, [`sent`](PendingWrites::sent) (with whether that backup
//! counts for the answer then: ready in the map the write was accepted
//! under, or its copy reported ready); [`fail`](PendingWrites::fail) for a
//! backup it could not be sent to, or one the map as it is now counts; for
//! each backup's answer, [`answer`](PendingWrites::answer); after each of
//! these, [`settle`](PendingWrites::settle), which takes the write out once
//! every backup it was sent to has answered, with its outcome.
//!
//! **The rule.** A refusal from a backup that counted when the write was
//! sent fails the write (the client gets UNAVAILABLE and sends it again),
//! whatever the map says by the time the refusal arrives: the backup may be
//! the slot's primary by then, without the write. A refusal from a backup
//! that did not count (a copy under way) does not fail it.
//!
//! Entries are reused: no allocation once warm, except a failure's reason.

/// The links a pending write counts on: their ids, as given to
/// [`PendingWrites::sent`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counted {
    ids: [u16; 4],
    n: u8,
}

impl Counted {
    /// Link `id` counts.
    fn add(&mut self, id: u16) {
        if let Some(slot) = self.ids.get_mut(usize::from(self.n)) {
            *slot = id;
        }
        self.n = self.n.saturating_add(1);
    }

    /// Whether the link numbered `id` counted; past four links (never
    /// more than three backups and a migration's target), every one does.
    fn has(&self, id: u16) -> bool {
        usize::from(self.n) > self.ids.len() || self.ids[..usize::from(self.n)].contains(&id)
    }
}

/// One write waiting for its backups.
#[derive(Debug)]
struct Pending<T> {
    /// What the forwarder keeps with it (the client's handle, its answer).
    what: T,
    /// Backups that have not answered.
    waiting: u16,
    /// Why a backup did not apply it.
    failed: Option<String>,
    /// The links of the backups it was sent to that counted for the
    /// answer then: a refusal from one fails the write even if the map
    /// has changed since.
    counted: Counted,
}

/// The writes waiting for their backups' answers, by index (see the
/// [module docs](self)).
#[derive(Debug)]
pub(crate) struct PendingWrites<T> {
    writes: Vec<Option<Pending<T>>>,
    free: Vec<u32>,
}

impl<T> Default for PendingWrites<T> {
    fn default() -> Self {
        PendingWrites {
            writes: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> PendingWrites<T> {
    /// A new pending write, sent to no backup yet; its index.
    pub fn add(&mut self, what: T) -> u32 {
        let p = Pending {
            what,
            waiting: 0,
            failed: None,
            counted: Counted::default(),
        };
        match self.free.pop() {
            Some(i) => {
                self.writes[i as usize] = Some(p);
                i
            }
            None => {
                self.writes.push(Some(p));
                (self.writes.len() - 1) as u32
            }
        }
    }

    /// Write `idx` was sent on link `link`, whose backup counted for its
    /// answer then (`counts`) or not; it waits for that answer.
    pub fn sent(&mut self, idx: u32, link: u16, counts: bool) {
        if let Some(p) = self.get_mut(idx) {
            p.waiting += 1;
            if counts {
                p.counted.add(link);
            }
        }
    }

    /// Write `idx` fails (`why`), whatever its backups answer: the client
    /// gets UNAVAILABLE. The first reason stays.
    pub fn fail(&mut self, idx: u32, why: impl FnOnce() -> String) {
        if let Some(p) = self.get_mut(idx) {
            p.failed.get_or_insert_with(why);
        }
    }

    /// Link `link` answered write `idx`: applied (`refused` is `None`) or
    /// not. A refusal fails the write if the link counted when the write
    /// was sent. False if no such write waits (settled already).
    pub fn answer(&mut self, idx: u32, link: u16, refused: Option<&str>) -> bool {
        let Some(p) = self.get_mut(idx) else {
            return false;
        };
        p.waiting = p.waiting.saturating_sub(1);
        if let Some(why) = refused {
            if p.counted.has(link) {
                p.failed.get_or_insert_with(|| why.to_string());
            }
        }
        true
    }

    /// Takes write `idx` out if every backup it was sent to has answered:
    /// what was kept with it, and its outcome (`Err`: why it failed).
    pub fn settle(&mut self, idx: u32) -> Option<(T, Result<(), String>)> {
        let slot = self.writes.get_mut(idx as usize)?;
        if slot.as_ref().is_none_or(|p| p.waiting > 0) {
            return None;
        }
        let p = slot.take()?;
        self.free.push(idx);
        Some(match p.failed {
            None => (p.what, Ok(())),
            Some(why) => (p.what, Err(why)),
        })
    }

    /// What is kept with write `idx`, if it waits.
    pub fn get(&self, idx: u32) -> Option<&T> {
        self.writes
            .get(idx as usize)
            .and_then(|p| p.as_ref().map(|p| &p.what))
    }

    /// What is kept with every write that waits.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.writes.iter().flatten().map(|p| &p.what)
    }

    /// How many writes wait.
    pub fn len(&self) -> usize {
        self.writes.len() - self.free.len()
    }

    fn get_mut(&mut self, idx: u32) -> Option<&mut Pending<T>> {
        self.writes.get_mut(idx as usize).and_then(Option::as_mut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFUSED: Option<&str> = Some("Fenced: not the primary");

    #[test]
    fn a_refusal_from_a_link_that_counted_fails_the_write_after_the_map_changed() {
        let mut p = PendingWrites::default();
        let w = p.add("w");
        p.sent(w, 3, true);
        p.sent(w, 5, true);
        // The map changes: link 3's backup is the slot's primary now, and
        // would not count by the new map. The table keeps no map: what
        // counted when the write was sent decides.
        assert!(p.answer(w, 5, None));
        assert_eq!(p.settle(w), None, "link 3 has not answered");
        assert!(p.answer(w, 3, REFUSED));
        let (what, outcome) = p.settle(w).expect("every link answered");
        assert_eq!(what, "w");
        assert_eq!(outcome, Err("Fenced: not the primary".to_string()));
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn a_refusal_from_a_link_that_did_not_count_leaves_the_write_ok() {
        let mut p = PendingWrites::default();
        let w = p.add(1);
        p.sent(w, 3, true);
        p.sent(w, 4, false);
        assert!(p.answer(w, 4, REFUSED));
        assert_eq!(p.settle(w), None);
        assert!(p.answer(w, 3, None));
        assert_eq!(p.settle(w), Some((1, Ok(()))));
    }

    #[test]
    fn a_write_every_backup_applied_is_ok_once_all_answered() {
        let mut p = PendingWrites::default();
        let w = p.add(());
        for link in [1, 2, 3] {
            p.sent(w, link, true);
        }
        for link in [3, 1] {
            assert!(p.answer(w, link, None));
            assert_eq!(p.settle(w), None);
        }
        assert!(p.answer(w, 2, None));
        assert_eq!(p.settle(w), Some(((), Ok(()))));
        // Settled: a late answer finds nothing.
        assert!(!p.answer(w, 2, REFUSED));
        assert_eq!(p.settle(w), None);
    }

    #[test]
    fn a_write_sent_to_no_backup_settles_at_once() {
        let mut p = PendingWrites::default();
        let w = p.add(7);
        assert_eq!(p.settle(w), Some((7, Ok(()))));
        let w = p.add(8);
        p.fail(w, || "no connection to the backup on member 2 yet".into());
        let (_, outcome) = p.settle(w).unwrap();
        assert!(outcome.unwrap_err().contains("no connection"));
    }

    #[test]
    fn past_four_links_every_refusal_counts() {
        // Never more than three backups and a migration's target count;
        // past four the table cannot tell which did, so every refusal
        // fails the write rather than lose it.
        let mut p = PendingWrites::default();
        let w = p.add(());
        for link in 1..=5 {
            p.sent(w, link, true);
        }
        p.sent(w, 6, false);
        for link in 1..=5 {
            p.answer(w, link, None);
        }
        p.answer(w, 6, REFUSED);
        assert!(p.settle(w).unwrap().1.is_err());

        // Four links: exactly the ones that counted do.
        let w = p.add(());
        for link in 1..=4 {
            p.sent(w, link, link != 4);
        }
        p.answer(w, 4, REFUSED);
        for link in 1..=3 {
            p.answer(w, link, None);
        }
        assert_eq!(p.settle(w), Some(((), Ok(()))));
        let w = p.add(());
        for link in 1..=4 {
            p.sent(w, link, true);
        }
        for link in 1..=3 {
            p.answer(w, link, None);
        }
        p.answer(w, 4, REFUSED);
        assert!(p.settle(w).unwrap().1.is_err());
    }

    #[test]
    fn the_first_reason_stays_and_indices_are_reused() {
        let mut p = PendingWrites::default();
        let a = p.add('a');
        let b = p.add('b');
        p.sent(a, 1, true);
        p.sent(a, 2, true);
        p.answer(a, 1, Some("first"));
        p.answer(a, 2, Some("second"));
        assert_eq!(p.settle(a), Some(('a', Err("first".to_string()))));
        assert_eq!(p.get(b), Some(&'b'));
        let c = p.add('c');
        assert_eq!(c, a, "a settled entry is reused");
        assert_eq!(p.iter().count(), 2);
    }
}
