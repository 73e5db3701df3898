//! Whether a valid datagram may act on the connected QP it names: the transport of its
//! opcode, the addresses it travelled between, and its P_Key. rdma_rxe drops what fails these
//! before anything else looks at it; so do we. Without them, anyone who can reach UDP 4791
//! could move a QP to the error state (or complete its work) by naming its QP number.
//!
//! Between two QPs of this host the addresses say nothing: any local user may make a QP with
//! the same source address and aim it at another user's QP. There local delivery tells which QP
//! sent a datagram, and only the connected peer's pass.
// Values from the wire: no arithmetic that can overflow, wrap or divide by zero unchecked.
#![deny(clippy::arithmetic_side_effects)]

use super::{
    av::AddressVector,
    opcode::{OpInfo, Transport},
    packet::Datagram,
};

/// Why a datagram is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Its opcode belongs to another transport than the QP's.
    WrongTransport,
    /// It did not come from the QP's peer to the QP's own address (or, by local delivery,
    /// from another QP than the peer).
    WrongPeer,
    /// Its P_Key does not match the partition of the QP.
    BadPkey,
}

/// Two P_Keys match if their low 15 bits are equal and at least one is a full member
/// (IBA 10.9.3); a key whose low 15 bits are 0 matches nothing.
pub const fn pkeys_match(a: u16, b: u16) -> bool {
    a & 0x7fff != 0 && a & 0x7fff == b & 0x7fff && (a & 0x8000 != 0 || b & 0x8000 != 0)
}

/// The connected QP a datagram is checked against: its transport, P_Key, path and peer QP.
#[derive(Clone, Copy, Debug)]
pub struct Connection<'a> {
    pub transport: Transport,
    pub pkey: u16,
    pub av: &'a AddressVector,
    pub dest_qpn: u32,
}

/// Checks a datagram for the connected QP `conn`.
pub fn admit(d: &Datagram<'_>, conn: &Connection<'_>) -> Result<(), Refusal> {
    admit_parts(
        &d.info,
        d.bth.pkey,
        d.src_gid,
        d.dst_gid,
        d.sender_qpn,
        conn,
    )
}

fn admit_parts(
    info: &OpInfo,
    packet_pkey: u16,
    src: [u8; 16],
    dst: [u8; 16],
    sender_qpn: Option<u32>,
    conn: &Connection<'_>,
) -> Result<(), Refusal> {
    let Connection {
        transport,
        pkey,
        av,
        dest_qpn,
    } = *conn;
    if info.transport != Some(transport) {
        return Err(Refusal::WrongTransport);
    }
    if src != av.dgid || dst != av.sgid || sender_qpn.is_some_and(|qpn| qpn != dest_qpn) {
        return Err(Refusal::WrongPeer);
    }
    if !pkeys_match(packet_pkey, pkey) {
        return Err(Refusal::BadPkey);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcode::Opcode;

    fn gid(last: u8) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[10, 0, 0, last]);
        g
    }

    const AV: AddressVector = AddressVector {
        sgid: [0; 16],
        dgid: [0; 16],
        flow_label: 0,
        hop_limit: 64,
        traffic_class: 0,
    };

    const PEER_QPN: u32 = 0x12;

    fn check_from(
        op: Opcode,
        pkey: u16,
        src: u8,
        dst: u8,
        sender_qpn: Option<u32>,
    ) -> Result<(), Refusal> {
        let av = AddressVector {
            sgid: gid(1),
            dgid: gid(2),
            ..AV
        };
        let conn = Connection {
            transport: Transport::Rc,
            pkey: 0xffff,
            av: &av,
            dest_qpn: PEER_QPN,
        };
        admit_parts(
            &op.info().unwrap(),
            pkey,
            gid(src),
            gid(dst),
            sender_qpn,
            &conn,
        )
    }

    fn check(op: Opcode, pkey: u16, src: u8, dst: u8) -> Result<(), Refusal> {
        check_from(op, pkey, src, dst, None)
    }

    #[test]
    fn by_local_delivery_only_the_peer_qp_passes() {
        assert_eq!(
            check_from(Opcode::RC_SEND_ONLY, 0xffff, 2, 1, Some(PEER_QPN)),
            Ok(())
        );
        assert_eq!(
            check_from(Opcode::RC_SEND_ONLY, 0xffff, 2, 1, Some(0x13)),
            Err(Refusal::WrongPeer),
            "another QP of this host, from the peer's address"
        );
        assert_eq!(
            check_from(Opcode::RC_ACK, 0xffff, 2, 1, Some(0)),
            Err(Refusal::WrongPeer),
            "responses too"
        );
    }

    #[test]
    fn the_peers_rc_packets_pass() {
        assert_eq!(check(Opcode::RC_SEND_ONLY, 0xffff, 2, 1), Ok(()));
        assert_eq!(
            check(Opcode::RC_ACK, 0x7fff, 2, 1),
            Ok(()),
            "limited member, we are full"
        );
    }

    #[test]
    fn other_transports_are_refused() {
        assert_eq!(
            check(Opcode::UD_SEND_ONLY, 0xffff, 2, 1),
            Err(Refusal::WrongTransport)
        );
        assert_eq!(
            check(Opcode(0x24), 0xffff, 2, 1),
            Err(Refusal::WrongTransport),
            "UC SEND ONLY"
        );
    }

    #[test]
    fn other_sources_and_destinations_are_refused() {
        assert_eq!(
            check(Opcode::RC_SEND_ONLY, 0xffff, 3, 1),
            Err(Refusal::WrongPeer)
        );
        assert_eq!(
            check(Opcode::RC_SEND_ONLY, 0xffff, 2, 2),
            Err(Refusal::WrongPeer),
            "to another address of ours"
        );
    }

    #[test]
    fn pkey_rules() {
        assert_eq!(
            check(Opcode::RC_SEND_ONLY, 0x1234, 2, 1),
            Err(Refusal::BadPkey)
        );
        assert_eq!(
            check(Opcode::RC_SEND_ONLY, 0x8000, 2, 1),
            Err(Refusal::BadPkey)
        );
        assert!(pkeys_match(0xffff, 0xffff) && pkeys_match(0x7fff, 0xffff));
        assert!(
            !pkeys_match(0x7fff, 0x7fff),
            "two limited members do not talk"
        );
        assert!(
            !pkeys_match(0x8000, 0x8000),
            "the invalid P_Key matches nothing"
        );
    }
}
