// SPDX-License-Identifier: GPL-2.0
//! Owned socket buffers.

use super::bindings;
use core::ptr::NonNull;

/// An `sk_buff` we own: dropped with `kfree_skb` (counted as a drop by the networking core).
pub(crate) struct SkBuff(NonNull<bindings::sk_buff>);

impl SkBuff {
    /// Takes ownership of `skb`.
    ///
    /// # Safety
    ///
    /// `skb` must be a valid `sk_buff` whose ownership passes to the returned value.
    pub(crate) unsafe fn from_raw(skb: NonNull<bindings::sk_buff>) -> Self {
        Self(skb)
    }

    /// Bytes in the buffer (linear part and fragments).
    pub(crate) fn len(&self) -> u32 {
        // SAFETY: `self.0` is a valid skb we own (type invariant).
        unsafe { (*self.0.as_ptr()).len }
    }
}

impl Drop for SkBuff {
    fn drop(&mut self) {
        // SAFETY: we own the skb; nobody uses it after this.
        unsafe { bindings::rxe_rs_helper_kfree_skb(self.0.as_ptr()) }
    }
}

// SAFETY: an owned skb may be freed on any CPU.
unsafe impl Send for SkBuff {}
