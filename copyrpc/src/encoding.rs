//! The wire format (docs/protocol.md): what one RDMA WRITE-with-immediate puts into
//! the peer's receive ring. All fields little-endian; all positions and sizes
//! multiples of [`ALIGNMENT`].
//!
//! ```text
//! batch:   FlowMetadata (32 B) | message | message | ...
//! meta:    consumer_pos u64 | credit_grant u64 | message_count u32 | pad 4 | batch_pos u64
//! message: call_id u32 | piggyback u32 | len u32 | payload | pad to 32
//! ```
//! A batch whose `message_count` is [`WRAP_MESSAGE_COUNT`] is a wrap marker: it
//! carries flow metadata only and the receiver continues at the ring's start.
//! `batch_pos` is the batch's own position in the ring (virtual, monotonic):
//! a receiver takes a batch only where it expects the next one, so bytes a
//! previous lap left behind never pass for a new batch.
//! The immediate is the batch size in 32-byte blocks (on RC; on DC it names
//! the receiving endpoint, see [`crate::transport::Dc`]).

/// Every position and size is a multiple of this.
pub const ALIGNMENT: u64 = 32;
/// Message header size.
pub const HEADER_SIZE: usize = 12;
/// Flow metadata size (one per batch).
pub const FLOW_METADATA_SIZE: u64 = 32;
/// `call_id` bit marking a response.
pub const RESPONSE_FLAG: u32 = 0x8000_0000;
/// `message_count` of a wrap marker.
pub const WRAP_MESSAGE_COUNT: u32 = u32::MAX;

/// Rounds up to [`ALIGNMENT`].
#[inline(always)]
pub const fn align_up(n: u64) -> u64 {
    (n + ALIGNMENT - 1) & !(ALIGNMENT - 1)
}

/// Bytes a message with `payload_len` bytes takes in the ring.
#[inline(always)]
pub const fn padded_message_size(payload_len: usize) -> u64 {
    align_up((HEADER_SIZE + payload_len) as u64)
}

/// The immediate for a batch of `delta` bytes.
#[inline(always)]
pub const fn encode_imm(delta: u64) -> u32 {
    (delta / ALIGNMENT) as u32
}

/// The batch size an immediate stands for.
#[inline(always)]
pub const fn decode_imm(imm: u32) -> u64 {
    imm as u64 * ALIGNMENT
}

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const CONSUMER_POS: Field = 0..8;
    pub const CREDIT_GRANT: Field = 8..16;
    pub const MESSAGE_COUNT: Field = 16..20;
    pub const PAD: Field = 20..24;
    pub const BATCH_POS: Field = 24..32;
    pub const CALL_ID: Field = 0..4;
    pub const PIGGYBACK: Field = 4..8;
    pub const LEN: Field = 8..12;
}

#[inline(always)]
fn le64(b: &[u8], f: field::Field) -> u64 {
    u64::from_le_bytes(b[f].try_into().unwrap_or([0; 8]))
}
#[inline(always)]
fn le32(b: &[u8], f: field::Field) -> u32 {
    u32::from_le_bytes(b[f].try_into().unwrap_or([0; 4]))
}

/// View of the 32-byte flow metadata at the head of a batch.
#[derive(Debug, Clone, Copy)]
pub struct FlowMetadata<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> FlowMetadata<T> {
    /// Wraps a buffer of at least 32 bytes (`None` if shorter).
    pub fn new_checked(buffer: T) -> Option<Self> {
        (buffer.as_ref().len() >= FLOW_METADATA_SIZE as usize).then_some(Self { buffer })
    }
    /// The sender's consumer position in its own receive ring.
    pub fn consumer_pos(&self) -> u64 {
        le64(self.buffer.as_ref(), field::CONSUMER_POS)
    }
    /// Bytes of credit the sender grants.
    pub fn credit_grant(&self) -> u64 {
        le64(self.buffer.as_ref(), field::CREDIT_GRANT)
    }
    /// Messages in the batch, or [`WRAP_MESSAGE_COUNT`].
    pub fn message_count(&self) -> u32 {
        le32(self.buffer.as_ref(), field::MESSAGE_COUNT)
    }
    /// The batch's own position in the ring.
    pub fn batch_pos(&self) -> u64 {
        le64(self.buffer.as_ref(), field::BATCH_POS)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FlowMetadata<T> {
    /// Writes the metadata (padding zeroed).
    pub fn set(
        &mut self,
        consumer_pos: u64,
        credit_grant: u64,
        message_count: u32,
        batch_pos: u64,
    ) {
        let b = self.buffer.as_mut();
        b[field::CONSUMER_POS].copy_from_slice(&consumer_pos.to_le_bytes());
        b[field::CREDIT_GRANT].copy_from_slice(&credit_grant.to_le_bytes());
        b[field::MESSAGE_COUNT].copy_from_slice(&message_count.to_le_bytes());
        b[field::PAD].fill(0);
        b[field::BATCH_POS].copy_from_slice(&batch_pos.to_le_bytes());
    }
}

/// View of a 12-byte message header.
#[derive(Debug, Clone, Copy)]
pub struct MessageHeader<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MessageHeader<T> {
    /// Wraps a buffer of at least 12 bytes (`None` if shorter).
    pub fn new_checked(buffer: T) -> Option<Self> {
        (buffer.as_ref().len() >= HEADER_SIZE).then_some(Self { buffer })
    }
    /// Call id; [`RESPONSE_FLAG`] set for a response.
    pub fn call_id(&self) -> u32 {
        le32(self.buffer.as_ref(), field::CALL_ID)
    }
    /// Request: the response allowance in 32-byte blocks.
    pub fn piggyback(&self) -> u32 {
        le32(self.buffer.as_ref(), field::PIGGYBACK)
    }
    /// Payload length.
    pub fn len(&self) -> u32 {
        le32(self.buffer.as_ref(), field::LEN)
    }
    /// True for an empty payload.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MessageHeader<T> {
    /// Writes the header.
    pub fn set(&mut self, call_id: u32, piggyback: u32, len: u32) {
        let b = self.buffer.as_mut();
        b[field::CALL_ID].copy_from_slice(&call_id.to_le_bytes());
        b[field::PIGGYBACK].copy_from_slice(&piggyback.to_le_bytes());
        b[field::LEN].copy_from_slice(&len.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_from_the_seed() {
        assert_eq!(padded_message_size(0), 32);
        assert_eq!(padded_message_size(20), 32);
        assert_eq!(padded_message_size(21), 64);
        assert_eq!(padded_message_size(52), 64);
        assert_eq!(padded_message_size(53), 96);
        assert_eq!(decode_imm(encode_imm(4096)), 4096);
    }

    #[test]
    fn views_round_trip_little_endian() {
        let mut b = [0xffu8; 32];
        FlowMetadata::new_checked(&mut b[..])
            .unwrap()
            .set(0x0102, 0x40, 3, 0x0a0b_0000_0000_0c0d);
        assert_eq!(&b[..2], &[0x02, 0x01]);
        let m = FlowMetadata::new_checked(&b[..]).unwrap();
        assert_eq!(
            (m.consumer_pos(), m.credit_grant(), m.message_count()),
            (0x102, 0x40, 3)
        );
        assert!(b[20..24].iter().all(|&x| x == 0));
        assert_eq!(&b[24..26], &[0x0d, 0x0c]);
        assert_eq!(m.batch_pos(), 0x0a0b_0000_0000_0c0d);
        let mut h = [0u8; 12];
        MessageHeader::new_checked(&mut h[..])
            .unwrap()
            .set(7 | RESPONSE_FLAG, 2, 99);
        let v = MessageHeader::new_checked(&h[..]).unwrap();
        assert_eq!(
            (v.call_id(), v.piggyback(), v.len()),
            (7 | RESPONSE_FLAG, 2, 99)
        );
        assert!(MessageHeader::new_checked(&h[..11]).is_none());
    }
}
