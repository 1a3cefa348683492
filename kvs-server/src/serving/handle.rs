//! One request in, one response out: parsing, limits, shard ownership and the
//! store, with no I/O (the worker loop feeds it). Every byte of a request is
//! untrusted: anything malformed gets an error answer, never a panic.

use copyrpc::clock::Clock;
use kvs_proto::proto::{
    begin_response, finish_response, push_scan_record, response_header, routed_by, write_response,
    Op, Redirect, Request, Status, FLAG_MAP_NEWER, FLAG_TRUNCATED, REDIRECT_LEN, RESPONSE_HEADER,
    SCAN_RECORD_HEADER,
};
use kvs_proto::replica::{Kind, Replicate};
use kvs_proto::shard::slot_of;
use kvs_proto::{MemberId, Owner, RequestId, ShardMap};

pub use crate::role::Role;

use crate::dedup::{Dedup, Seen};
use crate::replication::refusal::Refusal;
use crate::replication::slot_state::{fingerprint, SlotState};
pub use crate::replication::write_path::Forward;
use crate::replication::Primary;
use crate::request_metrics::RequestMetrics;
use crate::serving::retained::Retained;
use crate::store::{Patch, Store};
use crate::threads::to_worker::Frozen;

/// What became of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// The answer is in `out`.
    Answered,
    /// The key's slot is being imported and the key has not arrived: the
    /// request waits for a priority pull of the key from the migration's
    /// source, then is handled again.
    Pull {
        /// The key's slot.
        slot: u32,
    },
    /// A write applied here, whose answer (in `out`) waits until every
    /// backup of its slot has applied it too: the worker forwards it.
    Forward(Forward),
    /// A read of a key whose write awaits its backups: it waits until none
    /// is in flight, then is handled again.
    AwaitWrite {
        /// The key's fingerprint ([`Handler::in_flight`]).
        fp: u64,
    },
    /// A replication message from a primary whose map is newer than this
    /// worker's (a hand-over or a failover this worker has not installed
    /// yet): it waits for the map, then is handled again, in order.
    AwaitMap,
}

/// What [`Handler::serve`] made of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served<'a> {
    /// As [`Handler::handle`] says; the answer, if any, is in `out`.
    Handled(Handled),
    /// A GET that found its value: the answer is `out` (its header)
    /// followed by this value, still in the store.
    Value(&'a [u8]),
}

/// A value found in the store by the request being answered.
#[derive(Debug, Clone, Copy)]
struct Found(*const [u8]);

/// What [`Handler::warm`] found out about a GET, for [`Handler::serve`].
#[derive(Debug, Clone, Copy)]
pub struct Warmed {
    slot: u32,
    /// The map's slot count `slot` was found under.
    slots: u32,
    /// The key's hash in the slot's table, if the slot is here.
    hash: Option<u64>,
    /// Where the key is in the request: (offset, length).
    key: (u32, u32),
}

/// [`Served`] before the value is borrowed again.
#[derive(Debug, Clone, Copy)]
enum RawServed {
    Handled(Handled),
    Value(Found),
}

/// What a map install changed in a worker's store.
#[derive(Debug, Default)]
pub struct Installed {
    /// Slots given away, with their records (frozen, for the target).
    pub given_away: Vec<(u32, std::sync::Arc<crate::store::SlotRecords>)>,
    /// Slots whose import ended.
    pub imports_ended: Vec<u32>,
}

/// What one worker needs to answer requests.
#[derive(Debug)]
pub struct Handler {
    /// This worker's number.
    pub worker: u16,
    /// This worker, as the map names owners: its member and number.
    me: Owner,
    /// The shard map in force.
    pub map: ShardMap,
    /// The map, encoded (the payload of MAP answers and redirects).
    pub map_bytes: Vec<u8>,
    /// Largest key.
    pub max_key: usize,
    /// Largest value.
    pub max_value: usize,
    /// The worker's data.
    pub store: Store,
    /// When set, new requests are answered `ShuttingDown`.
    pub draining: bool,
    /// Whether the member holds its lease from the control group (the
    /// worker sets it each turn); without it, requests for slots get
    /// `Unavailable`.
    pub leased: bool,
    /// Per slot: imported, and its source has not yet frozen it (it may
    /// still take writes there), so requests get `TryAgain`.
    awaiting_source: Vec<bool>,
    /// How many slots are awaiting their source.
    awaiting: u32,
    /// The server's whole memory cap, for messages (0: none).
    max_memory: u64,
    /// Set by a request that must wait for a priority pull (its slot).
    pull: Option<u32>,
    /// Set by a read of a key in flight.
    await_write: Option<u64>,
    /// Set by a write to forward to its slot's backups.
    forward: Option<Forward>,
    /// Set by a replication message that waits for a newer map.
    await_map: bool,
    /// Times requests for the metrics.
    clock: Clock,
    /// Slots being handed over: their writes wait.
    pub(crate) frozen: Option<Frozen>,
    /// Replication: writes' numbers, keys in flight, streams followed.
    pub(crate) slot_state: SlotState,
    /// The request ids of the writes applied, per slot.
    pub(crate) dedup: Dedup,
    /// The request id of the request being answered.
    id: RequestId,
    /// Requests answered, by op and result, and their service times.
    pub(crate) metrics: RequestMetrics,
    /// Replication messages refused for coming on a client's connection.
    pub(crate) refused_member_ops: u64,
    /// The disk of the worker's log is full: writes are refused with this
    /// message (reads go on).
    pub(crate) disk_full: Option<std::sync::Arc<str>>,
    /// A write was answered this turn before the worker's log commit (a
    /// slot without backups, or a write no backup counted for): until the
    /// commit, reads are answered only after it too, as they may have
    /// seen that write. (A write that awaits its backups holds its key's
    /// reads in [`ReadsWaiting`](crate::serving::read_wait::ReadsWaiting)
    /// instead, and is answered in a later turn, once committed.)
    pub(crate) answered_uncommitted: bool,
    /// Slots whose records stay, not served, while the member rejoins.
    retained: Retained,
    /// Exports recovered from the log, until the worker holds them.
    exports: Vec<(u32, std::sync::Arc<crate::store::SlotRecords>)>,
}

impl Handler {
    /// What the forwarder reads and changes of this worker's state, as its
    /// slots' primary, for one call.
    #[inline]
    pub(crate) fn primary(&mut self) -> Primary<'_> {
        Primary {
            map: &self.map,
            store: &self.store,
            dedup: &self.dedup,
            slot_state: &mut self.slot_state,
            frozen: &mut self.frozen,
        }
    }

    /// Worker `me` of a member: its handler over an empty store.
    /// Slots the map says it is importing are served as imports from the
    /// start (a target that restarted mid-migration pulls them again).
    #[cfg(test)]
    pub fn new(me: Owner, map: ShardMap, max_key: usize, max_value: usize) -> Handler {
        let store = Store::new(map.slots(), usize::MAX);
        Self::with_store(me, map, max_key, max_value, store, Retained::new(false))
    }

    /// A handler serving the records of `store`: what the worker's
    /// log held at its start. Slots `map` gives away from this member, to
    /// a target still importing them, are frozen again for it
    /// ([`take_exports`](Self::take_exports)); the slots `map` gives this
    /// worker neither as owner nor as a backup go (or stay, not served, in
    /// `retained`, until [`end_retention`](Self::end_retention)); an import
    /// or a copy that `map` ended
    /// while the worker was down ends; and since the clients' request ids
    /// did not survive, every slot held refuses a write sent again (as an
    /// imported slot does) rather than apply it twice.
    pub fn with_store(
        me: Owner,
        map: ShardMap,
        max_key: usize,
        max_value: usize,
        mut store: Store,
        mut retained: Retained,
    ) -> Handler {
        let mut map_bytes = Vec::new();
        map.encode(&mut map_bytes);
        let slots = map.slots();
        let mut awaiting_source = vec![false; slots as usize];
        let mut awaiting = 0;
        let mut dedup = Dedup::default();
        let held: Vec<u32> = store.held_slots().collect();
        // Given away before the stop, and not all pulled: held for the
        // target again (by every worker: the one that had the slot holds
        // its records, the others nothing).
        let exports: Vec<_> = (0..slots)
            .filter(|&s| map.importing_from(s) == Some(me.member) && map.owner_of_slot(s) != me)
            .map(|s| (s, store.export_slot(s)))
            .collect();
        for s in held {
            let owns = map.owner_of_slot(s) == me;
            if store.exporting(s) {
                continue;
            }
            if !owns && !map.backups(s).iter().any(|b| b.owner == me) {
                if !retained.keep(s) {
                    store.drop_slot(s);
                }
                continue;
            }
            dedup.set_forgot(s);
            if owns && map.importing_from(s).is_none() {
                store.end_import(s);
                store.end_copy(s);
            }
        }
        for s in 0..slots {
            if map.owner_of_slot(s) == me && map.importing_from(s).is_some() {
                store.begin_import(s);
                dedup.set_forgot(s);
                awaiting_source[s as usize] = true;
                awaiting += 1;
            }
        }
        Handler {
            worker: me.worker,
            me,
            map,
            map_bytes,
            max_key,
            max_value,
            store,
            draining: false,
            leased: true,
            awaiting_source,
            awaiting,
            max_memory: 0,
            pull: None,
            await_write: None,
            forward: None,
            await_map: false,
            clock: Clock::monotonic(),
            frozen: None,
            slot_state: SlotState::new(me, slots),
            dedup,
            id: RequestId::default(),
            metrics: RequestMetrics::default(),
            refused_member_ops: 0,
            disk_full: None,
            answered_uncommitted: false,
            retained,
            exports,
        }
    }

    /// The slots given away before the worker's stop whose import is not
    /// over, with their records from the log: for the worker to hold for
    /// their target again.
    pub fn take_exports(&mut self) -> Vec<(u32, std::sync::Arc<crate::store::SlotRecords>)> {
        std::mem::take(&mut self.exports)
    }

    /// Serves by `map` from now on (a newer map from the control thread,
    /// with the same slot count): takes out the records of slots given away
    /// (for the migration's target to pull), drops those of slots it holds
    /// no copy of any more (another member took over, or its backup was
    /// dropped), starts importing slots gained from another member, ends
    /// the imports the map says are done.
    pub fn install(&mut self, map: ShardMap) -> Installed {
        let mut done = Installed::default();
        self.slot_state.install(&self.map, &map);
        for s in 0..map.slots().min(self.map.slots()) {
            let was = self.map.owner_of_slot(s) == self.me;
            let is = map.owner_of_slot(s) == self.me;
            let backs = |m: &ShardMap| m.backups(s).iter().any(|b| b.owner == self.me);
            if is && !was {
                // A primary's copy stands in no stream but its own.
                self.store.set_position(s, None);
            }
            let kept = (is || backs(&map)) && self.retained.release(s);
            if kept && is {
                // Kept records of a slot now served from here: stale.
                self.store.drop_slot(s);
            }
            if self.store.exporting(s) && map.importing_from(s) != Some(self.me.member) {
                // The target's import is over (or off): the records the
                // log kept for it go.
                self.store.end_export(s);
            }
            if was && !is && map.importing_from(s) == Some(self.me.member) {
                done.given_away.push((s, self.store.export_slot(s)));
                self.dedup.forget(s);
            } else if (was || backs(&self.map)) && !is && !backs(&map) {
                if !self.retained.keep(s) {
                    self.store.drop_slot(s);
                } else if let Some(p) = self.slot_state.parted(s) {
                    // Kept: the records can catch up from where they stand
                    // (if they are all here: not still being imported).
                    if !self.store.importing(s) {
                        self.store.set_position(s, Some(p));
                    }
                }
                self.dedup.forget(s);
            } else if is {
                match map.importing_from(s) {
                    Some(_) if !was => {
                        self.store.begin_import(s);
                        // The source's windows stay there: a write sent
                        // again may have been applied by it, and is
                        // refused rather than applied twice.
                        self.dedup.set_forgot(s);
                        self.set_awaiting(s, true);
                    }
                    None if self.store.importing(s) => {
                        self.store.end_import(s);
                        self.set_awaiting(s, false);
                        done.imports_ended.push(s);
                    }
                    _ => {}
                }
            }
        }
        self.map_bytes.clear();
        map.encode(&mut self.map_bytes);
        self.map = map;
        done
    }

    /// The source of the import of `slots` holds them frozen: serve them.
    pub fn source_frozen(&mut self, slots: std::ops::Range<u32>) {
        for s in slots {
            self.set_awaiting(s, false);
        }
    }

    fn set_awaiting(&mut self, slot: u32, on: bool) {
        if let Some(a) = self.awaiting_source.get_mut(slot as usize) {
            if *a != on {
                *a = on;
                if on {
                    self.awaiting += 1;
                } else {
                    self.awaiting -= 1;
                }
            }
        }
    }

    /// The same, timing requests with `clock` (by default the monotonic
    /// clock, uncalibrated).
    pub fn with_clock(mut self, clock: Clock) -> Handler {
        self.clock = clock;
        self
    }

    /// The same, keeping the last `capacity` bytes of its writes' keys as a
    /// slot's primary, so that a backup restarted from its files catches
    /// up on what it lacks (0: none kept; every copy is whole).
    pub fn with_history(mut self, capacity: usize) -> Handler {
        self.slot_state.keep_history(capacity);
        self
    }

    /// The member drains to stop: the records of slots its maps take away
    /// stay from now on (see [`crate::serving::retained`]).
    pub fn retain(&mut self) {
        self.retained.start();
    }

    /// The member's restart is applied (with the map that places its
    /// copies anew): the records kept of slots this worker did not get
    /// back go.
    pub fn end_retention(&mut self) {
        for s in self.retained.end() {
            let ours = self.map.owner_of_slot(s) == self.me
                || self.map.backups(s).iter().any(|b| b.owner == self.me);
            if !ours {
                self.store.drop_slot(s);
            }
        }
    }

    /// Between turns (the worker's chores, with a log): the primary slots
    /// quiet since their last write record where their records stand
    /// ([`SlotState::position_quiet`]).
    pub fn position_quiet(&mut self) {
        self.slot_state.position_quiet(&mut self.store);
    }

    /// The turn's end, before the worker's log commit: the backups' copies
    /// whose position moved record it after the changes it covers.
    #[inline]
    pub fn end_turn(&mut self) {
        self.slot_state.record_positions(&mut self.store);
    }

    /// The same over a store capped at `share` bytes, this worker's part of
    /// the server's `max_memory` (0: no cap).
    pub fn with_memory_limit(mut self, max_memory: u64, workers: u16) -> Handler {
        self.max_memory = max_memory;
        self.store
            .set_limit(crate::store::memory::worker_share(max_memory, workers));
        self
    }

    /// Answers `req` into `out`, in at most `max_response` bytes (the
    /// caller's allowance; at least the response header, or the caller gets
    /// nothing useful), and counts it: op, result and service time, in
    /// counters the worker owns (two reads of the clock, the TSC where it
    /// is invariant, and a histogram slot increment; no allocation, no lock).
    /// A request that must wait for a priority pull is counted when it is
    /// answered.
    ///
    /// The request is taken as a member's ([`Role::Member`]): one that came
    /// on a member's connection, or one [`serve`](Self::serve) admitted
    /// earlier and that waited (a pull, a write, a map).
    #[inline]
    pub fn handle(&mut self, req: &[u8], max_response: usize, out: &mut Vec<u8>) -> Handled {
        match self.serve(req, max_response, out, None, Role::Member) {
            Served::Handled(h) => h,
            Served::Value(v) => {
                out.extend_from_slice(v);
                Handled::Answered
            }
        }
    }

    /// [`handle`](Self::handle), except that a GET which finds its value
    /// leaves it in the store: `out` holds the response header, and the
    /// caller writes the value after it where the answer is sent from (one
    /// copy of the value instead of two).
    #[inline]
    ///
    /// `warmed` is what [`warm`](Self::warm) found for this same `req`
    /// earlier in the turn (or `None`): its slot and hash are not computed
    /// again. `from` is the role of the connection it came on: only a
    /// member's may replicate (the check costs nothing on other requests:
    /// it sits behind the test for a replication message).
    pub fn serve(
        &mut self,
        req: &[u8],
        max_response: usize,
        out: &mut Vec<u8>,
        warmed: Option<Warmed>,
        from: Role,
    ) -> Served<'_> {
        let t = self.clock.ticks();
        if req.first() == Some(&(Op::Replicate as u8)) {
            if from == Role::Member {
                self.replicate(req, max_response, out);
            } else {
                self.forbidden(out, max_response);
            }
            if std::mem::take(&mut self.await_map) {
                return Served::Handled(Handled::AwaitMap);
            }
            let status = out.first().copied().unwrap_or(u8::MAX);
            let ns = self.clock.ns_between(t, self.clock.ticks());
            self.metrics.record(Op::Replicate as u8, status, ns);
            return Served::Handled(Handled::Answered);
        }
        let a = self.answer(req, max_response, out, warmed);
        if routed_by(req) < self.map.version() && out.len() > 1 {
            out[1] |= FLAG_MAP_NEWER;
        }
        if matches!(
            a,
            RawServed::Value(_) | RawServed::Handled(Handled::Answered)
        ) {
            let ns = self.clock.ns_between(t, self.clock.ticks());
            let op = req.first().copied().unwrap_or(0);
            let status = out.first().copied().unwrap_or(u8::MAX);
            self.metrics.record(op, status, ns);
        }
        match a {
            RawServed::Handled(h) => Served::Handled(h),
            // SAFETY: `v` points at a value in `self.store`, found by this
            // call; since then only `out`, the map's version and the metrics
            // were touched, never the store. The slice borrows `self` (the
            // returned lifetime), so the store cannot change or drop the
            // value while it lives. (A raw pointer carries it here because
            // returning the borrow from one branch and using `self` in the
            // others is what the borrow checker cannot yet accept.)
            RawServed::Value(Found(v)) => Served::Value(unsafe { &*v }),
        }
    }

    /// The first of a turn's three warming passes over its requests
    /// (`warm`, [`prefetch_bucket`](Self::prefetch_bucket), [`prefetch_value`](Self::prefetch_value); the
    /// worker's `warm_turn` says why): where the key of a GET in `req`
    /// lives, its slot and its hash in the slot's table. Changes nothing.
    /// Handed on with the same `req`, up to [`serve`](Self::serve), it
    /// saves finding them again.
    #[inline]
    pub fn warm(&self, req: &[u8]) -> Option<Warmed> {
        let r = Request::new_checked(req).ok()?;
        if r.op() != Op::Get {
            return None;
        }
        let key = r.key();
        let slots = self.map.slots();
        let slot = slot_of(key, slots);
        let hash = self.store.hash_in(slot, key);
        let at = key.as_ptr() as usize - req.as_ptr() as usize;
        Some(Warmed {
            slot,
            slots,
            hash,
            key: (at as u32, key.len() as u32),
        })
    }

    /// The second warming pass: finds where the record `warmed` names
    /// most likely is (the table's control bytes and one bucket) and starts
    /// loading its first line. Changes nothing.
    #[inline]
    pub fn prefetch_bucket(&self, warmed: &Warmed) {
        if let Some(p) = warmed
            .hash
            .and_then(|h| self.store.candidate(warmed.slot, h))
        {
            prefetch_line(p);
        }
    }

    /// The third warming pass: looks up the record `warmed` (what
    /// [`warm`](Self::warm) found in the same `req`) names and starts
    /// loading its value. Changes nothing.
    #[inline]
    pub fn prefetch_value(&self, req: &[u8], warmed: &Warmed) {
        let (at, len) = warmed.key;
        let Some(key) = req.get(at as usize..(at + len) as usize) else {
            return;
        };
        if let Some(v) = self.store.get_hashed(warmed.slot, warmed.hash, key) {
            prefetch(v);
        }
    }

    /// Keys held as a backup of other members' slots (one pass over the
    /// map's slots).
    pub fn backup_keys(&self) -> u64 {
        (0..self.map.slots())
            .filter(|&s| self.map.backups(s).iter().any(|b| b.owner == self.me))
            .map(|s| self.store.slot_size(s).keys as u64)
            .sum()
    }

    /// Whether a write of the key of fingerprint `fp` awaits its backups.
    #[inline]
    pub fn in_flight(&self, fp: u64) -> bool {
        self.slot_state.in_flight_fp(fp)
    }

    /// Whether `key` of a slot being imported must be pulled before it can
    /// be answered: it is not here, and was not deleted here.
    #[inline]
    fn must_pull(&self, slot: u32, key: &[u8]) -> bool {
        self.store.importing(slot) && !self.store.deleted_in_import(slot, key)
    }

    fn answer(
        &mut self,
        req: &[u8],
        max_response: usize,
        out: &mut Vec<u8>,
        warmed: Option<Warmed>,
    ) -> RawServed {
        if let Some(v) = self.answer_or_pull(req, max_response, out, warmed) {
            return RawServed::Value(v);
        }
        RawServed::Handled(self.outcome())
    }

    /// What became of a request answered without a value of the store.
    fn outcome(&mut self) -> Handled {
        if let Some(f) = self.forward.take() {
            return Handled::Forward(f);
        }
        if let Some(fp) = self.await_write.take() {
            return Handled::AwaitWrite { fp };
        }
        self.pull
            .take()
            .map_or(Handled::Answered, |slot| Handled::Pull { slot })
    }

    /// A replication message from a slot's primary: applied as its backup,
    /// or refused (`Fenced`, saying why; `TryAgain` while a copy's pull
    /// goes on, and to a copy's begin while the member's restart is not
    /// applied).
    fn replicate(&mut self, req: &[u8], max_response: usize, out: &mut Vec<u8>) {
        let msg = match Replicate::new_checked(req) {
            Ok(m) => m,
            Err(e) => return error(out, Status::BadRequest, &e.to_string(), max_response),
        };
        if let Some(m) = self.disk_full.as_deref() {
            // A backup that cannot log what it applies is no copy: the
            // primary fails the write and has the slot copied anew.
            let h = msg.header();
            if h.kind.is_write() || matches!(h.kind, Kind::CopyBegin | Kind::CatchUp | Kind::Fill) {
                let why = Refusal::DiskFull {
                    slot: h.slot,
                    why: m.to_string(),
                };
                return error(out, Status::Fenced, &why.to_string(), max_response);
            }
        }
        let h = msg.header();
        let applied = if self.retained.keeping()
            && matches!(h.kind, Kind::CopyAsk | Kind::CopyBegin | Kind::CatchUp)
        {
            Err(Refusal::Rejoining { slot: h.slot })
        } else if h.kind == Kind::CopyAsk {
            // The answer carries where this copy stands.
            self.slot_state
                .ask(&h, &self.map, &self.store)
                .map(|at| write_response(out, Status::Ok, &at.to_le_bytes(), max_response))
        } else {
            self.slot_state
                .apply(&msg, &self.map, &mut self.store, &mut self.dedup)
                .map(|()| status(out, Status::Ok))
        };
        match applied {
            Ok(()) => {}
            Err(r) if r.await_map() => {
                out.clear();
                self.await_map = true;
            }
            Err(r) if r.not_yet() => error(out, Status::TryAgain, &r.to_string(), max_response),
            Err(r) => error(out, Status::Fenced, &r.to_string(), max_response),
        }
    }

    /// A replication message on a client's connection: refused, and
    /// counted. A copy's begin would empty a backup's copy of its slot,
    /// and a write would put a value the primary never had in it.
    #[cold]
    fn forbidden(&mut self, out: &mut Vec<u8>, max_response: usize) {
        self.refused_member_ops += 1;
        let m = "replication messages are the cluster members' only: this connection \
                 presented the client token, and a member presents the cluster token \
                 (cluster_token_file)";
        error(out, Status::Forbidden, m, max_response)
    }

    /// A write sent again that the slot cannot tell applied or not: it is
    /// not applied (it may have been once), and the client is told so.
    #[cold]
    fn too_old(&self, out: &mut Vec<u8>, max_response: usize) {
        let m = format!(
            "request {} of this client was sent again after more than {} newer writes of it \
             to the slot (or after the slot forgot the client): it was not applied now, and \
             may have been applied before",
            self.id.request,
            crate::dedup::WINDOW
        );
        error(out, Status::TooOld, &m, max_response)
    }

    /// Whether `op` on `slot` is a write that waits for a hand-over.
    #[cold]
    fn frozen_write(&self, slot: u32, op: Op) -> bool {
        self.frozen
            .is_some_and(|f| (f.first..f.end).contains(&slot))
            && matches!(op, Op::Put | Op::Delete | Op::UpdateRange)
    }

    /// A write to `slot` changed the store: with backups, it is numbered
    /// and forwarded before it is answered.
    #[inline]
    fn wrote(&mut self, slot: u32, key: &[u8], kind: Kind) {
        self.dedup.record(slot, self.id);
        let backed = !self.map.backups(slot).is_empty();
        // Without backups the write is answered in this turn.
        self.answered_uncommitted |= !backed;
        if !backed && !self.slot_state.keeps_history() {
            return;
        }
        // Numbered (and kept) even with no backup: one may come back and
        // catch up from the history.
        let seq = self.slot_state.next_seq(slot);
        self.slot_state.remember(slot, seq, key);
        if !backed {
            return;
        }
        self.slot_state.begin_write(key);
        self.forward = Some(Forward {
            slot,
            seq,
            kind,
            fp: fingerprint(key),
            id: self.id,
        });
    }

    /// Answers `req` into `out`, or says it waits (`self.pull`,
    /// `self.await_write`, `self.forward`). A GET that finds its value
    /// returns it, with `out` holding the response header only: the caller
    /// writes the value once, where the answer is sent from.
    fn answer_or_pull(
        &mut self,
        req: &[u8],
        max_response: usize,
        out: &mut Vec<u8>,
        warmed: Option<Warmed>,
    ) -> Option<Found> {
        let r = match Request::new_checked(req) {
            Ok(r) => r,
            Err(e) => {
                error(out, Status::BadRequest, &e.to_string(), max_response);
                return None;
            }
        };
        // What `warm` found holds while the map has as many slots.
        let warmed = warmed.filter(|w| w.slots == self.map.slots());
        let slot = self.admit(&r, max_response, out, warmed.map(|w| w.slot))?;
        self.apply(&r, slot, max_response, out, warmed.and_then(|w| w.hash))
    }

    /// The checks before a request's op runs: its slot, or `None` once
    /// answered (`out`) otherwise (a redirect, a try-again, an error...).
    fn admit(
        &mut self,
        r: &Request<'_>,
        max_response: usize,
        out: &mut Vec<u8>,
        slot: Option<u32>,
    ) -> Option<u32> {
        if self.draining {
            error(out, Status::ShuttingDown, "", max_response);
            return None;
        }
        let key = r.key();
        if key.len() > self.max_key {
            let m = format!("key of {} bytes (at most {})", key.len(), self.max_key);
            error(out, Status::TooLarge, &m, max_response);
            return None;
        }
        match r.op() {
            Op::Map => {
                self.map_answer(out, Status::Ok, max_response);
                return None;
            }
            // Whatever their key: they are not routed by slot.
            Op::Control | Op::Raft | Op::Pull => {
                let m = "control requests go to the control endpoint, not a worker";
                error(out, Status::BadRequest, m, max_response);
                return None;
            }
            _ if !self.leased => {
                self.unavailable(out, max_response);
                return None;
            }
            // A scan would miss what has not arrived yet: the client asks
            // this worker again once its imports are done.
            Op::Scan if self.store.importing_slots() > 0 => {
                status(out, Status::TryAgain);
                return None;
            }
            Op::Scan => {
                self.scan(key, r.scan_count() as usize, max_response, out);
                return None;
            }
            _ => {}
        }
        let slot = slot.unwrap_or_else(|| slot_of(key, self.map.slots()));
        debug_assert_eq!(slot, slot_of(key, self.map.slots()));
        let owner = self.map.owner_of_slot(slot);
        if owner != self.me {
            self.redirect(out, r.map_version(), owner, max_response);
            return None;
        }
        if self.awaiting > 0 && self.awaiting_source[slot as usize] {
            status(out, Status::TryAgain);
            return None;
        }
        if let Some(b) = self.slot_state.held(slot) {
            self.held(out, slot, b, max_response);
            return None;
        }
        self.id = r.id().unwrap_or_default();
        if self.id != RequestId::default()
            && matches!(r.op(), Op::Put | Op::Delete | Op::UpdateRange)
        {
            match self.dedup.check(slot, self.id, r.resent()) {
                Seen::New => {}
                // Sent again: applied already. Answered once its backups
                // have it (the first answer may be what was lost).
                Seen::Applied => {
                    let st = if self.slot_state.in_flight(key) {
                        Status::TryAgain
                    } else {
                        Status::Ok
                    };
                    status(out, st);
                    return None;
                }
                Seen::TooOld => {
                    self.too_old(out, max_response);
                    return None;
                }
            }
        }
        if self.frozen.is_some() && self.frozen_write(slot, r.op()) {
            status(out, Status::TryAgain);
            return None;
        }
        if let Some(m) = self.disk_full.as_deref() {
            if matches!(r.op(), Op::Put | Op::Delete | Op::UpdateRange) {
                error(out, Status::DiskFull, m, max_response);
                return None;
            }
        }
        Some(slot)
    }

    /// Runs an admitted request's op on `slot` (`hash`: the key's there, if
    /// known).
    fn apply(
        &mut self,
        r: &Request<'_>,
        slot: u32,
        max_response: usize,
        out: &mut Vec<u8>,
        hash: Option<u64>,
    ) -> Option<Found> {
        let key = r.key();
        match r.op() {
            // A value its backups may not have yet is not read: the read
            // waits for them.
            Op::Get if self.slot_state.in_flight(key) => {
                out.clear();
                self.await_write = Some(fingerprint(key));
            }
            Op::Get => match self.store.get_hashed(slot, hash, key) {
                Some(v) if RESPONSE_HEADER + v.len() <= max_response => {
                    response_header(out, Status::Ok, 0, v.len());
                    return Some(Found(v as *const [u8]));
                }
                Some(v) => too_small(out, v.len(), max_response),
                None if self.must_pull(slot, key) => self.pull = Some(slot),
                None => status(out, Status::NotFound),
            },
            Op::Put => {
                let v = r.value();
                if v.len() > self.max_value {
                    let m = format!("value of {} bytes (at most {})", v.len(), self.max_value);
                    error(out, Status::TooLarge, &m, max_response);
                    return None;
                }
                match self.store.put(slot, key, v) {
                    Ok(()) => {
                        status(out, Status::Ok);
                        self.wrote(slot, key, Kind::Put);
                    }
                    Err(e) => {
                        let m = format!(
                            "max_memory {} bytes reached (worker {} holds {} of its {}-byte \
                             share; the record needs {} more)",
                            self.max_memory, self.worker, e.used, e.limit, e.needed
                        );
                        error(out, Status::OutOfMemory, &m, max_response)
                    }
                }
            }
            // Whether the key existed decides the answer: pull it first.
            Op::Delete if self.store.get(slot, key).is_none() && self.must_pull(slot, key) => {
                self.pull = Some(slot)
            }
            Op::Delete => {
                let found = self.store.delete(slot, key);
                status(out, if found { Status::Ok } else { Status::NotFound });
                if found {
                    self.wrote(slot, key, Kind::Delete);
                }
            }
            Op::UpdateRange => {
                let st = match self.store.patch(slot, key, r.offset() as usize, r.value()) {
                    Patch::Done => {
                        self.wrote(slot, key, Kind::Patch);
                        Status::Ok
                    }
                    Patch::NotFound if self.must_pull(slot, key) => {
                        self.pull = Some(slot);
                        return None;
                    }
                    Patch::NotFound => Status::NotFound,
                    Patch::OutOfRange => Status::OutOfRange,
                };
                status(out, st);
            }
            Op::Map | Op::Scan | Op::Control | Op::Raft | Op::Pull => {
                unreachable!("answered in admit")
            }
            Op::Replicate => error(
                out,
                Status::BadRequest,
                "a malformed replication message",
                max_response,
            ),
        }
        None
    }

    /// The slot's ready backup on `member` missed a write: nothing of the
    /// slot is served until the group no longer counts that copy as ready.
    #[cold]
    fn held(&self, out: &mut Vec<u8>, slot: u32, member: MemberId, max_response: usize) {
        let m = format!(
            "slot {slot}'s backup on member {member} missed a write; the slot is served again \
             once the control group counts that copy as stale"
        );
        error(out, Status::Unavailable, &m, max_response)
    }

    /// The member holds no lease: it may not answer for its slots.
    #[cold]
    fn unavailable(&self, out: &mut Vec<u8>, max_response: usize) {
        let m = format!(
            "member {} holds no lease from the control group (it is cut off from the \
             group's leader, an election is under way, or the group marked it failed)",
            self.me.member
        );
        error(out, Status::Unavailable, &m, max_response)
    }

    /// Where the key's slot lives: a redirect naming its owner, or, when the
    /// request was routed by a newer map than this worker's (the slot is
    /// changing hands and this worker has not heard yet), TryAgain.
    #[cold]
    fn redirect(&self, out: &mut Vec<u8>, routed_by: u32, owner: Owner, max_response: usize) {
        if routed_by > self.map.version() {
            return status(out, Status::TryAgain);
        }
        if RESPONSE_HEADER + REDIRECT_LEN > max_response {
            return too_small(out, REDIRECT_LEN, max_response);
        }
        begin_response(out, Status::Redirect, 0);
        Redirect {
            map_version: self.map.version(),
            owner,
        }
        .write(out);
        finish_response(out, 0);
    }

    /// The shard map as the payload (MAP answers).
    fn map_answer(&self, out: &mut Vec<u8>, st: Status, max_response: usize) {
        if RESPONSE_HEADER + self.map_bytes.len() > max_response {
            return too_small(out, self.map_bytes.len(), max_response);
        }
        begin_response(out, st, 0);
        out.extend_from_slice(&self.map_bytes);
        finish_response(out, 0);
    }

    /// Records from `start` on, as many as `count` and the allowance admit.
    fn scan(&self, start: &[u8], count: usize, max_response: usize, out: &mut Vec<u8>) {
        begin_response(out, Status::Ok, 0);
        let mut flags = 0;
        let slots = self.map.slots();
        let mine = |k: &[u8]| self.map.owner_of_slot(slot_of(k, slots)) == self.me;
        // Copies this worker keeps as a backup are not its to answer for.
        for (n, (k, v)) in self.store.scan(start).filter(|(k, _)| mine(k)).enumerate() {
            if n == count {
                break;
            }
            // A value its backups may not have yet is not read: the client
            // asks again shortly.
            if self.slot_state.in_flight(k) {
                out.clear();
                return status(out, Status::TryAgain);
            }
            if out.len() + SCAN_RECORD_HEADER + k.len() + v.len() > max_response {
                flags = FLAG_TRUNCATED;
                break;
            }
            push_scan_record(out, k, v);
        }
        finish_response(out, flags);
    }
}

/// Asks for the first 1 KiB of `v` to be brought into the cache: all of a
/// YCSB value, which is copied whole into the send ring next (past 1 KiB,
/// the copy's own sequential reads start the hardware prefetcher).
#[inline(always)]
fn prefetch(v: &[u8]) {
    // A counted loop: a chunk iterator costs twice the instructions.
    let mut at = 0;
    while at < v.len().min(1024) {
        prefetch_line(v.as_ptr().wrapping_add(at));
        at += 64;
    }
}

/// Asks for the cache line at `p` to be brought into the cache.
#[inline(always)]
fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing the program sees, and
    // does not fault whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p.cast(), core::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

fn status(out: &mut Vec<u8>, st: Status) {
    begin_response(out, st, 0);
    finish_response(out, 0);
}

/// An error answer with as much of its message as the allowance admits.
fn error(out: &mut Vec<u8>, st: Status, msg: &str, max_response: usize) {
    begin_response(out, st, 0);
    let room = max_response.saturating_sub(RESPONSE_HEADER);
    let mut end = msg.len().min(room);
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&msg.as_bytes()[..end]);
    finish_response(out, 0);
}

fn too_small(out: &mut Vec<u8>, needed: usize, max_response: usize) {
    begin_response(out, Status::AllowanceTooSmall, 0);
    if max_response >= RESPONSE_HEADER + 4 {
        out.extend_from_slice(&(needed as u32).to_le_bytes());
    }
    finish_response(out, 0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::proto::{write_request, Response, ScanRecords};
    use kvs_proto::Ticket;

    fn ask(h: &mut Handler, op: Op, key: &[u8], val: &[u8], n: u32, max: usize) -> Vec<u8> {
        let mut req = Vec::new();
        write_request(&mut req, op, 1, key, val, n, 0);
        let mut out = Vec::new();
        h.handle(&req, max, &mut out);
        assert!(out.len() <= max, "answer exceeds the allowance");
        out
    }

    const W0: Owner = Owner {
        member: MemberId(0),
        worker: 0,
    };

    fn addr() -> std::net::SocketAddr {
        "127.0.0.1:7000".parse().unwrap()
    }

    fn st(b: &[u8]) -> Status {
        Response::new_checked(b).unwrap().status()
    }

    #[test]
    fn without_a_lease_no_slot_is_served_and_the_map_still_is() {
        let map = ShardMap::single(addr(), 16, 2).unwrap();
        let mine = (0..)
            .map(|i| format!("k{i}"))
            .find(|k| map.owner(k.as_bytes()).worker == 0)
            .unwrap();
        let mut h = Handler::new(W0, map, 8, 16);
        let k = mine.as_bytes();
        assert_eq!(st(&ask(&mut h, Op::Put, k, b"v", 1, 64)), Status::Ok);
        h.leased = false;
        for (op, v) in [(Op::Get, &b""[..]), (Op::Put, b"w"), (Op::Delete, b"")] {
            let out = ask(&mut h, op, k, v, v.len() as u32, 256);
            let r = Response::new_checked(&out).unwrap();
            assert_eq!(r.status(), Status::Unavailable, "{op:?}");
            let m = String::from_utf8_lossy(r.payload());
            assert!(m.contains("member 0 holds no lease"), "{m}");
        }
        assert_eq!(
            st(&ask(&mut h, Op::Scan, b"", b"", 0, 256)),
            Status::Unavailable
        );
        assert_eq!(st(&ask(&mut h, Op::Map, b"", b"", 0, 4096)), Status::Ok);
        // Back under a lease, nothing was changed meanwhile.
        h.leased = true;
        let got = ask(&mut h, Op::Get, k, b"", 0, 64);
        assert_eq!(Response::new_checked(&got).unwrap().payload(), b"v");
    }

    #[test]
    fn a_full_disk_refuses_every_write_and_serves_reads() {
        let map = ShardMap::single(addr(), 16, 1).unwrap();
        let mut h = Handler::new(W0, map, 8, 16);
        assert_eq!(st(&ask(&mut h, Op::Put, b"k", b"v", 1, 64)), Status::Ok);
        h.disk_full = Some("disk full at worker-0.0.log".into());
        for (op, v) in [
            (Op::Put, &b"w"[..]),
            (Op::Delete, b""),
            (Op::UpdateRange, b"x"),
        ] {
            let out = ask(&mut h, op, b"k", v, v.len() as u32, 256);
            let r = Response::new_checked(&out).unwrap();
            assert_eq!(r.status(), Status::DiskFull, "{op:?}");
            assert_eq!(r.payload(), b"disk full at worker-0.0.log");
        }
        let got = ask(&mut h, Op::Get, b"k", b"", 0, 64);
        assert_eq!(Response::new_checked(&got).unwrap().payload(), b"v");
        assert_eq!(st(&ask(&mut h, Op::Scan, b"", b"", 0, 256)), Status::Ok);
        h.disk_full = None;
        assert_eq!(st(&ask(&mut h, Op::Put, b"k", b"w", 1, 64)), Status::Ok);
    }

    /// What `serve` answers `req` with, warmed by the three passes first
    /// (`warmed`) or not.
    fn served(h: &mut Handler, req: &[u8], warmed: Option<Warmed>) -> (Status, Vec<u8>) {
        let mut out = Vec::new();
        match h.serve(req, 256, &mut out, warmed, Role::Member) {
            Served::Value(v) => {
                let v = v.to_vec();
                out.extend_from_slice(&v);
                (st(&out), v)
            }
            Served::Handled(_) => (st(&out), Vec::new()),
        }
    }

    fn get(key: &[u8]) -> Vec<u8> {
        let mut req = Vec::new();
        write_request(&mut req, Op::Get, 1, key, b"", 0, 0);
        req
    }

    #[test]
    fn a_warmed_get_answers_as_one_not_warmed_even_if_its_slot_changed_since() {
        let map = ShardMap::single(addr(), 16, 1).unwrap();
        let mut h = Handler::new(W0, map, 8, 64);
        for i in 0..40u32 {
            let (k, v) = (format!("k{i}"), format!("value {i}"));
            let out = ask(
                &mut h,
                Op::Put,
                k.as_bytes(),
                v.as_bytes(),
                v.len() as u32,
                64,
            );
            assert_eq!(st(&out), Status::Ok);
        }
        for i in 0..45u32 {
            let req = get(format!("k{i}").as_bytes());
            let w = h.warm(&req).expect("a GET is warmed");
            h.prefetch_bucket(&w);
            h.prefetch_value(&req, &w);
            let plain = served(&mut h, &req, None);
            assert_eq!(served(&mut h, &req, Some(w)), plain, "k{i}");
            let want = if i < 40 {
                (Status::Ok, format!("value {i}").into_bytes())
            } else {
                (Status::NotFound, Vec::new())
            };
            assert_eq!(plain, want, "k{i}");
        }
        // Only GETs are warmed.
        let mut put = Vec::new();
        write_request(&mut put, Op::Put, 1, b"k1", b"x", 1, 0);
        assert!(h.warm(&put).is_none());
        // Between warming and serving, the key's slot is taken away and
        // made again (a new table, which hashes differently), and the key
        // written anew: the warmed hash misses, and the key is found anyway.
        let req = get(b"k3");
        let w = h.warm(&req).unwrap();
        let slot = slot_of(b"k3", 16);
        h.store.take_slot(slot);
        assert_eq!(st(&ask(&mut h, Op::Put, b"k3", b"anew", 4, 64)), Status::Ok);
        assert_eq!(
            served(&mut h, &req, Some(w)),
            (Status::Ok, b"anew".to_vec())
        );
        // Warmed while the slot was not here at all: no hash, still found.
        h.store.take_slot(slot);
        let w = h.warm(&req).unwrap();
        assert!(w.hash.is_none());
        assert_eq!(
            st(&ask(&mut h, Op::Put, b"k3", b"again", 5, 64)),
            Status::Ok
        );
        assert_eq!(
            served(&mut h, &req, Some(w)),
            (Status::Ok, b"again".to_vec())
        );
    }

    #[test]
    fn only_a_members_connection_may_replicate() {
        use kvs_proto::replica::{write_replicate, Header};
        let map = ShardMap::single(addr(), 1, 1).unwrap();
        let mut h = Handler::new(W0, map, 8, 16);
        let mut req = Vec::new();
        let hdr = Header {
            kind: Kind::Put,
            slot: 0,
            epoch: 1,
            primary: W0,
            seq: 1,
            offset: 0,
            id: RequestId::default(),
        };
        write_replicate(&mut req, &hdr, b"k", b"v");
        let mut out = Vec::new();
        h.serve(&req, 256, &mut out, None, Role::Client);
        let r = Response::new_checked(&out).unwrap();
        assert_eq!(r.status(), Status::Forbidden);
        let m = String::from_utf8_lossy(r.payload());
        assert!(m.contains("client token"), "{m}");
        assert_eq!(h.refused_member_ops, 1);
        assert_eq!(h.store.len(), 0);
        // A member's is looked at (and fenced: this worker backs nothing up).
        h.serve(&req, 256, &mut out, None, Role::Member);
        assert_eq!(st(&out), Status::Fenced);
        assert_eq!(h.refused_member_ops, 1);
    }

    /// A put of `v` to `k` with request id `(client, q)`.
    fn put_with_id(k: &[u8], v: &[u8], client: u64, q: u64) -> Vec<u8> {
        let mut req = Vec::new();
        write_request(&mut req, Op::Put, 1, k, v, v.len() as u32, 0);
        kvs_proto::proto::add_request_id(&mut req, RequestId::new(client, q));
        req
    }

    /// One slot, on worker 0 of member 0, with a ready backup on member 1.
    fn backed_up_map() -> ShardMap {
        let mut map = ShardMap::single(addr(), 1, 1).unwrap();
        map.add_member(kvs_proto::Member {
            addr: "127.0.0.1:7001".parse().unwrap(),
            workers: 1,
            bulk_port: 0,
        })
        .unwrap();
        map.add_backup(0..1, MemberId(1)).unwrap();
        map.set_backup_ready(0..1, MemberId(1)).unwrap();
        map.set_version(2);
        map
    }

    /// The begin of an empty copy of slot 0 in stream `stream`.
    fn copy_of_slot_0(stream: u64) -> kvs_proto::replica::CopyBegin {
        kvs_proto::replica::CopyBegin {
            ticket: Ticket::from_bytes([3; 16]),
            first: 0,
            end: 1,
            records: 0,
            bytes: 0,
            stream,
        }
    }

    /// The backup's worker in [`backed_up_map`].
    const B0: Owner = Owner {
        member: MemberId(1),
        worker: 0,
    };

    #[test]
    fn a_restarted_backup_takes_no_copy_until_its_restart_is_applied() {
        use kvs_proto::replica::{write_replicate, Header};
        let b = B0;
        let map = backed_up_map();
        // Started from its files, with records of the slot.
        let mut store = Store::new(1, usize::MAX);
        store.put(0, b"k", b"kept").unwrap();
        let mut backup = Handler::with_store(b, map.clone(), 8, 16, store, Retained::new(true));
        let hdr = |kind| Header {
            kind,
            slot: 0,
            epoch: map.epoch(0),
            primary: W0,
            seq: 9,
            offset: 0,
            id: RequestId::default(),
        };
        let begin = copy_of_slot_0(9);
        let (mut ask_msg, mut begin_msg, mut out) = (Vec::new(), Vec::new(), Vec::new());
        write_replicate(&mut ask_msg, &hdr(Kind::CopyAsk), &[], &[]);
        write_replicate(
            &mut begin_msg,
            &hdr(Kind::CopyBegin),
            &begin.ticket.bytes(),
            &begin.value(),
        );
        // Asked, and a whole copy begun: try again, the records untouched.
        for m in [&ask_msg, &begin_msg] {
            backup.handle(m, 256, &mut out);
            let r = Response::new_checked(&out).unwrap();
            assert_eq!(r.status(), Status::TryAgain);
            let why = String::from_utf8_lossy(r.payload());
            assert!(why.contains("restart is not applied"), "{why}");
        }
        assert_eq!(backup.store.get(0, b"k"), Some(&b"kept"[..]));
        // Once it is, the copy goes on.
        backup.end_retention();
        backup.handle(&ask_msg, 256, &mut out);
        assert_eq!(st(&out), Status::Ok);
        backup.handle(&begin_msg, 256, &mut out);
        assert_eq!(st(&out), Status::Ok);
    }

    #[test]
    fn a_write_answered_in_its_turn_holds_the_turns_later_reads() {
        // Without backups a write is answered at once, before the log
        // commit: the handler says so, and the worker's later reads of the
        // turn wait for the commit with it.
        let map = ShardMap::single(addr(), 1, 1).unwrap();
        let mut h = Handler::new(W0, map, 8, 16);
        let mut out = Vec::new();
        assert!(!h.answered_uncommitted);
        assert_eq!(
            st(&ask(&mut h, Op::Get, b"k", b"", 0, 64)),
            Status::NotFound
        );
        assert!(!h.answered_uncommitted, "a read answers no write");
        let got = h.handle(&put_with_id(b"k", b"v", 7, 1), 64, &mut out);
        assert!(matches!(got, Handled::Answered));
        assert!(h.answered_uncommitted);
        // The worker clears it after the commit; a refused write is no
        // write answered.
        h.answered_uncommitted = false;
        h.disk_full = Some("full".into());
        h.handle(&put_with_id(b"k", b"w", 7, 2), 64, &mut out);
        assert_eq!(st(&out), Status::DiskFull);
        assert!(!h.answered_uncommitted);
        // With a backup, the write awaits it (answered in a later turn,
        // once committed): nothing is answered now.
        let map = backed_up_map();
        let mut h = Handler::new(W0, map, 8, 16);
        let got = h.handle(&put_with_id(b"k", b"v", 7, 1), 64, &mut out);
        assert!(matches!(got, Handled::Forward(_)));
        assert!(!h.answered_uncommitted);
    }

    #[test]
    fn many_writes_in_flight_sent_again_after_a_failover_are_not_applied_again() {
        use kvs_proto::replica::{write_replicate, Header};
        let b = B0;
        let map = backed_up_map();
        let mut primary = Handler::new(W0, map.clone(), 8, 16);
        let mut backup = Handler::new(b, map.clone(), 8, 16);
        let mut out = Vec::new();
        let mut msg = Vec::new();
        let hdr = |kind, seq, id| Header {
            kind,
            slot: 0,
            epoch: map.epoch(0),
            primary: W0,
            seq,
            offset: 0,
            id,
        };
        let c = copy_of_slot_0(0);
        write_replicate(
            &mut msg,
            &hdr(Kind::CopyBegin, 0, RequestId::default()),
            &c.ticket.bytes(),
            &c.value(),
        );
        backup.handle(&msg, 64, &mut out);
        assert_eq!(st(&out), Status::Ok);
        // One client, 40 writes of one key in flight: the primary applies
        // them all and forwards each to the backup, which applies it.
        for q in 1..=40u64 {
            let v = format!("v{q}");
            let Handled::Forward(f) =
                primary.handle(&put_with_id(b"k", v.as_bytes(), 7, q), 64, &mut out)
            else {
                panic!("a write with a backup is forwarded");
            };
            primary.slot_state.end_write(f.fp);
            write_replicate(&mut msg, &hdr(Kind::Put, f.seq, f.id), b"k", v.as_bytes());
            backup.handle(&msg, 64, &mut out);
            assert_eq!(st(&out), Status::Ok, "write {q}");
        }
        // The primary dies before the answers of the older ones reached the
        // client; the backup is promoted, and the client sends them again.
        let mut promoted = map.clone();
        promoted.promote(0, MemberId(1)).unwrap();
        promoted.set_version(3);
        backup.install(promoted);
        for q in 1..=24u64 {
            let v = format!("v{q}");
            backup.handle(&put_with_id(b"k", v.as_bytes(), 7, q), 64, &mut out);
            assert_eq!(st(&out), Status::Ok, "write {q} sent again");
        }
        let got = ask(&mut backup, Op::Get, b"k", b"", 0, 64);
        assert_eq!(
            String::from_utf8_lossy(Response::new_checked(&got).unwrap().payload()),
            "v40",
            "an older write was applied again over the newest"
        );
        // Marked as sent again, the same.
        for q in 1..=40u64 {
            let mut req = put_with_id(b"k", b"again", 7, q);
            kvs_proto::proto::mark_resent(&mut req);
            backup.handle(&req, 64, &mut out);
            assert_eq!(st(&out), Status::Ok, "write {q} sent again, marked");
        }
        // Once the client's writes moved on past the window, one sent again
        // cannot be told: refused, not applied, and the client told why.
        let far = 40 + crate::dedup::WINDOW + 1;
        backup.handle(&put_with_id(b"k", b"far", 7, far), 64, &mut out);
        assert_eq!(st(&out), Status::Ok);
        let mut late = put_with_id(b"k", b"late", 7, 40);
        kvs_proto::proto::mark_resent(&mut late);
        backup.handle(&late, 256, &mut out);
        let r = Response::new_checked(&out).unwrap();
        assert_eq!(r.status(), Status::TooOld);
        let m = String::from_utf8_lossy(r.payload());
        assert!(m.contains("not applied now"), "{m}");
        let got = ask(&mut backup, Op::Get, b"k", b"", 0, 64);
        assert_eq!(Response::new_checked(&got).unwrap().payload(), b"far");
    }

    #[test]
    fn a_write_sent_again_is_applied_once() {
        let map = ShardMap::single(addr(), 16, 1).unwrap();
        let mut h = Handler::new(W0, map, 8, 16);
        let with_id = |op, v: &[u8], q| {
            let mut req = Vec::new();
            write_request(&mut req, op, 1, b"k", v, v.len() as u32, 0);
            kvs_proto::proto::add_request_id(&mut req, RequestId::new(7, q));
            req
        };
        let run = |h: &mut Handler, req: &[u8]| {
            let mut out = Vec::new();
            h.handle(req, 64, &mut out);
            st(&out)
        };
        let first = with_id(Op::Put, b"one", 1);
        assert_eq!(run(&mut h, &first), Status::Ok);
        // Another client's write comes between; the first one's re-send
        // (its answer was lost) must not undo it.
        assert_eq!(st(&ask(&mut h, Op::Put, b"k", b"two", 3, 64)), Status::Ok);
        assert_eq!(run(&mut h, &first), Status::Ok);
        let got = ask(&mut h, Op::Get, b"k", b"", 0, 64);
        assert_eq!(Response::new_checked(&got).unwrap().payload(), b"two");
        // A new request of the same client is applied.
        assert_eq!(run(&mut h, &with_id(Op::Put, b"three", 2)), Status::Ok);
        let got = ask(&mut h, Op::Get, b"k", b"", 0, 64);
        assert_eq!(Response::new_checked(&got).unwrap().payload(), b"three");
        // A delete sent again answers as the first did.
        let del = with_id(Op::Delete, b"", 3);
        assert_eq!(run(&mut h, &del), Status::Ok);
        assert_eq!(run(&mut h, &del), Status::Ok);
    }

    #[test]
    fn a_value_its_backups_may_not_have_is_not_read() {
        let mut map = ShardMap::single(addr(), 1, 1).unwrap();
        map.add_member(kvs_proto::Member {
            addr: "127.0.0.1:7001".parse().unwrap(),
            workers: 1,
            bulk_port: 0,
        })
        .unwrap();
        map.add_backup(0..1, MemberId(1)).unwrap();
        let mut h = Handler::new(W0, map, 8, 16);
        // "a" is written and its backup answers.
        ask(&mut h, Op::Put, b"a", b"1", 1, 64);
        h.slot_state.end_write(fingerprint(b"a"));
        let mut req = Vec::new();
        write_request(&mut req, Op::Put, 1, b"k", b"v", 1, 0);
        let mut out = Vec::new();
        let Handled::Forward(f2) = h.handle(&req, 64, &mut out) else {
            panic!("a write with a backup is forwarded");
        };
        // A read of "k" waits; a scan over it is asked again; "a" (whose
        // write was answered above) reads.
        write_request(&mut req, Op::Get, 1, b"k", b"", 0, 0);
        assert_eq!(
            h.handle(&req, 64, &mut out),
            Handled::AwaitWrite { fp: f2.fp }
        );
        assert!(h.in_flight(f2.fp));
        assert_eq!(
            st(&ask(&mut h, Op::Scan, b"", b"", 10, 256)),
            Status::TryAgain
        );
        h.slot_state.end_write(f2.fp);
        assert!(!h.in_flight(f2.fp));
        let all = ask(&mut h, Op::Scan, b"", b"", 10, 256);
        assert_eq!(st(&all), Status::Ok);
        let got = ask(&mut h, Op::Get, b"k", b"", 0, 64);
        assert_eq!(Response::new_checked(&got).unwrap().payload(), b"v");
    }

    #[test]
    fn operations_limits_redirects_and_garbage() {
        let map = ShardMap::single(addr(), 16, 2).unwrap();
        let mine = (0..)
            .map(|i| format!("k{i}"))
            .find(|k| map.owner(k.as_bytes()).worker == 0)
            .unwrap();
        let theirs = (0..)
            .map(|i| format!("k{i}"))
            .find(|k| map.owner(k.as_bytes()).worker == 1)
            .unwrap();
        let mut h = Handler::new(W0, map.clone(), 8, 16);
        let (k, o) = (mine.as_bytes(), theirs.as_bytes());
        assert_eq!(st(&ask(&mut h, Op::Put, k, b"value", 5, 64)), Status::Ok);
        let got = ask(&mut h, Op::Get, k, b"", 0, 64);
        assert_eq!(Response::new_checked(&got).unwrap().payload(), b"value");
        // The answer must fit the allowance: the size needed comes back.
        let small = ask(&mut h, Op::Get, k, b"", 0, RESPONSE_HEADER + 4);
        let r = Response::new_checked(&small).unwrap();
        assert_eq!(
            (r.status(), r.payload()),
            (Status::AllowanceTooSmall, &5u32.to_le_bytes()[..])
        );
        // Limits.
        assert_eq!(
            st(&ask(&mut h, Op::Put, k, &[0; 17], 17, 64)),
            Status::TooLarge
        );
        assert_eq!(
            st(&ask(&mut h, Op::Get, b"123456789", b"", 0, 64)),
            Status::TooLarge
        );
        // Another worker's key: a redirect naming it.
        let red = ask(&mut h, Op::Get, o, b"", 0, 1024);
        let r = Response::new_checked(&red).unwrap();
        assert_eq!(r.status(), Status::Redirect);
        assert_eq!(
            Redirect::parse(r.payload()).unwrap(),
            Redirect {
                map_version: 1,
                owner: Owner {
                    member: MemberId(0),
                    worker: 1
                }
            }
        );
        // Routed by a map newer than this worker's: try again.
        let mut req = Vec::new();
        write_request(&mut req, Op::Get, 2, o, b"", 0, 0);
        let mut out = Vec::new();
        h.handle(&req, 64, &mut out);
        assert_eq!(st(&out), Status::TryAgain);
        // The map itself.
        let m = ask(&mut h, Op::Map, b"", b"", 0, 1024);
        let r = Response::new_checked(&m).unwrap();
        assert_eq!(ShardMap::decode(r.payload()).unwrap(), map);
        // Control requests are not a worker's, whatever slot their key is
        // in (not redirected).
        let c = ask(&mut h, Op::Control, b"", b"{}", 2, 1024);
        assert_eq!(st(&c), Status::BadRequest);
        let c = ask(&mut h, Op::Control, o, b"{}", 2, 1024);
        assert_eq!(st(&c), Status::BadRequest);
        // Garbage: a clear error, whatever the allowance.
        for max in [0, 3, RESPONSE_HEADER, 64] {
            let mut out = Vec::new();
            h.handle(&[9, 9, 9], max, &mut out);
            assert!(out.len() <= max.max(RESPONSE_HEADER));
            assert_eq!(st(&out), Status::BadRequest);
        }
        // Delete, then not found.
        assert_eq!(st(&ask(&mut h, Op::Delete, k, b"", 0, 64)), Status::Ok);
        assert_eq!(st(&ask(&mut h, Op::Get, k, b"", 0, 64)), Status::NotFound);
        h.draining = true;
        assert_eq!(
            st(&ask(&mut h, Op::Get, k, b"", 0, 64)),
            Status::ShuttingDown
        );
    }

    #[test]
    fn puts_past_the_cap_are_refused_and_everything_else_goes_on() {
        let map = ShardMap::single(addr(), 1, 1).unwrap();
        let rec = crate::store::memory::record_cost(4, 100) as u64;
        let mut h = Handler::new(W0, map, 16, 128).with_memory_limit(2 * rec + 50, 1);
        let put =
            |h: &mut Handler, k: &[u8], n: usize| ask(h, Op::Put, k, &vec![7; n], n as u32, 512);
        assert_eq!(st(&put(&mut h, b"key1", 100)), Status::Ok);
        assert_eq!(st(&put(&mut h, b"key2", 100)), Status::Ok);
        let full = put(&mut h, b"key3", 100);
        let r = Response::new_checked(&full).unwrap();
        assert_eq!(r.status(), Status::OutOfMemory);
        let m = std::str::from_utf8(r.payload()).unwrap();
        assert!(
            m.starts_with(&format!("max_memory {} bytes reached", 2 * rec + 50))
                && m.contains(&format!("holds {}", 2 * rec)),
            "{m}"
        );
        // The message is cut to the allowance like any other.
        let small = ask(
            &mut h,
            Op::Put,
            b"key3",
            &[7; 100],
            100,
            RESPONSE_HEADER + 5,
        );
        assert_eq!(small.len(), RESPONSE_HEADER + 5);
        // At the cap: reads, overwrites that fit, patches and deletes.
        assert_eq!(st(&ask(&mut h, Op::Get, b"key1", b"", 0, 512)), Status::Ok);
        assert_eq!(st(&put(&mut h, b"key1", 90)), Status::Ok);
        let patch = ask(&mut h, Op::UpdateRange, b"key2", b"abc", 3, 512);
        assert_eq!(st(&patch), Status::Ok);
        assert_eq!(
            st(&ask(&mut h, Op::Get, b"key3", b"", 0, 512)),
            Status::NotFound
        );
        assert_eq!(
            st(&ask(&mut h, Op::Delete, b"key2", b"", 0, 512)),
            Status::Ok
        );
        assert_eq!(st(&put(&mut h, b"key3", 100)), Status::Ok);
    }

    /// Member 1's worker, once member 0's four slots were handed to it
    /// (imported), and the map that says so.
    fn importer() -> (Owner, ShardMap, Handler) {
        let mut map = ShardMap::single(addr(), 4, 1).unwrap();
        let b = map
            .add_member(kvs_proto::Member {
                addr: "127.0.0.1:7001".parse().unwrap(),
                workers: 1,
                bulk_port: 0,
            })
            .unwrap();
        let me = Owner {
            member: b,
            worker: 0,
        };
        let mut h = Handler::new(me, map.clone(), 16, 64);
        map.assign(0..4, b, Some(MemberId(0))).unwrap();
        map.set_version(2);
        h.install(map.clone());
        (me, map, h)
    }

    #[test]
    fn a_write_sent_again_to_an_imported_slot_is_refused_not_applied_twice() {
        // Member 0 applied client 7's write 5, its answer was lost, and the
        // slots moved here: the client sends the write again.
        let (me, map, mut h) = importer();
        h.source_frozen(0..4);
        let put = |h: &mut Handler, v: &[u8], q: u64, resent: bool| {
            let mut req = Vec::new();
            write_request(&mut req, Op::Put, 2, b"k", v, v.len() as u32, 0);
            kvs_proto::proto::add_request_id(&mut req, RequestId::new(7, q));
            if resent {
                kvs_proto::proto::mark_resent(&mut req);
            }
            let mut out = Vec::new();
            h.handle(&req, 256, &mut out);
            st(&out)
        };
        assert_eq!(put(&mut h, b"again", 5, true), Status::TooOld);
        // Its new writes are applied, and their own repeats recognised.
        assert_eq!(put(&mut h, b"new", 6, false), Status::Ok);
        assert_eq!(put(&mut h, b"new", 6, true), Status::Ok);
        // Restarted mid-import, the same.
        let mut h = Handler::new(me, map, 16, 64);
        h.source_frozen(0..4);
        assert_eq!(put(&mut h, b"again", 5, true), Status::TooOld);
    }

    #[test]
    fn a_store_from_the_log_keeps_this_workers_slots_and_refuses_resent_writes() {
        // Member 0 owns slots 0..2; 2..4 moved to member 1 while it was
        // down, and its log still holds records of all four.
        let mut map = ShardMap::single(addr(), 4, 1).unwrap();
        let b = map
            .add_member(kvs_proto::Member {
                addr: "127.0.0.1:7001".parse().unwrap(),
                workers: 1,
                bulk_port: 0,
            })
            .unwrap();
        map.assign(2..4, b, None).unwrap();
        let me = map.owner_of_slot(0);
        let key_of = |slot: u32| {
            (0u32..)
                .map(|i| format!("k{i}").into_bytes())
                .find(|k| kvs_proto::shard::slot_of(k, 4) == slot)
                .unwrap()
        };
        let mut store = Store::new(4, usize::MAX);
        for slot in 0..4 {
            store.put(slot, &key_of(slot), b"logged").unwrap();
        }
        let mut h = Handler::with_store(me, map, 16, 64, store, Retained::new(false));
        assert_eq!(h.store.held_slots().collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(h.store.get(0, &key_of(0)), Some(&b"logged"[..]));
        // Client 7's write 5 may be in the log; its request ids are not:
        // sent again, it is refused rather than applied twice.
        let put = |h: &mut Handler, q: u64, resent: bool| {
            let mut req = Vec::new();
            write_request(&mut req, Op::Put, 1, &key_of(1), b"v", 1, 0);
            kvs_proto::proto::add_request_id(&mut req, RequestId::new(7, q));
            if resent {
                kvs_proto::proto::mark_resent(&mut req);
            }
            let mut out = Vec::new();
            h.handle(&req, 256, &mut out);
            st(&out)
        };
        assert_eq!(put(&mut h, 5, true), Status::TooOld);
        assert_eq!(put(&mut h, 6, false), Status::Ok);
    }

    #[test]
    fn keys_of_an_imported_slot_wait_for_pulls_until_settled() {
        // Handed over: every slot imported from member 0.
        let (me, mut map, mut h) = importer();
        let b = me.member;
        let handled = |h: &mut Handler, op: Op, k: &[u8], v: &[u8]| {
            let mut req = Vec::new();
            write_request(&mut req, op, 2, k, v, v.len() as u32, 0);
            let mut out = Vec::new();
            (h.handle(&req, 256, &mut out), out)
        };
        let slot = |k: &[u8]| kvs_proto::shard::slot_of(k, 4);
        // Until the source has frozen the slots (it may still take writes
        // for them), the target serves none of them.
        let (r, out) = handled(&mut h, Op::Put, b"early", b"v");
        assert_eq!((r, st(&out)), (Handled::Answered, Status::TryAgain));
        h.source_frozen(0..4);
        // Not here yet: reads, deletes and patches wait for a pull.
        for (op, v) in [
            (Op::Get, &b""[..]),
            (Op::Delete, b""),
            (Op::UpdateRange, b"x"),
        ] {
            let (r, _) = handled(&mut h, op, b"absent", v);
            assert_eq!(
                r,
                Handled::Pull {
                    slot: slot(b"absent")
                },
                "{op:?}"
            );
        }
        // Writes are served at once and win over pulled copies.
        let (r, out) = handled(&mut h, Op::Put, b"written", b"new");
        assert_eq!((r, st(&out)), (Handled::Answered, Status::Ok));
        assert_eq!(Response::new_checked(&out).unwrap().flags(), 0);
        h.store
            .apply_pulled(slot(b"written"), b"written", Some(b"old"));
        let (_, out) = handled(&mut h, Op::Get, b"written", b"");
        assert_eq!(Response::new_checked(&out).unwrap().payload(), b"new");
        // A pulled key is answered; one the source lacks is not found.
        h.store
            .apply_pulled(slot(b"pulled"), b"pulled", Some(b"value"));
        let (_, out) = handled(&mut h, Op::Get, b"pulled", b"");
        assert_eq!(Response::new_checked(&out).unwrap().payload(), b"value");
        h.store.apply_pulled(slot(b"absent"), b"absent", None);
        let (r, out) = handled(&mut h, Op::Get, b"absent", b"");
        assert_eq!((r, st(&out)), (Handled::Answered, Status::NotFound));
        // Scans wait for the imports.
        let (_, out) = handled(&mut h, Op::Scan, b"", b"");
        assert_eq!(st(&out), Status::TryAgain);
        // The import ends: misses are plain misses.
        map.finish_import(0..4).unwrap();
        map.set_version(3);
        let done = h.install(map.clone());
        assert_eq!(done.imports_ended.len(), 4);
        let (r, out) = handled(&mut h, Op::Get, b"other", b"");
        assert_eq!((r, st(&out)), (Handled::Answered, Status::NotFound));
        // Routed by version 2 while this worker serves by 3: the answer
        // says a newer map exists.
        let flags = Response::new_checked(&out).unwrap().flags();
        assert_eq!(flags & FLAG_MAP_NEWER, FLAG_MAP_NEWER);
        // Given away: the records leave the store whole.
        map.assign(0..4, MemberId(0), Some(b)).unwrap();
        map.set_version(4);
        let done = h.install(map);
        let held: usize = done.given_away.iter().map(|(_, r)| r.len()).sum();
        assert_eq!((held, h.store.len()), (2, 0));
    }

    #[test]
    fn scans_stop_at_the_count_or_the_allowance() {
        let map = ShardMap::single(addr(), 1, 1).unwrap();
        let mut h = Handler::new(W0, map, 16, 16);
        for i in 0..10 {
            ask(&mut h, Op::Put, format!("key{i}").as_bytes(), b"vv", 2, 64);
        }
        let all = ask(&mut h, Op::Scan, b"key3", b"", 4, 4096);
        let r = Response::new_checked(&all).unwrap();
        let keys: Vec<_> = ScanRecords::new(r.payload())
            .map(|x| x.unwrap().0.to_vec())
            .collect();
        assert_eq!(
            keys,
            [b"key3", b"key4", b"key5", b"key6"].map(|k| k.to_vec())
        );
        assert_eq!(r.flags(), 0);
        // Room for two records (6 + 4 + 2 bytes each) only.
        let part = ask(&mut h, Op::Scan, b"key3", b"", 4, RESPONSE_HEADER + 25);
        let r = Response::new_checked(&part).unwrap();
        assert_eq!(ScanRecords::new(r.payload()).count(), 2);
        assert_eq!(r.flags(), FLAG_TRUNCATED);
    }
}
