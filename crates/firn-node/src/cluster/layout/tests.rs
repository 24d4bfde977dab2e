//! The layout's placement, moves, keyspaces and placements, checked as plain values.
use super::*;

fn three() -> BTreeMap<NodeId, String> {
    parse_peers("1=a:1,2=b:2,3=c:3").unwrap()
}

#[test]
fn slots_are_split_evenly_and_every_slot_has_exactly_one_shard() {
    let layout = ClusterLayout::new(three(), 5, 3).unwrap();
    let mut covered = 0u32;
    for s in &layout.shards {
        covered += (s.slots.end - s.slots.start) as u32;
        assert_eq!(s.replicas.len(), 3);
    }
    assert_eq!(covered, SLOT_COUNT as u32);
    for slot in 0..SLOT_COUNT {
        let shard = layout.shard_of_slot(slot);
        assert!(layout.shard(shard).slots.contains(&slot), "slot {slot}");
    }
}

#[test]
fn replicas_and_first_replicas_spread_over_nodes() {
    let layout = ClusterLayout::new(three(), 3, 2).unwrap();
    let firsts: Vec<NodeId> = layout.shards.iter().map(|s| s.replicas[0]).collect();
    assert_eq!(firsts, vec![1, 2, 3]);
    let capped = ClusterLayout::new(three(), 1, 9).unwrap();
    assert_eq!(
        capped.shards[0].replicas.len(),
        3,
        "replication is capped by the node count"
    );
}

#[test]
fn an_empty_layout_routes_no_key_and_does_not_panic() {
    let empty = ClusterLayout::empty();
    assert!(!empty.is_routable());
    assert_eq!(empty.shard_of_key(b"k"), 0);
    assert!(empty.shard_ids().next().is_none());
}

#[test]
fn bad_peer_lists_are_refused() {
    assert!(parse_peers("1=a:1,1=b:2").is_err());
    assert!(parse_peers("x=a:1").is_err());
    assert!(parse_peers("0=a:1").is_err());
    assert!(parse_peers("1").is_err());
    assert!(ClusterLayout::new(three(), 0, 3).is_err());
}

/// Applies moves until the layout settles, as the meta leader would, checking every
/// step keeps at least one replica per shard.
fn settle(layout: &mut ClusterLayout) -> usize {
    let mut steps = 0;
    while let Some((id, m)) = layout.next_move() {
        let s = &mut layout.shards[id as usize];
        if let Some(a) = m.add {
            assert!(!s.replicas.contains(&a), "adds a replica already there");
            s.replicas.push(a);
        }
        if let Some(r) = m.remove {
            s.replicas.retain(|n| *n != r);
        }
        assert!(!s.replicas.is_empty(), "a shard lost its last replica");
        s.moving = None;
        steps += 1;
        assert!(steps < 100, "placement does not settle");
    }
    steps
}

fn loads(layout: &ClusterLayout) -> Vec<usize> {
    layout.active().iter().map(|n| layout.load(*n)).collect()
}

#[test]
fn a_joining_node_takes_an_even_share() {
    let mut layout = ClusterLayout::new(three(), 6, 3).unwrap();
    assert_eq!(layout.next_move(), None, "a new layout is settled");
    layout.nodes.insert(4, "d:4".into());
    let steps = settle(&mut layout);
    assert!(steps >= 4, "node 4 took replicas ({steps} moves)");
    let l = loads(&layout);
    assert!(
        l.iter().max().unwrap() - l.iter().min().unwrap() <= 1,
        "{l:?}"
    );
    assert!(layout.shards.iter().all(|s| s.replicas.len() == 3));
}

/// A move that adds a replica on a node then removed can never finish; it is the one
/// stranded move, and once abandoned the node drains. Before, the move came first in every
/// round's order and the removed node never drained.
#[test]
fn a_move_onto_a_removed_node_is_stranded_and_once_abandoned_the_node_drains() {
    let mut layout = ClusterLayout::new(three(), 6, 3).unwrap();
    layout.nodes.insert(4, "d:4".into());
    let (shard, step) = layout.next_move().expect("node 4 gets a replica");
    assert_eq!(step.add, Some(4));
    layout.shards[shard as usize].moving = Some(step);
    assert_eq!(layout.stranded_move(), None, "node 4 is still active");
    layout.leaving.insert(4);
    assert_eq!(layout.stranded_move(), Some((shard, step)));
    assert!(
        layout.drained().is_empty(),
        "node 4 still holds the move's replica"
    );
    // What the steward does: the move is forgotten.
    layout.shards[shard as usize].moving = None;
    assert_eq!(layout.stranded_move(), None);
    settle(&mut layout);
    assert_eq!(layout.drained(), vec![4]);
    assert!(layout.shards.iter().all(|s| s.replicas.len() == 3));
}

#[test]
fn a_leaving_node_is_drained_and_replication_is_kept() {
    let mut four = three();
    four.insert(4, "d:4".into());
    let mut layout = ClusterLayout::new(four, 4, 3).unwrap();
    layout.leaving.insert(2);
    settle(&mut layout);
    assert_eq!(layout.load(2), 0);
    assert_eq!(layout.drained(), vec![2]);
    for s in &layout.shards {
        assert_eq!(s.replicas.len(), 3);
        assert!(!s.replicas.contains(&2));
    }
}

#[test]
fn a_single_node_grows_to_the_replication_factor() {
    let mut layout = ClusterLayout::new(BTreeMap::from([(1, "a:1".into())]), 1, 3).unwrap();
    layout.nodes.insert(2, "b:2".into());
    settle(&mut layout);
    assert_eq!(layout.shards[0].replicas, vec![1, 2]);
    layout.nodes.insert(3, "c:3".into());
    layout.nodes.insert(4, "d:4".into());
    settle(&mut layout);
    assert_eq!(layout.shards[0].replicas.len(), 3);
    // Removing down to one node keeps the last replica where it is.
    layout.leaving.extend([1, 2, 3]);
    settle(&mut layout);
    assert_eq!(layout.shards[0].replicas, vec![4]);
}

#[test]
fn keyspaces_are_checked_like_a_shard_checks_them_and_repairs_are_exact() {
    use firn_model::KeyspaceMode;
    let mut layout = ClusterLayout::new(three(), 3, 3).unwrap();
    let mut spec = KeyspaceSpec::default_keyspace();
    spec.prefix = "cam/".into();
    spec.mode = KeyspaceMode::Latest;
    assert!(
        layout
            .define_keyspace(KeyspaceDef::new(spec.clone()), false)
            .unwrap()
    );
    assert!(
        !layout
            .define_keyspace(KeyspaceDef::new(spec.clone()), false)
            .unwrap(),
        "same again: no change"
    );
    let mut root = KeyspaceSpec::default_keyspace();
    assert!(
        layout
            .define_keyspace(KeyspaceDef::new(root.clone()), true)
            .is_err(),
        "\"\" stays"
    );
    let mut missing = spec.clone();
    missing.prefix = "nope/".into();
    assert!(matches!(
        layout.define_keyspace(KeyspaceDef::new(missing), true),
        Err(FirnError::KeyspaceNotFound(_))
    ));
    let want = layout.keyspaces.clone().unwrap();
    assert_eq!(want.len(), 2);
    // A shard that missed the definition gets it; one with a stale extra loses it.
    root.mode = KeyspaceMode::Versioned;
    let mut extra = spec.clone();
    extra.prefix = "old/".into();
    let fixes = keyspace_repairs(&want, &[root.clone(), extra]);
    assert_eq!(fixes.len(), 2, "{fixes:?}");
    assert!(matches!(&fixes[0], Op::System(SystemOp::KeyspaceCreate(s)) if s.prefix == "cam/"));
    assert!(matches!(&fixes[1], Op::System(SystemOp::KeyspaceDrop { prefix }) if prefix == "old/"));
    assert!(keyspace_repairs(&want, &want).is_empty());
    let mut unadopted = layout.clone();
    unadopted.keyspaces = None;
    assert!(matches!(
        unadopted.define_keyspace(KeyspaceDef::new(spec), false),
        Err(FirnError::TryAgain(_))
    ));
}

#[test]
fn a_placement_is_kept_beside_its_keyspace_and_goes_with_it() {
    use firn_model::Follow;
    let mut layout = ClusterLayout::new(three(), 3, 3).unwrap();
    let spec = |prefix: &str| KeyspaceSpec {
        prefix: prefix.into(),
        ..KeyspaceSpec::default_keyspace()
    };
    let local = KeyspacePlacement {
        local: true,
        follow: Follow::On,
    };
    let def = KeyspaceDef {
        spec: spec("s/"),
        placement: local,
    };
    assert!(layout.define_keyspace(def.clone(), false).unwrap());
    assert!(!layout.define_keyspace(def, false).unwrap(), "same again");
    assert_eq!(layout.placement_for(b"s/1"), local);
    assert_eq!(layout.placement_for(b"t/1"), KeyspacePlacement::default());
    // A longer prefix with the default placement overrides the shorter one.
    layout
        .define_keyspace(KeyspaceDef::new(spec("s/cold/")), false)
        .unwrap();
    assert_eq!(
        layout.placement_for(b"s/cold/1"),
        KeyspacePlacement::default()
    );
    assert!(
        !layout.placements.contains_key("s/cold/"),
        "defaults are not stored"
    );
    // Defining it again without options resets the placement.
    assert!(
        layout
            .define_keyspace(KeyspaceDef::new(spec("s/")), false)
            .unwrap()
    );
    assert_eq!(layout.placement_for(b"s/1"), KeyspacePlacement::default());
    let pinned = KeyspacePlacement {
        local: false,
        follow: Follow::Pin(2),
    };
    layout
        .define_keyspace(
            KeyspaceDef {
                spec: spec("p/"),
                placement: pinned,
            },
            false,
        )
        .unwrap();
    let defs = layout.keyspace_defs().unwrap();
    assert_eq!(
        defs.iter()
            .find(|d| d.spec.prefix == "p/")
            .unwrap()
            .placement,
        pinned
    );
    layout
        .define_keyspace(KeyspaceDef::new(spec("p/")), true)
        .unwrap();
    assert!(layout.placements.is_empty(), "{:?}", layout.placements);
}

#[test]
fn meta_voters_are_an_odd_number_of_active_nodes() {
    let mut layout = ClusterLayout::new(three(), 1, 3).unwrap();
    assert_eq!(
        layout.meta_voters(&BTreeSet::from([1])),
        BTreeSet::from([1, 2, 3])
    );
    layout.nodes.insert(4, "d:4".into());
    assert_eq!(
        layout.meta_voters(&BTreeSet::from([2, 3, 4])),
        BTreeSet::from([2, 3, 4])
    );
    layout.leaving.insert(3);
    assert_eq!(
        layout.meta_voters(&BTreeSet::from([2, 3, 4])),
        BTreeSet::from([2, 4, 1])
    );
    layout.leaving.insert(4);
    assert_eq!(layout.meta_voters(&BTreeSet::from([2, 3, 4])).len(), 1);
}

fn memory_def(prefix: &str) -> KeyspaceDef {
    KeyspaceDef::new(KeyspaceSpec {
        prefix: prefix.into(),
        durability: Durability::Memory,
        ..KeyspaceSpec::default_keyspace()
    })
}

#[test]
fn a_memory_keyspace_adds_a_memory_lane_and_its_keys_go_there() {
    let mut layout = ClusterLayout::new(three(), 3, 3).unwrap();
    assert!(!layout.has_memory_shards());
    assert_eq!(
        layout.lane(Durability::Memory),
        layout.lane(Durability::Disk)
    );
    let before = layout.shard_of_key(b"m/1");

    assert!(layout.define_keyspace(memory_def("m/"), false).unwrap());
    // One memory shard beside each disk shard: same slots, same replicas, new ids.
    assert_eq!(layout.shards.len(), 6);
    let (disk, memory) = (
        layout.lane(Durability::Disk),
        layout.lane(Durability::Memory),
    );
    assert_eq!(disk.len(), 3);
    for (d, m) in disk.iter().zip(memory) {
        assert_eq!(
            (d.slots.clone(), &d.replicas),
            (m.slots.clone(), &m.replicas)
        );
        assert_eq!(m.durability, Durability::Memory);
        assert_eq!(m.formed_by, m.replicas.first().copied());
        assert_eq!(layout.shard(m.id), m, "a shard's id is its place");
    }
    // A key of the memory keyspace goes to the memory shard of its slot; others, and logs
    // and groups by name, stay on the disk shards.
    let m = layout.shard_of_key(b"m/1");
    assert_eq!(layout.shard(m).durability, Durability::Memory);
    assert_eq!(layout.shard(m).slots, layout.shard(before).slots);
    assert_eq!(
        layout.shard_of_key(b"d/1"),
        layout.shard_of_slot(slot_of(b"d/1"))
    );
    assert_eq!(layout.shard_of_name(b"m/1"), before);
    assert_eq!(layout.durability_for(b"m/1"), Durability::Memory);
    assert_eq!(layout.durability_for(b"m"), Durability::Disk);

    // A second memory keyspace adds nothing; a disk keyspace inside a memory one wins for
    // its keys (the longest prefix).
    assert!(layout.define_keyspace(memory_def("n/"), false).unwrap());
    let inner = KeyspaceDef::new(KeyspaceSpec {
        prefix: "m/disk/".into(),
        ..KeyspaceSpec::default_keyspace()
    });
    assert!(layout.define_keyspace(inner, false).unwrap());
    assert_eq!(layout.shards.len(), 6);
    assert_eq!(layout.durability_for(b"m/disk/1"), Durability::Disk);
    // Dropping the memory keyspaces leaves the lane (idle); their keys go back to disk.
    layout.define_keyspace(memory_def("m/"), true).unwrap();
    layout.define_keyspace(memory_def("n/"), true).unwrap();
    assert_eq!(layout.shards.len(), 6);
    assert_eq!(layout.durability_for(b"m/1"), Durability::Disk);
    assert_eq!(
        layout.shard(layout.shard_of_key(b"m/1")).durability,
        Durability::Disk
    );
}
