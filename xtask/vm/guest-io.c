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
 *
 * OFFSET and sizes are bytes. Exit status 0 only if every byte was written.
 * The build host's headers may predate atomic writes (Linux 6.11), so their
 * constants and statx's fields are spelled out from include/uapi/linux.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "statx") == 0)
		return atomic_statx(argv[2]);
	if (argc != 6 && !(argc == 7 && strcmp(argv[1], "writev") == 0)) {
		fprintf(stderr, "usage: guest-io write|hugewrite|aio|aiorev|writev|atomic DEV OFFSET SIZE COUNT [REPEAT]\n"
				"       guest-io statx DEV\n");
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
