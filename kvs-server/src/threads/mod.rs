//! What the server's threads tell and share with each other: the messages
//! a worker is sent ([`to_worker`]) and sends its control thread
//! ([`to_control`]), and what the control thread publishes for the workers
//! and the rest of the server to read ([`cluster_view`], [`lease`]).

pub(crate) mod cluster_view;
pub(crate) mod lease;
pub(crate) mod to_control;
pub(crate) mod to_worker;
