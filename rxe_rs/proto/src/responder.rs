//! The responder's first decision about an incoming request (IBA 9.7.5.1, 9.7.5.2): execute it,
//! treat it as a duplicate, NAK it as out of sequence, or NAK it as an invalid request, and how
//! its state moves on after execution.
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

fn continues(op: Opcode, in_progress: InProgress) -> bool {
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
        // FIRST and MIDDLE packets are exactly one MTU; LAST and ONLY at most one.
        let mtu = mtu.bytes();
        let length_ok = if info.is_last {
            payload <= mtu
        } else {
            payload == mtu
        };
        if info.has_payload && !length_ok || !info.has_payload && payload != 0 {
            return Verdict::InvalidRequest;
        }
        Verdict::Execute
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
}
