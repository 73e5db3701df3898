//! How the requester cuts a message into packets (IBA 9.7.1.1, 9.4): one packet per path-MTU of
//! payload, FIRST/MIDDLE/LAST or ONLY opcodes, immediate data and invalidation on the last one,
//! payload padded to 4 bytes. An RDMA READ request is a single packet that consumes one PSN
//! per response packet.
// Values from the wire: no arithmetic that can overflow, wrap or divide by zero unchecked.
#![deny(clippy::arithmetic_side_effects)]

use super::{mtu::IbMtu, opcode::Opcode, psn::Psn};

/// The kind of an RC message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageKind {
    /// SEND, optionally with immediate data or an R_Key to invalidate.
    Send {
        /// Carries immediate data.
        imm: bool,
        /// Carries an R_Key to invalidate.
        inv: bool,
    },
    /// RDMA WRITE, optionally with immediate data.
    Write {
        /// Carries immediate data.
        imm: bool,
    },
    /// RDMA READ request.
    Read,
}

/// Packets (and PSNs) a message of `len` bytes needs at path MTU `mtu`: at least one.
pub const fn packet_count(len: u32, mtu: IbMtu) -> u32 {
    let mtu = mtu.bytes();
    if len == 0 {
        1
    } else {
        len.div_ceil(mtu)
    }
}

/// Pad bytes after a payload of `len` bytes.
pub const fn pad_of(len: u32) -> u8 {
    (len.wrapping_neg() & 3) as u8
}

/// One packet of a request message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Its opcode.
    pub opcode: Opcode,
    /// Offset of its payload in the message.
    pub offset: u32,
    /// Its payload length (0 for a READ request).
    pub len: u32,
    /// Its PSN.
    pub psn: Psn,
    /// Ends the message.
    pub last: bool,
}

/// Packet `index` of a message of `len` bytes starting at PSN `first_psn`.
///
/// For a READ the single request packet (`index` 0) is returned; its response packets are
/// numbered the same way by [`read_response_opcode`].
pub const fn segment(
    kind: MessageKind,
    len: u32,
    mtu: IbMtu,
    first_psn: Psn,
    index: u32,
) -> Segment {
    let count = packet_count(len, mtu);
    let m = mtu.bytes();
    if let MessageKind::Read = kind {
        return Segment {
            opcode: Opcode::RC_READ_REQUEST,
            offset: 0,
            len: 0,
            psn: first_psn,
            last: true,
        };
    }
    let first = index == 0;
    // `index < count` for the callers; saturating all the same (a bad index yields an empty
    // LAST packet, never a wrapped length).
    let last = index.saturating_add(1) >= count;
    let offset = index.saturating_mul(m);
    let plen = if last { len.saturating_sub(offset) } else { m };
    let opcode = match kind {
        MessageKind::Send { imm, inv } => match (first, last) {
            (true, true) if inv => Opcode::RC_SEND_ONLY_INV,
            (true, true) if imm => Opcode::RC_SEND_ONLY_IMM,
            (true, true) => Opcode::RC_SEND_ONLY,
            (true, false) => Opcode::RC_SEND_FIRST,
            (false, false) => Opcode::RC_SEND_MIDDLE,
            (false, true) if inv => Opcode::RC_SEND_LAST_INV,
            (false, true) if imm => Opcode::RC_SEND_LAST_IMM,
            (false, true) => Opcode::RC_SEND_LAST,
        },
        MessageKind::Write { imm } => match (first, last) {
            (true, true) if imm => Opcode::RC_WRITE_ONLY_IMM,
            (true, true) => Opcode::RC_WRITE_ONLY,
            (true, false) => Opcode::RC_WRITE_FIRST,
            (false, false) => Opcode::RC_WRITE_MIDDLE,
            (false, true) if imm => Opcode::RC_WRITE_LAST_IMM,
            (false, true) => Opcode::RC_WRITE_LAST,
        },
        MessageKind::Read => Opcode::RC_READ_REQUEST,
    };
    Segment {
        opcode,
        offset,
        len: plen,
        psn: first_psn.add(index),
        last,
    }
}

/// The opcode of READ response packet `index` out of `count`.
pub const fn read_response_opcode(index: u32, count: u32) -> Opcode {
    match (index == 0, index.saturating_add(1) >= count) {
        (true, true) => Opcode::RC_READ_RESPONSE_ONLY,
        (true, false) => Opcode::RC_READ_RESPONSE_FIRST,
        (false, false) => Opcode::RC_READ_RESPONSE_MIDDLE,
        (false, true) => Opcode::RC_READ_RESPONSE_LAST,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_messages_are_one_only_packet() {
        let s = segment(
            MessageKind::Send {
                imm: false,
                inv: false,
            },
            0,
            IbMtu::Mtu1024,
            Psn::new(5),
            0,
        );
        assert_eq!(
            s,
            Segment {
                opcode: Opcode::RC_SEND_ONLY,
                offset: 0,
                len: 0,
                psn: Psn::new(5),
                last: true
            }
        );
        let s = segment(
            MessageKind::Write { imm: true },
            1024,
            IbMtu::Mtu1024,
            Psn::new(0),
            0,
        );
        assert_eq!(
            (s.opcode, s.len, s.last),
            (Opcode::RC_WRITE_ONLY_IMM, 1024, true)
        );
    }

    #[test]
    fn a_message_is_cut_at_the_mtu() {
        let kind = MessageKind::Send {
            imm: true,
            inv: false,
        };
        let len = 2 * 1024 + 3;
        assert_eq!(packet_count(len, IbMtu::Mtu1024), 3);
        let ops: [_; 3] = core::array::from_fn(|i| {
            segment(kind, len, IbMtu::Mtu1024, Psn::new(0xff_fffe), i as u32)
        });
        assert_eq!(
            ops.map(|s| s.opcode),
            [
                Opcode::RC_SEND_FIRST,
                Opcode::RC_SEND_MIDDLE,
                Opcode::RC_SEND_LAST_IMM
            ]
        );
        assert_eq!(ops.map(|s| s.len), [1024, 1024, 3]);
        assert_eq!(ops.map(|s| s.offset), [0, 1024, 2048]);
        assert_eq!(
            ops.map(|s| s.psn.get()),
            [0xff_fffe, 0xff_ffff, 0],
            "PSN wraps"
        );
        assert_eq!(pad_of(3), 1);
        assert_eq!(pad_of(1024), 0);
        assert_eq!(pad_of(1), 3);
    }

    #[test]
    fn writes_and_reads() {
        let w: [_; 2] = core::array::from_fn(|i| {
            segment(
                MessageKind::Write { imm: false },
                4096,
                IbMtu::Mtu2048,
                Psn::new(1),
                i as u32,
            )
            .opcode
        });
        assert_eq!(w, [Opcode::RC_WRITE_FIRST, Opcode::RC_WRITE_LAST]);
        let r = segment(MessageKind::Read, 1 << 20, IbMtu::Mtu4096, Psn::new(9), 0);
        assert_eq!(
            (r.opcode, r.len, r.last),
            (Opcode::RC_READ_REQUEST, 0, true)
        );
        assert_eq!(
            packet_count(1 << 20, IbMtu::Mtu4096),
            256,
            "PSNs a 1 MiB READ consumes"
        );
        assert_eq!(read_response_opcode(0, 1), Opcode::RC_READ_RESPONSE_ONLY);
        assert_eq!(read_response_opcode(0, 3), Opcode::RC_READ_RESPONSE_FIRST);
        assert_eq!(read_response_opcode(1, 3), Opcode::RC_READ_RESPONSE_MIDDLE);
        assert_eq!(read_response_opcode(2, 3), Opcode::RC_READ_RESPONSE_LAST);
    }
}
