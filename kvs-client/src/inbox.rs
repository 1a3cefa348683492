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

    /// Gives back the buffers of the completions just followed, `done` and
    /// `arena` (emptied), for the next poll to fill without allocating,
    /// unless following them failed more calls meanwhile (the client
    /// removed a lost member's other connections): those completions stay,
    /// to be followed in turn. Returns whether any did.
    pub(crate) fn give_back(&self, done: Vec<Done>, arena: Vec<u8>) -> bool {
        debug_assert!(done.is_empty() && arena.is_empty());
        let pushed = self.done.take();
        let more = !pushed.is_empty();
        self.done.set(if more { pushed } else { done });
        let bytes = self.arena.take();
        self.arena.set(if bytes.is_empty() { arena } else { bytes });
        more
    }
}

/// A callback that copies each response into `inbox`: for what the context
/// reports outside the client's polls (calls failed by a close).
pub(crate) fn handler(inbox: Rc<Inbox>) -> Handler {
    Box::new(move |op: u32, r: Result<&[u8], CallFailed>| inbox.push(op, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Follows what `inbox` holds as the client does, round after round
    /// until it is empty; `follow` may push more (a removed connection's
    /// calls failing). Returns every op followed, with its bytes.
    fn follow_all(
        inbox: &Inbox,
        mut follow: impl FnMut(u32, &Result<&[u8], CloseReason>),
    ) -> Vec<(u32, Result<Vec<u8>, CloseReason>)> {
        let mut seen = Vec::new();
        loop {
            let mut done = inbox.done.take();
            let mut arena = inbox.arena.take();
            for d in done.drain(..) {
                let r = d
                    .result
                    .map(|(s, len)| &arena[s as usize..(s + len) as usize]);
                follow(d.op, &r);
                seen.push((d.op, r.map(<[u8]>::to_vec)));
            }
            arena.clear();
            if !inbox.give_back(done, arena) {
                return seen;
            }
        }
    }

    #[test]
    fn calls_failed_while_the_inbox_is_followed_are_followed_too() {
        let inbox = Inbox::default();
        inbox.push(1, Ok(b"a redirect"));
        inbox.push(2, Err(CallFailed(CloseReason::Transport(5))));
        // Following op 2 removes the other connection of its member, which
        // fails ops 3 and 4 waiting there: pushed into the inbox meanwhile.
        let seen = follow_all(&inbox, |op, _| {
            if op == 2 {
                inbox.push(3, Err(CallFailed(CloseReason::Local)));
                inbox.push(4, Ok(b"late"));
            }
        });
        assert_eq!(
            seen,
            [
                (1, Ok(b"a redirect".to_vec())),
                (2, Err(CloseReason::Transport(5))),
                (3, Err(CloseReason::Local)),
                (4, Ok(b"late".to_vec())),
            ]
        );
        // Empty again, and the buffers are reused.
        assert!(follow_all(&inbox, |_, _| {}).is_empty());
        inbox.push(5, Ok(b"x"));
        let done = inbox.done.take();
        assert!(done.capacity() >= 2, "the followed buffer came back");
        inbox.done.set(done);
    }
}
