//! ABI check of the hardware backend's hand-written bindings
//! (`mlx5::hw::ffi`, seen through `mlx5::hw::abi`): every struct's size and every field's offset and size,
//! and every constant, against what a C compiler makes of rdma-core's installed
//! `verbs.h` and `mlx5dv.h` (`oracle/abi.c`).
//!
//! `cargo test -p mlx5 --features rdma-core-oracle --test abi` (needs libibverbs-dev).
#![cfg(feature = "rdma-core-oracle")]

use std::collections::HashMap;
use std::ffi::{c_char, CStr};

#[repr(C)]
struct AbiRow {
    name: *const c_char,
    offset: i64,
    size: i64,
}

#[repr(C)]
struct AbiConst {
    name: *const c_char,
    value: i64,
}

extern "C" {
    fn abi_rows(out: *mut *const AbiRow) -> usize;
    fn abi_consts(out: *mut *const AbiConst) -> usize;
}

fn c_rows() -> HashMap<String, (i64, i64)> {
    let mut p = std::ptr::null();
    // SAFETY: the C side hands out a static table and its length.
    let n = unsafe { abi_rows(&mut p) };
    // SAFETY: as above.
    let rows = unsafe { std::slice::from_raw_parts(p, n) };
    rows.iter()
        .map(|r| {
            // SAFETY: static C strings.
            let name = unsafe { CStr::from_ptr(r.name) }
                .to_str()
                .unwrap()
                .to_owned();
            (name, (r.offset, r.size))
        })
        .collect()
}

#[test]
fn every_struct_and_field_matches_the_headers() {
    let c = c_rows();
    let rust = mlx5::hw::abi::all_layouts();
    let mut checked = 0;
    for (name, off, size) in &rust {
        let Some(&(c_off, c_size)) = c.get(*name) else {
            panic!("{name}: not in the C table (oracle/abi.c)");
        };
        if c_size == -1 {
            // A prefix declaration: only its fields are compared.
            assert!(name.ends_with('.'), "{name}");
            continue;
        }
        assert_eq!(
            (*off as i64, *size as i64),
            (c_off, c_size),
            "{name}: (offset, size) Rust vs C"
        );
        checked += 1;
    }
    // And nothing the C side lists is missing on the Rust side.
    let names: std::collections::HashSet<_> = rust.iter().map(|r| r.0).collect();
    for k in c.keys() {
        assert!(
            names.contains(k.as_str()),
            "{k}: in the C table but not declared in ffi.rs"
        );
    }
    assert!(checked > 200, "only {checked} rows compared");
}

#[test]
fn every_constant_matches_the_headers() {
    let mut p = std::ptr::null();
    // SAFETY: static table.
    let n = unsafe { abi_consts(&mut p) };
    // SAFETY: as above.
    let c: HashMap<String, i64> = unsafe { std::slice::from_raw_parts(p, n) }
        .iter()
        .map(|r| {
            (
                // SAFETY: static NUL-terminated C strings.
                unsafe { CStr::from_ptr(r.name) }
                    .to_str()
                    .unwrap()
                    .to_owned(),
                r.value,
            )
        })
        .collect();
    let rust = mlx5::hw::abi::all_constants();
    assert_eq!(rust.len(), c.len());
    for (name, v) in rust {
        assert_eq!(Some(&v), c.get(name), "{name}");
    }
}
