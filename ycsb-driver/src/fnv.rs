//! The 64-bit FNV hash and the key names of Java YCSB.
//!
//! YCSB turns a record number into a key with [`build_key_name`]; with the
//! default `insertorder=hashed` the number is first scrambled with
//! [`fnvhash64`]. Both reproduce `site.ycsb.Utils.fnvhash64` and
//! `CoreWorkload.buildKeyName` bit for bit, so the keys this driver reads and
//! writes are the ones the Java client would use.

/// FNV-1 64-bit offset basis (`0xCBF29CE484222325`).
pub const FNV_OFFSET_BASIS_64: u64 = 0xCBF2_9CE4_8422_2325;

/// FNV 64-bit prime (`1099511628211`).
pub const FNV_PRIME_64: u64 = 1_099_511_628_211;

/// Prefix of every YCSB key.
pub const KEY_PREFIX: &str = "user";

/// Java YCSB's `Utils.fnvhash64`: 64-bit FNV-1a over the 8 bytes of `v`,
/// lowest byte first, made non-negative with Java's `Math.abs` on the signed
/// 64-bit result.
///
/// Java's `Math.abs(Long.MIN_VALUE)` is `Long.MIN_VALUE` (the negation
/// overflows), so a hash whose bit pattern is `0x8000_0000_0000_0000` stays
/// that way: this function then returns `i64::MIN as u64`, i.e. `1 << 63`,
/// exactly the bits Java holds. Every other result is below `1 << 63`.
/// Callers that need Java's signed view (key names, modulo) reinterpret the
/// result with `as i64`.
#[inline]
pub fn fnvhash64(v: u64) -> u64 {
    let mut h = FNV_OFFSET_BASIS_64;
    for byte in v.to_le_bytes() {
        h ^= u64::from(byte);
        h = h.wrapping_mul(FNV_PRIME_64);
    }
    (h as i64).wrapping_abs() as u64
}

/// Java YCSB's `CoreWorkload.buildKeyName`, writing into `out` (which is
/// cleared first; its capacity is reused, so once it has grown to the key
/// length no allocation happens).
///
/// If `ordered` is false (`insertorder=hashed`, the default) the key number
/// is replaced by [`fnvhash64`]`(keynum)`. The number is printed in decimal
/// after the prefix `"user"`, left-padded with `'0'` to `zeropadding` digits
/// (padding never truncates). Like Java, a hashed value is printed as a signed
/// 64-bit number, which only matters for the one bit pattern `1 << 63` (see
/// [`fnvhash64`]); an ordered key number is printed unsigned.
///
/// ```
/// let mut key = String::new();
/// ycsb_driver::fnv::build_key_name(42, 5, true, &mut key);
/// assert_eq!(key, "user00042");
/// ```
pub fn build_key_name(keynum: u64, zeropadding: usize, ordered: bool, out: &mut String) {
    let (negative, magnitude) = if ordered {
        (false, keynum)
    } else {
        let signed = fnvhash64(keynum) as i64;
        (signed < 0, signed.unsigned_abs())
    };
    let mut digits = [0u8; 20];
    let pos = decimal(magnitude, &mut digits);
    // Java counts the sign as a digit when computing the fill.
    let len = digits.len() - pos + usize::from(negative);
    out.clear();
    out.push_str(KEY_PREFIX);
    let mut fill = zeropadding.saturating_sub(len);
    while fill > 0 {
        let n = fill.min(ZEROS.len());
        out.push_str(&ZEROS[..n]);
        fill -= n;
    }
    if negative {
        out.push('-');
    }
    // SAFETY: `decimal` wrote only ASCII digits from `pos` on, so the
    // string stays UTF-8 (checking it costs more than the key's other work).
    unsafe { out.as_mut_vec() }.extend_from_slice(&digits[pos..]);
}

/// Zeros to pad a key with, pushed as one slice.
const ZEROS: &str = "00000000000000000000000000000000";

/// Two decimal digits of each number below 100.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Writes `v` in decimal at the end of `out`, two digits per division;
/// returns where the digits begin.
#[inline]
fn decimal(mut v: u64, out: &mut [u8; 20]) -> usize {
    let mut pos = out.len();
    while v >= 100 {
        let pair = (v % 100) as usize * 2;
        v /= 100;
        pos -= 2;
        out[pos..pos + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if v >= 10 {
        let pair = v as usize * 2;
        pos -= 2;
        out[pos..pos + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        pos -= 1;
        out[pos] = b'0' + v as u8;
    }
    pos
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second, deliberately different implementation: shifts instead of
    /// `to_le_bytes`, i128 arithmetic for Java's `Math.abs`.
    fn fnv_reference(v: u64) -> u64 {
        let mut h: u128 = 0xcbf29ce484222325;
        let mut val = v;
        for _ in 0..8 {
            let octet = (val & 0xff) as u128;
            val >>= 8;
            h ^= octet;
            h = (h * 1099511628211) % (1u128 << 64);
        }
        let signed: i128 = if h >= 1 << 63 {
            h as i128 - (1i128 << 64)
        } else {
            h as i128
        };
        if signed == -(1i128 << 63) {
            return 1 << 63; // Math.abs(Long.MIN_VALUE) == Long.MIN_VALUE
        }
        signed.unsigned_abs() as u64
    }

    fn key_reference(keynum: u64, zeropadding: usize, ordered: bool) -> String {
        let value = if ordered {
            keynum.to_string()
        } else {
            (fnv_reference(keynum) as i64).to_string()
        };
        let fill = zeropadding.saturating_sub(value.len());
        format!("user{}{}", "0".repeat(fill), value)
    }

    #[test]
    fn fnv_literal_values() {
        // Computed by hand-checked FNV-1a arithmetic (Python big integers).
        assert_eq!(fnvhash64(0), 6284781860667377211);
        assert_eq!(fnvhash64(1), 8517097267634966620);
        assert_eq!(fnvhash64(42), 55488592825689361);
        assert_eq!(fnvhash64(999), 2071219101098386137);
    }

    #[test]
    fn fnv_matches_second_implementation() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for v in (0..5000u64).chain([u64::MAX, 1 << 63, (1 << 63) - 1]) {
            assert_eq!(fnvhash64(v), fnv_reference(v), "v={v}");
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            assert_eq!(fnvhash64(x), fnv_reference(x), "x={x}");
        }
    }

    #[test]
    fn fnv_results_are_non_negative_as_java_longs() {
        for v in 0..10_000u64 {
            assert!((fnvhash64(v) as i64) >= 0);
        }
    }

    #[test]
    fn key_literals() {
        let mut k = String::new();
        // The famous first YCSB key (record 0, hashed, default padding 1).
        build_key_name(0, 1, false, &mut k);
        assert_eq!(k, "user6284781860667377211");
        build_key_name(42, 5, true, &mut k);
        assert_eq!(k, "user00042");
        build_key_name(42, 1, false, &mut k);
        assert_eq!(k, "user55488592825689361");
        // 17 digits padded to 20.
        build_key_name(42, 20, false, &mut k);
        assert_eq!(k, "user00055488592825689361");
        build_key_name(5, 8, true, &mut k);
        assert_eq!(k, "user00000005");
        build_key_name(12345, 3, true, &mut k);
        assert_eq!(k, "user12345");
        build_key_name(0, 0, true, &mut k);
        assert_eq!(k, "user0");
    }

    #[test]
    fn keys_match_second_implementation() {
        let mut k = String::from("garbage that must be cleared");
        for keynum in (0..3000u64).chain([u64::MAX, 1 << 40]) {
            for pad in [0usize, 1, 5, 19, 25] {
                for ordered in [false, true] {
                    build_key_name(keynum, pad, ordered, &mut k);
                    assert_eq!(k, key_reference(keynum, pad, ordered));
                }
            }
        }
    }

    #[test]
    fn key_buffer_is_reused() {
        let mut k = String::with_capacity(64);
        let ptr = k.as_ptr();
        for keynum in 0..100 {
            build_key_name(keynum, 1, false, &mut k);
        }
        assert_eq!(k.as_ptr(), ptr);
    }
}
