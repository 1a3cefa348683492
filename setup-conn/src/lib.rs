//! Connection setup over TCP, as copyrpc and mpib do it: each side sends one
//! setup line (its queue numbers, addresses, keys and private data, in a
//! format the crate using this one owns), reads the peer's, and connects. A
//! side that will not connect answers with a refusal line saying why.
//!
//! What is here is what does not depend on the bytes of a record:
//!
//! - [`SetupFormat`]: the record format, given by the crate using this one
//!   (how a complete line parses, or why it is malformed; the longest line;
//!   how a refusal is written).
//! - [`Acceptor`]: reads many peers' setup lines at once on one thread, with
//!   one `poll(2)`, under a deadline each and a cap on how many wait, so no
//!   peer can hold up another; counts what it did ([`AcceptorStats`]) and
//!   says why it dropped a peer ([`DropReason`]).
//! - [`LineReader`] and [`read_line`]: one setup line, read in whole chunks up
//!   to its newline and never past it, at most the format's bound.
//! - [`refuse`]: the refusal line, best effort and never waiting.
//! - [`connect_by`]: the connecting side's TCP connection, by a deadline.
//!
//! The call order on the accepting side: bind a [`std::net::TcpListener`],
//! give it to [`Acceptor::new`] with the format and [`AcceptorOptions`], then
//! call [`Acceptor::poll`] in a loop; each peer whose line is complete comes
//! out as an [`Accepted`] (its stream, address and parsed record), to be
//! answered with this side's record or [`refuse`]d. On the connecting side:
//! [`connect_by`], write this side's line, then [`read_line`] by the same
//! deadline and parse it with the format.

#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod acceptor;
mod dial;
mod format;
mod line;

pub use acceptor::{Accepted, Acceptor, AcceptorOptions, AcceptorStats, DropReason};
pub use dial::connect_by;
pub use format::{printable, refuse, SetupFormat, MAX_REASON};
pub use line::{read_line, Fill, LineError, LineReader};
