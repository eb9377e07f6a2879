//! The memory provider: references into memory that another party may mutate.
//!
//! The lock-free protocols only ever touch shared state through [`SharedRef`] and
//! [`SharedSlice`]. In production they point into the mapped segment (the owner is the
//! `Arc<Mapping>`); in loom tests they point into ordinary heap allocations (loom cannot see
//! mmap). Either way the referent holds only atomics, so handing out `&T` is sound: every
//! mutation goes through interior mutability.

use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

/// Types that may be placed in the shared segment and read through a `&T`.
///
/// The segment's typed accessors (`Segment::shared`, `Segment::shared_slice`) only cast bytes
/// to `T: ShmSafe`; everything else in the segment is plain bytes behind raw pointers.
///
/// # Safety
/// An implementor must be `#[repr(C)]` or `#[repr(transparent)]` (a layout every process
/// agrees on), hold no pointers or references (other processes map the segment at other
/// addresses), be valid when all its bytes are zero (a fresh segment), be valid for any bit
/// pattern another process may store, and be mutated only through atomics, or not at all after
/// the creator publishes the segment. Its size must be pinned by a `const` assertion wherever
/// a layout computation or a SAFETY comment relies on it.
///
/// Each implementation sits beside its type, with the size assertions it needs and a
/// `// SAFETY:` comment (`grep -rn 'unsafe impl ShmSafe'` lists them all); this module, at the
/// bottom of the crate, imports none of them. The implementations exist only in normal builds:
/// under loom the "atomics" are model objects on the heap and nothing is cast from segment bytes.
pub unsafe trait ShmSafe: Sync {}

/// Whatever keeps the memory behind a [`SharedRef`] alive (a mapping or a heap allocation).
pub type Owner = Arc<dyn Any + Send + Sync>;

/// A `&T` into shared memory that keeps its memory alive.
///
/// `T` must consist only of atomics (or plain data nobody writes after initialisation).
pub struct SharedRef<T> {
    ptr: NonNull<T>,
    owner: Owner,
}

// SAFETY: a SharedRef is just a shared reference plus an Arc; the referent is Sync (atomics),
// so sending or sharing the reference across threads is as safe as sending `&T`.
unsafe impl<T: Sync> Send for SharedRef<T> {}
// SAFETY: see the Send impl above; `&SharedRef<T>` only yields `&T`.
unsafe impl<T: Sync> Sync for SharedRef<T> {}

impl<T> SharedRef<T> {
    /// Wraps a raw pointer into memory kept alive by `owner`.
    ///
    /// # Safety
    /// `ptr` must be aligned for `T`, point to an initialised `T` (all-zero bytes count for
    /// atomics), stay valid while `owner` lives, and only ever be mutated through atomics.
    pub unsafe fn from_raw(ptr: NonNull<T>, owner: Owner) -> Self {
        Self { ptr, owner }
    }

    /// The owner that keeps this memory alive.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The raw address (for diagnostics and for building views).
    pub fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }
}

impl<T: Send + Sync + 'static> SharedRef<T> {
    /// Puts `value` on the heap (used by loom tests and in-process unit tests).
    pub fn new_heap(value: T) -> Self {
        let arc = Arc::new(value);
        let ptr = NonNull::from(&*arc);
        Self { ptr, owner: arc }
    }
}

impl<T> Clone for SharedRef<T> {
    fn clone(&self) -> Self {
        Self {
            ptr: self.ptr,
            owner: Arc::clone(&self.owner),
        }
    }
}

impl<T> std::ops::Deref for SharedRef<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: from_raw's contract (or new_heap's Arc) keeps the pointee valid and
        // initialised while `self.owner` lives, and `self` holds the owner.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> fmt::Debug for SharedRef<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedRef").field("ptr", &self.ptr).finish()
    }
}

/// A run of `len` consecutive `T` in shared memory (for example slot headers).
pub struct SharedSlice<T> {
    ptr: NonNull<T>,
    len: usize,
    owner: Owner,
}

// SAFETY: as for SharedRef, only `&T` to Sync data is ever handed out.
unsafe impl<T: Sync> Send for SharedSlice<T> {}
// SAFETY: as for SharedRef.
unsafe impl<T: Sync> Sync for SharedSlice<T> {}

impl<T> SharedSlice<T> {
    /// Wraps `len` elements starting at `ptr`.
    ///
    /// # Safety
    /// As for [`SharedRef::from_raw`], for each of the `len` elements.
    pub unsafe fn from_raw(ptr: NonNull<T>, len: usize, owner: Owner) -> Self {
        Self { ptr, len, owner }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Element `i`; panics when out of range (an index bug, never a data condition).
    pub fn get(&self, i: usize) -> &T {
        assert!(
            i < self.len,
            "shared slice index {i} out of range (len {})",
            self.len
        );
        // SAFETY: i < len and from_raw's contract makes every element valid while the owner
        // (held by self) lives.
        unsafe { &*self.ptr.as_ptr().add(i) }
    }
}

impl<T: Send + Sync + 'static> SharedSlice<T> {
    /// Puts the elements on the heap (loom and unit tests).
    pub fn new_heap(values: Vec<T>) -> Self {
        let len = values.len();
        let arc = Arc::new(values);
        let ptr = NonNull::new(arc.as_ptr().cast_mut()).unwrap_or(NonNull::dangling());
        Self {
            ptr,
            len,
            owner: arc,
        }
    }
}

impl<T> Clone for SharedSlice<T> {
    fn clone(&self) -> Self {
        Self {
            ptr: self.ptr,
            len: self.len,
            owner: Arc::clone(&self.owner),
        }
    }
}

impl<T> fmt::Debug for SharedSlice<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedSlice")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}
