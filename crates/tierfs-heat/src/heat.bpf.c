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
// Only files the daemon watches count (the `watched` map: backing device
// and inode to the tierfs file), and never the daemon's own I/O (the
// userspace path and migrations, which it counts or leaves out itself).
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
static __u64 (*current_pid_tgid)(void) = (void *)14;
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

struct key {
	__u32 dev;
	__u32 pad;
	__u64 ino;
};

struct sample {
	__u64 file;    // the watched value: tierfs inode << 1 | tier
	__u64 off;
	__u32 len;
	__u32 task;
	__u32 seq;     // the task's read (or write) system calls so far
	__u16 op;
	__u16 weight;  // the requests it stands for (the sampling interval)
};

struct {
	__uint(type, MAP_HASH);
	__uint(max_entries, 65536);
	__type(key, struct key);
	__type(value, __u64);
} watched SEC(".maps");

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

// Set by the daemon: one request in `every` is sampled (1: all). Which
// ones is decided by the thread and its call, so that all the pieces of a
// sampled call are, and none of another's.
struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} every SEC(".maps");

static __attribute__((always_inline)) int emit(struct inode *inode, __u64 off, __u64 len, __u32 op)
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
	__u64 id = current_pid_tgid();
	if ((__u32)(id >> 32) == daemon_tgid)
		return 0;
	struct task_struct *t = current_task_btf();
	__u64 seq = (op == OP_WRITE || op == OP_DIO_WRITE) ? t->ioac.syscw : t->ioac.syscr;
	__u32 *n_every = map_lookup(&every, &zero);
	__u32 weight = n_every && *n_every > 1 ? *n_every : 1;
	if (weight > 1) {
		// A fault is no system call: its page picks it.
		__u32 salt = op == OP_FAULT ? (__u32)(off >> 12) : (__u32)seq;
		__u32 h = (salt + (__u32)id * 0x9E3779B1u) * 0x85EBCA6Bu;
		if ((h >> 8) % weight)
			return 0;
	}
	struct key k = { .dev = dev, .pad = 0, .ino = inode->i_ino };
	__u64 *file = map_lookup(&watched, &k);
	if (!file)
		return 0;
	struct sample *s = ringbuf_reserve(&samples, sizeof(*s), 0);
	if (!s) {
		__u64 *n = map_lookup(&lost, &zero);
		if (n)
			*n += 1;
		return 0;
	}
	s->file = *file;
	s->off = off;
	s->len = len > 0xffffffffULL ? 0xffffffffU : (__u32)len;
	s->task = (__u32)id;
	s->seq = (__u32)seq;
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
	return emit(host, start, end - start, OP_READ);
}

SEC("tp_btf/mm_filemap_fault")
int fault(__u64 *ctx)
{
	struct address_space *m = (struct address_space *)ctx[0];
	return emit(m->host, ctx[1] << 12, 4096, OP_FAULT);
}

SEC("tp_btf/mm_filemap_add_to_page_cache")
int add_page(__u64 *ctx)
{
	struct folio *f = (struct folio *)ctx[0];
	struct address_space *m = f->mapping;
	if (!m)
		return 0;
	return emit(m->host, f->index << 12, 4096, OP_DEVICE);
}

SEC("tp_btf/ext4_da_write_begin")
int ext4_da_write(__u64 *ctx)
{
	return emit((struct inode *)ctx[0], ctx[1], (__u32)ctx[2], OP_WRITE);
}

SEC("tp_btf/ext4_write_begin")
int ext4_write(__u64 *ctx)
{
	return emit((struct inode *)ctx[0], ctx[1], (__u32)ctx[2], OP_WRITE);
}

SEC("tp_btf/xfs_file_buffered_write")
int xfs_write(__u64 *ctx)
{
	struct kiocb *k = (struct kiocb *)ctx[0];
	struct iov_iter *it = (struct iov_iter *)ctx[1];
	return emit(k->ki_filp->f_inode, k->ki_pos, it->count, OP_WRITE);
}

SEC("tp_btf/iomap_dio_rw_begin")
int dio(__u64 *ctx)
{
	struct kiocb *k = (struct kiocb *)ctx[0];
	struct iov_iter *it = (struct iov_iter *)ctx[1];
	return emit(k->ki_filp->f_inode, k->ki_pos, it->count, it->data_source ? OP_DIO_WRITE : OP_DIO_READ);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
