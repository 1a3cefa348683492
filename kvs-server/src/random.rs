//! Random numbers from the kernel, for what must not repeat: tickets, a
//! start's nonce, a stream's number.

/// Fills `b` with random bytes.
pub(crate) fn fill(b: &mut [u8]) -> std::io::Result<()> {
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A random number, never 0; from the clock if the kernel has none to
/// give (only an ancient kernel, or a seccomp filter, refuses).
pub(crate) fn nonce() -> u64 {
    let mut b = [0u8; 8];
    let v = match fill(&mut b) {
        Ok(()) => u64::from_le_bytes(b),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    };
    v.max(1)
}
