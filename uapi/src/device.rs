//! Device identity: how libibverbs matches our devices to our provider, and no other.

/// `ib_device_ops.driver_id` of rxe_rs devices.
///
/// Deliberately far from the kernel's `enum rdma_driver_id` (which ends at 20 in 6.12): sharing
/// `RDMA_DRIVER_RXE` (14) would let `rdma_rxe`'s module exit unregister our devices and let
/// Debian's librxe claim them. libibverbs matches providers by this id first, and the kernel
/// rejects ioctls whose header carries another id.
pub const RXE_RS_DRIVER_ID: u32 = 0x100;

/// `ib_device_ops.uverbs_abi_ver`: bumped whenever this crate changes incompatibly.
///
/// Outside librxe's accepted range (1..=2): if our provider is missing and librxe claims an
/// `rxe*`-named device by name, the ABI check stops it instead of speaking the wrong ABI.
pub const RXE_RS_UVERBS_ABI_VERSION: u32 = 100;

/// The provider's library name, as in `/etc/libibverbs.d/rxe_rs.driver` (`driver rxe_rs`).
pub const RXE_RS_PROVIDER_NAME: &str = "rxe_rs";

/// The `rdma link add ... type rxe_rs` link type.
pub const RXE_RS_LINK_TYPE: &str = "rxe_rs";
