//! The block table (Hystor §4.1), over files instead of a disk's LBNs.
//!
//! A chunk index is split like a virtual address: its low 9 bits pick the
//! entry in a chunk page (BTE level), the next 9 the entry in a sub-region
//! page (BMD level), and the rest, with the file, the region (BGD level).
//! With 64 KiB chunks a sub-region is 32 MiB and a region 16 GiB.
//!
//! Every entry has a 16-bit counter. A request of N sectors adds
//! `b = 2^max(0, 7 - floor(log2 N))` ([`weight`](super::weight)) to the
//! counter of every chunk it touches, of that chunk's sub-region and of its
//! region. When an addition would overflow a counter, every counter of the
//! same page is shifted right by one first: the order within a page is kept,
//! and the order between pages is what the level above records. The region
//! entries of all files form one page. Region and sub-region entries also
//! count their chunk entries (*unique*), which Program 1 sorts by.
//!
//! The table is sparse: a page exists only once one of its chunks was
//! accessed, and grows only up to the highest entry used, so a file read in
//! one place costs a few dozen bytes. Fully used, a chunk costs 2 bytes of
//! counter plus 1 bit of presence; see [`BlockTable::memory_bytes`].

use super::{sectors, weight, ChunkId, ChunkSize};
use crate::state::ns::Ino;
use std::collections::BTreeMap;

/// Bits of a chunk index per level.
pub const FANOUT_BITS: u32 = 9;
/// Entries per sub-region or chunk page.
pub const FANOUT: usize = 1 << FANOUT_BITS;

/// Adds `b` to `page[i]`, shifting the whole page right by one first if the
/// counter would overflow.
fn add(page: &mut [u16], i: usize, b: u16) {
    if page[i].checked_add(b).is_none() {
        for c in page.iter_mut() {
            *c >>= 1;
        }
    }
    page[i] += b;
}

/// Grows `v` with `fill` so that index `i` exists.
fn reach<T: Clone>(v: &mut Vec<T>, i: usize, fill: T) {
    if v.len() <= i {
        v.resize(i + 1, fill);
    }
}

/// A page of chunk entries (BTE): counters and which entries exist.
#[derive(Clone, Debug, Default)]
struct ChunkPage {
    counter: Vec<u16>,
    present: Vec<u64>,
}

impl ChunkPage {
    fn is_present(&self, i: usize) -> bool {
        self.present.get(i / 64).is_some_and(|w| w >> (i % 64) & 1 == 1)
    }
    /// Marks entry `i`; true if it is new.
    fn mark(&mut self, i: usize) -> bool {
        reach(&mut self.present, i / 64, 0);
        let new = !self.is_present(i);
        self.present[i / 64] |= 1 << (i % 64);
        new
    }
    fn entries(&self) -> impl Iterator<Item = (usize, u16)> + '_ {
        self.counter.iter().enumerate().filter(|(i, _)| self.is_present(*i)).map(|(i, &c)| (i, c))
    }
    /// Drops entries from `from` on; returns how many existed.
    fn cut(&mut self, from: usize) -> u16 {
        let gone = (from..self.counter.len()).filter(|&i| self.is_present(i)).count() as u16;
        self.counter.truncate(from);
        for i in from..self.present.len() * 64 {
            if let Some(w) = self.present.get_mut(i / 64) {
                *w &= !(1 << (i % 64));
            }
        }
        gone
    }
    fn memory(&self) -> usize {
        std::mem::size_of::<Self>() + self.counter.capacity() * 2 + self.present.capacity() * 8
    }
}

/// A page of sub-region entries (BMD) and the chunk pages below them.
#[derive(Clone, Debug, Default)]
struct SubPage {
    counter: Vec<u16>,
    unique: Vec<u16>,
    chunks: Vec<Option<Box<ChunkPage>>>,
}

impl SubPage {
    fn memory(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.counter.capacity() * 2
            + self.unique.capacity() * 2
            + self.chunks.capacity() * 8
            + self.chunks.iter().flatten().map(|p| p.memory()).sum::<usize>()
    }
}

/// A region entry (BGD) of one file, with its sub-region page.
#[derive(Clone, Debug, Default)]
struct Region {
    counter: u16,
    unique: u32,
    subs: SubPage,
}

/// The chunk statistics of one file.
#[derive(Clone, Debug)]
struct FileTable {
    chunk: ChunkSize,
    regions: BTreeMap<u64, Region>,
}

/// A region entry as Program 1 sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionEntry {
    /// The file.
    pub ino: Ino,
    /// The region's number in the file.
    pub region: u64,
    /// Its counter.
    pub counter: u16,
    /// How many chunk entries it has.
    pub unique: u32,
    /// The file's chunk size.
    pub chunk: ChunkSize,
}

/// A sub-region entry as Program 1 sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubEntry {
    /// Its index in the region's page.
    pub sub: usize,
    /// Its counter.
    pub counter: u16,
    /// How many chunk entries it has.
    pub unique: u16,
}

/// Hystor's block table for every file with chunk statistics.
#[derive(Clone, Debug, Default)]
pub struct BlockTable {
    files: BTreeMap<Ino, FileTable>,
    regions: usize,
}

fn split(index: u64) -> (u64, usize, usize) {
    let mask = FANOUT as u64 - 1;
    (index >> (2 * FANOUT_BITS), (index >> FANOUT_BITS & mask) as usize, (index & mask) as usize)
}

impl BlockTable {
    /// An empty table.
    pub fn new() -> Self {
        BlockTable::default()
    }

    /// The chunk size of `ino`'s statistics, if it has any.
    pub fn chunk_size(&self, ino: Ino) -> Option<ChunkSize> {
        self.files.get(&ino).map(|f| f.chunk)
    }

    /// Counts a request of `len` bytes at `off` on `ino`. A file keeps the
    /// chunk size of its first request (`chunk`) until it is forgotten.
    /// Returns the chunk size used.
    pub fn record(&mut self, ino: Ino, chunk: ChunkSize, off: u64, len: u64) -> ChunkSize {
        self.record_times(ino, chunk, off, len, 1)
    }

    /// [`Table::record`] of `times` such requests (a heat source's sample
    /// that stands for that many): their weights are added at once, in
    /// steps a counter can take, each halving the page on overflow as one
    /// request would.
    pub fn record_times(&mut self, ino: Ino, chunk: ChunkSize, off: u64, len: u64, times: u32) -> ChunkSize {
        let b = weight(sectors(off, len));
        let chunk = self.files.get(&ino).map_or(chunk, |f| f.chunk);
        if b == 0 {
            return chunk;
        }
        for index in chunk.chunks(off, len) {
            // A step of at most half a counter's range: one halving makes
            // room for it.
            let mut left = u32::from(b) * times;
            while left > 0 {
                let step = left.min(1 << 15);
                self.add(ino, chunk, index, step as u16);
                left -= step;
            }
        }
        chunk
    }

    /// Adds `b` to chunk `index` of `ino` at every level.
    fn add(&mut self, ino: Ino, chunk: ChunkSize, index: u64, b: u16) {
        let (r, s, c) = split(index);
        // The region entries of all files are one page.
        let overflow = self
            .files
            .get(&ino)
            .and_then(|f| f.regions.get(&r))
            .is_some_and(|reg| reg.counter.checked_add(b).is_none());
        if overflow {
            for reg in self.files.values_mut().flat_map(|f| f.regions.values_mut()) {
                reg.counter >>= 1;
            }
        }
        let file = self.files.entry(ino).or_insert_with(|| FileTable { chunk, regions: BTreeMap::new() });
        let new_region = !file.regions.contains_key(&r);
        let region = file.regions.entry(r).or_default();
        if new_region {
            self.regions += 1;
        }
        region.counter += b;
        let subs = &mut region.subs;
        reach(&mut subs.counter, s, 0);
        reach(&mut subs.unique, s, 0);
        reach(&mut subs.chunks, s, None);
        add(&mut subs.counter, s, b);
        let page = subs.chunks[s].get_or_insert_with(Default::default);
        reach(&mut page.counter, c, 0);
        add(&mut page.counter, c, b);
        if page.mark(c) {
            subs.unique[s] += 1;
            region.unique += 1;
        }
    }

    /// Forgets every statistic of `ino`.
    pub fn forget(&mut self, ino: Ino) {
        if let Some(f) = self.files.remove(&ino) {
            self.regions -= f.regions.len();
        }
    }

    /// Keeps only the first `chunks` chunks of `ino`. The counters above a
    /// cut page shrink in proportion to the counts that went with it.
    pub fn truncate(&mut self, ino: Ino, chunks: u64) {
        let Some(file) = self.files.get_mut(&ino) else { return };
        let (r0, s0, c0) = split(chunks);
        // The region holding the new end survives unless the end is its start.
        let drop_first = c0 == 0 && s0 == 0;
        let gone: Vec<u64> = file.regions.range(r0 + u64::from(!drop_first)..).map(|(&r, _)| r).collect();
        for r in gone {
            file.regions.remove(&r);
            self.regions -= 1;
        }
        if drop_first {
            self.forget_if_empty(ino);
            return;
        }
        let Some(region) = file.regions.get_mut(&r0) else { return };
        let subs = &mut region.subs;
        let before: u64 = subs.counter.iter().map(|&c| u64::from(c)).sum();
        // Whole sub-regions past the end.
        let first_gone = s0 + usize::from(c0 != 0);
        for s in first_gone..subs.chunks.len() {
            region.unique -= u32::from(subs.unique[s]);
        }
        subs.counter.truncate(first_gone);
        subs.unique.truncate(first_gone);
        subs.chunks.truncate(first_gone);
        // The sub-region cut in its middle.
        if c0 != 0 {
            if let Some(page) = subs.chunks.get_mut(s0).and_then(|p| p.as_deref_mut()) {
                let old: u64 = page.counter.iter().map(|&c| u64::from(c)).sum();
                let lost = page.cut(c0);
                let kept: u64 = page.counter.iter().map(|&c| u64::from(c)).sum();
                subs.unique[s0] -= lost;
                region.unique -= u32::from(lost);
                subs.counter[s0] = scale(subs.counter[s0], kept, old);
            }
        }
        let after: u64 = subs.counter.iter().map(|&c| u64::from(c)).sum();
        region.counter = scale(region.counter, after, before);
        self.forget_if_empty(ino);
    }

    fn forget_if_empty(&mut self, ino: Ino) {
        if self.files.get(&ino).is_some_and(|f| f.regions.is_empty()) {
            self.files.remove(&ino);
        }
    }

    /// Files with statistics.
    pub fn files(&self) -> usize {
        self.files.len()
    }

    /// The counter of one chunk (0 if it has no entry).
    pub fn counter(&self, id: ChunkId) -> u16 {
        let (r, s, c) = split(id.index);
        self.page(id.ino, r, s).and_then(|p| p.counter.get(c).copied()).unwrap_or(0)
    }

    /// The counter and unique count of one sub-region (chunks
    /// `sub * 512 .. sub * 512 + 512` of the region).
    pub fn sub_entry(&self, ino: Ino, region: u64, sub: usize) -> Option<SubEntry> {
        let subs = &self.files.get(&ino)?.regions.get(&region)?.subs;
        Some(SubEntry { sub, counter: *subs.counter.get(sub)?, unique: subs.unique[sub] })
    }

    fn page(&self, ino: Ino, r: u64, s: usize) -> Option<&ChunkPage> {
        self.files.get(&ino)?.regions.get(&r)?.subs.chunks.get(s)?.as_deref()
    }

    /// Every region entry (the BGD page), in (file, region) order.
    pub fn regions(&self) -> impl Iterator<Item = RegionEntry> + '_ {
        self.files.iter().flat_map(|(&ino, f)| {
            f.regions.iter().map(move |(&region, reg)| RegionEntry {
                ino,
                region,
                counter: reg.counter,
                unique: reg.unique,
                chunk: f.chunk,
            })
        })
    }

    /// The sub-region entries of a region that have chunk entries.
    pub fn subs(&self, ino: Ino, region: u64) -> Vec<SubEntry> {
        let Some(reg) = self.files.get(&ino).and_then(|f| f.regions.get(&region)) else {
            return Vec::new();
        };
        (0..reg.subs.counter.len())
            .filter(|&s| reg.subs.unique[s] > 0)
            .map(|s| SubEntry { sub: s, counter: reg.subs.counter[s], unique: reg.subs.unique[s] })
            .collect()
    }

    /// The chunk entries of a sub-region: (chunk index in the file, counter).
    pub fn chunks(&self, ino: Ino, region: u64, sub: usize) -> Vec<(u64, u16)> {
        let base = (region << (2 * FANOUT_BITS)) + ((sub as u64) << FANOUT_BITS);
        self.page(ino, region, sub)
            .map(|p| p.entries().map(|(c, n)| (base + c as u64, n)).collect())
            .unwrap_or_default()
    }

    /// The `n` chunks of `ino` with the highest counters, highest first
    /// (ties: lower index), for `tierfs stats --file`.
    pub fn hottest(&self, ino: Ino, n: usize) -> Vec<(u64, u16)> {
        let Some(f) = self.files.get(&ino) else { return Vec::new() };
        let mut all: Vec<(u64, u16)> = f
            .regions
            .keys()
            .flat_map(|&r| self.subs(ino, r).into_iter().flat_map(move |s| self.chunks(ino, r, s.sub)))
            .collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        all.truncate(n);
        all
    }

    /// The table's heap memory in bytes, as allocated.
    pub fn memory_bytes(&self) -> usize {
        let per_region = std::mem::size_of::<Region>() + std::mem::size_of::<u64>();
        self.files
            .values()
            .map(|f| {
                std::mem::size_of::<FileTable>()
                    + f.regions.values().map(|reg| per_region + reg.subs.memory()).sum::<usize>()
            })
            .sum()
    }
}

/// `value * kept / old`, for a counter whose children lost part of their
/// counts (all of it when nothing is kept).
fn scale(value: u16, kept: u64, old: u64) -> u16 {
    if old == 0 {
        return if kept == 0 { 0 } else { value };
    }
    (u64::from(value) * kept.min(old) / old) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const K64: ChunkSize = ChunkSize::DEFAULT;

    fn id(ino: Ino, index: u64) -> ChunkId {
        ChunkId::new(ino, index)
    }

    #[test]
    fn a_sampled_request_adds_what_its_requests_would() {
        let (mut one, mut many) = (BlockTable::new(), BlockTable::new());
        for _ in 0..40 {
            one.record(7, K64, 3 * 65536, 4096);
        }
        many.record_times(7, K64, 3 * 65536, 4096, 40);
        assert_eq!(one.counter(id(7, 3)), many.counter(id(7, 3)));
        assert_eq!(one.sub_entry(7, 0, 0), many.sub_entry(7, 0, 0));
        // Past a counter's range the page is halved, as by many requests.
        let (mut one, mut many) = (BlockTable::new(), BlockTable::new());
        for _ in 0..3000 {
            one.record(7, K64, 0, 512);
        }
        many.record_times(7, K64, 0, 512, 3000);
        let (a, b) = (one.counter(id(7, 0)), many.counter(id(7, 0)));
        assert!(a > u16::MAX / 4 && b > u16::MAX / 4, "{a} {b}");
    }

    #[test]
    fn a_request_adds_its_weight_at_every_level() {
        let mut t = BlockTable::new();
        // 8 KiB = 16 sectors: b = 2^(7-4) = 8, to chunk 3 only.
        t.record(7, K64, 3 * 65536 + 100, 8192);
        assert_eq!(t.counter(id(7, 3)), 8);
        assert_eq!(t.sub_entry(7, 0, 0), Some(SubEntry { sub: 0, counter: 8, unique: 1 }));
        let r: Vec<_> = t.regions().collect();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].counter, r[0].unique), (8, 1));
        // 128 KiB over chunks 3 and 4: b = 1 each; the sub-region and the
        // region see both chunks.
        t.record(7, K64, 3 * 65536, 131072);
        assert_eq!((t.counter(id(7, 3)), t.counter(id(7, 4))), (9, 1));
        assert_eq!(t.sub_entry(7, 0, 0), Some(SubEntry { sub: 0, counter: 10, unique: 2 }));
        assert_eq!(t.regions().next().map(|r| (r.counter, r.unique)), Some((10, 2)));
    }

    #[test]
    fn chunk_indices_split_into_region_sub_region_and_chunk() {
        let mut t = BlockTable::new();
        let index = (3 << 18) + (5 << 9) + 7;
        t.record(1, ChunkSize::MIN, index * 4096, 512);
        assert_eq!(t.counter(id(1, index)), 128);
        assert_eq!(t.sub_entry(1, 3, 5).map(|s| s.counter), Some(128));
        assert_eq!(t.chunks(1, 3, 5), vec![(index, 128)]);
        assert_eq!(t.regions().map(|r| r.region).collect::<Vec<_>>(), vec![3]);
        // A page grows only to the entries used.
        assert!(t.memory_bytes() < 1000, "{}", t.memory_bytes());
    }

    #[test]
    fn an_overflow_shifts_the_whole_page_right() {
        let mut t = BlockTable::new();
        // 511 requests of 512 bytes on chunk 0: 65408; one more would overflow.
        for _ in 0..511 {
            t.record(1, K64, 0, 512);
        }
        t.record(1, K64, 65536, 4096); // chunk 1: 16
        assert_eq!(t.counter(id(1, 0)), 65408);
        t.record(1, K64, 0, 512);
        // Chunk page: both shifted, then 128 added to chunk 0.
        assert_eq!(t.counter(id(1, 0)), 32704 + 128);
        assert_eq!(t.counter(id(1, 1)), 8);
        // The sub-region page and the region page overflowed too: each
        // shifted, then added.
        assert_eq!(t.sub_entry(1, 0, 0).map(|s| s.counter), Some((65408 + 16) / 2 + 128));
    }

    #[test]
    fn the_region_page_spans_files() {
        let mut t = BlockTable::new();
        t.record(2, K64, 0, 4096); // 16 on file 2
        for _ in 0..512 {
            t.record(1, K64, 0, 512);
        }
        // File 1's region overflowed once: file 2's region was halved too.
        let r: Vec<_> = t.regions().map(|r| (r.ino, r.counter)).collect();
        assert_eq!(r, vec![(1, 65408 / 2 + 128), (2, 8)]);
        // But file 2's chunk page was not touched.
        assert_eq!(t.counter(id(2, 0)), 16);
    }

    #[test]
    fn a_file_keeps_its_first_chunk_size_until_forgotten() {
        let mut t = BlockTable::new();
        assert_eq!(t.record(1, K64, 0, 4096), K64);
        let big = ChunkSize::new(1 << 20).unwrap();
        assert_eq!(t.record(1, big, 70000, 10), K64);
        assert_eq!(t.counter(id(1, 1)), 128);
        t.forget(1);
        assert_eq!(t.files(), 0);
        assert_eq!(t.record(1, big, 70000, 10), big);
        assert_eq!(t.counter(id(1, 0)), 128);
    }

    #[test]
    fn truncate_drops_chunks_past_the_end_and_scales_the_levels_above() {
        let mut t = BlockTable::new();
        for i in 0..4 {
            t.record(1, K64, i * 65536, 4096); // 16 each
        }
        t.record(1, K64, 600 * 65536, 4096); // sub-region 1
        t.record(1, K64, (1 << 18) * 65536, 4096); // region 1
        assert_eq!(t.regions().count(), 2);
        t.truncate(1, 2);
        assert_eq!(t.regions().count(), 1);
        assert_eq!((t.counter(id(1, 1)), t.counter(id(1, 2))), (16, 0));
        assert_eq!(t.sub_entry(1, 0, 0), Some(SubEntry { sub: 0, counter: 32, unique: 2 }));
        assert_eq!(t.sub_entry(1, 0, 1), None);
        // The region had 80 over its sub-regions; 32 are left.
        assert_eq!(t.regions().next().map(|r| (r.counter, r.unique)), Some((32, 2)));
        t.truncate(1, 0);
        assert_eq!(t.files(), 0);
    }

    #[test]
    fn hottest_chunks_of_a_file() {
        let mut t = BlockTable::new();
        t.record(1, K64, 0, 65536);
        t.record(1, K64, 5 * 65536, 512);
        t.record(1, K64, 9 * 65536, 4096);
        assert_eq!(t.hottest(1, 2), vec![(5, 128), (9, 16)]);
        assert!(t.hottest(2, 2).is_empty());
    }

    #[test]
    fn a_terabyte_of_64k_chunks_fits_in_a_small_share_of_the_ssd() {
        // One entry in every chunk of a 16 GiB region (1/64 of a TiB).
        let mut t = BlockTable::new();
        for index in 0..(1u64 << 18) {
            t.record(1, K64, index << 16, 1);
        }
        let per_tib = t.memory_bytes() as u64 * 64;
        eprintln!("block table: {} bytes per TiB of 64-KiB chunks", per_tib);
        // About 2.2 bytes per chunk: 36 MiB for 1 TiB, 0.035 % of a
        // 100 GiB remap area (docs/src/results.md quotes this test).
        assert!(per_tib < 40 << 20, "{per_tib}");
        assert!(per_tib > 32 << 20, "{per_tib}");
    }

    proptest! {
        /// Against a model without the levels: every chunk counter is what
        /// the model says after its page's shifts, and every unique count is
        /// the number of distinct chunks touched below the entry.
        #[test]
        fn counters_match_a_flat_model(reqs in proptest::collection::vec((0u64..3, 0u64..1200, 1u64..300_000), 1..300)) {
            let mut t = BlockTable::new();
            let mut pages: BTreeMap<(u64, u64), Vec<u16>> = BTreeMap::new();
            let mut touched: BTreeMap<u64, std::collections::BTreeSet<u64>> = BTreeMap::new();
            let chunk = ChunkSize::MIN;
            for (ino, off_chunk, len) in reqs {
                let off = off_chunk * 4096 + 17;
                t.record(ino, chunk, off, len);
                let b = weight(sectors(off, len));
                for index in chunk.chunks(off, len) {
                    let page = pages.entry((ino, index >> 9)).or_insert_with(|| vec![0; FANOUT]);
                    add(page, (index & 511) as usize, b);
                    touched.entry(ino).or_default().insert(index);
                }
            }
            for ((ino, p), page) in &pages {
                for (i, &c) in page.iter().enumerate() {
                    prop_assert_eq!(t.counter(id(*ino, (p << 9) + i as u64)), c);
                }
            }
            for r in t.regions() {
                let n = touched[&r.ino].iter().filter(|&&i| i >> 18 == r.region).count();
                prop_assert_eq!(r.unique as usize, n);
                for s in t.subs(r.ino, r.region) {
                    let n = touched[&r.ino].iter().filter(|&&i| i >> 9 == (r.region << 9) + s.sub as u64).count();
                    prop_assert_eq!(s.unique as usize, n);
                }
            }
        }
    }
}
