//! Base transport opcodes (IBA 9.2, table 38) and which headers each carries.
#![deny(clippy::arithmetic_side_effects)]

/// A BTH opcode: transport (top 3 bits) and operation (low 5 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opcode(pub u8);

/// Transport service of an opcode (top 3 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Reliable connection.
    Rc,
    /// Unreliable connection.
    Uc,
    /// Unreliable datagram.
    Ud,
}

#[allow(missing_docs)]
impl Opcode {
    pub const RC_SEND_FIRST: Self = Self(0x00);
    pub const RC_SEND_MIDDLE: Self = Self(0x01);
    pub const RC_SEND_LAST: Self = Self(0x02);
    pub const RC_SEND_LAST_IMM: Self = Self(0x03);
    pub const RC_SEND_ONLY: Self = Self(0x04);
    pub const RC_SEND_ONLY_IMM: Self = Self(0x05);
    pub const RC_WRITE_FIRST: Self = Self(0x06);
    pub const RC_WRITE_MIDDLE: Self = Self(0x07);
    pub const RC_WRITE_LAST: Self = Self(0x08);
    pub const RC_WRITE_LAST_IMM: Self = Self(0x09);
    pub const RC_WRITE_ONLY: Self = Self(0x0a);
    pub const RC_WRITE_ONLY_IMM: Self = Self(0x0b);
    pub const RC_READ_REQUEST: Self = Self(0x0c);
    pub const RC_READ_RESPONSE_FIRST: Self = Self(0x0d);
    pub const RC_READ_RESPONSE_MIDDLE: Self = Self(0x0e);
    pub const RC_READ_RESPONSE_LAST: Self = Self(0x0f);
    pub const RC_READ_RESPONSE_ONLY: Self = Self(0x10);
    pub const RC_ACK: Self = Self(0x11);
    pub const RC_ATOMIC_ACK: Self = Self(0x12);
    pub const RC_CMP_SWAP: Self = Self(0x13);
    pub const RC_FETCH_ADD: Self = Self(0x14);
    pub const RC_SEND_LAST_INV: Self = Self(0x16);
    pub const RC_SEND_ONLY_INV: Self = Self(0x17);
    /// IBTA 1.5's FLUSH: what earlier WRITEs placed made visible (or persistent), answered by
    /// an empty READ RESPONSE ONLY.
    pub const RC_FLUSH: Self = Self(0x1c);
    /// IBTA 1.5's RDMA ATOMIC WRITE: 8 bytes stored at once, answered by an empty READ
    /// RESPONSE ONLY.
    pub const RC_ATOMIC_WRITE: Self = Self(0x1d);
    pub const UD_SEND_ONLY: Self = Self(0x64);
    pub const UD_SEND_ONLY_IMM: Self = Self(0x65);
}

/// Flags describing what an opcode is and which extended headers follow its BTH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct OpInfo {
    /// The transport service.
    pub transport: Option<Transport>,
    /// Sent by a requester (SEND, WRITE, READ request, atomics); else a response.
    pub is_request: bool,
    /// Starts a message (FIRST or ONLY).
    pub is_first: bool,
    /// Ends a message (LAST or ONLY).
    pub is_last: bool,
    /// Carries payload.
    pub has_payload: bool,
    /// RDMA extended transport header (16 bytes).
    pub reth: bool,
    /// ACK extended transport header (4 bytes).
    pub aeth: bool,
    /// Immediate data (4 bytes).
    pub immdt: bool,
    /// Invalidate extended transport header (4 bytes).
    pub ieth: bool,
    /// Atomic extended transport header (28 bytes).
    pub atomic_eth: bool,
    /// Atomic acknowledge extended transport header (8 bytes).
    pub atomic_ack_eth: bool,
    /// Datagram extended transport header (8 bytes, UD).
    pub deth: bool,
    /// A SEND (consumes a receive WQE).
    pub is_send: bool,
    /// An RDMA WRITE.
    pub is_write: bool,
    /// An RDMA READ request or response.
    pub is_read: bool,
    /// An RDMA ATOMIC WRITE (IBTA 1.5).
    pub atomic_write: bool,
    /// A FLUSH (IBTA 1.5): a FLUSH extended transport header (4 bytes) before its RETH.
    pub flush: bool,
}

/// BTH size.
pub const BTH_BYTES: usize = 12;
/// RETH size.
pub const RETH_BYTES: usize = 16;
/// AETH size.
pub const AETH_BYTES: usize = 4;
/// ImmDt size.
pub const IMMDT_BYTES: usize = 4;
/// IETH size.
pub const IETH_BYTES: usize = 4;
/// FETH size.
pub const FETH_BYTES: usize = 4;
/// AtomicETH size.
pub const ATOMIC_ETH_BYTES: usize = 28;
/// AtomicAckETH size.
pub const ATOMIC_ACK_ETH_BYTES: usize = 8;
/// DETH size.
pub const DETH_BYTES: usize = 8;
/// ICRC size.
pub const ICRC_BYTES: usize = 4;

/// The most transport header bytes (BTH and extended headers) any opcode has.
pub const MAX_HEADER_BYTES: usize = {
    let mut max = 0;
    let mut op = 0;
    while op <= u8::MAX as usize {
        if let Some(info) = Opcode(op as u8).info() {
            if info.header_len() > max {
                max = info.header_len();
            }
        }
        op += 1;
    }
    max
};

impl OpInfo {
    /// Bytes of transport headers (BTH and every extended header), before the payload.
    // At most the sum of the header sizes, constants.
    #[allow(clippy::arithmetic_side_effects)]
    pub const fn header_len(&self) -> usize {
        let mut n = BTH_BYTES;
        if self.deth {
            n += DETH_BYTES;
        }
        if self.flush {
            n += FETH_BYTES;
        }
        if self.reth {
            n += RETH_BYTES;
        }
        if self.atomic_eth {
            n += ATOMIC_ETH_BYTES;
        }
        if self.aeth {
            n += AETH_BYTES;
        }
        if self.atomic_ack_eth {
            n += ATOMIC_ACK_ETH_BYTES;
        }
        if self.immdt {
            n += IMMDT_BYTES;
        }
        if self.ieth {
            n += IETH_BYTES;
        }
        n
    }
}

impl Opcode {
    /// The same SEND or RDMA WRITE packet on UC, whose opcodes are RC's plus 0x20 (IBA table
    /// 38); `None` for what UC does not carry (READ, atomics, responses, invalidation).
    pub const fn on_uc(self) -> Option<Self> {
        if self.0 <= Self::RC_WRITE_ONLY_IMM.0 {
            Some(Self(self.0 | 0x20))
        } else {
            None
        }
    }

    /// What the opcode is, or `None` for opcodes we do not implement (RD, XRC, CNP,
    /// reserved): such packets are dropped before any length is computed from them.
    pub const fn info(self) -> Option<OpInfo> {
        const NONE: OpInfo = OpInfo {
            transport: None,
            is_request: false,
            is_first: false,
            is_last: false,
            has_payload: false,
            reth: false,
            aeth: false,
            immdt: false,
            ieth: false,
            atomic_eth: false,
            atomic_ack_eth: false,
            deth: false,
            is_send: false,
            is_write: false,
            is_read: false,
            atomic_write: false,
            flush: false,
        };
        let transport = match self.0 >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            3 => Transport::Ud,
            _ => return None,
        };
        let t = Some(transport);
        let req = OpInfo {
            transport: t,
            is_request: true,
            ..NONE
        };
        let send = OpInfo {
            is_send: true,
            has_payload: true,
            ..req
        };
        let write = OpInfo {
            is_write: true,
            has_payload: true,
            ..req
        };
        let rresp = OpInfo {
            transport: t,
            is_read: true,
            ..NONE
        };
        let op = self.0 & 0x1f;
        let info = match (transport, op) {
            (Transport::Ud, 0x04) => OpInfo {
                is_first: true,
                is_last: true,
                deth: true,
                ..send
            },
            (Transport::Ud, 0x05) => OpInfo {
                is_first: true,
                is_last: true,
                deth: true,
                immdt: true,
                ..send
            },
            (Transport::Ud, _) => return None,
            (_, 0x00) => OpInfo {
                is_first: true,
                ..send
            },
            (_, 0x01) => send,
            (_, 0x02) => OpInfo {
                is_last: true,
                ..send
            },
            (_, 0x03) => OpInfo {
                is_last: true,
                immdt: true,
                ..send
            },
            (_, 0x04) => OpInfo {
                is_first: true,
                is_last: true,
                ..send
            },
            (_, 0x05) => OpInfo {
                is_first: true,
                is_last: true,
                immdt: true,
                ..send
            },
            (_, 0x06) => OpInfo {
                is_first: true,
                reth: true,
                ..write
            },
            (_, 0x07) => write,
            (_, 0x08) => OpInfo {
                is_last: true,
                ..write
            },
            (_, 0x09) => OpInfo {
                is_last: true,
                immdt: true,
                ..write
            },
            (_, 0x0a) => OpInfo {
                is_first: true,
                is_last: true,
                reth: true,
                ..write
            },
            (_, 0x0b) => OpInfo {
                is_first: true,
                is_last: true,
                reth: true,
                immdt: true,
                ..write
            },
            (Transport::Rc, 0x0c) => OpInfo {
                is_read: true,
                is_first: true,
                is_last: true,
                reth: true,
                ..req
            },
            (Transport::Rc, 0x0d) => OpInfo {
                is_first: true,
                aeth: true,
                has_payload: true,
                ..rresp
            },
            (Transport::Rc, 0x0e) => OpInfo {
                has_payload: true,
                ..rresp
            },
            (Transport::Rc, 0x0f) => OpInfo {
                is_last: true,
                aeth: true,
                has_payload: true,
                ..rresp
            },
            (Transport::Rc, 0x10) => OpInfo {
                is_first: true,
                is_last: true,
                aeth: true,
                has_payload: true,
                ..rresp
            },
            (Transport::Rc, 0x11) => OpInfo {
                transport: t,
                is_first: true,
                is_last: true,
                aeth: true,
                ..NONE
            },
            (Transport::Rc, 0x12) => OpInfo {
                transport: t,
                is_first: true,
                is_last: true,
                aeth: true,
                atomic_ack_eth: true,
                ..NONE
            },
            (Transport::Rc, 0x13 | 0x14) => OpInfo {
                is_first: true,
                is_last: true,
                atomic_eth: true,
                ..req
            },
            (Transport::Rc, 0x16) => OpInfo {
                is_last: true,
                ieth: true,
                ..send
            },
            (Transport::Rc, 0x17) => OpInfo {
                is_first: true,
                is_last: true,
                ieth: true,
                ..send
            },
            (Transport::Rc, 0x1c) => OpInfo {
                is_first: true,
                is_last: true,
                reth: true,
                flush: true,
                ..req
            },
            (Transport::Rc, 0x1d) => OpInfo {
                is_first: true,
                is_last: true,
                reth: true,
                has_payload: true,
                atomic_write: true,
                ..req
            },
            _ => return None,
        };
        Some(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uc_opcodes_are_rc_sends_and_writes_moved() {
        for op in 0..=0x0bu8 {
            let uc = Opcode(op).on_uc().unwrap();
            assert_eq!(uc.0, 0x20 + op);
            let (rc, uc) = (Opcode(op).info().unwrap(), uc.info().unwrap());
            assert_eq!(uc.transport, Some(Transport::Uc));
            assert_eq!(
                OpInfo {
                    transport: Some(Transport::Rc),
                    ..uc
                },
                rc
            );
        }
        for op in [
            Opcode::RC_READ_REQUEST,
            Opcode::RC_ACK,
            Opcode::RC_CMP_SWAP,
            Opcode::RC_SEND_ONLY_INV,
            Opcode::RC_ATOMIC_WRITE,
            Opcode::RC_FLUSH,
        ] {
            assert_eq!(op.on_uc(), None);
        }
        assert_eq!(Opcode(0x2c).info(), None, "no UC READ");
    }

    #[test]
    fn header_lengths_match_the_iba_tables() {
        let len = |op: Opcode| op.info().unwrap().header_len();
        assert_eq!(len(Opcode::RC_SEND_ONLY), 12);
        assert_eq!(len(Opcode::RC_SEND_ONLY_IMM), 16);
        assert_eq!(len(Opcode::RC_WRITE_FIRST), 28);
        assert_eq!(len(Opcode::RC_WRITE_MIDDLE), 12);
        assert_eq!(len(Opcode::RC_WRITE_ONLY_IMM), 32);
        assert_eq!(len(Opcode::RC_READ_REQUEST), 28);
        assert_eq!(len(Opcode::RC_READ_RESPONSE_FIRST), 16);
        assert_eq!(len(Opcode::RC_READ_RESPONSE_MIDDLE), 12);
        assert_eq!(len(Opcode::RC_ACK), 16);
        assert_eq!(len(Opcode::RC_ATOMIC_ACK), 24);
        assert_eq!(len(Opcode::RC_CMP_SWAP), 40);
        assert_eq!(len(Opcode::RC_SEND_ONLY_INV), 16);
        assert_eq!(len(Opcode::RC_ATOMIC_WRITE), 28);
        assert_eq!(len(Opcode::RC_FLUSH), 32, "BTH, FETH, RETH");
        assert_eq!(len(Opcode::UD_SEND_ONLY), 20);
        assert_eq!(len(Opcode::UD_SEND_ONLY_IMM), 24);
        assert_eq!(len(Opcode(0x2a)), 28, "UC RDMA WRITE ONLY");
    }

    #[test]
    fn request_and_response_roles() {
        assert!(Opcode::RC_READ_REQUEST.info().unwrap().is_request);
        assert!(!Opcode::RC_READ_RESPONSE_ONLY.info().unwrap().is_request);
        assert!(!Opcode::RC_ACK.info().unwrap().is_request);
        assert!(Opcode::RC_SEND_MIDDLE.info().unwrap().has_payload);
        assert!(!Opcode::RC_READ_REQUEST.info().unwrap().has_payload);
    }

    #[test]
    fn unknown_opcodes_are_rejected() {
        for op in [
            0x15u8, 0x18, 0x1f, 0x2c, 0x30, 0x40, 0x44, 0x63, 0x80, 0x81, 0xa0, 0xff,
        ] {
            assert_eq!(Opcode(op).info(), None, "opcode {op:#x}");
        }
    }

    #[test]
    fn every_known_opcode_is_consistent() {
        for op in 0..=255u8 {
            let Some(info) = Opcode(op).info() else {
                continue;
            };
            assert!(info.header_len() >= BTH_BYTES);
            assert!(info.header_len() <= MAX_HEADER_BYTES);
            // Only requests carry RETH/atomic headers, only responses carry AETH.
            assert!(!info.reth || info.is_request);
            assert!(!(info.aeth && info.is_request));
        }
    }
}
