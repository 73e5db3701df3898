//! The responder's first decision about an incoming request (IBA 9.7.5.1, 9.7.5.2): execute it,
//! treat it as a duplicate, NAK it as out of sequence, or NAK it as an invalid request, and how
//! its state moves on after execution. A UC responder (IBA 9.8.3) answers nothing: it executes
//! a packet or drops it with the rest of its message.
// Values from the wire: no arithmetic that can overflow, wrap or divide by zero unchecked.
#![deny(clippy::arithmetic_side_effects)]

use super::{
    mtu::IbMtu,
    opcode::{OpInfo, Opcode, Transport},
    psn::Psn,
    segment::packet_count,
};

/// A multi-packet message the responder is in the middle of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum InProgress {
    /// Between messages.
    #[default]
    Nothing,
    /// After SEND FIRST: MIDDLE or LAST must follow.
    Send,
    /// After RDMA WRITE FIRST: MIDDLE or LAST must follow.
    Write,
}

/// Sequence state of an RC responder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ResponderSeq {
    /// The PSN expected next.
    pub epsn: Psn,
    /// Messages completed (24 bits), echoed in AETHs.
    pub msn: u32,
    /// The message being received.
    pub in_progress: InProgress,
    /// UC: the message being received is lost; its packets are dropped until a new one starts.
    pub dropping: bool,
}

/// What to do with a request packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// In order and well formed: execute it.
    Execute,
    /// Already executed (PSN before the expected one): acknowledge it again, or for an RDMA READ
    /// request, answer it again.
    Duplicate,
    /// A gap (PSN after the expected one): a packet was lost; NAK with a PSN sequence error.
    OutOfSequence,
    /// Not a request this QP can take here: NAK with "invalid request" and move to the error state.
    InvalidRequest,
}

/// What a UC responder does with a request packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UcVerdict {
    /// Execute it.
    Execute,
    /// Drop it: its message is lost (a packet of it went missing, it is malformed, or it
    /// continues a message that was never started).
    Drop,
}

/// A UC decision, and whether it cut short a message in progress: what that message placed
/// is forgotten (the receive WQE it was filling takes the next message from its start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UcDecision {
    /// What to do with the packet.
    pub verdict: UcVerdict,
    /// A message in progress ends here without its last packet.
    pub abandons: bool,
}

fn continues(op: Opcode, in_progress: InProgress) -> bool {
    // The same operation codes for RC and UC (the transport is the top 3 bits).
    let op = Opcode(op.0 & 0x1f);
    match in_progress {
        InProgress::Nothing => false,
        InProgress::Send => matches!(
            op,
            Opcode::RC_SEND_MIDDLE
                | Opcode::RC_SEND_LAST
                | Opcode::RC_SEND_LAST_IMM
                | Opcode::RC_SEND_LAST_INV
        ),
        InProgress::Write => {
            matches!(
                op,
                Opcode::RC_WRITE_MIDDLE | Opcode::RC_WRITE_LAST | Opcode::RC_WRITE_LAST_IMM
            )
        }
    }
}

/// FIRST and MIDDLE packets carry exactly one MTU; LAST and ONLY at most one; a packet without
/// payload none.
fn length_ok(info: &OpInfo, payload: u32, mtu: IbMtu) -> bool {
    let mtu = mtu.bytes();
    if !info.has_payload {
        payload == 0
    } else if info.is_last {
        payload <= mtu
    } else {
        payload == mtu
    }
}

impl ResponderSeq {
    /// Classifies an RC request with PSN `psn`, opcode `op` (whose `info` the caller looked
    /// up) and `payload` bytes, at path MTU `mtu`.
    pub fn classify(
        &self,
        op: Opcode,
        info: &OpInfo,
        psn: Psn,
        payload: u32,
        mtu: IbMtu,
    ) -> Verdict {
        if info.transport != Some(Transport::Rc) || !info.is_request {
            return Verdict::InvalidRequest;
        }
        let d = psn.diff(self.epsn);
        if d < 0 {
            return Verdict::Duplicate;
        }
        if d > 0 {
            return Verdict::OutOfSequence;
        }
        // A message in progress must continue; none in progress, a new one must start.
        let ok_sequence = if self.in_progress == InProgress::Nothing {
            info.is_first
        } else {
            continues(op, self.in_progress)
        };
        if !ok_sequence {
            return Verdict::InvalidRequest;
        }
        if !length_ok(info, payload, mtu) {
            return Verdict::InvalidRequest;
        }
        Verdict::Execute
    }

    /// Classifies a UC request (as [`Self::classify`]). Nothing is ever answered: a packet
    /// after a gap, out of its message's order or of the wrong length is dropped with the rest
    /// of its message, and the next FIRST or ONLY packet starts over at its own PSN, as
    /// rdma_rxe and IBA 9.8.3.1 have it.
    pub fn classify_uc(
        &mut self,
        op: Opcode,
        info: &OpInfo,
        psn: Psn,
        payload: u32,
        mtu: IbMtu,
    ) -> UcDecision {
        let abandons = self.in_progress != InProgress::Nothing;
        let drop = |s: &mut Self| {
            s.drop_message();
            UcDecision {
                verdict: UcVerdict::Drop,
                abandons,
            }
        };
        if info.transport != Some(Transport::Uc) || !info.is_request {
            return drop(self);
        }
        let in_sequence = !self.dropping && psn == self.epsn;
        if info.is_first && (!in_sequence || abandons) {
            // A new message: whatever came before it is over.
            self.in_progress = InProgress::Nothing;
            self.dropping = false;
            self.epsn = psn;
        } else if !in_sequence {
            return drop(self);
        }
        let ok_sequence = if self.in_progress == InProgress::Nothing {
            info.is_first
        } else {
            continues(op, self.in_progress)
        };
        if !ok_sequence || !length_ok(info, payload, mtu) {
            return drop(self);
        }
        UcDecision {
            verdict: UcVerdict::Execute,
            abandons: abandons && info.is_first,
        }
    }

    /// UC: the message being received is lost (a packet of it could not be executed).
    pub fn drop_message(&mut self) {
        self.in_progress = InProgress::Nothing;
        self.dropping = true;
    }

    /// The state after executing `info`; `read_len` is the DMA length of an RDMA READ request
    /// (whose responses use one PSN per packet).
    pub fn advance(&mut self, info: &OpInfo, read_len: u32, mtu: IbMtu) {
        let psns = if info.is_read {
            packet_count(read_len, mtu)
        } else {
            1
        };
        self.epsn = self.epsn.add(psns);
        self.in_progress = match (info.is_first, info.is_last) {
            (_, true) => InProgress::Nothing,
            (true, false) if info.is_send => InProgress::Send,
            (true, false) => InProgress::Write,
            (false, false) => self.in_progress,
        };
        if info.is_last {
            self.msn = self.msn.wrapping_add(1) & super::psn::PSN_MASK;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MTU: IbMtu = IbMtu::Mtu1024;

    fn run(seq: &mut ResponderSeq, op: Opcode, psn: u32, payload: u32) -> Verdict {
        let info = op.info().unwrap();
        let v = seq.classify(op, &info, Psn::new(psn), payload, MTU);
        if v == Verdict::Execute {
            seq.advance(&info, 0, MTU);
        }
        v
    }

    #[test]
    fn a_three_packet_send_executes_in_order() {
        let mut s = ResponderSeq::default();
        assert_eq!(
            run(&mut s, Opcode::RC_SEND_FIRST, 0, 1024),
            Verdict::Execute
        );
        assert_eq!(s.in_progress, InProgress::Send);
        assert_eq!(
            run(&mut s, Opcode::RC_SEND_MIDDLE, 1, 1024),
            Verdict::Execute
        );
        assert_eq!(
            run(&mut s, Opcode::RC_SEND_LAST_IMM, 2, 7),
            Verdict::Execute
        );
        assert_eq!(
            (s.epsn.get(), s.msn, s.in_progress),
            (3, 1, InProgress::Nothing)
        );
    }

    #[test]
    fn duplicates_and_gaps() {
        let mut s = ResponderSeq {
            epsn: Psn::new(5),
            ..Default::default()
        };
        assert_eq!(run(&mut s, Opcode::RC_SEND_ONLY, 4, 10), Verdict::Duplicate);
        assert_eq!(
            run(&mut s, Opcode::RC_SEND_ONLY, 6, 10),
            Verdict::OutOfSequence
        );
        assert_eq!(s.epsn.get(), 5, "neither moves the state");
        // Around the 24-bit wrap.
        let mut w = ResponderSeq {
            epsn: Psn::new(0xff_ffff),
            ..Default::default()
        };
        assert_eq!(
            run(&mut w, Opcode::RC_WRITE_ONLY, 0xff_ffff, 8),
            Verdict::Execute
        );
        assert_eq!(w.epsn.get(), 0);
        assert_eq!(
            run(&mut w, Opcode::RC_WRITE_ONLY, 0xff_ffff, 8),
            Verdict::Duplicate
        );
    }

    #[test]
    fn opcode_sequence_errors() {
        let mut s = ResponderSeq::default();
        assert_eq!(
            run(&mut s, Opcode::RC_SEND_MIDDLE, 0, 1024),
            Verdict::InvalidRequest,
            "MIDDLE without FIRST"
        );
        assert_eq!(
            run(&mut s, Opcode::RC_WRITE_FIRST, 0, 1024),
            Verdict::Execute
        );
        assert_eq!(
            run(&mut s, Opcode::RC_SEND_LAST, 1, 10),
            Verdict::InvalidRequest,
            "SEND inside a WRITE"
        );
        assert_eq!(
            run(&mut s, Opcode::RC_WRITE_ONLY, 1, 10),
            Verdict::InvalidRequest,
            "new message inside one"
        );
        assert_eq!(run(&mut s, Opcode::RC_WRITE_LAST, 1, 10), Verdict::Execute);
        assert_eq!(
            run(&mut s, Opcode::RC_ACK, 2, 0),
            Verdict::InvalidRequest,
            "a response is no request"
        );
        assert_eq!(
            run(&mut s, Opcode::UD_SEND_ONLY, 2, 0),
            Verdict::InvalidRequest,
            "wrong transport"
        );
    }

    #[test]
    fn length_rules() {
        let mut s = ResponderSeq::default();
        assert_eq!(
            run(&mut s, Opcode::RC_SEND_FIRST, 0, 1000),
            Verdict::InvalidRequest,
            "short FIRST"
        );
        assert_eq!(
            run(&mut s, Opcode::RC_SEND_ONLY, 0, 1025),
            Verdict::InvalidRequest,
            "ONLY over the MTU"
        );
        assert_eq!(
            run(&mut s, Opcode::RC_SEND_ONLY, 0, 0),
            Verdict::Execute,
            "zero-length SEND"
        );
        assert_eq!(
            run(&mut s, Opcode::RC_READ_REQUEST, 1, 4),
            Verdict::InvalidRequest,
            "READ request with payload"
        );
    }

    #[test]
    fn a_read_consumes_one_psn_per_response_packet() {
        let mut s = ResponderSeq {
            epsn: Psn::new(10),
            ..Default::default()
        };
        let info = Opcode::RC_READ_REQUEST.info().unwrap();
        assert_eq!(
            s.classify(Opcode::RC_READ_REQUEST, &info, Psn::new(10), 0, MTU),
            Verdict::Execute
        );
        s.advance(&info, 3000, MTU);
        assert_eq!((s.epsn.get(), s.msn), (13, 1));
    }

    fn uc(seq: &mut ResponderSeq, op: u8, psn: u32, payload: u32) -> (UcVerdict, bool) {
        let op = Opcode(op);
        let info = op.info().unwrap();
        let d = seq.classify_uc(op, &info, Psn::new(psn), payload, MTU);
        if d.verdict == UcVerdict::Execute {
            seq.advance(&info, 0, MTU);
        }
        (d.verdict, d.abandons)
    }

    const UC_SEND_FIRST: u8 = 0x20;
    const UC_SEND_MIDDLE: u8 = 0x21;
    const UC_SEND_LAST: u8 = 0x22;
    const UC_SEND_ONLY: u8 = 0x24;
    const UC_WRITE_FIRST: u8 = 0x26;
    const UC_WRITE_LAST: u8 = 0x28;
    const UC_WRITE_ONLY_IMM: u8 = 0x2b;
    use UcVerdict::{Drop, Execute};

    #[test]
    fn uc_executes_in_order_and_starts_anywhere() {
        let mut s = ResponderSeq::default();
        // The first message sets the expected PSN: UC has no PSN handshake to trust.
        assert_eq!(uc(&mut s, UC_SEND_FIRST, 100, 1024), (Execute, false));
        assert_eq!(uc(&mut s, UC_SEND_MIDDLE, 101, 1024), (Execute, false));
        assert_eq!(uc(&mut s, UC_SEND_LAST, 102, 1), (Execute, false));
        assert_eq!(uc(&mut s, UC_WRITE_ONLY_IMM, 103, 8), (Execute, false));
        assert_eq!((s.epsn.get(), s.in_progress), (104, InProgress::Nothing));
    }

    #[test]
    fn uc_a_lost_packet_loses_its_message_only() {
        let mut s = ResponderSeq::default();
        assert_eq!(uc(&mut s, UC_SEND_FIRST, 0, 1024), (Execute, false));
        // PSN 1 lost: 2 and 3 belong to the same message and go too.
        assert_eq!(uc(&mut s, UC_SEND_MIDDLE, 2, 1024), (Drop, true));
        assert_eq!(uc(&mut s, UC_SEND_LAST, 3, 10), (Drop, false));
        // A late PSN 1 is no better: the message is gone.
        assert_eq!(uc(&mut s, UC_SEND_MIDDLE, 1, 1024), (Drop, false));
        // The next message starts over.
        assert_eq!(uc(&mut s, UC_SEND_ONLY, 4, 10), (Execute, false));
        assert_eq!(s.epsn.get(), 5);
    }

    #[test]
    fn uc_a_new_message_cuts_short_an_unfinished_one() {
        let mut s = ResponderSeq::default();
        assert_eq!(uc(&mut s, UC_SEND_FIRST, 0, 1024), (Execute, false));
        // The LAST packet (1) was lost and the next message's FIRST arrives: that message is
        // taken, the unfinished one abandoned.
        assert_eq!(uc(&mut s, UC_WRITE_FIRST, 2, 1024), (Execute, true));
        assert_eq!(s.in_progress, InProgress::Write);
        assert_eq!(uc(&mut s, UC_WRITE_LAST, 3, 5), (Execute, false));
        // A FIRST right after a FIRST, in sequence, abandons the first too.
        assert_eq!(uc(&mut s, UC_SEND_FIRST, 4, 1024), (Execute, false));
        assert_eq!(uc(&mut s, UC_SEND_FIRST, 5, 1024), (Execute, true));
    }

    #[test]
    fn uc_drops_malformed_and_foreign_packets() {
        let mut s = ResponderSeq::default();
        assert_eq!(
            uc(&mut s, UC_SEND_MIDDLE, 0, 1024),
            (Drop, false),
            "no FIRST"
        );
        assert_eq!(
            uc(&mut s, UC_SEND_ONLY, 0, 2000),
            (Drop, false),
            "over the MTU"
        );
        assert_eq!(uc(&mut s, UC_SEND_ONLY, 0, 10), (Execute, false));
        assert_eq!(uc(&mut s, UC_WRITE_FIRST, 1, 1024), (Execute, false));
        assert_eq!(
            uc(&mut s, UC_SEND_LAST, 2, 4),
            (Drop, true),
            "SEND inside a WRITE"
        );
        assert_eq!(
            uc(&mut s, Opcode::RC_SEND_ONLY.0, 3, 4),
            (Drop, false),
            "RC"
        );
        assert_eq!(uc(&mut s, UC_SEND_ONLY, 3, 4), (Execute, false));
    }

    #[test]
    fn uc_a_failed_packet_drops_the_rest_of_its_message() {
        let mut s = ResponderSeq::default();
        assert_eq!(uc(&mut s, UC_WRITE_FIRST, 0, 1024), (Execute, false));
        // Its execution failed (say, the R_Key): the caller drops the message.
        s.drop_message();
        assert_eq!(uc(&mut s, UC_WRITE_LAST, 1, 10), (Drop, false));
        assert_eq!(uc(&mut s, UC_SEND_ONLY, 2, 10), (Execute, false));
    }
}
