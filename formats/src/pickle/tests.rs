//! The unpickler against pickles Python made, hostile pickles and damaged bytes; the writer by
//! round trip.

use super::*;
use proptest::prelude::*;

const P2: &[u8] = include_bytes!("testdata/snapshot-like-p2.pickle");
const P3: &[u8] = include_bytes!("testdata/snapshot-like-p3.pickle");
const P4: &[u8] = include_bytes!("testdata/snapshot-like-p4.pickle");
const P5: &[u8] = include_bytes!("testdata/snapshot-like-p5.pickle");

/// A plain tree, for comparing documents structurally.
#[derive(Debug, Clone, PartialEq)]
enum Plain {
    None,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Plain>),
    Tuple(Vec<Plain>),
    Dict(Vec<(Plain, Plain)>),
}

fn plain(doc: &Document, v: &Value, depth: usize) -> Plain {
    assert!(depth < 64, "unexpectedly deep or cyclic");
    match v {
        Value::None => Plain::None,
        Value::Bool(b) => Plain::Bool(*b),
        Value::Small(_) | Value::Int(_) | Value::Wide(_) => Plain::Int(doc.as_int(v).unwrap()),
        Value::Float(_) => Plain::Float(doc.as_f64(v).unwrap()),
        Value::Str(_) => Plain::Str(doc.as_str(v).unwrap().to_string()),
        Value::Bytes(_) => Plain::Bytes(doc.as_bytes(v).unwrap().to_vec()),
        Value::List(_) => Plain::List(
            doc.items(v)
                .unwrap()
                .iter()
                .map(|x| plain(doc, x, depth + 1))
                .collect(),
        ),
        Value::Tuple(_) => Plain::Tuple(
            doc.items(v)
                .unwrap()
                .iter()
                .map(|x| plain(doc, x, depth + 1))
                .collect(),
        ),
        Value::Dict(_) => Plain::Dict(
            doc.entries(v)
                .unwrap()
                .iter()
                .map(|(k, x)| (plain(doc, k, depth + 1), plain(doc, x, depth + 1)))
                .collect(),
        ),
    }
}

fn build(doc: &mut Document, p: &Plain) -> Value {
    match p {
        Plain::None => Value::None,
        Plain::Bool(b) => Value::Bool(*b),
        Plain::Int(i) => doc.new_int(*i),
        Plain::Float(f) => doc.new_float(*f),
        Plain::Str(s) => doc.new_str(s),
        Plain::Bytes(b) => doc.new_bytes(b),
        Plain::List(items) => {
            let l = doc.new_list();
            for x in items {
                let x = build(doc, x);
                doc.push(&l, x);
            }
            l
        }
        Plain::Tuple(items) => {
            let items = items.iter().map(|x| build(doc, x)).collect();
            doc.new_tuple(items)
        }
        Plain::Dict(entries) => {
            let d = doc.new_dict();
            for (k, x) in entries {
                let (k, x) = (build(doc, k), build(doc, x));
                doc.insert(&d, k, x);
            }
            d
        }
    }
}

fn trace_entry_frames(doc: &Document, i: usize) -> Value {
    let traces = doc.get(doc.root(), "device_traces").unwrap();
    let dev0 = &doc.items(traces).unwrap()[0];
    let entry = &doc.items(dev0).unwrap()[i];
    *doc.get(entry, "frames").unwrap()
}

#[test]
fn python_snapshots_of_protocols_2_to_5_read_with_shared_frames_kept_shared() {
    for (p, bytes) in [(2, P2), (3, P3), (4, P4), (5, P5)] {
        let doc = read(bytes).unwrap_or_else(|e| panic!("protocol {p}: {e}"));
        // The same Python list object, referenced from two trace entries and the segment.
        let a = trace_entry_frames(&doc, 0);
        let b = trace_entry_frames(&doc, 1);
        assert_eq!(a.id(), b.id(), "protocol {p}");
        assert!(a.id().is_some());
        // And the same frame dict inside two different lists.
        let f2_in_tb = doc.items(&a).unwrap()[1].id();
        let f2_alone = doc.items(&trace_entry_frames(&doc, 2)).unwrap()[0].id();
        assert_eq!(f2_in_tb, f2_alone, "protocol {p}");
        let frame = &doc.items(&a).unwrap()[0];
        assert_eq!(doc.as_int(doc.get(frame, "line").unwrap()), Some(42));
        assert_eq!(doc.as_str(doc.get(frame, "name").unwrap()), Some("forward"));
    }
}

#[test]
fn every_protocol_gives_the_same_data() {
    let reference = read(P4).unwrap();
    let reference = plain(&reference, reference.root(), 0);
    for bytes in [P3, P5] {
        let doc = read(bytes).unwrap();
        assert_eq!(plain(&doc, doc.root(), 0), reference);
    }
}

#[test]
fn big_and_negative_integers_and_tuples_decode_exactly() {
    let doc = read(P4).unwrap();
    let big = doc.items(doc.get(doc.root(), "big").unwrap()).unwrap();
    assert_eq!(doc.as_int(&big[0]), Some((1i128 << 63) + 5));
    assert_eq!(doc.as_int(&big[1]), Some(-(1i128 << 63)));
    assert_eq!(doc.as_int(&big[2]), Some(-1));
    assert_eq!(doc.as_u64(&big[3]), Some(u64::MAX));
    assert_eq!(doc.as_f64(&big[4]), Some(3.5));
    assert_eq!(big[5], Value::None);
    assert_eq!(doc.as_bool(&big[6]), Some(true));
    assert_eq!(doc.as_bytes(&big[7]), Some(&[0u8, 1][..]));
    assert_eq!(doc.as_str(&big[8]).unwrap().chars().count(), 300);
    let segs = doc.items(doc.get(doc.root(), "segments").unwrap()).unwrap();
    let pool = doc.get(&segs[0], "segment_pool_id").unwrap();
    assert!(matches!(pool, Value::Tuple(_)));
    assert_eq!(
        doc.items(pool).unwrap(),
        &[Value::Small(0), Value::Small(0)]
    );
}

#[test]
fn code_executing_opcodes_are_refused_by_name() {
    let global = read(include_bytes!("testdata/global-os-system.pickle")).unwrap_err();
    assert!(
        matches!(
            global,
            Error::Refused {
                name: "STACK_GLOBAL",
                ..
            }
        ),
        "{global}"
    );
    let reduce = read(include_bytes!("testdata/reduce-os-system.pickle")).unwrap_err();
    assert_eq!(
        reduce.to_string(),
        "opcode GLOBAL (0x63) at byte 2 would import or call Python code; vramtrace reads \
         data-only pickles such as PyTorch memory snapshots and refuses it"
    );
    for (code, name) in [
        (b'R', "REDUCE"),
        (b'b', "BUILD"),
        (b'i', "INST"),
        (b'o', "OBJ"),
        (0x81, "NEWOBJ"),
        (0x92, "NEWOBJ_EX"),
        (0x82, "EXT1"),
        (b'P', "PERSID"),
        (b'Q', "BINPERSID"),
    ] {
        let err = read(&[0x80, 4, b'N', code, b'.']).unwrap_err();
        assert_eq!(
            err,
            Error::Refused {
                offset: 3,
                opcode: code,
                name
            }
        );
    }
}

#[test]
fn text_protocols_and_unknown_bytes_get_clear_errors() {
    let p0 = read(include_bytes!("testdata/protocol0-list.pickle")).unwrap_err();
    assert!(
        matches!(p0, Error::Unsupported { name: "LIST", .. }),
        "{p0}"
    );
    assert_eq!(
        read(b"\x80\x06N.").unwrap_err(),
        Error::Protocol {
            offset: 0,
            found: 6
        }
    );
    assert!(matches!(
        read(b"\xffN.").unwrap_err(),
        Error::UnknownOpcode { offset: 0, .. }
    ));
    assert_eq!(
        read(b"").unwrap_err().to_string(),
        "the pickle ends at byte 0 inside an opcode"
    );
}

#[test]
fn absurd_lengths_fail_before_allocating() {
    // BINUNICODE8 claiming 2^63 bytes, BINBYTES of 4 GiB, LONG4 of 2^31 bytes, a FRAME of 2^64.
    let cases: [&[u8]; 5] = [
        b"\x80\x04\x8d\x00\x00\x00\x00\x00\x00\x00\x80.",
        b"\x80\x04B\xff\xff\xff\xff.",
        b"\x80\x04\x8b\xff\xff\xff\x7f.",
        b"\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\xff.",
        b"\x80\x04\x8b\x11\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00.",
    ];
    for bytes in cases {
        let err = read(bytes).unwrap_err();
        assert!(
            matches!(err, Error::Truncated { .. } | Error::Limit { .. }),
            "{err}"
        );
    }
}

#[test]
fn structural_nonsense_is_reported_not_panicked() {
    let cases: [(&[u8], &str); 9] = [
        (b"\x80\x04.", "STOP on an empty stack"),
        (b"\x80\x04Na.", "APPEND on an empty stack"),
        (b"\x80\x04NNa.", "APPEND(S) to a None instead of a list"),
        (b"\x80\x04}N(Nu.", "SETITEMS with an odd number of items"),
        (b"\x80\x04e.", "APPENDS without a MARK"),
        (b"\x80\x04h\x07.", "memo entry 7 was never stored"),
        (b"\x80\x04\x94.", "PUT/MEMOIZE on an empty stack"),
        (b"\x80\x04(\x85.", "TUPLE1/2/3 with too few items"),
        (b"\x80\x04gx\n.", "GET argument is not a memo index"),
    ];
    for (bytes, what) in cases {
        let err = read(bytes).unwrap_err().to_string();
        assert!(err.contains(what), "{err:?} should say {what:?}");
    }
}

#[test]
fn every_truncation_of_a_real_snapshot_is_an_error_not_a_panic() {
    for bytes in [P2, P4, P5] {
        for end in 0..bytes.len() {
            assert!(read(&bytes[..end]).is_err(), "prefix of {end} bytes");
        }
    }
}

#[test]
fn bit_flips_never_panic() {
    let mut rng = crate::synthetic::SplitMix::new(7);
    for _ in 0..3000 {
        let mut b = P4.to_vec();
        for _ in 0..1 + rng.range(0, 4) {
            let i = rng.range(0, b.len() as u64) as usize;
            b[i] ^= 1 << rng.range(0, 8);
        }
        let _ = read(&b);
    }
}

#[test]
fn a_self_referencing_list_reads_and_writes_back() {
    // l = []; l.append(l)
    let doc = read(b"\x80\x04]\x94h\x00a.").unwrap();
    let root = *doc.root();
    assert_eq!(doc.items(&root).unwrap()[0].id(), root.id());
    let bytes = write(&doc).unwrap();
    let again = read(&bytes).unwrap();
    let r = again.root();
    assert_eq!(again.items(r).unwrap()[0].id(), r.id());
}

#[test]
fn a_tuple_containing_itself_is_refused_by_the_writer() {
    // t = ([],); t[0].append(t)  -- only a hand-made pickle can build it.
    let doc = read(b"\x80\x04]\x94\x85\x94h\x00h\x01a0h\x01.").unwrap();
    assert!(matches!(write(&doc), Err(Error::Unwritable(_))));
}

#[test]
fn the_writer_keeps_sharing_and_python_reads_it_the_same() {
    let doc = read(P4).unwrap();
    let bytes = write(&doc).unwrap();
    let again = read(&bytes).unwrap();
    assert_eq!(
        trace_entry_frames(&again, 0).id(),
        trace_entry_frames(&again, 1).id()
    );
    assert_eq!(plain(&again, again.root(), 0), plain(&doc, doc.root(), 0));
    // Sharing makes the output no larger than Python's own protocol-4 pickle.
    assert!(
        bytes.len() <= P4.len() + 64,
        "{} vs {}",
        bytes.len(),
        P4.len()
    );
}

fn arb_plain() -> impl Strategy<Value = Plain> {
    let leaf = prop_oneof![
        Just(Plain::None),
        any::<bool>().prop_map(Plain::Bool),
        any::<i64>().prop_map(|i| Plain::Int(i128::from(i))),
        any::<i128>().prop_map(Plain::Int),
        any::<f64>()
            .prop_filter("NaN is not equal to itself", |f| !f.is_nan())
            .prop_map(Plain::Float),
        ".{0,300}".prop_map(Plain::Str),
        proptest::collection::vec(any::<u8>(), 0..300).prop_map(Plain::Bytes),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Plain::List),
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Plain::Tuple),
            // Unique string keys, as dicts keep one entry per key.
            proptest::collection::btree_map("[a-z]{1,6}", inner, 0..6).prop_map(|m| {
                Plain::Dict(m.into_iter().map(|(k, v)| (Plain::Str(k), v)).collect())
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn writer_then_reader_gives_back_the_same_value(p in arb_plain()) {
        let mut doc = Document::new();
        let root = build(&mut doc, &p);
        doc.set_root(root);
        let bytes = write(&doc).unwrap();
        let again = read(&bytes).unwrap();
        prop_assert_eq!(plain(&again, again.root(), 0), p);
    }

    #[test]
    fn arbitrary_bytes_after_a_protocol_header_never_panic(
        tail in proptest::collection::vec(any::<u8>(), 0..200)
    ) {
        let mut b = vec![0x80, 4];
        b.extend(tail);
        let _ = read(&b);
    }
}

#[test]
fn large_dicts_keep_one_entry_per_key_like_small_ones() {
    let mut doc = Document::new();
    let d = doc.new_dict();
    for round in 0..2i32 {
        for k in 0..40i32 {
            let key = doc.new_str(&format!("k{k}"));
            doc.insert(&d, key, Value::Small(k + 100 * round));
        }
    }
    // Python: True == 1, so they are one key.
    doc.insert(&d, Value::Small(1), Value::None);
    doc.insert(&d, Value::Bool(true), Value::Small(7));
    assert_eq!(doc.entries(&d).unwrap().len(), 41);
    assert_eq!(doc.as_int(doc.get(&d, "k39").unwrap()), Some(139));
    doc.set_root(d);
    let bytes = write(&doc).unwrap();
    let again = read(&bytes).unwrap();
    assert_eq!(
        again.as_int(again.get(again.root(), "k0").unwrap()),
        Some(100)
    );
    assert_eq!(
        again.as_int(&again.entries(again.root()).unwrap().values()[40]),
        Some(7)
    );
}

#[test]
fn real_snapshots_stay_far_inside_the_memory_budget() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/snapshots");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "pickle") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let spent = memory_spent(&bytes).unwrap();
        // Half of the per-byte budget: real snapshots never come near it.
        assert!(
            spent <= bytes.len() * MEMORY_PER_BYTE / 2,
            "{}: {spent} bytes for a {}-byte pickle",
            path.display(),
            bytes.len()
        );
        seen += 1;
    }
    assert!(seen >= 3, "the recorded snapshots are missing");
}

#[test]
fn megabytes_of_empty_containers_or_memo_entries_stop_at_the_budget() {
    // Large enough that a memo entry or a mark per byte (16 bytes each) passes the budget's
    // base.
    let len = 12 << 20;
    for (name, prefix, fill, what) in [
        ("EMPTY_LIST", &b"N"[..], &b"]"[..], "containers"),
        ("EMPTY_DICT", b"N", b"}", "containers"),
        // A memo entry or a mark per byte: the most memory one byte can ask for.
        ("MEMOIZE", b"N", b"\x94", "MiB of memory"),
        ("MARK", b"N", b"(", "MiB of memory"),
    ] {
        let mut bytes = b"\x80\x04".to_vec();
        bytes.extend_from_slice(prefix);
        while bytes.len() < len {
            bytes.extend_from_slice(fill);
        }
        bytes.push(b'.');
        let err = read(&bytes).unwrap_err();
        assert!(matches!(err, Error::Limit { .. }), "{name}: {err}");
        assert!(err.to_string().contains(what), "{name}: {err}");
        let Error::Limit { offset, .. } = err else {
            unreachable!()
        };
        // Stopped once the budget was spent, not at the end.
        assert!(offset < bytes.len() as u64 - 1, "{name}");
    }
}

#[test]
fn equal_lists_share_items_until_one_of_them_grows() {
    // l1 = [1, 2]; l2 = [1, 2]; l1.append(3); l2.append(4); (l1, l2)
    let doc =
        read(b"\x80\x04]\x94(K\x01K\x02e]\x94(K\x01K\x02eh\x00K\x03a0h\x01K\x04a0\x86.").unwrap();
    let pair = doc.items(doc.root()).unwrap();
    let ints = |v: &Value| -> Vec<i128> {
        doc.items(v)
            .unwrap()
            .iter()
            .map(|x| doc.as_int(x).unwrap())
            .collect()
    };
    assert_ne!(pair[0].id(), pair[1].id());
    assert_eq!(ints(&pair[0]), [1, 2, 3]);
    assert_eq!(ints(&pair[1]), [1, 2, 4]);
}

/// The entries of a dict as `(key, int)` pairs, in order.
fn str_int_entries(doc: &Document, d: &Value) -> Vec<(String, i128)> {
    doc.entries(d)
        .unwrap()
        .iter()
        .map(|(k, v)| (doc.as_str(k).unwrap().to_string(), doc.as_int(v).unwrap()))
        .collect()
}

#[test]
fn dicts_of_equal_keys_share_them_until_one_of_them_grows() {
    // [{'a': 1, 'b': 2}, {'a': 3, 'b': 4}], as Python pickles it (the second dict's keys are
    // memo references to the first's).
    let two =
        b"\x80\x04]\x94(}\x94(\x8c\x01a\x94K\x01\x8c\x01b\x94K\x02u}\x94(h\x02K\x03h\x03K\x04ue";
    let whole = [&two[..], b"."].concat();
    let doc = read(&whole).unwrap();
    let dicts = doc.items(doc.root()).unwrap();
    let keys = |d: &Value| doc.entries(d).unwrap().keys().as_ptr();
    assert_eq!(keys(&dicts[0]), keys(&dicts[1]));
    assert_eq!(
        str_int_entries(&doc, &dicts[1]),
        [("a".into(), 3), ("b".into(), 4)]
    );
    // Then, by hand through the memo, d2['c'] = 5 and d1['a'] = 6.
    let grown = [&two[..], b"h\x04\x8c\x01cK\x05s0h\x01h\x02K\x06s0."].concat();
    let doc = read(&grown).unwrap();
    let dicts = doc.items(doc.root()).unwrap();
    assert_eq!(
        str_int_entries(&doc, &dicts[0]),
        [("a".into(), 6), ("b".into(), 2)]
    );
    assert_eq!(
        str_int_entries(&doc, &dicts[1]),
        [("a".into(), 3), ("b".into(), 4), ("c".into(), 5)]
    );
    assert_eq!(doc.as_int(doc.get(&dicts[1], "c").unwrap()), Some(5));
}

#[test]
fn a_key_repeated_in_one_setitems_keeps_its_first_place_and_takes_the_last_value() {
    // Hand-made: {'a': 1, 'b': 2, 'a': 3} in one SETITEMS; Python reads {'a': 3, 'b': 2}. A
    // dict of the same two keys after it reads as its own.
    let doc =
        read(b"\x80\x04}(\x8c\x01aK\x01\x8c\x01bK\x02\x8c\x01aK\x03u}(\x8c\x01aK\x04\x8c\x01bK\x05u\x86.")
            .unwrap();
    let pair = doc.items(doc.root()).unwrap();
    assert_eq!(
        str_int_entries(&doc, &pair[0]),
        [("a".into(), 3), ("b".into(), 2)]
    );
    assert_eq!(
        str_int_entries(&doc, &pair[1]),
        [("a".into(), 4), ("b".into(), 5)]
    );
}

#[test]
fn a_container_of_another_kind_or_document_is_refused_not_panicked() {
    let mut doc = Document::new();
    let dict = doc.new_dict();
    let mut other = Document::new();
    let list = other.new_list();
    let foreign_dict = other.new_dict();
    // Container 0 of `doc` is a dict: a list value naming it is not a list of this document.
    assert!(!doc.push(&list, Value::None));
    assert!(!doc.insert(&foreign_dict, Value::None, Value::None));
    assert_eq!(doc.items(&list), None);
    assert!(doc.insert(&dict, Value::None, Value::Small(1)));
    assert_eq!(doc.entries(&dict).unwrap().len(), 1);
}

#[test]
fn a_string_repeated_as_new_objects_is_one_string_and_bad_bytes_still_fail() {
    // ['N/A', 'N/A', 'x', 'N/A'], each a string object of its own (not memo references).
    let doc = read(b"\x80\x04](\x8c\x03N/A\x8c\x03N/A\x8c\x01x\x8c\x03N/Ae.").unwrap();
    let items = doc.items(doc.root()).unwrap();
    assert_eq!(items[0], items[1]);
    assert_eq!(items[0], items[3]);
    assert_eq!(doc.as_str(&items[3]), Some("N/A"));
    assert_eq!(doc.strings(), 2);
    let err = read(b"\x80\x04](\x8c\x01x\x8c\x02\xff\xfee.").unwrap_err();
    assert!(err.to_string().contains("not UTF-8"), "{err}");
}

/// Checks that reading `bytes` in parts of at least `min_part` bytes gives what reading it in
/// one piece gives, or declines; returns whether it read it in parts.
fn same_in_parts(bytes: &[u8], limits: Limits, min_part: usize) -> bool {
    let one = reader::read_serial(bytes, limits);
    let Some(parts) = parallel::read_in_parts(bytes, limits, min_part) else {
        return false;
    };
    let one = one.unwrap_or_else(|e| panic!("read in parts where one piece fails: {e}"));
    assert!(one.same_as(&parts), "parts of {min_part} bytes differ");
    true
}

fn recorded_snapshots() -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/snapshots");
    let mut all: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pickle"))
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    assert!(all.len() >= 3, "the recorded snapshots are missing");
    all.extend([P2, P3, P4, P5].map(<[u8]>::to_vec));
    all
}

#[test]
fn recorded_snapshots_read_in_parts_give_the_same_document() {
    for bytes in recorded_snapshots() {
        let limits = Limits::for_len(bytes.len());
        for min_part in [1, 64] {
            assert!(
                same_in_parts(&bytes, limits, min_part),
                "parts of {min_part} bytes"
            );
        }
        // Too few parts of this size in some of them: read in one piece.
        same_in_parts(&bytes, limits, 1024);
        let plan = split::plan(&bytes, 1).unwrap();
        assert!(plan.parts.len() > 10, "{} parts", plan.parts.len());
    }
}

#[test]
fn every_truncation_of_a_real_snapshot_declines_to_read_in_parts() {
    let bytes = &recorded_snapshots()[0];
    for end in 0..bytes.len() {
        let limits = Limits::for_len(end);
        assert!(
            !same_in_parts(&bytes[..end], limits, 1),
            "prefix of {end} bytes"
        );
    }
}

#[test]
fn bit_flips_read_in_parts_as_in_one_piece() {
    let mut rng = crate::synthetic::SplitMix::new(11);
    let snapshot = &recorded_snapshots()[0];
    let mut read_in_parts = 0;
    for _ in 0..3000 {
        let mut b = snapshot.clone();
        for _ in 0..1 + rng.range(0, 4) {
            let i = rng.range(0, b.len() as u64) as usize;
            b[i] ^= 1 << rng.range(0, 8);
        }
        read_in_parts += usize::from(same_in_parts(&b, Limits::for_len(b.len()), 64));
    }
    // Most flips land in a string or a number, which the parts read as one piece does.
    assert!(read_in_parts > 100, "{read_in_parts} read in parts");
}

#[test]
fn one_byte_less_memory_than_one_piece_charges_declines_to_read_in_parts() {
    for bytes in recorded_snapshots() {
        let spent = memory_spent(&bytes).unwrap();
        let limits = Limits {
            max_memory: spent - 1,
            ..Limits::for_len(bytes.len())
        };
        assert!(matches!(
            reader::read_serial(&bytes, limits),
            Err(Error::Limit { .. })
        ));
        assert!(!same_in_parts(&bytes, limits, 64));
        assert!(same_in_parts(
            &bytes,
            Limits {
                max_memory: 2 * spent,
                ..limits
            },
            64
        ));
        let containers = read(&bytes).unwrap().containers();
        let limits = Limits {
            max_containers: containers - 1,
            ..Limits::for_len(bytes.len())
        };
        assert!(!same_in_parts(&bytes, limits, 64));
    }
}

/// A snapshot-like document: trace entries whose frames lists share frame dicts (memo
/// references from one part to the containers and strings of another), numbers of every
/// width, a list that grows past a batch.
fn snapshot_like(entries: &[(Vec<usize>, i64, u8)], frames: usize) -> Vec<u8> {
    let mut doc = Document::new();
    let frame_dicts: Vec<Value> = (0..frames)
        .map(|i| {
            let d = doc.new_dict();
            doc.set_str(&d, "filename", &format!("f{}.py", i % 3));
            doc.set_int(&d, "line", i as i64 * 1_000_000_007);
            d
        })
        .collect();
    let trace = doc.new_list();
    for (picks, addr, action) in entries {
        let e = doc.new_dict();
        doc.set_str(
            &e,
            "action",
            ["alloc", "free_requested", "N/A"][*action as usize % 3],
        );
        doc.set_int(&e, "addr", i128::from(*addr) << (*action % 70));
        let list = doc.new_list();
        for &p in picks {
            doc.push(&list, frame_dicts[p % frames]);
        }
        let f = doc.new_float(f64::from(*action) / 3.0);
        doc.set(&e, "time", f);
        doc.set(&e, "frames", list);
        doc.push(&trace, e);
    }
    let root = doc.new_dict();
    doc.set(&root, "device_traces", trace);
    let t = doc.new_tuple(frame_dicts.clone());
    doc.set(&root, "segments", t);
    doc.set_root(root);
    write(&doc).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn snapshot_like_pickles_read_in_parts_give_the_same_document(
        entries in proptest::collection::vec(
            (proptest::collection::vec(0usize..40, 0..6), any::<i64>(), any::<u8>()),
            1..60,
        ),
        frames in 1usize..40,
        min_part in 1usize..200,
    ) {
        let bytes = snapshot_like(&entries, frames);
        let limits = Limits::for_len(bytes.len());
        same_in_parts(&bytes, limits, min_part);
        prop_assert!(same_in_parts(&bytes, limits, 1));
        for end in (0..bytes.len()).step_by(7) {
            same_in_parts(&bytes[..end], Limits::for_len(end), min_part);
        }
    }

    #[test]
    fn arbitrary_values_read_in_parts_as_in_one_piece(p in arb_plain(), min_part in 1usize..64) {
        let mut doc = Document::new();
        let v = build(&mut doc, &p);
        doc.set_root(v);
        let bytes = write(&doc).unwrap();
        same_in_parts(&bytes, Limits::for_len(bytes.len()), min_part);
    }
}

/// `VRAMTRACE_SNAPSHOT=FILE cargo test --release -p vramtrace-format --lib -- --ignored
/// large_snapshot`: a large snapshot (the GPT-2 one of analyzer/BENCHMARKS.md) read in parts
/// gives the document one piece gives, with the parts that `read` uses.
#[test]
#[ignore = "needs VRAMTRACE_SNAPSHOT, a large snapshot"]
fn a_large_snapshot_read_in_parts_gives_the_same_document() {
    let path = std::env::var("VRAMTRACE_SNAPSHOT").expect("VRAMTRACE_SNAPSHOT names a snapshot");
    let bytes = std::fs::read(path).unwrap();
    assert!(bytes.len() >= parallel::MIN_LEN);
    let limits = Limits::for_len(bytes.len());
    assert!(same_in_parts(&bytes, limits, parallel::MIN_PART));
    assert!(same_in_parts(&bytes, limits, 1));
}
