//! Owned, zeroed, page-aligned memory: hand-built queue memory for tests and
//! benchmarks, and an ordinary page that stands in for a BlueFlame register.
//! A test fixture, with the `test-hooks` feature only: nothing in the crate
//! uses it.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// Page size used for alignment.
pub const PAGE: usize = 4096;

/// A zeroed, page-aligned heap buffer.
#[derive(Debug)]
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Box<[u8]>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give out shared slices or raw pointers.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zeroed bytes (at least one) aligned to [`PAGE`].
    ///
    /// # Panics
    /// When the allocator fails, like `Vec`.
    pub fn new(len: usize) -> Self {
        let layout = Layout::from_size_align(len.max(1), PAGE).expect("length overflows a Layout");
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Self { ptr, layout }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Always false: the buffer holds at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Base address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Base address, non-null.
    pub fn as_non_null(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the allocation is `len` initialised (zeroed) bytes, alive while `self` is.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len()) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this very layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}
