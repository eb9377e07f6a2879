//! Random operation sequences against the ring, checked against a `VecDeque` model.
#![cfg(not(loom))]

use proptest::prelude::*;
use pycollect_core::ring::{Consumer, Producer, RingError, RingMem};
use std::collections::{BTreeSet, VecDeque};

#[derive(Debug, Clone)]
enum Op {
    Claim,
    ClaimMany(usize),
    Commit,
    CommitAll,
    Pop,
    PopMany(usize),
    /// Release the i-th (mod len) outstanding popped slot.
    Release(usize),
    ReleaseBogus(u64),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Claim),
        1 => (1usize..5).prop_map(Op::ClaimMany),
        3 => Just(Op::Commit),
        1 => Just(Op::CommitAll),
        3 => Just(Op::Pop),
        1 => (1usize..5).prop_map(Op::PopMany),
        3 => any::<usize>().prop_map(Op::Release),
        1 => any::<u64>().prop_map(Op::ReleaseBogus),
        1 => Just(Op::Restart),
    ]
}

struct Model {
    cap: u64,
    /// Next sequence number to claim.
    next: u64,
    /// Claimed, uncommitted.
    claimed: VecDeque<u64>,
    /// Committed, not popped: (seq, generation).
    committed: VecDeque<(u64, u64)>,
    /// Popped, not released.
    popped: BTreeSet<u64>,
    /// Lowest unreleased sequence number.
    head: u64,
    generation: u64,
}

impl Model {
    fn advance_head(&mut self) {
        let lowest_live = self
            .popped
            .iter()
            .next()
            .copied()
            .or(self.committed.front().map(|c| c.0))
            .unwrap_or(self.committed_end());
        self.head = lowest_live;
    }
    fn committed_end(&self) -> u64 {
        self.claimed.front().copied().unwrap_or(self.next)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn ring_matches_model(cap_log in 0u32..4, ops in proptest::collection::vec(op(), 1..200)) {
        let cap = 1usize << cap_log;
        let mem = RingMem::new_heap(cap).unwrap();
        let mut p = Producer::new(mem.clone(), 1);
        let mut c = Consumer::new(mem.clone());
        let mut m = Model {
            cap: cap as u64, next: 0, claimed: VecDeque::new(), committed: VecDeque::new(),
            popped: BTreeSet::new(), head: 0, generation: 1,
        };
        let mut claims = VecDeque::new();
        let mut out = Vec::new();
        for op in ops {
            match op {
                Op::Claim => {
                    let free = m.cap - (m.next - m.head);
                    let got = p.claim();
                    prop_assert_eq!(got.is_some(), free > 0);
                    if let Some(cl) = got {
                        prop_assert_eq!(cl.seq, m.next);
                        prop_assert_eq!(cl.index as u64, m.next % m.cap);
                        m.claimed.push_back(m.next);
                        m.next += 1;
                        claims.push_back(cl);
                    }
                }
                Op::ClaimMany(n) if m.claimed.is_empty() => {
                    // Batches are committed at once; single claims pending would have to be
                    // committed first (OutOfOrder), which `commit_out_of_order` covers.
                    let free = m.cap - (m.next - m.head);
                    let want = (n as u64).min(free);
                    match p.claim_many(n) {
                        None => prop_assert_eq!(want, 0),
                        Some(b) => {
                            prop_assert_eq!(b.count as u64, want);
                            prop_assert_eq!(b.first_seq, m.next);
                            for i in 0..want {
                                m.committed.push_back((m.next + i, m.generation));
                            }
                            m.next += want;
                            p.commit_many(b, 0).unwrap();
                        }
                    }
                }
                Op::ClaimMany(_) => {}
                Op::Commit => {
                    if let Some(cl) = claims.pop_front() {
                        let seq = m.claimed.pop_front().unwrap();
                        p.commit(cl).unwrap();
                        m.committed.push_back((seq, m.generation));
                    }
                }
                Op::CommitAll => {
                    while let Some(cl) = claims.pop_front() {
                        let seq = m.claimed.pop_front().unwrap();
                        p.commit(cl).unwrap();
                        m.committed.push_back((seq, m.generation));
                    }
                }
                Op::Pop => {
                    let got = c.try_pop().unwrap();
                    match m.committed.pop_front() {
                        None => prop_assert_eq!(got, None),
                        Some((seq, generation)) => {
                            let s = got.unwrap();
                            prop_assert_eq!((s.seq, s.generation), (seq, generation));
                            m.popped.insert(seq);
                        }
                    }
                }
                Op::PopMany(n) => {
                    let k = c.pop_many(n, &mut out).unwrap();
                    prop_assert_eq!(k, n.min(m.committed.len()));
                    for s in &out {
                        let (seq, generation) = m.committed.pop_front().unwrap();
                        prop_assert_eq!((s.seq, s.generation), (seq, generation));
                        m.popped.insert(seq);
                    }
                }
                Op::Release(i) => {
                    if !m.popped.is_empty() {
                        let seq = *m.popped.iter().nth(i % m.popped.len()).unwrap();
                        c.release(seq).unwrap();
                        m.popped.remove(&seq);
                        m.advance_head();
                        prop_assert_eq!(mem.ctl().head(), m.head);
                    }
                }
                Op::ReleaseBogus(seq) => {
                    if !m.popped.contains(&seq) {
                        let is_not_outstanding = matches!(c.release(seq), Err(RingError::NotOutstanding { .. }));
                        prop_assert!(is_not_outstanding);
                    }
                }
                Op::Restart => {
                    // The producer dies with claims in flight; a new generation continues.
                    m.generation += 1;
                    p = Producer::new(mem.clone(), m.generation);
                    if let Some(&first) = m.claimed.front() {
                        m.next = first;
                    }
                    m.claimed.clear();
                    claims.clear();
                }
            }
            prop_assert_eq!(mem.ctl().tail(), m.committed_end());
            prop_assert_eq!(c.outstanding(), m.popped.len() as u64);
        }
    }
}
