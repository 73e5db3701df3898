//! Transport headers: parse from and write to big-endian wire bytes.
// Values from the wire: no arithmetic that can overflow, wrap or divide by zero unchecked.
#![deny(clippy::arithmetic_side_effects)]

use super::{
    opcode::{Opcode, AETH_BYTES, BTH_BYTES, DETH_BYTES, RETH_BYTES},
    psn::Psn,
};

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}
fn put24(b: &mut [u8], v: u32) {
    b[..3].copy_from_slice(&v.to_be_bytes()[1..]);
}

/// The base transport header (12 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Bth {
    /// Opcode.
    pub opcode: u8,
    /// Solicited event.
    pub solicited: bool,
    /// Migration state (APM; always set by rdma_rxe and RoCE NICs).
    pub mig_req: bool,
    /// Pad bytes (0..=3) after the payload, to a multiple of 4.
    pub pad: u8,
    /// Partition key.
    pub pkey: u16,
    /// ECN forward congestion notification.
    pub fecn: bool,
    /// ECN backward congestion notification.
    pub becn: bool,
    /// Destination QP number (24 bits).
    pub dest_qp: u32,
    /// Ask the responder to acknowledge this packet.
    pub ack_req: bool,
    /// Packet sequence number.
    pub psn: Psn,
}

/// Transport header version of IBA 1.x.
const TVER: u8 = 0;

/// The partition key of every packet we send (`IB_DEFAULT_PKEY_FULL`, the only table entry).
pub const DEFAULT_PKEY: u16 = 0xffff;

impl Bth {
    /// The BTH of an RC packet we send, with the default P_Key and the migration bit set (as
    /// rdma_rxe and RoCE NICs send them); its pad is filled in when the frame is built.
    pub fn rc(opcode: u8, dest_qp: u32, psn: Psn, ack_req: bool, solicited: bool) -> Self {
        Self {
            opcode,
            solicited,
            mig_req: true,
            pad: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req,
            psn,
        }
    }

    /// The BTH of a UD packet we send: as [`Bth::rc`], never asking for an ACK (UD has none).
    pub fn ud(opcode: u8, dest_qp: u32, psn: Psn, solicited: bool) -> Self {
        Self::rc(opcode, dest_qp, psn, false, solicited)
    }

    /// Parses the first [`BTH_BYTES`] of `b`; `None` if too short or of another version.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let b = b.get(..BTH_BYTES)?;
        if b[1] & 0xf != TVER {
            return None;
        }
        Some(Self {
            opcode: b[0],
            solicited: b[1] & 0x80 != 0,
            mig_req: b[1] & 0x40 != 0,
            pad: (b[1] >> 4) & 3,
            pkey: be16(&b[2..]),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            dest_qp: be24(&b[5..]),
            ack_req: b[8] & 0x80 != 0,
            psn: Psn::new(be24(&b[9..])),
        })
    }

    /// Writes the header into the first [`BTH_BYTES`] of `b`.
    pub fn write(&self, b: &mut [u8]) {
        b[0] = self.opcode;
        b[1] = (u8::from(self.solicited) << 7)
            | (u8::from(self.mig_req) << 6)
            | ((self.pad & 3) << 4)
            | TVER;
        b[2..4].copy_from_slice(&self.pkey.to_be_bytes());
        b[4] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        put24(&mut b[5..8], self.dest_qp);
        b[8] = u8::from(self.ack_req) << 7;
        put24(&mut b[9..12], self.psn.get());
    }

    /// The opcode.
    pub const fn op(&self) -> Opcode {
        Opcode(self.opcode)
    }
}

/// The RDMA extended transport header (16 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Reth {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length of the whole RDMA operation.
    pub dma_len: u32,
}

impl Reth {
    /// Parses the first [`RETH_BYTES`] of `b`.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let b = b.get(..RETH_BYTES)?;
        Some(Self {
            va: be64(b),
            rkey: be32(&b[8..]),
            dma_len: be32(&b[12..]),
        })
    }

    /// Writes the header into the first [`RETH_BYTES`] of `b`.
    pub fn write(&self, b: &mut [u8]) {
        b[..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..16].copy_from_slice(&self.dma_len.to_be_bytes());
    }
}

/// The Q_Key of the general services QP (QP1) on every port (`IB_QP1_QKEY`).
pub const GSI_QKEY: u32 = 0x8001_0000;

/// The datagram extended transport header (8 bytes, UD): the receiver's Q_Key and the sending
/// QP's number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Deth {
    /// Q_Key the receiving QP must have.
    pub qkey: u32,
    /// Source QP number (24 bits).
    pub src_qp: u32,
}

impl Deth {
    /// Parses the first [`DETH_BYTES`] of `b`.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let b = b.get(..DETH_BYTES)?;
        Some(Self {
            qkey: be32(b),
            src_qp: be24(&b[5..]),
        })
    }

    /// Writes the header into the first [`DETH_BYTES`] of `b`.
    pub fn write(&self, b: &mut [u8]) {
        b[..4].copy_from_slice(&self.qkey.to_be_bytes());
        b[4] = 0;
        put24(&mut b[5..8], self.src_qp);
    }
}

/// NAK codes of an AETH (IBA 9.7.5.2.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NakCode {
    /// PSN sequence error: the requester must resend from the NAK's PSN.
    PsnSequenceError,
    /// Invalid request (unsupported opcode, bad length...).
    InvalidRequest,
    /// Remote access error (bad R_Key, bounds, rights).
    RemoteAccessError,
    /// Remote operational error.
    RemoteOperationalError,
    /// Invalid RD request.
    InvalidRdRequest,
}

/// The meaning of an AETH syndrome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syndrome {
    /// Positive acknowledgement with a credit count (we send "invalid credits", 31).
    Ack { credits: u8 },
    /// Receiver not ready: retry after the RNR timer (IBA table 45 index).
    RnrNak { timer: u8 },
    /// Negative acknowledgement.
    Nak(NakCode),
}

impl Syndrome {
    /// The 8-bit wire encoding.
    pub const fn encode(self) -> u8 {
        match self {
            Self::Ack { credits } => credits & 0x1f,
            Self::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Self::Nak(code) => {
                0x60 | match code {
                    NakCode::PsnSequenceError => 0,
                    NakCode::InvalidRequest => 1,
                    NakCode::RemoteAccessError => 2,
                    NakCode::RemoteOperationalError => 3,
                    NakCode::InvalidRdRequest => 4,
                }
            }
        }
    }

    /// Decodes a wire syndrome; `None` for reserved values.
    pub const fn decode(b: u8) -> Option<Self> {
        match b >> 5 {
            0 => Some(Self::Ack { credits: b & 0x1f }),
            1 => Some(Self::RnrNak { timer: b & 0x1f }),
            3 => Some(Self::Nak(match b & 0x1f {
                0 => NakCode::PsnSequenceError,
                1 => NakCode::InvalidRequest,
                2 => NakCode::RemoteAccessError,
                3 => NakCode::RemoteOperationalError,
                4 => NakCode::InvalidRdRequest,
                _ => return None,
            })),
            _ => None,
        }
    }
}

/// "Invalid" credit count: end-to-end flow control is not used (as rdma_rxe).
pub const AETH_NO_CREDITS: u8 = 0x1f;

/// The ACK extended transport header (4 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aeth {
    /// What is acknowledged.
    pub syndrome: Syndrome,
    /// Message sequence number: messages completed by the responder (24 bits).
    pub msn: u32,
}

impl Aeth {
    /// Parses the first [`AETH_BYTES`] of `b`; `None` for a reserved syndrome.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let b = b.get(..AETH_BYTES)?;
        Some(Self {
            syndrome: Syndrome::decode(b[0])?,
            msn: be24(&b[1..]),
        })
    }

    /// Writes the header into the first [`AETH_BYTES`] of `b`.
    pub fn write(&self, b: &mut [u8]) {
        b[0] = self.syndrome.encode();
        put24(&mut b[1..4], self.msn);
    }
}

/// Reads a 32-bit big-endian field (ImmDt, IETH).
pub fn read_be32(b: &[u8]) -> Option<u32> {
    b.get(..4).map(be32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_rc_bth_carries_the_default_pkey_and_migration_bit() {
        let b = Bth::rc(0x04, 0x12_3456, Psn::new(7), true, false);
        let mut raw = [0u8; BTH_BYTES];
        b.write(&mut raw);
        // rdma_rxe's RC SEND ONLY: opcode, SE/M/pad/tver, P_Key, QP, A bit + PSN.
        assert_eq!(
            raw,
            [0x04, 0x40, 0xff, 0xff, 0x00, 0x12, 0x34, 0x56, 0x80, 0, 0, 7]
        );
        assert_eq!(Bth::parse(&raw), Some(b));
    }

    #[test]
    fn bth_round_trips_and_matches_the_wire_layout() {
        let bth = Bth {
            opcode: 0x0a,
            solicited: true,
            mig_req: true,
            pad: 2,
            pkey: 0xffff,
            fecn: false,
            becn: true,
            dest_qp: 0x12_3456,
            ack_req: true,
            psn: Psn::new(0xab_cdef),
        };
        let mut b = [0u8; 12];
        bth.write(&mut b);
        assert_eq!(
            b,
            [0x0a, 0xe0, 0xff, 0xff, 0x40, 0x12, 0x34, 0x56, 0x80, 0xab, 0xcd, 0xef]
        );
        assert_eq!(Bth::parse(&b), Some(bth));
        assert_eq!(Bth::parse(&b[..11]), None);
        b[1] |= 1; // transport version 1
        assert_eq!(Bth::parse(&b), None);
    }

    #[test]
    fn reth_round_trips() {
        let reth = Reth {
            va: 0x0011_2233_4455_6677,
            rkey: 0x8899_aabb,
            dma_len: 0x1000,
        };
        let mut b = [0u8; 16];
        reth.write(&mut b);
        assert_eq!(&b[..8], &[0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77]);
        assert_eq!(&b[8..], &[0x88, 0x99, 0xaa, 0xbb, 0, 0, 0x10, 0]);
        assert_eq!(Reth::parse(&b), Some(reth));
    }

    #[test]
    fn aeth_syndromes_encode_as_in_the_iba() {
        assert_eq!(
            Syndrome::Ack {
                credits: AETH_NO_CREDITS
            }
            .encode(),
            0x1f
        );
        assert_eq!(Syndrome::RnrNak { timer: 14 }.encode(), 0x2e);
        assert_eq!(Syndrome::Nak(NakCode::PsnSequenceError).encode(), 0x60);
        assert_eq!(Syndrome::Nak(NakCode::RemoteAccessError).encode(), 0x62);
        assert_eq!(Syndrome::decode(0x40), None, "reserved syndrome");
        assert_eq!(Syndrome::decode(0x65), None, "reserved NAK code");
        for b in 0..=255u8 {
            if let Some(s) = Syndrome::decode(b) {
                assert_eq!(s.encode(), b);
            }
        }
        let aeth = Aeth {
            syndrome: Syndrome::Nak(NakCode::InvalidRequest),
            msn: 0x01_0203,
        };
        let mut b = [0u8; 4];
        aeth.write(&mut b);
        assert_eq!(b, [0x61, 1, 2, 3]);
        assert_eq!(Aeth::parse(&b), Some(aeth));
    }
}
