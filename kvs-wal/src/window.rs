//! The part of a file read and not yet consumed, refilled a chunk at a
//! time: what lets a replay walk a file of any size in bounded memory.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// How far ahead of what it has read a window asks the kernel to read the
/// file: the disk reads the next chunks while the caller works on this
/// one. The kernel's own read-ahead (128 KiB by default) leaves a replay
/// waiting for each chunk's last pages.
const AHEAD: u64 = 8 << 20;

/// Bytes `[start, end)` of `buf` are the file's from [`Window::offset`].
#[derive(Debug)]
pub(crate) struct Window<'a> {
    file: &'a File,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The file's bytes read so far (the offset of `buf[end]`).
    read: u64,
    /// Where reading stops: the file's size when it was opened.
    size: u64,
    /// How far the kernel was asked to read ahead.
    advised: u64,
}

impl<'a> Window<'a> {
    /// A window on `file` from byte `from` to `size`, reading `chunk`
    /// bytes at a time.
    pub fn new(file: &'a File, from: u64, size: u64, chunk: usize) -> Window<'a> {
        Window {
            file,
            buf: vec![0; chunk.max(1)],
            start: 0,
            end: 0,
            read: from,
            size,
            advised: from,
        }
    }

    /// The file offset of the first byte not consumed.
    pub fn offset(&self) -> u64 {
        self.read - (self.end - self.start) as u64
    }

    /// The file's bytes read so far.
    pub fn read(&self) -> u64 {
        self.read
    }

    /// The file's size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The bytes from [`Window::offset`] on: at least `n` of them, or all
    /// that are left of the file if fewer. Reads as much as the buffer
    /// holds each time it reads; grows the buffer if `n` is larger.
    pub fn fill(&mut self, n: usize) -> std::io::Result<&[u8]> {
        while self.end - self.start < n && self.read < self.size {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() < n {
                self.buf.resize(n, 0);
            }
            let room = (self.buf.len() - self.end) as u64;
            let want = room.min(self.size - self.read) as usize;
            let got = match self
                .file
                .read_at(&mut self.buf[self.end..self.end + want], self.read)
            {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => other?,
            };
            if got == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the file became shorter while it was read",
                ));
            }
            self.end += got;
            self.read += got as u64;
            self.read_ahead();
        }
        Ok(&self.buf[self.start..self.end])
    }

    /// Asks the kernel to read up to [`AHEAD`] past what was read, once
    /// half of that has been read since it last asked (a hint: an error
    /// only means it reads no further ahead than it would have).
    fn read_ahead(&mut self) {
        let until = (self.read + AHEAD).min(self.size);
        if until <= self.advised || until - self.advised < AHEAD / 2 && until < self.size {
            return;
        }
        let from = self.advised.max(self.read);
        will_need(self.file, from, until - from);
        self.advised = until;
    }

    /// Drops the first `n` bytes available.
    pub fn consume(&mut self, n: usize) {
        assert!(n <= self.end - self.start, "consumed bytes not read");
        self.start += n;
    }
}

/// posix_fadvise(2) `WILLNEED` of `len` bytes of `file` from `off`: the
/// kernel starts reading them into the page cache and returns.
#[allow(unsafe_code)]
fn will_need(file: &File, off: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(off), Ok(len)) = (i64::try_from(off), i64::try_from(len)) else {
        return;
    };
    // SAFETY: posix_fadvise takes a descriptor, which `file` keeps open
    // for the call, and three integers; it touches no memory of ours.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), off, len, libc::POSIX_FADV_WILLNEED) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::TempDir;

    #[test]
    fn any_chunk_size_reads_the_file_in_order_and_grows_for_large_asks() {
        let d = TempDir::new("kvs-wal", "window");
        let p = d.path().join("f");
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &bytes).unwrap();
        let f = File::open(&p).unwrap();
        for chunk in [1, 2, 3, 7, 64, 999, 1000, 4096] {
            for ask in [1, 5, 100, 700] {
                let mut w = Window::new(&f, 10, bytes.len() as u64, chunk);
                let mut got = Vec::new();
                loop {
                    let at = w.offset() as usize;
                    let a = w.fill(ask).unwrap();
                    assert!(a.len() >= ask.min(bytes.len() - at), "{chunk}/{ask}");
                    assert_eq!(a, &bytes[at..at + a.len()]);
                    if a.is_empty() {
                        break;
                    }
                    let n = a.len().min(ask);
                    got.extend_from_slice(&a[..n]);
                    w.consume(n);
                }
                assert_eq!(got, bytes[10..], "chunk {chunk}, ask {ask}");
                assert_eq!(w.read(), bytes.len() as u64);
            }
        }
    }

    #[test]
    fn a_file_shorter_than_its_size_is_an_error() {
        let d = TempDir::new("kvs-wal", "window");
        let p = d.path().join("f");
        std::fs::write(&p, [1u8; 10]).unwrap();
        let f = File::open(&p).unwrap();
        let mut w = Window::new(&f, 0, 20, 4);
        let e = w.fill(20).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
