//! A worker's part in replication, with no I/O: as a slot's primary, the
//! sequence numbers of its writes and the keys whose writes its backups
//! have not all acknowledged; as a backup, whose stream of writes it
//! follows for each slot and how far it has applied it.
//!
//! The write path (the worker does the sending):
//! 1. The primary applies a client's write, numbers it (the slot's next
//!    sequence number), and forwards it to every backup of the slot in its
//!    map. The client's answer waits for every backup's.
//! 2. A backup applies writes of a slot only from the member its map names
//!    as the slot's primary, only once the primary began copying the slot
//!    to it (which fixes where the stream starts), and only in order
//!    (each write's number one past the last applied). Anything else is
//!    refused, and the primary does not answer the write as done.
//! 3. Until every backup acknowledged it, a write's key is *in flight*:
//!    reads of it are answered TRY_AGAIN, so nobody reads a value the
//!    backups may not have (a failover would take it back).
//!
//! The fence is step 2's first rule: once the group promotes a backup, its
//! map names it as the primary, and writes from the deposed primary are
//! refused there; the deposed one cannot get a write acknowledged.
//!
//! A copy to a new backup: the begin (in the stream, at the slot's current
//! number) names a snapshot of the slot that the backup pulls over the bulk
//! port (mpib) while the stream's writes go on being applied; a pulled
//! record never overwrites a key the stream wrote or deleted since the
//! begin ([`Store::begin_copy`]). The primary asks (the copy's end) until
//! the backup says every pulled record is in.

use kvs_proto::replica::{CatchUp, CopyBegin, Header, Kind, Replicate, FILL_ABSENT};
use kvs_proto::{MemberId, Owner, ShardMap, Ticket};

use super::history::{successor, History};
use super::refusal::{ApplyError, Refusal};
use crate::bulk::TransferError;
use crate::dedup::{Dedup, IdMap};
use crate::store::Position;
use crate::store::{Patch, Store};

/// Where a backup is in a primary's stream for one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Follow {
    primary: Owner,
    /// The last write applied.
    applied: u64,
    /// The primary's stream, as its copy's begin named it, or as this
    /// copy names the stream of a new primary whose term continues the one
    /// it followed ([`successor`]); 0: not known (a copy begun without one,
    /// or still arriving when the primary changed): the copy's position is
    /// not kept then.
    stream: u64,
}

/// A copy arriving at this backup, for one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CopyIn {
    /// Begun: the snapshot of this begin is pulled (from the first end
    /// that asks about it on).
    Pulling(CopyBegin),
    /// Every pulled record is in.
    Pulled,
    /// The pull failed.
    Failed(String),
}

/// A pull the worker is to start: the snapshot `begin` names, on the bulk
/// port of member `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PullStart {
    pub begin: CopyBegin,
    pub from: MemberId,
}

/// Why a slot is held (nothing served).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hold {
    /// The backup member that missed a write.
    member: MemberId,
    /// Its copy was complete and reported ready, but the map did not say
    /// so yet when it missed the write: held until the map says it (then
    /// it is reported stale), or until the slot's epoch moves past this
    /// one (the report can no longer count).
    awaiting: Option<u32>,
}
/// A worker's replication state (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct SlotState {
    me: Owner,
    /// Per slot, as its primary: the last write's number.
    seq: Vec<u64>,
    /// Per slot, as a backup: the stream followed.
    follow: Vec<Option<Follow>>,
    /// Fingerprints of keys with writes in flight, and how many.
    inflight: IdMap<u32>,
    /// Per slot: held (nothing served) until the map shows this backup
    /// member, which missed a write, as not ready; and how many are.
    held: Vec<Option<Hold>>,
    holding: u32,
    /// Held slots whose backup the map now shows ready: to be reported
    /// stale.
    stale_due: Vec<(MemberId, u32)>,
    /// Per slot, as a backup: the copy arriving.
    copy: Vec<Option<CopyIn>>,
    /// Tickets being pulled, and pulls to start (asked about this turn).
    pulling: Vec<Ticket>,
    starts: Vec<PullStart>,
    /// As a primary: the last writes' keys, for backups to catch up.
    history: History,
    /// As a backup: slots whose copy's position moved this turn, once each
    /// ([`record_positions`](Self::record_positions)).
    due: Vec<u32>,
    is_due: Vec<bool>,
    /// The slots the last [`install`](Self::install) left this worker no
    /// copy of: where their records stood (known streams only), by slot.
    parted: Vec<(u32, Position)>,
    /// As a primary: the slots whose position is not journaled since their
    /// last write, and how quiet each is.
    unpositioned: Vec<u32>,
    quiet: Vec<Quiet>,
}

/// How far a primary slot is from having its position journaled
/// ([`SlotState::position_quiet`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quiet {
    /// Journaled since its last write (or not this worker's primary slot).
    Positioned,
    /// Written since the last pass.
    Written,
    /// Not written since the last pass: journaled at the next.
    Waiting,
}

impl SlotState {
    /// Nothing followed, nothing in flight, for a map of `slots` slots.
    pub fn new(me: Owner, slots: u32) -> SlotState {
        SlotState {
            me,
            seq: vec![0; slots as usize],
            follow: vec![None; slots as usize],
            inflight: IdMap::with_capacity_and_hasher(1024, Default::default()),
            held: vec![None; slots as usize],
            holding: 0,
            stale_due: Vec::new(),
            copy: vec![None; slots as usize],
            pulling: Vec::new(),
            starts: Vec::new(),
            history: History::new(slots, 0),
            due: Vec::new(),
            is_due: vec![false; slots as usize],
            parted: Vec::new(),
            unpositioned: Vec::new(),
            quiet: vec![Quiet::Positioned; slots as usize],
        }
    }

    /// Keeps the last `capacity` bytes of writes' keys as a primary, so
    /// that a backup restarted from its files can catch up.
    pub fn keep_history(&mut self, capacity: usize) {
        self.history = History::new(self.seq.len() as u32, capacity);
    }

    /// Whether writes are numbered and kept even for a slot with no
    /// backup (one may come back and catch up).
    #[inline]
    pub fn keeps_history(&self) -> bool {
        self.history.keeps()
    }

    /// Keeps write `seq` of `key` to `slot` in the history.
    #[inline]
    pub fn remember(&mut self, slot: u32, seq: u64, key: &[u8]) {
        if self.history.keeps() {
            self.history.push(slot, seq, key);
            self.written(slot);
        }
    }

    /// As `slot`'s primary: it was written (or its term began), so its
    /// position is journaled anew once it is quiet
    /// ([`position_quiet`](Self::position_quiet)).
    #[inline]
    fn written(&mut self, slot: u32) {
        let q = &mut self.quiet[slot as usize];
        if *q == Quiet::Positioned {
            self.unpositioned.push(slot);
        }
        *q = Quiet::Written;
    }

    /// As a primary, between turns (now and then): journals to `store`
    /// where the records of each slot written since its last position, and
    /// not written since the last call, stand: the position a new primary's
    /// term would continue from (`successor` of this term's stream at its
    /// last write), so that if this worker dies its records catch up in
    /// that term. Only quiet slots: a slot's position follows every change
    /// to it in the log (recovery drops a position that changes follow),
    /// and a position a turn costs a log record a slot a turn.
    pub fn position_quiet(&mut self, store: &mut Store) {
        let mut list = std::mem::take(&mut self.unpositioned);
        list.retain(|&s| {
            let i = s as usize;
            if self.quiet[i] == Quiet::Written {
                self.quiet[i] = Quiet::Waiting;
                return true;
            }
            self.quiet[i] = Quiet::Positioned;
            // Still this worker's primary slot (its stream has not ended),
            // and its records all here (not still being imported).
            let stream = self.history.current(s);
            if stream != 0 && self.follow[i].is_none() && !store.importing(s) {
                let p = Position {
                    stream: successor(stream, self.seq[i]),
                    applied: self.seq[i],
                };
                store.set_position(s, Some(p));
            }
            false
        });
        self.unpositioned = list;
    }

    /// As `slot`'s primary: its stream (0: no history is kept). Asked for
    /// a copy to a backup: the slot's position is journaled too, once it is
    /// quiet, written or not.
    pub fn stream(&mut self, slot: u32) -> u64 {
        if !self.history.keeps() {
            return 0;
        }
        let seq = self.seq[slot as usize];
        if self.quiet[slot as usize] == Quiet::Positioned {
            self.written(slot);
        }
        self.history.stream(slot, seq)
    }

    /// Where slot `slot`'s records stand, if the last
    /// [`install`](Self::install) left this worker no copy of the slot (as
    /// its primary or its backup): the position that records kept anyway
    /// (a member draining to stop keeps them) catch up from later. A
    /// primary's records stand in the stream of a new primary whose term
    /// began where this one's ended.
    pub fn parted(&self, slot: u32) -> Option<Position> {
        let i = self.parted.binary_search_by_key(&slot, |&(s, _)| s).ok()?;
        Some(self.parted[i].1)
    }

    /// As `slot`'s primary: the keys a backup whose copy stands at `at`
    /// lacks, up to the last write; `None` if it needs a whole copy.
    pub fn lacks(&mut self, slot: u32, at: Position) -> Option<Vec<Vec<u8>>> {
        let last = self.seq[slot as usize];
        self.history.keys_since(slot, at, last)
    }

    /// Slot `slot` is not followed any more: its position is not recorded
    /// at the turn's end.
    fn undue(&mut self, slot: u32) {
        if std::mem::take(&mut self.is_due[slot as usize]) {
            self.due.retain(|&s| s != slot);
        }
    }

    /// As slot `slot`'s backup: where its complete copy stands in a known
    /// stream.
    fn stands_following(&self, slot: u32) -> Option<Position> {
        let i = slot as usize;
        match (self.follow[i], &self.copy[i]) {
            (Some(f), None) if f.stream != 0 => Some(Position {
                stream: f.stream,
                applied: f.applied,
            }),
            _ => None,
        }
    }

    /// As a backup: slot `slot`'s copy's position moved (or ended).
    #[inline]
    fn position_moved(&mut self, slot: u32) {
        let d = &mut self.is_due[slot as usize];
        if !*d {
            *d = true;
            self.due.push(slot);
        }
    }

    /// As a backup, at the turn's end (before its log commit): the
    /// positions of the copies that moved go to `store`, after the changes
    /// they cover. Only a complete copy that knows its stream has one.
    pub fn record_positions(&mut self, store: &mut Store) {
        // Taken out and put back: the turn allocates nothing.
        let mut due = std::mem::take(&mut self.due);
        for &s in &due {
            self.is_due[s as usize] = false;
            store.set_position(s, self.stands_following(s));
        }
        due.clear();
        self.due = due;
    }

    /// The next write's number for `slot`, as its primary.
    #[inline]
    pub fn next_seq(&mut self, slot: u32) -> u64 {
        let s = &mut self.seq[slot as usize];
        *s += 1;
        *s
    }

    /// The last write's number for `slot` (where a copy starts).
    pub fn last_seq(&self, slot: u32) -> u64 {
        self.seq[slot as usize]
    }

    /// A write of `key` awaits its backups.
    #[inline]
    pub fn begin_write(&mut self, key: &[u8]) {
        *self.inflight.entry(fingerprint(key)).or_insert(0) += 1;
    }

    /// A write of the key of fingerprint `fp` is answered.
    #[inline]
    pub fn end_write(&mut self, fp: u64) {
        if let Some(n) = self.inflight.get_mut(&fp) {
            *n -= 1;
            if *n == 0 {
                self.inflight.remove(&fp);
            }
        }
    }

    /// Whether a write of `key` awaits its backups.
    #[inline]
    pub fn in_flight(&self, key: &[u8]) -> bool {
        !self.inflight.is_empty() && self.in_flight_fp(fingerprint(key))
    }

    /// Whether a write of the key of fingerprint `fp` awaits its backups.
    #[inline]
    pub fn in_flight_fp(&self, fp: u64) -> bool {
        self.inflight.contains_key(&fp)
    }

    /// The backup member `slot` is held for, if it is.
    #[inline]
    pub fn held(&self, slot: u32) -> Option<MemberId> {
        if self.holding == 0 {
            return None;
        }
        self.held[slot as usize].map(|h| h.member)
    }

    /// Holds `slot` for its ready backup on `member`, which missed a write
    /// (`None`: lets it go).
    pub fn hold(&mut self, slot: u32, member: Option<MemberId>) {
        self.set_hold(
            slot,
            member.map(|member| Hold {
                member,
                awaiting: None,
            }),
        );
    }

    /// Holds `slot` for its backup on `member`, which missed a write after
    /// its copy was reported ready under epoch `epoch`, before the map said
    /// so: until the map says it (then it is reported stale, see
    /// [`take_stale_due`](Self::take_stale_due)) or the epoch moves on.
    pub fn hold_until_ready(&mut self, slot: u32, member: MemberId, epoch: u32) {
        self.set_hold(
            slot,
            Some(Hold {
                member,
                awaiting: Some(epoch),
            }),
        );
    }

    fn set_hold(&mut self, slot: u32, hold: Option<Hold>) {
        let h = &mut self.held[slot as usize];
        match (h.is_some(), hold.is_some()) {
            (false, true) => self.holding += 1,
            (true, false) => self.holding -= 1,
            _ => {}
        }
        *h = hold;
    }

    /// Held slots whose backup (member, slot) the map now shows ready: the
    /// primary reports them stale.
    pub fn take_stale_due(&mut self) -> Option<Vec<(MemberId, u32)>> {
        (!self.stale_due.is_empty()).then(|| std::mem::take(&mut self.stale_due))
    }

    /// Pulls of copies to start (an end asked about them). From now on a
    /// begin naming one of their tickets is refused: its slot's records
    /// might have been pulled before it arrived, and dropped.
    pub fn take_starts(&mut self) -> Option<Vec<PullStart>> {
        if self.starts.is_empty() {
            return None;
        }
        self.pulling
            .extend(self.starts.iter().map(|p| p.begin.ticket));
        Some(std::mem::take(&mut self.starts))
    }

    /// Whether `slot` takes the records pulled under `ticket`.
    #[inline]
    pub fn copying_with(&self, slot: u32, ticket: &Ticket) -> bool {
        matches!(self.copy.get(slot as usize), Some(Some(CopyIn::Pulling(b))) if &b.ticket == ticket)
    }

    /// The pull of `ticket` ended: its slots' copies are complete (their
    /// records out of copy mode in `store`), or failed.
    pub fn pulled(
        &mut self,
        ticket: &Ticket,
        result: Result<(), TransferError>,
        store: &mut Store,
    ) {
        self.pulling.retain(|t| t != ticket);
        for s in 0..self.copy.len() {
            if !self.copying_with(s as u32, ticket) {
                continue;
            }
            self.copy[s] = Some(match &result {
                Ok(()) => {
                    store.end_copy(s as u32);
                    CopyIn::Pulled
                }
                Err(why) => CopyIn::Failed(why.to_string()),
            });
        }
    }

    /// The map changed from `old` to `new`: a backup promoted to primary
    /// numbers its writes on from the last it applied, in the stream that
    /// continues the one its copy followed ([`successor`]); a slot this
    /// worker no longer backs up is not followed any more; a primary that
    /// handed its slot over (it is a backup now) follows the new primary
    /// from its own last write, and a backup that stays follows the new
    /// primary from where it is, each naming the new primary's stream as
    /// the successor of where it stands (a hand-over leaves every copy the
    /// same; after a failover the new primary copies the others anew, and
    /// a write that does not follow is refused either way). A primary that
    /// leaves the slot altogether (a drain to stop keeps its records) has
    /// its position there too ([`parted`](Self::parted)).
    pub fn install(&mut self, old: &ShardMap, new: &ShardMap) {
        self.parted.clear();
        for s in 0..new.slots().min(self.seq.len() as u32) {
            let i = s as usize;
            let backs = new.backups(s).iter().any(|b| b.owner == self.me);
            let primary = new.owner_of_slot(s) == self.me;
            let was = old.owner_of_slot(s) == self.me;
            // Where this worker's copy stands when the primary changes, and
            // so what it names the next term's stream: a stream is one
            // primary's term.
            let next = if was && !primary {
                let next = successor(self.history.current(s), self.seq[i]);
                self.history.end_stream(s);
                next
            } else {
                0
            };
            if primary && !was {
                // A complete copy continues its stream.
                let from = self.follow[i].filter(|_| self.copy[i].is_none());
                self.seq[i] = self.follow[i].map_or(0, |f| f.applied);
                self.history.end_stream(s);
                self.history
                    .continue_stream(s, from.map_or(0, |f| f.stream), self.seq[i]);
                if self.history.keeps() {
                    // Where the term begins, once the slot is quiet.
                    self.written(s);
                }
            }
            if !backs {
                if !primary {
                    // No copy here any more: where the records stand, for
                    // the worker to keep with them if it keeps them.
                    let stood = if was {
                        (next != 0).then_some(Position {
                            stream: next,
                            applied: self.seq[i],
                        })
                    } else {
                        self.stands_following(s)
                    };
                    if let Some(p) = stood {
                        self.parted.push((s, p));
                    }
                }
                // Nothing followed: no position to record at the turn's end.
                self.undue(s);
                self.follow[i] = None;
                self.copy[i] = None;
            } else if was && !primary && next == 0 && self.history.keeps() {
                // No stream of its own: this worker numbered no write of
                // the slot since it started (it restarted). Its records
                // stand where its files say, not at a number of this
                // process: it follows no one until a copy begins.
                self.follow[i] = None;
                self.copy[i] = None;
            } else if was && !primary {
                self.follow[i] = Some(Follow {
                    primary: new.owner_of_slot(s),
                    applied: self.seq[i],
                    stream: next,
                });
                self.position_moved(s);
            } else if let Some(f) = self.follow[i].as_mut() {
                if f.primary == old.owner_of_slot(s) && f.primary != new.owner_of_slot(s) {
                    f.primary = new.owner_of_slot(s);
                    // A copy still arriving stands nowhere yet.
                    f.stream = match self.copy[i] {
                        None => successor(f.stream, f.applied),
                        Some(_) => 0,
                    };
                    self.position_moved(s);
                }
            }
            let Some(h) = self.held[i] else {
                continue;
            };
            let ready = new
                .backups(s)
                .iter()
                .any(|b| b.ready && b.owner.member == h.member);
            match h.awaiting {
                // A slot held for a backup the map no longer has as ready.
                None if !primary || !ready => self.hold(s, None),
                None => {}
                // The readiness it missed a write after came in: now it is
                // reported stale, as any ready backup that missed one.
                Some(_) if primary && ready => {
                    self.hold(s, Some(h.member));
                    self.stale_due.push((h.member, s));
                }
                // The report cannot count any more: a new epoch.
                Some(e) if !primary || new.epoch(s) != e => self.hold(s, None),
                Some(_) => {}
            }
        }
    }

    /// Applies a replication message as a backup of its slot, under `map`,
    /// to `store`; why not, if it is refused.
    pub fn apply(
        &mut self,
        msg: &Replicate<'_>,
        map: &ShardMap,
        store: &mut Store,
        dedup: &mut Dedup,
    ) -> Result<(), Refusal> {
        let h: Header = msg.header();
        self.check_backs(&h, map)?;
        let s = h.slot;
        let i = s as usize;
        match h.kind {
            Kind::CopyBegin => return self.copy_begin(msg, &h, store),
            Kind::CatchUp => return self.catch_up(msg, &h, store),
            Kind::CopyAsk => return Ok(()),
            _ if self.follow[i].is_none_or(|f| f.primary != h.primary) => {
                return Err(Refusal::NotBegun {
                    slot: s,
                    primary: h.primary,
                })
            }
            Kind::CopyEnd => return self.copy_end(&h),
            _ => {}
        }
        let f = self.follow[i].as_mut().expect("checked above");
        if h.kind.is_write() {
            if h.seq != f.applied + 1 {
                let last = f.applied;
                self.follow[i] = None;
                return Err(Refusal::OutOfOrder {
                    slot: s,
                    seq: h.seq,
                    last,
                });
            }
            f.applied = h.seq;
            if self.copy[i].is_none() {
                self.position_moved(s);
            }
        }
        match Self::apply_to_store(msg, &h, store, dedup) {
            Ok(()) => {
                if h.kind.is_write() {
                    dedup.record(s, h.id);
                }
                Ok(())
            }
            Err(why) => {
                // Diverged from the primary: nothing more until a new copy.
                self.follow[i] = None;
                Err(Refusal::NotApplied { slot: s, why })
            }
        }
    }

    /// Refuses a message this worker, under `map`, does not back up as the
    /// slot's primary's: a slot out of range, a primary's newer map (the
    /// message waits for it), another primary, or a slot not backed up here.
    fn check_backs(&self, h: &Header, map: &ShardMap) -> Result<(), Refusal> {
        if h.slot >= map.slots() {
            return Err(Refusal::OutOfRange { slot: h.slot });
        }
        let s = h.slot;
        let backs = map.backups(s).iter().any(|b| b.owner == self.me);
        if (map.owner_of_slot(s) != h.primary || !backs) && h.epoch > map.version() {
            return Err(Refusal::NewerMap {
                slot: s,
                epoch: h.epoch,
                version: map.version(),
            });
        }
        if map.owner_of_slot(s) != h.primary {
            return Err(Refusal::NotPrimary {
                slot: s,
                sender: h.primary,
                version: map.version(),
                here: map.epoch(s),
                there: h.epoch,
            });
        }
        if !backs {
            return Err(Refusal::NotBackup {
                slot: s,
                version: map.version(),
            });
        }
        Ok(())
    }

    /// A copy of slot `h.slot` begins: the slot starts from nothing, follows
    /// `h.primary`, and waits for its snapshot's pull.
    fn copy_begin(
        &mut self,
        msg: &Replicate<'_>,
        h: &Header,
        store: &mut Store,
    ) -> Result<(), Refusal> {
        let s = h.slot;
        let i = s as usize;
        let Some(begin) =
            CopyBegin::parse(msg.key(), msg.value()).filter(|b| (b.first..b.end).contains(&s))
        else {
            return Err(Refusal::MalformedBegin { slot: s });
        };
        if self.pulling.contains(&begin.ticket) {
            return Err(Refusal::LateBegin { slot: s });
        }
        // The copy starts from nothing; the snapshot is pulled.
        store.drop_slot(s);
        store.begin_copy(s);
        self.follow[i] = Some(Follow {
            primary: h.primary,
            applied: h.seq,
            stream: begin.stream,
        });
        self.copy[i] = Some(CopyIn::Pulling(begin));
        Ok(())
    }

    /// As slot `h.slot`'s backup: where its complete copy stands in the
    /// primary's stream `h.seq`, as the last write it holds plus one (0:
    /// nowhere, or not in that stream). A
    /// copy not being followed is one the worker recovered from its files.
    pub fn ask(&self, h: &Header, map: &ShardMap, store: &Store) -> Result<u64, Refusal> {
        self.check_backs(h, map)?;
        Ok(self
            .stands(h.slot, store)
            .filter(|p| p.stream == h.seq)
            .map_or(0, |p| p.applied + 1))
    }

    /// Where slot `slot`'s complete copy stands: the stream it follows
    /// (once its copy is complete), else the position its files gave it.
    fn stands(&self, slot: u32, store: &Store) -> Option<Position> {
        let i = slot as usize;
        match (self.follow[i], &self.copy[i]) {
            (None, None) => store.position(slot),
            _ => self.stands_following(slot),
        }
    }

    /// A catch-up of slot `h.slot` begins: its copy, which stands in the
    /// stream between the catch-up's `from` and `h.seq`, stays, follows
    /// `h.primary` from `h.seq`, and takes the records that follow. Its
    /// position is cleared until the copy's end (a crash before every
    /// record is in leaves no position, so the next copy is whole).
    fn catch_up(
        &mut self,
        msg: &Replicate<'_>,
        h: &Header,
        store: &mut Store,
    ) -> Result<(), Refusal> {
        let s = h.slot;
        let i = s as usize;
        let Some(c) = CatchUp::parse(msg.value()) else {
            return Err(Refusal::MalformedCatchUp { slot: s });
        };
        // The copy may have followed the stream past `from` since it
        // answered the ask (the writes before the begin came first): the
        // records that follow set every key written after `from` anyway.
        let here = self.stands(s, store);
        if !here.is_some_and(|p| p.stream == c.stream && (c.from..=h.seq).contains(&p.applied)) {
            let here = match here {
                Some(p) => format!("write {} of stream {:#x}", p.applied, p.stream),
                None => "nowhere (no complete copy)".to_string(),
            };
            return Err(Refusal::CatchUpFrom {
                slot: s,
                stream: c.stream,
                from: c.from,
                here,
            });
        }
        store.set_position(s, None);
        self.follow[i] = Some(Follow {
            primary: h.primary,
            applied: h.seq,
            stream: c.stream,
        });
        // Nothing to pull: the records come in the stream.
        self.copy[i] = Some(CopyIn::Pulled);
        Ok(())
    }

    /// A copy's end: done once its snapshot was pulled; the first end asked
    /// starts the pull (and is told to come again), a failed pull ends the
    /// copy.
    fn copy_end(&mut self, h: &Header) -> Result<(), Refusal> {
        let s = h.slot;
        let i = s as usize;
        match self.copy[i].take() {
            Some(CopyIn::Pulled) => {
                // Complete: its position is kept from now on.
                self.position_moved(s);
                Ok(())
            }
            Some(CopyIn::Pulling(b)) => {
                // The first end asked: every begin of the snapshot
                // the primary sent came before it, so the pull
                // starts now (a record pulled before its slot's
                // begin arrived would be dropped).
                let t = b.ticket;
                if !self.pulling.contains(&t) && !self.starts.iter().any(|p| p.begin.ticket == t) {
                    self.starts.push(PullStart {
                        begin: b,
                        from: h.primary.member,
                    });
                }
                self.copy[i] = Some(CopyIn::Pulling(b));
                Err(Refusal::Pulling { slot: s })
            }
            Some(CopyIn::Failed(why)) => {
                self.follow[i] = None;
                Err(Refusal::PullFailed { slot: s, why })
            }
            None => Err(Refusal::NoCopy { slot: s }),
        }
    }

    /// Applies the record (or request ids) `msg` carries to `store` (or
    /// `dedup`); why not, if it does not apply.
    fn apply_to_store(
        msg: &Replicate<'_>,
        h: &Header,
        store: &mut Store,
        dedup: &mut Dedup,
    ) -> Result<(), ApplyError> {
        let (s, key) = (h.slot, msg.key());
        match h.kind {
            Kind::Put => store
                .put(s, key, msg.value())
                .map_err(|e| ApplyError::OutOfMemory {
                    used: e.used,
                    limit: e.limit,
                }),
            Kind::Delete => {
                store.delete(s, key);
                Ok(())
            }
            Kind::Patch => match store.patch(s, key, h.offset as usize, msg.value()) {
                Patch::Done => Ok(()),
                other => Err(ApplyError::Patch(other)),
            },
            Kind::CopyIds => match kvs_proto::replica::ids_entries(msg.value()) {
                Some(entries) => {
                    if h.offset & kvs_proto::replica::IDS_FORGOT != 0 {
                        dedup.set_forgot(s);
                    }
                    for e in entries {
                        dedup.merge(s, &e);
                    }
                    Ok(())
                }
                None => Err(ApplyError::MalformedIds),
            },
            Kind::Fill if h.offset & FILL_ABSENT != 0 => {
                store.delete(s, key);
                Ok(())
            }
            Kind::Fill => store
                .put(s, key, msg.value())
                .map_err(|e| ApplyError::OutOfMemory {
                    used: e.used,
                    limit: e.limit,
                }),
            Kind::CopyBegin | Kind::CopyEnd | Kind::CopyAsk | Kind::CatchUp => Ok(()),
        }
    }
}

/// A key's fingerprint for the in-flight table (FNV-1a with another basis
/// than the slot hash, so keys of one slot spread).
#[inline]
pub(crate) fn fingerprint(key: &[u8]) -> u64 {
    let mut h: u64 = 0x6c62_272e_07bb_0142;
    for &b in key {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::replica::write_replicate;
    use kvs_proto::Member;
    use kvs_proto::RequestId;
    use std::net::SocketAddr;

    const P: Owner = Owner {
        member: MemberId(0),
        worker: 0,
    };
    const B: Owner = Owner {
        member: MemberId(1),
        worker: 0,
    };

    fn map() -> ShardMap {
        let mut m = ShardMap::single(SocketAddr::from(([10, 0, 0, 1], 7000)), 4, 1).unwrap();
        m.add_member(Member {
            addr: SocketAddr::from(([10, 0, 0, 2], 7000)),
            workers: 1,
            bulk_port: 0,
        })
        .unwrap();
        m.add_backup(0..4, MemberId(1)).unwrap();
        m.set_version(2);
        m
    }

    fn msg(kind: Kind, primary: Owner, seq: u64, key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        let h = Header {
            kind,
            slot: 1,
            epoch: 2,
            primary,
            seq,
            offset: 0,
            id: RequestId::default(),
        };
        write_replicate(&mut b, &h, key, value);
        b
    }

    const TICKET: Ticket = Ticket::from_bytes([9; 16]);

    fn begin(primary: Owner, seq: u64) -> Vec<u8> {
        begin_in(primary, seq, STREAM)
    }

    /// A copy's begin at write `seq` of `stream`.
    fn begin_in(primary: Owner, seq: u64, stream: u64) -> Vec<u8> {
        let c = CopyBegin {
            ticket: TICKET,
            first: 0,
            end: 4,
            records: 1,
            bytes: 2,
            stream,
        };
        msg(Kind::CopyBegin, primary, seq, &c.ticket.bytes(), &c.value())
    }

    const STREAM: u64 = 0x5eed;

    fn apply(r: &mut SlotState, m: &ShardMap, st: &mut Store, b: &[u8]) -> Result<(), Refusal> {
        r.apply(
            &Replicate::new_checked(b).unwrap(),
            m,
            st,
            &mut Dedup::default(),
        )
    }

    #[test]
    fn a_backup_follows_its_primary_in_order_from_the_copy_on() {
        let m = map();
        let mut r = SlotState::new(B, 4);
        let mut st = Store::new(4, usize::MAX);
        // No write before the copy begins.
        let e = apply(&mut r, &m, &mut st, &msg(Kind::Put, P, 1, b"k", b"v"));
        assert!(e.unwrap_err().to_string().contains("has not begun"));
        st.put(1, b"stale", b"x").unwrap();
        let bad = msg(Kind::CopyBegin, P, 5, b"", b"");
        assert_eq!(
            apply(&mut r, &m, &mut st, &bad),
            Err(Refusal::MalformedBegin { slot: 1 })
        );
        apply(&mut r, &m, &mut st, &begin(P, 5)).unwrap();
        assert_eq!(st.get(1, b"stale"), None, "the copy starts from nothing");
        apply(&mut r, &m, &mut st, &msg(Kind::Put, P, 6, b"k", b"v")).unwrap();
        // The first end asked starts the pull, and is told not yet.
        assert!(r.take_starts().is_none());
        let e = apply(&mut r, &m, &mut st, &msg(Kind::CopyEnd, P, 0, b"", b""));
        assert!(e.unwrap_err().not_yet());
        let starts = r.take_starts().unwrap();
        assert_eq!((starts.len(), starts[0].from), (1, MemberId(0)));
        assert_eq!(starts[0].begin.ticket, TICKET);
        let e = apply(&mut r, &m, &mut st, &msg(Kind::CopyEnd, P, 0, b"", b""));
        assert!(e.unwrap_err().not_yet());
        assert!(r.take_starts().is_none(), "started once");
        // A begin of the same snapshot after its pull started: refused.
        let e = apply(&mut r, &m, &mut st, &begin(P, 5)).unwrap_err();
        assert!(
            e.to_string().contains("after the snapshot's pull started"),
            "{e:?}"
        );
        // The snapshot's records land where no write went since.
        assert!(r.copying_with(1, &TICKET) && !r.copying_with(2, &TICKET));
        st.apply_pulled(1, b"a", Some(b"1"));
        st.apply_pulled(1, b"k", Some(b"old"));
        r.pulled(&TICKET, Ok(()), &mut st);
        apply(&mut r, &m, &mut st, &msg(Kind::Patch, P, 7, b"k", b"w")).unwrap();
        apply(&mut r, &m, &mut st, &msg(Kind::CopyEnd, P, 0, b"", b"")).unwrap();
        assert_eq!(st.get(1, b"k"), Some(&b"w"[..]));
        assert_eq!(st.get(1, b"a"), Some(&b"1"[..]));
        // A gap: refused, and nothing more until a new copy.
        let e = apply(&mut r, &m, &mut st, &msg(Kind::Delete, P, 9, b"k", b""));
        assert!(e.unwrap_err().to_string().contains("does not follow 7"));
        let e = apply(&mut r, &m, &mut st, &msg(Kind::Delete, P, 8, b"k", b""));
        assert!(e.is_err());
        assert_eq!(st.get(1, b"k"), Some(&b"w"[..]));
        // A failed pull fails the copy.
        apply(&mut r, &m, &mut st, &begin(P, 9)).unwrap();
        let _ = apply(&mut r, &m, &mut st, &msg(Kind::CopyEnd, P, 0, b"", b""));
        r.take_starts().unwrap();
        r.pulled(&TICKET, Err(TransferError::NoRail), &mut st);
        let e = apply(&mut r, &m, &mut st, &msg(Kind::CopyEnd, P, 0, b"", b""));
        assert!(e.unwrap_err().to_string().contains("no rail selected"));
    }

    /// A complete copy of slot 1 from `P`, at write 2 of [`STREAM`], with
    /// `a` and `b`.
    fn complete_copy(r: &mut SlotState, m: &ShardMap, st: &mut Store) {
        apply(r, m, st, &begin(P, 0)).unwrap();
        let _ = apply(r, m, st, &msg(Kind::CopyEnd, P, 0, b"", b""));
        r.take_starts().unwrap();
        r.pulled(&TICKET, Ok(()), st);
        apply(r, m, st, &msg(Kind::Put, P, 1, b"a", b"1")).unwrap();
        r.record_positions(st);
        assert_eq!(st.position(1), None, "not before the copy's end");
        apply(r, m, st, &msg(Kind::CopyEnd, P, 0, b"", b"")).unwrap();
        apply(r, m, st, &msg(Kind::Put, P, 2, b"b", b"2")).unwrap();
        r.record_positions(st);
    }

    fn ask(r: &SlotState, m: &ShardMap, st: &Store, stream: u64) -> u64 {
        let b = msg(Kind::CopyAsk, P, stream, b"", b"");
        r.ask(&Replicate::new_checked(&b).unwrap().header(), m, st)
            .unwrap()
    }

    fn catch_up(seq: u64, from: u64) -> Vec<u8> {
        let c = CatchUp {
            stream: STREAM,
            from,
        };
        msg(Kind::CatchUp, P, seq, b"", &c.value())
    }

    #[test]
    fn a_restarted_backup_catches_up_from_where_its_copy_stands() {
        let m = map();
        let mut st = Store::new(4, usize::MAX);
        let mut r = SlotState::new(B, 4);
        complete_copy(&mut r, &m, &mut st);
        let at = Position {
            stream: STREAM,
            applied: 2,
        };
        assert_eq!(st.position(1), Some(at));
        assert_eq!(ask(&r, &m, &st, STREAM), 3, "following it, at 2");
        apply(&mut r, &m, &mut st, &begin(P, 2)).unwrap();
        assert_eq!(ask(&r, &m, &st, STREAM), 0, "a copy under way");
        let mut st = Store::new(4, usize::MAX);
        let mut r = SlotState::new(B, 4);
        complete_copy(&mut r, &m, &mut st);

        // Restarted: the store came back from the files, nothing followed.
        let mut r = SlotState::new(B, 4);
        assert_eq!(ask(&r, &m, &st, STREAM), 3);
        assert_eq!(ask(&r, &m, &st, 0xbad), 0, "another stream");
        let e = apply(&mut r, &m, &mut st, &catch_up(5, 3)).unwrap_err();
        assert!(e.to_string().contains("stands at write 2"), "{e}");
        let e = apply(&mut r, &m, &mut st, &catch_up(1, 1)).unwrap_err();
        assert!(
            e.to_string().contains("stands at write 2"),
            "past the begin: {e}"
        );
        apply(&mut r, &m, &mut st, &catch_up(5, 2)).unwrap();
        r.record_positions(&mut st);
        assert_eq!(st.position(1), None, "none until every record is in");
        assert_eq!(st.get(1, b"a"), Some(&b"1"[..]), "the copy stays");
        // The keys written after 2, as they are at 5, then write 6.
        let mut gone = Vec::new();
        let h = Replicate::new_checked(&msg(Kind::Fill, P, 5, b"a", b""))
            .unwrap()
            .header();
        let h = Header {
            offset: FILL_ABSENT,
            ..h
        };
        write_replicate(&mut gone, &h, b"a", b"");
        apply(&mut r, &m, &mut st, &gone).unwrap();
        apply(&mut r, &m, &mut st, &msg(Kind::Fill, P, 5, b"c", b"3")).unwrap();
        apply(&mut r, &m, &mut st, &msg(Kind::Put, P, 6, b"d", b"4")).unwrap();
        apply(&mut r, &m, &mut st, &msg(Kind::CopyEnd, P, 0, b"", b"")).unwrap();
        r.record_positions(&mut st);
        assert_eq!(st.position(1), Some(Position { applied: 6, ..at }));
        let keys: Vec<_> = st
            .scan(b"")
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        assert_eq!(
            keys,
            [(b"b", b"2"), (b"c", b"3"), (b"d", b"4")].map(|(k, v)| (k.to_vec(), v.to_vec()))
        );
    }

    #[test]
    fn a_copy_brings_the_request_ids_of_the_writes_before_it() {
        let m = map();
        let mut r = SlotState::new(B, 4);
        let mut st = Store::new(4, usize::MAX);
        let mut d = Dedup::default();
        let mut value = Vec::new();
        let e = kvs_proto::replica::IdsEntry {
            client: 7,
            top: 41,
            floor: 0,
            applied: 1,
        };
        kvs_proto::replica::push_ids_entry(&mut value, &e);
        let msg_ids = msg(Kind::CopyIds, P, 0, b"", &value);
        let mut go =
            |b: &[u8], d: &mut Dedup| r.apply(&Replicate::new_checked(b).unwrap(), &m, &mut st, d);
        assert!(go(&msg_ids, &mut d).is_err(), "not before the begin");
        go(&begin(P, 3), &mut d).unwrap();
        go(&msg_ids, &mut d).unwrap();
        assert!(d.seen(1, RequestId::new(7, 41)) && !d.seen(1, RequestId::new(7, 42)));
        let bad = msg(Kind::CopyIds, P, 0, b"", &value[..10]);
        assert!(go(&bad, &mut d)
            .unwrap_err()
            .to_string()
            .contains("malformed"));
    }

    #[test]
    fn a_hold_on_a_backup_reported_ready_waits_for_the_map_to_say_it() {
        let m = map();
        let mut r = SlotState::new(P, 4);
        r.hold_until_ready(1, MemberId(1), m.epoch(1));
        r.hold_until_ready(2, MemberId(1), m.epoch(2));
        assert_eq!(r.held(1), Some(MemberId(1)));
        let mut ready = m.clone();
        ready.set_backup_ready(1..2, MemberId(1)).unwrap();
        ready.set_version(3);
        r.install(&m, &ready);
        // Slot 1: ready now, so reported stale and held as any ready one.
        assert_eq!(r.take_stale_due(), Some(vec![(MemberId(1), 1)]));
        assert_eq!(
            (r.held(1), r.held(2)),
            (Some(MemberId(1)), Some(MemberId(1)))
        );
        // Slot 2: a new epoch; the report cannot count: let go.
        let mut next = ready.clone();
        next.drop_backup(2..3, MemberId(1)).unwrap();
        next.set_version(4);
        r.install(&ready, &next);
        assert_eq!((r.held(1), r.held(2)), (Some(MemberId(1)), None));
    }

    #[test]
    fn writes_from_anyone_but_the_maps_primary_are_fenced() {
        let m = map();
        let mut r = SlotState::new(B, 4);
        let mut st = Store::new(4, usize::MAX);
        apply(&mut r, &m, &mut st, &begin(P, 0)).unwrap();
        apply(&mut r, &m, &mut st, &msg(Kind::Put, P, 1, b"k", b"v1")).unwrap();
        // The group promotes this backup: the old primary is refused.
        let mut promoted = m.clone();
        promoted.set_backup_ready(0..4, MemberId(1)).unwrap();
        promoted.promote(1, MemberId(1)).unwrap();
        promoted.set_version(3);
        let e = apply(
            &mut r,
            &promoted,
            &mut st,
            &msg(Kind::Put, P, 2, b"k", b"v2"),
        );
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("is not slot 1's primary"));
        assert_eq!(st.get(1, b"k"), Some(&b"v1"[..]));
        // Promoted, it numbers its writes on from the last applied.
        r.install(&m, &promoted);
        assert_eq!(r.next_seq(1), 2);
        // A worker that does not back the slot up refuses it.
        let mut other = SlotState::new(
            Owner {
                member: MemberId(1),
                worker: 1,
            },
            4,
        );
        let e = apply(&mut other, &m, &mut st, &begin(P, 0));
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("does not back slot 1 up"));
    }

    /// The third member's worker.
    const T: Owner = Owner {
        member: MemberId(2),
        worker: 0,
    };

    /// [`map`] with a third member: `P` primary of every slot, `B` and `T`
    /// ready backups.
    fn three_copies() -> ShardMap {
        let mut m = map();
        m.add_member(Member {
            addr: SocketAddr::from(([10, 0, 0, 3], 7000)),
            workers: 1,
            bulk_port: 0,
        })
        .unwrap();
        m.add_backup(0..4, MemberId(2)).unwrap();
        m.set_backup_ready(0..4, MemberId(1)).unwrap();
        m.set_backup_ready(0..4, MemberId(2)).unwrap();
        m.set_version(2);
        m
    }

    #[test]
    fn after_a_hand_over_the_old_primary_and_the_backups_follow_the_new_one() {
        let m = three_copies();
        let (mut p, mut b, mut t) = (
            SlotState::new(P, 4),
            SlotState::new(B, 4),
            SlotState::new(T, 4),
        );
        let (mut sp, mut sb, mut st) = (
            Store::new(4, usize::MAX),
            Store::new(4, usize::MAX),
            Store::new(4, usize::MAX),
        );
        // Both backups follow the primary's two writes.
        for (r, store) in [(&mut b, &mut sb), (&mut t, &mut st)] {
            apply(r, &m, store, &begin(P, 0)).unwrap();
            apply(r, &m, store, &msg(Kind::Put, P, 1, b"k", b"v1")).unwrap();
            apply(r, &m, store, &msg(Kind::Put, P, 2, b"k", b"v2")).unwrap();
        }
        sp.put(1, b"k", b"v2").unwrap();
        assert_eq!((p.next_seq(1), p.next_seq(1)), (1, 2));
        let mut next = m.clone();
        next.hand_over(0..4, MemberId(2)).unwrap();
        next.set_version(3);
        // The new primary's write, at a backup still on the old map, waits
        // for the map.
        let mut w = Vec::new();
        let h = Header {
            kind: Kind::Put,
            slot: 1,
            epoch: 3,
            primary: T,
            seq: 3,
            offset: 0,
            id: RequestId::default(),
        };
        write_replicate(&mut w, &h, b"k", b"v3");
        let e = apply(&mut b, &m, &mut sb, &w).unwrap_err();
        assert!(e.await_map() && !e.not_yet(), "{e:?}");
        assert_eq!(sb.get(1, b"k"), Some(&b"v2"[..]));
        // With the map: the new primary numbers on; the backup and the old
        // primary follow it from where they are.
        t.install(&m, &next);
        p.install(&m, &next);
        b.install(&m, &next);
        assert_eq!(t.next_seq(1), 3);
        apply(&mut b, &next, &mut sb, &w).unwrap();
        apply(&mut p, &next, &mut sp, &w).unwrap();
        assert_eq!(sb.get(1, b"k"), Some(&b"v3"[..]));
        assert_eq!(sp.get(1, b"k"), Some(&b"v3"[..]));
        // The old primary is fenced as any other.
        let e = apply(&mut b, &next, &mut sb, &msg(Kind::Put, P, 4, b"k", b"x"));
        let e = e.unwrap_err();
        assert!(
            !e.await_map() && e.to_string().contains("not slot 1's primary"),
            "{e:?}"
        );
    }

    #[test]
    fn every_copy_that_stood_at_the_last_write_names_the_new_primarys_stream() {
        let m = three_copies();
        let mut p = SlotState::new(P, 4);
        let mut b = SlotState::new(B, 4);
        let mut t = SlotState::new(T, 4);
        for r in [&mut p, &mut b, &mut t] {
            r.keep_history(1 << 10);
        }
        let (mut sb, mut st) = (Store::new(4, usize::MAX), Store::new(4, usize::MAX));
        // The primary's two writes; the backup has both, the third copy
        // only the first.
        let stream = p.stream(1);
        for (seq, key) in [(1, b"a"), (2, b"b")] {
            assert_eq!(p.next_seq(1), seq);
            p.remember(1, seq, key);
        }
        for (r, store, writes) in [(&mut b, &mut sb, 2), (&mut t, &mut st, 1)] {
            apply(r, &m, store, &begin_in(P, 0, stream)).unwrap();
            let _ = apply(r, &m, store, &msg(Kind::CopyEnd, P, 0, b"", b""));
            r.take_starts().unwrap();
            r.pulled(&TICKET, Ok(()), store);
            apply(r, &m, store, &msg(Kind::CopyEnd, P, 0, b"", b"")).unwrap();
            for seq in 1..=writes {
                apply(r, &m, store, &msg(Kind::Put, P, seq, b"k", b"v")).unwrap();
            }
        }
        // A failover to the backup: the old primary keeps nothing, the
        // third copy stays.
        let mut failed = m.clone();
        failed.promote(1, MemberId(1)).unwrap();
        failed.set_version(3);
        p.install(&m, &failed);
        b.install(&m, &failed);
        t.install(&m, &failed);
        let new = b.stream(1);
        assert_eq!(new, successor(stream, 2));
        assert_eq!(b.next_seq(1), 3);
        assert_eq!(
            p.parted(1),
            Some(Position {
                stream: new,
                applied: 2
            }),
            "the old primary stood at its last write"
        );
        assert_eq!(p.parted(2), None, "a slot it kept");
        let asked = |r: &SlotState, map: &ShardMap, store: &Store| {
            let a = msg(Kind::CopyAsk, B, new, b"", b"");
            r.ask(&Replicate::new_checked(&a).unwrap().header(), map, store)
                .unwrap()
        };
        assert_eq!(asked(&t, &failed, &st), 0, "a write behind: another stream");
        // The new primary's writes after 2 are all the old one lacks.
        b.remember(1, 3, b"c");
        let at = p.parted(1).unwrap();
        assert_eq!(b.lacks(1, at), Some(vec![b"c".to_vec()]));
        let behind = Position {
            stream: successor(stream, 1),
            applied: 1,
        };
        assert_eq!(b.lacks(1, behind), None);
    }

    #[test]
    fn a_primary_journals_where_a_quiet_slot_stands_for_the_next_term() {
        let m = three_copies();
        let mut p = SlotState::new(P, 4);
        p.keep_history(1 << 10);
        let mut st = Store::new(4, usize::MAX);
        let stream = p.stream(1);
        for seq in 1..=2 {
            assert_eq!(p.next_seq(1), seq);
            p.remember(1, seq, b"k");
        }
        // Written since the last pass: not yet.
        p.position_quiet(&mut st);
        assert_eq!(st.position(1), None);
        // Quiet for a pass: where a successor's term would begin.
        p.position_quiet(&mut st);
        let at = Position {
            stream: successor(stream, 2),
            applied: 2,
        };
        assert_eq!(st.position(1), Some(at));
        // Written again: the position waits for the next quiet pass.
        assert_eq!(p.next_seq(1), 3);
        p.remember(1, 3, b"k");
        p.position_quiet(&mut st);
        assert_eq!(st.position(1), Some(at));
        p.position_quiet(&mut st);
        assert_eq!(st.position(1).map(|p| p.applied), Some(3));
        // The backup promoted at write 3 continues in the stream that
        // position names: this worker's records catch up in its term.
        let mut b = SlotState::new(B, 4);
        b.keep_history(1 << 10);
        let mut sb = Store::new(4, usize::MAX);
        apply(&mut b, &m, &mut sb, &begin_in(P, 0, stream)).unwrap();
        let _ = apply(&mut b, &m, &mut sb, &msg(Kind::CopyEnd, P, 0, b"", b""));
        b.take_starts().unwrap();
        b.pulled(&TICKET, Ok(()), &mut sb);
        apply(&mut b, &m, &mut sb, &msg(Kind::CopyEnd, P, 0, b"", b"")).unwrap();
        for seq in 1..=3 {
            apply(&mut b, &m, &mut sb, &msg(Kind::Put, P, seq, b"k", b"v")).unwrap();
        }
        let mut failed = m.clone();
        failed.promote(1, MemberId(1)).unwrap();
        failed.set_version(3);
        b.install(&m, &failed);
        assert_eq!(b.stream(1), st.position(1).unwrap().stream);
        assert_eq!(b.lacks(1, st.position(1).unwrap()), Some(vec![]));
        // A slot still being imported has no position: its records are
        // not all here.
        assert_eq!(p.next_seq(3), 1);
        p.remember(3, 1, b"i");
        st.begin_import(3);
        p.position_quiet(&mut st);
        p.position_quiet(&mut st);
        assert_eq!(st.position(3), None);
        // A slot written and then no longer led is not journaled: its
        // records' position comes with the map that took it (`parted`).
        assert_eq!(p.next_seq(1), 4);
        p.remember(1, 4, b"k");
        p.install(&m, &failed);
        p.position_quiet(&mut st);
        p.position_quiet(&mut st);
        assert_eq!(st.position(1).map(|p| p.applied), Some(3));
        assert_eq!(p.parted(1).map(|p| p.applied), Some(4));
    }

    #[test]
    fn keys_in_flight_and_held_slots_are_counted() {
        let mut r = SlotState::new(P, 4);
        assert!(!r.in_flight(b"k"));
        r.begin_write(b"k");
        r.begin_write(b"k");
        assert!(r.in_flight(b"k") && !r.in_flight(b"j"));
        r.end_write(fingerprint(b"k"));
        assert!(r.in_flight(b"k"));
        r.end_write(fingerprint(b"k"));
        assert!(!r.in_flight(b"k"));
        r.hold(2, Some(MemberId(1)));
        assert_eq!((r.held(2), r.held(1)), (Some(MemberId(1)), None));
        r.hold(2, None);
        assert_eq!(r.held(2), None);
    }
}
