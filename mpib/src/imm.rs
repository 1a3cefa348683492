//! The 32-bit immediate of every signaling WRITE_WITH_IMM.
//!
//! ```text
//!  31                                10 9     8 7          0
//! +------------------------------------+-------+------------+
//! |              size_q                | mask  |    slot    |
//! +------------------------------------+-------+------------+
//! ```
//!
//! - `slot` (bits 0..8): the receiver's FIFO slot the transfer completes;
//! - `mask` (bits 8..10): the rails that carry a signal for this slot (bit 0:
//!   rail 0, bit 1: rail 1); never 0;
//! - `size_q` (bits 10..32): the transfer's size in units of the
//!   communicator's granularity (128 bytes by default), rounded up, or
//!   [`SIZE_Q_SENTINEL`] when the size is in the completion record instead.
//!
//! The fields are packed with shifts and masks into a host-order `u32`. The
//! verbs immediate travels in network byte order; [`mlx5::wr`] takes the host
//! value when posting (`SendOp::WriteImm`) and hands the host value back in
//! `Wc::imm`, on both the direct and the verbs data path, so nothing here swaps
//! bytes.

/// Bit position of the rail mask.
pub const MASK_SHIFT: u32 = 8;
/// Width of the rail mask.
pub const MASK_BITS: u32 = 2;
/// Bit position of `size_q`.
pub const SIZE_Q_SHIFT: u32 = 10;
/// Width of `size_q`.
pub const SIZE_Q_BITS: u32 = 22;
/// `size_q` value meaning "the size is in the completion record" (all ones).
pub const SIZE_Q_SENTINEL: u32 = (1 << SIZE_Q_BITS) - 1;
/// The default size granularity: `size_q` counts 128-byte units.
pub const DEFAULT_GRANULARITY: u32 = 128;

/// The fields of an immediate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imm {
    /// The receiver's FIFO slot.
    pub slot: u8,
    /// Rails that signal this slot (bit `r` for rail `r`).
    pub mask: u8,
    /// Quantized size, or [`SIZE_Q_SENTINEL`].
    pub size_q: u32,
}

impl Imm {
    /// Packs the fields (`mask` and `size_q` are cut to their widths).
    #[inline]
    pub const fn encode(self) -> u32 {
        (self.slot as u32)
            | ((self.mask as u32) & ((1 << MASK_BITS) - 1)) << MASK_SHIFT
            | (self.size_q & SIZE_Q_SENTINEL) << SIZE_Q_SHIFT
    }

    /// Unpacks an immediate (every 32-bit value decodes; validity is the
    /// receiver's check).
    #[inline]
    pub const fn decode(imm: u32) -> Imm {
        Imm {
            slot: (imm & 0xff) as u8,
            mask: ((imm >> MASK_SHIFT) & ((1 << MASK_BITS) - 1)) as u8,
            size_q: imm >> SIZE_Q_SHIFT,
        }
    }

    /// Whether the size is in the completion record rather than here.
    #[inline]
    pub const fn size_in_record(self) -> bool {
        self.size_q == SIZE_Q_SENTINEL
    }
}

/// The largest size `size_q` encodes at `granularity`:
/// `(SIZE_Q_SENTINEL - 1) * granularity`, just under 512 MiB at 128 bytes.
/// A size of `SIZE_Q_SENTINEL * granularity` would round to the sentinel.
#[inline]
pub const fn max_encodable(granularity: u32) -> u64 {
    (SIZE_Q_SENTINEL as u64 - 1) * granularity as u64
}

/// `ceil(size / granularity)`, or `None` when that does not fit below the
/// sentinel. `granularity` is a power of two.
#[inline]
pub const fn size_q(size: u64, granularity: u32) -> Option<u32> {
    let g = granularity as u64;
    let q = size.div_ceil(g);
    if q < SIZE_Q_SENTINEL as u64 {
        Some(q as u32)
    } else {
        None
    }
}

/// The size a receiver reads out of `size_q` for a buffer of `posted` bytes:
/// `size_q * granularity`, clamped to `posted`; `None` when `size_q` stands for
/// more than the buffer could take (`size_q > ceil(posted / granularity)`).
#[inline]
pub const fn decode_size(q: u32, granularity: u32, posted: u64) -> Option<u64> {
    let g = granularity as u64;
    if q as u64 > posted.div_ceil(g) {
        return None;
    }
    let s = q as u64 * g;
    Some(if s < posted { s } else { posted })
}

/// Whether a single-buffer transfer of `size` bytes into a buffer of `posted`
/// bytes can carry its size in the immediate *exactly*: `size_q` encodes it
/// and the receiver's reading ([`decode_size`]) gives `size` back. That holds
/// for multiples of the granularity and for a transfer that fills the buffer;
/// any other size goes in the completion record.
#[inline]
pub fn exact_in_imm(size: u64, granularity: u32, posted: u64) -> Option<u32> {
    let q = size_q(size, granularity)?;
    (decode_size(q, granularity, posted) == Some(size)).then_some(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_layout() {
        let i = Imm {
            slot: 0xa5,
            mask: 0b10,
            size_q: 0x2a_aaaa,
        };
        let v = i.encode();
        assert_eq!(v & 0xff, 0xa5);
        assert_eq!((v >> 8) & 0b11, 0b10);
        assert_eq!(v >> 10, 0x2a_aaaa);
        assert_eq!(Imm::decode(v), i);
        assert_eq!(
            Imm {
                slot: 1,
                mask: 1,
                size_q: 1
            }
            .encode(),
            1 | 1 << 8 | 1 << 10
        );
        // Every field at its extreme, and nothing bleeds into a neighbour.
        let all = Imm {
            slot: 0xff,
            mask: 0b11,
            size_q: SIZE_Q_SENTINEL,
        };
        assert_eq!(all.encode(), u32::MAX);
        assert_eq!(Imm::decode(u32::MAX), all);
        let only_mask = Imm {
            slot: 0,
            mask: 0xff,
            size_q: 0,
        };
        assert_eq!(only_mask.encode(), 0b11 << 8, "mask cut to two bits");
        for v in [0u32, 1, 0x3ff, 0x400, 0xdead_beef, 0x8000_0000] {
            assert_eq!(Imm::decode(v).encode(), v, "{v:#x} round trips");
        }
    }

    #[test]
    fn size_q_rounds_up() {
        let g = DEFAULT_GRANULARITY;
        assert_eq!(size_q(0, g), Some(0));
        assert_eq!(size_q(1, g), Some(1));
        assert_eq!(size_q(127, g), Some(1));
        assert_eq!(size_q(128, g), Some(1));
        assert_eq!(size_q(129, g), Some(2));
        assert_eq!(size_q(4096, g), Some(32));
        assert_eq!(size_q(5, 1), Some(5));
        assert_eq!(size_q(17, 16), Some(2));
    }

    #[test]
    fn sentinel_and_the_512_mib_boundary() {
        let g = DEFAULT_GRANULARITY;
        assert_eq!(SIZE_Q_SENTINEL, 0x3f_ffff);
        let top = u64::from(SIZE_Q_SENTINEL) * 128; // (2^22 - 1) * 128
        assert_eq!(top, 512 * 1024 * 1024 - 128);
        assert_eq!(max_encodable(g), top - 128);
        assert_eq!(size_q(top - 128, g), Some(SIZE_Q_SENTINEL - 1));
        assert_eq!(size_q(top - 129, g), Some(SIZE_Q_SENTINEL - 1));
        // From here on ceil() would give the sentinel (or more): not encodable.
        assert_eq!(size_q(top - 127, g), None);
        assert_eq!(size_q(top, g), None);
        assert_eq!(size_q(top + 1, g), None);
        assert_eq!(size_q(1 << 40, g), None);
        assert!(Imm::decode(
            Imm {
                slot: 3,
                mask: 1,
                size_q: SIZE_Q_SENTINEL
            }
            .encode()
        )
        .size_in_record());
        // A smaller granularity lowers the boundary.
        assert_eq!(max_encodable(1), u64::from(SIZE_Q_SENTINEL) - 1);
        assert_eq!(size_q(max_encodable(1) + 1, 1), None);
    }

    #[test]
    fn receiver_reading_clamps_and_rejects() {
        let g = 128;
        assert_eq!(decode_size(8, g, 4096), Some(1024));
        assert_eq!(decode_size(8, g, 1000), Some(1000), "clamped to the buffer");
        assert_eq!(decode_size(8, g, 897), Some(897));
        assert_eq!(decode_size(8, g, 896), None, "more than the buffer holds");
        assert_eq!(decode_size(0, g, 0), Some(0));
        assert_eq!(decode_size(1, g, 0), None);
        assert_eq!(exact_in_imm(1024, g, 4096), Some(8));
        assert_eq!(exact_in_imm(1000, g, 1000), Some(8), "fills the buffer");
        assert_eq!(exact_in_imm(1000, g, 4096), None, "would read back as 1024");
        assert_eq!(exact_in_imm(0, g, 4096), Some(0));
        assert_eq!(exact_in_imm(max_encodable(g) + 1, g, 1 << 31), None);
    }
}
