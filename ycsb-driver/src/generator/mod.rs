//! Number generators of Java YCSB (`site.ycsb.generator`), drawing from an
//! explicit [`Rng`] so that each driver thread owns its randomness.
//!
//! Every generator here reproduces the Java algorithm (including the quirks
//! documented on each type), so a run draws keys with the same distribution as
//! the Java client. None allocates in `next_value`.
//!
//! Generators that Java shares between client threads through atomics
//! ([`Counter`], [`AcknowledgedCounter`], the counter of [`Sequential`]) are
//! shared here too (`Arc`, `&self` methods); the others are cheap to clone,
//! one copy per thread.

use crate::rng::Rng;

mod constant;
mod counter;
mod discrete;
mod exponential;
mod hotspot;
mod scrambled_zipfian;
mod sequential;
mod skewed_latest;
mod uniform;
mod zipfian;

pub use constant::Constant;
pub use counter::{AcknowledgedCounter, Counter, ACK_WINDOW_SIZE};
pub use discrete::Discrete;
pub use exponential::{Exponential, EXPONENTIAL_FRAC_DEFAULT, EXPONENTIAL_PERCENTILE_DEFAULT};
pub use hotspot::Hotspot;
pub use scrambled_zipfian::ScrambledZipfian;
pub use sequential::Sequential;
pub use skewed_latest::SkewedLatest;
pub use uniform::Uniform;
pub use zipfian::{zeta, zeta_incremental, Zipfian, ZIPFIAN_CONSTANT};

/// A generator of integers, Java's `NumberGenerator`.
pub trait NumberGenerator {
    /// Draws the next value.
    fn next_value(&mut self, rng: &mut Rng) -> u64;

    /// The value most recently drawn (each type documents what it returns
    /// before the first draw, and any Java quirk in when it is updated).
    fn last_value(&self) -> u64;

    /// The mean of the distribution, where Java defines one (`None` for
    /// non-stationary generators such as counters).
    fn mean(&self) -> Option<f64> {
        None
    }
}
