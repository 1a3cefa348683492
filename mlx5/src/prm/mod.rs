//! Hardware formats of the mlx5 PRM: zero-copy views over WQE segments, CQEs,
//! mini CQEs and doorbell records, the tag-matching headers a message carries
//! on the wire, and the constants of `mlx5dv.h`.
//!
//! This module is the only place in the workspace that knows byte offsets. Each
//! format is a view type over any `T: AsRef<[u8]>` (read) / `AsMut<[u8]>` (write),
//! in the style of smoltcp's `wire` module: `new_unchecked` wraps a buffer,
//! `new_checked` also verifies its length, and the byte ranges of the fields live
//! in a private `field` module per format. Every multi-byte field is big-endian.

mod atomic;
mod consts;
mod cq_arm;
mod cqe;
mod ctrl;
mod data;
mod datagram;
mod dbrec;
mod err_cqe;
mod inline;
mod mini_cqe;
mod raddr;
mod rvh;
mod srq_next;
mod tm_seg;
mod tmh;

pub use atomic::AtomicSeg;
pub use consts::*;
pub use cq_arm::{cq_doorbell_bytes, ArmCmd, CqArm, CqDoorbell};
pub use cqe::Cqe64;
pub use ctrl::{Ctrl, CtrlSeg};
pub use data::DataSeg;
pub use datagram::{AddressVector, DatagramSeg, EXTENDED_AV};
pub use dbrec::{CqDbRec, QpDbRec, SrqDbRec};
pub use err_cqe::ErrCqe;
pub use inline::InlineSeg;
pub use mini_cqe::{MiniCqe, MINI_PER_BASIC_SLOT, MINI_PER_ENHANCED_SLOT};
pub use raddr::RaddrSeg;
pub use rvh::Rvh;
pub use srq_next::SrqNextSeg;
pub use tm_seg::{TmCmd, TmSeg};
pub use tmh::Tmh;

/// A byte range inside a format.
pub(crate) type Field = core::ops::Range<usize>;

/// A buffer was shorter than the format it was asked to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("buffer of {got} bytes is shorter than the {need}-byte format")]
pub struct Truncated {
    /// Bytes the format needs.
    pub need: usize,
    /// Bytes the buffer has.
    pub got: usize,
}

#[inline(always)]
pub(crate) fn check_len(buf: &[u8], need: usize) -> Result<(), Truncated> {
    if buf.len() < need {
        Err(Truncated {
            need,
            got: buf.len(),
        })
    } else {
        Ok(())
    }
}

#[inline(always)]
pub(crate) fn be16(buf: &[u8], f: Field) -> u16 {
    u16::from_be_bytes(buf[f].try_into().unwrap_or([0; 2]))
}
#[inline(always)]
pub(crate) fn be32(buf: &[u8], f: Field) -> u32 {
    u32::from_be_bytes(buf[f].try_into().unwrap_or([0; 4]))
}
#[inline(always)]
pub(crate) fn be64(buf: &[u8], f: Field) -> u64 {
    u64::from_be_bytes(buf[f].try_into().unwrap_or([0; 8]))
}
#[inline(always)]
pub(crate) fn put16(buf: &mut [u8], f: Field, v: u16) {
    buf[f].copy_from_slice(&v.to_be_bytes());
}
#[inline(always)]
pub(crate) fn put32(buf: &mut [u8], f: Field, v: u32) {
    buf[f].copy_from_slice(&v.to_be_bytes());
}
#[inline(always)]
pub(crate) fn put64(buf: &mut [u8], f: Field, v: u64) {
    buf[f].copy_from_slice(&v.to_be_bytes());
}

/// Defines the boilerplate of a fixed-size view type: `new_unchecked`,
/// `new_checked`, `into_inner`, `as_bytes` and `LEN`.
macro_rules! view {
    ($(#[$m:meta])* $name:ident, $len:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T> {
            buffer: T,
        }

        impl<T> $name<T> {
            /// Size of the format in bytes.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length; accessors panic on a
            /// buffer shorter than [`Self::LEN`].
            #[inline(always)]
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Returns the underlying buffer.
            #[inline(always)]
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer after checking it holds at least [`Self::LEN`] bytes.
            #[inline]
            pub fn new_checked(buffer: T) -> Result<Self, $crate::prm::Truncated> {
                $crate::prm::check_len(buffer.as_ref(), $len)?;
                Ok(Self { buffer })
            }

            /// The format's bytes.
            #[inline(always)]
            pub fn as_bytes(&self) -> &[u8] {
                &self.buffer.as_ref()[..$len]
            }
        }
    };
}
pub(crate) use view;
