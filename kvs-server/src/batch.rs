//! The size of a migration's bulk-transfer batches: the importer and the
//! exporter use it ([`crate::migration`]), and the configuration checks that
//! the largest record fits in one.

/// Bytes of one batch (and of each receive buffer).
pub(crate) const BATCH: usize = 1 << 20;
