use std::collections::BTreeMap;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::placement::backend::FakeBackend;
use crate::placement::memory::MemPolicy;

const PAGE: u64 = 4096;

/// A fake memory whose page `base + i·PAGE` is on `nodes[i]` (`None`: never
/// touched).
fn fake_memory(base: u64, nodes: &[Option<NodeId>]) -> FakeBackend {
    let fake = FakeBackend::new(PAGE);
    let (pages, targets): (Vec<u64>, Vec<NodeId>) = nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| n.map(|n| (base + i as u64 * PAGE, n)))
        .unzip();
    fake.move_to(&pages, &targets).unwrap();
    fake
}

fn plain(base: u64, pages: u32, node: NodeId) -> PageRange {
    PageRange {
        base,
        pages,
        node,
        interleave: None,
    }
}

fn interleaved(base: u64, pages: u32, node: NodeId, set: &[NodeId]) -> PageRange {
    PageRange {
        base,
        pages,
        node,
        interleave: Some(NodeSet::of(set.iter().copied())),
    }
}

/// Seed 002, Fig. 5: ten 4 KiB pages 0x1000..=0xa000 on sockets S1 (node
/// 0) and S2 (node 1). [0x2000, 0x6000) is an index vector partitioned
/// over S1 and S2, [0x8000, 0xb000) an interleaved dictionary.
#[test]
fn figure_5_example() {
    let (s1, s2) = (Some(0), Some(1));
    let fake = fake_memory(0x1000, &[s2, s1, s1, s2, s2, s1, s2, s1, s2, s1]);
    let mut psm = PageSocketMapping::new(PAGE);
    // Unaligned on purpose: the PSM widens ranges to page boundaries.
    let report = psm.add(0x2010, 0x6000 - 0x2010, &fake).unwrap();
    assert_eq!(
        report,
        AddReport {
            added: 4,
            absent: 0
        }
    );
    psm.add(0x8000, 0xb000 - 0x8000, &fake).unwrap();
    assert_eq!(
        psm.ranges(),
        &[
            plain(0x2000, 2, 0),
            plain(0x4000, 2, 1),
            interleaved(0x8000, 3, 0, &[0, 1]),
        ]
    );
    assert_eq!(
        (psm.pages_on(0), psm.pages_on(1), psm.total_pages()),
        (4, 3, 7)
    );
    assert_eq!(psm.majority_node(), Some(0));
    assert_eq!(psm.size_bits(), 360 * 3 + 8192);
    let expected = [
        (0x1000, None),
        (0x2000, s1),
        (0x3000, s1),
        (0x4000, s2),
        (0x5000, s2),
        (0x6000, None),
        (0x7000, None),
        (0x8000, s1),
        (0x9000, s2),
        (0xa000, s1),
        (0xb000, None),
    ];
    for (page, node) in expected {
        assert_eq!(psm.lookup(page), node, "page {page:#x}");
        assert_eq!(psm.lookup(page + 0xabc), node, "inside page {page:#x}");
    }
    // Adding the whole piece tracks only the three pages not tracked yet.
    let again = psm.add(0x1000, 0xa000, &fake).unwrap();
    assert_eq!(
        again,
        AddReport {
            added: 3,
            absent: 0
        }
    );
    assert_eq!(psm.total_pages(), 10);
}

/// Seed 002 §4.3's worked sizes for a column on a 32-socket machine, each
/// component (index vector, dictionary, index of two vectors) with its own
/// PSM, built here from real ranges rather than counted by hand.
#[test]
fn seed_worked_sizes() {
    let fake = FakeBackend::new(PAGE);
    let placed = |base: u64, pages: u64, placement: MemPolicy| {
        fake.bind(base, pages * PAGE, &placement).unwrap();
        let mut psm = PageSocketMapping::new(PAGE);
        psm.add(base, pages * PAGE, &fake).unwrap();
        psm
    };
    let all = MemPolicy::Interleave(NodeSet::first(32));
    let two_vectors = |psm: &mut PageSocketMapping, other: PageSocketMapping| {
        psm.union(&other).unwrap();
    };

    // Wholly on one socket: r = 1 (IV), 1 (dictionary), 2 (IX).
    let iv = placed(0x10_0000, 64, MemPolicy::OnNode(5));
    let dict = placed(0x20_0000, 8, MemPolicy::OnNode(5));
    let mut ix = placed(0x30_0000, 4, MemPolicy::OnNode(5));
    two_vectors(&mut ix, placed(0x40_0000, 4, MemPolicy::OnNode(5)));
    assert_eq!(
        [iv.ranges().len(), dict.ranges().len(), ix.ranges().len()],
        [1, 1, 2]
    );
    let whole = iv.size_bits() + dict.size_bits() + ix.size_bits();
    // 360·4 + 3·8192 = 26016 bits = 3252 bytes, the seed's "3KiB".
    assert_eq!(whole, 26016);

    // IVP: the IV in 32 parts, one per socket; dictionary and IX
    // interleaved over all 32 (r = 32, 1, 2).
    let mut iv = PageSocketMapping::new(PAGE);
    for part in 0..32u64 {
        let base = 0x100_0000 + part * 2 * PAGE;
        fake.bind(base, 2 * PAGE, &MemPolicy::OnNode(part as NodeId))
            .unwrap();
        iv.add(base, 2 * PAGE, &fake).unwrap();
    }
    let dict = placed(0x200_0000, 100, all);
    let mut ix = placed(0x300_0000, 40, all);
    two_vectors(&mut ix, placed(0x400_0000, 40, all));
    assert_eq!(
        [iv.ranges().len(), dict.ranges().len(), ix.ranges().len()],
        [32, 1, 2]
    );
    let ivp = iv.size_bits() + dict.size_bits() + ix.size_bits();
    // 360·35 + 3·8192 = 37176 bits = 4647 bytes (4.5 KiB; the seed rounds
    // to "5KiB").
    assert_eq!(ivp, 37176);

    // PP with 32 parts, each wholly on a socket: 32 × 26016 bits =
    // 104064 bytes ≈ 101.6 KiB, the seed's "around 102KiB".
    assert_eq!(32 * whole / 8, 104_064);
}

#[test]
fn interleave_detection_follows_the_cycle_and_closes_where_it_breaks() {
    let nodes = |v: &[u8]| v.iter().map(|&n| Some(n)).collect::<Vec<_>>();
    let track = |v: &[u8]| {
        let fake = fake_memory(0, &nodes(v));
        let mut psm = PageSocketMapping::new(PAGE);
        psm.add(0, v.len() as u64 * PAGE, &fake).unwrap();
        psm.ranges().to_vec()
    };
    // Three nodes cycling for eight pages, then a break into a plain run.
    assert_eq!(
        track(&[0, 1, 2, 0, 1, 2, 0, 1, 1, 1, 2]),
        vec![
            interleaved(0, 8, 0, &[0, 1, 2]),
            plain(8 * PAGE, 2, 1),
            plain(10 * PAGE, 1, 2),
        ]
    );
    // A cycle starting mid-set, after a plain run.
    assert_eq!(
        track(&[4, 4, 7, 2, 4, 7, 2]),
        vec![plain(0, 2, 4), interleaved(2 * PAGE, 5, 7, &[2, 4, 7])]
    );
    // A cycle that is not the set in ascending order is no interleave
    // pattern the PSM can express: single pages.
    assert_eq!(track(&[0, 2, 1, 0, 2, 1]).len(), 6);
    // Two alternating pages do not recur yet: two plain ranges.
    assert_eq!(track(&[3, 1]), vec![plain(0, 1, 3), plain(PAGE, 1, 1)]);
    // A node repeated inside the cycle breaks it at once.
    assert_eq!(track(&[0, 1, 1, 0]).len(), 3);
    // Holes (never touched pages) are left out and split ranges.
    let fake = fake_memory(0, &[Some(1), None, Some(1), Some(1)]);
    let mut psm = PageSocketMapping::new(PAGE);
    assert_eq!(
        psm.add(0, 4 * PAGE, &fake).unwrap(),
        AddReport {
            added: 3,
            absent: 1
        }
    );
    assert_eq!(psm.ranges(), &[plain(0, 1, 1), plain(2 * PAGE, 2, 1)]);
}

#[test]
fn ranges_longer_than_a_32_bit_count_are_split() {
    let run = interleaved(0, 0, 1, &[1, 2, 3]);
    let mut out = Vec::new();
    push_capped(&mut out, run, MAX_RANGE_PAGES + 5, PAGE);
    assert_eq!(out.len(), 2);
    assert_eq!(u64::from(out[0].pages), MAX_RANGE_PAGES);
    assert_eq!(out[1].pages, 5);
    assert_eq!(out[1].base, MAX_RANGE_PAGES * PAGE);
    // 2^32 - 1 ≡ 0 (mod 3): the second range starts where the first did.
    assert_eq!(out[1].node, 1);
    assert!(!out[0].continues_into(&out[1], PAGE));
}

#[test]
fn add_remove_union_subset_round_trips() {
    let nodes: Vec<Option<NodeId>> = (0..40).map(|i| Some((i / 5 % 3) as NodeId)).collect();
    let fake = fake_memory(0x40_0000, &nodes);
    let base = 0x40_0000;
    let mut whole = PageSocketMapping::new(PAGE);
    whole.add(base, 40 * PAGE, &fake).unwrap();
    assert_eq!(whole.ranges().len(), 8);

    // Added in pieces, in any order, it is the same mapping.
    let mut pieces = PageSocketMapping::new(PAGE);
    for (from, to) in [(30, 40), (3, 12), (0, 4), (12, 30)] {
        pieces
            .add(base + from * PAGE, (to - from) * PAGE, &fake)
            .unwrap();
    }
    assert_eq!(pieces, whole);

    // A subset and the rest make the whole again.
    let middle = whole.subset(base + 7 * PAGE + 1, 13 * PAGE);
    assert_eq!(middle.total_pages(), 14);
    let mut rest = whole.clone();
    rest.subtract(&middle).unwrap();
    assert_eq!(rest.total_pages(), 26);
    assert_eq!(rest.lookup(base + 10 * PAGE), None);
    rest.union(&middle).unwrap();
    assert_eq!(rest, whole);

    // Removing everything leaves an empty mapping with an empty summary.
    let mut gone = whole.clone();
    assert_eq!(gone.remove(base, 40 * PAGE), 40);
    assert!(gone.is_empty());
    assert_eq!(gone.total_pages(), 0);
    assert_eq!(gone.majority_node(), None);
    assert_eq!(gone.size_bits(), 8192);

    let other = PageSocketMapping::new(2 * PAGE);
    assert!(matches!(
        gone.union(&other),
        Err(PlacementError::PageSizeMismatch(4096, 8192))
    ));
}

#[test]
fn move_and_interleave_a_range_through_the_backend() {
    let base = 0x80_0000;
    let fake = fake_memory(base, &[Some(0); 16]);
    let mut psm = PageSocketMapping::new(PAGE);
    psm.add(base, 16 * PAGE, &fake).unwrap();
    assert_eq!(psm.ranges(), &[plain(base, 16, 0)]);

    psm.interleave_range(base + 4 * PAGE, 12 * PAGE, &NodeSet::of([1, 2, 3]), &fake)
        .unwrap();
    assert_eq!(
        psm.ranges(),
        &[
            plain(base, 4, 0),
            interleaved(base + 4 * PAGE, 12, 1, &[1, 2, 3])
        ]
    );
    assert_eq!(
        (0..4).map(|n| psm.pages_on(n)).collect::<Vec<_>>(),
        vec![4, 4, 4, 4]
    );
    assert_eq!(psm.lookup(base + 9 * PAGE), Some(3));

    psm.move_range(base, 8 * PAGE, 7, &fake).unwrap();
    assert_eq!(psm.ranges()[0], plain(base, 8, 7));
    assert_eq!(
        psm.ranges()[1],
        interleaved(base + 8 * PAGE, 8, 2, &[1, 2, 3])
    );
    assert_eq!(psm.majority_node(), Some(7));
    assert_eq!(fake.query(&[base]).unwrap(), vec![Some(7)]);
    assert!(psm
        .interleave_range(base, PAGE, &NodeSet::new(), &fake)
        .is_err());
}

// ----- property test against a naive page → node map -----

const BASE: u64 = 0x100_0000;
const PAGES: u64 = 128;

type Model = BTreeMap<u64, NodeId>;

/// Random memory: holes, plain runs, interleaved runs and noise.
fn random_memory(rng: &mut SmallRng) -> Vec<Option<NodeId>> {
    let mut nodes = Vec::new();
    while (nodes.len() as u64) < PAGES {
        let len = rng.random_range(1..14);
        match rng.random_range(0..4) {
            0 => nodes.extend(std::iter::repeat_n(None, len)),
            1 => nodes.extend(std::iter::repeat_n(Some(rng.random_range(0..6)), len)),
            2 => {
                let set = random_set(rng);
                let start = set.nth(rng.random_range(0..set.len())).unwrap();
                nodes.extend((0..len as u64).map(|i| Some(set.step(start, i))));
            }
            _ => nodes.extend((0..len).map(|_| Some(rng.random_range(0..6)))),
        }
    }
    nodes.truncate(PAGES as usize);
    nodes
}

fn random_set(rng: &mut SmallRng) -> NodeSet {
    let mut set = NodeSet::of([rng.random_range(0..8)]);
    for _ in 0..rng.random_range(1..4) {
        set.insert(rng.random_range(0..8));
    }
    set
}

/// A random byte range around the tracked area, unaligned.
fn random_range(rng: &mut SmallRng) -> (u64, u64) {
    let addr = BASE - 2 * PAGE + rng.random_range(0..(PAGES + 4) * PAGE);
    (addr, rng.random_range(0..24 * PAGE))
}

/// The pages `[addr, addr + len)` overlaps.
fn model_pages(addr: u64, len: u64) -> Vec<u64> {
    let start = addr / PAGE * PAGE;
    let end = (addr + len).div_ceil(PAGE) * PAGE;
    (start..end).step_by(PAGE as usize).collect()
}

fn model_add(model: &mut Model, fake: &FakeBackend, addr: u64, len: u64) -> u64 {
    let mut added = 0;
    for p in model_pages(addr, len) {
        if let (false, Some(n)) = (model.contains_key(&p), fake.query(&[p]).unwrap()[0]) {
            model.insert(p, n);
            added += 1;
        }
    }
    added
}

fn check(psm: &PageSocketMapping, model: &Model) {
    let ranges = psm.ranges();
    for pair in ranges.windows(2) {
        assert!(pair[0].end(PAGE) <= pair[1].base, "{pair:?}");
        assert!(!pair[0].continues_into(&pair[1], PAGE), "unmerged {pair:?}");
    }
    assert!(ranges.iter().all(|r| r.pages > 0));
    let pages: Model = psm.pages().collect();
    assert_eq!(&pages, model);
    let mut counts = [0u64; MAX_NODES];
    for &n in model.values() {
        counts[usize::from(n)] += 1;
    }
    assert_eq!(psm.summary(), &counts);
    for i in 0..PAGES + 8 {
        let page = BASE - 4 * PAGE + i * PAGE;
        let expected = model.get(&page).copied();
        assert_eq!(psm.lookup(page), expected);
        assert_eq!(psm.lookup(page + PAGE - 1), expected);
    }
}

#[test]
fn random_operations_agree_with_a_naive_page_map() {
    let mut interleaved_seen = 0;
    for seed in 0..24 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let fake = fake_memory(BASE, &random_memory(&mut rng));
        let mut psm = PageSocketMapping::new(PAGE);
        let mut model = Model::new();
        for _ in 0..120 {
            let (addr, len) = random_range(&mut rng);
            match rng.random_range(0..8) {
                0 | 1 => {
                    let report = psm.add(addr, len, &fake).unwrap();
                    assert_eq!(report.added, model_add(&mut model, &fake, addr, len));
                }
                2 => {
                    let removed = psm.remove(addr, len);
                    let pages = model_pages(addr, len);
                    let before = model.len();
                    model.retain(|p, _| !pages.contains(p));
                    assert_eq!(removed, (before - model.len()) as u64);
                }
                3 | 4 => {
                    if rng.random_bool(0.5) {
                        let node = rng.random_range(0..8);
                        psm.move_range(addr, len, node, &fake).unwrap();
                    } else {
                        let set = random_set(&mut rng);
                        psm.interleave_range(addr, len, &set, &fake).unwrap();
                    }
                    let pages = model_pages(addr, len);
                    model.retain(|p, _| !pages.contains(p));
                    model_add(&mut model, &fake, addr, len);
                }
                5 | 6 => {
                    let mut other = PageSocketMapping::new(PAGE);
                    let mut other_model = Model::new();
                    for _ in 0..rng.random_range(1..4) {
                        let (a, l) = random_range(&mut rng);
                        other.add(a, l, &fake).unwrap();
                        model_add(&mut other_model, &fake, a, l);
                    }
                    check(&other, &other_model);
                    if rng.random_bool(0.5) {
                        psm.union(&other).unwrap();
                        for (p, n) in other_model {
                            model.entry(p).or_insert(n);
                        }
                    } else {
                        psm.subtract(&other).unwrap();
                        model.retain(|p, _| !other_model.contains_key(p));
                    }
                }
                _ => {
                    let sub = psm.subset(addr, len);
                    let pages = model_pages(addr, len);
                    let expected: Model = model
                        .iter()
                        .filter(|(p, _)| pages.contains(p))
                        .map(|(&p, &n)| (p, n))
                        .collect();
                    check(&sub, &expected);
                }
            }
            check(&psm, &model);
            interleaved_seen += psm
                .ranges()
                .iter()
                .filter(|r| r.interleave.is_some())
                .count();
        }
    }
    // The random memory and the interleave moves do exercise patterns.
    assert!(interleaved_seen > 100, "{interleaved_seen}");
}
