/*
 * guest-io: the exact O_DIRECT workloads the VM scenarios need, in one small
 * static binary (fio would drag ~80 MB of libraries into the initramfs).
 *
 *   guest-io write  DEV OFFSET SIZE COUNT   COUNT sequential pwrites of SIZE bytes
 *   guest-io aio    DEV OFFSET SIZE COUNT   COUNT adjacent writes in ONE io_submit
 *                                           (plugged together: merge candidates),
 *                                           each from its own page
 *   guest-io aiorev DEV OFFSET SIZE COUNT   the same, submitted from the highest
 *                                           offset down (front-merge candidates)
 *   guest-io hugewrite DEV OFFSET SIZE COUNT as write, from one transparent huge
 *                                           page (SIZE up to 2 MiB): physically
 *                                           contiguous, so the segment limit never
 *                                           splits it, whatever the memory layout
 *   guest-io writev DEV OFFSET SEG NSEGS [N] N (default 1) pwritevs, one after the
 *                                           other, of NSEGS iovecs of SEG bytes,
 *                                           each in its own page (gaps for a
 *                                           virt boundary)
 *   guest-io atomic DEV OFFSET SIZE COUNT  COUNT sequential pwritev2(RWF_ATOMIC)s of
 *                                           SIZE bytes; prints atomic_written=N and,
 *                                           on the first refusal, atomic_errno=NAME
 *   guest-io statx  DEV                    statx(STATX_WRITE_ATOMIC) of DEV: prints
 *                                           atomic_mask, atomic_unit_min, atomic_unit_max
 *   guest-io blktrace2 DEV OUT SECONDS     a blktrace protocol v2 capture (Linux 6.19+):
 *                                           BLKTRACESETUP2, BLKTRACESTART, then wait for
 *                                           SIGINT/SIGTERM or SECONDS, BLKTRACESTOP, copy
 *                                           each CPU's relay file to OUT.blktrace.CPU
 *                                           (blktrace's naming), BLKTRACETEARDOWN.
 *                                           Prints key=value lines (blktrace2_setup=ok or
 *                                           refused, blktrace2_errno, _started, _bytes,
 *                                           _dropped); a refused setup is never retried
 *                                           with BLKTRACESETUP: exit 3.
 *
 * OFFSET and sizes are bytes. Exit status 0 only if every byte was written.
 * The build host's headers may predate atomic writes (Linux 6.11) and
 * BLKTRACESETUP2 (6.19), so their constants and structures are spelled out
 * from include/uapi/linux.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define PAGE 4096

/* include/uapi/linux/fs.h and stat.h (6.11): untorn writes. */
#define IO_RWF_ATOMIC 0x00000040
#define IO_STATX_WRITE_ATOMIC 0x00010000U
/* struct statx: stx_mask at 0x00, stx_atomic_write_unit_min/max at 0xa8/0xac. */
#define STATX_BYTES 256
#define STX_ATOMIC_UNIT_MIN 0xa8
#define STX_ATOMIC_UNIT_MAX 0xac

/*
 * include/uapi/linux/blktrace_api.h (6.19): struct blk_user_trace_setup2,
 * 192 bytes; include/uapi/linux/fs.h: BLKTRACESETUP2 _IOWR(0x12, 142, ...),
 * next to BLKTRACESTART/STOP/TEARDOWN _IO(0x12, 116/117/118). The kernel
 * refuses a non-zero `flags`, and sets `bt->version = 2`: its records are
 * struct blk_io_trace2 (magic version byte 0x08).
 */
struct trace_setup2 {
	char name[64];        /* output: the name under /sys/kernel/debug/block */
	uint64_t act_mask;    /* input */
	uint32_t buf_size;    /* input */
	uint32_t buf_nr;      /* input */
	uint64_t start_lba;
	uint64_t end_lba;
	uint32_t pid;
	uint32_t flags;       /* must be 0 */
	uint64_t reserved[11];
};
_Static_assert(sizeof(struct trace_setup2) == 192, "blk_user_trace_setup2 is 192 bytes");
#define IO_BLKTRACESETUP2 _IOWR(0x12, 142, struct trace_setup2)
#define IO_BLKTRACESTART _IO(0x12, 116)
#define IO_BLKTRACESTOP _IO(0x12, 117)
#define IO_BLKTRACETEARDOWN _IO(0x12, 118)

static unsigned long long number(const char *text)
{
	char *end = NULL;
	unsigned long long value = strtoull(text, &end, 0);
	if (end == text || *end != '\0') {
		fprintf(stderr, "guest-io: `%s` is not a number\n", text);
		exit(2);
	}
	return value;
}

/* Pages for `count` separate buffers of `size` bytes, each starting on its own page. */
static char *pages(size_t size, size_t count, size_t *stride)
{
	void *memory = NULL;
	*stride = (size + PAGE - 1) / PAGE * PAGE + PAGE; /* a page gap between buffers */
	if (posix_memalign(&memory, PAGE, *stride * count) != 0) {
		perror("guest-io: posix_memalign");
		exit(1);
	}
	memset(memory, 0x5a, *stride * count);
	return memory;
}

/* COUNT sequential pwrites of SIZE bytes from one buffer. */
static int sequential(int fd, char *buffer, off_t offset, size_t size, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		ssize_t done = pwrite(fd, buffer, size, offset + (off_t)(i * size));
		if (done != (ssize_t)size) {
			perror("guest-io: pwrite");
			return 1;
		}
	}
	return 0;
}

#define HUGE_PAGE (2u << 20)

/* A buffer inside one transparent huge page, if the kernel grants one. */
static char *huge_buffer(size_t size)
{
	if (size > HUGE_PAGE) {
		fprintf(stderr, "guest-io: hugewrite takes at most %u bytes\n", HUGE_PAGE);
		exit(2);
	}
	char *mapping = mmap(NULL, 2 * HUGE_PAGE, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mapping == MAP_FAILED) {
		perror("guest-io: mmap");
		exit(1);
	}
	char *aligned = (char *)(((uintptr_t)mapping + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
	if (madvise(aligned, HUGE_PAGE, MADV_HUGEPAGE) != 0)
		perror("guest-io: madvise(MADV_HUGEPAGE)");
	memset(aligned, 0x5a, HUGE_PAGE);
	/* Say so when the kernel gave small pages: then segments depend on the layout. */
	FILE *rollup = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	unsigned long huge_kb = 0;
	while (rollup && fgets(line, sizeof line, rollup))
		if (sscanf(line, "AnonHugePages: %lu kB", &huge_kb) == 1)
			break;
	if (rollup)
		fclose(rollup);
	if (huge_kb == 0)
		fprintf(stderr, "guest-io: no huge page for the buffer; segments follow the memory layout\n");
	return aligned;
}

static int batched(int fd, off_t offset, size_t size, size_t count, int descending)
{
	aio_context_t context = 0;
	size_t stride;
	char *buffers = pages(size, count, &stride);
	struct iocb *blocks = calloc(count, sizeof(*blocks));
	struct iocb **list = calloc(count, sizeof(*list));
	struct io_event *events = calloc(count, sizeof(*events));
	if (!blocks || !list || !events) {
		perror("guest-io: calloc");
		return 1;
	}
	if (syscall(SYS_io_setup, (unsigned)count, &context) != 0) {
		perror("guest-io: io_setup");
		return 1;
	}
	for (size_t i = 0; i < count; i++) {
		blocks[i].aio_fildes = (uint32_t)fd;
		blocks[i].aio_lio_opcode = IOCB_CMD_PWRITE;
		blocks[i].aio_buf = (uint64_t)(uintptr_t)(buffers + i * stride);
		blocks[i].aio_nbytes = size;
		size_t slot = descending ? count - 1 - i : i;
		blocks[i].aio_offset = offset + (int64_t)(slot * size);
		list[i] = &blocks[i];
	}
	long submitted = syscall(SYS_io_submit, context, (long)count, list);
	if (submitted != (long)count) {
		fprintf(stderr, "guest-io: io_submit took %ld of %zu: %s\n", submitted, count,
			strerror(errno));
		return 1;
	}
	long reaped = 0;
	while (reaped < (long)count) {
		long got = syscall(SYS_io_getevents, context, 1L, (long)count - reaped, events, NULL);
		if (got < 0) {
			perror("guest-io: io_getevents");
			return 1;
		}
		for (long i = 0; i < got; i++) {
			if (events[i].res != (int64_t)size) {
				fprintf(stderr, "guest-io: a write returned %lld\n", (long long)events[i].res);
				return 1;
			}
		}
		reaped += got;
	}
	syscall(SYS_io_destroy, context);
	return 0;
}

static int vectored(int fd, off_t offset, size_t segment, size_t segments, size_t repeat)
{
	size_t stride;
	char *buffers = pages(segment, segments, &stride);
	struct iovec *vectors = calloc(segments, sizeof(*vectors));
	if (!vectors) {
		perror("guest-io: calloc");
		return 1;
	}
	for (size_t i = 0; i < segments; i++) {
		vectors[i].iov_base = buffers + i * stride;
		vectors[i].iov_len = segment;
	}
	size_t bytes = segment * segments;
	for (size_t i = 0; i < repeat; i++) {
		ssize_t done = pwritev(fd, vectors, (int)segments, offset + (off_t)(i * bytes));
		if (done != (ssize_t)bytes) {
			perror("guest-io: pwritev");
			return 1;
		}
	}
	return 0;
}

static const char *errno_name(int error)
{
	switch (error) {
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EINVAL: return "EINVAL";
	case EIO: return "EIO";
	case ENOSPC: return "ENOSPC";
	case ENOTTY: return "ENOTTY";
	case EBUSY: return "EBUSY";
	case ENOENT: return "ENOENT";
	case EPERM: return "EPERM";
	default: return strerror(error);
	}
}

/* COUNT sequential untorn writes; the first refusal ends them, named. */
static int atomic_writes(int fd, off_t offset, size_t size, size_t count)
{
	size_t stride;
	struct iovec vector = { .iov_base = pages(size, 1, &stride), .iov_len = size };
	size_t written = 0;
	int status = 0;
	for (size_t i = 0; i < count; i++) {
		ssize_t done = pwritev2(fd, &vector, 1, offset + (off_t)(i * size), IO_RWF_ATOMIC);
		if (done != (ssize_t)size) {
			int error = done < 0 ? errno : EIO;
			printf("atomic_errno=%s\n", errno_name(error));
			fprintf(stderr, "guest-io: pwritev2(RWF_ATOMIC) of %zu bytes at %lld: %s\n",
				size, (long long)(offset + (off_t)(i * size)), strerror(error));
			status = 1;
			break;
		}
		written++;
	}
	printf("atomic_written=%zu\n", written);
	return status;
}

/* statx(STATX_WRITE_ATOMIC) of PATH, as key=value lines. */
static int atomic_statx(const char *path)
{
	unsigned char buffer[STATX_BYTES] __attribute__((aligned(8)));
	memset(buffer, 0, sizeof buffer);
	if (syscall(SYS_statx, AT_FDCWD, path, 0, IO_STATX_WRITE_ATOMIC, buffer) != 0) {
		fprintf(stderr, "guest-io: statx %s: %s\n", path, strerror(errno));
		return 1;
	}
	uint32_t mask, unit_min, unit_max;
	memcpy(&mask, buffer, sizeof mask);
	memcpy(&unit_min, buffer + STX_ATOMIC_UNIT_MIN, sizeof unit_min);
	memcpy(&unit_max, buffer + STX_ATOMIC_UNIT_MAX, sizeof unit_max);
	int reported = (mask & IO_STATX_WRITE_ATOMIC) != 0;
	printf("atomic_mask=%d\natomic_unit_min=%u\natomic_unit_max=%u\n", reported,
	       reported ? unit_min : 0, reported ? unit_max : 0);
	return 0;
}

static volatile sig_atomic_t stop_requested;

static void request_stop(int signal_number)
{
	(void)signal_number;
	stop_requested = 1;
}

/* Copies what the relay file at `from` holds to `to`; returns the bytes or -1. */
static long long copy_relay(const char *from, const char *to)
{
	int in = open(from, O_RDONLY);
	if (in < 0) {
		fprintf(stderr, "guest-io: cannot open %s: %s\n", from, strerror(errno));
		return -1;
	}
	int out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (out < 0) {
		fprintf(stderr, "guest-io: cannot create %s: %s\n", to, strerror(errno));
		close(in);
		return -1;
	}
	static char chunk[1 << 16];
	long long total = 0;
	for (;;) {
		ssize_t got = read(in, chunk, sizeof chunk);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			fprintf(stderr, "guest-io: read %s: %s\n", from, strerror(errno));
			total = -1;
			break;
		}
		if (got == 0)
			break;
		if (write(out, chunk, (size_t)got) != got) {
			fprintf(stderr, "guest-io: write %s: %s\n", to, strerror(errno));
			total = -1;
			break;
		}
		total += got;
	}
	close(in);
	close(out);
	return total;
}

/*
 * A blktrace protocol v2 capture of DEV into OUT.blktrace.CPU. The relay buffers are read
 * only once the trace is stopped (the stop flushes them): no record can be
 * read half-written, and `dropped` says whether the buffers (8 x 512 KiB per
 * CPU) were too small for the window.
 */
static int blktrace2(const char *device, const char *out, unsigned long long seconds)
{
	struct stat debugfs;
	if (stat("/sys/kernel/debug/block", &debugfs) != 0 &&
	    mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL) != 0 && errno != EBUSY) {
		fprintf(stderr, "guest-io: cannot mount debugfs: %s\n", strerror(errno));
		return 1;
	}
	int fd = open(device, O_RDONLY | O_NONBLOCK);
	if (fd < 0) {
		fprintf(stderr, "guest-io: cannot open %s: %s\n", device, strerror(errno));
		return 1;
	}
	struct trace_setup2 setup;
	memset(&setup, 0, sizeof setup);
	setup.act_mask = ~0ULL;
	setup.buf_size = 512 * 1024;
	setup.buf_nr = 8;
	if (ioctl(fd, IO_BLKTRACESETUP2, &setup) != 0) {
		int error = errno;
		printf("blktrace2_setup=refused\nblktrace2_errno=%s\n", errno_name(error));
		fflush(stdout);
		fprintf(stderr, "guest-io: BLKTRACESETUP2 on %s refused: %s (no fallback to BLKTRACESETUP)\n",
			device, strerror(error));
		close(fd);
		return 3;
	}
	char name[sizeof setup.name + 1];
	memcpy(name, setup.name, sizeof setup.name);
	name[sizeof setup.name] = '\0';
	printf("blktrace2_setup=ok\nblktrace2_name=%s\n", name);
	struct sigaction action;
	memset(&action, 0, sizeof action);
	action.sa_handler = request_stop;
	sigaction(SIGINT, &action, NULL);
	sigaction(SIGTERM, &action, NULL);
	int status = 0;
	if (ioctl(fd, IO_BLKTRACESTART) != 0) {
		fprintf(stderr, "guest-io: BLKTRACESTART: %s\n", strerror(errno));
		ioctl(fd, IO_BLKTRACETEARDOWN);
		close(fd);
		return 1;
	}
	printf("blktrace2_started=1\n");
	fflush(stdout);
	for (unsigned long long tenths = 0; !stop_requested && tenths < seconds * 10; tenths++)
		usleep(100000);
	if (ioctl(fd, IO_BLKTRACESTOP) != 0) {
		fprintf(stderr, "guest-io: BLKTRACESTOP: %s\n", strerror(errno));
		status = 1;
	}
	long cpus = sysconf(_SC_NPROCESSORS_CONF);
	long long bytes = 0;
	int files = 0;
	for (long cpu = 0; cpu < cpus; cpu++) {
		char from[256], to[512];
		snprintf(from, sizeof from, "/sys/kernel/debug/block/%s/trace%ld", name, cpu);
		if (access(from, F_OK) != 0)
			continue;
		snprintf(to, sizeof to, "%s.blktrace.%ld", out, cpu);
		long long copied = copy_relay(from, to);
		if (copied < 0) {
			status = 1;
			continue;
		}
		bytes += copied;
		files++;
	}
	char path[256], dropped[64] = "?";
	snprintf(path, sizeof path, "/sys/kernel/debug/block/%s/dropped", name);
	FILE *counter = fopen(path, "r");
	if (counter) {
		if (fgets(dropped, sizeof dropped, counter))
			dropped[strcspn(dropped, "\n")] = '\0';
		fclose(counter);
	}
	printf("blktrace2_files=%d\nblktrace2_bytes=%lld\nblktrace2_dropped=%s\n", files, bytes,
	       dropped);
	if (ioctl(fd, IO_BLKTRACETEARDOWN) != 0) {
		fprintf(stderr, "guest-io: BLKTRACETEARDOWN: %s\n", strerror(errno));
		status = 1;
	}
	close(fd);
	if (files == 0) {
		fprintf(stderr, "guest-io: no relay file under /sys/kernel/debug/block/%s\n", name);
		status = 1;
	}
	return status;
}

int main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "blktrace2") == 0)
		return blktrace2(argv[2], argv[3], number(argv[4]));
	if (argc == 3 && strcmp(argv[1], "statx") == 0)
		return atomic_statx(argv[2]);
	if (argc != 6 && !(argc == 7 && strcmp(argv[1], "writev") == 0)) {
		fprintf(stderr, "usage: guest-io write|hugewrite|aio|aiorev|writev|atomic DEV OFFSET SIZE COUNT [REPEAT]\n"
				"       guest-io statx DEV\n"
				"       guest-io blktrace2 DEV OUT SECONDS\n");
		return 2;
	}
	int fd = open(argv[2], O_WRONLY | O_DIRECT);
	if (fd < 0) {
		fprintf(stderr, "guest-io: cannot open %s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	off_t offset = (off_t)number(argv[3]);
	size_t size = (size_t)number(argv[4]);
	size_t count = (size_t)number(argv[5]);
	int status;
	size_t stride;
	if (strcmp(argv[1], "write") == 0)
		status = sequential(fd, pages(size, 1, &stride), offset, size, count);
	else if (strcmp(argv[1], "hugewrite") == 0)
		status = sequential(fd, huge_buffer(size), offset, size, count);
	else if (strcmp(argv[1], "aio") == 0)
		status = batched(fd, offset, size, count, 0);
	else if (strcmp(argv[1], "aiorev") == 0)
		status = batched(fd, offset, size, count, 1);
	else if (strcmp(argv[1], "atomic") == 0)
		status = atomic_writes(fd, offset, size, count);
	else if (strcmp(argv[1], "writev") == 0)
		status = vectored(fd, offset, size, count, argc == 7 ? (size_t)number(argv[6]) : 1);
	else {
		fprintf(stderr, "guest-io: unknown mode %s\n", argv[1]);
		return 2;
	}
	if (fsync(fd) != 0 && status == 0) {
		perror("guest-io: fsync");
		status = 1;
	}
	close(fd);
	return status;
}
