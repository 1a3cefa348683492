//! One worker's data, which only its worker thread touches, so no lock is
//! taken on any path. Records are kept per slot (hash slot of the shard
//! map): each slot the worker holds has a hash table of its own (aHash, keyed
//! at random: keys come from clients, and a fixed hash would let one flood a
//! bucket; it costs a fifth of std's SipHash on a YCSB key) of records whose
//! key and value share one allocation (`record.rs`), so a slot's records can be listed, shipped and dropped without
//! looking at any other slot's. An ordered index of all the worker's keys
//! serves scans. A slot taken out of the store leaves its keys in the
//! index, stale (a scan skips a key its slot no longer holds): taking a
//! slot whole costs no search per record, and the worker sweeps the stale
//! keys out a bounded number at a time between turns ([`Store::sweep`]).
//! Writes that would take the heap the records occupy past the
//! store's limit (its worker's share of `max_memory`) are refused; see
//! [`memory`] for what a record costs.
//!
//! A migration uses the per-slot layout at both ends. The source *takes* a
//! slot it gave away ([`Store::take_slot`]): its records leave the store
//! whole, as read-only [`SlotRecords`] the target pulls from. The target
//! *imports* the slot ([`Store::begin_import`]): it serves it at once, takes
//! pulled records only for keys it has neither ([`Store::apply_pulled`]) nor
//! deleted since the import began (a tombstone remembers those), so a write
//! at the target always beats the older pulled copy.

pub(crate) mod change;
pub(crate) mod export;
pub(crate) mod index_key;
pub mod memory;
pub(crate) mod position;
pub(crate) mod record;
mod reindex;

use std::collections::BTreeMap;

/// The store's tombstone sets: keyed at random (see the module docs).
type HashSet<K> = std::collections::HashSet<K, ahash::RandomState>;
use std::ops::Bound;

use kvs_wal::Batch;

use self::change::Change;
use self::index_key::IndexKey;
use self::memory::{record_cost, OutOfMemory};
use self::record::{Record, Records};

/// One slot's records.
#[derive(Debug, Default)]
struct Slot {
    map: Records,
    /// Bytes of its keys and values.
    bytes: usize,
    /// Heap bytes its records cost (`memory::record_cost` summed), so that
    /// taking the slot away needs no pass over its records.
    used: usize,
    /// Which of the slot's lives this is (a store-wide count): an
    /// ordered-index entry made in another life is stale.
    life: u32,
    /// While the slot is being imported, or copied here as a backup: keys
    /// deleted here since the import began (a pulled copy of them is stale).
    import: Option<HashSet<Box<[u8]>>>,
    /// The import is a backup's copy ([`Store::begin_copy`]), not a
    /// migration's: the slot is not served here, so it does not count as
    /// importing.
    copying: bool,
    /// Where this copy stands in its primary's stream, if it is a
    /// complete backup's copy ([`position`]).
    position: Option<Position>,
}

impl Slot {
    /// A new slot, in the next life of `lives`. A life ends only when the
    /// slot is taken whole (a handover), so the count comes round only
    /// after 2^32 handovers of slots to this worker.
    fn new(lives: &mut u32) -> Box<Slot> {
        *lives = lives.wrapping_add(1);
        Box::new(Slot {
            life: *lives,
            ..Slot::default()
        })
    }
}

/// A slot's records taken out of a store: read-only, shared by whatever
/// ships them (a migration's bulk transfer and its priority pulls).
#[derive(Debug, Default)]
pub struct SlotRecords {
    map: Records,
    bytes: usize,
}

impl SlotRecords {
    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.map.get(key).map(Record::value)
    }
    /// The records, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.map.iter().map(|r| (r.key(), r.value()))
    }
    /// How many records.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// No records.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    /// Bytes of keys and values.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// A pulled record with its allocations made (its record and its index
/// key), on the thread that received it rather than on the worker's, which
/// then only files it ([`Store::apply_ready`]).
#[derive(Debug)]
pub(crate) struct Ready {
    slot: u32,
    record: Record,
    key: IndexKey,
}

impl Ready {
    /// `key` and `value` of slot `slot`.
    pub fn new(slot: u32, key: &[u8], value: &[u8]) -> Ready {
        Ready {
            slot,
            record: Record::new(key, value),
            key: IndexKey::new(key),
        }
    }

    /// Its slot.
    pub fn slot(&self) -> u32 {
        self.slot
    }
}

/// Whether a pulled record was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pulled {
    /// Stored.
    Taken,
    /// The key is here already or was deleted here since the import began:
    /// the local state is newer.
    Stale,
    /// The slot is not being imported (any more).
    NotImporting,
}

/// A stream of writes of one slot, and the last of them a copy applied
/// (where a backup's copy stands: [`position`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    /// The stream: a number the slot's primary drew when it became the
    /// primary (never 0).
    pub stream: u64,
    /// The last write applied.
    pub applied: u64,
}

/// A worker's keys and values, by slot.
#[derive(Debug)]
pub struct Store {
    /// Index: slot number. None: no record of the slot here.
    slots: Vec<Option<Box<Slot>>>,
    // The keys again, in order, with their slots (owned copies: the store
    // stays `Send`); some of them stale (their slot was taken).
    order: BTreeMap<IndexKey, Place>,
    /// The life the next slot made gets.
    lives: u32,
    /// The stale keys a sweep found, one after another (kept to reuse).
    swept: Vec<u8>,
    swept_ends: Vec<usize>,
    /// How many keys the slots hold (the rest of `order` is stale).
    keys: usize,
    /// Where the sweep of stale keys goes on from (`None`: the start).
    sweep_from: Option<Box<[u8]>>,
    bytes: usize,
    // Heap bytes the records cost (`memory::record_cost` summed).
    used: usize,
    limit: usize,
    /// Slots being imported.
    importing: u32,
    /// While a recovery replays: new keys are not put in `order`, which
    /// is built whole once the replay ends ([`reindex`]).
    unindexed: bool,
    /// Every change to the records, as records of the worker's durable
    /// log ([`change`]), until the worker writes them at its turn's end;
    /// `None`: no log (`durability = "none"`).
    journal: Option<Batch>,
    /// Slots given away whose import is not over: their records, frozen
    /// where the migration's source holds them ([`export`]).
    exports: Vec<(u32, std::sync::Weak<SlotRecords>)>,
}

/// Where an ordered-index entry's record lives: its slot, and the slot's
/// life when the entry was made. Every way a record leaves a slot but one
/// removes its entry: a delete does, and taking the slot whole ends that
/// life. So an entry is live exactly when its slot is in that life still,
/// which the sweep tells without looking the key up.
#[derive(Debug, Clone, Copy)]
struct Place {
    slot: u32,
    life: u32,
}

/// UPDATE_RANGE outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patch {
    /// Written.
    Done,
    /// No such key.
    NotFound,
    /// The range runs past the value's end.
    OutOfRange,
}

/// What dropping a slot freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dropped {
    /// Records.
    pub keys: usize,
    /// Bytes of their keys and values.
    pub bytes: usize,
}

impl Store {
    /// An empty store for a map of `slots` slots whose records may cost at
    /// most `limit` heap bytes (`usize::MAX`: no limit).
    pub fn new(slots: u32, limit: usize) -> Store {
        Store {
            slots: (0..slots).map(|_| None).collect(),
            order: BTreeMap::new(),
            lives: 0,
            swept: Vec::new(),
            swept_ends: Vec::new(),
            keys: 0,
            sweep_from: None,
            bytes: 0,
            used: 0,
            limit,
            importing: 0,
            unindexed: false,
            journal: None,
            exports: Vec::new(),
        }
    }

    /// From now on, every change to the records is also added to a journal
    /// of log records in `format` ([`Store::journal`]).
    pub fn keep_journal(&mut self, format: kvs_wal::Format) {
        self.journal = Some(Batch::new(format));
    }

    /// The changes since the journal was last emptied, for the worker to
    /// write to its log (which takes the records and leaves it empty).
    pub fn journal(&mut self) -> Option<&mut Batch> {
        self.journal.as_mut()
    }

    /// Adds `c` to the journal, if the store keeps one.
    #[inline]
    fn journal_change(&mut self, c: Change<'_>) {
        if let Some(j) = self.journal.as_mut() {
            // The log's records hold a bulk batch's largest record, and a
            // change holds one record (the configuration bounds keys and
            // values; a pulled record came whole in a batch).
            j.push_with(c.kind(), |out| c.encode(out))
                .expect("a change fits a log record");
        }
    }

    /// How many slots the store's map has.
    pub fn slots(&self) -> u32 {
        self.slots.len() as u32
    }

    #[inline]
    fn slot(&self, slot: u32) -> Option<&Slot> {
        self.slots.get(slot as usize)?.as_deref()
    }

    #[inline]
    fn slot_mut(&mut self, slot: u32) -> Option<&mut Slot> {
        self.slots.get_mut(slot as usize)?.as_deref_mut()
    }

    /// The value of `key` (of slot `slot`).
    #[inline]
    pub fn get(&self, slot: u32, key: &[u8]) -> Option<&[u8]> {
        self.slot(slot)?.map.get(key).map(Record::value)
    }

    /// The hash of `key` in slot `slot`'s table, for
    /// [`get_hashed`](Self::get_hashed); `None` if the slot is not here.
    #[inline]
    pub fn hash_in(&self, slot: u32, key: &[u8]) -> Option<u64> {
        self.slot(slot).map(|s| s.map.hash(key))
    }

    /// Where the record of the key of hash `hash` (from
    /// [`hash_in`](Self::hash_in)) most likely is, without reading it: for
    /// a prefetch.
    #[inline]
    pub fn candidate(&self, slot: u32, hash: u64) -> Option<*const u8> {
        self.slot(slot)?.map.candidate(hash)
    }

    /// [`get`](Self::get) with the key's hash from
    /// [`hash_in`](Self::hash_in), if known, which saves hashing it again.
    /// Always right: if the slot was replaced since, the hash can only
    /// miss, and a miss is looked up again from the key.
    #[inline]
    pub fn get_hashed(&self, slot: u32, hash: Option<u64>, key: &[u8]) -> Option<&[u8]> {
        let s = self.slot(slot)?;
        if let Some(r) = hash.and_then(|h| s.map.get_hashed(h, key)) {
            return Some(r.value());
        }
        s.map.get(key).map(Record::value)
    }

    /// Sets `key` (of slot `slot`, below the store's slot count) to
    /// `value`, in place when the value's size is unchanged. Refused, with nothing changed, when the
    /// write would take the records' cost past the limit; a write that does
    /// not grow the cost is never refused.
    pub fn put(&mut self, slot: u32, key: &[u8], value: &[u8]) -> Result<(), OutOfMemory> {
        let (used, limit) = (self.used, self.limit);
        let Some(entry) = self.slots.get_mut(slot as usize) else {
            // A slot the map does not have: nothing can be kept for it.
            return Err(OutOfMemory {
                used,
                limit: 0,
                needed: record_cost(key.len(), value.len()),
            });
        };
        let sl = entry.get_or_insert_with(|| Slot::new(&mut self.lives));
        match sl.map.get_mut(key) {
            Some(r) => {
                let old_len = r.value().len();
                if old_len == value.len() {
                    r.value_mut().copy_from_slice(value);
                } else {
                    let old = record_cost(key.len(), old_len);
                    let new = record_cost(key.len(), value.len());
                    if new > old {
                        charge(used, limit, new - old)?;
                    }
                    self.used = used - old + new;
                    sl.used = sl.used - old + new;
                    *r = Record::new(key, value);
                }
                sl.bytes = sl.bytes - old_len + value.len();
                self.bytes = self.bytes - old_len + value.len();
            }
            None => {
                let cost = record_cost(key.len(), value.len());
                charge(used, limit, cost)?;
                self.used += cost;
                sl.used += cost;
                sl.bytes += key.len() + value.len();
                self.bytes += key.len() + value.len();
                sl.map.insert_if_absent(key, value);
                let life = sl.life;
                self.index(key, slot, life);
            }
        }
        self.journal_change(Change::Put { slot, key, value });
        Ok(())
    }

    /// Removes `key` (of slot `slot`); whether it was there. In a slot
    /// being imported, the key is remembered as deleted.
    pub fn delete(&mut self, slot: u32, key: &[u8]) -> bool {
        let Some(sl) = self.slot_mut(slot) else {
            return false;
        };
        // Journaled whether or not the key was there: in a slot being
        // imported the delete leaves a tombstone either way.
        let gone = Self::remove(sl, key);
        self.journal_change(Change::Delete { slot, key });
        let Some((klen, len, cost)) = gone else {
            return false;
        };
        self.order.remove(key);
        self.keys -= 1;
        self.bytes -= klen + len;
        self.used -= cost;
        true
    }

    /// Takes `key` out of `sl` (leaving a tombstone if the slot is being
    /// imported): its key's and value's lengths and cost, if it was there.
    #[inline]
    fn remove(sl: &mut Slot, key: &[u8]) -> Option<(usize, usize, usize)> {
        if let Some(t) = sl.import.as_mut() {
            t.insert(key.into());
        }
        let r = sl.map.remove(key)?;
        let len = r.value().len();
        let cost = record_cost(key.len(), len);
        sl.bytes -= key.len() + len;
        sl.used -= cost;
        Some((key.len(), len, cost))
    }

    /// Overwrites `bytes` of `key`'s value (of slot `slot`) at `offset`.
    pub fn patch(&mut self, slot: u32, key: &[u8], offset: usize, bytes: &[u8]) -> Patch {
        let Some(r) = self.slot_mut(slot).and_then(|s| s.map.get_mut(key)) else {
            return Patch::NotFound;
        };
        let v = r.value_mut();
        match offset.checked_add(bytes.len()) {
            Some(end) if end <= v.len() => {
                v[offset..end].copy_from_slice(bytes);
                self.journal_change(Change::Patch {
                    slot,
                    key,
                    // The offset fits the value, whose size fits a u32.
                    offset: offset as u32,
                    bytes,
                });
                Patch::Done
            }
            _ => Patch::OutOfRange,
        }
    }

    /// Records with keys from `start` on, in order, across all slots.
    pub fn scan<'a>(&'a self, start: &[u8]) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.order
            .range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
            .filter_map(|(k, p)| Some((k.bytes(), self.get(p.slot, k.bytes())?)))
    }

    /// Slot `slot`'s records, in no order (what a migration ships).
    pub fn slot_records(&self, slot: u32) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.slot(slot)
            .into_iter()
            .flat_map(|s| s.map.iter().map(|r| (r.key(), r.value())))
    }

    /// Slot `slot`'s record count and bytes of keys and values.
    pub fn slot_size(&self, slot: u32) -> Dropped {
        self.slot(slot)
            .map(|s| Dropped {
                keys: s.map.len(),
                bytes: s.bytes,
            })
            .unwrap_or_default()
    }

    /// Makes room in slot `slot` (if the store holds it) for `records`
    /// records in all, so that they go in without its table growing: for a
    /// recovery that expects them.
    pub(crate) fn reserve(&mut self, slot: u32, records: usize) {
        if let Some(sl) = self.slot_mut(slot) {
            sl.map.reserve(records);
        }
    }

    /// Takes every record of slot `slot` out of the store (a slot given
    /// away), touching no other slot's.
    pub fn take_slot(&mut self, slot: u32) -> SlotRecords {
        if self.slots.get(slot as usize).is_some_and(Option::is_some) {
            self.journal_change(Change::DropSlot { slot });
        }
        self.take_unjournaled(slot)
    }

    /// [`take_slot`](Self::take_slot), leaving the records in the log (an
    /// export: [`export`]).
    fn take_unjournaled(&mut self, slot: u32) -> SlotRecords {
        let Some(sl) = self.slots.get_mut(slot as usize).and_then(Option::take) else {
            return SlotRecords::default();
        };
        if sl.import.is_some() && !sl.copying {
            self.importing -= 1;
        }
        // The keys stay in the ordered index, stale, until swept.
        self.used -= sl.used;
        self.keys -= sl.map.len();
        self.bytes -= sl.bytes;
        SlotRecords {
            map: sl.map,
            bytes: sl.bytes,
        }
    }

    /// Starts importing slot `slot`: it is served from now on, and pulled
    /// records fill in what it lacks.
    pub fn begin_import(&mut self, slot: u32) {
        let Some(entry) = self.slots.get_mut(slot as usize) else {
            return;
        };
        let sl = entry.get_or_insert_with(|| Slot::new(&mut self.lives));
        if sl.import.is_none() || sl.copying {
            sl.import.get_or_insert_with(HashSet::default);
            sl.copying = false;
            self.importing += 1;
        }
        self.journal_change(Change::BeginImport { slot });
    }

    /// Ends slot `slot`'s import (every record is in); its tombstones go.
    pub fn end_import(&mut self, slot: u32) {
        if let Some(sl) = self.slot_mut(slot) {
            if !sl.copying && sl.import.take().is_some() {
                self.importing -= 1;
                self.journal_change(Change::EndImport { slot });
            }
        }
    }

    /// Starts taking slot `slot` as a backup's copy: pulled records
    /// ([`Store::apply_pulled`]) fill in what the writes that follow the
    /// copy's begin did not set or delete. The slot does not count as
    /// importing (a backup does not serve it).
    pub fn begin_copy(&mut self, slot: u32) {
        let Some(entry) = self.slots.get_mut(slot as usize) else {
            return;
        };
        let sl = entry.get_or_insert_with(|| Slot::new(&mut self.lives));
        if sl.import.is_none() {
            sl.import = Some(HashSet::default());
            sl.copying = true;
        }
        self.journal_change(Change::BeginCopy { slot });
    }

    /// Ends slot `slot`'s copy (every pulled record is in); its tombstones
    /// go.
    pub fn end_copy(&mut self, slot: u32) {
        if let Some(sl) = self.slot_mut(slot) {
            if sl.copying {
                sl.import = None;
                sl.copying = false;
                self.journal_change(Change::EndCopy { slot });
            }
        }
    }

    /// A snapshot of slot `slot`'s records (what a copy to a new backup
    /// ships while the slot goes on taking writes).
    pub fn snapshot_slot(&self, slot: u32) -> SlotRecords {
        self.slot(slot)
            .map(|s| SlotRecords {
                map: s.map.clone(),
                bytes: s.bytes,
            })
            .unwrap_or_default()
    }

    /// Whether slot `slot` is being imported.
    #[inline]
    pub fn importing(&self, slot: u32) -> bool {
        self.slot(slot)
            .is_some_and(|s| s.import.is_some() && !s.copying)
    }

    /// How many slots are being imported.
    pub fn importing_slots(&self) -> u32 {
        self.importing
    }

    /// Whether `key` was deleted here since slot `slot`'s import began.
    pub fn deleted_in_import(&self, slot: u32, key: &[u8]) -> bool {
        self.slot(slot)
            .and_then(|s| s.import.as_ref())
            .is_some_and(|t| t.contains(key))
    }

    /// A record pulled from the migration's source (`None`: the source has
    /// no such key). Taken only into a slot being imported, for a key this
    /// store has neither nor deleted since; then the key counts as settled.
    /// A pulled record is taken even past the memory limit: refusing it
    /// would lose it.
    pub fn apply_pulled(&mut self, slot: u32, key: &[u8], value: Option<&[u8]>) -> Pulled {
        match value {
            Some(v) => self.apply_ready(Ready::new(slot, key, v)),
            None => match importing_for(&mut self.slots, slot, key) {
                Ok(sl) => {
                    if !sl.map.contains_key(key) {
                        // Absent at the source: settled as absent here.
                        if let Some(t) = sl.import.as_mut() {
                            t.insert(key.into());
                        }
                        self.journal_change(Change::Pulled {
                            slot,
                            key,
                            value: None,
                        });
                    }
                    Pulled::Stale
                }
                Err(p) => p,
            },
        }
    }

    /// A pulled record made ready off the worker's thread ([`Ready`]):
    /// taken as [`Store::apply_pulled`] takes one, with no allocation here.
    pub(crate) fn apply_ready(&mut self, r: Ready) -> Pulled {
        let Ready { slot, record, key } = r;
        let sl = match importing_for(&mut self.slots, slot, record.key()) {
            Ok(sl) => sl,
            Err(p) => return p,
        };
        let (klen, vlen) = (record.key().len(), record.value().len());
        // One hash of the key: the entry is vacant unless a write here
        // since the import began made it (that write is newer).
        if !sl.map.insert_record_if_absent(record) {
            return Pulled::Stale;
        }
        let cost = record_cost(klen, vlen);
        sl.used += cost;
        sl.bytes += klen + vlen;
        let life = sl.life;
        self.used += cost;
        self.bytes += klen + vlen;
        self.keys += 1;
        if let Some(j) = self.journal.as_mut() {
            let rec = sl.map.get(key.bytes()).expect("just inserted");
            let c = Change::Pulled {
                slot,
                key: rec.key(),
                value: Some(rec.value()),
            };
            j.push_with(c.kind(), |out| c.encode(out))
                .expect("a change fits a log record");
        }
        if !self.unindexed {
            self.order.insert(key, Place { slot, life });
        }
        Pulled::Taken
    }

    /// Removes every record of slot `slot` (a slot given away), touching no
    /// other slot's; what it freed.
    pub fn drop_slot(&mut self, slot: u32) -> Dropped {
        let r = self.take_slot(slot);
        Dropped {
            keys: r.len(),
            bytes: r.bytes(),
        }
    }

    /// The slots this store holds records of.
    pub fn held_slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.as_ref().is_some_and(|s| !s.map.is_empty()))
            .map(|(i, _)| i as u32)
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.keys
    }

    /// No keys.
    pub fn is_empty(&self) -> bool {
        self.keys == 0
    }

    /// A new key of `slot` (in its life `life`) into the ordered index
    /// (where it may replace a stale entry).
    #[inline]
    fn index(&mut self, key: &[u8], slot: u32, life: u32) {
        self.keys += 1;
        if !self.unindexed {
            self.order.insert(IndexKey::new(key), Place { slot, life });
        }
    }

    /// Keys of the ordered index whose slot no longer holds them.
    pub fn stale_keys(&self) -> usize {
        if self.unindexed {
            return 0;
        }
        self.order.len() - self.keys
    }

    /// Sweeps stale keys out of the ordered index, looking at `budget`
    /// entries at most from where the last sweep stopped; whether stale
    /// keys may remain. An entry is judged by its slot's life alone (see
    /// `Place`): no record is looked up, and no key copied but the stale
    /// ones, into a buffer the store keeps.
    pub fn sweep(&mut self, budget: usize) -> bool {
        if self.stale_keys() == 0 {
            return false;
        }
        let from = match &self.sweep_from {
            Some(k) => Bound::Excluded(&**k),
            None => Bound::Unbounded,
        };
        self.swept.clear();
        self.swept_ends.clear();
        let mut last = None;
        let mut seen = 0;
        for (k, p) in self.order.range::<[u8], _>((from, Bound::Unbounded)) {
            if seen == budget {
                break;
            }
            seen += 1;
            last = Some(k);
            let live = self.slots[p.slot as usize]
                .as_deref()
                .is_some_and(|s| s.life == p.life);
            if !live {
                self.swept.extend_from_slice(k.bytes());
                self.swept_ends.push(self.swept.len());
            }
        }
        self.sweep_from = if seen < budget {
            None
        } else {
            last.map(|k| k.bytes().into())
        };
        let mut start = 0;
        for &end in &self.swept_ends {
            self.order.remove(&self.swept[start..end]);
            start = end;
        }
        if !self.swept_ends.is_empty() {
            settle_frees();
        }
        self.stale_keys() > 0
    }

    /// Bytes of keys and values held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Heap bytes the records cost (what the limit bounds).
    pub fn memory_used(&self) -> usize {
        self.used
    }

    /// Sets the most heap bytes the records may cost.
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// The most heap bytes the records may cost (`usize::MAX`: no limit).
    pub fn memory_limit(&self) -> usize {
        self.limit
    }
}

/// Has the allocator file away the small blocks a sweep just freed, now,
/// a sweep's worth at a time. glibc's malloc keeps freed small blocks in
/// its fast bins and merges them all at the thread's next request of a
/// kilobyte or more: a source's sweep after a migration chunk frees tens of
/// thousands of index keys, and the next such request (its next map
/// install, on the handover's path) took 15 to 25 ms to merge them. A
/// request of that size here makes each sweep pay for its own. Another
/// allocator pays a 4 KiB allocation and its free.
#[inline(never)]
fn settle_frees() {
    let v: Vec<u8> = Vec::with_capacity(4096);
    std::hint::black_box(&v);
}

/// Slot `slot` of `slots`, if it is being imported (or copied) and `key`
/// was not deleted there since: where a pulled record of `key` may go.
fn importing_for<'a>(
    slots: &'a mut [Option<Box<Slot>>],
    slot: u32,
    key: &[u8],
) -> Result<&'a mut Slot, Pulled> {
    let sl = slots
        .get_mut(slot as usize)
        .and_then(|s| s.as_deref_mut())
        .ok_or(Pulled::NotImporting)?;
    let t = sl.import.as_ref().ok_or(Pulled::NotImporting)?;
    // Most slots see no delete during their import: no tombstone to look
    // up.
    if !t.is_empty() && t.contains(key) {
        return Err(Pulled::Stale);
    }
    Ok(sl)
}

/// Whether `needed` more bytes fit under `limit`.
#[inline]
fn charge(used: usize, limit: usize, needed: usize) -> Result<(), OutOfMemory> {
    match used.checked_add(needed) {
        Some(total) if total <= limit => Ok(()),
        _ => Err(OutOfMemory {
            used,
            limit,
            needed,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::shard::slot_of;

    const SLOTS: u32 = 16;

    /// The store with each key in its own slot of a 16-slot map.
    trait Keyed {
        fn p(&mut self, k: &[u8], v: &[u8]) -> Result<(), OutOfMemory>;
        fn g(&self, k: &[u8]) -> Option<&[u8]>;
        fn d(&mut self, k: &[u8]) -> bool;
        fn pa(&mut self, k: &[u8], off: usize, b: &[u8]) -> Patch;
    }

    impl Keyed for Store {
        fn p(&mut self, k: &[u8], v: &[u8]) -> Result<(), OutOfMemory> {
            self.put(slot_of(k, SLOTS), k, v)
        }
        fn g(&self, k: &[u8]) -> Option<&[u8]> {
            self.get(slot_of(k, SLOTS), k)
        }
        fn d(&mut self, k: &[u8]) -> bool {
            self.delete(slot_of(k, SLOTS), k)
        }
        fn pa(&mut self, k: &[u8], off: usize, b: &[u8]) -> Patch {
            self.patch(slot_of(k, SLOTS), k, off, b)
        }
    }

    #[test]
    fn a_copy_takes_pulled_records_only_where_no_later_write_went() {
        let mut st = Store::new(4, usize::MAX);
        st.put(1, b"old", b"x").unwrap();
        st.drop_slot(1);
        st.begin_copy(1);
        assert!(
            !st.importing(1) && st.importing_slots() == 0,
            "not served here"
        );
        st.put(1, b"written", b"new").unwrap();
        st.delete(1, b"deleted");
        for k in [&b"written"[..], b"deleted", b"pulled"] {
            st.apply_pulled(1, k, Some(b"snapshot"));
        }
        assert_eq!(st.get(1, b"written"), Some(&b"new"[..]));
        assert_eq!(st.get(1, b"deleted"), None);
        assert_eq!(st.get(1, b"pulled"), Some(&b"snapshot"[..]));
        let snap = st.snapshot_slot(1);
        assert_eq!(
            (snap.len(), snap.get(b"pulled")),
            (2, Some(&b"snapshot"[..]))
        );
        st.end_copy(1);
        assert_eq!(
            st.apply_pulled(1, b"late", Some(b"v")),
            Pulled::NotImporting
        );
        // A copy that becomes a migration's import counts as one.
        st.begin_copy(2);
        st.begin_import(2);
        assert_eq!(st.importing_slots(), 1);
        st.end_copy(2);
        assert!(st.importing(2));
        st.end_import(2);
        assert_eq!(st.importing_slots(), 0);
        st.begin_copy(3);
        st.take_slot(3);
        assert_eq!(st.importing_slots(), 0);
    }

    #[test]
    fn a_taken_slot_leaves_stale_keys_that_scans_skip_and_sweeps_remove() {
        let mut s = Store::new(4, usize::MAX);
        for i in 0..100u32 {
            let k = format!("k{i:03}");
            s.put(i % 4, k.as_bytes(), b"v").unwrap();
        }
        assert_eq!((s.len(), s.stale_keys()), (100, 0));
        assert!(!s.sweep(10), "nothing to sweep");
        let t = s.take_slot(1);
        assert_eq!((s.len(), s.stale_keys(), t.len()), (75, 25, 25));
        // A scan never returns a key of the slot taken.
        let scanned: Vec<&[u8]> = s.scan(b"").map(|(k, _)| k).collect();
        assert_eq!(scanned.len(), 75);
        assert!(scanned.windows(2).all(|w| w[0] < w[1]));
        // A key of the slot written again is live again, once.
        s.put(1, b"k001", b"again").unwrap();
        assert_eq!((s.len(), s.stale_keys()), (76, 24));
        // Sweeps, 10 entries at a time, remove the rest and then stop.
        let mut rounds = 0;
        while s.sweep(10) {
            rounds += 1;
            assert!(rounds < 100, "the sweep does not end");
        }
        assert_eq!((s.len(), s.stale_keys()), (76, 0));
        assert_eq!(s.scan(b"k001").next(), Some((&b"k001"[..], &b"again"[..])));
        assert_eq!(s.scan(b"").count(), 76);
    }

    #[test]
    fn point_operations_patches_and_ordered_scans() {
        let mut s = Store::new(SLOTS, usize::MAX);
        s.p(b"b", b"2222").unwrap();
        s.p(b"a", b"1").unwrap();
        s.p(b"c", b"3").unwrap();
        s.p(b"b", b"22").unwrap();
        assert_eq!(s.g(b"b"), Some(&b"22"[..]));
        assert_eq!(s.bytes(), 3 + 1 + 2 + 1);
        assert_eq!(s.pa(b"b", 1, b"x"), Patch::Done);
        assert_eq!(s.pa(b"b", 1, b"xy"), Patch::OutOfRange);
        assert_eq!(s.pa(b"b", usize::MAX, b"x"), Patch::OutOfRange);
        assert_eq!(s.pa(b"z", 0, b""), Patch::NotFound);
        assert_eq!(s.g(b"b"), Some(&b"2x"[..]));
        let keys: Vec<_> = s.scan(b"ab").map(|(k, _)| k.to_vec()).collect();
        assert_eq!(keys, vec![b"b".to_vec(), b"c".to_vec()]);
        assert!(s.d(b"a"));
        assert!(!s.d(b"a"));
        assert_eq!((s.len(), s.bytes()), (2, 3 + 2));
    }

    #[test]
    fn the_limit_refuses_growth_and_nothing_else() {
        let rec = record_cost(4, 100);
        // Room for three such records and a little more.
        let mut s = Store::new(SLOTS, 3 * rec + 10);
        for k in [b"key1", b"key2", b"key3"] {
            s.p(k, &[1; 100]).unwrap();
        }
        assert_eq!(s.memory_used(), 3 * rec);
        let e = s.p(b"key4", &[1; 100]).unwrap_err();
        assert_eq!((e.used, e.limit, e.needed), (3 * rec, 3 * rec + 10, rec));
        assert_eq!((s.len(), s.g(b"key4")), (3, None));
        // Overwrites of the same size, patches, reads and deletes go on.
        s.p(b"key1", &[2; 100]).unwrap();
        assert_eq!(s.pa(b"key3", 0, &[3; 10]), Patch::Done);
        assert_eq!(s.memory_used(), 3 * rec);
        // A smaller value gets a record of its own size: less is charged.
        s.p(b"key2", &[2; 60]).unwrap();
        assert_eq!(s.g(b"key2"), Some(&[2u8; 60][..]));
        assert_eq!(s.memory_used(), 2 * rec + record_cost(4, 60));
        // Growing a value is growth.
        let e = s.p(b"key1", &[2; 200]).unwrap_err();
        assert_eq!(e.needed, record_cost(4, 200) - rec);
        assert_eq!(s.g(b"key1"), Some(&[2u8; 100][..]));
        s.p(b"key3", &[3; 8]).unwrap();
        let rec60 = record_cost(4, 60);
        assert_eq!(s.memory_used(), rec + rec60 + record_cost(4, 8));
        assert!(s.d(b"key3"));
        assert_eq!(s.memory_used(), rec + rec60);
        s.p(b"key4", &[4; 100]).unwrap();
        assert_eq!((s.len(), s.bytes()), (3, 3 * 4 + 100 + 60 + 100));
        let keys: Vec<Vec<u8>> = s.scan(b"").map(|(k, _)| k.to_vec()).collect();
        for k in keys {
            assert!(s.d(&k));
        }
        assert_eq!((s.memory_used(), s.bytes()), (0, 0));
    }

    #[test]
    fn an_imported_slot_takes_pulled_records_only_where_it_has_nothing_newer() {
        let mut s = Store::new(SLOTS, usize::MAX);
        let k = |i: u32| format!("key{i}").into_bytes();
        let slot = slot_of(&k(0), SLOTS);
        let same: Vec<Vec<u8>> = (0..500)
            .map(k)
            .filter(|x| slot_of(x, SLOTS) == slot)
            .take(5)
            .collect();
        let (a, b, c, d, e) = (&same[0], &same[1], &same[2], &same[3], &same[4]);
        assert_eq!(s.apply_pulled(slot, a, Some(b"old")), Pulled::NotImporting);
        s.begin_import(slot);
        assert!(s.importing(slot));
        assert_eq!(s.importing_slots(), 1);
        // Written and deleted here: the pulled copies are stale.
        s.put(slot, a, b"new").unwrap();
        assert!(!s.delete(slot, b));
        assert_eq!(s.apply_pulled(slot, a, Some(b"old")), Pulled::Stale);
        assert_eq!(s.apply_pulled(slot, b, Some(b"old")), Pulled::Stale);
        assert!(s.deleted_in_import(slot, b));
        // Pulled records are taken past the limit.
        s.limit = 0;
        assert_eq!(s.apply_pulled(slot, c, Some(b"pulled")), Pulled::Taken);
        assert_eq!(s.apply_pulled(slot, c, Some(b"again")), Pulled::Stale);
        assert_eq!(s.apply_pulled(slot, d, None), Pulled::Stale);
        assert!(s.deleted_in_import(slot, d));
        // Records made ready elsewhere are judged alike.
        assert_eq!(s.apply_ready(Ready::new(slot, a, b"old")), Pulled::Stale);
        assert_eq!(s.apply_ready(Ready::new(slot, b, b"old")), Pulled::Stale);
        assert_eq!(s.apply_ready(Ready::new(slot, c, b"again")), Pulled::Stale);
        assert_eq!(
            s.apply_ready(Ready::new(slot + 1, c, b"x")),
            Pulled::NotImporting
        );
        assert_eq!(s.apply_ready(Ready::new(slot, e, b"ready")), Pulled::Taken);
        assert_eq!(s.get(slot, a), Some(&b"new"[..]));
        assert_eq!(s.get(slot, b), None);
        assert_eq!(s.get(slot, c), Some(&b"pulled"[..]));
        assert_eq!(s.scan(b"").count(), 3);
        s.end_import(slot);
        assert!(!s.importing(slot) && !s.deleted_in_import(slot, b));
        assert_eq!(s.importing_slots(), 0);
        // Taken out whole, for a migration's source.
        let t = s.take_slot(slot);
        assert_eq!((t.len(), t.get(c)), (3, Some(&b"pulled"[..])));
        assert_eq!(t.get(e), Some(&b"ready"[..]));
        assert_eq!((s.len(), s.bytes(), s.memory_used()), (0, 0, 0));
    }

    #[test]
    fn a_slot_taken_away_gives_back_exactly_what_its_records_cost() {
        let mut s = Store::new(SLOTS, usize::MAX);
        s.put(3, b"other", b"stays").unwrap();
        let before = s.memory_used();
        for i in 0..50 {
            s.put(5, format!("k{i}").as_bytes(), &[7; 10]).unwrap();
        }
        // Grown and shrunk in place or reallocated, deleted, patched.
        s.put(5, b"k1", &[1; 300]).unwrap();
        s.put(5, b"k2", &[2; 3]).unwrap();
        assert!(s.delete(5, b"k3"));
        assert_eq!(s.patch(5, b"k4", 0, b"xy"), Patch::Done);
        s.begin_import(5);
        assert_eq!(s.apply_pulled(5, b"new", Some(&[9; 40])), Pulled::Taken);
        let t = s.take_slot(5);
        assert_eq!(t.len(), 50);
        assert_eq!(s.memory_used(), before);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn a_slot_is_listed_and_dropped_without_touching_the_others() {
        let mut s = Store::new(SLOTS, usize::MAX);
        let keys: Vec<Vec<u8>> = (0..200).map(|i| format!("key{i}").into_bytes()).collect();
        for k in &keys {
            s.p(k, b"value").unwrap();
        }
        let target = slot_of(&keys[0], SLOTS);
        let mine: Vec<&Vec<u8>> = keys
            .iter()
            .filter(|k| slot_of(k, SLOTS) == target)
            .collect();
        let size = s.slot_size(target);
        assert_eq!(size.keys, mine.len());
        assert_eq!(size.bytes, mine.iter().map(|k| k.len() + 5).sum::<usize>());
        let mut listed: Vec<Vec<u8>> = s.slot_records(target).map(|(k, _)| k.to_vec()).collect();
        listed.sort();
        let mut want: Vec<Vec<u8>> = mine.iter().map(|k| k.to_vec()).collect();
        want.sort();
        assert_eq!(listed, want);
        let (used, bytes) = (s.memory_used(), s.bytes());
        assert_eq!(s.drop_slot(target), size);
        assert_eq!(s.drop_slot(target), Dropped::default());
        assert_eq!(s.len(), keys.len() - mine.len());
        assert_eq!(s.bytes(), bytes - size.bytes);
        assert_eq!(
            s.memory_used(),
            used - mine.iter().map(|k| record_cost(k.len(), 5)).sum::<usize>()
        );
        assert!(!s.held_slots().any(|x| x == target));
        // The other slots' records, point and scan, are all still there.
        for k in &keys {
            let here = slot_of(k, SLOTS) != target;
            assert_eq!(s.g(k).is_some(), here, "{k:?}");
        }
        assert_eq!(s.scan(b"").count(), keys.len() - mine.len());
        assert!(s.scan(b"").all(|(k, _)| slot_of(k, SLOTS) != target));
        // The slot can be filled again; a slot the map lacks keeps nothing.
        s.p(&keys[0], b"again").unwrap();
        assert_eq!(s.g(&keys[0]), Some(&b"again"[..]));
        assert!(s.put(SLOTS, b"k", b"v").is_err());
        assert_eq!(s.get(SLOTS, b"k"), None);
    }
}
