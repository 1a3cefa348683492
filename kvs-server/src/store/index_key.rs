//! The ordered index's key. A key of up to [`INLINE`] bytes lives in the
//! B-tree node itself: it costs no allocation when indexed and no `free`
//! when swept (a migration indexes and sweeps one per record). A longer key
//! has its own allocation, with its first 16 bytes again in the node, so
//! that a search down the B-tree compares in the node it reads and follows
//! the key's pointer only on a tie of those bytes. A tree of plain boxed
//! keys follows one pointer per comparison, a cache miss each once the
//! index outgrows the cache: about 17 of them per insert into an index of
//! 100,000 keys.

use std::borrow::Borrow;
use std::cmp::Ordering;

/// The longest key kept in the node: the size of a long key's head and
/// box, less the two bytes that tell the forms apart and give the length.
pub(crate) const INLINE: usize = 38;

/// A key of the ordered index. Ordered as its bytes are (lexicographic),
/// so it may be looked up by `&[u8]`.
#[derive(Debug, Clone)]
pub(crate) struct IndexKey(Repr);

#[derive(Debug, Clone)]
enum Repr {
    /// A key of at most [`INLINE`] bytes, zero-padded.
    Inline { len: u8, bytes: [u8; INLINE] },
    /// A longer key, with its first 16 bytes.
    Boxed { head: [u8; 16], key: Box<[u8]> },
}

impl IndexKey {
    /// `key`, copied.
    #[inline]
    pub fn new(key: &[u8]) -> IndexKey {
        if key.len() <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[..key.len()].copy_from_slice(key);
            // The length fits: INLINE < 256.
            return IndexKey(Repr::Inline {
                len: key.len() as u8,
                bytes,
            });
        }
        let mut head = [0u8; 16];
        head.copy_from_slice(&key[..16]);
        IndexKey(Repr::Boxed {
            head,
            key: key.into(),
        })
    }

    /// The key's bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Boxed { key, .. } => key,
        }
    }

    /// The key's first 16 bytes, zero-padded, big-endian: read from the
    /// node whatever the form.
    #[inline]
    fn head(&self) -> u128 {
        let h: &[u8; 16] = match &self.0 {
            Repr::Inline { bytes, .. } => bytes[..16].try_into().expect("16 of INLINE bytes"),
            Repr::Boxed { head, .. } => head,
        };
        u128::from_be_bytes(*h)
    }
}

// Why the heads order as the keys: let i < 16 be the first byte at which
// two zero-padded heads differ. If both keys are longer than i, that byte
// decides both orders alike. If one ends at or before i, its padded byte
// there is 0 and the other's is not, so its head is the smaller; and it is
// a proper prefix of the other (every byte before i agrees), so it is the
// smaller key too. Equal heads say nothing, and the keys decide.
impl Ord for IndexKey {
    #[inline]
    fn cmp(&self, other: &IndexKey) -> Ordering {
        self.head()
            .cmp(&other.head())
            .then_with(|| self.bytes().cmp(other.bytes()))
    }
}

impl PartialOrd for IndexKey {
    #[inline]
    fn partial_cmp(&self, other: &IndexKey) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for IndexKey {
    #[inline]
    fn eq(&self, other: &IndexKey) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for IndexKey {}

impl Borrow<[u8]> for IndexKey {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_keys_order_exactly_as_their_bytes() {
        // Short keys, zero bytes, shared prefixes around the 16-byte head,
        // and pseudo-random ones.
        let mut keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            vec![1],
            vec![0, 1],
            b"user".to_vec(),
            b"user\0".to_vec(),
            b"user1".to_vec(),
            b"user123456789012".to_vec(),
            b"user1234567890120".to_vec(),
            b"user123456789012\0".to_vec(),
            b"user1234567890119".to_vec(),
            vec![0xff; 20],
            vec![0xff; 16],
            vec![0xff; INLINE],
            vec![0xff; INLINE + 1],
            vec![7; INLINE],
            [vec![7; INLINE], vec![0]].concat(),
            [vec![7; INLINE - 1], vec![8]].concat(),
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..300 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Both forms: lengths around INLINE.
            let len = (x % (INLINE as u64 + 8)) as usize;
            // Few distinct byte values: many ties in the head.
            keys.push((0..len).map(|i| ((x >> (i % 8)) & 3) as u8).collect());
        }
        for a in &keys {
            for b in &keys {
                let (ka, kb) = (IndexKey::new(a), IndexKey::new(b));
                assert_eq!(ka.cmp(&kb), a.cmp(b), "{a:?} vs {b:?}");
                assert_eq!(ka == kb, a == b);
                let borrowed: &[u8] = ka.borrow();
                assert_eq!(borrowed, &a[..]);
            }
        }
    }

    #[test]
    fn a_short_key_lives_in_the_node_and_the_key_costs_no_more_than_a_long_one() {
        assert!(matches!(IndexKey::new(&[1; INLINE]).0, Repr::Inline { .. }));
        assert!(matches!(
            IndexKey::new(&[1; INLINE + 1]).0,
            Repr::Boxed { .. }
        ));
        // The node entry of a long key: its head and its box's pointer and
        // length, and a tag.
        assert_eq!(std::mem::size_of::<IndexKey>(), 40);
    }
}
