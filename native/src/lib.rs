//! `prefixroute_native`, prefixroute's compiled parts. Here: vLLM's KV cache events read
//! straight from the msgpack payload into the router's block keys, without a Python object per
//! token or per block; `index.rs`: the view of which member holds which key that those events
//! feed; `ext_proc.rs`: the endpoint picker's ext_proc server (gRPC), handing each message to
//! the Python picker as bytes.
//!
//! The Python reader (`prefixroute.routing.kv_events` and `kv_index`) is the definition; this
//! is a faster way to the same result for the shapes a current engine sends: map-form events
//! with integer block hashes. `decode` returns None for anything else (the positional form,
//! raw-digest hashes, an event kind it does not know, a malformed payload), and the caller
//! decodes that payload in Python, which also says what is wrong with a malformed one. The
//! tests feed both readers the same payloads and compare every change they make.

mod ext_proc;
mod index;
mod lru;

use lru::Lru;
use pyo3::prelude::*;
use rmp::Marker;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

const MEDIUM_GPU: &str = "GPU";
const MAX_DEPTH: u32 = 32; // nesting a skipped value may have (vLLM's extra keys nest twice)

/// A payload read position. Every read returns None on a shape this reader does not take.
struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let out = self.data.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn marker(&mut self) -> Option<Marker> {
        Some(Marker::from_u8(self.byte()?))
    }

    /// True (and past it) when the next value is nil.
    fn nil(&mut self) -> Option<bool> {
        if *self.data.get(self.pos)? == 0xc0 {
            self.pos += 1;
            return Some(true);
        }
        Some(false)
    }

    /// An integer of any width after its marker (None: not an integer; a bool is none).
    fn int_after(&mut self, marker: Marker) -> Option<i128> {
        Some(match marker {
            Marker::FixPos(v) => v as i128,
            Marker::FixNeg(v) => v as i128,
            Marker::U8 => self.byte()? as i128,
            Marker::U16 => u16::from_be_bytes(self.array()?) as i128,
            Marker::U32 => u32::from_be_bytes(self.array()?) as i128,
            Marker::U64 => u64::from_be_bytes(self.array()?) as i128,
            Marker::I8 => self.byte()? as i8 as i128,
            Marker::I16 => i16::from_be_bytes(self.array()?) as i128,
            Marker::I32 => i32::from_be_bytes(self.array()?) as i128,
            Marker::I64 => i64::from_be_bytes(self.array()?) as i128,
            _ => return None,
        })
    }

    fn int(&mut self) -> Option<i128> {
        let marker = self.marker()?;
        self.int_after(marker)
    }

    fn block_hash(&mut self) -> Option<u64> {
        u64::try_from(self.int()?).ok()
    }

    fn number(&mut self) -> Option<f64> {
        let marker = self.marker()?;
        match marker {
            Marker::F64 => Some(f64::from_be_bytes(self.array()?)),
            Marker::F32 => Some(f32::from_be_bytes(self.array()?) as f64),
            _ => Some(self.int_after(marker)? as f64),
        }
    }

    fn str_after(&mut self, marker: Marker) -> Option<&'a str> {
        let len = match marker {
            Marker::FixStr(n) => n as usize,
            Marker::Str8 => self.byte()? as usize,
            Marker::Str16 => u16::from_be_bytes(self.array()?) as usize,
            Marker::Str32 => u32::from_be_bytes(self.array()?) as usize,
            _ => return None,
        };
        std::str::from_utf8(self.take(len)?).ok()
    }

    fn string(&mut self) -> Option<&'a str> {
        let marker = self.marker()?;
        self.str_after(marker)
    }

    fn optional_string(&mut self) -> Option<Option<&'a str>> {
        if self.nil()? {
            return Some(None);
        }
        Some(Some(self.string()?))
    }

    fn array_len_after(&mut self, marker: Marker) -> Option<usize> {
        Some(match marker {
            Marker::FixArray(n) => n as usize,
            Marker::Array16 => u16::from_be_bytes(self.array()?) as usize,
            Marker::Array32 => u32::from_be_bytes(self.array()?) as usize,
            _ => return None,
        })
    }

    fn array_len(&mut self) -> Option<usize> {
        let marker = self.marker()?;
        self.array_len_after(marker)
    }

    fn map_len(&mut self) -> Option<usize> {
        Some(match self.marker()? {
            Marker::FixMap(n) => n as usize,
            Marker::Map16 => u16::from_be_bytes(self.array()?) as usize,
            Marker::Map32 => u32::from_be_bytes(self.array()?) as usize,
            _ => return None,
        })
    }

    /// Past one value of any kind but an extension type (which Python would read as an object
    /// the event format never holds).
    fn skip(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        let marker = self.marker()?;
        let fixed = match marker {
            Marker::Null | Marker::True | Marker::False | Marker::FixPos(_) | Marker::FixNeg(_) => 0,
            Marker::U8 | Marker::I8 => 1,
            Marker::U16 | Marker::I16 => 2,
            Marker::U32 | Marker::I32 | Marker::F32 => 4,
            Marker::U64 | Marker::I64 | Marker::F64 => 8,
            Marker::FixStr(n) => n as usize,
            Marker::Str8 | Marker::Bin8 => self.byte()? as usize,
            Marker::Str16 | Marker::Bin16 => u16::from_be_bytes(self.array()?) as usize,
            Marker::Str32 | Marker::Bin32 => u32::from_be_bytes(self.array()?) as usize,
            Marker::FixArray(_) | Marker::Array16 | Marker::Array32 => {
                for _ in 0..self.array_len_after(marker)? {
                    self.skip(depth + 1)?;
                }
                0
            }
            Marker::FixMap(_) | Marker::Map16 | Marker::Map32 => {
                self.pos -= 1;
                for _ in 0..self.map_len()? * 2 {
                    self.skip(depth + 1)?;
                }
                0
            }
            _ => return None,
        };
        self.take(fixed).map(|_| ())
    }
}

/// Blocks an engine stored, as the Python reader's `BlockStored` holds them.
struct Stored {
    hashes: Vec<u64>,
    parent: Option<u64>,
    tokens: Vec<u8>, // the ids as native 8-byte little-endian integers, as the keys hash them
    block_size: usize,
    medium: Option<String>,
    lora_name: Option<String>,
    salt: Option<String>,
}

enum Event {
    Stored(Stored),
    Removed { hashes: Vec<u64>, medium: Option<String> },
    Cleared,
}

/// One message's payload, read: `decode`'s answer.
#[pyclass(frozen, module = "prefixroute_native")]
struct NativeBatch {
    #[pyo3(get)]
    ts: f64,
    #[pyo3(get)]
    data_parallel_rank: Option<i64>,
    events: Vec<Event>,
}

#[pymethods]
impl NativeBatch {
    /// Events after consecutive removals of one tier became one (as the Python reader counts).
    #[getter]
    fn event_count(&self) -> usize {
        self.events.len()
    }
}

fn is_gpu(medium: &Option<String>) -> bool {
    medium.as_deref().map_or(true, |m| m == MEDIUM_GPU)
}

/// A map-form BlockStored's fields after its "type" (which may come anywhere in the map: the
/// fields are read whole first).
#[derive(Default)]
struct StoredFields {
    hashes: Option<Vec<u64>>,
    parent: Option<u64>,
    tokens: Option<Vec<u8>>,
    token_count: usize,
    block_size: Option<i128>,
    medium: Option<String>,
    lora_name: Option<String>,
    extra_keys_len: Option<usize>,
    first_strings: Option<Vec<String>>, // the strings of the first block's extra keys
}

enum Kind {
    Stored,
    Removed,
    Cleared,
}

fn read_hashes(c: &mut Cursor) -> Option<Vec<u64>> {
    let n = c.array_len()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(c.block_hash()?);
    }
    Some(out)
}

fn read_tokens(c: &mut Cursor, fields: &mut StoredFields) -> Option<()> {
    let n = c.array_len()?;
    let mut out = Vec::with_capacity(n * 8);
    for _ in 0..n {
        // Token ids of a real vocabulary are positive fixints or uint16 (msgpack's shortest
        // forms): read those without the general path, which every token would take.
        let id = match *c.data.get(c.pos)? {
            b @ 0x00..=0x7f => {
                c.pos += 1;
                b as i64
            }
            0xcd => {
                c.pos += 1;
                u16::from_be_bytes(c.array()?) as i64
            }
            _ => i64::try_from(c.int()?).ok()?,
        };
        out.extend_from_slice(&id.to_le_bytes());
    }
    fields.tokens = Some(out);
    fields.token_count = n;
    Some(())
}

fn read_extra_keys(c: &mut Cursor, fields: &mut StoredFields) -> Option<()> {
    if c.nil()? {
        return Some(());
    }
    let n = c.array_len()?;
    for i in 0..n {
        if c.nil()? {
            continue;
        }
        let values = c.array_len()?;
        let mut strings = Vec::new();
        for _ in 0..values {
            let is_str = matches!(
                Marker::from_u8(*c.data.get(c.pos)?),
                Marker::FixStr(_) | Marker::Str8 | Marker::Str16 | Marker::Str32
            );
            if i == 0 && is_str {
                strings.push(c.string()?.to_owned());
            } else {
                c.skip(1)?;
            }
        }
        if i == 0 {
            fields.first_strings = Some(strings);
        }
    }
    fields.extra_keys_len = Some(n);
    Some(())
}

/// One map-form event: its kind and fields, or None for a shape left to Python.
fn read_event(c: &mut Cursor) -> Option<(Kind, StoredFields)> {
    let entries = c.map_len()?;
    let mut kind = None;
    let mut fields = StoredFields::default();
    for _ in 0..entries {
        let name = c.string()?;
        match name {
            "type" => {
                kind = Some(match c.string()? {
                    "BlockStored" => Kind::Stored,
                    "BlockRemoved" => Kind::Removed,
                    "AllBlocksCleared" => Kind::Cleared,
                    _ => return None,
                })
            }
            "block_hashes" => fields.hashes = Some(read_hashes(c)?),
            "parent_block_hash" => fields.parent = if c.nil()? { None } else { Some(c.block_hash()?) },
            "token_ids" => read_tokens(c, &mut fields)?,
            "block_size" => fields.block_size = Some(c.int()?),
            "medium" => fields.medium = c.optional_string()?.map(str::to_owned),
            "lora_name" => fields.lora_name = c.optional_string()?.map(str::to_owned),
            "lora_id" => {
                if !c.nil()? {
                    c.int()?;
                }
            }
            "extra_keys" => read_extra_keys(c, &mut fields)?,
            _ => c.skip(0)?,
        }
    }
    Some((kind?, fields))
}

fn stored_event(fields: StoredFields) -> Option<Stored> {
    let hashes = fields.hashes?;
    let block_size = usize::try_from(fields.block_size?).ok().filter(|&s| s > 0)?;
    let tokens = fields.tokens?;
    if fields.token_count != hashes.len().checked_mul(block_size)? {
        return None;
    }
    if let Some(n) = fields.extra_keys_len {
        if n != hashes.len() {
            return None;
        }
    }
    // The cache_salt in the first block's extra keys: its first string, past the adapter's name
    // when that leads (the Python reader's `first_block_salt`).
    let salt = fields.first_strings.and_then(|strings| {
        let skip = match (&fields.lora_name, strings.first()) {
            (Some(lora), Some(first)) if lora == first => 1,
            _ => 0,
        };
        strings.into_iter().nth(skip)
    });
    Some(Stored {
        hashes,
        parent: fields.parent,
        tokens,
        block_size,
        medium: fields.medium,
        lora_name: fields.lora_name,
        salt,
    })
}

fn read_batch(payload: &[u8]) -> Option<NativeBatch> {
    let mut c = Cursor { data: payload, pos: 0 };
    let parts = c.array_len()?;
    if parts != 2 && parts != 3 {
        return None;
    }
    let ts = c.number()?;
    let count = c.array_len()?;
    let mut events = Vec::with_capacity(count);
    // Consecutive removals of one tier become one event, as the Python reader makes them; its
    // run starts on the GPU tier.
    let mut run: Vec<u64> = Vec::new();
    let mut tier: Option<String> = Some(MEDIUM_GPU.to_owned());
    for _ in 0..count {
        let (kind, fields) = read_event(&mut c)?;
        if let Kind::Removed = kind {
            let hashes = fields.hashes?;
            if fields.medium != tier {
                if !run.is_empty() {
                    events.push(Event::Removed { hashes: std::mem::take(&mut run), medium: tier.clone() });
                }
                tier = fields.medium;
            }
            run.extend(hashes);
            continue;
        }
        if !run.is_empty() {
            events.push(Event::Removed { hashes: std::mem::take(&mut run), medium: tier.clone() });
        }
        events.push(match kind {
            Kind::Stored => Event::Stored(stored_event(fields)?),
            _ => Event::Cleared,
        });
    }
    if !run.is_empty() {
        events.push(Event::Removed { hashes: run, medium: tier });
    }
    let rank = if parts == 3 {
        if c.nil()? {
            None
        } else {
            Some(i64::try_from(c.int()?).ok()?)
        }
    } else {
        None
    };
    if c.pos != payload.len() {
        return None; // trailing bytes: msgpack's own reader refuses those
    }
    Some(NativeBatch { ts, data_parallel_rank: rank, events })
}

/// The batch in a message's msgpack payload, or None when Python should read it.
#[pyfunction]
fn decode(payload: &[u8]) -> Option<NativeBatch> {
    read_batch(payload)
}

/// The seed of a prompt's first block (the Python `token_blocks.first_seed`).
fn first_seed(model: &str, adapter: Option<&str>, salt: Option<&str>) -> u64 {
    let text = format!("prefixroute-tokens\0{}\0{}\0{}", model, adapter.unwrap_or(""), salt.unwrap_or(""));
    xxh3_64(text.as_bytes())
}

/// The stored blocks' keys chained from `seed` (the Python `token_blocks.chain_packed`).
fn chain(tokens: &[u8], block_size: usize, mut seed: u64) -> Vec<u64> {
    tokens
        .chunks_exact(block_size * 8)
        .map(|block| {
            seed = xxh3_64_with_seed(block, seed);
            seed
        })
        .collect()
}

type Steps = Vec<(&'static str, Vec<u64>)>;

/// One engine's engine-hash -> key map (the Python `EngineKeys` map), oldest first.
#[pyclass(module = "prefixroute_native")]
struct NativeKeys {
    map: Lru<u64>,
    model: String,
    block_size: usize,
    capacity: usize,
}

fn push_step(steps: &mut Steps, kind: &'static str, keys: Vec<u64>) {
    if keys.is_empty() {
        return;
    }
    if let Some((last, held)) = steps.last_mut() {
        if *last == kind {
            held.extend(keys);
            return;
        }
    }
    steps.push((kind, keys));
}

impl NativeKeys {
    fn store_run(&mut self, hashes: &[u64], keys: &[u64]) {
        let before = self.map.len();
        for (h, k) in hashes.iter().zip(keys) {
            self.map.replace(*h, *k);
        }
        if self.map.len() - before != hashes.len() {
            for h in hashes {
                self.map.remove(h);
            }
            for (h, k) in hashes.iter().zip(keys) {
                self.map.replace(*h, *k);
            }
        }
        while self.map.len() > self.capacity {
            self.map.pop_front();
        }
    }
}

#[pymethods]
impl NativeKeys {
    #[new]
    fn new(model: String, block_size: usize, capacity: usize) -> PyResult<Self> {
        if block_size == 0 || capacity == 0 {
            return Err(pyo3::exceptions::PyValueError::new_err("block size and capacity must be positive"));
        }
        Ok(Self { map: Lru::new(), model, block_size, capacity })
    }

    fn __len__(&self) -> usize {
        self.map.len()
    }

    fn get(&self, engine_hash: u64) -> Option<u64> {
        self.map.get(&engine_hash)
    }

    fn clear(&mut self) {
        self.map.clear();
    }

    /// The map's heap memory in bytes (Python's tracemalloc does not see it).
    fn heap_bytes(&self) -> usize {
        self.map.heap_bytes()
    }

    /// The entries, oldest first.
    fn items(&self) -> Vec<(u64, u64)> {
        self.map.iter().collect()
    }

    /// A stored run's hashes now stand for these keys, as the newest entries: the Python
    /// map's `update`, then, when some were held already, their removal and a second update;
    /// beyond the cap the oldest go.
    fn store(&mut self, hashes: Vec<u64>, keys: Vec<u64>) {
        self.store_run(&hashes, &keys);
    }

    /// The keys of the hashes held, in order; those are forgotten.
    fn pop_many(&mut self, hashes: Vec<u64>) -> Vec<u64> {
        hashes.iter().filter_map(|h| self.map.remove(h)).collect()
    }

    /// A batch's changes, in our keys: (steps, orphaned, skipped, unknown_removed, clears,
    /// stored_blocks, removed_blocks), as the Python `EngineKeys.apply` counts them.
    fn apply(&mut self, batch: &NativeBatch) -> (Steps, u64, u64, u64, u64, u64, u64) {
        let (mut orphaned, mut skipped, mut unknown, mut clears, mut stored, mut removed) = (0, 0, 0, 0, 0, 0);
        let mut steps: Steps = Vec::new();
        for event in &batch.events {
            match event {
                Event::Stored(e) => {
                    let count = e.hashes.len() as u64;
                    stored += count;
                    if e.block_size != self.block_size || !is_gpu(&e.medium) {
                        skipped += count;
                        continue;
                    }
                    let seed = match e.parent {
                        None => Some(first_seed(&self.model, e.lora_name.as_deref(), e.salt.as_deref())),
                        Some(parent) => self.map.get(&parent),
                    };
                    let Some(seed) = seed else {
                        orphaned += count;
                        continue;
                    };
                    let keys = chain(&e.tokens, e.block_size, seed);
                    self.store_run(&e.hashes, &keys);
                    push_step(&mut steps, "stored", keys);
                }
                Event::Removed { hashes, medium } => {
                    let count = hashes.len() as u64;
                    removed += count;
                    if !is_gpu(medium) {
                        skipped += count;
                        continue;
                    }
                    let keys: Vec<u64> = hashes.iter().filter_map(|h| self.map.remove(h)).collect();
                    unknown += count - keys.len() as u64;
                    push_step(&mut steps, "removed", keys);
                }
                Event::Cleared => {
                    self.map.clear();
                    clears += 1;
                    steps.push(("cleared", Vec::new()));
                }
            }
        }
        (steps, orphaned, skipped, unknown, clears, stored, removed)
    }
}

#[pymodule]
fn prefixroute_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode, m)?)?;
    m.add_class::<NativeBatch>()?;
    m.add_class::<NativeKeys>()?;
    m.add_class::<index::NativeIndex>()?;
    m.add_class::<ext_proc::ExtProcServer>()?;
    m.add_function(wrap_pyfunction!(ext_proc::job_kinds, m)?)?;
    Ok(())
}
