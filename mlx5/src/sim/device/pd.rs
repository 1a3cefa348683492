//! Protection domains.

use super::SimContext;

impl SimContext {
    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> SimPd {
        SimPd {
            ctx: self.clone(),
            pdn: self.d.fab.reg().next_gen() | 0x8000_0000,
        }
    }
}

/// A protection domain.
#[derive(Debug, Clone)]
pub struct SimPd {
    pub(super) ctx: SimContext,
    pub(super) pdn: u32,
}

impl SimPd {
    /// The PD number.
    pub(crate) fn pdn(&self) -> u32 {
        self.pdn
    }
}
