//! Where a poll's responses go.

use crate::error::CallFailed;

/// Where a poll's responses go: the context's own callback ([`Stored`]) or
/// one given to [`Context::poll_with`](super::Context::poll_with)
/// ([`Given`]). Both inline.
pub(super) trait Respond<U, F> {
    fn call(&mut self, stored: &mut F, u: U, r: Result<&[u8], CallFailed>);
}

/// The context's own callback.
pub(super) struct Stored;

impl<U, F: FnMut(U, Result<&[u8], CallFailed>)> Respond<U, F> for Stored {
    #[inline(always)]
    fn call(&mut self, stored: &mut F, u: U, r: Result<&[u8], CallFailed>) {
        stored(u, r)
    }
}

/// A callback given for one poll.
pub(super) struct Given<'g, G>(pub(super) &'g mut G);

impl<U, F, G: FnMut(U, Result<&[u8], CallFailed>)> Respond<U, F> for Given<'_, G> {
    #[inline(always)]
    fn call(&mut self, _: &mut F, u: U, r: Result<&[u8], CallFailed>) {
        (self.0)(u, r)
    }
}
