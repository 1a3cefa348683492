//! Reading a log back after a restart: every whole record in order, a torn
//! tail told apart from damage.

use crate::error::{Damage, Reason, WalError};
use crate::field;
use crate::open::Log;
use crate::window::Window;
use crate::writer::Writer;

/// What a replay hands each record to.
pub trait Visit {
    /// A whole record with a matching CRC: its kind, its payload, and the
    /// file offset its header starts at. An error stops the replay with
    /// [`Damage::Rejected`] at that offset.
    fn record(&mut self, kind: u8, payload: &[u8], offset: u64) -> Result<(), Reason>;

    /// `read` of the file's `size` bytes have been read: called after each
    /// chunk read, and last with `read == size`, for a caller to report
    /// "N of M bytes" as it sees fit.
    fn progress(&mut self, read: u64, size: u64) {
        let _ = (read, size);
    }
}

/// A closure taking `(kind, payload, offset)` is a visitor that ignores
/// progress.
impl<F> Visit for F
where
    F: FnMut(u8, &[u8], u64) -> Result<(), Reason>,
{
    fn record(&mut self, kind: u8, payload: &[u8], offset: u64) -> Result<(), Reason> {
        self(kind, payload, offset)
    }
}

/// A log read to its end; the next step is [`Replayed::append`].
#[derive(Debug)]
pub struct Replayed {
    log: Log,
    end: u64,
    torn_bytes: u64,
    records: u64,
}

impl Replayed {
    /// Where the last whole record ends: the log's length once the torn
    /// tail is cut off.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Bytes after [`end`](Self::end): a torn last write, cut off by
    /// [`append`](Self::append).
    pub fn torn_bytes(&self) -> u64 {
        self.torn_bytes
    }

    /// The records read.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Opens the log for appending after its last whole record: the torn
    /// tail (if any) is cut off, and the file flushed, so that what was
    /// replayed is on disk before anything is added to it.
    pub fn append(self) -> Result<Writer, WalError> {
        let Log {
            path, file, format, ..
        } = self.log;
        let io = |source| WalError::Io {
            path: path.clone(),
            source,
        };
        if self.torn_bytes > 0 {
            file.set_len(self.end).map_err(io)?;
        }
        file.sync_data().map_err(io)?;
        Writer::new(path, file, format, self.end)
    }
}

/// What lies at the start of the window.
enum Step {
    /// The end of the file, right after a whole record (or the magic).
    End,
    /// The file ends inside this record: a write a crash cut short.
    Torn,
    /// A whole record of this many bytes, header included.
    Whole(usize),
    /// A bad record of this many bytes: a torn write if only zeros follow
    /// it, damage otherwise.
    Bad(usize, Damage),
    /// Damage, whatever follows.
    Damaged(Damage),
}

impl Log {
    /// Reads the log from its first record to its end, handing each whole
    /// record to `visit`, a chunk at a time (so a log of any size is read
    /// in about a chunk of memory, or the largest record if larger).
    ///
    /// A torn tail is no error: the replay stops at the last whole record
    /// and [`Replayed`] says how many bytes follow it. Damage is: a record
    /// longer than the format allows, a record that fails its checksum (or
    /// has no bytes) with anything but zeros after it, or a record `visit`
    /// rejects, each reported with the record's offset.
    pub fn replay<V: Visit + ?Sized>(self, visit: &mut V) -> Result<Replayed, WalError> {
        let max = self.format.max_record();
        let mut w = Window::new(&self.file, field::MAGIC.end as u64, self.size, self.chunk);
        let mut reported = w.read();
        let mut records = 0;
        let corrupt = |offset, why| WalError::Corrupt {
            path: self.path.clone(),
            offset,
            why,
        };
        let io = |source| WalError::Io {
            path: self.path.clone(),
            source,
        };
        let end = loop {
            let at = w.offset();
            let step = step(&mut w, max).map_err(io)?;
            if w.read() != reported {
                reported = w.read();
                visit.progress(reported, w.size());
            }
            match step {
                Step::End | Step::Torn => break at,
                Step::Whole(n) => {
                    let rec = &w.fill(n).map_err(io)?[..n];
                    let kind = rec[field::KIND];
                    visit
                        .record(kind, &rec[field::PAYLOAD.start..], at)
                        .map_err(|reason| corrupt(at, Damage::Rejected { kind, reason }))?;
                    w.consume(n);
                    records += 1;
                }
                Step::Bad(n, why) => {
                    w.consume(n);
                    if !zeros_to_the_end(&mut w).map_err(io)? {
                        return Err(corrupt(at, why));
                    }
                    break at;
                }
                Step::Damaged(why) => return Err(corrupt(at, why)),
            }
        };
        if reported != w.size() {
            visit.progress(w.size(), w.size());
        }
        Ok(Replayed {
            torn_bytes: self.size - end,
            end,
            records,
            log: self,
        })
    }
}

/// Reads what lies at the start of the window (leaving it there).
fn step(w: &mut Window<'_>, max: u32) -> std::io::Result<Step> {
    let avail = w.fill(field::HEADER_LEN)?;
    if avail.is_empty() {
        return Ok(Step::End);
    }
    let Some(h) = avail.first_chunk::<{ field::HEADER_LEN }>() else {
        return Ok(Step::Torn);
    };
    let (len, crc) = field::header(h);
    if len > max {
        return Ok(Step::Damaged(Damage::TooLarge { len, max }));
    }
    let n = field::HEADER_LEN + len as usize;
    if w.offset() + n as u64 > w.size() {
        return Ok(Step::Torn);
    }
    let body = &w.fill(n)?[field::HEADER_LEN..n];
    Ok(if body.is_empty() {
        Step::Bad(n, Damage::Empty)
    } else if crc32fast::hash(body) != crc {
        Step::Bad(n, Damage::Checksum)
    } else {
        Step::Whole(n)
    })
}

/// Whether the file holds only zero bytes from the window's start on
/// (what a crash leaves where the file was extended and its data never
/// reached the disk).
fn zeros_to_the_end(w: &mut Window<'_>) -> std::io::Result<bool> {
    loop {
        let avail = w.fill(1)?;
        if avail.is_empty() {
            return Ok(true);
        }
        if avail.iter().any(|&b| b != 0) {
            return Ok(false);
        }
        let n = avail.len();
        w.consume(n);
    }
}

#[cfg(test)]
mod tests;
