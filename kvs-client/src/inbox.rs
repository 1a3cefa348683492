//! Where answers the client cannot hand over where they lie (redirects,
//! try-agains, failures, scan parts, maps) wait for it: plain cells, moved
//! out and back (no borrow flag, no lock, no allocation once warm).

use std::cell::Cell;
use std::rc::Rc;

use copyrpc::{CallFailed, CloseReason};

/// One finished call (its user data: an op slot), its response bytes in the
/// arena.
#[derive(Debug)]
pub(crate) struct Done {
    pub(crate) op: u32,
    pub(crate) result: Result<(u32, u32), CloseReason>,
}

/// The completions since the client last looked, and their bytes.
#[derive(Default)]
pub(crate) struct Inbox {
    pub(crate) done: Cell<Vec<Done>>,
    pub(crate) arena: Cell<Vec<u8>>,
}

/// The context's response callback.
pub(crate) type Handler = Box<dyn FnMut(u32, Result<&[u8], CallFailed>)>;

impl Inbox {
    /// Copies a response (or a failed call) in.
    pub(crate) fn push(&self, op: u32, r: Result<&[u8], CallFailed>) {
        let mut done = self.done.take();
        let result = match r {
            Ok(b) => {
                let mut arena = self.arena.take();
                let start = arena.len() as u32;
                arena.extend_from_slice(b);
                self.arena.set(arena);
                Ok((start, b.len() as u32))
            }
            Err(CallFailed(why)) => Err(why),
        };
        done.push(Done { op, result });
        self.done.set(done);
    }
}

/// A callback that copies each response into `inbox`: for what the context
/// reports outside the client's polls (calls failed by a close).
pub(crate) fn handler(inbox: Rc<Inbox>) -> Handler {
    Box::new(move |op: u32, r: Result<&[u8], CallFailed>| inbox.push(op, r))
}
