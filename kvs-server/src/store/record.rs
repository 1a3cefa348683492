//! A slot's records: each record's key and value in one allocation, in a
//! hash table keyed at random. A GET then misses the cache once for the
//! record (the key is compared, and the value lies right after it) where a
//! key and a value in two allocations missed twice, and an insert allocates
//! once.

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

/// The table's hash: aHash, keyed at random per table (keys come from
/// clients; a fixed hash would let one flood a bucket).
type Hasher = ahash::RandomState;

/// One record: `[key length: u16 LE][key][value]`.
#[derive(Clone)]
pub(crate) struct Record(Box<[u8]>);

impl std::fmt::Debug for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Record")
            .field("key_len", &self.key().len())
            .field("value_len", &self.value().len())
            .finish()
    }
}

/// Bytes of a record's header.
const HEADER: usize = 2;

impl Record {
    /// A record of `key` (at most 65,535 bytes, as the protocol's) and
    /// `value`.
    pub fn new(key: &[u8], value: &[u8]) -> Record {
        debug_assert!(key.len() <= usize::from(u16::MAX));
        let mut b = Vec::with_capacity(HEADER + key.len() + value.len());
        b.extend_from_slice(&(key.len() as u16).to_le_bytes());
        b.extend_from_slice(key);
        b.extend_from_slice(value);
        Record(b.into_boxed_slice())
    }

    fn key_len(&self) -> usize {
        usize::from(u16::from_le_bytes([self.0[0], self.0[1]]))
    }

    /// The key.
    #[inline]
    pub fn key(&self) -> &[u8] {
        &self.0[HEADER..HEADER + self.key_len()]
    }

    /// The value.
    #[inline]
    pub fn value(&self) -> &[u8] {
        &self.0[HEADER + self.key_len()..]
    }

    /// The value, to overwrite in place.
    #[inline]
    pub fn value_mut(&mut self) -> &mut [u8] {
        let at = HEADER + self.key_len();
        &mut self.0[at..]
    }
}

/// The bytes a record of a `key_len`-byte key and a `value_len`-byte value
/// allocates.
#[inline]
pub(crate) const fn record_size(key_len: usize, value_len: usize) -> usize {
    HEADER + key_len + value_len
}

/// A slot's records by key.
#[derive(Debug, Clone, Default)]
pub(crate) struct Records {
    table: HashTable<Record>,
    hasher: Hasher,
}

impl Records {
    /// The hash of `key` in this table.
    #[inline]
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The record of `key`.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<&Record> {
        self.get_hashed(self.hash(key), key)
    }

    /// Where the first record whose hash may be `hash` is in memory (not
    /// read: for a prefetch). Reads the table's control bytes and one
    /// bucket only.
    #[inline]
    pub fn candidate(&self, hash: u64) -> Option<*const u8> {
        self.table.iter_hash(hash).next().map(|r| r.0.as_ptr())
    }

    /// The record of `key`, whose hash `hash` was (by
    /// [`hash`](Self::hash)): the key itself is compared, so a hash from
    /// elsewhere can only miss.
    #[inline]
    pub fn get_hashed(&self, hash: u64, key: &[u8]) -> Option<&Record> {
        self.table.find(hash, |r| r.key() == key)
    }

    /// The record of `key`, to change its value in place.
    #[inline]
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut Record> {
        let h = self.hash(key);
        self.table.find_mut(h, |r| r.key() == key)
    }

    /// Whether `key` has a record.
    #[inline]
    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// Inserts `key`'s record unless the key has one (hashing it once);
    /// whether it was inserted.
    pub fn insert_if_absent(&mut self, key: &[u8], value: &[u8]) -> bool {
        let h = self.hash(key);
        let hasher = &self.hasher;
        match self
            .table
            .entry(h, |r| r.key() == key, |r| hasher.hash_one(r.key()))
        {
            Entry::Occupied(_) => false,
            Entry::Vacant(e) => {
                e.insert(Record::new(key, value));
                true
            }
        }
    }

    /// Puts `record` in unless a record of its key is there (then it is
    /// dropped); whether it went in.
    pub fn insert_record_if_absent(&mut self, record: Record) -> bool {
        let h = self.hash(record.key());
        let hasher = &self.hasher;
        match self
            .table
            .entry(h, |r| r.key() == record.key(), |r| hasher.hash_one(r.key()))
        {
            Entry::Occupied(_) => false,
            Entry::Vacant(e) => {
                e.insert(record);
                true
            }
        }
    }

    /// Makes room for `records` records in all, so that they go in
    /// without the table growing (each growth hashes every key again,
    /// reading every record).
    pub fn reserve(&mut self, records: usize) {
        let hasher = &self.hasher;
        let more = records.saturating_sub(self.table.len());
        self.table.reserve(more, |r| hasher.hash_one(r.key()));
    }

    /// Removes `key`'s record.
    pub fn remove(&mut self, key: &[u8]) -> Option<Record> {
        let h = self.hash(key);
        match self.table.find_entry(h, |r| r.key() == key) {
            Ok(e) => Some(e.remove().0),
            Err(_) => None,
        }
    }

    /// The records, in no order.
    pub fn iter(&self) -> impl Iterator<Item = &Record> + '_ {
        self.table.iter()
    }

    /// How many records.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// No records.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_keeps_its_key_and_value_apart() {
        let mut r = Records::default();
        assert!(r.insert_if_absent(b"k1", b"value one"));
        assert!(r.insert_if_absent(b"", b""), "an empty key and value");
        assert!(!r.insert_if_absent(b"k1", b"other"));
        assert!(r.insert_if_absent(b"k2", b"two"));
        assert_eq!(r.get(b"k1").map(Record::value), Some(&b"value one"[..]));
        assert_eq!(r.get(b"").map(Record::value), Some(&b""[..]));
        *r.get_mut(b"k1").unwrap() = Record::new(b"k1", b"v");
        assert_eq!(r.get(b"k1").unwrap().value(), b"v");
        assert_eq!(r.get(b"k1").unwrap().0.len(), record_size(2, 1));
        r.get_mut(b"k2").unwrap().value_mut()[0] = b'T';
        assert_eq!(r.get(b"k2").unwrap().value(), b"Two");
        assert_eq!(r.len(), 3);
        assert_eq!(
            r.remove(b"k2").map(|r| r.key().to_vec()),
            Some(b"k2".to_vec())
        );
        assert!(r.remove(b"k2").is_none());
        assert!(!r.contains_key(b"k2"));
        let mut keys: Vec<_> = r.iter().map(|r| r.key().to_vec()).collect();
        keys.sort();
        assert_eq!(keys, vec![b"".to_vec(), b"k1".to_vec()]);
    }

    #[test]
    fn a_table_with_room_made_does_not_grow_for_that_many() {
        let mut r = Records::default();
        r.insert_if_absent(b"first", b"1");
        r.reserve(1000);
        let cap = r.table.capacity();
        assert!(cap >= 1000);
        for i in 0..999u32 {
            r.insert_if_absent(format!("user{i}").as_bytes(), b"v");
        }
        assert_eq!((r.len(), r.table.capacity()), (1000, cap));
        // Room for fewer than it holds is no change.
        r.reserve(10);
        assert_eq!(r.table.capacity(), cap);
    }

    #[test]
    fn many_records_survive_the_table_growing() {
        let mut r = Records::default();
        for i in 0..10_000u32 {
            let k = format!("user{i}");
            assert!(r.insert_if_absent(k.as_bytes(), &i.to_le_bytes()));
        }
        for i in 0..10_000u32 {
            let k = format!("user{i}");
            assert_eq!(r.get(k.as_bytes()).unwrap().value(), i.to_le_bytes());
        }
    }
}
