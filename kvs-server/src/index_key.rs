//! The ordered index's key: the key, with its first 16 bytes again inline,
//! so that a search down the B-tree compares in the node it reads and
//! follows a key's own allocation only on a tie of those bytes. A tree of
//! plain boxed keys follows one pointer per comparison, a cache miss each
//! once the index outgrows the cache: about 17 of them per insert into an
//! index of 100,000 keys.

use std::borrow::Borrow;
use std::cmp::Ordering;

/// A key of the ordered index. Ordered as its bytes are (lexicographic),
/// so it may be looked up by `&[u8]`.
#[derive(Debug, Clone)]
pub(crate) struct IndexKey {
    /// The first 16 bytes, zero-padded, big-endian: two keys' heads order
    /// as the keys do unless they are equal.
    head: u128,
    key: Box<[u8]>,
}

impl IndexKey {
    /// `key`, copied.
    #[inline]
    pub fn new(key: &[u8]) -> IndexKey {
        let mut b = [0u8; 16];
        let n = key.len().min(16);
        b[..n].copy_from_slice(&key[..n]);
        IndexKey {
            head: u128::from_be_bytes(b),
            key: key.into(),
        }
    }

    /// The key's bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &self.key
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
        self.head
            .cmp(&other.head)
            .then_with(|| self.key.cmp(&other.key))
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
        self.head == other.head && self.key == other.key
    }
}

impl Eq for IndexKey {}

impl Borrow<[u8]> for IndexKey {
    #[inline]
    fn borrow(&self) -> &[u8] {
        &self.key
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
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..300 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 24) as usize;
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
}
