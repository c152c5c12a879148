//! Hostile-input robustness (`spec/gguf-gemma4.md` §2.3): mutated copies of a tiny valid
//! GGUF (byte flips, truncations, inserted bytes, length/count fields set to huge values)
//! never make the reader panic; whatever it accepts is fully usable (every key, every tensor
//! slice of exactly `n_bytes`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;
use reference::gguf::{Array, GgufFile, GgufWriter, Value};
use reference::quant::GgmlType;

/// A ~500-byte valid file touching every parser path: all scalar kinds, string and numeric
/// arrays, a bool array, an explicit alignment, three tensors of three types.
fn seed() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("fz".into()));
    w.set("general.alignment", Value::U32(16));
    w.set("a", Value::U8(1));
    w.set("b", Value::I16(-2));
    w.set("c", Value::F32(0.5));
    w.set("d", Value::Bool(true));
    w.set("e", Value::U64(7));
    w.set("f", Value::F64(-1.0));
    w.set("s", Value::String("héllo".into()));
    w.set(
        "t",
        Value::Array(Array::String(vec!["x".into(), "".into(), "yz".into()])),
    );
    w.set("i", Value::Array(Array::I32(vec![1, -1, 3])));
    w.set("o", Value::Array(Array::Bool(vec![true, false])));
    w.add_tensor("w0", &[4, 2], GgmlType::F32, (0u8..32).collect())
        .expect("w0");
    w.add_tensor("w1", &[32], GgmlType::Q8_0, vec![3; 34])
        .expect("w1");
    w.add_tensor("w2", &[8], GgmlType::F16, vec![9; 16])
        .expect("w2");
    w.to_bytes().expect("seed")
}

/// Counts live and peak heap bytes of the current thread (tests run on several threads).
struct Counting;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: delegates every call to `System` unchanged; only thread-local counters are updated
// (const-initialised `Cell<usize>`, so no allocation or destructor registration happens).
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LIVE.try_with(|l| {
            l.set(l.get() + layout.size());
            let _ = PEAK.try_with(|p| p.set(p.get().max(l.get())));
        });
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = LIVE.try_with(|l| l.set(l.get().saturating_sub(layout.size())));
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Heap the parser may use beyond the input: a constant plus a small multiple of the input
/// length (§2.3: never allocate from a count the file cannot back).
fn alloc_budget(len: usize) -> usize {
    16 * 1024 + 32 * len
}

/// Parses and, if accepted, touches everything the API exposes; checks the parser's peak
/// heap use against [`alloc_budget`].
fn exercise(bytes: Vec<u8>) {
    let len = bytes.len();
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let parsed = GgufFile::from_bytes(bytes);
    let peak = PEAK.with(Cell::get) - base;
    assert!(
        peak <= alloc_budget(len),
        "parsing {len} bytes used {peak} bytes of heap"
    );
    if let Ok(f) = parsed {
        for (k, v) in f.metadata() {
            let _ = (k.len(), v.to_string(), f.get(k));
        }
        for t in f.tensors() {
            assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes, "{}", t.name);
            let _ = (t.n_elements(), t.row_len(), t.n_rows(), t.shape());
        }
        let _ = (f.layout_warnings(), f.require_canonical_layout());
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip {
        at: usize,
        mask: u8,
    },
    Set {
        at: usize,
        byte: u8,
    },
    Truncate {
        at: usize,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    Remove {
        at: usize,
        n: usize,
    },
    /// Overwrites 8 bytes (a length, count, dim or offset field) with a hostile value.
    Huge {
        at: usize,
        value: u64,
    },
    /// Overwrites 4 bytes (a type id or n_dims) with a hostile value.
    Huge32 {
        at: usize,
        value: u32,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let huge = prop_oneof![
        Just(u64::MAX),
        Just(i64::MAX as u64),
        Just(1u64 << 62),
        Just(1u64 << 32),
        Just((1u64 << 30) + 1),
        Just(1u64 << 30),
        0u64..1024,
        any::<u64>(),
    ];
    let huge32 = prop_oneof![
        Just(u32::MAX),
        Just(9u32),
        Just(13u32),
        Just(5u32),
        Just(0u32),
        0u32..64,
    ];
    prop_oneof![
        3 => (any::<usize>(), 1u8..=255).prop_map(|(at, mask)| Mutation::Flip { at, mask }),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Set { at, byte }),
        1 => any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        1 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        1 => (any::<usize>(), 1usize..16).prop_map(|(at, n)| Mutation::Remove { at, n }),
        3 => (any::<usize>(), huge).prop_map(|(at, value)| Mutation::Huge { at, value }),
        2 => (any::<usize>(), huge32).prop_map(|(at, value)| Mutation::Huge32 { at, value }),
    ]
}

fn apply(buf: &mut Vec<u8>, m: &Mutation) {
    let len = buf.len();
    if len == 0 {
        return;
    }
    match m {
        Mutation::Flip { at, mask } => buf[at % len] ^= mask,
        Mutation::Set { at, byte } => buf[at % len] = *byte,
        Mutation::Truncate { at } => buf.truncate(at % len),
        Mutation::Insert { at, bytes } => {
            let at = at % (len + 1);
            buf.splice(at..at, bytes.iter().copied());
        }
        Mutation::Remove { at, n } => {
            let at = at % len;
            let end = (at + n).min(len);
            buf.drain(at..end);
        }
        Mutation::Huge { at, value } => {
            if len >= 8 {
                let at = at % (len - 7);
                buf[at..at + 8].copy_from_slice(&value.to_le_bytes());
            }
        }
        Mutation::Huge32 { at, value } => {
            if len >= 4 {
                let at = at % (len - 3);
                buf[at..at + 4].copy_from_slice(&value.to_le_bytes());
            }
        }
    }
}

#[test]
fn seed_is_valid() {
    let f = GgufFile::from_bytes(seed()).expect("seed parses");
    assert_eq!(f.tensors().len(), 3);
    assert_eq!(f.alignment(), 16);
}

/// Hand-built headers declaring huge counts in tiny files: rejected, with heap use bounded by
/// the file size (checked inside [`exercise`]).
#[test]
fn huge_declared_counts_allocate_nothing_large() {
    let header = |n_tensors: u64, n_kv: u64| {
        let mut b = b"GGUF".to_vec();
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&n_tensors.to_le_bytes());
        b.extend_from_slice(&n_kv.to_le_bytes());
        b
    };
    let key = |b: &mut Vec<u8>, k: &str, ty: u32| {
        b.extend_from_slice(&(k.len() as u64).to_le_bytes());
        b.extend_from_slice(k.as_bytes());
        b.extend_from_slice(&ty.to_le_bytes());
    };
    exercise(header(u64::MAX, u64::MAX));
    exercise(header(1 << 40, 0));
    for (elem, count) in [(8u32, 1u64 << 30), (8, 1 << 27), (0, 1 << 30), (4, 1 << 20)] {
        let mut b = header(0, 1);
        key(&mut b, "k", 9);
        b.extend_from_slice(&elem.to_le_bytes());
        b.extend_from_slice(&count.to_le_bytes());
        b.resize(b.len() + 64, 0);
        exercise(b);
    }
    let mut b = header(0, 1);
    key(&mut b, "k", 8);
    b.extend_from_slice(&(1u64 << 29).to_le_bytes());
    exercise(b);
}

/// Every truncation and every single-byte overwrite (0x00, 0xFF, and +1) of the seed.
#[test]
fn every_truncation_and_single_byte_change_is_handled() {
    let s = seed();
    for n in 0..s.len() {
        exercise(s[..n].to_vec());
        for b in [0x00, 0xFF] {
            let mut m = s.clone();
            m[n] = b;
            exercise(m);
        }
        let mut m = s.clone();
        m[n] = m[n].wrapping_add(1);
        exercise(m);
    }
}

/// Every strict prefix of the seed is refused, and the message says the file may be truncated
/// (each length/count check against the bytes remaining names it), so a user with a partly
/// downloaded model learns why.
#[test]
fn every_truncation_is_refused_naming_truncation() {
    let s = seed();
    // (Below 4 bytes the magic itself is incomplete: "bad magic …: not a GGUF file".)
    for n in 4..s.len() {
        let e = GgufFile::from_bytes(s[..n].to_vec())
            .err()
            .unwrap_or_else(|| panic!("a {n}-byte prefix of {} was accepted", s.len()));
        let msg = e.to_string();
        assert!(msg.contains("truncated"), "prefix of {n} bytes: {msg}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 100_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn mutated_files_never_panic(muts in prop::collection::vec(mutation(), 1..5)) {
        static SEED: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        let mut buf = SEED.get_or_init(seed).clone();
        for m in &muts {
            apply(&mut buf, m);
        }
        exercise(buf);
    }
}
