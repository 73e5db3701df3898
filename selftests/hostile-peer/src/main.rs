//! hostile-peer: sends RoCEv2 packets with valid ICRCs, built from the live state of QPs that
//! trust this network namespace, with mutated opcodes, sources, P_Keys, PSNs, RETH/AETH/atomic
//! fields, lengths and truncations (see `mutate.rs`), and learns the PSNs the targets expect
//! from the ACKs and NAKs they send back. Compiled so that a run can send a million packets
//! under TCG; used by selftests/rxe_rs_hostile_peer.sh.
//!
//! Usage: hostile-peer SRC_IP DST_IP COUNT SEED VICTIM_QPNS TARGET...
//!   VICTIM_QPNS  comma-separated QP numbers it knows but that do not trust it
//!   TARGET       QPN:PEER_QPN:RKEY:VA:SIZE of a QP whose peer it is, with its MR
//! Prints one JSON line of what it sent: {"sent": N, "bad_icrc": N, "truncated": N, ...}.

mod mutate;
mod raw;
mod rng;

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::Duration;

use mutate::{Mutator, Stats, Target};
use raw::{Sender, Sniffer};
use rng::Rng;

/// Packets between two looks at what the targets sent us.
const LEARN_EVERY: u64 = 64;
/// Packets between two short pauses, which let the victims' and targets' own traffic through:
/// a veth backlog overrun would only test the backlog.
const PAUSE_EVERY: u64 = 256;
const PAUSE: Duration = Duration::from_millis(2);

fn usage() -> ExitCode {
    eprintln!(
        "usage: hostile-peer SRC_IP DST_IP COUNT SEED VICTIM_QPNS QPN:PEER_QPN:RKEY:VA:SIZE..."
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 6 {
        return usage();
    }
    let (Ok(src), Ok(dst), Ok(count), Ok(seed)) = (
        args[0].parse::<Ipv4Addr>(),
        args[1].parse::<Ipv4Addr>(),
        args[2].parse::<u64>(),
        args[3].parse::<u64>(),
    ) else {
        return usage();
    };
    let Ok(victims) = args[4]
        .split(',')
        .map(str::parse)
        .collect::<Result<Vec<u32>, _>>()
    else {
        return usage();
    };
    let Some(targets) = args[5..]
        .iter()
        .map(|t| Target::parse(t))
        .collect::<Option<Vec<_>>>()
    else {
        return usage();
    };
    let (sender, sniffer) = match (Sender::new(), Sniffer::new()) {
        (Ok(s), Ok(n)) => (s, n),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("hostile-peer: raw socket: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut m = Mutator {
        src,
        dst,
        targets,
        victims,
        rng: Rng::new(seed),
        stats: Stats::default(),
    };
    let mut pkt = Vec::with_capacity(1500);
    let mut heard = vec![0u8; 65536];
    let mut learn = |m: &mut Mutator| {
        while let Some(n) = sniffer.recv(&mut heard) {
            m.learn(&heard[..n]);
        }
    };
    for i in 0..count {
        if i % LEARN_EVERY == 0 {
            learn(&mut m);
        }
        let to = m.next(&mut pkt);
        match sender.send(&pkt, to) {
            Ok(()) => m.stats.sent += 1,
            Err(_) => m.stats.send_errors += 1,
        }
        if i % PAUSE_EVERY == PAUSE_EVERY - 1 {
            std::thread::sleep(PAUSE);
        }
    }
    learn(&mut m);
    println!("{}", m.stats.json());
    ExitCode::SUCCESS
}
