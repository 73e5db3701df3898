//! WQEs written into ring slots: safe functions over a slot's bytes, field by field in the
//! layout `uapi` pins, each length checked against the slot and the QP's limits. The slot
//! comes from the mapped ring (`ring.rs`); the user's buffers (inline data, SGE lists) are
//! turned into slices at the libibverbs boundary (`post/`).

use core::{ffi::c_int, mem::offset_of};
use rxe_rs_uapi::{send_flags, RecvWqe, SendWqe, Sge};

const SEND_HEADER: usize = core::mem::size_of::<SendWqe>();
const RECV_HEADER: usize = core::mem::size_of::<RecvWqe>();
const SGE_BYTES: usize = core::mem::size_of::<Sge>();

fn put(slot: &mut [u8], at: usize, bytes: &[u8]) -> Result<(), c_int> {
    let end = at.checked_add(bytes.len()).ok_or(libc::EINVAL)?;
    slot.get_mut(at..end)
        .ok_or(libc::EINVAL)?
        .copy_from_slice(bytes);
    Ok(())
}

fn put_u32(slot: &mut [u8], at: usize, v: u32) -> Result<(), c_int> {
    put(slot, at, &v.to_ne_bytes())
}

fn put_u64(slot: &mut [u8], at: usize, v: u64) -> Result<(), c_int> {
    put(slot, at, &v.to_ne_bytes())
}

fn get_u32(slot: &[u8], at: usize) -> Result<u32, c_int> {
    let bytes = slot.get(at..at + 4).ok_or(libc::EINVAL)?;
    Ok(u32::from_ne_bytes(
        bytes.try_into().map_err(|_| libc::EINVAL)?,
    ))
}

fn put_sge(slot: &mut [u8], at: usize, sge: &Sge) -> Result<(), c_int> {
    put_u64(slot, at + offset_of!(Sge, addr), sge.addr)?;
    put_u32(slot, at + offset_of!(Sge, length), sge.length)?;
    put_u32(slot, at + offset_of!(Sge, lkey), sge.lkey)
}

/// Writes the fixed part of a send WQE at the start of `slot`.
pub fn write_send_header(slot: &mut [u8], w: &SendWqe) -> Result<(), c_int> {
    if slot.len() < SEND_HEADER {
        return Err(libc::EINVAL);
    }
    put_u64(slot, offset_of!(SendWqe, wr_id), w.wr_id)?;
    put_u32(slot, offset_of!(SendWqe, opcode), w.opcode)?;
    put_u32(slot, offset_of!(SendWqe, flags), w.flags)?;
    put_u32(slot, offset_of!(SendWqe, num_sge), w.num_sge)?;
    put_u32(slot, offset_of!(SendWqe, inline_len), w.inline_len)?;
    put_u32(slot, offset_of!(SendWqe, imm_data), w.imm_data)?;
    put_u32(
        slot,
        offset_of!(SendWqe, invalidate_rkey),
        w.invalidate_rkey,
    )?;
    put_u64(slot, offset_of!(SendWqe, remote_addr), w.remote_addr)?;
    put_u32(slot, offset_of!(SendWqe, rkey), w.rkey)?;
    put_u32(slot, offset_of!(SendWqe, ah_num), w.ah_num)?;
    put_u64(slot, offset_of!(SendWqe, compare_add), w.compare_add)?;
    put_u64(slot, offset_of!(SendWqe, swap), w.swap)?;
    put_u32(slot, offset_of!(SendWqe, remote_qpn), w.remote_qpn)?;
    put_u32(slot, offset_of!(SendWqe, remote_qkey), w.remote_qkey)
}

/// Sets the UD destination of the send WQE in `slot`: address handle, QP number and Q_Key.
pub fn set_send_ud_fields(
    slot: &mut [u8],
    ah_num: u32,
    remote_qpn: u32,
    remote_qkey: u32,
) -> Result<(), c_int> {
    put_u32(slot, offset_of!(SendWqe, ah_num), ah_num)?;
    put_u32(slot, offset_of!(SendWqe, remote_qpn), remote_qpn)?;
    put_u32(slot, offset_of!(SendWqe, remote_qkey), remote_qkey)
}

/// The data of a send WQE: SGEs the kernel gathers from, or bytes carried inline.
pub enum SendData<'a, I: Iterator<Item = &'a [u8]>> {
    /// Gathered from these MR ranges when sent.
    Sges(&'a [Sge]),
    /// These pieces, concatenated, copied into the WQE now.
    Inline(I),
}

/// Writes the data part of a send WQE into `slot` (after its header), within `max_sge` SGEs
/// or `max_inline` bytes. Returns `(num_sge, inline_len)` for the header.
pub fn write_send_data<'a, I: Iterator<Item = &'a [u8]>>(
    slot: &mut [u8],
    data: SendData<'a, I>,
    max_sge: u32,
    max_inline: u32,
) -> Result<(u32, u32), c_int> {
    match data {
        SendData::Sges(sges) => {
            let n = u32::try_from(sges.len()).map_err(|_| libc::EINVAL)?;
            if n > max_sge {
                return Err(libc::EINVAL);
            }
            for (i, sge) in sges.iter().enumerate() {
                put_sge(slot, SEND_HEADER + i * SGE_BYTES, sge)?;
            }
            Ok((n, 0))
        }
        SendData::Inline(pieces) => {
            let mut len = 0usize;
            for piece in pieces {
                let end = len.checked_add(piece.len()).ok_or(libc::EINVAL)?;
                if end > max_inline as usize {
                    return Err(libc::EINVAL);
                }
                put(slot, SEND_HEADER + len, piece)?;
                len = end;
            }
            Ok((0, len as u32))
        }
    }
}

/// Sets the data fields of the header already in `slot` (the extended API writes the header
/// first and the data after it).
pub fn set_send_data_fields(
    slot: &mut [u8],
    num_sge: u32,
    inline_len: u32,
    inline: bool,
) -> Result<(), c_int> {
    put_u32(slot, offset_of!(SendWqe, num_sge), num_sge)?;
    put_u32(slot, offset_of!(SendWqe, inline_len), inline_len)?;
    if inline {
        let flags = get_u32(slot, offset_of!(SendWqe, flags))?;
        put_u32(slot, offset_of!(SendWqe, flags), flags | send_flags::INLINE)?;
    }
    Ok(())
}

/// Writes a receive WQE (header and up to `max_sge` SGEs) into `slot`.
pub fn write_recv(slot: &mut [u8], wr_id: u64, sges: &[Sge], max_sge: u32) -> Result<(), c_int> {
    let n = u32::try_from(sges.len()).map_err(|_| libc::EINVAL)?;
    if n > max_sge {
        return Err(libc::EINVAL);
    }
    put_u64(slot, offset_of!(RecvWqe, wr_id), wr_id)?;
    put_u32(slot, offset_of!(RecvWqe, num_sge), n)?;
    put_u32(slot, offset_of!(RecvWqe, reserved), 0)?;
    for (i, sge) in sges.iter().enumerate() {
        put_sge(slot, RECV_HEADER + i * SGE_BYTES, sge)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of a `repr(C)` value, as the kernel reads them from the ring.
    fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
        // SAFETY: `T` is a `repr(C)` struct of integers without padding (uapi's layout tests).
        unsafe { core::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
            .to_vec()
    }

    fn sample() -> SendWqe {
        SendWqe {
            wr_id: 0x1122_3344_5566_7788,
            opcode: 4,
            flags: 2,
            num_sge: 0,
            inline_len: 0,
            imm_data: 0xdead_beef,
            invalidate_rkey: 7,
            remote_addr: 0xffff_0000_1234_5678,
            rkey: 0x99,
            ah_num: 3,
            compare_add: 1,
            swap: 2,
            remote_qpn: 0x12_3456,
            remote_qkey: 0x1111_2222,
        }
    }

    #[test]
    fn the_header_is_the_uapi_layout() {
        let mut slot = [0xa5u8; 128];
        let w = sample();
        write_send_header(&mut slot, &w).unwrap();
        assert_eq!(&slot[..72], bytes_of(&w).as_slice());
        assert!(
            slot[72..].iter().all(|&b| b == 0xa5),
            "nothing past the header"
        );
    }

    #[test]
    fn sges_follow_the_header_within_max_sge() {
        let mut slot = [0u8; 72 + 2 * 16];
        let sges = [
            Sge {
                addr: 0x1000,
                length: 10,
                lkey: 3,
            },
            Sge {
                addr: 0x2000,
                length: 20,
                lkey: 4,
            },
        ];
        assert_eq!(
            write_send_data(
                &mut slot,
                SendData::<core::iter::Empty<&[u8]>>::Sges(&sges),
                2,
                0
            ),
            Ok((2, 0))
        );
        assert_eq!(&slot[72..88], bytes_of(&sges[0]).as_slice());
        assert_eq!(&slot[88..104], bytes_of(&sges[1]).as_slice());
        assert_eq!(
            write_send_data(
                &mut slot,
                SendData::<core::iter::Empty<&[u8]>>::Sges(&sges),
                1,
                0
            ),
            Err(libc::EINVAL),
            "more SGEs than the QP has"
        );
    }

    #[test]
    fn inline_pieces_are_concatenated_within_max_inline() {
        let mut slot = [0u8; 72 + 16];
        let pieces: [&[u8]; 3] = [b"abc", b"", b"defg"];
        assert_eq!(
            write_send_data(&mut slot, SendData::Inline(pieces.into_iter()), 1, 16),
            Ok((0, 7))
        );
        assert_eq!(&slot[72..79], b"abcdefg");
        assert_eq!(
            write_send_data(&mut slot, SendData::Inline(pieces.into_iter()), 1, 6),
            Err(libc::EINVAL),
            "longer than max_inline"
        );
        // A max_inline larger than the slot (a confused caller) still cannot write past it.
        let big = [0u8; 32];
        assert_eq!(
            write_send_data(&mut slot, SendData::Inline([&big[..]].into_iter()), 1, 64),
            Err(libc::EINVAL)
        );
    }

    #[test]
    fn data_fields_are_patched_into_the_header() {
        let mut slot = [0u8; 72];
        let w = sample();
        write_send_header(&mut slot, &w).unwrap();
        set_send_data_fields(&mut slot, 0, 7, true).unwrap();
        let expect = SendWqe {
            inline_len: 7,
            flags: w.flags | send_flags::INLINE,
            ..w
        };
        assert_eq!(slot.as_slice(), bytes_of(&expect).as_slice());
    }

    #[test]
    fn ud_fields_are_patched_into_the_header() {
        let mut slot = [0u8; 72];
        let w = sample();
        write_send_header(&mut slot, &w).unwrap();
        set_send_ud_fields(&mut slot, 9, 0xab_cdef, 0x8000_0000).unwrap();
        let expect = SendWqe {
            ah_num: 9,
            remote_qpn: 0xab_cdef,
            remote_qkey: 0x8000_0000,
            ..w
        };
        assert_eq!(slot.as_slice(), bytes_of(&expect).as_slice());
        assert_eq!(
            set_send_ud_fields(&mut slot[..64], 1, 2, 3),
            Err(libc::EINVAL),
            "a slot too short for the header"
        );
    }

    #[test]
    fn a_receive_wqe_is_the_uapi_layout() {
        let mut slot = [0u8; 16 + 16];
        let sge = Sge {
            addr: 0xabc,
            length: 4096,
            lkey: 0x100,
        };
        write_recv(&mut slot, 42, &[sge], 1).unwrap();
        let header = RecvWqe {
            wr_id: 42,
            num_sge: 1,
            reserved: 0,
        };
        assert_eq!(&slot[..16], bytes_of(&header).as_slice());
        assert_eq!(&slot[16..], bytes_of(&sge).as_slice());
        assert_eq!(write_recv(&mut slot, 42, &[sge, sge], 1), Err(libc::EINVAL));
        assert_eq!(
            write_recv(&mut slot, 42, &[sge, sge], 2),
            Err(libc::EINVAL),
            "the slot has room for one"
        );
    }
}
