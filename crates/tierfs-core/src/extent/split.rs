//! A split file: its HDD file (the home of every byte and of the size),
//! its sparse shadow file on the SSD, and the extent map. The data path
//! (reads and writes cut into pieces per tier) and the chunk mover (copy a
//! chunk up, write it back, drop it) with their named crash points, and
//! recovery after a crash.
//!
//! Beyond the map's invariants (I1–I3, see [`super::map`]):
//! - **I4** Shadow bytes at or past the file's size are zero, so a file
//!   that grows again reads zeros there. Truncate cuts the HDD file first
//!   and then zeroes the shadow past the new size; recovery does it again
//!   ([`Split::recover`]) for a crash in between.
//!
//! The map is shared by every split file of the volume: it is locked only
//! to look up or change entries (a commit holds it across its flush), never
//! across file I/O. The caller keeps a file's chunk set still while it
//! reads or writes: the file's I/O lock, taken for reading by reads, writes
//! and punches, for writing by the chunk mover and truncate. A chunk move
//! is at most 1 MiB, so the mover does not need the migration's change
//! counter to copy while writers run.

use super::map::{ChunkState, ExtentMap};
use super::{ChunkId, ChunkSize};
use crate::error::{Error, Result};
use crate::state::ns::Ino;
use crate::store::{read_full, write_full, Store};
use crate::tier::Tier;
use parking_lot::Mutex;

/// Named steps of the chunk mover where tests simulate a crash.
pub mod points {
    /// Add: the chunk is copied to the shadow, not synced.
    pub const ADD_COPIED: &str = "extent-add-copied";
    /// Add: the shadow is synced, the map does not have the chunk yet.
    pub const ADD_SYNCED: &str = "extent-add-synced";
    /// Add: the map has the chunk.
    pub const ADD_COMMITTED: &str = "extent-add-committed";
    /// Write-back: the HDD file has the chunk's bytes, not synced.
    pub const BACK_COPIED: &str = "extent-back-copied";
    /// Write-back: the HDD file is synced, the chunk is not yet clean.
    pub const BACK_SYNCED: &str = "extent-back-synced";
    /// Drop: the chunk left the map, its shadow bytes are still there.
    pub const DROP_UNMAPPED: &str = "extent-drop-unmapped";
    /// Drop: the shadow bytes are punched out.
    pub const DROP_PUNCHED: &str = "extent-drop-punched";
    /// Unsplit: every dirty chunk is written back and the HDD file synced;
    /// the chunks are still mapped.
    pub const UNSPLIT_SYNCED: &str = "extent-unsplit-synced";
    /// Buffered write: the new chunks' bytes (the write over the HDD's
    /// bytes) are in the shadow, not synced.
    pub const BUFFER_COPIED: &str = "extent-buffer-copied";
    /// Buffered write: the shadow is synced, the map does not have the
    /// new chunks yet.
    pub const BUFFER_SYNCED: &str = "extent-buffer-synced";
    /// Buffered write: the new chunks are in the map, dirty; the write has
    /// not been applied to chunks that were mapped before.
    pub const BUFFER_COMMITTED: &str = "extent-buffer-committed";
    /// Every point, in protocol order.
    pub const ALL: [&str; 11] = [
        ADD_COPIED,
        ADD_SYNCED,
        ADD_COMMITTED,
        BACK_COPIED,
        BACK_SYNCED,
        DROP_UNMAPPED,
        DROP_PUNCHED,
        UNSPLIT_SYNCED,
        BUFFER_COPIED,
        BUFFER_SYNCED,
        BUFFER_COMMITTED,
    ];
}

/// A dirty chunk's SSD copy read for a write-back (see
/// [`Split::read_dirty`]).
#[derive(Debug)]
pub struct DirtyCopy {
    index: u64,
    mark: u64,
    /// Offset and bytes; `None` if the chunk is past the end.
    bytes: Option<(u64, Vec<u8>)>,
}

impl DirtyCopy {
    /// True if storing it back writes the HDD file (it has bytes there).
    pub fn writes_home(&self) -> bool {
        self.bytes.is_some()
    }
}

/// Where a test stops the mover: called at each named point; an error
/// stops the move there, as a crash would.
pub type CrashHook<'a> = &'a mut dyn FnMut(&'static str) -> Result<()>;

const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;

/// One split file's two copies.
pub struct Split<'a, S: Store> {
    /// The HDD tier.
    pub hdd: &'a S,
    /// The file on the HDD.
    pub home: &'a S::File,
    /// The SSD tier.
    pub ssd: &'a S,
    /// The shadow file on the SSD (created, and its name synced, before
    /// the first chunk is committed).
    pub shadow: &'a S::File,
    /// The file.
    pub ino: Ino,
    /// Who writes (a request's caller): the bytes of a write, and the
    /// growth of the file, land as that user (quotas, the space a file
    /// system keeps for root). Nothing else runs so: the extent map's
    /// commits write the state database, which only the daemon's user may
    /// reach (run as the writer, a buffered write failed with EACCES, and a
    /// commit that rotated the database's journal broke it for everyone).
    pub caller: Option<crate::vfs::Ctx>,
}

impl<S: Store> Split<'_, S> {
    /// The file's size (the HDD file's).
    pub fn size(&self) -> Result<u64> {
        Ok(self.hdd.fstat(self.home)?.size)
    }

    /// Runs `f`, a backing call that writes a write's bytes or grows the
    /// file, as the writer if there is one (see [`Split::caller`]).
    fn as_writer<T>(&self, f: impl FnOnce() -> T) -> T {
        let _as = self.caller.as_ref().map(|c| crate::vfs::creds::AsCaller::new(c, false));
        f()
    }

    fn chunk(&self, map: &Mutex<ExtentMap>, default: ChunkSize) -> ChunkSize {
        map.lock().chunk_size(self.ino).unwrap_or(default)
    }

    /// The HDD file's backing identity, for a file about to get its first
    /// chunk (the map records it then); `None` if the map knows the file.
    fn first_home(&self, map: &Mutex<ExtentMap>) -> Result<Option<crate::state::ns::BackingId>> {
        if map.lock().chunk_size(self.ino).is_some() {
            return Ok(None);
        }
        let st = self.hdd.fstat(self.home)?;
        Ok(Some((st.dev, st.ino)))
    }

    /// Reads up to `buf.len()` bytes at `off`, each piece from its tier.
    /// Returns the bytes read and whether the SSD served all of them.
    pub fn read(&self, map: &Mutex<ExtentMap>, off: u64, buf: &mut [u8]) -> Result<(usize, bool)> {
        let size = self.size()?;
        if off >= size {
            return Ok((0, false));
        }
        let len = (buf.len() as u64).min(size - off);
        let pieces = map.lock().split(self.ino, off, len);
        let mut all_ssd = true;
        for p in pieces {
            let at = (p.off - off) as usize;
            let dst = &mut buf[at..at + p.len as usize];
            let n = match p.tier {
                Tier::Ssd => read_full(self.ssd, self.shadow, dst, p.off)?,
                Tier::Hdd => {
                    all_ssd = false;
                    read_full(self.hdd, self.home, dst, p.off)?
                }
            };
            // A short read inside the size: a shadow hole past its end.
            dst[n..].fill(0);
        }
        Ok((len as usize, all_ssd))
    }

    /// Writes `data` at `off`: the HDD file grows first if the write
    /// extends it (the caller serialises writes that may extend the file);
    /// pieces on mapped chunks go to the shadow and make those chunks
    /// dirty. Returns whether the SSD took all of it.
    pub fn write(&self, map: &Mutex<ExtentMap>, off: u64, data: &[u8]) -> Result<bool> {
        self.write_pieces(map, off, data).map_err(|(_, e)| e)
    }

    /// [`write`](Self::write), saying on failure which tier's backing call
    /// failed: ENOSPC from the HDD is not a full SSD. A write that grew the
    /// file and then failed cuts it back to its old size.
    pub fn write_pieces(
        &self,
        map: &Mutex<ExtentMap>,
        off: u64,
        data: &[u8],
    ) -> std::result::Result<bool, (Tier, Error)> {
        if data.is_empty() {
            return Ok(false);
        }
        let end = off.checked_add(data.len() as u64).ok_or((Tier::Hdd, Error::errno(libc::EFBIG)))?;
        let pieces = {
            let mut m = map.lock();
            let pieces = m.split(self.ino, off, data.len() as u64);
            let chunk = m.chunk_size(self.ino).unwrap_or_default();
            // Dirty before the bytes land: a write that fails half way
            // must not leave new bytes on a "clean" chunk.
            for p in pieces.iter().filter(|p| p.tier == Tier::Ssd) {
                for index in chunk.chunks(p.off, p.len) {
                    m.note_write(ChunkId::new(self.ino, index));
                }
            }
            pieces
        };
        // An unsplit file is one HDD piece, which grows the file itself:
        // no fstat on its path.
        let split = pieces.iter().any(|p| p.tier == Tier::Ssd);
        let hdd_err = |e: Error| (Tier::Hdd, e);
        let old = if split { Some(self.size().map_err(hdd_err)?) } else { None };
        let grown = old.filter(|&old| end > old);
        if grown.is_some() {
            self.as_writer(|| self.hdd.set_len(self.home, end)).map_err(|e| hdd_err(e.into()))?;
        }
        for p in &pieces {
            let src = &data[(p.off - off) as usize..(p.off - off + p.len) as usize];
            let r = self.as_writer(|| match p.tier {
                Tier::Ssd => write_full(self.ssd, self.shadow, src, p.off),
                Tier::Hdd => write_full(self.hdd, self.home, src, p.off),
            });
            if let Err(e) = r {
                if let Some(old) = grown {
                    // Best effort: the error is the answer either way.
                    if let Err(cut) = self.truncate(map, old) {
                        tracing::warn!(ino = self.ino, error = %cut, "a failed write could not cut the file back");
                    }
                }
                return Err((p.tier, e.into()));
            }
        }
        Ok(!pieces.is_empty() && pieces.iter().all(|p| p.tier == Tier::Ssd))
    }

    /// fsync: both copies. The map's entries are durable already (I1).
    pub fn fsync(&self) -> Result<()> {
        self.hdd.fsync(self.home, false)?;
        self.ssd.fsync(self.shadow, true)?;
        Ok(())
    }

    /// Cuts or extends the file to `size`: the HDD file first, then the
    /// shadow past the new end is zeroed (I4) and chunks wholly past it
    /// leave the map.
    pub fn truncate(&self, map: &Mutex<ExtentMap>, size: u64) -> Result<()> {
        self.hdd.set_len(self.home, size)?;
        self.cut_shadow(map, size)
    }

    /// The shadow half of a truncate to `size`, also redone by recovery.
    /// When it touches a mapped chunk, the HDD file's new size is made
    /// durable first (else a power cut could bring back the old size over
    /// chunks already unmapped: stale HDD bytes in place of synced SSD
    /// ones), and the shadow is synced after (else the old bytes past the
    /// cut could come back once the file grows again).
    fn cut_shadow(&self, map: &Mutex<ExtentMap>, size: u64) -> Result<()> {
        let (chunk, gone, partial) = {
            let m = map.lock();
            let Some(chunk) = m.chunk_size(self.ino) else { return Ok(()) };
            let keep = chunk.count(size);
            let gone: Vec<u64> = m.chunks(self.ino).map(|(i, _)| i).filter(|&i| i >= keep).collect();
            let partial = !size.is_multiple_of(chunk.bytes()) && m.get(ChunkId::new(self.ino, keep - 1)).is_some();
            (chunk, gone, partial)
        };
        let keep = chunk.count(size);
        if gone.is_empty() && !partial {
            return Ok(());
        }
        self.hdd.fsync(self.home, true)?;
        if partial {
            // Both copies change alike, but a write-back that read the
            // chunk before must not call it clean.
            map.lock().note_write(ChunkId::new(self.ino, keep - 1));
            self.ssd.fallocate(self.shadow, PUNCH, size, keep * chunk.bytes() - size)?;
        }
        if !gone.is_empty() {
            map.lock().commit_discarded(self.ino, &gone)?;
            for i in gone {
                self.ssd.fallocate(self.shadow, PUNCH, i * chunk.bytes(), chunk.bytes())?;
            }
        }
        self.ssd.fsync(self.shadow, true)?;
        Ok(())
    }

    /// Punches a hole: in the HDD file, and in the shadow where the range
    /// covers mapped chunks (their states do not change: both copies
    /// change alike).
    pub fn punch(&self, map: &Mutex<ExtentMap>, off: u64, len: u64) -> Result<()> {
        self.hdd.fallocate(self.home, PUNCH, off, len)?;
        self.punch_shadow(map, off, len)
    }

    /// The shadow half of a punch (or of zeroing a range): the range's
    /// pieces on mapped chunks are punched out of the shadow. They count
    /// as written (dirty, and a write-back that read them before is not
    /// the newest copy): the HDD half may have raced such a write-back.
    pub fn punch_shadow(&self, map: &Mutex<ExtentMap>, off: u64, len: u64) -> Result<()> {
        let pieces = {
            let mut m = map.lock();
            let pieces = m.split(self.ino, off, len);
            let chunk = m.chunk_size(self.ino).unwrap_or_default();
            for p in pieces.iter().filter(|p| p.tier == Tier::Ssd) {
                for index in chunk.chunks(p.off, p.len) {
                    m.note_write(ChunkId::new(self.ino, index));
                }
            }
            pieces
        };
        for p in pieces {
            if p.tier == Tier::Ssd {
                self.ssd.fallocate(self.shadow, PUNCH, p.off, p.len)?;
            }
        }
        Ok(())
    }

    /// The byte range of chunk `index` within the file, or `None` past the end.
    fn range(&self, chunk: ChunkSize, index: u64) -> Result<Option<(u64, usize)>> {
        let start = index * chunk.bytes();
        let size = self.size()?;
        Ok((start < size).then(|| (start, (size - start).min(chunk.bytes()) as usize)))
    }

    /// Copies chunk `index` to the SSD: HDD → shadow, shadow synced, then
    /// committed to the map (I1). The chunk size is the file's, or `chunk`
    /// for its first chunk.
    pub fn add(&self, map: &Mutex<ExtentMap>, index: u64, chunk: ChunkSize, crash: CrashHook<'_>) -> Result<()> {
        let chunk = self.chunk(map, chunk);
        let id = ChunkId::new(self.ino, index);
        if map.lock().get(id).is_some() {
            return Ok(());
        }
        let Some((start, len)) = self.range(chunk, index)? else {
            return Err(Error::Invalid(format!("chunk {index} is past the end of file {}", self.ino)));
        };
        let mut buf = vec![0u8; len];
        let n = read_full(self.hdd, self.home, &mut buf, start)?;
        buf[n..].fill(0);
        write_full(self.ssd, self.shadow, &buf, start)?;
        if (len as u64) < chunk.bytes() {
            // The last chunk: whatever an earlier life left past the size
            // must read as zeros if the file grows (I4).
            self.ssd.fallocate(self.shadow, PUNCH, start + len as u64, chunk.bytes() - len as u64)?;
        }
        crash(points::ADD_COPIED)?;
        self.ssd.fsync(self.shadow, true)?;
        crash(points::ADD_SYNCED)?;
        let home = self.first_home(map)?;
        map.lock().commit_present(id, chunk, home)?;
        crash(points::ADD_COMMITTED)
    }

    /// Writes a dirty chunk back: shadow → HDD, HDD synced, then clean.
    /// The caller keeps writers out for the whole call.
    pub fn write_back(&self, map: &Mutex<ExtentMap>, index: u64, crash: CrashHook<'_>) -> Result<()> {
        if let Some(copy) = self.read_dirty(map, index)? {
            self.store_back(map, copy, crash)?;
        }
        Ok(())
    }

    /// The first half of a write-back that lets writers go on meanwhile
    /// (the scrubber): a dirty chunk's SSD copy, read while the caller
    /// keeps writers out. `None` if the chunk is not dirty.
    pub fn read_dirty(&self, map: &Mutex<ExtentMap>, index: u64) -> Result<Option<DirtyCopy>> {
        let id = ChunkId::new(self.ino, index);
        let mark = {
            let m = map.lock();
            if m.get(id) != Some(ChunkState::Dirty) {
                return Ok(None);
            }
            m.write_mark(id)
        };
        let chunk = self.chunk(map, ChunkSize::DEFAULT);
        let bytes = match self.range(chunk, index)? {
            Some((start, len)) => {
                let mut buf = vec![0u8; len];
                let n = read_full(self.ssd, self.shadow, &mut buf, start)?;
                buf[n..].fill(0);
                Some((start, buf))
            }
            None => None,
        };
        Ok(Some(DirtyCopy { index, mark, bytes }))
    }

    /// The second half: the copy goes to the HDD file, which is synced;
    /// the chunk is clean unless a write reached it since the copy was
    /// read (the newer bytes win: it stays dirty). Writers may run; the
    /// caller keeps the chunk set still (the file's migration mark). True
    /// if the chunk is clean now.
    pub fn store_back(&self, map: &Mutex<ExtentMap>, copy: DirtyCopy, crash: CrashHook<'_>) -> Result<bool> {
        if let Some((start, buf)) = &copy.bytes {
            write_full(self.hdd, self.home, buf, *start)?;
            crash(points::BACK_COPIED)?;
            self.hdd.fsync(self.home, true)?;
            crash(points::BACK_SYNCED)?;
        }
        Ok(map.lock().note_written_back_since(ChunkId::new(self.ino, copy.index), copy.mark))
    }

    /// A write buffered in the write-back area (Hystor §5.5): the chunks
    /// it touches that are not on the SSD are made there from the write
    /// over the HDD's bytes (read only where the write does not cover them
    /// and the file has bytes), the shadow is synced and the chunks enter
    /// the map dirty with one flush, then the write is applied like any
    /// write to a split file. The HDD file only grows if the write extends
    /// the file. Returns the chunks that joined. The caller keeps other
    /// writers and chunk moves out, holds the SSD room, and passes the
    /// chunk size for a file without chunks.
    pub fn buffer(
        &self,
        map: &Mutex<ExtentMap>,
        off: u64,
        data: &[u8],
        chunk: ChunkSize,
        crash: CrashHook<'_>,
    ) -> Result<Vec<u64>> {
        let chunk = self.chunk(map, chunk);
        let len = data.len() as u64;
        let end = off.checked_add(len).ok_or_else(|| Error::errno(libc::EFBIG))?;
        let new = map.lock().unmapped(self.ino, chunk, off, len);
        let old = self.size()?;
        let size = old.max(end);
        for &i in &new {
            let start = i * chunk.bytes();
            let image_end = start + chunk.within(i, size);
            let mut image = vec![0u8; (image_end - start) as usize];
            let known = start + chunk.within(i, old);
            let covered = off <= start && end >= known;
            if known > start && !covered {
                let n = read_full(self.hdd, self.home, &mut image[..(known - start) as usize], start)?;
                image[n..].fill(0);
            }
            let (a, b) = (off.max(start), end.min(image_end));
            if a < b {
                image[(a - start) as usize..(b - start) as usize]
                    .copy_from_slice(&data[(a - off) as usize..(b - off) as usize]);
            }
            self.as_writer(|| write_full(self.ssd, self.shadow, &image, start))?;
            if image_end - start < chunk.bytes() {
                // Past the size the shadow reads as zeros (I4).
                self.ssd.fallocate(self.shadow, PUNCH, image_end, start + chunk.bytes() - image_end)?;
            }
        }
        crash(points::BUFFER_COPIED)?;
        if !new.is_empty() {
            self.ssd.fsync(self.shadow, true)?;
            crash(points::BUFFER_SYNCED)?;
            let home = self.first_home(map)?;
            map.lock().commit_new(self.ino, chunk, &new, ChunkState::Dirty, home)?;
            crash(points::BUFFER_COMMITTED)?;
        }
        // The HDD file grows only now, by the write itself (which cuts it
        // back if it fails): a crash before leaves the size as it was, and
        // new chunks past it are dropped by recovery. Review finding: grown
        // first, a crash before the commit left zeros in the file.
        self.write(map, off, data)?;
        Ok(new)
    }

    /// Takes chunk `index` off the SSD: written back if dirty, out of the
    /// map durably, then punched out of the shadow (I3).
    pub fn drop_chunk(&self, map: &Mutex<ExtentMap>, index: u64, crash: CrashHook<'_>) -> Result<()> {
        let chunk = {
            let m = map.lock();
            let Some(chunk) = m.chunk_size(self.ino) else { return Ok(()) };
            if m.get(ChunkId::new(self.ino, index)).is_none() {
                return Ok(());
            }
            chunk
        };
        self.write_back(map, index, crash)?;
        map.lock().commit_absent(self.ino, &[index])?;
        crash(points::DROP_UNMAPPED)?;
        self.ssd.fallocate(self.shadow, PUNCH, index * chunk.bytes(), chunk.bytes())?;
        crash(points::DROP_PUNCHED)
    }

    /// Takes every chunk off the SSD: the dirty ones are written back and
    /// the HDD file synced once, then all leave the map durably (I3). The
    /// shadow's bytes stay: the caller removes the shadow file (a crash
    /// before that leaves a shadow without a map entry, which recovery
    /// removes). Returns the chunks that were mapped.
    pub fn unsplit(&self, map: &Mutex<ExtentMap>, crash: CrashHook<'_>) -> Result<u64> {
        let (chunk, chunks) = {
            let m = map.lock();
            let Some(chunk) = m.chunk_size(self.ino) else { return Ok(0) };
            (chunk, m.chunks(self.ino).collect::<Vec<_>>())
        };
        let mut wrote = false;
        for &(index, state) in &chunks {
            if state != ChunkState::Dirty {
                continue;
            }
            if let Some((start, len)) = self.range(chunk, index)? {
                let mut buf = vec![0u8; len];
                let n = read_full(self.ssd, self.shadow, &mut buf, start)?;
                buf[n..].fill(0);
                write_full(self.hdd, self.home, &buf, start)?;
                wrote = true;
            }
        }
        if wrote {
            self.hdd.fsync(self.home, true)?;
        }
        crash(points::UNSPLIT_SYNCED)?;
        let indices: Vec<u64> = chunks.iter().map(|c| c.0).collect();
        map.lock().commit_discarded(self.ino, &indices)?;
        Ok(indices.len() as u64)
    }

    /// After a crash (the map loaded with every chunk dirty if the
    /// shutdown was unclean): chunks past the size leave the map and the
    /// shadow past the size is zeroed (I4); shadow bytes of chunks not in
    /// the map (a copy that was not committed, a drop that was not
    /// punched) are punched out.
    pub fn recover(&self, map: &Mutex<ExtentMap>) -> Result<()> {
        let size = self.size()?;
        self.cut_shadow(map, size)?;
        let Some(chunk) = map.lock().chunk_size(self.ino) else {
            // Nothing mapped: the whole shadow is garbage.
            self.ssd.set_len(self.shadow, 0)?;
            return Ok(());
        };
        let shadow_size = self.ssd.fstat(self.shadow)?.size;
        let mut at = 0;
        while at < shadow_size {
            let data = match self.ssd.seek(self.shadow, at as i64, libc::SEEK_DATA) {
                Ok(d) => d as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) => break,
                Err(e) => return Err(e.into()),
            };
            let index = data >> chunk.shift();
            if map.lock().get(ChunkId::new(self.ino, index)).is_none() {
                self.ssd.fallocate(self.shadow, PUNCH, index * chunk.bytes(), chunk.bytes())?;
            }
            at = (index + 1) * chunk.bytes();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
