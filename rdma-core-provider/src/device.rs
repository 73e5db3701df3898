//! The per-device object libibverbs keeps for each matched rxe_rs device.

use crate::ffi::private::{verbs_device, verbs_sysfs_dev};
use std::mem::MaybeUninit;

/// Our device: libibverbs' `verbs_device` first (it casts between the two).
#[repr(C)]
pub struct Device {
    pub verbs: verbs_device,
    /// The kernel's uverbs ABI version for this device.
    pub abi_version: u32,
}

/// `verbs_device_ops.alloc_device`: a zeroed device that libibverbs fills in.
///
/// # Safety
///
/// Called by libibverbs with a valid `verbs_sysfs_dev`.
pub unsafe extern "C" fn alloc_device(sysfs: *mut verbs_sysfs_dev) -> *mut verbs_device {
    // SAFETY: all-zero is how libibverbs expects the device (it is calloc'ed in C providers),
    // and every field of `Device` is plain data or a nullable pointer.
    let mut dev: Box<Device> = unsafe { Box::new(MaybeUninit::zeroed().assume_init()) };
    // SAFETY: libibverbs passes a valid sysfs device.
    dev.abi_version = unsafe { (*sysfs).abi_ver };
    Box::into_raw(dev).cast()
}

/// `verbs_device_ops.uninit_device`: frees what [`alloc_device`] returned.
///
/// # Safety
///
/// `dev` must come from [`alloc_device`] and not be used afterwards.
pub unsafe extern "C" fn uninit_device(dev: *mut verbs_device) {
    // SAFETY: `dev` is the start of a `Box<Device>` made by `alloc_device`.
    drop(unsafe { Box::from_raw(dev.cast::<Device>()) });
}
