//! The bytes the driver writes and checks: random printable values, or with
//! `dataintegrity=true` values that are a function of key and field, so any
//! read can be checked against what must have been written.

use crate::rng::Rng;

/// Bytes of field `f` of `key`'s record: a function of key and field when
/// verifying (so any later read can be checked), random printable otherwise.
pub(crate) fn fill_field(verify: bool, rng: &mut Rng, key: &[u8], f: usize, out: &mut [u8]) {
    if verify {
        deterministic_chunk(key, f, 0, out);
    } else {
        crate::workload::fill_value(rng, out);
    }
}

/// Every field of `key`'s record, `nf` fields of `fl` bytes, into `out`.
pub(crate) fn fill_record(
    verify: bool,
    rng: &mut Rng,
    key: &[u8],
    (nf, fl): (usize, usize),
    out: &mut [u8],
) {
    for f in 0..nf {
        fill_field(verify, rng, key, f, &mut out[f * fl..(f + 1) * fl]);
    }
}

/// Whether a record read back (`nf` fields of `fl` bytes, one after the
/// other) is exactly what was written; compared in chunks regenerated on the
/// stack: no allocation.
pub(crate) fn record_ok(key: &[u8], (nf, fl): (usize, usize), v: &[u8]) -> bool {
    v.len() == nf * fl && (0..nf).all(|f| bytes_ok(key, f, &v[f * fl..(f + 1) * fl]))
}

/// Whether `v` is the first `v.len()` bytes of field `f` of `key`.
fn bytes_ok(key: &[u8], f: usize, v: &[u8]) -> bool {
    let mut want = [0u8; 256];
    v.chunks(want.len()).enumerate().all(|(c, chunk)| {
        let w = &mut want[..chunk.len()];
        deterministic_chunk(key, f, c * 256, w);
        chunk == w
    })
}

/// Bytes `from..from+out.len()` of the value of field `f` of `key`: printable
/// bytes from a hash of key and field.
fn deterministic_chunk(key: &[u8], f: usize, from: usize, out: &mut [u8]) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key.iter().chain(&(f as u64).to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = h.wrapping_add(0x9e37_79b9_7f4a_7c15u64.wrapping_mul(from as u64));
    for b in out.iter_mut() {
        h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        *b = b' ' + ((z ^ (z >> 31)) % 95) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_record_checks_and_one_changed_byte_does_not() {
        let mut rng = Rng::for_stream(1, 0);
        let (nf, fl) = (3, 300);
        let mut rec = vec![0u8; nf * fl];
        fill_record(true, &mut rng, b"user7", (nf, fl), &mut rec);
        assert!(record_ok(b"user7", (nf, fl), &rec));
        assert!(!record_ok(b"user8", (nf, fl), &rec));
        assert!(bytes_ok(b"user7", 1, &rec[fl..2 * fl]));
        assert!(!bytes_ok(b"user7", 2, &rec[fl..2 * fl]));
        rec[nf * fl - 1] ^= 1;
        assert!(!record_ok(b"user7", (nf, fl), &rec));
        assert!(!record_ok(b"user7", (nf, fl), &rec[..fl]));
        assert!(rec.iter().all(|b| (b' '..=b'~').contains(b)));
    }
}
