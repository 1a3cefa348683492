//! Records encoded into one buffer, to be written with one write(2).

use crate::error::TooLarge;
use crate::field;
use crate::format::Format;

/// Records framed back to back, as they are to lie in the file: a
/// [`Writer`](crate::Writer)'s pending records, or the records a
/// [`Writer::rewrite`](crate::Writer::rewrite) is given. The buffer is
/// kept across batches: once it has grown to a turn's size, pushing
/// allocates nothing.
#[derive(Debug)]
pub struct Batch {
    buf: Vec<u8>,
    records: usize,
    max_record: u32,
}

impl Batch {
    /// An empty batch of records of `format`.
    pub fn new(format: Format) -> Batch {
        Batch {
            buf: Vec::new(),
            records: 0,
            max_record: format.max_record(),
        }
    }

    /// Adds a record of `kind` holding `payload`.
    pub fn push(&mut self, kind: u8, payload: &[u8]) -> Result<(), TooLarge> {
        self.push_with(kind, |out| out.extend_from_slice(payload))
    }

    /// Adds a record of `kind` whose payload `encode` appends to the
    /// vector it is given (the batch's own buffer: the payload is not
    /// copied again). `encode` may only append; what it finds in the vector
    /// is the batch's.
    ///
    /// # Panics
    /// If `encode` removed bytes it did not append.
    pub fn push_with<F>(&mut self, kind: u8, encode: F) -> Result<(), TooLarge>
    where
        F: FnOnce(&mut Vec<u8>),
    {
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0; field::HEADER_LEN]);
        self.buf.push(kind);
        encode(&mut self.buf);
        assert!(
            self.buf.len() > start + field::HEADER_LEN,
            "a record's encoder removed bytes of the batch"
        );
        let body = &self.buf[start + field::HEADER_LEN..];
        let len = body.len();
        if len > self.max_record as usize {
            self.buf.truncate(start);
            return Err(TooLarge {
                len,
                max: self.max_record,
            });
        }
        let crc = crc32fast::hash(body);
        let header = &mut self.buf[start..start + field::HEADER_LEN];
        header[field::LENGTH].copy_from_slice(&(len as u32).to_le_bytes());
        header[field::CRC].copy_from_slice(&crc.to_le_bytes());
        self.records += 1;
        Ok(())
    }

    /// The bytes of the records pushed.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether no record was pushed.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The records pushed.
    pub fn records(&self) -> usize {
        self.records
    }

    /// Appends `other`'s records.
    pub(crate) fn extend(&mut self, other: &Batch) {
        self.buf.extend_from_slice(&other.buf);
        self.records += other.records;
    }

    /// Drops the records, keeping the buffer.
    pub(crate) fn clear(&mut self) {
        self.buf.clear();
        self.records = 0;
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: Format = Format::new(*b"TESTLOG\x01", 16);

    #[test]
    fn a_record_is_length_crc_kind_and_payload() {
        let mut b = Batch::new(F);
        b.push(7, b"abc").unwrap();
        b.push_with(9, |v| v.extend_from_slice(b"xy")).unwrap();
        let mut want = Vec::new();
        for (kind, payload) in [(7u8, &b"abc"[..]), (9, b"xy")] {
            let mut body = vec![kind];
            body.extend_from_slice(payload);
            want.extend_from_slice(&(body.len() as u32).to_le_bytes());
            want.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
            want.extend_from_slice(&body);
        }
        assert_eq!(b.bytes(), want);
        assert_eq!((b.records(), b.len()), (2, want.len()));
    }

    #[test]
    fn a_record_over_the_limit_is_refused_and_leaves_the_batch_as_it_was() {
        let mut b = Batch::new(F);
        b.push(1, &[5; 15]).unwrap();
        let before = b.bytes().to_vec();
        assert_eq!(b.push(1, &[5; 16]), Err(TooLarge { len: 17, max: 16 }));
        assert_eq!(
            b.push_with(2, |v| v.resize(v.len() + 100, 0)),
            Err(TooLarge { len: 101, max: 16 })
        );
        assert_eq!(b.bytes(), before);
        assert_eq!(b.records(), 1);
        b.clear();
        assert!(b.is_empty());
        assert_eq!(b.records(), 0);
    }

    #[test]
    fn pushing_into_a_warm_batch_does_not_grow_its_buffer() {
        let mut b = Batch::new(F);
        for _ in 0..10 {
            b.push(1, b"0123456789").unwrap();
        }
        let cap = b.buf.capacity();
        let ptr = b.buf.as_ptr();
        b.clear();
        for _ in 0..10 {
            b.push(1, b"0123456789").unwrap();
        }
        assert_eq!((b.buf.capacity(), b.buf.as_ptr()), (cap, ptr));
    }
}
