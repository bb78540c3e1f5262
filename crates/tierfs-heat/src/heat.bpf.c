// SPDX-License-Identifier: MIT OR GPL-2.0
//
// tierfs's kernel heat source. With FUSE passthrough the kernel reads and
// writes a file's backing copy itself; these programs see those requests on
// the backing file (its page cache's tracepoints and the backing file
// systems' write tracepoints) and hand each to the daemon through a ring
// buffer, tagged with the task and its count of read or write system calls,
// so that the daemon can join the pieces of one request (the kernel reads
// and writes a request in batches of folios).
//
// Only files the daemon watches count (the `filter` map, which it writes
// through a mapping of its own, without a system call: a counter per hash of
// the backing file's tier and inode), and never the daemon's own I/O (the
// userspace path and migrations, which it counts or leaves out itself).
// A sample names the backing file (device and inode); the daemon knows
// whose it is (a hash that collides brings a sample the daemon drops).
//
// Built with clang at build time (crates/tierfs-heat/build.rs); kernel types
// are declared with only the fields used and relocated against the running
// kernel's BTF (CO-RE), so no vmlinux.h is needed.

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u32 dev_t;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name
#define CORE __attribute__((preserve_access_index))

enum { MAP_HASH = 1, MAP_ARRAY = 2, MAP_PERCPU_ARRAY = 6, MAP_RINGBUF = 27 };
#define RB_NO_WAKEUP 1

static void *(*map_lookup)(void *map, const void *key) = (void *)1;
static void *(*ringbuf_reserve)(void *ringbuf, __u64 size, __u64 flags) = (void *)131;
static void (*ringbuf_submit)(void *data, __u64 flags) = (void *)132;
static struct task_struct *(*current_task_btf)(void) = (void *)158;

struct super_block {
	dev_t s_dev;
} CORE;
struct inode {
	unsigned long i_ino;
	struct super_block *i_sb;
	long long i_size;
} CORE;
struct address_space {
	struct inode *host;
} CORE;
struct file {
	struct inode *f_inode;
} CORE;
struct kiocb {
	struct file *ki_filp;
	long long ki_pos;
} CORE;
struct iov_iter {
	_Bool data_source;
	unsigned long count;
} CORE;
struct folio {
	struct address_space *mapping;
	unsigned long index;
} CORE;
struct task_io_accounting {
	__u64 syscr;
	__u64 syscw;
} CORE;
struct task_struct {
	int pid;
	__u64 start_time;
	struct task_io_accounting ioac;
} CORE;

// What a sample is (the daemon's `tierfs_heat::Op` has the same numbers).
enum {
	OP_READ = 1,       // a buffered read, from its first byte to its end
	OP_WRITE = 2,      // a piece of a buffered write
	OP_FAULT = 3,      // a page of a mapping read on a fault
	OP_DEVICE = 4,     // a folio read into the page cache (from the device)
	OP_DIO_READ = 5,   // a direct read
	OP_DIO_WRITE = 6,  // a direct write
};

// Set by the loader: the backing file systems' devices (the kernel's
// encoding, major << 20 | minor) and the daemon's process.
volatile const __u32 ssd_dev = 0;
volatile const __u32 hdd_dev = 0;
volatile const __u32 daemon_tgid = 0;

struct sample {
	__u64 ino;     // the backing file's inode
	__u64 off;
	__u64 time;    // CLOCK_MONOTONIC, nanoseconds
	__u32 len;
	__u32 task;
	__u32 seq;     // the task's read (or write) system calls so far
	__u32 dev;     // the backing file's file system (both tiers may share one)
	__u8 op;
	__u8 pad;
	__u16 weight;  // the requests it stands for (the sampling interval)
	__u32 pad2;
};

// FILTER_SLOTS byte counters, eight to a word; the daemon's `filter_slot`
// computes the same slot.
#define FILTER_WORDS (1 << 17)
#define FILTER_SLOTS (FILTER_WORDS * 8)
#define MMAPABLE (1 << 10)

struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, FILTER_WORDS);
	__uint(map_flags, MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} filter SEC(".maps");

static __attribute__((always_inline)) __u32 filter_slot(__u32 dev, __u64 ino)
{
	__u64 h = (ino ^ ((__u64)dev << 32)) * 0x9E3779B97F4A7C15ULL;
	return (__u32)(h >> 44);  // 20 bits: FILTER_SLOTS
}

struct {
	__uint(type, MAP_RINGBUF);
	__uint(max_entries, 4 << 20);
} samples SEC(".maps");

struct {
	__uint(type, MAP_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

// Set by the daemon (a global: read without a map lookup): one request
// in `every` is sampled (1: all).
volatile __u32 every = 1;

// This CPU's last decisions, so that every piece of one request gets the
// decision its first piece got: a write piece that starts within or right
// after the last one, by the same thread, on the same file; a read batch or
// a page read from the device in the same read call (the thread's read
// count) on the same file, and for a read the same end (every batch of one
// read reports its end; a device page comes before the batch that asked for
// it and does not know it). And the last call that reported a page read
// from the device, which it does once. A thread is its task_struct's
// address, which the one helper call of an unsampled request gives. The
// last thread found not to be the daemon's (with its start time: a new
// thread may be given a gone one's address), which spares a sampled
// request of it the costly question.
// And this CPU's random state (xorshift64*, seeded by the kernel's
// generator at its first use): a draw costs a few instructions instead of
// a helper call.
struct last {
	__u64 task;
	__u64 ino;
	__u64 start;
	__u64 end;
	__u64 r_task;
	__u64 r_ino;
	__u64 r_start;
	__u64 r_end;
	__u32 r_seq;
	__u32 keep;
	__u32 r_keep;
	__u32 dev_seq;
	__u64 dev_task;
	__u64 dev_ino;
	__u64 rnd;
	__u64 other_task;
	__u64 other_start;
};

struct {
	__uint(type, MAP_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct last);
} last SEC(".maps");

// The daemon's process in its own PID namespace (set by the loader with
// the namespace's device and inode), so that the filter works in a
// container too.
struct pidns_info {
	__u32 pid;
	__u32 tgid;
};
volatile const __u64 pidns_dev = 0;
volatile const __u64 pidns_ino = 0;
static long (*get_ns_current_pid_tgid)(__u64 dev, __u64 ino, struct pidns_info *nsdata, __u32 size) = (void *)120;
static __u64 (*ktime_get_ns)(void) = (void *)5;
static __u32 (*prandom_u32)(void) = (void *)7;

// One in `weight`, drawn afresh: a decision that depended only on the
// thread and the offset would sample the same pages of a hot chunk every
// time and never the others, and the chunk's count would be as wrong at the
// end of a run as at its start.
static __attribute__((always_inline)) __u32 draw(struct last *l, __u32 weight)
{
	if (weight <= 1)
		return weight;
	__u64 x = l->rnd;
	if (!x)
		x = ((__u64)prandom_u32() << 32) | prandom_u32() | 1;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	l->rnd = x;
	// The product's high 32 bits of 64: uniform in [0, 2^32); below
	// 2^32 / weight one time in weight (no division).
	__u64 r = (x * 0x2545F4914F6CDD1DULL) >> 32;
	return (r * weight) >> 32 == 0 ? weight : 0;
}

// A request is sampled or not before the costliest question is asked (is
// this the daemon's process): past the sampling rate most requests are not
// sampled. `end` is the read's end for a read batch, 0 otherwise.
static __attribute__((always_inline)) int emit(struct inode *inode, __u64 off, __u64 len, __u32 op, __u64 end)
{
	__u32 zero = 0;
	if (!inode)
		return 0;
	struct super_block *sb = inode->i_sb;
	if (!sb)
		return 0;
	__u32 dev = sb->s_dev;
	if (dev != ssd_dev && dev != hdd_dev)
		return 0;
	__u64 ino = inode->i_ino;
	__u32 slot = filter_slot(dev, ino);
	__u32 word = slot >> 3;
	__u64 *w = map_lookup(&filter, &word);
	if (!w || !((*w >> ((slot & 7) * 8)) & 0xff))
		return 0;
	struct task_struct *t = current_task_btf();
	__u64 id = (__u64)t;
	__u32 weight = every > 1 ? every : 1;
	struct last *l = map_lookup(&last, &zero);
	if (!l)
		return 0;
	// The thread's read count keys a read call's decision; the others need
	// their count only once sampled.
	__u32 seq = 0;
	if (op == OP_WRITE) {
		if (l->task == id && l->ino == ino && off >= l->start && off <= l->end) {
			weight = l->keep;
			if (off + len > l->end)
				l->end = off + len;
		} else {
			l->task = id;
			l->ino = ino;
			l->start = off;
			l->end = off + len;
			l->keep = draw(l, weight);
			weight = l->keep;
		}
	} else if (op == OP_READ || op == OP_DEVICE) {
		seq = t->ioac.syscr;
		if (l->r_task == id && l->r_seq == seq && l->r_ino == ino &&
		    (op == OP_DEVICE || l->r_end == end || l->r_end == 0)) {
			// A later batch of a read whose first batch came (further
			// on, to the same end): that one said where the read
			// begins and ends, and the daemon ignores the rest. (Reads
			// through io_uring leave the read count alone: one at the
			// same offset is another read.)
			if (op == OP_READ && l->r_end == end && off > l->r_start)
				return 0;
			weight = l->r_keep;
			if (op == OP_READ && l->r_end == 0) {
				l->r_start = off;
				l->r_end = end;
			}
		} else {
			l->r_task = id;
			l->r_seq = seq;
			l->r_ino = ino;
			l->r_start = off;
			l->r_end = end;
			l->r_keep = draw(l, weight);
			weight = l->r_keep;
		}
	} else {
		weight = draw(l, weight);
	}
	if (!weight)
		return 0;
	if (op != OP_READ && op != OP_DEVICE)
		seq = (op == OP_WRITE || op == OP_DIO_WRITE) ? t->ioac.syscw : t->ioac.syscr;
	// A read call's pages from the device come as one sample.
	if (op == OP_DEVICE && l->dev_task == id && l->dev_seq == seq && l->dev_ino == ino)
		return 0;
	// The daemon's own I/O (the userspace path, migrations).
	__u64 started = t->start_time;
	if (l->other_task != id || l->other_start != started) {
		struct pidns_info ns = {};
		if (get_ns_current_pid_tgid(pidns_dev, pidns_ino, &ns, sizeof(ns)) == 0 && ns.tgid == daemon_tgid)
			return 0;
		l->other_task = id;
		l->other_start = started;
	}
	if (op == OP_DEVICE) {
		l->dev_task = id;
		l->dev_seq = seq;
		l->dev_ino = ino;
	}
	struct sample *s = ringbuf_reserve(&samples, sizeof(*s), 0);
	if (!s) {
		__u64 *n = map_lookup(&lost, &zero);
		if (n)
			*n += 1;
		return 0;
	}
	s->ino = ino;
	s->dev = dev;
	s->pad = 0;
	s->pad2 = 0;
	s->off = off;
	s->time = ktime_get_ns();
	s->len = len > 0xffffffffULL ? 0xffffffffU : (__u32)len;
	s->task = t->pid;
	s->seq = seq;
	s->op = op;
	s->weight = weight > 0xffff ? 0xffff : weight;
	ringbuf_submit(s, RB_NO_WAKEUP);
	return 0;
}

// The range asked for, in whole pages, ends at most at the end of the
// file: a read of 1 MiB of a 20-KiB file reads 20 KiB, as the daemon
// would count it.
SEC("tp_btf/mm_filemap_get_pages")
int get_pages(__u64 *ctx)
{
	struct address_space *m = (struct address_space *)ctx[0];
	struct inode *host = m->host;
	if (!host)
		return 0;
	__u64 start = ctx[1] << 12, end = (ctx[2] + 1) << 12;
	long long size = host->i_size;
	if (size >= 0 && end > (__u64)size)
		end = size;
	if (end <= start)
		return 0;
	// Every batch of one read reports the same end.
	return emit(host, start, end - start, OP_READ, end);
}

SEC("tp_btf/mm_filemap_fault")
int fault(__u64 *ctx)
{
	struct address_space *m = (struct address_space *)ctx[0];
	return emit(m->host, ctx[1] << 12, 4096, OP_FAULT, 0);
}

SEC("tp_btf/mm_filemap_add_to_page_cache")
int add_page(__u64 *ctx)
{
	struct folio *f = (struct folio *)ctx[0];
	struct address_space *m = f->mapping;
	if (!m)
		return 0;
	return emit(m->host, f->index << 12, 4096, OP_DEVICE, 0);
}

SEC("tp_btf/ext4_da_write_begin")
int ext4_da_write(__u64 *ctx)
{
	return emit((struct inode *)ctx[0], ctx[1], (__u32)ctx[2], OP_WRITE, 0);
}

SEC("tp_btf/ext4_write_begin")
int ext4_write(__u64 *ctx)
{
	return emit((struct inode *)ctx[0], ctx[1], (__u32)ctx[2], OP_WRITE, 0);
}

SEC("tp_btf/xfs_file_buffered_write")
int xfs_write(__u64 *ctx)
{
	struct kiocb *k = (struct kiocb *)ctx[0];
	struct iov_iter *it = (struct iov_iter *)ctx[1];
	return emit(k->ki_filp->f_inode, k->ki_pos, it->count, OP_WRITE, 0);
}

SEC("tp_btf/iomap_dio_rw_begin")
int dio(__u64 *ctx)
{
	struct kiocb *k = (struct kiocb *)ctx[0];
	struct iov_iter *it = (struct iov_iter *)ctx[1];
	return emit(k->ki_filp->f_inode, k->ki_pos, it->count, it->data_source ? OP_DIO_WRITE : OP_DIO_READ, 0);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
