// SPDX-License-Identifier: GPL-2.0
//! Verbs objects the RDMA core allocates for the driver (`size_ib_pd`, `size_ib_cq`, ...): the
//! core's struct first, the driver's value right behind it, initialised in place in the create
//! callback and dropped in place in the destroy callback. Also: the udata of a verb.

use super::bindings;
use core::{marker::PhantomData, ops::Deref};
use kernel::{
    prelude::*,
    types::{AsBytes, FromBytes, Opaque},
    uaccess::UserSlice,
};

/// A core object `C` (`ib_pd`, `ib_cq`, ...) with the driver's `T` behind it.
///
/// # Invariants
///
/// Lives in memory the core allocated with `size_ib_*` = `size_of::<Self>()`; `data` is
/// initialised between the driver's create and destroy callbacks.
#[repr(C)]
pub(crate) struct CoreObject<C, T> {
    pub(super) ib: Opaque<C>,
    pub(super) data: T,
}

impl<C, T> CoreObject<C, T> {
    /// Initialises `T` behind the core object at `ib`.
    ///
    /// # Safety
    ///
    /// `ib` is a fresh core allocation of `size_of::<Self>()` bytes whose `data` is not
    /// initialised, as handed to a create callback.
    pub(super) unsafe fn init(ib: *mut C, init: impl PinInit<T, Error>) -> Result {
        // SAFETY: the slot is in the pinned (never moved) core allocation, uninitialised.
        unsafe { init.__pinned_init(core::ptr::addr_of_mut!((*ib.cast::<Self>()).data)) }
    }

    /// Borrows the object.
    ///
    /// # Safety
    ///
    /// `ib` is an initialised object of this type, valid for `'a`.
    pub(super) unsafe fn from_raw<'a>(ib: *mut C) -> &'a Self {
        // SAFETY: `ib` is the first field of the `#[repr(C)]` struct.
        unsafe { &*ib.cast::<Self>() }
    }

    /// Drops `T` in place (the core frees the memory after the destroy callback).
    ///
    /// # Safety
    ///
    /// `ib` is an initialised object of this type that nobody uses afterwards.
    pub(super) unsafe fn drop_in_place(ib: *mut C) {
        // SAFETY: as promised by the caller.
        unsafe { core::ptr::drop_in_place(core::ptr::addr_of_mut!((*ib.cast::<Self>()).data)) }
    }

    /// The core object.
    pub(crate) fn raw(&self) -> *mut C {
        self.ib.get()
    }
}

impl<C, T> Deref for CoreObject<C, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.data
    }
}

/// The driver-private input and output of a verb from user space (`struct ib_udata`): what
/// follows the core command and response.
pub(crate) struct Udata<'a> {
    raw: *mut bindings::ib_udata,
    _life: PhantomData<&'a mut bindings::ib_udata>,
}

impl Udata<'_> {
    /// Wraps a udata pointer of a verb callback (NULL for kernel callers).
    ///
    /// # Safety
    ///
    /// `raw` is NULL or the valid udata of the running verb.
    pub(super) unsafe fn from_raw(raw: *mut bindings::ib_udata) -> Self {
        Self {
            raw,
            _life: PhantomData,
        }
    }

    #[expect(dead_code, reason = "QP creation uses it")]
    /// The verb comes from user space.
    pub(crate) fn is_user(&self) -> bool {
        !self.raw.is_null()
    }

    fn lens(&self) -> (usize, usize) {
        if self.raw.is_null() {
            return (0, 0);
        }
        // SAFETY: valid udata (type invariant).
        unsafe { ((*self.raw).inlen, (*self.raw).outlen) }
    }

    /// Reads the driver command `T` (zero-extended if user space sent less).
    pub(crate) fn read<T: FromBytes + Default>(&self) -> Result<T> {
        let (inlen, _) = self.lens();
        let mut value = T::default();
        let n = inlen.min(core::mem::size_of::<T>());
        if n > 0 {
            // SAFETY: valid udata; `inbuf` is a user pointer to `inlen` bytes.
            let ptr = unsafe { (*self.raw).inbuf } as usize;
            // SAFETY: `T: FromBytes`, so any bytes we write into it form a valid value.
            let bytes =
                unsafe { core::slice::from_raw_parts_mut((&mut value as *mut T).cast::<u8>(), n) };
            UserSlice::new(ptr, n).reader().read_slice(bytes)?;
        }
        Ok(value)
    }

    /// Writes the driver response `value`, truncated to what user space has room for.
    pub(crate) fn write<T: AsBytes>(&self, value: &T) -> Result {
        let (_, outlen) = self.lens();
        let n = outlen.min(core::mem::size_of::<T>());
        if n == 0 {
            return Ok(());
        }
        // SAFETY: `T: AsBytes` has no padding: all its bytes are initialised.
        let bytes = unsafe { core::slice::from_raw_parts((value as *const T).cast::<u8>(), n) };
        // SAFETY: valid udata; `outbuf` is a user pointer to `outlen` bytes.
        let ptr = unsafe { (*self.raw).outbuf } as usize;
        UserSlice::new(ptr, n).writer().write_slice(bytes)
    }

    /// Copies `value` to `addr` in the calling process: the answer of a verb whose write
    /// command has no response, to an address its driver command names. EINVAL for a kernel
    /// caller; EFAULT if the process cannot take it there.
    pub(crate) fn write_to_user<T: AsBytes>(&self, addr: u64, value: &T) -> Result {
        if self.raw.is_null() {
            return Err(EINVAL);
        }
        let addr = usize::try_from(addr).map_err(|_| EFAULT)?;
        // SAFETY: `T: AsBytes` has no padding: all its bytes are initialised.
        let bytes = unsafe {
            core::slice::from_raw_parts((value as *const T).cast::<u8>(), core::mem::size_of::<T>())
        };
        UserSlice::new(addr, bytes.len())
            .writer()
            .write_slice(bytes)
    }

    /// The user context of the calling process.
    pub(crate) fn ucontext(&self) -> Option<UContext<'_>> {
        // SAFETY: valid udata of a user verb, embedded in its attribute bundle.
        let ctx = unsafe { bindings::rxe_rs_helper_udata_to_ucontext(self.raw) };
        (!ctx.is_null()).then_some(UContext {
            raw: ctx,
            _life: PhantomData,
        })
    }
}

/// A process's device context (`struct ib_ucontext`), borrowed for a verb.
pub(crate) struct UContext<'a> {
    pub(super) raw: *mut bindings::ib_ucontext,
    _life: PhantomData<&'a bindings::ib_ucontext>,
}
